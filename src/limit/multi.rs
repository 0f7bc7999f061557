//! `MultiLimiter`: several limits on one subject, all or nothing.

use std::sync::Arc;
use std::time::Duration;

use super::check::Pipeline;
use super::decision::MultiDecision;
use super::limiter::RateLimiter;
use super::script::{Invocation, LimitSpec, max_cost};
#[cfg(feature = "deny-cache")]
use super::stages::deny_cache::DenyCache;
use crate::error::{Error, Result};
use crate::policy::FailurePolicy;

/// Several [`RateLimiter`]s checked on one subject in **one script call**:
/// the request is admitted only if every limit admits it, and then consumed
/// from all of them; if any limit denies it, none is consumed.
///
/// This works on a cluster because every limiter keeps a subject's state in
/// that subject's hash slot. The limiters may use different algorithms.
///
/// Failure policy: fail-closed if any limiter is; else
/// [local](FailurePolicy::Local) if any is (the others, fail-open, admit);
/// fail-open if every limiter is.
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
    #[cfg(feature = "deny-cache")]
    cache: Option<Arc<DenyCache>>,
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
        // Closed if any limit is; else local if any is (each limit then
        // decides locally or, fail-open, admits); else open.
        let policies = || limiters.iter().map(RateLimiter::failure_policy);
        let policy = policies()
            .find(|p| *p == FailurePolicy::FailClosed)
            .or_else(|| policies().find(|p| matches!(p, FailurePolicy::Local { .. })))
            .unwrap_or(FailurePolicy::FailOpen);
        Ok(MultiLimiter {
            limiters,
            policy,
            #[cfg(feature = "deny-cache")]
            cache: None,
        })
    }

    /// Keeps up to `max_entries` subjects' denials in this process, as
    /// [`RateLimiterBuilder::deny_cache`](crate::limit::RateLimiterBuilder::deny_cache)
    /// does for one limiter: a denial is answered again, without Redis,
    /// until the longest wait of the limits that denied it, for requests of
    /// the same or a higher cost under the same quotas. A change to any of
    /// its limits for the subject (reset, unblock, reward, override) makes
    /// every process forget it. Errors if `max_entries` is 0.
    #[cfg(feature = "deny-cache")]
    #[cfg_attr(docsrs, doc(cfg(feature = "deny-cache")))]
    pub fn with_deny_cache(mut self, max_entries: u64) -> Result<Self> {
        let max_entries = super::stages::deny_cache::room(max_entries)?;
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
        max_cost(&self.specs())
    }

    /// The combined failure policy.
    #[must_use]
    pub fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }

    /// Checks and, if every limit admits, consumes one unit from each.
    pub async fn check(&self, subject: impl AsRef<[u8]>) -> Result<MultiDecision> {
        self.pipeline().run(subject.as_ref(), 1, true).await
    }

    /// Like [`check`](Self::check) for `cost` units. Errors with
    /// [`Error::InvalidCost`] before sending if any limit could never admit
    /// that cost, or if its sliding logs together would take more than
    /// [`Algorithm::SLIDING_LOG_MAX_LIMIT`](crate::Algorithm::SLIDING_LOG_MAX_LIMIT)
    /// members in one check (two sliding logs: at most 64 each), which keeps
    /// every check as short as the worst single-limit one.
    pub async fn check_n(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<MultiDecision> {
        self.pipeline().run(subject.as_ref(), cost, true).await
    }

    /// What a one-unit request would get now; consumes nothing.
    pub async fn peek(&self, subject: impl AsRef<[u8]>) -> Result<MultiDecision> {
        self.pipeline().run(subject.as_ref(), 1, false).await
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
        self.pipeline()
            .until_ready(subject.as_ref(), cost, max_wait)
            .await
    }

    /// Exactly what [`check_n`](Self::check_n) sends for `subject` and
    /// `cost`: the multi-limit script, three keys per limiter (its state, the
    /// subject's override and block) and their `ARGV` — or, for a
    /// multi-limiter made from one limiter, that limiter's own check; see
    /// [`RateLimiter::invocation`].
    ///
    /// ```no_run
    /// # fn demo(api: shardlimit::MultiLimiter) -> shardlimit::Result<()> {
    /// let call = api.invocation("api-key:7f3a", 1)?;
    /// assert_eq!(call.keys.keys().len(), 3 * api.limiters().len());
    /// # Ok(()) }
    /// ```
    pub fn invocation(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<Invocation> {
        self.pipeline().invocation(subject.as_ref(), cost)
    }

    /// The one check pipeline over these limits.
    pub(crate) fn pipeline(&self) -> Pipeline<'_> {
        Pipeline {
            limiters: &self.limiters,
            policy: self.policy,
            #[cfg(feature = "deny-cache")]
            cache: self.cache.as_deref(),
        }
    }

    /// Checks many `(subject, cost)` requests at once, each against every
    /// limit, as [`RateLimiter::check_many`] does for one limit: one
    /// pipeline per master, each request its own all-or-nothing script, the
    /// results in the order of `requests`.
    pub async fn check_many<S: AsRef<[u8]>>(
        &self,
        requests: &[(S, u32)],
    ) -> Vec<Result<MultiDecision>> {
        self.pipeline().run_many(requests).await
    }
}

/// A limiter alone, checked exactly as [`RateLimiter::check_n`] checks it:
/// its own script, its failure policy and its deny cache (shared).
impl From<RateLimiter> for MultiLimiter {
    fn from(limiter: RateLimiter) -> Self {
        MultiLimiter {
            policy: limiter.failure_policy(),
            #[cfg(feature = "deny-cache")]
            cache: limiter.deny_cache().cloned(),
            limiters: vec![limiter],
        }
    }
}
