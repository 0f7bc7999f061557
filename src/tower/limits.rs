//! What a layer checks: one [`RateLimiter`] or a [`MultiLimiter`].

use std::slice;
use std::time::Duration;

use crate::error::Result;
use crate::limit::{Decision, MultiDecision, MultiLimiter, RateLimiter};
use crate::policy::BypassReason;

/// The limit(s) a [`RateLimitLayer`](super::RateLimitLayer) enforces: a
/// [`RateLimiter`] or a [`MultiLimiter`] (several limits on one key, all or
/// nothing, in one script). Made with `From`/`Into`, so the layer takes
/// either.
///
/// ```no_run
/// # fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::num::NonZeroU32;
/// use shardlimit::{MultiLimiter, Quota, RateLimiter};
/// use shardlimit::tower::Limits;
/// let nz = |n| NonZeroU32::new(n).unwrap();
///
/// let per_ip = RateLimiter::builder(&cluster, "ip", Quota::per_second(nz(20))).build()?;
/// let one: Limits = per_ip.into();
///
/// let per_second = RateLimiter::builder(&cluster, "key-1s", Quota::per_second(nz(10))).build()?;
/// let per_hour = RateLimiter::builder(&cluster, "key-1h", Quota::per_hour(nz(1000))).build()?;
/// let both: Limits = MultiLimiter::new([per_second, per_hour])?.into();
/// assert_eq!(both.limiters().len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Limits(Kind);

#[derive(Clone, Debug)]
enum Kind {
    One(RateLimiter),
    Many(MultiLimiter),
}

impl From<RateLimiter> for Limits {
    fn from(limiter: RateLimiter) -> Self {
        Limits(Kind::One(limiter))
    }
}

impl From<MultiLimiter> for Limits {
    fn from(limiters: MultiLimiter) -> Self {
        Limits(Kind::Many(limiters))
    }
}

impl Limits {
    /// The limiters, in order (one for a [`RateLimiter`]).
    #[must_use]
    pub fn limiters(&self) -> &[RateLimiter] {
        match &self.0 {
            Kind::One(limiter) => slice::from_ref(limiter),
            Kind::Many(multi) => multi.limiters(),
        }
    }

    /// The most one request may cost: the smallest capacity of the limits.
    pub(crate) fn capacity(&self) -> u32 {
        self.limiters()
            .iter()
            .map(RateLimiter::capacity)
            .min()
            .unwrap_or(0)
    }

    /// Gives `cost` units back to every limit (an inner layer refused what
    /// these admitted). A failure only leaves them spent, as without a
    /// refund: logged at `debug`.
    pub(crate) async fn refund(&self, subject: &[u8], cost: u32) {
        let Some(units) = std::num::NonZeroU32::new(cost) else {
            return;
        };
        for limiter in self.limiters() {
            if let Err(err) = limiter.reward(subject, units).await {
                tracing::debug!(error = %err, limiter = limiter.name(),
                    "shardlimit: refund after an inner layer's denial failed");
            }
        }
    }

    pub(crate) async fn check(&self, subject: &[u8], cost: u32) -> Result<Verdict> {
        match &self.0 {
            Kind::One(limiter) => limiter.check_n(subject, cost).await.map(Verdict::One),
            Kind::Many(multi) => multi.check_n(subject, cost).await.map(Verdict::Many),
        }
    }
}

/// One check's answer, as the limiter gave it (no copying).
#[derive(Debug)]
pub(crate) enum Verdict {
    One(Decision),
    Many(MultiDecision),
}

impl Verdict {
    pub(crate) fn allowed(&self) -> bool {
        match self {
            Verdict::One(d) => d.allowed,
            Verdict::Many(m) => m.allowed,
        }
    }

    pub(crate) fn bypassed(&self) -> Option<BypassReason> {
        match self {
            Verdict::One(d) => d.bypassed,
            Verdict::Many(m) => m.bypassed(),
        }
    }

    /// The longest wait among the limits that denied.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Verdict::One(d) => d.retry_after,
            Verdict::Many(m) => m.retry_after(),
        }
    }

    /// Which of [`decisions`](Self::decisions) binds
    /// ([`MultiDecision::binding`]).
    pub(crate) fn binding(&self) -> usize {
        match self {
            Verdict::One(_) => 0,
            Verdict::Many(m) => {
                let binding = m.binding();
                m.decisions
                    .iter()
                    .position(|d| std::ptr::eq(d, binding))
                    .unwrap_or(0)
            }
        }
    }

    /// One decision per limiter, in the order of [`Limits::limiters`].
    pub(crate) fn decisions(&self) -> &[Decision] {
        match self {
            Verdict::One(d) => slice::from_ref(d),
            Verdict::Many(m) => &m.decisions,
        }
    }
}
