//! `override`: a subject's own quota for one rate limiter — set, read or
//! clear it — through the library (`RateLimiter::set_override`,
//! `subject_settings`, `clear_override`), so every process's checks see it
//! at once and their deny caches forget the subject.

use std::io::Write;
use std::num::NonZeroU32;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use shardlimit::limit::SubjectSettings;
use shardlimit::{Cluster, Quota, RateLimiter};

use super::output::{AnyResult, override_json};
use super::syntax::{self, LimiterRef, format_duration, format_quota};

/// `override set | get | clear`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum OverrideCommand {
    /// Give the subject its own quota for the limiter, in every process's
    /// checks, for --ttl (set it again to renew or change it). Prints the
    /// override as Redis then holds it.
    Set {
        #[command(flatten)]
        target: Target,
        /// <limit>/<period>[:burst=<n>] (a burst only for gcra), e.g.
        /// 100/1m or 10/1s:burst=20; period units d, h, m, s, ms.
        #[arg(value_parser = syntax::quota)]
        quota: Quota,
        /// How long the override lives: 1ms to 366d, e.g. 12h or 1d12h.
        #[arg(long, default_value = "30d", value_parser = syntax::override_ttl)]
        ttl: Duration,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The subject's override of the limiter (and block, if any) and its
    /// TTL.
    Get {
        #[command(flatten)]
        target: Target,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove the subject's override: the limiter's default quota applies
    /// again. A block stays.
    Clear {
        #[command(flatten)]
        target: Target,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Whose override of which limiter.
#[derive(clap::Args, Debug)]
pub(crate) struct Target {
    /// The subject, as the service passes it to the limiter (for a hashed
    /// subject, its `sha256:…` digest, as `list` shows it).
    subject: String,
    /// The rate limiter: <kind>:<name>, kind fw, slog, swc or gcra, e.g.
    /// gcra:api.
    #[arg(value_parser = syntax::limiter)]
    limiter: LimiterRef,
}

/// The default quota of the limiter `get` and `clear` build: never applied
/// and never written. Of the quota arguments, the adjust script's `read`
/// and `unoverride` use only the algorithm's kind
/// (src/scripts/limit_adjust.lua); a check, a penalty or a reward would
/// apply it, and this command makes none. tests/cli/cli.rs checks that the
/// subject's state is untouched.
const UNUSED_QUOTA: Quota = Quota::new(NonZeroU32::MIN, Duration::from_secs(1));

impl Target {
    /// The limiter, validated by the library with `quota` as its default
    /// (name, and the quota's bounds for the algorithm) before anything
    /// about the subject is sent.
    fn limiter(&self, cluster: &Cluster, quota: Quota) -> shardlimit::Result<RateLimiter> {
        RateLimiter::builder(cluster, &self.limiter.name, quota)
            .algorithm(self.limiter.algorithm)
            // Not the limiter's own quota: publishing it would add a bogus
            // spec of the limiter to the catalog.
            .publish_spec(false)
            .build()
    }
}

/// `override`: prints the subject's settings after the change.
pub(crate) async fn run(
    cluster: &Cluster,
    out: &mut impl Write,
    command: OverrideCommand,
) -> AnyResult<ExitCode> {
    let (target, json, settings) = match command {
        OverrideCommand::Set {
            target,
            quota,
            ttl,
            json,
        } => {
            // The given quota is the override, and the limiter's default
            // here: built with it, it is validated for the algorithm.
            let limiter = target.limiter(cluster, quota)?;
            let mut settings = limiter.set_override(&target.subject, quota, ttl).await?;
            // The script reads the TTL back with PTTL right after its SET:
            // a millisecond short when one turned in between (`1h29m59s999ms`
            // for `--ttl 1h30m`). What was set is what to confirm.
            if settings.override_quota == Some(quota) {
                settings.override_ttl = Some(ttl);
            }
            (target, json, settings)
        }
        OverrideCommand::Get { target, json } => {
            let limiter = target.limiter(cluster, UNUSED_QUOTA)?;
            let settings = limiter.subject_settings(&target.subject).await?;
            (target, json, settings)
        }
        OverrideCommand::Clear { target, json } => {
            let limiter = target.limiter(cluster, UNUSED_QUOTA)?;
            let settings = limiter.clear_override(&target.subject).await?;
            (target, json, settings)
        }
    };
    if json {
        writeln!(out, "{}", settings_json(&target, &settings))?;
    } else {
        write_settings(out, &target, &settings)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn settings_json(target: &Target, settings: &SubjectSettings) -> serde_json::Value {
    json!({
        "subject": target.subject,
        "limiter": target.limiter.to_string(),
        "kind": target.limiter.algorithm.kind(),
        "name": target.limiter.name,
        "override": override_json(settings),
        "blocked_for_ms": settings.blocked_for.map(|d| d.as_millis()),
    })
}

/// `override of gcra:api for "user:42": 600/1m, ttl 30d`, and a line for a
/// block.
fn write_settings(
    out: &mut impl Write,
    target: &Target,
    settings: &SubjectSettings,
) -> std::io::Result<()> {
    let (limiter, subject) = (&target.limiter, &target.subject);
    match &settings.override_quota {
        Some(quota) => {
            let ttl = match settings.override_ttl {
                Some(ttl) => format!("ttl {}", format_duration(ttl)),
                None => "no TTL (never expires)".to_owned(),
            };
            writeln!(
                out,
                "override of {limiter} for {subject:?}: {}, {ttl}",
                format_quota(quota)
            )?;
        }
        None => writeln!(
            out,
            "no override of {limiter} for {subject:?}: its default quota applies"
        )?,
    }
    if let Some(left) = settings.blocked_for {
        writeln!(
            out,
            "{subject:?} is blocked by {limiter} for {}",
            format_duration(left)
        )?;
    }
    Ok(())
}
