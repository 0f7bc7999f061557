//! `count`: primitives per master (by node id, with its address), kind and
//! name.

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
    for ((id, kind, name), n) in &report.counts {
        let node = report.masters.get(id).map_or("?", String::as_str);
        if json {
            writeln!(
                out,
                "{}",
                json!({"node_id": id, "node": node, "kind": kind, "name": name, "count": n})
            )?;
        } else {
            writeln!(out, "{id}\t{node}\t{kind}\t{name}\t{n}")?;
        }
    }
    if json {
        let incomplete: Vec<_> = report
            .incomplete
            .iter()
            .map(|(node, error)| json!({"node": node, "error": error}))
            .collect();
        writeln!(
            out,
            "{}",
            json!({"total": report.total(), "unrecognized": report.unrecognized, "incomplete": incomplete, "approximate": report.approximate})
        )?;
    } else {
        writeln!(out, "total\t{}", report.total())?;
        if report.unrecognized > 0 {
            writeln!(out, "unrecognized keys\t{}", report.unrecognized)?;
        }
    }
    out.flush()?;
    for (node, error) in &report.incomplete {
        eprintln!("{node}: scan incomplete, counts may be low: {error}");
    }
    for why in &report.approximate {
        eprintln!("approximate: {why}");
    }
    Ok(if report.incomplete.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
