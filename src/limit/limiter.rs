//! `RateLimiter`: one quota, one algorithm, applied per subject.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

mod builder;

pub use self::builder::RateLimiterBuilder;

use super::algorithm::Algorithm;
use super::catalog::{self, CatalogPublishing, Publication, Publishes};
use super::check::plain::PlainPath;
use super::decision::{Decision, MultiDecision};
use super::quota::Quota;
use super::script::{Invocation, LimitSpec};
use super::stages::Stages;
#[cfg(feature = "deny-cache")]
use super::stages::deny_cache::DenyCache;
use super::stages::local::LocalLimits;
use super::stages::settings_cache::SettingsCache;
#[cfg(feature = "slices")]
use super::stages::slices::Slices;
use crate::cluster::Cluster;
use crate::error::Result;
use crate::keys::KeyId;
use crate::outcomes::Outcomes;
use crate::policy::FailurePolicy;
use crate::primitive::Core;

/// A rate limiter definition: a name, a [`Quota`], an [`Algorithm`] and a
/// [`FailurePolicy`], built once and checked per subject. Cheap to clone.
///
/// Every subject's state lives in one key in the subject's hash slot
/// (`<namespace>:{<subject>}:<kind>:<name>`), so millions of subjects spread
/// over the cluster and each check is one round trip to one node: a script,
/// or for a fixed window [plain commands](crate::limit#plain-commands)
/// pipelined there.
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
    /// What its checks do beside the exact check (see `limit/stages.rs`).
    stages: Stages,
}

impl Publishes for Inner {
    fn cluster(&self) -> &Cluster {
        self.core.cluster()
    }

    fn entry(&self) -> (KeyId, String) {
        catalog::limit_entry(&self.spec.load())
    }

    fn publication(&self) -> &Publication {
        &self.stages.publication
    }
}

impl RateLimiter {
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
        self.inner.stages.validate_spec(&next)?;
        self.replace_spec(next);
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
            // Slices are for enforced limits: in shadow mode checks are
            // exact (the next take sees it).
            if let Ok(next) = spec.with(spec.quota, shadow) {
                self.replace_spec(next);
            }
        }
    }

    /// Puts `next` in force: no denial cached or slice taken under the
    /// spec it replaces answers a check, and the catalog hears of it.
    fn replace_spec(&self, next: LimitSpec) {
        self.inner.spec.store(Arc::new(next));
        self.inner.stages.replaced();
    }

    /// How this limiter's publications to the
    /// [catalog](crate::limit#the-catalog) went in this process: a failed
    /// one never fails a check, and is logged and counted here.
    ///
    /// ```no_run
    /// # fn demo(api: shardlimit::RateLimiter) {
    /// let publishing = api.catalog_publishing();
    /// println!("{} published, {} failed", publishing.published, publishing.failed);
    /// # }
    /// ```
    #[must_use]
    pub fn catalog_publishing(&self) -> CatalogPublishing {
        self.inner.stages.publication.counts()
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

    /// The current spec, read once per operation. Starts the catalog
    /// publication of a limiter built outside a tokio runtime (one relaxed
    /// load once it runs).
    pub(crate) fn spec(&self) -> Arc<LimitSpec> {
        if !self.inner.stages.publication.started() {
            catalog::start(&self.inner);
        }
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
        #[cfg(feature = "slices")]
        if let Some(slices) = &self.inner.stages.slices {
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
    #[cfg(feature = "slices")]
    #[cfg_attr(docsrs, doc(cfg(feature = "slices")))]
    pub async fn return_slices(&self) -> Result<()> {
        match &self.inner.stages.slices {
            Some(slices) => slices.return_all().await,
            None => Ok(()),
        }
    }

    /// Its quota slices' settings, if it has them.
    #[cfg(feature = "slices")]
    #[cfg_attr(docsrs, doc(cfg(feature = "slices")))]
    #[must_use]
    pub fn slice_settings(&self) -> Option<Slices> {
        self.inner.stages.slices.as_ref().map(|s| s.config())
    }

    /// Its plain-command stage, if its checks may be decided that way.
    pub(crate) fn plain(&self) -> Option<&PlainPath> {
        self.inner.stages.plain.as_ref()
    }

    /// Its subject-settings cache, if it has one.
    pub(crate) fn settings_cache(&self) -> Option<&SettingsCache> {
        self.inner.stages.settings.as_ref()
    }

    /// Its local limiters, under [`FailurePolicy::Local`].
    pub(crate) fn local(&self) -> Option<&LocalLimits> {
        self.inner.stages.local.as_ref()
    }

    /// Counts a denial of `subject` (`cached`: answered by the deny cache)
    /// and reports it to the "throttled now" view if this limiter reports
    /// there — every path that denies (Redis' reply, the deny cache, a
    /// quota slice) comes through here.
    pub(crate) fn denied(&self, subject: &[u8], cached: bool) {
        self.inner
            .stages
            .denied(self.cluster(), self.outcomes(), subject, cached);
    }

    /// Its deny cache, if it has one.
    #[cfg(feature = "deny-cache")]
    pub(crate) fn deny_cache(&self) -> Option<&Arc<DenyCache>> {
        self.inner.stages.deny_cache.as_ref()
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

    /// Checks many `(subject, cost)` requests at once, for gateways and
    /// batch jobs: the requests are grouped by the master owning each
    /// subject's slot and sent as **one pipeline per master**, all masters
    /// at once (see [`Cluster::eval_many`](crate::Cluster::eval_many)).
    /// Each request is still its own atomic script, exactly what
    /// [`check_n`](Self::check_n) would send, and runs at most once; the
    /// results come back in the order of `requests`, one per request.
    ///
    /// Each result is what `check_n` would return for that request alone: a
    /// bad subject or cost is that request's error (nothing is sent for
    /// it), the failure policy applies per request, the deny cache (if any)
    /// answers the requests it can, and the outcomes are counted per
    /// request. Keep batches to hundreds or a few thousand requests: a
    /// batch is one write on each master's shared connection. A fixed
    /// window's checks that are [plain commands](crate::limit#plain-commands)
    /// go out as one pipeline of plain commands per master instead.
    ///
    /// ```no_run
    /// # async fn demo(api: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// let batch = [("user:1", 1), ("user:2", 3), ("user:3", 1)];
    /// for ((subject, _), decision) in batch.iter().zip(api.check_many(&batch).await) {
    ///     println!("{subject}: allowed {}", decision?.allowed);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check_many<S: AsRef<[u8]>>(&self, requests: &[(S, u32)]) -> Vec<Result<Decision>> {
        let results = self.pipeline().run_many(requests).await;
        results.into_iter().map(|r| r.map(only)).collect()
    }
}

/// The decision of a multi-limit of one.
pub(crate) fn only(mut decision: MultiDecision) -> Decision {
    decision.decisions.swap_remove(0)
}
