//! `top`: the subjects denied most in the last minutes, per limiter, from
//! every process's throttled report (`admin::throttled`).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use shardlimit::Cluster;
use shardlimit::admin::{self, Scanner, Throttled, ThrottledName, json};

use super::args::{DEFAULT_NAMESPACE, TopArgs};
use super::output::AnyResult;
use super::syntax::format_duration;

/// How often `--watch` reads again: the reports' publication interval.
const WATCH_EVERY: Duration = Duration::from_secs(5);

/// `top`: once, or every 5 s with `--watch` (until interrupted).
pub(crate) async fn top(
    cluster: &Cluster,
    out: &mut impl Write,
    args: TopArgs,
) -> AnyResult<ExitCode> {
    let clear = args.watch && !args.json && std::io::stdout().is_terminal();
    loop {
        let view = admin::throttled(cluster).await?;
        if clear {
            // Home and clear, as `watch` does.
            write!(out, "\x1b[H\x1b[2J")?;
        }
        if view.processes == 0 && !args.json {
            nothing(cluster, out, &args).await?;
        } else {
            print(out, &view, &args)?;
        }
        out.flush()?;
        if !args.watch {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

fn print(out: &mut impl Write, view: &Throttled, args: &TopArgs) -> std::io::Result<()> {
    let names: Vec<&ThrottledName> = view
        .names
        .iter()
        .filter(|n| args.name.as_ref().is_none_or(|want| &n.name == want))
        .filter(|n| args.kind.as_ref().is_none_or(|want| &n.kind == want))
        .collect();
    if args.json {
        for name in names {
            let mut value = json::throttled(name);
            if let Some(subjects) = value["subjects"].as_array_mut() {
                subjects.truncate(args.limit);
            }
            writeln!(out, "{value}")?;
        }
        return Ok(());
    }
    if names.is_empty() {
        writeln!(
            out,
            "no throttled report for {} ({} other limiters)",
            match (&args.name, &args.kind) {
                (Some(name), _) => name.clone(),
                (None, Some(kind)) => format!("kind {kind}"),
                (None, None) => "any limiter".to_owned(),
            },
            if view.processes == 1 {
                "1 process reports".to_owned()
            } else {
                format!("{} processes report", view.processes)
            }
        )?;
    }
    for name in names {
        let interval = format_duration(whole_seconds(name.interval));
        writeln!(
            out,
            "{} {}: allowed {:.1}/s, denied {:.1}/s, cached {:.1}/s, bypassed {:.1}/s over the last {interval}; {} denials in the last {} (window {}; {} process{})",
            name.kind,
            name.name,
            name.allowed_per_sec,
            name.denied_per_sec,
            name.cached_per_sec,
            name.bypassed_per_sec,
            name.denials,
            format_duration(whole_seconds(name.covered)),
            format_duration(name.window),
            name.processes,
            if name.processes == 1 { "" } else { "es" }
        )?;
        if name.subjects.is_empty() {
            writeln!(out, "  (no denials)")?;
            continue;
        }
        // The rate is over the last interval, not the window: labelled so.
        writeln!(
            out,
            "  {:>10} {:>8} {:>16}  SUBJECT",
            "DENIALS",
            "ERROR",
            format!("PER_SEC_LAST_{interval}")
        )?;
        for s in name.subjects.iter().take(args.limit) {
            writeln!(
                out,
                "  {:>10} {:>8} {:>16.2}  {}",
                s.denials,
                s.error,
                s.denials_per_sec,
                String::from_utf8_lossy(&s.subject)
            )?;
        }
    }
    Ok(())
}

/// No process reports under this namespace: says which namespace was
/// read, how to read another, and which have reports — the commonest
/// reason for an empty view is a service under another namespace.
async fn nothing(cluster: &Cluster, out: &mut impl Write, args: &TopArgs) -> std::io::Result<()> {
    let namespace = cluster.namespace();
    let default = if namespace == DEFAULT_NAMESPACE {
        " (the default)"
    } else {
        ""
    };
    writeln!(
        out,
        "no throttled report{} under namespace {namespace}{default}: no process of it denied anything in the last minutes",
        args.name
            .as_ref()
            .map_or(String::new(), |n| format!(" for {n}")),
    )?;
    // A hint, not the answer: a failure (no ACL for CLUSTER
    // GETKEYSINSLOT, say) is said, not fatal.
    let pass = "pass --namespace NS (or set SHARDLIMIT_NAMESPACE)";
    match Scanner::new(cluster).throttled_namespaces().await {
        Ok(all) => {
            let others: Vec<String> = all.into_iter().filter(|n| n != namespace).collect();
            if others.is_empty() {
                writeln!(
                    out,
                    "  services under another namespace? {pass}; no other namespace has reports now"
                )?;
            } else {
                writeln!(out, "  reports now under: {}; {pass}", others.join(", "))?;
            }
        }
        Err(err) => writeln!(
            out,
            "  services under another namespace? {pass} (which namespaces have reports could not be read: {err})"
        )?,
    }
    writeln!(
        out,
        "  rate limiters report by default; RateLimiterBuilder::report_throttled(false) turns it off"
    )
}

/// `d` to the nearest second (under half a second: as it is).
fn whole_seconds(d: Duration) -> Duration {
    if d < Duration::from_millis(500) {
        return d;
    }
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_millis() >= 500))
}
