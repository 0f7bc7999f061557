//! The four rate-limit algorithms and what they cost.

use std::fmt;

use super::quota::Quota;
use crate::error::{Error, Result};
use crate::scripts::{self, Script};

/// How a [`RateLimiter`](super::RateLimiter) counts.
///
/// | algorithm | state per subject | exact? | use when |
/// |---|---|---|---|
/// | [`FixedWindow`](Self::FixedWindow) | 1 integer key | per clock-aligned window; up to 2× the limit across a boundary | quotas that reset on the clock ("1000 per hour") |
/// | [`SlidingLog`](Self::SlidingLog) | sorted set, one entry per admitted unit | exact in every window | small limits where the boundary matters (APIs, logins) |
/// | [`SlidingWindow`](Self::SlidingWindow) | 1 small hash | approximate (weighted previous window); worst case 2× | large limits, cheap memory, smooth behaviour |
/// | [`Gcra`](Self::Gcra) | 1 key: theoretical arrival time | exact rate with a burst | the default: smooth rate + burst, least memory |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// Clock-aligned fixed window: one counter key whose TTL ends with the
    /// window (like Sidekiq's "bucket" limiter).
    FixedWindow,
    /// Sliding log: a sorted set of admitted units, exact; memory grows with
    /// the limit.
    SlidingLog,
    /// Sliding window counter: current and previous window counts, weighted.
    SlidingWindow,
    /// GCRA (token / leaky bucket): rate plus burst in one number.
    #[default]
    Gcra,
}

impl Algorithm {
    /// Every algorithm, for code that wants to try them all.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ];

    /// The `kind` part of its keys (short: it is in every key).
    #[must_use]
    pub const fn kind(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fw",
            Algorithm::SlidingLog => "slog",
            Algorithm::SlidingWindow => "swc",
            Algorithm::Gcra => "gcra",
        }
    }

    /// The algorithm whose keys have this kind.
    #[must_use]
    pub fn from_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.kind() == kind)
    }

    pub(crate) fn script(self) -> &'static Script {
        match self {
            Algorithm::FixedWindow => &scripts::FIXED_WINDOW,
            Algorithm::SlidingLog => &scripts::SLIDING_LOG,
            Algorithm::SlidingWindow => &scripts::SLIDING_WINDOW,
            Algorithm::Gcra => &scripts::GCRA,
        }
    }

    /// The most one request may cost under `quota`.
    pub(crate) fn capacity(self, quota: &Quota) -> u32 {
        match self {
            Algorithm::Gcra => quota.burst().get(),
            _ => quota.limit().get(),
        }
    }

    /// Checks that `quota` makes sense for this algorithm.
    pub(crate) fn validate(self, quota: &Quota) -> Result<u64> {
        let period = quota.period_micros()?;
        if self != Algorithm::Gcra && quota.has_custom_burst() {
            return Err(Error::Config {
                field: "quota.burst",
                reason: format!("a burst only applies to GCRA, not to {self}"),
            });
        }
        Ok(period)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::FixedWindow => "fixed window",
            Algorithm::SlidingLog => "sliding log",
            Algorithm::SlidingWindow => "sliding window counter",
            Algorithm::Gcra => "GCRA",
        })
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    #[test]
    fn kinds_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_kind(a.kind()), Some(a));
        }
        assert_eq!(Algorithm::from_kind("lock"), None);
    }

    #[test]
    fn burst_only_for_gcra() {
        let q = Quota::per_second(NonZeroU32::new(10).unwrap())
            .allow_burst(NonZeroU32::new(20).unwrap());
        assert_eq!(Algorithm::Gcra.capacity(&q), 20);
        Algorithm::Gcra.validate(&q).unwrap();
        assert!(Algorithm::FixedWindow.validate(&q).is_err());
        assert_eq!(Algorithm::SlidingLog.capacity(&q), 10);
    }
}
