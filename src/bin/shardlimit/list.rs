//! `list` and `show`: primitives one line each, or as JSON Lines.

use std::io::Write;
use std::process::ExitCode;

use futures::StreamExt;
use shardlimit::admin::{ScanEvent, Scanner};

use super::output::{AnyResult, header, info_json, row, with_progress};

/// `list`: every primitive matching the filters, streamed as the masters are walked; exit code 2 when a master could not be walked.
pub(crate) async fn list(
    scanner: Scanner,
    out: &mut impl Write,
    table: bool,
    kind: Option<String>,
    name: Option<String>,
    subject: Option<String>,
    json: bool,
) -> AnyResult<ExitCode> {
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
            ScanEvent::Limiter(info) if json => writeln!(out, "{}", info_json(&info))?,
            ScanEvent::Limiter(info) => row(out, table, &info)?,
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

/// `show`: every primitive of one subject, read from its slot.
pub(crate) async fn show(
    scanner: &Scanner,
    out: &mut impl Write,
    table: bool,
    subject: &str,
    json: bool,
) -> AnyResult<ExitCode> {
    let found = scanner.subject(subject).await?;
    if !json {
        header(out, table)?;
    }
    for info in &found {
        if json {
            writeln!(out, "{}", info_json(info))?;
        } else {
            row(out, table, info)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
