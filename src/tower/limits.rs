//! What a layer checks: one [`RateLimiter`] or a [`MultiLimiter`].

use crate::error::Result;
use crate::keys::SubjectHasher;
use crate::limit::{MultiDecision, MultiLimiter, RateLimiter};

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
pub struct Limits(MultiLimiter);

/// A limiter alone is checked exactly as [`RateLimiter::check_n`] checks it
/// (see [`MultiLimiter`]'s `From<RateLimiter>`).
impl From<RateLimiter> for Limits {
    fn from(limiter: RateLimiter) -> Self {
        Limits(limiter.into())
    }
}

impl From<MultiLimiter> for Limits {
    fn from(limiters: MultiLimiter) -> Self {
        Limits(limiters)
    }
}

impl Limits {
    /// The limiters, in order (one for a [`RateLimiter`]).
    #[must_use]
    pub fn limiters(&self) -> &[RateLimiter] {
        self.0.limiters()
    }

    /// The hasher of credential keys: that of the limiters' cluster (a
    /// multi-limiter has at least one limiter, all on one handle, as its
    /// check pipeline relies on too).
    pub(crate) fn subject_hasher(&self) -> &SubjectHasher {
        self.0.limiters()[0].cluster().subject_hasher()
    }

    /// The most one request may cost.
    pub(crate) fn capacity(&self) -> u32 {
        self.0.capacity()
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

    pub(crate) async fn check(&self, subject: &[u8], cost: u32) -> Result<MultiDecision> {
        self.0.check_n(subject, cost).await
    }
}
