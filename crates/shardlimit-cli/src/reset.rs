//! `reset`: delete one subject's keys, with a dry run, a refusal for
//! anything in use unless forced, and a confirmation on a terminal.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use shardlimit::admin::{ResetPlan, Scanner};

use super::args::ResetArgs;
use super::output::{AnyResult, state};

/// `reset`: exit code 1 when refused or not confirmed.
pub(crate) async fn reset(
    scanner: &Scanner,
    out: &mut impl Write,
    args: ResetArgs,
) -> AnyResult<ExitCode> {
    let ResetArgs {
        subject,
        kind,
        name,
        dry_run,
        force,
        yes,
    } = args;
    let plan = scanner
        .plan_reset(&subject, kind.as_deref(), name.as_deref())
        .await?;
    if dry_run {
        for key in plan.keys() {
            writeln!(out, "would delete\t{}", String::from_utf8_lossy(key))?;
        }
        for info in plan.primitives() {
            writeln!(out, "state\t{} {}\t{}", info.kind, info.name, state(info))?;
        }
        for reason in plan.in_use() {
            writeln!(out, "in use (needs --force)\t{reason}")?;
        }
        writeln!(
            out,
            "{} keys of subject {subject:?}; nothing deleted (dry run)",
            plan.keys().len()
        )?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    if !force && !plan.in_use().is_empty() {
        for reason in plan.in_use() {
            eprintln!("in use: {reason}");
        }
        eprintln!(
            "refused: nothing deleted; --dry-run lists the keys, --force deletes them anyway"
        );
        return Ok(ExitCode::from(1));
    }
    if !yes && std::io::stdin().is_terminal() && !confirm(&subject, &plan)? {
        eprintln!("aborted: nothing deleted");
        return Ok(ExitCode::from(1));
    }
    let deleted = plan.execute(scanner, force).await?;
    writeln!(out, "deleted {deleted} keys of subject {subject:?}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Shows what a reset deletes and asks on stderr; true on `y` or `yes`.
fn confirm(subject: &str, plan: &ResetPlan) -> std::io::Result<bool> {
    let mut err = std::io::stderr().lock();
    for key in plan.keys() {
        writeln!(err, "will delete\t{}", String::from_utf8_lossy(key))?;
    }
    for reason in plan.in_use() {
        writeln!(err, "in use (forced)\t{reason}")?;
    }
    write!(
        err,
        "delete {} keys of subject {subject:?}? [y/N] ",
        plan.keys().len()
    )?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
