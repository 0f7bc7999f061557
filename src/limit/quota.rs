//! `Quota`: how much, per how long.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::error::{Error, Result};

/// A rate: `limit` units per `period`, and for GCRA an optional burst.
///
/// A plain value with `const fn` constructors, so quotas can be constants:
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use shardlimit::Quota;
///
/// const API: Quota = Quota::per_minute(NonZeroU32::new(60).unwrap());
/// assert_eq!(API.limit().get(), 60);
/// assert_eq!(API.period(), Duration::from_secs(60));
/// assert_eq!(API.burst(), API.limit());
///
/// // 10 per second on average, up to 50 at once (GCRA only).
/// let bursty = Quota::per_second(NonZeroU32::new(10).unwrap())
///     .allow_burst(NonZeroU32::new(50).unwrap());
/// assert_eq!(bursty.burst().get(), 50);
/// ```
///
/// # Bounds
///
/// A `Quota` is a plain value; the limiter's
/// [`build`](crate::RateLimiterBuilder::build) checks it against these
/// bounds and returns [`Error::Config`] (field `quota.period`, `quota.limit`
/// or `quota.burst`) before anything is sent:
///
/// | field | bound |
/// |---|---|
/// | `period` | whole milliseconds, 1 ms ..= [`MAX_PERIOD`](Self::MAX_PERIOD) (366 days) |
/// | `limit` | 1 ..= [`Algorithm::max_limit`](crate::Algorithm::max_limit): `u32::MAX`; the sliding log 128 |
/// | `burst` | GCRA only; `burst × period / limit` (a full bucket's refill time) ≤ 366 days |
/// | cost of one call | 1 ..= the limiter's [`capacity`](crate::RateLimiter::capacity) (limit, or GCRA burst), else [`Error::InvalidCost`] |
///
/// So no timestamp, TTL or count a script computes leaves a double's exact
/// integer range (2^53), and every key expires within two periods.
///
/// ```
/// # async fn demo(cluster: shardlimit::Cluster) {
/// use std::num::NonZeroU32;
/// use shardlimit::{Error, Quota, RateLimiter};
///
/// // One per year with a burst of two: the bucket would take two years to refill.
/// let quota = Quota::with_period(NonZeroU32::MIN, Quota::MAX_PERIOD)
///     .allow_burst(NonZeroU32::new(2).unwrap());
/// let err = RateLimiter::builder(&cluster, "yearly", quota).build().unwrap_err();
/// assert!(matches!(err, Error::Config { field: "quota.burst", .. }));
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU32,
    period: Duration,
    burst: Option<NonZeroU32>,
}

impl Quota {
    /// The longest period accepted, 366 days; also the longest a GCRA's full
    /// bucket may take to refill (`burst × period / limit`). Every key a
    /// limiter writes expires within twice this.
    ///
    /// It keeps every timestamp a script computes (server time in
    /// microseconds, about 1.8 × 10^15, plus at most two of these periods,
    /// 6.3 × 10^13) far inside a double's exact integer range (2^53 ≈
    /// 9 × 10^15), the numbers Lua computes with.
    pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);

    /// `limit` per second.
    #[must_use]
    pub const fn per_second(limit: NonZeroU32) -> Self {
        Self::with_period(limit, Duration::from_secs(1))
    }

    /// `limit` per minute.
    #[must_use]
    pub const fn per_minute(limit: NonZeroU32) -> Self {
        Self::with_period(limit, Duration::from_secs(60))
    }

    /// `limit` per hour.
    #[must_use]
    pub const fn per_hour(limit: NonZeroU32) -> Self {
        Self::with_period(limit, Duration::from_secs(3600))
    }

    /// `limit` per `period`. The period must be a whole number of
    /// milliseconds from 1 ms to a year; limiters check this when built.
    #[must_use]
    pub const fn with_period(limit: NonZeroU32, period: Duration) -> Self {
        Quota {
            limit,
            period,
            burst: None,
        }
    }

    /// For GCRA: up to `burst` units at once from a full bucket, refilling at
    /// `limit` per `period`. Default: the limit. Other algorithms refuse a
    /// burst different from the limit when built.
    #[must_use]
    pub const fn allow_burst(self, burst: NonZeroU32) -> Self {
        Quota {
            burst: Some(burst),
            ..self
        }
    }

    /// Units per period.
    #[must_use]
    pub const fn limit(&self) -> NonZeroU32 {
        self.limit
    }

    /// The period.
    #[must_use]
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The burst (GCRA capacity); the limit unless set.
    #[must_use]
    pub const fn burst(&self) -> NonZeroU32 {
        match self.burst {
            Some(burst) => burst,
            None => self.limit,
        }
    }

    pub(crate) fn has_custom_burst(&self) -> bool {
        self.burst.is_some_and(|b| b != self.limit)
    }

    /// The period in microseconds, checked: whole milliseconds, 1 ms to a
    /// year.
    pub(crate) fn period_micros(&self) -> Result<u64> {
        let fail = |reason: &str| Error::Config {
            field: "quota.period",
            reason: format!("{:?}: {reason}", self.period),
        };
        if self.period < Duration::from_millis(1) || self.period > Self::MAX_PERIOD {
            return Err(fail("must be between 1 ms and 366 days"));
        }
        if self.period.subsec_nanos() % 1_000_000 != 0 {
            return Err(fail("must be a whole number of milliseconds"));
        }
        u64::try_from(self.period.as_micros()).map_err(|_| fail("too long"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn constructors() {
        assert_eq!(Quota::per_second(nz(5)).period(), Duration::from_secs(1));
        assert_eq!(Quota::per_hour(nz(5)).period(), Duration::from_secs(3600));
        let q = Quota::per_minute(nz(60));
        assert!(!q.has_custom_burst());
        assert!(!q.allow_burst(nz(60)).has_custom_burst());
        assert!(q.allow_burst(nz(61)).has_custom_burst());
    }

    #[test]
    fn periods_are_checked() {
        let ok = Quota::with_period(nz(1), Duration::from_millis(1500));
        assert_eq!(ok.period_micros().unwrap(), 1_500_000);
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            Duration::from_micros(1500),
            Duration::from_secs(367 * 24 * 3600),
        ] {
            assert!(
                matches!(
                    Quota::with_period(nz(1), bad).period_micros(),
                    Err(Error::Config {
                        field: "quota.period",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }
}
