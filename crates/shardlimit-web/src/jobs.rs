//! Walks too long for a page (counting, auditing a whole namespace), run in
//! the background and shown from their last result.
//!
//! A page view that finds the last result missing or older than the
//! refresh age starts one walk (never two at once), waits a short while for
//! it — enough for a small namespace — and otherwise renders what it has,
//! with its age. The walk is a task holding the job, so it finishes even if
//! the page that started it is gone, and nothing runs once no one asks.
//!
//! The last *complete* walk is kept beside the newest: when the newest
//! failed or could not walk every master (an outage), the page shows the
//! last complete one, with its age and why the newest fell short — never a
//! partial count as if it were the whole, nor "0 of 0 scanned".

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// One background walk and its last result.
pub(super) struct Job<T> {
    state: Mutex<State<T>>,
    finished: watch::Sender<u64>,
}

struct State<T> {
    last: Option<Arc<Finished<T>>>,
    last_complete: Option<Arc<Finished<T>>>,
    running_since: Option<Instant>,
}

/// A walk's result that may have missed part of the namespace.
pub(super) trait Whole {
    /// Why it is not whole (masters not fully walked, with their errors);
    /// `None` when it is.
    fn shortfall(&self) -> Option<String>;
}

/// `127.0.0.1:7000: scan timed out after 250ms; …` for masters not fully
/// walked.
fn not_walked(incomplete: &[(String, String)]) -> Option<String> {
    (!incomplete.is_empty()).then(|| {
        let each: Vec<String> = incomplete
            .iter()
            .map(|(node, error)| format!("{node}: {error}"))
            .collect();
        format!("not every master was walked: {}", each.join("; "))
    })
}

impl Whole for shardlimit::admin::CountReport {
    fn shortfall(&self) -> Option<String> {
        not_walked(&self.incomplete)
    }
}

impl Whole for shardlimit::admin::AuditReport {
    fn shortfall(&self) -> Option<String> {
        not_walked(&self.incomplete)
    }
}

/// A walk's outcome.
pub(super) struct Finished<T> {
    /// The result, or the error's text.
    pub(super) result: Result<T, String>,
    finished_instant: Instant,
    /// How long it took.
    pub(super) took: Duration,
}

impl<T> Finished<T> {
    /// Time since it finished.
    pub(super) fn age(&self) -> Duration {
        self.finished_instant.elapsed()
    }
}

impl<T: Whole> Finished<T> {
    /// Why it is not a complete result; `None` when it is.
    fn failure(&self) -> Option<String> {
        match &self.result {
            Ok(report) => report.shortfall(),
            Err(err) => Some(err.clone()),
        }
    }
}

/// What a page shows: the last complete result, the newest when it fell
/// short, and whether a newer one is coming.
pub(super) struct Snapshot<T> {
    pub(super) last: Option<Arc<Finished<T>>>,
    pub(super) last_complete: Option<Arc<Finished<T>>>,
    pub(super) running_for: Option<Duration>,
}

impl<T: Whole> Snapshot<T> {
    /// The result to show: the last complete one, and its walk.
    pub(super) fn shown(&self) -> Option<(&Finished<T>, &T)> {
        let last = self.last_complete.as_deref()?;
        Some((last, last.result.as_ref().ok()?))
    }

    /// The newest walk when it failed or fell short, and why.
    pub(super) fn newest_failed(&self) -> Option<(&Finished<T>, String)> {
        let newest = self.last.as_deref()?;
        Some((newest, newest.failure()?))
    }
}

impl<T: Whole + Send + Sync + 'static> Job<T> {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Job {
            state: Mutex::new(State {
                last: None,
                last_complete: None,
                running_since: None,
            }),
            finished: watch::channel(0).0,
        })
    }

    /// The last result; starts `walk` first if that is missing, older than
    /// `refresh`, or `force`d, and no walk is running, then waits up to
    /// `wait` for it.
    pub(super) async fn get<F>(
        self: &Arc<Self>,
        refresh: Duration,
        force: bool,
        wait: Duration,
        walk: impl FnOnce() -> F,
    ) -> Snapshot<T>
    where
        F: Future<Output = shardlimit::Result<T>> + Send + 'static,
    {
        let mut finished = self.finished.subscribe();
        let started = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let stale = state.last.as_ref().is_none_or(|l| l.age() >= refresh);
            if (stale || force) && state.running_since.is_none() {
                state.running_since = Some(Instant::now());
                Some(walk())
            } else {
                None
            }
        };
        if let Some(walk) = started {
            let job = self.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let result = walk.await.map_err(|err| err.to_string());
                let done = Finished {
                    result,
                    finished_instant: Instant::now(),
                    took: start.elapsed(),
                };
                {
                    let done = Arc::new(done);
                    let mut state = job.state.lock().unwrap_or_else(PoisonError::into_inner);
                    if done.failure().is_none() {
                        state.last_complete = Some(done.clone());
                    }
                    state.last = Some(done);
                    state.running_since = None;
                }
                job.finished.send_modify(|n| *n += 1);
            });
            // Marked seen so that only this walk's end wakes us.
            finished.borrow_and_update();
            let _ = tokio::time::timeout(wait, finished.changed()).await;
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Snapshot {
            last: state.last.clone(),
            last_complete: state.last_complete.clone(),
            running_for: state.running_since.map(|s| s.elapsed()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Odd numbers stand for walks that missed a master.
    impl Whole for u32 {
        fn shortfall(&self) -> Option<String> {
            (self % 2 == 1).then(|| format!("walk {self} missed a master"))
        }
    }

    #[tokio::test]
    async fn one_walk_at_a_time_and_results_are_reused_until_stale() {
        let job: Arc<Job<u32>> = Job::new();
        let runs = Arc::new(AtomicU32::new(0));
        let walk = |runs: Arc<AtomicU32>, delay: u64| {
            move || async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
            }
        };
        let hour = Duration::from_secs(3600);
        let first = job
            .get(hour, false, Duration::from_secs(5), walk(runs.clone(), 10))
            .await;
        assert_eq!(first.last.unwrap().result, Ok(1));
        assert!(first.running_for.is_none());
        // Fresh: no second walk.
        let again = job
            .get(hour, false, Duration::from_secs(5), walk(runs.clone(), 10))
            .await;
        assert_eq!(again.last.unwrap().result, Ok(1));
        // A slow walk is not waited for beyond `wait`, and is not doubled.
        let slow = job
            .get(
                hour,
                true,
                Duration::from_millis(10),
                walk(runs.clone(), 300),
            )
            .await;
        assert_eq!(slow.last.unwrap().result, Ok(1), "the old result meanwhile");
        assert!(slow.running_for.is_some());
        let meanwhile = job
            .get(Duration::ZERO, true, Duration::ZERO, walk(runs.clone(), 0))
            .await;
        assert!(meanwhile.running_for.is_some());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = job
            .get(hour, false, Duration::ZERO, walk(runs.clone(), 0))
            .await;
        assert_eq!(after.last.unwrap().result, Ok(2));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_walk_that_falls_short_leaves_the_last_complete_one_shown() {
        let job: Arc<Job<u32>> = Job::new();
        let wait = Duration::from_secs(5);
        let walk = |result: shardlimit::Result<u32>| move || async move { result };
        let first = job.get(Duration::ZERO, true, wait, walk(Ok(2))).await;
        assert_eq!(first.shown().map(|(_, n)| *n), Some(2));
        assert!(first.newest_failed().is_none());
        let short = job.get(Duration::ZERO, true, wait, walk(Ok(3))).await;
        assert_eq!(short.shown().map(|(_, n)| *n), Some(2), "not the partial 3");
        let (newest, why) = short.newest_failed().unwrap();
        assert_eq!(newest.result, Ok(3));
        assert_eq!(why, "walk 3 missed a master");
        let timeout = shardlimit::Error::Timeout {
            op: "cluster slots".into(),
            slot: None,
            timeout: Duration::from_millis(250),
        };
        let failed = job
            .get(Duration::ZERO, true, wait, walk(Err(timeout)))
            .await;
        assert_eq!(failed.shown().map(|(_, n)| *n), Some(2));
        let (_, why) = failed.newest_failed().unwrap();
        assert!(why.contains("cluster slots timed out"), "{why}");
        let never: Arc<Job<u32>> = Job::new();
        let partial = never.get(Duration::ZERO, true, wait, walk(Ok(1))).await;
        assert!(
            partial.shown().is_none(),
            "a partial walk is never shown as the whole"
        );
        assert!(partial.newest_failed().is_some());
    }
}
