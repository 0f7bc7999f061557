//! `RateLimiter`: one quota, one algorithm, applied per subject.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::algorithm::Algorithm;
use super::decision::{Decision, MultiDecision};
use super::deny_cache::DenyCache;
use super::local::LocalLimits;
use super::quota::Quota;
use super::script::{Invocation, LimitSpec};
use super::slice_table::SliceTable;
use super::slices::Slices;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::outcomes::Outcomes;
use crate::policy::FailurePolicy;
use crate::primitive::Core;

/// A rate limiter definition: a name, a [`Quota`], an [`Algorithm`] and a
/// [`FailurePolicy`], built once and checked per subject. Cheap to clone.
///
/// Every subject's state lives in one key in the subject's hash slot
/// (`<namespace>:{<subject>}:<kind>:<name>`), so millions of subjects spread
/// over the cluster and each check is one script on one node.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::num::NonZeroU32;
/// use shardlimit::{Algorithm, FailurePolicy, Quota, RateLimiter};
///
/// let api = RateLimiter::builder(&cluster, "api", Quota::per_minute(NonZeroU32::new(60).unwrap()))
///     .algorithm(Algorithm::SlidingLog)
///     .failure_policy(FailurePolicy::FailOpen)
///     .build()?;
/// let decision = api.check("user:42").await?;
/// if !decision.allowed {
///     println!("retry in {:?}", decision.retry_after);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    core: Core,
    /// Swapped whole by [`RateLimiter::set_quota`] and
    /// [`RateLimiter::set_shadow`]; a check reads it once.
    spec: ArcSwap<LimitSpec>,
    policy: FailurePolicy,
    /// Shared with the [`MultiLimiter`](super::MultiLimiter) made from
    /// this limiter alone, which checks exactly as it does.
    cache: Option<Arc<DenyCache>>,
    /// The local limiters of [`FailurePolicy::Local`].
    local: Option<LocalLimits>,
    /// The quota slices this process holds, with
    /// [`RateLimiterBuilder::slices`].
    slices: Option<Arc<SliceTable>>,
}

/// Builds a [`RateLimiter`]; [`build`](Self::build) validates.
#[derive(Debug)]
#[must_use]
pub struct RateLimiterBuilder {
    cluster: Cluster,
    name: String,
    quota: Quota,
    algorithm: Algorithm,
    policy: FailurePolicy,
    shadow: bool,
    deny_cache: Option<u64>,
    slices: Option<Slices>,
}

impl RateLimiterBuilder {
    /// The algorithm. Default [`Algorithm::Gcra`].
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// What to do when Redis cannot answer: return the error, admit, or
    /// decide from this process's share of the quota
    /// ([`FailurePolicy::Local`]; its share must be a valid quota, checked
    /// by [`build`](Self::build) and [`RateLimiter::set_quota`]). Default
    /// [`FailurePolicy::FailClosed`].
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Shadow mode: every check is computed by Redis and counted (a denial
    /// as [`would_deny`](crate::cluster::PrimitiveStats::would_deny), and on the
    /// decision as [`Decision::would_deny`]), and nothing is refused:
    /// `allowed` is always `true`. What a shadow limiter admits is counted
    /// as usual, so its state is what the limiter would have if it were
    /// enforced; use it to try a new limit on live traffic. Default off;
    /// see also [`RateLimiter::set_shadow`].
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Keeps up to `max_entries` subjects' denials in this process and
    /// answers the same or costlier requests from them, without Redis,
    /// until the earliest time Redis could admit them (the denial's
    /// `retry_after`, counted from when the check was sent). Such decisions
    /// have [`Decision::cached`] set and are counted as
    /// [`denied_cached`](crate::cluster::PrimitiveStats::denied_cached).
    ///
    /// It never denies what Redis would admit: see
    /// [the deny cache](crate::limit#deny-cache) for the argument per
    /// algorithm, and [its scope](crate::limit#what-never-covers) (a
    /// forward step of the server's clock; one delivery latency of a change
    /// made elsewhere; a subscription broken and not yet noticed, at most
    /// two seconds for a hung server). Resets, unblocks, rewards and
    /// override changes made anywhere are published on the subject's slot
    /// and forgotten by every process's cache; an entry also ends when the
    /// subject's override or block expires. Peeks always ask Redis.
    /// Default: no cache; a limit of 0 is a configuration error.
    pub fn deny_cache(mut self, max_entries: u64) -> Self {
        self.deny_cache = Some(max_entries);
        self
    }

    /// Quota slices, for a subject hotter than one master can decide (one
    /// subject's limit lives in one slot, so one master decides all its
    /// checks): [`check`](RateLimiter::check) and
    /// [`check_n`](RateLimiter::check_n) take a slice of the subject's
    /// quota from Redis in one script call — sized from this process's
    /// recent rate for the subject, at most half the declared bound —
    /// decide from it locally, and give back what they did not use when
    /// the slice ends (one call, combined with the next take). The slices
    /// of a subject held by all processes never sum past the declared
    /// bound, `floor(limit × fraction)` units, tracked in Redis in the
    /// subject's slot: at most what an exact check admits **plus the
    /// bound** is admitted in any interval. When no slice can be had (the
    /// bound is taken, the subject blocked or overridden smaller) the check
    /// is exact; when the limit is spent the request is denied until the
    /// earliest time Redis could admit it ([`sliced`](Decision#structfield.sliced) set).
    ///
    /// Only [`Algorithm::Gcra`] (the default): its state is one number, so
    /// a slice of `n` is `n` cells consumed and giving back `n` is a
    /// [`reward`](RateLimiter::reward), exact whenever it happens. A
    /// window's or a log's units belong to a time: given back later they
    /// would free what another window or time counted. [`build`](Self::build)
    /// refuses slices for other algorithms, and in shadow mode. Resets,
    /// blocks and override changes revoke every process's slice of the
    /// subject through the deny caches' invalidation channel (within one
    /// delivery latency); the failure policy applies to the take. A
    /// process that dies holding a slice loses at most that slice, which
    /// Redis forgets after twice its lifetime. Peeks, `check_many`,
    /// `until_ready` and multi-limiters stay exact. The argument for the
    /// bound and the measurements: docs/hot-subjects.md.
    /// Default: no slices.
    pub fn slices(mut self, slices: Slices) -> Self {
        self.slices = Some(slices);
        self
    }

    /// Validates the name (`[A-Za-z0-9_.-]{1,64}`) and the quota for the
    /// algorithm (see [`Quota#bounds`](Quota#bounds): period whole
    /// milliseconds, 1 ms to 366 days; limit up to
    /// [`Algorithm::max_limit`]; a burst only for GCRA, refilling within 366
    /// days). Sends nothing; a quota out of bounds is an
    /// [`Error::Config`](crate::Error::Config) naming the field.
    pub fn build(self) -> Result<RateLimiter> {
        let spec = LimitSpec::new(&self.name, self.algorithm, self.quota, self.shadow)?;
        let cache = match self.deny_cache {
            None => None,
            Some(0) => {
                return Err(Error::Config {
                    field: "deny_cache",
                    reason: "a deny cache needs room for at least one entry".into(),
                });
            }
            Some(max) => Some(Arc::new(DenyCache::new(
                &self.cluster,
                max,
                vec![(spec.id.kind().to_owned(), spec.id.name().to_owned())],
            ))),
        };
        let local = match self.policy {
            FailurePolicy::Local { instances } => {
                let local = LocalLimits::new(instances);
                local.validate(&spec)?;
                Some(local)
            }
            _ => None,
        };
        let slices = match self.slices {
            Some(slices) => {
                slices.validate(&spec)?;
                Some(SliceTable::new(&self.cluster, &spec, slices)?)
            }
            None => None,
        };
        Ok(RateLimiter {
            inner: Arc::new(Inner {
                core: Core::new(self.cluster, spec.id.clone()),
                spec: ArcSwap::from_pointee(spec),
                policy: self.policy,
                cache,
                local,
                slices,
            }),
        })
    }
}

impl RateLimiter {
    /// A builder for a limiter named `name` enforcing `quota`.
    pub fn builder(cluster: &Cluster, name: impl Into<String>, quota: Quota) -> RateLimiterBuilder {
        RateLimiterBuilder {
            cluster: cluster.clone(),
            name: name.into(),
            quota,
            algorithm: Algorithm::default(),
            policy: FailurePolicy::default(),
            shadow: false,
            deny_cache: None,
            slices: None,
        }
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.inner.core.name()
    }

    /// Its default quota (a subject's override may replace it; see
    /// [`set_override`](Self::set_override)).
    #[must_use]
    pub fn quota(&self) -> Quota {
        self.inner.spec.load().quota
    }

    /// Its algorithm.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.inner.spec.load().algorithm
    }

    /// Whether it is in shadow mode (see
    /// [`RateLimiterBuilder::shadow`]).
    #[must_use]
    pub fn is_shadow(&self) -> bool {
        self.inner.spec.load().shadow
    }

    /// Changes the default quota of this live limiter, for this handle and
    /// its clones (and the multi-limiters holding them): the next check uses
    /// it. Validated like [`RateLimiterBuilder::build`]; nothing is sent.
    /// Other processes keep their own quota until they change it too.
    ///
    /// What a subject's state means under the new quota, per algorithm:
    /// a **fixed window** keeps the units used in the current window and
    /// compares them with the new limit (a new period starts windows on the
    /// new grid at once; the old count is dropped at the first window
    /// boundary of either grid). A **sliding log** keeps its entries; the
    /// new limit and period apply to them at once. A **sliding window
    /// counter** keeps its counts if the period is unchanged, and starts
    /// afresh if not (the counts belong to windows of the old length). A
    /// **GCRA** keeps its theoretical arrival time: the time already owed is
    /// owed under the new rate too, so a lower rate takes effect
    /// immediately and a higher one as soon as the debt is paid. The deny
    /// cache forgets every subject. A subject with an override keeps it.
    pub fn set_quota(&self, quota: Quota) -> Result<()> {
        let spec = self.inner.spec.load();
        let next = spec.with(quota, spec.shadow)?;
        if let Some(local) = &self.inner.local {
            local.validate(&next)?;
        }
        self.inner.spec.store(Arc::new(next));
        if let Some(cache) = &self.inner.cache {
            cache.clear();
        }
        if let Some(slices) = &self.inner.slices {
            slices.revoke_all();
        }
        Ok(())
    }

    /// Turns shadow mode on or off for this live limiter (see
    /// [`RateLimiterBuilder::shadow`]), for this handle and its clones (and
    /// the multi-limiters holding them): the next check uses it. Shadow
    /// mode never denies, so from then on no denial cached before is
    /// answered, by this limiter's deny cache (which forgets every subject)
    /// or a multi-limiter's.
    pub fn set_shadow(&self, shadow: bool) {
        let spec = self.inner.spec.load();
        if spec.shadow != shadow {
            // The same quota, already validated once. Its fingerprint
            // differs: a denial cached under the other mode, even by a
            // check still in flight, never answers a check under this one.
            if let Ok(next) = spec.with(spec.quota, shadow) {
                self.inner.spec.store(Arc::new(next));
            }
            if let Some(cache) = &self.inner.cache {
                cache.clear();
            }
            // Slices are for enforced limits: in shadow mode checks are
            // exact (the next take sees it).
            if let Some(slices) = &self.inner.slices {
                slices.revoke_all();
            }
        }
    }

    /// Its failure policy.
    #[must_use]
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.policy
    }

    /// The most one request may cost: the limit, or a GCRA's burst.
    #[must_use]
    pub fn capacity(&self) -> u32 {
        self.inner.spec.load().capacity
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        self.inner.core.cluster()
    }

    pub(crate) fn core(&self) -> &Core {
        &self.inner.core
    }

    /// The current spec, read once per operation.
    pub(crate) fn spec(&self) -> Arc<LimitSpec> {
        self.inner.spec.load_full()
    }

    pub(crate) fn outcomes(&self) -> &Outcomes {
        self.inner.core.outcomes()
    }

    /// The key this limiter keeps for `subject`.
    pub fn key(&self, subject: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.cluster()
            .keys()
            .key(subject.as_ref(), self.inner.core.id())
    }

    /// Checks and, if admitted, consumes one unit for `subject`.
    ///
    /// One script call, at most once (see
    /// [`Cluster`](crate::Cluster#timeouts-and-ambiguous-outcomes)): a
    /// transient failure under fail-open returns an admitted decision with
    /// [`bypassed`](Decision::bypassed) set; under fail-closed it returns the
    /// error. Configuration faults are always errors.
    pub async fn check(&self, subject: impl AsRef<[u8]>) -> Result<Decision> {
        self.check_n(subject, 1).await
    }

    /// Like [`check`](Self::check) for a request costing `cost` units
    /// (points, weight). A rejected request consumes nothing. Errors with
    /// [`Error::InvalidCost`](crate::Error::InvalidCost) before sending if `cost` is 0 or above
    /// [`capacity`](Self::capacity).
    pub async fn check_n(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<Decision> {
        if let Some(slices) = &self.inner.slices {
            return self.check_sliced(slices, subject.as_ref(), cost).await;
        }
        let decision = self.pipeline().run(subject.as_ref(), cost, true).await?;
        Ok(only(decision))
    }

    /// Gives back every quota slice this process holds of this limiter
    /// (see [`RateLimiterBuilder::slices`]), one call per subject, e.g.
    /// before shutting down; nothing to do without slices. Slices are also
    /// given back when they end, and in the background when the last clone
    /// of the limiter is dropped inside a tokio runtime.
    pub async fn return_slices(&self) -> Result<()> {
        match &self.inner.slices {
            Some(slices) => slices.return_all().await,
            None => Ok(()),
        }
    }

    /// Its quota slices' settings, if it has them.
    #[must_use]
    pub fn slice_settings(&self) -> Option<Slices> {
        self.inner.slices.as_ref().map(|s| s.config())
    }

    /// Its local limiters, under [`FailurePolicy::Local`].
    pub(crate) fn local(&self) -> Option<&LocalLimits> {
        self.inner.local.as_ref()
    }

    /// Its deny cache, if it has one.
    pub(crate) fn deny_cache(&self) -> Option<&Arc<DenyCache>> {
        self.inner.cache.as_ref()
    }

    /// What a one-unit request would get now, without consuming anything or
    /// writing any key. Always asks Redis, never the deny cache. Failures
    /// follow the policy like a check (and a bypass or error is counted like
    /// one); the answer itself is not counted as a decision.
    pub async fn peek(&self, subject: impl AsRef<[u8]>) -> Result<Decision> {
        self.peek_n(subject, 1).await
    }

    /// What a request costing `cost` would get now; consumes nothing.
    pub async fn peek_n(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<Decision> {
        let decision = self.pipeline().run(subject.as_ref(), cost, false).await?;
        Ok(only(decision))
    }

    /// Exactly what [`check_n`](Self::check_n) sends for `subject` and
    /// `cost`: the script, its `KEYS` and its `ARGV`. For running the check
    /// through another client — the bench harness uses it to measure this
    /// crate against bare redis-rs with identical work on the server.
    pub fn invocation(&self, subject: impl AsRef<[u8]>, cost: u32) -> Result<Invocation> {
        self.pipeline().invocation(subject.as_ref(), cost)
    }

    /// Checks until admitted, sleeping `retry_after` (plus jitter, so waiting
    /// clients do not retry in lockstep) between attempts, for at most
    /// `max_wait`. Returns the admitting decision, or the last denial when
    /// the next admission would come after the deadline. A `max_wait` too
    /// long to add to the clock, such as [`Duration::MAX`], waits for as long
    /// as it takes.
    ///
    /// ```no_run
    /// # async fn demo(api: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// let d = api.until_ready("batch-job", 5, Duration::MAX).await?;
    /// assert!(d.allowed);
    /// # Ok(()) }
    /// ```
    pub async fn until_ready(
        &self,
        subject: impl AsRef<[u8]>,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Decision> {
        let decision = self
            .pipeline()
            .until_ready(subject.as_ref(), cost, max_wait)
            .await?;
        Ok(only(decision))
    }
}

/// The decision of a multi-limit of one.
pub(crate) fn only(mut decision: MultiDecision) -> Decision {
    decision.decisions.swap_remove(0)
}
