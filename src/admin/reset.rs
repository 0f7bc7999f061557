//! Resetting one subject: what would be deleted, what is in use, and the
//! deletion itself. The check lives here, not in the CLI, so every front
//! end (the CLI, a web page) refuses the same things.

use std::fmt;

use super::info::LimiterInfo;
use super::scanner::Scanner;
use crate::cluster::{Transaction, TxCommand};
use crate::error::{Error, Result};
use crate::keys::{KeyId, KeySet};
use crate::limit::invalidation::{Invalidations, publish_to};
use crate::limit::{Algorithm, SubjectSettings};
use crate::usage::Usage;

/// What [`Scanner::reset`] would delete for one subject, and what stands in
/// its way: from [`Scanner::plan_reset`], carried out by
/// [`execute`](Self::execute).
///
/// Deleting a held lock lets a second holder in while the first still
/// works; deleting a lease limiter's set frees leases that are held; deleting a counter
/// with a value loses counted units (billable seconds, say); deleting a rate
/// limiter's keys also deletes the subject's override (a paid quota, say)
/// and lifts its block. Those are [`in_use`](Self::in_use) and need `force`
/// (a reset of the usage alone is [`RateLimiter::reset`](crate::RateLimiter::reset),
/// which keeps both).
///
/// ```no_run
/// # async fn demo(scanner: shardlimit::admin::Scanner) -> shardlimit::Result<()> {
/// let plan = scanner.plan_reset("user:42", None, None).await?;
/// for key in plan.keys() {
///     println!("would delete {}", String::from_utf8_lossy(key));
/// }
/// for reason in plan.in_use() {
///     println!("in use: {reason}");
/// }
/// let deleted = plan.execute(&scanner, false).await?; // refused if anything is in use
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a plan deletes nothing until it is executed"]
pub struct ResetPlan {
    keys: Vec<Vec<u8>>,
    primitives: Vec<LimiterInfo>,
    in_use: Vec<InUse>,
}

/// A primitive a reset would break, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InUse {
    /// Its kind (`lock`, `lease`, `counter`).
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its state.
    pub usage: Usage,
    /// A rate limiter's override and block for the subject, which the reset
    /// would delete.
    pub settings: SubjectSettings,
}

impl fmt::Display for InUse {
    /// `lock job is held`, `lease exports has 2 lease(s) held`, `counter billing
    /// holds 30`. The subject is left out: the caller named it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = (&self.kind, &self.name);
        let settings = &self.settings;
        if let Some(quota) = settings.override_quota {
            let ttl = settings
                .override_ttl
                .map_or_else(String::new, |t| format!(" for {} s more", t.as_secs()));
            return write!(
                f,
                "{kind} {name} has an override of {} per {:?}{ttl}, which the reset deletes",
                quota.limit(),
                quota.period()
            );
        }
        if let Some(left) = settings.blocked_for {
            return write!(
                f,
                "{kind} {name} is blocked for {} s more, which the reset lifts",
                left.as_secs()
            );
        }
        match &self.usage {
            Usage::Lock { .. } => write!(f, "{kind} {name} is held"),
            Usage::Lease { leases_held } => {
                write!(f, "{kind} {name} has {leases_held} lease(s) held")
            }
            Usage::Counter { value } => {
                write!(f, "{kind} {name} holds {value} (not drained)")
            }
            other => write!(f, "{kind} {name} is in use ({})", other.describe()),
        }
    }
}

/// Whether deleting the primitive in this state loses something (or a rate
/// limiter's override or block for the subject). A lease's
/// count includes expired leases not yet reclaimed (the scanner does not
/// read the server clock): it errs on the side of refusing.
fn in_use(info: &LimiterInfo) -> Option<InUse> {
    let busy = match info.usage {
        Usage::Lock { held, .. } => held,
        Usage::Lease { leases_held } => leases_held > 0,
        Usage::Counter { value } => value != 0,
        _ => false,
    };
    let settings = &info.settings;
    let kept = settings.override_quota.is_some() || settings.blocked_for.is_some();
    (busy || kept).then(|| InUse {
        kind: info.kind.clone(),
        name: info.name.clone(),
        usage: info.usage.clone(),
        settings: settings.clone(),
    })
}

impl ResetPlan {
    /// Exactly the keys [`execute`](Self::execute) deletes, sorted.
    #[must_use]
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// The primitives those keys hold, with their state.
    #[must_use]
    pub fn primitives(&self) -> &[LimiterInfo] {
        &self.primitives
    }

    /// The primitives in use: a held lock, a lease limiter with leases held,
    /// a counter with a non-zero value. Empty when the reset is harmless.
    #[must_use]
    pub fn in_use(&self) -> &[InUse] {
        &self.in_use
    }

    /// Deletes [`keys`](Self::keys) in one MULTI/EXEC on the subject's slot
    /// and returns how many were deleted (keys that expired meanwhile are
    /// not counted). Unless `force`, refuses with [`Error::ResetRefused`]
    /// (nothing deleted) when anything is [`in_use`](Self::in_use).
    ///
    /// The check and the deletion are not one atomic step: a lock taken
    /// after the plan was made is deleted too. Make the plan just before.
    pub async fn execute(self, scanner: &Scanner, force: bool) -> Result<u64> {
        if !force && !self.in_use.is_empty() {
            return Err(Error::ResetRefused {
                in_use: self.in_use.iter().map(ToString::to_string).collect(),
            });
        }
        if self.keys.is_empty() {
            return Ok(0);
        }
        let keys = KeySet::from_keys(self.keys)?;
        let cluster = scanner.cluster();
        let del = (0..keys.len()).fold(TxCommand::new("DEL"), |del, i| del.key(i));
        let mut tx = Transaction::new().command(del);
        // Every process's deny cache forgets the rate limiters reset here,
        // as after RateLimiter::reset: one message per limiter, in the same
        // transaction (the channel is in the keys' slot).
        let (publish, channel) = publish_to(cluster, keys.slot());
        let state_keys = self
            .primitives
            .iter()
            .filter(|info| Algorithm::from_kind(&info.kind).is_some())
            .map(|info| {
                let id = KeyId::new(&info.kind, &info.name)?;
                cluster.keys().key(&info.subject, &id)
            })
            .collect::<Result<Vec<_>>>()?;
        for key in &state_keys {
            tx = tx.command(TxCommand::new(publish).arg(&channel).arg(key));
        }
        let replies: Vec<redis::Value> = cluster.transaction(&keys, &tx).await?;
        let hub = Invalidations::of(cluster);
        for key in &state_keys {
            hub.key_changed(key);
        }
        match replies.first() {
            Some(redis::Value::Int(deleted)) => Ok(u64::try_from(*deleted).unwrap_or(0)),
            other => Err(Error::UnexpectedReply {
                op: "reset".into(),
                detail: format!("DEL replied {other:?}"),
            }),
        }
    }
}

impl Scanner {
    /// What [`reset`](Self::reset) of `subject` (all its keys, or only
    /// those of `kind` and/or `name`) would delete, with each primitive's
    /// state and what is in use. Reads only; see [`ResetPlan`].
    ///
    /// ```no_run
    /// # async fn demo(scanner: shardlimit::admin::Scanner) -> shardlimit::Result<()> {
    /// let plan = scanner.plan_reset("user:42", Some("lock"), None).await?;
    /// if plan.in_use().is_empty() {
    ///     plan.execute(&scanner, false).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn plan_reset(
        &self,
        subject: impl AsRef<[u8]>,
        kind: Option<&str>,
        name: Option<&str>,
    ) -> Result<ResetPlan> {
        let topology = self.cluster().topology().await?;
        let (keys, primitives) = self
            .subject_primitives(&topology, subject.as_ref(), kind, name)
            .await?;
        let in_use = primitives.iter().filter_map(in_use).collect();
        Ok(ResetPlan {
            keys,
            primitives,
            in_use,
        })
    }
}
