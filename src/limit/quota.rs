//! `Quota`: how much, per how long.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::count::{Checked, Count};
use crate::error::{Error, Result};

/// A rate: `limit` units per `period`, and for GCRA an optional burst.
///
/// The constructors take a plain integer or a [`NonZeroU32`] (any
/// [`Count`]); the limiter checks it when built:
///
/// ```
/// use std::time::Duration;
/// use shardlimit::Quota;
///
/// // 10 per second on average, up to 20 at once (GCRA only).
/// let api = Quota::per_second(10).allow_burst(20);
/// assert_eq!((api.limit().get(), api.burst().get()), (10, 20));
/// assert_eq!(api.period(), Duration::from_secs(1));
/// assert_eq!(Quota::per_hour(1000).burst(), Quota::per_hour(1000).limit());
/// ```
///
/// [`Quota::new`] is the `const fn` for constants:
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use shardlimit::Quota;
///
/// const API: Quota = Quota::new(NonZeroU32::new(60).unwrap(), Duration::from_secs(60));
/// assert_eq!(API, Quota::per_minute(60));
/// ```
///
/// # Bounds
///
/// A `Quota` is a plain value; the limiter's
/// [`build`](crate::limit::RateLimiterBuilder::build) (and every call that takes a
/// quota: [`set_quota`](crate::RateLimiter::set_quota),
/// [`set_override`](crate::RateLimiter::set_override)) checks it against
/// these bounds and returns [`Error::Config`] (field `quota.period`,
/// `quota.limit` or `quota.burst`) before anything is sent:
///
/// | field | bound |
/// |---|---|
/// | `period` | whole milliseconds, 1 ms ..= [`MAX_PERIOD`](Self::MAX_PERIOD) (366 days) |
/// | `limit` | 1 ..= [`Algorithm::max_limit`](crate::Algorithm::max_limit): `u32::MAX`; the sliding log 128 |
/// | `burst` | 1 ..= `u32::MAX`, GCRA only; `burst × period / limit` (a full bucket's refill time) ≤ 366 days |
/// | cost of one call | 1 ..= the limiter's [`capacity`](crate::RateLimiter::capacity) (limit, or GCRA burst), else [`Error::InvalidCost`] |
///
/// So no timestamp, TTL or count a script computes leaves a double's exact
/// integer range (2^53), and every key expires within two periods.
///
/// ```
/// # async fn demo(cluster: shardlimit::Cluster) {
/// use shardlimit::{Error, Quota, RateLimiter};
///
/// // One per year with a burst of two: the bucket would take two years to refill.
/// let quota = Quota::with_period(1, Quota::MAX_PERIOD).allow_burst(2);
/// let err = RateLimiter::builder(&cluster, "yearly", quota).build().unwrap_err();
/// assert!(matches!(err, Error::Config { field: "quota.burst", .. }));
///
/// // Zero is refused by name, before anything is sent.
/// let err = RateLimiter::builder(&cluster, "none", Quota::per_second(0)).build().unwrap_err();
/// assert!(matches!(err, Error::Config { field: "quota.limit", .. }));
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU32,
    period: Duration,
    burst: Option<NonZeroU32>,
    /// A count given that is not in 1 ..= `u32::MAX`, kept (with its
    /// field) for the build to refuse; `limit` or `burst` reads 1 meanwhile.
    invalid: Option<(Field, Checked)>,
}

/// Which count of a quota was given out of range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Field {
    Limit,
    Burst,
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

    /// `limit` per `period`, as a `const fn` for constants; the other
    /// constructors take plain integers too.
    #[must_use]
    pub const fn new(limit: NonZeroU32, period: Duration) -> Self {
        Quota {
            limit,
            period,
            burst: None,
            invalid: None,
        }
    }

    /// `limit` per second (what each algorithm admits in its worst second:
    /// [`with_period`](Self::with_period)).
    #[must_use]
    pub fn per_second(limit: impl Count) -> Self {
        Self::with_period(limit, Duration::from_secs(1))
    }

    /// `limit` per minute (worst windows: [`with_period`](Self::with_period)).
    #[must_use]
    pub fn per_minute(limit: impl Count) -> Self {
        Self::with_period(limit, Duration::from_secs(60))
    }

    /// `limit` per hour (worst windows: [`with_period`](Self::with_period)).
    #[must_use]
    pub fn per_hour(limit: impl Count) -> Self {
        Self::with_period(limit, Duration::from_secs(3600))
    }

    /// `limit` per `period`. The limit must be from 1 to `u32::MAX` and the
    /// period a whole number of milliseconds from 1 ms to a year; limiters
    /// check both when built.
    ///
    /// What it admits in the worst window of one `period` depends on the
    /// algorithm ([`Algorithm::policy_limit`](crate::Algorithm::policy_limit)
    /// is what a limiter advertises):
    ///
    /// | algorithm | most admitted in any window of one period |
    /// |---|---|
    /// | sliding log | `limit` (exact) |
    /// | GCRA (the default) | `limit + burst - 1`: the burst at once, then one every `period / limit`; with the default burst (`limit`), `2 × limit - 1` — "5 per 10 s" admits 9 in some 10 s |
    /// | fixed window | `limit` per clock-aligned window; `2 × limit` across a boundary |
    /// | sliding window counter | `limit` by its estimate; up to `2 × limit` when the previous window's units came at its end |
    ///
    /// Where "`limit` per `period`" must hold in every window, use the
    /// sliding log (limits up to 128); GCRA is a rate with a burst.
    #[must_use]
    pub fn with_period(limit: impl Count, period: Duration) -> Self {
        let limit = Checked::new(limit);
        Quota {
            invalid: Self::invalid(Field::Limit, limit),
            ..Self::new(limit.or_min(), period)
        }
    }

    /// For GCRA: up to `burst` units at once from a full bucket, refilling at
    /// `limit` per `period` — so up to `limit + burst - 1` in one period's
    /// worst window. Default: the limit. `allow_burst(1)` makes it a pure
    /// rate: at most `limit` in any window of `period`, one every
    /// `period / limit`. Other algorithms refuse a burst different from the
    /// limit when built.
    #[must_use]
    pub fn allow_burst(self, burst: impl Count) -> Self {
        let burst = Checked::new(burst);
        Quota {
            burst: Some(burst.or_min()),
            invalid: self.invalid.or(Self::invalid(Field::Burst, burst)),
            ..self
        }
    }

    fn invalid(field: Field, count: Checked) -> Option<(Field, Checked)> {
        matches!(count, Checked::Invalid(_)).then_some((field, count))
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

    /// [`Error::Config`] for a limit or burst given out of range.
    pub(crate) fn check_counts(&self) -> Result<()> {
        match self.invalid {
            Some((Field::Limit, count)) => count.get("quota.limit").map(drop),
            Some((Field::Burst, count)) => count.get("quota.burst").map(drop),
            None => Ok(()),
        }
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
    fn invalid_counts_are_kept_for_the_build() {
        assert!(Quota::per_second(5).allow_burst(7).check_counts().is_ok());
        for (quota, field) in [
            (Quota::per_second(0), "quota.limit"),
            (Quota::per_second(-1).allow_burst(0), "quota.limit"),
            (Quota::per_second(5).allow_burst(0), "quota.burst"),
            (Quota::per_second(0).allow_burst(3), "quota.limit"),
        ] {
            match quota.check_counts() {
                Err(Error::Config { field: f, .. }) => assert_eq!(f, field, "{quota:?}"),
                other => panic!("{quota:?}: {other:?}"),
            }
        }
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
