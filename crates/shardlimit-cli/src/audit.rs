//! `audit`: keys without a TTL and keys that are not shardlimit's.

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;
use shardlimit::admin::Scanner;

use super::output::{AnyResult, with_progress};

/// `audit`: exit code 1 when anything is found.
pub(crate) async fn audit(
    scanner: Scanner,
    out: &mut impl Write,
    json: bool,
) -> AnyResult<ExitCode> {
    let (scanner, bar) = with_progress(scanner);
    let report = scanner.audit().await?;
    bar.finish_and_clear();
    for (key, node) in &report.immortal {
        let key = String::from_utf8_lossy(key);
        if json {
            writeln!(
                out,
                "{}",
                json!({"problem": "no_ttl", "key": key, "node": node})
            )?;
        } else {
            writeln!(out, "no TTL (never expires)\t{node}\t{key}")?;
        }
    }
    for (key, node) in &report.unrecognized {
        let key = String::from_utf8_lossy(key);
        if json {
            writeln!(
                out,
                "{}",
                json!({"problem": "unrecognized", "key": key, "node": node})
            )?;
        } else {
            writeln!(out, "not a shardlimit key\t{node}\t{key}")?;
        }
    }
    for (node, error) in &report.incomplete {
        if json {
            writeln!(
                out,
                "{}",
                json!({"problem": "incomplete", "node": node, "error": error})
            )?;
        } else {
            writeln!(out, "scan incomplete\t{node}\t{error}")?;
        }
    }
    for why in &report.approximate {
        if json {
            writeln!(out, "{}", json!({"problem": "approximate", "why": why}))?;
        } else {
            writeln!(out, "approximate\t{why}")?;
        }
    }
    if !json {
        writeln!(
            out,
            "{} keys scanned: {} without TTL, {} unrecognized",
            report.scanned,
            report.immortal.len(),
            report.unrecognized.len()
        )?;
    }
    out.flush()?;
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
