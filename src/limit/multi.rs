//! `MultiLimiter`: several limits on one subject, all or nothing.

use std::time::Duration;

use std::fmt;

use std::sync::Arc;

use super::decision::{Decision, MultiDecision};
use super::deny_cache::DenyCache;
use super::limiter::{RateLimiter, deadline_after, wait_for};
use super::script::{Invocation, LimitSpec, check_cost, fingerprint, max_cost};
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
    cache: Option<Arc<DenyCache<MultiDecision>>>,
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
        Ok(MultiLimiter {
            limiters,
            policy,
            cache: None,
        })
    }

    /// Keeps up to `max_entries` subjects' denials in this process, as
    /// [`RateLimiterBuilder::deny_cache`](crate::RateLimiterBuilder::deny_cache)
    /// does for one limiter: a denial is answered again, without Redis,
    /// until the longest wait of the limits that denied it, for requests of
    /// the same or a higher cost under the same quotas. A change to any of
    /// its limits for the subject (reset, unblock, reward, override) makes
    /// every process forget it. Errors if `max_entries` is 0.
    pub fn with_deny_cache(mut self, max_entries: u64) -> Result<Self> {
        if max_entries == 0 {
            return Err(Error::Config {
                field: "deny_cache",
                reason: "a deny cache needs room for at least one entry".into(),
            });
        }
        let limits = self
            .limiters
            .iter()
            .map(|l| {
                let spec = l.spec();
                (spec.id.kind().to_owned(), spec.id.name().to_owned())
            })
            .collect();
        let cluster = self.limiters[0].cluster();
        self.cache = Some(Arc::new(DenyCache::new(cluster, max_entries, limits)));
        Ok(self)
    }

    /// The limiters' current specs, read once per operation.
    fn specs(&self) -> Vec<Arc<LimitSpec>> {
        self.limiters.iter().map(RateLimiter::spec).collect()
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
        let specs = self.specs();
        max_cost(&specs.iter().map(|s| &**s).collect::<Vec<_>>())
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
    /// `cost`: the multi-limit script, three keys per limiter (its state, the
    /// subject's override and block) and their `ARGV`; see
    /// [`RateLimiter::invocation`].
    ///
    /// ```no_run
    /// # fn demo(api: shardlimit::MultiLimiter) -> shardlimit::Result<()> {
    /// let call = api.invocation("api-key:7f3a", 1)?;
    /// assert_eq!(call.keys.keys().len(), 3 * api.limiters().len());
    /// # Ok(()) }
    /// ```
    pub fn invocation(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<Invocation> {
        let specs = self.specs();
        let cluster = self.limiters[0].cluster();
        Invocation::new(
            cluster,
            &scripts::MULTI_LIMIT,
            &specs.iter().map(|s| &**s).collect::<Vec<_>>(),
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
        let owned = self.specs();
        let specs: Vec<&LimitSpec> = owned.iter().map(|s| &**s).collect();
        let cache = self.cache.as_deref().filter(|_| consume);
        let Some(cache) = cache else {
            return self.decide(subject, cost, consume, &specs).await;
        };
        if let Err(err) = check_cost(&specs, cost) {
            self.limiters.iter().for_each(|l| l.outcomes().error());
            return Err(err);
        }
        let print = fingerprint(&specs);
        if let Some(decision) = cache.lookup(subject, print, cost) {
            for (limiter, d) in self.limiters.iter().zip(&decision.decisions) {
                if !d.allowed {
                    limiter.outcomes().denied_cached();
                }
            }
            return Ok(decision);
        }
        let ticket = cache.ticket();
        let decision = self.decide(subject, cost, consume, &specs).await?;
        cache.offer(subject, print, cost, ticket, &decision);
        Ok(decision)
    }

    /// One script call for every limit, counted, with the policy applied
    /// to a failure.
    async fn decide(
        &self,
        subject: &[u8],
        cost: u32,
        consume: bool,
        specs: &[&LimitSpec],
    ) -> Result<MultiDecision> {
        let cluster = self.limiters[0].cluster();
        let script = &scripts::MULTI_LIMIT;
        let checked = match Invocation::new(cluster, script, specs, subject, cost, consume) {
            Ok(call) => call.run(cluster, specs).await,
            Err(err) => Err(err),
        };
        match checked {
            Ok((allowed, decisions)) => {
                if consume {
                    for (limiter, decision) in self.limiters.iter().zip(&decisions) {
                        let outcomes = limiter.outcomes();
                        if allowed {
                            outcomes.decided(true, decision.would_deny);
                        } else if !decision.allowed {
                            outcomes.denied();
                        } else if decision.would_deny {
                            outcomes.would_deny();
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
                        .map(|l| Decision::bypass(l.quota(), l.capacity(), reason))
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
