//! `list` and `show`: primitives one line each, or as JSON Lines.

use std::io::Write;
use std::process::ExitCode;

use futures::StreamExt;
use shardlimit::admin::{Lookup, ScanEvent, Scanner};

use super::output::{AnyResult, header, info_json, row, with_progress};
use super::quotas::{QuotaArgs, catalog};

/// `list`'s filters.
pub(crate) struct Filters {
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subject: Option<String>,
}

/// `list`: every primitive matching the filters, streamed as the masters
/// are walked, each rate limiter with its headroom under the catalog's (or
/// `--quota`'s) quota; exit code 2 when a master could not be walked.
pub(crate) async fn list(
    scanner: Scanner,
    out: &mut impl Write,
    table: bool,
    Filters {
        kind,
        name,
        subject,
    }: Filters,
    quotas: &QuotaArgs,
    json: bool,
) -> AnyResult<ExitCode> {
    let catalog = catalog(&scanner, quotas).await;
    let mut scanner = scanner;
    if let Some(kind) = kind {
        scanner = scanner.kind(kind);
    }
    if let Some(name) = name {
        scanner = scanner.name(name);
    }
    if let Some(glob) = subject {
        scanner = scanner.subject_glob(glob);
    }
    let (scanner, bar) = with_progress(scanner);
    let mut events = Box::pin(scanner.scan());
    let mut incomplete = false;
    if !json {
        header(out, table)?;
    }
    while let Some(event) = events.next().await {
        match event {
            ScanEvent::Limiter(info) if json => {
                writeln!(out, "{}", info_json(&info, &catalog))?;
            }
            ScanEvent::Limiter(info) => row(out, table, &info, &catalog)?,
            ScanEvent::Unrecognized { key, node } => {
                bar.suspend(|| {
                    eprintln!(
                        "not a shardlimit key on {node}: {}",
                        String::from_utf8_lossy(&key)
                    )
                });
            }
            ScanEvent::Incomplete { node, error } => {
                incomplete = true;
                bar.suspend(|| eprintln!("{node}: scan incomplete: {error}"));
            }
            other => bar.suspend(|| eprintln!("{other:?}")),
        }
    }
    bar.finish_and_clear();
    out.flush()?;
    Ok(if incomplete {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// `show`: every primitive of one subject, read from its slot, and of its
/// keyed digest, read from that one's (what a credential such as an API
/// key is limited under), each rate limiter with its headroom. Rows are
/// the same as `list`'s; what was hashed is said on stderr, and in JSON by
/// each row's `found_by` (`subject` or `keyed_digest`).
pub(crate) async fn show(
    scanner: &Scanner,
    out: &mut impl Write,
    table: bool,
    subject: &str,
    quotas: &QuotaArgs,
    json: bool,
) -> AnyResult<ExitCode> {
    let (found, catalog) = futures::join!(scanner.lookup(subject), catalog(scanner, quotas));
    let found = found?;
    if !json {
        header(out, table)?;
    }
    let rows = found
        .typed
        .iter()
        .map(|info| ("subject", info))
        .chain(found.hashed.iter().map(|info| ("keyed_digest", info)));
    for (found_by, info) in rows {
        if json {
            let mut value = info_json(info, &catalog);
            value["found_by"] = found_by.into();
            writeln!(out, "{value}")?;
        } else {
            row(out, table, info, &catalog)?;
        }
    }
    out.flush()?;
    if let Some(note) = hashed_note(&found) {
        eprintln!("{note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// What `show` says on stderr about the hashed subject it also read: which
/// rows are its, or that neither it nor the subject as typed has any.
/// Nothing when only the subject as typed has rows (a user id, an IP).
fn hashed_note(found: &Lookup) -> Option<String> {
    let digest = found.digest.as_ref()?;
    let key = found.describe_key();
    if !found.hashed.is_empty() {
        Some(format!(
            "hashed subject: {digest} is the subject given, hashed with {key} ({} of the rows \
             above); credentials such as API keys are limited under their keyed digest, never \
             stored raw",
            found.hashed.len()
        ))
    } else if found.typed.is_empty() {
        let hint = if found.with_secret {
            "the same subject secret as the services"
        } else {
            "the services' subject secret, if they hash credentials with one"
        };
        Some(format!(
            "nothing under the subject given, nor under its keyed digest {digest}, hashed with \
             {key}; give {hint} (SHARDLIMIT_SUBJECT_SECRET or --subject-secret-file)"
        ))
    } else {
        None
    }
}
