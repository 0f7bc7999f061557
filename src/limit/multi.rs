//! `MultiLimiter`: several limits on one subject, all or nothing.

use std::time::Duration;

use std::fmt;

use super::decision::{Decision, MultiDecision};
use super::limiter::{RateLimiter, deadline_after, wait_for};
use super::script::{Invocation, max_cost};
use crate::error::{Error, Result};
use crate::policy::FailurePolicy;
use crate::scripts;

/// Several [`RateLimiter`]s checked on one subject in **one script call**:
/// the request is admitted only if every limit admits it, and then consumed
/// from all of them; if any limit denies it, none is consumed.
///
/// This works on a cluster because every limiter keeps a subject's state in
/// that subject's hash slot. The limiters may use different algorithms.
///
/// Failure policy: fail-open only if **every** limiter is fail-open.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::num::NonZeroU32;
/// use shardlimit::{MultiLimiter, Quota, RateLimiter};
/// let nz = |n| NonZeroU32::new(n).unwrap();
/// let per_second = RateLimiter::builder(&cluster, "api-1s", Quota::per_second(nz(10))).build()?;
/// let per_hour = RateLimiter::builder(&cluster, "api-1h", Quota::per_hour(nz(1000))).build()?;
/// let api = MultiLimiter::new([per_second, per_hour])?;
/// let decision = api.check("api-key:7f3a").await?;
/// if !decision.allowed {
///     println!("retry in {:?}", decision.retry_after());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLimiter {
    limiters: Vec<RateLimiter>,
    policy: FailurePolicy,
}

impl MultiLimiter {
    /// Combines `limiters` (at least one; all built from the same
    /// [`Cluster`](crate::Cluster) handle or its clones; no two with the
    /// same algorithm and name).
    pub fn new(limiters: impl IntoIterator<Item = RateLimiter>) -> Result<Self> {
        let limiters: Vec<RateLimiter> = limiters.into_iter().collect();
        let first = limiters.first().ok_or_else(|| Error::Config {
            field: "limiters",
            reason: "a multi-limiter needs at least one limiter".into(),
        })?;
        for (i, limiter) in limiters.iter().enumerate() {
            if !limiter.cluster().same_connection(first.cluster()) {
                return Err(Error::Config {
                    field: "limiters",
                    reason: format!(
                        "limiter {:?} was built from another Cluster handle",
                        limiter.name()
                    ),
                });
            }
            if limiters[..i]
                .iter()
                .any(|other| other.spec().id == limiter.spec().id)
            {
                return Err(Error::Config {
                    field: "limiters",
                    reason: format!("limiter {:?} is given twice", limiter.name()),
                });
            }
        }
        let policy = if limiters
            .iter()
            .all(|l| l.failure_policy() == FailurePolicy::FailOpen)
        {
            FailurePolicy::FailOpen
        } else {
            FailurePolicy::FailClosed
        };
        Ok(MultiLimiter { limiters, policy })
    }

    /// The limiters, in order.
    #[must_use]
    pub fn limiters(&self) -> &[RateLimiter] {
        &self.limiters
    }

    /// The most one request may cost: the smallest capacity of the limits,
    /// and no more than their sliding logs' shared budget (see
    /// [`check_n`](Self::check_n)).
    ///
    /// ```no_run
    /// # fn demo(api: shardlimit::MultiLimiter) {
    /// let most = api.capacity();
    /// assert!(api.limiters().iter().all(|l| most <= l.capacity()));
    /// # }
    /// ```
    #[must_use]
    pub fn capacity(&self) -> u32 {
        let specs: Vec<_> = self.limiters.iter().map(RateLimiter::spec).collect();
        max_cost(&specs)
    }

    /// The combined failure policy.
    #[must_use]
    pub fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }

    /// Checks and, if every limit admits, consumes one unit from each.
    pub async fn check(&self, subject: impl AsRef<[u8]>) -> Result<MultiDecision> {
        self.run(subject.as_ref(), 1, true).await
    }

    /// Like [`check`](Self::check) for `cost` units. Errors with
    /// [`Error::InvalidCost`] before sending if any limit could never admit
    /// that cost, or if its sliding logs together would take more than
    /// [`Algorithm::SLIDING_LOG_MAX_LIMIT`](crate::Algorithm::SLIDING_LOG_MAX_LIMIT)
    /// members in one check (two sliding logs: at most 64 each), which keeps
    /// every check as short as the worst single-limit one.
    pub async fn check_n(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<MultiDecision> {
        self.run(subject.as_ref(), cost, true).await
    }

    /// What a one-unit request would get now; consumes nothing.
    pub async fn peek(&self, subject: impl AsRef<[u8]>) -> Result<MultiDecision> {
        self.run(subject.as_ref(), 1, false).await
    }

    /// Checks until admitted by every limit or until `max_wait` would be
    /// exceeded ([`Duration::MAX`]: however long it takes); see
    /// [`RateLimiter::until_ready`].
    pub async fn until_ready(
        &self,
        subject: impl AsRef<[u8]>,
        cost: u32,
        max_wait: Duration,
    ) -> Result<MultiDecision> {
        let subject = subject.as_ref();
        let deadline = deadline_after(max_wait);
        loop {
            let decision = self.run(subject, cost, true).await?;
            match wait_for(decision.binding(), deadline) {
                Some(wait) if !decision.allowed => tokio::time::sleep(wait).await,
                _ => return Ok(decision),
            }
        }
    }

    /// Exactly what [`check_n`](Self::check_n) sends for `subject` and
    /// `cost`: the multi-limit script, one key per limiter and their `ARGV`;
    /// see [`RateLimiter::invocation`].
    ///
    /// ```no_run
    /// # fn demo(api: shardlimit::MultiLimiter) -> shardlimit::Result<()> {
    /// let call = api.invocation("api-key:7f3a", 1)?;
    /// assert_eq!(call.keys.keys().len(), api.limiters().len());
    /// # Ok(()) }
    /// ```
    pub fn invocation(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<Invocation> {
        let specs: Vec<_> = self.limiters.iter().map(RateLimiter::spec).collect();
        let cluster = self.limiters[0].cluster();
        Invocation::new(
            cluster,
            &scripts::MULTI_LIMIT,
            &specs,
            subject.as_ref(),
            cost,
            true,
        )
    }

    #[tracing::instrument(name = "shardlimit.multi_check", level = "debug", skip_all,
        fields(kind = "multi", name = %Names(&self.limiters),
            consume = consume, slot, outcome, subject))]
    async fn run(&self, subject: &[u8], cost: u32, consume: bool) -> Result<MultiDecision> {
        crate::metrics::span_subject(subject);
        let specs: Vec<_> = self.limiters.iter().map(RateLimiter::spec).collect();
        let cluster = self.limiters[0].cluster();
        let script = &scripts::MULTI_LIMIT;
        let checked = match Invocation::new(cluster, script, &specs, subject, cost, consume) {
            Ok(call) => call.run(cluster, &specs).await,
            Err(err) => Err(err),
        };
        match checked {
            Ok((allowed, decisions)) => {
                if consume {
                    for (limiter, decision) in self.limiters.iter().zip(&decisions) {
                        if allowed {
                            limiter.outcomes().allowed();
                        } else if !decision.allowed {
                            limiter.outcomes().denied();
                        }
                    }
                }
                Ok(MultiDecision { allowed, decisions })
            }
            Err(err) => {
                // Every limiter sees the failure.
                let outcomes: Vec<_> = self.limiters.iter().map(RateLimiter::outcomes).collect();
                self.policy.apply(err, &outcomes, |reason| MultiDecision {
                    allowed: true,
                    decisions: self
                        .limiters
                        .iter()
                        .map(|l| Decision::bypass(l.capacity(), reason))
                        .collect(),
                })
            }
        }
    }
}

/// Names of a multi-limiter's limits joined by `+`, formatted only if a span
/// records them.
struct Names<'a>(&'a [RateLimiter]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limiter) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            f.write_str(limiter.name())?;
        }
        Ok(())
    }
}
