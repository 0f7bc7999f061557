//! Rate-limited warnings: a fault that repeats on every request (a bypassed
//! limiter, a failing check) is logged once per window, with a count of
//! what the window hid.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a limiter may log a bypass warning.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Rate limit for the bypass warning of one limiter: the first bypass warns
/// at once; later ones are summed into the next warning, at most one per
/// [`WARN_EVERY`].
#[derive(Debug)]
pub(crate) struct WarnLimiter {
    epoch: Instant,
    /// Milliseconds since `epoch` of the last warning, plus one (0 = never).
    last_warn: AtomicU64,
    suppressed: AtomicU64,
}

impl WarnLimiter {
    pub(crate) fn new() -> Self {
        WarnLimiter {
            epoch: Instant::now(),
            last_warn: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Returns `Some(n)` when a warning should be logged now, `n` being the
    /// bypasses since the last warning (this one included).
    pub(crate) fn should_warn(&self) -> Option<u64> {
        let now = u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.last_warn.load(Ordering::Relaxed);
        let every = u64::try_from(WARN_EVERY.as_millis()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < every {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // One winner per window; a loser counts as suppressed.
        if self
            .last_warn
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed) + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_rate_limited_and_count_what_they_hid() {
        let w = WarnLimiter::new();
        assert_eq!(w.should_warn(), Some(1));
        assert_eq!(w.should_warn(), None);
        assert_eq!(w.should_warn(), None);
        // Pretend the window passed.
        w.last_warn.store(1, Ordering::Relaxed);
        let w2 = WarnLimiter {
            epoch: Instant::now() - WARN_EVERY - Duration::from_millis(5),
            last_warn: AtomicU64::new(1),
            suppressed: AtomicU64::new(w.suppressed.load(Ordering::Relaxed)),
        };
        assert_eq!(w2.should_warn(), Some(3));
    }
}
