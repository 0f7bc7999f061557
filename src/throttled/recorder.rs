//! What one process knows of its denials: a [`Recorder`] per limiter kind
//! and name (a window of Space-Saving sketches and one of the denials
//! since the last publication, fed by the check pipeline), and the
//! [`Reporters`] of one [`Cluster`](crate::Cluster) handle, which the
//! publishing task reads.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use rand::RngCore;

use super::sketch::{SpaceSaving, Summary};
use crate::outcomes::Outcomes;

/// Subjects kept per sketch, and per published name: the top 100.
pub(crate) const CAPACITY: usize = 100;

/// A window is this many sketches, each covering a sixth of it; the oldest
/// is dropped as a new one starts, so what is reported covers between five
/// sixths of the window and all of it.
const SLICES: u32 = 6;

/// The shortest and longest window
/// ([`RateLimiterBuilder::throttled_window`](crate::limit::RateLimiterBuilder::throttled_window)).
pub(crate) const MIN_WINDOW: Duration = Duration::from_secs(6);
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(3600);

/// The window of a limiter that does not set one.
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// The denials of one limiter kind and name in this process, over the last
/// window, and its outcome counts for the rates.
#[derive(Debug)]
pub(crate) struct Recorder {
    kind: String,
    name: String,
    window: Duration,
    outcomes: Arc<Outcomes>,
    /// Its handle's reporters: a denial asks them whether the publishing
    /// task runs without the handle's extension lock.
    reporters: Arc<Reporters>,
    /// Both sketches behind one mutex: a denial takes one lock.
    sketches: Mutex<Sketches>,
    /// The outcome counts at the last publication, and when.
    last: Mutex<(Instant, [u64; 4])>,
}

#[derive(Debug)]
struct Sketches {
    /// The window, newest last; each starts at its `Instant`.
    slices: VecDeque<(Instant, SpaceSaving)>,
    /// The denials since the last publication: a subject's rate over the
    /// last seconds. The window's slices cannot give it — the newest
    /// covers anything from an instant to a sixth of the window, and an
    /// average over the window reads a subject denied 20 times a second
    /// for the last 5 s of a minute as 1.7/s.
    recent: SpaceSaving,
}

/// One name's share of a publication: its window's summary and its
/// outcome counts since the previous one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NameReport {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) window: Duration,
    /// How long the summary covers: since its oldest sketch started, at
    /// most the window.
    pub(crate) covered: Duration,
    /// How long the counts below cover.
    pub(crate) elapsed: Duration,
    /// Allowed, denied by Redis, denied from the deny cache, bypassed.
    pub(crate) counts: [u64; 4],
    pub(crate) summary: Summary,
    /// The denials since the previous report, over `elapsed`.
    pub(crate) recent: Summary,
}

impl Recorder {
    fn new(
        kind: &str,
        name: &str,
        window: Duration,
        outcomes: Arc<Outcomes>,
        reporters: Arc<Reporters>,
    ) -> Self {
        Recorder {
            kind: kind.to_owned(),
            name: name.to_owned(),
            window,
            reporters,
            last: Mutex::new((Instant::now(), outcomes.counts())),
            outcomes,
            sketches: Mutex::new(Sketches {
                slices: VecDeque::with_capacity(SLICES as usize + 1),
                recent: SpaceSaving::new(CAPACITY),
            }),
        }
    }

    /// The reporters of its handle.
    pub(crate) fn reporters(&self) -> &Reporters {
        &self.reporters
    }

    fn slice(&self) -> Duration {
        self.window / SLICES
    }

    /// Counts a denial of `subject`: on the check path, only for a denial,
    /// and only for limiters that report. One uncontended mutex, a clock
    /// read and two [`SpaceSaving::offer`]s (the window's, the recent one).
    pub(crate) fn denied(&self, subject: &[u8]) {
        let now = Instant::now();
        let mut sketches = self.sketches.lock().unwrap_or_else(PoisonError::into_inner);
        sketches.recent.offer(subject);
        let slices = &mut sketches.slices;
        let fresh = slices
            .back()
            .is_some_and(|(start, _)| now.saturating_duration_since(*start) < self.slice());
        if !fresh {
            while slices.len() >= SLICES as usize {
                slices.pop_front();
            }
            slices.push_back((now, SpaceSaving::new(CAPACITY)));
        }
        if let Some((_, sketch)) = slices.back_mut() {
            sketch.offer(subject);
        }
    }

    /// What to publish now: the window's summary, and the denials and
    /// outcome counts since the last call.
    pub(crate) fn report(&self) -> NameReport {
        let now = Instant::now();
        let (summary, covered, recent) = {
            let mut sketches = self.sketches.lock().unwrap_or_else(PoisonError::into_inner);
            let recent = std::mem::replace(&mut sketches.recent, SpaceSaving::new(CAPACITY));
            let slices = &mut sketches.slices;
            // Slices that started a whole window ago hold only older denials.
            while slices
                .front()
                .is_some_and(|(start, _)| now.saturating_duration_since(*start) >= self.window)
            {
                slices.pop_front();
            }
            let parts: Vec<Summary> = slices.iter().map(|(_, s)| s.summary()).collect();
            let covered = slices.front().map_or(Duration::ZERO, |(start, _)| {
                now.saturating_duration_since(*start).min(self.window)
            });
            (Summary::merge(&parts, CAPACITY), covered, recent)
        };
        let counts = self.outcomes.counts();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let (since, before) = std::mem::replace(&mut *last, (now, counts));
        NameReport {
            kind: self.kind.clone(),
            name: self.name.clone(),
            window: self.window,
            covered,
            elapsed: now.saturating_duration_since(since),
            counts: std::array::from_fn(|i| counts[i].saturating_sub(before[i])),
            summary,
            recent: recent.summary(),
        }
    }
}

/// The recorders of one [`Cluster`](crate::Cluster) handle — one
/// "process" of the view — and its identity.
#[derive(Debug)]
pub(crate) struct Reporters {
    process: String,
    /// Held weakly: a name whose limiters are all dropped stops reporting.
    recorders: Mutex<BTreeMap<(String, String), Weak<Recorder>>>,
    /// Whether the publishing task runs: read at every reported denial
    /// (the task starts at the first one), so an atomic, not the mutex.
    running: AtomicBool,
}

impl Default for Reporters {
    fn default() -> Self {
        Reporters {
            process: format!("p{:016x}", rand::rng().next_u64()),
            recorders: Mutex::default(),
            running: AtomicBool::new(false),
        }
    }
}

impl Reporters {
    /// This handle's process id in the view: `p` and 16 hex digits.
    pub(crate) fn process(&self) -> &str {
        &self.process
    }

    /// The recorder of `kind`/`name`, shared by the limiters of that kind
    /// and name: the first one sets the window.
    pub(crate) fn recorder(
        this: &Arc<Self>,
        kind: &str,
        name: &str,
        window: Duration,
        outcomes: Arc<Outcomes>,
    ) -> Arc<Recorder> {
        let mut recorders = this
            .recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (kind.to_owned(), name.to_owned());
        if let Some(recorder) = recorders.get(&key).and_then(Weak::upgrade) {
            return recorder;
        }
        let recorder = Arc::new(Recorder::new(kind, name, window, outcomes, this.clone()));
        recorders.insert(key, Arc::downgrade(&recorder));
        recorder
    }

    /// Whether the publishing task runs.
    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Marks the task running; `true` when the caller must start it (it
    /// did not run).
    pub(crate) fn claim_start(&self) -> bool {
        !self.running.swap(true, Ordering::AcqRel)
    }

    /// The task could not start: the next denial tries again.
    pub(crate) fn not_running(&self) {
        self.running.store(false, Ordering::Release);
    }

    /// The live recorders, or `None` when there are none left: the task
    /// then ends (and the next reported denial starts it again).
    pub(crate) fn live(&self) -> Option<Vec<Arc<Recorder>>> {
        let mut recorders = self
            .recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        recorders.retain(|_, r| r.strong_count() > 0);
        let live: Vec<Arc<Recorder>> = recorders.values().filter_map(Weak::upgrade).collect();
        if live.is_empty() {
            // Under the mutex: a recorder made after this is seen by the
            // next denial's `running()` check.
            self.not_running();
            None
        } else {
            Some(live)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcomes::Registry;

    #[tokio::test]
    async fn denials_age_out_of_the_window_and_counts_are_deltas() {
        let registry = Registry::default();
        let outcomes = registry.outcomes("gcra", "api");
        let reporters = Arc::new(Reporters::default());
        let window = Duration::from_millis(600);
        let recorder = Reporters::recorder(&reporters, "gcra", "api", window, outcomes.clone());
        assert!(reporters.claim_start() && !reporters.claim_start());
        let same = Reporters::recorder(&reporters, "gcra", "api", window, outcomes.clone());
        assert!(Arc::ptr_eq(&recorder, &same));
        for _ in 0..3 {
            recorder.denied(b"user:1");
            outcomes.denied();
        }
        outcomes.allowed();
        let report = recorder.report();
        assert_eq!(report.summary.entries[0].subject, b"user:1");
        assert_eq!(report.summary.entries[0].count, 3);
        assert!(report.covered > Duration::ZERO && report.covered < window);
        assert_eq!(report.counts, [1, 3, 0, 0]);
        assert_eq!(report.recent.entries[0].count, 3);
        let again = recorder.report();
        assert_eq!(again.counts, [0, 0, 0, 0]);
        assert_eq!(again.summary.total, 3, "the window keeps them");
        assert_eq!(again.recent.total, 0, "recent: since the last report");
        std::thread::sleep(window);
        recorder.denied(b"user:2");
        let report = recorder.report();
        assert_eq!(report.summary.total, 1, "user:1's denials aged out");
        assert_eq!(report.summary.entries[0].subject, b"user:2");
        drop((recorder, same));
        assert!(reporters.live().is_none(), "no limiter left: the task ends");
        assert!(!reporters.running());
        let _again = Reporters::recorder(&reporters, "gcra", "api", window, outcomes);
        assert!(
            reporters.claim_start(),
            "a new limiter's denial starts it again"
        );
    }

    /// What recording a denial costs, in nanoseconds, and what one
    /// publication costs the process and carries. Prints, asserts nothing
    /// (a timing assertion would flake on a busy machine):
    ///
    /// `cargo test --release --lib throttled::recorder::tests::denial_costs -- --ignored --nocapture`
    #[test]
    #[ignore = "a micro-benchmark, run by hand"]
    fn denial_costs() {
        use std::hint::black_box;

        const N: usize = 1_000_000;
        /// The best of five rounds of `N` calls of `f(i)`: the least
        /// disturbed by the machine.
        fn per_op(f: impl Fn(usize)) -> f64 {
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    for i in 0..N {
                        f(i);
                    }
                    t.elapsed().as_nanos() as f64 / N as f64
                })
                .fold(f64::INFINITY, f64::min)
        }
        let registry = Registry::default();
        let reporters = Arc::new(Reporters::default());
        let subjects: Vec<Vec<u8>> = (0..1000)
            .map(|i| format!("user:{i:06}").into_bytes())
            .collect();
        let recorder = Reporters::recorder(
            &reporters,
            "gcra",
            "bench",
            DEFAULT_WINDOW,
            registry.outcomes("gcra", "bench"),
        );
        let one = per_op(|_| recorder.denied(black_box(b"user:000042")));
        let many = per_op(|i| recorder.denied(black_box(&subjects[i % subjects.len()])));
        // One sketch's share: what the second (recent) sketch added.
        let sketch = Mutex::new(SpaceSaving::new(CAPACITY));
        let offer = |subject: &[u8]| {
            sketch
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .offer(subject);
        };
        let offer_one = per_op(|_| offer(black_box(b"user:000042")));
        let offer_many = per_op(|i| offer(black_box(&subjects[i % subjects.len()])));
        let t = Instant::now();
        let report = recorder.report();
        let report_us = t.elapsed().as_secs_f64() * 1e6;
        let bytes = super::super::wire::encode(std::slice::from_ref(&report)).len();
        println!(
            "denied(): one subject {one:.0} ns, 1000 subjects in turn {many:.0} ns \
             (one sketch's offer under a mutex: {offer_one:.0} ns, {offer_many:.0} ns); \
             report(): {report_us:.0} µs, {bytes} bytes stored ({} + {} subjects)",
            report.summary.entries.len(),
            report.recent.entries.len()
        );
    }
}
