//! Which subjects are hot in this process, for automatic slicing
//! ([`Slices::when_hot`]): the limiter's exact checks counted per subject
//! in a Space-Saving sketch renewed every window, and each sliced
//! subject's checks counted beside its slice. Only a limiter with
//! automatic slicing has one: no other limiter counts anything.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Slices;
use crate::throttled::sketch::SpaceSaving;

/// Counters of the sketch: a subject with more than 1/1,024 of this
/// process's exact checks of the limiter in a window is certainly held
/// (the Space-Saving guarantee), so a hot subject is noticed however many
/// cold ones there are, up to 1,024 × the threshold checks per second.
pub(crate) const SKETCH_CAPACITY: usize = 1024;

/// The fewest checks in a window that make a subject hot before the
/// window's end (two slices' worth): fewer say too little of a rate — a
/// subject checked at half the threshold reaches a handful within a few
/// lifetimes often enough. At the default threshold a whole window's
/// worth is less (8 checks), and that is what makes a subject hot.
const FEWEST_CHECKS: u64 = 2 * Slices::DEFAULT_UNITS_PER_SLICE as u64;

/// The hot subjects of one limiter in this process.
pub(crate) struct HotSubjects {
    window: Duration,
    /// Checks within one window that make a subject hot (at least 1).
    enter: u64,
    /// The threshold, checks per second.
    per_second: f64,
    /// A sliced subject with fewer checks than this in a whole window has
    /// cooled: half of `enter`, the hysteresis.
    cool: f64,
    /// One lock per exact check: a check that goes to Redis anyway.
    current: Mutex<Window>,
}

struct Window {
    started: Instant,
    sketch: SpaceSaving,
}

/// A sliced subject's checks in its current window, kept with its slice
/// (under the lock its decisions take anyway).
#[derive(Default)]
pub(crate) struct Heat {
    since: Option<Instant>,
    checks: u64,
}

impl Heat {
    /// A window starting now.
    pub(crate) fn starting(now: Instant) -> Self {
        Heat {
            since: Some(now),
            checks: 0,
        }
    }

    /// One more check of the subject.
    pub(crate) fn checked(&mut self) {
        self.checks += 1;
    }
}

impl HotSubjects {
    /// The detector of `config`'s automatic slicing; `None` when every
    /// subject is sliced.
    pub(crate) fn new(config: &Slices, now: Instant) -> Option<Self> {
        let threshold = config.hot_threshold()?;
        let window = config.hot_window();
        let per_window = threshold * window.as_secs_f64();
        let enter = whole_checks(per_window).max(1);
        Some(HotSubjects {
            window,
            enter,
            per_second: threshold,
            cool: per_window / 2.0,
            current: Mutex::new(Window {
                started: now,
                sketch: SpaceSaving::new(SKETCH_CAPACITY),
            }),
        })
    }

    /// Counts an exact check of `subject` at `now`: whether it is hot, i.e.
    /// certainly checked at the threshold's rate since the current window
    /// began (and at least [`FEWEST_CHECKS`] times), or the threshold's
    /// worth of a whole window within it. A subject hot from the start of
    /// a window is found within its first lifetimes, not at its end: the
    /// skewed bench measured a second of exact checks, a window, before
    /// the hot subjects of a new round were sliced.
    pub(crate) fn offer(&self, subject: &[u8], now: Instant) -> bool {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut elapsed = now.saturating_duration_since(current.started);
        if elapsed >= self.window {
            current.started = now;
            current.sketch = SpaceSaving::new(SKETCH_CAPACITY);
            elapsed = Duration::ZERO;
        }
        current.sketch.offer(subject) >= self.at_rate(elapsed).min(self.enter)
    }

    /// The checks within `elapsed` at the threshold's rate, at least
    /// [`FEWEST_CHECKS`].
    fn at_rate(&self, elapsed: Duration) -> u64 {
        whole_checks(self.per_second * elapsed.as_secs_f64()).max(FEWEST_CHECKS)
    }

    /// Whether a sliced subject has cooled by `now`: a whole window passed
    /// with fewer than half the threshold's checks. A window with more
    /// starts the next one.
    pub(crate) fn cooled(&self, heat: &mut Heat, now: Instant) -> bool {
        let since = *heat.since.get_or_insert(now);
        if now.saturating_duration_since(since) < self.window {
            return false;
        }
        // Counts far below 2^53: exact as a float.
        let cooled = (heat.checks as f64) < self.cool;
        if !cooled {
            *heat = Heat::starting(now);
        }
        cooled
    }
}

/// `checks` rounded up to whole checks. Finite and not negative (the
/// threshold is validated): it fits in a u64 for any sane threshold, and
/// saturates otherwise.
fn whole_checks(checks: f64) -> u64 {
    if checks >= u64::MAX as f64 {
        u64::MAX
    } else {
        checks.ceil() as u64
    }
}

impl std::fmt::Debug for HotSubjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotSubjects")
            .field("window", &self.window)
            .field("enter", &self.enter)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A detector whose first window begins at `t0`.
    fn hot(per_second: f64, t0: Instant) -> HotSubjects {
        // 100 ms slices: windows of 1 s.
        HotSubjects::new(&Slices::up_to(0.1).when_hot_above(per_second), t0).unwrap()
    }

    #[test]
    fn every_subject_sliced_needs_no_detector() {
        assert!(HotSubjects::new(&Slices::up_to(0.1), Instant::now()).is_none());
        let default = HotSubjects::new(&Slices::up_to(0.1).when_hot(), Instant::now()).unwrap();
        // 8 a second over windows of 1 s.
        assert_eq!((default.enter, default.cool), (8, 4.0));
    }

    #[test]
    fn a_subject_is_hot_once_checked_at_the_threshold_rate_within_a_window() {
        let t0 = Instant::now();
        let detector = hot(100.0, t0);
        // At the window's start: the fewest checks that say a rate.
        for i in 1..FEWEST_CHECKS {
            assert!(!detector.offer(b"a", t0), "hot after {i}");
            // Cold subjects in between never count towards it.
            assert!(!detector.offer(format!("cold:{i}").as_bytes(), t0));
        }
        assert!(detector.offer(b"a", t0));
        // Half a window in: half the window's worth.
        let half = t0 + Duration::from_millis(500);
        for i in 1..50 {
            assert!(!detector.offer(b"b", half), "hot after {i}");
        }
        assert!(detector.offer(b"b", half));
        // Near its end: nearly the window's worth.
        let late = t0 + Duration::from_millis(900);
        for i in 1..90 {
            assert!(!detector.offer(b"c", late), "hot after {i}");
        }
        assert!(detector.offer(b"c", late));
        // A new window: counted afresh.
        let t1 = t0 + Duration::from_secs(1);
        assert!(!detector.offer(b"a", t1));
    }

    #[test]
    fn a_low_threshold_needs_a_whole_window_or_the_fewest_checks() {
        // 10 a second: a window's worth (10) is less than the fewest
        // checks that say a rate, and makes a subject hot at any time.
        let t0 = Instant::now();
        let detector = hot(10.0, t0);
        for i in 1..10 {
            assert!(!detector.offer(b"a", t0), "hot after {i}");
        }
        assert!(detector.offer(b"a", t0));
    }

    #[test]
    fn spread_over_two_windows_is_not_hot() {
        let t0 = Instant::now();
        let detector = hot(100.0, t0);
        for _ in 0..60 {
            assert!(!detector.offer(b"a", t0 + Duration::from_millis(950)));
        }
        // The next window knows nothing of those 60.
        for _ in 1..FEWEST_CHECKS {
            assert!(!detector.offer(b"a", t0 + Duration::from_millis(1050)));
        }
    }

    #[test]
    fn many_cold_subjects_never_make_one_hot() {
        // Far more subjects than counters: each one evicted takes its place
        // with an inherited count, which the lower bound leaves out.
        let t0 = Instant::now();
        let detector = hot(10.0, t0);
        for round in 0..5 {
            for i in 0..5000 {
                let subject = format!("cold:{i}");
                assert!(!detector.offer(subject.as_bytes(), t0), "{round} {i}");
            }
        }
    }

    #[test]
    fn a_sliced_subject_cools_below_half_the_threshold_over_a_whole_window() {
        let t0 = Instant::now();
        let detector = hot(100.0, t0);
        let mut heat = Heat::starting(t0);
        // Not before a whole window, however quiet.
        assert!(!detector.cooled(&mut heat, t0 + Duration::from_millis(500)));
        // 50 checks in the window: half the threshold, still hot (the
        // hysteresis), and the next window starts.
        (0..50).for_each(|_| heat.checked());
        let t1 = t0 + Duration::from_secs(1);
        assert!(!detector.cooled(&mut heat, t1));
        (0..49).for_each(|_| heat.checked());
        assert!(!detector.cooled(&mut heat, t1 + Duration::from_millis(999)));
        assert!(detector.cooled(&mut heat, t1 + Duration::from_secs(1)));
    }
}
