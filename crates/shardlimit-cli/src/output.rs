//! Output shared by the commands: the table and JSON forms of a
//! primitive, sizes in words, the scan progress bar.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use shardlimit::Algorithm;
use shardlimit::admin::{Catalog, LimiterInfo, Progress, Scanner, json};
use shardlimit::limit::SubjectSettings;

use super::syntax::{format_duration, format_quota};

/// What a command returns: any error is printed with its causes.
pub(crate) type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A progress bar on stderr (hidden unless stderr is a terminal), fed by
/// the scanner: keys scanned over the masters' DBSIZE.
pub(crate) fn with_progress(scanner: Scanner) -> (Scanner, ProgressBar) {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} scanned {pos}/{len} keys ({per_sec}) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let per_node = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
        String,
        Progress,
    >::new()));
    let feed = bar.clone();
    let scanner = scanner.on_progress(move |p| {
        let mut nodes = per_node
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes.insert(p.node.clone(), p.clone());
        feed.set_length(nodes.values().map(|p| p.dbsize.max(p.scanned)).sum());
        feed.set_position(nodes.values().map(|p| p.scanned).sum());
        let done = nodes.values().filter(|p| p.done).count();
        feed.set_message(format!("{done}/{} masters done", nodes.len()));
    });
    (scanner, bar)
}

const COLUMNS: [&str; 8] = [
    "KIND",
    "NAME",
    "SUBJECT",
    "SLOT",
    "NODE",
    "TTL",
    "REMAINING",
    "STATE",
];

pub(crate) fn header(out: &mut impl Write, table: bool) -> std::io::Result<()> {
    if table {
        let c = COLUMNS;
        writeln!(
            out,
            "{:<8} {:<16} {:<32} {:>5} {:<16} {:>10} {:<36} {}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        )
    } else {
        writeln!(out, "{}", COLUMNS.join("\t"))
    }
}

pub(crate) fn row(
    out: &mut impl Write,
    table: bool,
    info: &LimiterInfo,
    catalog: &Catalog,
) -> std::io::Result<()> {
    let ttl = match info.ttl {
        Some(ttl) => format!("{}ms", ttl.as_millis()),
        None => "NONE".to_owned(),
    };
    let subject = info.subject_lossy();
    let headroom = headroom(info, catalog);
    let state = state(info);
    if table {
        writeln!(
            out,
            "{:<8} {:<16} {:<32} {:>5} {:<16} {:>10} {:<36} {}",
            info.kind, info.name, subject, info.slot, info.node, ttl, headroom, state
        )
    } else {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            info.kind, info.name, subject, info.slot, info.node, ttl, headroom, state
        )
    }
}

/// A rate limiter's headroom, e.g. `0/60 remaining, at limit, full in
/// 12s300ms; 2 specs published`; `-` when its quota is not known (not
/// published, not given with `--quota`) or it is no rate limiter.
pub(crate) fn headroom(info: &LimiterInfo, catalog: &Catalog) -> String {
    let Some(headroom) = catalog.headroom(info) else {
        return "-".to_owned();
    };
    let mut text = headroom.describe();
    if !headroom.full_in.is_zero() && headroom.full_in != std::time::Duration::MAX {
        text.push_str(&format!(", full in {}", format_duration(headroom.full_in)));
    }
    if let Some(specs) = headroom.specs_published() {
        text.push_str(&format!("; {specs} specs published"));
    }
    text
}

/// The state, then a rate limiter's block and override for the subject:
/// `used 2; blocked for 9m59s; override 5/1h, ttl 29d23h59m`.
pub(crate) fn state(info: &LimiterInfo) -> String {
    let mut text = info.usage.describe();
    let settings = &info.settings;
    if let Some(left) = settings.blocked_for {
        text.push_str(&format!("; blocked for {}", format_duration(left)));
    }
    if let Some(quota) = &settings.override_quota {
        text.push_str(&format!("; override {}", format_quota(quota)));
        // GCRA admits more than its limit in some window of one period
        // (a burst, then the rate): say how many (Algorithm::policy_limit).
        if info.kind == Algorithm::Gcra.kind() {
            text.push_str(&format!(
                " (at most {} in any {})",
                Algorithm::Gcra.policy_limit(quota),
                format_duration(quota.period())
            ));
        }
        if let Some(ttl) = settings.override_ttl {
            text.push_str(&format!(", ttl {}", format_duration(ttl)));
        }
    }
    text
}

/// A rate limiter's override for a subject as the library gives it (see
/// `shardlimit::admin::json::override_of`), with the quota in the syntax
/// the CLI takes: `{"quota": "5/1h", "limit": 5, "period_ms": 3600000,
/// "burst": 5, "ttl_ms": 86399000}`, or `null`.
pub(crate) fn override_json(settings: &SubjectSettings) -> Value {
    let mut value = json::override_of(settings);
    if let (Some(quota), Some(fields)) = (&settings.override_quota, value.as_object_mut()) {
        fields.insert("quota".to_owned(), Value::from(format_quota(quota)));
    }
    value
}

/// One primitive as the library gives it (`shardlimit::admin::json`), with
/// its headroom (`remaining`, `limit`, `at_limit`, `full_in_ms`, …; `null`
/// when the quota is not known), its override as [`override_json`] writes
/// it.
pub(crate) fn info_json(info: &LimiterInfo, catalog: &Catalog) -> Value {
    let mut value = json::limiter(info);
    json::add_headroom(&mut value, catalog.headroom(info).as_ref());
    value["override"] = override_json(&info.settings);
    value
}

pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
