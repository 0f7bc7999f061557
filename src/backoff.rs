//! Jittered backoff for the waiting `acquire` of locks and leases, and the
//! one checked conversion of a `Duration` to script milliseconds.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::error::{Error, Result};

/// Longest duration accepted where a script takes milliseconds: 2^40 ms,
/// about 34.8 years. Far beyond any sane TTL, and small enough that a script
/// adding it to the server time in microseconds stays exact in Lua's doubles
/// (2^53).
pub(crate) const MAX_MILLIS: u64 = 1 << 40;

/// `duration` in whole milliseconds (rounded down) for a script, refusing
/// anything under 1 ms or over [`MAX_MILLIS`] as an [`Error::Config`] on
/// `field`.
pub(crate) fn millis(field: &'static str, duration: Duration) -> Result<u64> {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Err(Error::Config {
            field,
            reason: format!("{duration:?} is under the 1 ms resolution of Redis expiry"),
        });
    }
    if ms > MAX_MILLIS {
        return Err(Error::Config {
            field,
            reason: format!("{duration:?} is over the limit of {MAX_MILLIS} ms"),
        });
    }
    Ok(ms)
}

/// Exponential backoff with "equal jitter": attempt `n` sleeps a random time
/// in `[d/2, d]` where `d = min(max, min * 2^n)`. Half the delay is
/// randomised so that many waiters released at once (a lock freed, a lease
/// returned) do not retry in lockstep; the other half keeps each waiter from
/// spinning.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            attempt: 0,
        }
    }

    /// The next delay, never more than `cap` (e.g. the time left, or the
    /// holder's remaining TTL that the server reported).
    pub(crate) fn next(&mut self, cap: Duration) -> Duration {
        let factor = 1u32 << self.attempt.min(16);
        self.attempt = self.attempt.saturating_add(1);
        let full = self.min.saturating_mul(factor).min(self.max);
        let half = full / 2;
        jitter(half, full - half).min(cap)
    }

    /// How long to sleep before the next attempt of a wait that started at
    /// `start` and may last `wait`, when the server said the resource frees
    /// up in `hint` at the latest; `None` once the wait is over.
    pub(crate) fn before_retry(
        &mut self,
        start: Instant,
        wait: Duration,
        hint: Duration,
    ) -> Option<Duration> {
        let left = wait.checked_sub(start.elapsed()).filter(|d| !d.is_zero())?;
        // A hint of 0 (about to free up) still waits a millisecond.
        Some(self.next(left.min(hint.max(Duration::from_millis(1)))))
    }
}

/// `base` plus a uniformly random delay in `0..=spread`: the crate's one
/// jitter, so that many processes or tasks woken by the same event (a
/// failover, a lock freed, a limit refilled) do not act in lockstep.
/// Backoffs draw the lower part of a delay this way (`jitter(d / 2, d / 2)`
/// is "equal jitter"), waits add a spread after the time they must wait.
pub(crate) fn jitter(base: Duration, spread: Duration) -> Duration {
    if spread.is_zero() {
        return base;
    }
    base.saturating_add(rand::rng().random_range(Duration::ZERO..=spread))
}

/// A fresh random 128-bit identifier in lowercase hex (32 characters): lock
/// tokens and lease ids. `rand`'s thread RNG is a CSPRNG seeded from the
/// OS, so ids are unique across processes and hosts without coordination
/// and cannot be guessed by another client.
pub(crate) fn random_id() -> String {
    format!("{:032x}", rand::rng().random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_retry_stops_at_the_deadline_and_respects_the_hint() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let now = Instant::now();
        assert_eq!(
            b.before_retry(now, Duration::ZERO, Duration::from_secs(1)),
            None
        );
        let d = b
            .before_retry(now, Duration::from_secs(10), Duration::from_millis(3))
            .unwrap();
        assert!(d <= Duration::from_millis(3), "{d:?}");
        let d = b
            .before_retry(now, Duration::from_secs(10), Duration::ZERO)
            .unwrap();
        assert!(d <= Duration::from_millis(1), "{d:?}");
    }

    #[test]
    fn millis_refuses_zero_sub_millisecond_and_huge() {
        assert_eq!(millis("ttl", Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(millis("ttl", Duration::from_micros(1500)).unwrap(), 1);
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            Duration::from_millis(MAX_MILLIS + 1),
            Duration::MAX,
        ] {
            assert!(
                matches!(millis("ttl", bad), Err(Error::Config { field: "ttl", .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn jitter_stays_within_base_and_base_plus_spread() {
        let (base, spread) = (Duration::from_millis(40), Duration::from_millis(10));
        let draws: Vec<Duration> = (0..1_000).map(|_| jitter(base, spread)).collect();
        assert!(draws.iter().all(|d| (base..=base + spread).contains(d)));
        // It spreads: the draws are not all in one half.
        let middle = base + spread / 2;
        assert!(draws.iter().any(|d| *d < middle) && draws.iter().any(|d| *d > middle));
        assert_eq!(jitter(base, Duration::ZERO), base);
        assert_eq!(jitter(Duration::MAX, spread), Duration::MAX, "saturates");
    }

    #[test]
    fn backoff_grows_stays_jittered_and_capped() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(80));
        let first = b.next(Duration::MAX);
        assert!((Duration::from_millis(5)..=Duration::from_millis(10)).contains(&first));
        for _ in 0..20 {
            let d = b.next(Duration::MAX);
            assert!(d <= Duration::from_millis(80), "{d:?}");
        }
        // Late attempts sit in [max/2, max].
        assert!(b.next(Duration::MAX) >= Duration::from_millis(40));
        assert_eq!(b.next(Duration::from_millis(3)), Duration::from_millis(3));
    }

    #[test]
    fn ids_are_128_bit_hex_and_distinct() {
        let a = random_id();
        let b = random_id();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
