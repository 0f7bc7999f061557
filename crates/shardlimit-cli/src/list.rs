//! `list` and `show`: primitives one line each, or as JSON Lines.

use std::io::Write;
use std::process::ExitCode;

use futures::StreamExt;
use shardlimit::admin::{ScanEvent, Scanner};

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

/// `show`: every primitive of one subject, read from its slot, each rate
/// limiter with its headroom.
pub(crate) async fn show(
    scanner: &Scanner,
    out: &mut impl Write,
    table: bool,
    subject: &str,
    quotas: &QuotaArgs,
    json: bool,
) -> AnyResult<ExitCode> {
    let (found, catalog) = futures::join!(scanner.subject(subject), catalog(scanner, quotas));
    let found = found?;
    if !json {
        header(out, table)?;
    }
    for info in &found {
        if json {
            writeln!(out, "{}", info_json(info, &catalog))?;
        } else {
            row(out, table, info, &catalog)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
