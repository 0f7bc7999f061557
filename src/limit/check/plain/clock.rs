//! The server's clock, as this process can tell it: for a decision made
//! from plain commands, which cannot read `TIME` in the step that counts
//! (a script does), but must know which window it counts in.
//!
//! Every second or so one of those pipelines carries a `TIME` as well; the
//! server's answer, with when it was sent and received on this process's
//! monotonic clock, is a sample. The estimate of the server's time now is
//! the best sample moved on by the time since, and its error bound is
//! everything it cannot know: half the sample's round trip (the server read
//! its clock somewhere in it), the drift of this process's clock since
//! (bounded at 1 in 5,000), a millisecond for the expiry's resolution, and
//! how far the other recent samples — from other nodes, whose clocks may
//! differ — disagree with it. A check whose window the estimate cannot tell
//! within its bound is left to the script, which reads the server's own
//! clock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often a pipeline carries a `TIME`.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples older than this say nothing any more; with none younger, no
/// estimate (the script decides until a new sample comes).
const MAX_AGE: Duration = Duration::from_secs(10);
/// Samples kept (the newest).
const KEPT: usize = 8;
/// A monotonic clock may drift from the server's by at most 1 µs in this
/// many (200 ppm, twice what common oscillators are specified to).
const DRIFT_DIVISOR: u64 = 5_000;
/// The resolution of a key's expiry: whole milliseconds.
const RESOLUTION_US: u64 = 1_000;

/// The server's time now, within `error_us` either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// Microseconds since the Unix epoch.
    pub(crate) now_us: u64,
    pub(crate) error_us: u64,
}

/// One `TIME` reply, and when it was asked and answered here.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// The middle of the round trip.
    at: Instant,
    server_us: u64,
    half_round_trip_us: u64,
}

/// This process's estimate of the server's clock (one per
/// [`Cluster`](crate::Cluster) handle, shared by its limiters).
#[derive(Debug)]
pub(crate) struct ServerClock {
    samples: Mutex<VecDeque<Sample>>,
    /// A sample is being taken: no other pipeline carries a `TIME`.
    sampling: AtomicBool,
    /// When the next sample is due, µs after `origin`: read by every
    /// check without the lock.
    due_us: AtomicU64,
    origin: Instant,
}

impl Default for ServerClock {
    fn default() -> Self {
        ServerClock {
            samples: Mutex::default(),
            sampling: AtomicBool::new(false),
            due_us: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }
}

impl ServerClock {
    /// The server's time now, or `None` when no recent sample tells it.
    pub(crate) fn now(&self) -> Option<Estimate> {
        self.now_at(Instant::now())
    }

    fn now_at(&self, now: Instant) -> Option<Estimate> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        // On every check: two passes over at most KEPT samples, nothing
        // allocated.
        let estimates = || {
            samples.iter().filter_map(|s| {
                let age = now.checked_duration_since(s.at)?;
                if age > MAX_AGE {
                    return None;
                }
                let age_us = micros(age);
                Some(Estimate {
                    now_us: s.server_us.saturating_add(age_us),
                    error_us: s.half_round_trip_us + age_us / DRIFT_DIVISOR + RESOLUTION_US,
                })
            })
        };
        let best = estimates().min_by_key(|e| e.error_us)?;
        // The recent samples disagree by up to this (other nodes' clocks).
        let spread = estimates()
            .map(|e| e.now_us.abs_diff(best.now_us))
            .max()
            .unwrap_or(0);
        Some(Estimate {
            now_us: best.now_us,
            error_us: best.error_us + spread,
        })
    }

    /// Whether the caller should take a sample now (and then must call
    /// [`record`](Self::record) or [`abandon`](Self::abandon)): one at a
    /// time, once the newest is older than a second.
    pub(crate) fn claim_sample(&self) -> bool {
        micros(self.origin.elapsed()) >= self.due_us.load(Ordering::Relaxed)
            && !self.sampling.swap(true, Ordering::AcqRel)
    }

    /// A `TIME` reply (`server_us`) to a request sent at `sent` and
    /// answered at `received`.
    pub(crate) fn record(&self, sent: Instant, received: Instant, server_us: u64) {
        let round_trip = received.saturating_duration_since(sent);
        let sample = Sample {
            at: sent + round_trip / 2,
            server_us,
            half_round_trip_us: micros(round_trip).div_ceil(2),
        };
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
        drop(samples);
        let at = micros(sample.at.saturating_duration_since(self.origin));
        self.due_us
            .store(at.saturating_add(micros(SAMPLE_EVERY)), Ordering::Relaxed);
        self.sampling.store(false, Ordering::Release);
    }

    /// A claimed sample that was not taken (its request failed).
    pub(crate) fn abandon(&self) {
        self.sampling.store(false, Ordering::Release);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A `TIME` reply, `[seconds, microseconds]`, as µs since the epoch.
pub(crate) fn parse_time(reply: &redis::Value) -> Option<u64> {
    let redis::Value::Array(parts) = reply else {
        return None;
    };
    let number = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        redis::Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match parts.as_slice() {
        [s, us] => number(s)?.checked_mul(1_000_000)?.checked_add(number(us)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_sample_no_estimate_and_old_samples_expire() {
        let clock = ServerClock::default();
        assert_eq!(clock.now(), None);
        assert!(clock.claim_sample());
        // One sample at a time.
        assert!(!clock.claim_sample());
        let t0 = Instant::now();
        clock.record(t0, t0 + Duration::from_micros(400), 5_000_000);
        // Just taken: not due again.
        assert!(!clock.claim_sample());
        let e = clock.now_at(t0 + Duration::from_millis(200)).unwrap();
        // 200 ms after the middle of the round trip (200 µs in).
        assert_eq!(e.now_us, 5_000_000 + 199_800);
        // Half the round trip, the drift of 199.8 ms, the resolution.
        assert_eq!(e.error_us, 200 + 199_800 / DRIFT_DIVISOR + RESOLUTION_US);
        assert_eq!(clock.now_at(t0 + MAX_AGE + Duration::from_secs(1)), None);
    }

    #[test]
    fn samples_that_disagree_widen_the_bound() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        clock.record(t0, t0 + Duration::from_micros(100), 1_000_000);
        // Another node, 3 ms ahead, answered more slowly.
        clock.record(t0, t0 + Duration::from_micros(900), 1_003_400);
        let e = clock.now_at(t0 + Duration::from_micros(1_000)).unwrap();
        // The first (sampled 50 µs in) is the more precise.
        assert_eq!(e.now_us, 1_000_950);
        // Its own bound, plus how far the other is off: it says
        // 1_003_400 + 550.
        assert_eq!(e.error_us, 50 + RESOLUTION_US + 3_000);
    }

    #[test]
    fn time_replies_parse() {
        use redis::Value::{Array, BulkString};
        let reply = Array(vec![
            BulkString(b"1700000000".to_vec()),
            BulkString(b"123456".to_vec()),
        ]);
        assert_eq!(parse_time(&reply), Some(1_700_000_000_123_456));
        assert_eq!(parse_time(&Array(vec![])), None);
        assert_eq!(parse_time(&BulkString(b"1".to_vec())), None);
    }
}
