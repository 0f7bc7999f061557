//! `count`: primitives per master, kind and name.

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;
use shardlimit::admin::Scanner;

use super::output::{AnyResult, with_progress};

/// `count`: exit code 2 when a master could not be walked.
pub(crate) async fn count(
    scanner: Scanner,
    out: &mut impl Write,
    json: bool,
) -> AnyResult<ExitCode> {
    let (scanner, bar) = with_progress(scanner);
    let report = scanner.count_limiters().await?;
    bar.finish_and_clear();
    for ((node, kind, name), n) in &report.counts {
        if json {
            writeln!(
                out,
                "{}",
                json!({"node": node, "kind": kind, "name": name, "count": n})
            )?;
        } else {
            writeln!(out, "{node}\t{kind}\t{name}\t{n}")?;
        }
    }
    if json {
        writeln!(
            out,
            "{}",
            json!({"total": report.total(), "unrecognized": report.unrecognized, "incomplete": report.incomplete})
        )?;
    } else {
        writeln!(out, "total\t{}", report.total())?;
        if report.unrecognized > 0 {
            writeln!(out, "unrecognized keys\t{}", report.unrecognized)?;
        }
    }
    out.flush()?;
    for node in &report.incomplete {
        eprintln!("{node}: scan incomplete");
    }
    Ok(if report.incomplete.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
