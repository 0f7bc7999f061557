//! The degraded local mode ([`FailurePolicy::Local`]): while Redis cannot
//! decide a subject, each process decides it from a limiter of its own,
//! of the same algorithm, with its share of the quota — so that `n`
//! processes declared as `n` instances admit about the quota between them,
//! not `n` times it, nor nothing.
//!
//! The state is this process's alone, kept per limiter and subject (at
//! most [`MAX_SUBJECTS`], least recently used evicted first) and timed by
//! the process's monotonic clock; what Redis holds is not read, and what
//! is admitted locally is not written to Redis afterwards.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::algorithm::{Algorithm, Local, LocalState, LocalVerdict};
use super::decision::{Decision, Settled};
use super::quota::Quota;
use super::script::LimitSpec;
use crate::error::{Error, Result};
use crate::policy::BypassReason;

/// Subjects whose local state one limiter keeps at most.
pub const MAX_SUBJECTS: u64 = 100_000;

/// One limiter's local limiters, by subject.
pub(crate) struct LocalLimits {
    instances: NonZeroU32,
    epoch: Instant,
    states: moka::sync::Cache<Box<[u8]>, Arc<Mutex<LocalState>>>,
}

impl std::fmt::Debug for LocalLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimits")
            .field("instances", &self.instances)
            .finish_non_exhaustive()
    }
}

/// `n` split `instances` ways, rounded up (so that no share is 0).
fn split(n: NonZeroU32, instances: NonZeroU32) -> NonZeroU32 {
    n.get()
        .div_ceil(instances.get())
        .try_into()
        .unwrap_or(NonZeroU32::MIN)
}

/// This process's share of `quota` among `instances`: the limit and the
/// burst divided, rounded up; the same period.
pub(crate) fn share(quota: Quota, instances: NonZeroU32) -> Quota {
    let limit = split(quota.limit(), instances);
    let shared = Quota::with_period(limit, quota.period());
    if quota.has_custom_burst() {
        shared.allow_burst(split(quota.burst(), instances).max(limit))
    } else {
        shared
    }
}

impl LocalLimits {
    pub(crate) fn new(instances: NonZeroU32) -> Self {
        LocalLimits {
            instances,
            epoch: Instant::now(),
            states: moka::sync::Cache::new(MAX_SUBJECTS),
        }
    }

    /// The state of `subject`, made when first needed.
    pub(crate) fn state(&self, subject: &[u8]) -> Arc<Mutex<LocalState>> {
        self.states.get_with(subject.into(), || {
            Arc::new(Mutex::new(LocalState::default()))
        })
    }

    /// Microseconds since this limiter's epoch.
    pub(crate) fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn share(&self, quota: Quota) -> Quota {
        share(quota, self.instances)
    }

    /// This process's share of `spec`'s quota is a quota its algorithm
    /// takes (rounding up may make a GCRA's refill too long).
    pub(crate) fn validate(&self, spec: &LimitSpec) -> Result<()> {
        spec.algorithm
            .validate(&self.share(spec.quota))
            .map(drop)
            .map_err(|err| Error::Config {
                field: "failure_policy",
                reason: format!(
                    "this process's share of the quota ({} instances) is not a valid quota: {err}",
                    self.instances
                ),
            })
    }

    /// `subject`'s check of `cost` under `spec`, locally: what it finds,
    /// and then (when `consume` and admitted) taken from `state`.
    pub(crate) fn check(
        &self,
        state: &mut LocalState,
        spec: &LimitSpec,
        cost: u32,
        consume: bool,
    ) -> LocalVerdict {
        let share = self.share(spec.quota);
        let at = Local {
            now: self.now_us(),
            cost: u64::from(cost),
            limit: u64::from(share.limit().get()),
            capacity: u64::from(spec.algorithm.capacity(&share)),
            period: u64::try_from(share.period().as_micros())
                .unwrap_or(u64::MAX)
                .max(1),
            consume,
        };
        (spec.algorithm.rules().local)(state, at)
    }
}

/// Locks a state; a poisoned lock (a panic while it was held) still holds
/// a usable state.
pub(crate) fn lock(state: &Mutex<LocalState>) -> MutexGuard<'_, LocalState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A local decision, as a [`Decision`]: made without Redis
/// ([`bypassed`](Decision::bypassed) says why) and [`local`](Decision::local).
pub(crate) fn decision(
    verdict: LocalVerdict,
    algorithm: Algorithm,
    share: Quota,
    reason: BypassReason,
) -> Decision {
    let mut d = Decision::bypass(share, algorithm.capacity(&share), reason);
    d.local = true;
    d.allowed = verdict.allowed;
    d.remaining = u32::try_from(verdict.remaining).unwrap_or(u32::MAX);
    d.retry_after = verdict.retry_after_us.map(Duration::from_micros);
    d.reset_after = Duration::from_micros(verdict.reset_after_us);
    d.more_after = match d.retry_after {
        Some(wait) if !d.allowed => wait,
        _ => Duration::from_micros(verdict.more_after_us),
    };
    d.settled = Settled::Unknown;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn a_share_is_the_quota_divided_rounded_up() {
        let q = Quota::per_minute(nz(100));
        assert_eq!(share(q, nz(4)), Quota::per_minute(nz(25)));
        assert_eq!(share(q, nz(3)).limit().get(), 34);
        assert_eq!(share(Quota::per_minute(nz(2)), nz(4)).limit().get(), 1);
        let burst = Quota::per_second(nz(10)).allow_burst(nz(40));
        let shared = share(burst, nz(4));
        assert_eq!((shared.limit().get(), shared.burst().get()), (3, 10));
    }

    /// Runs `cost`-unit checks of `algorithm` under `quota` at the given
    /// times (ms), returning which were admitted.
    fn run(algorithm: Algorithm, quota: Quota, at_ms: &[u64]) -> Vec<bool> {
        let spec = LimitSpec::new("t", algorithm, quota, false).unwrap();
        let local = LocalLimits::new(nz(1));
        let mut state = LocalState::default();
        at_ms
            .iter()
            .map(|&ms| {
                let share = local.share(spec.quota);
                let at = Local {
                    now: ms * 1000,
                    cost: 1,
                    limit: u64::from(share.limit().get()),
                    capacity: u64::from(algorithm.capacity(&share)),
                    period: u64::try_from(share.period().as_micros()).unwrap(),
                    consume: true,
                };
                (algorithm.rules().local)(&mut state, at).allowed
            })
            .collect()
    }

    #[test]
    fn every_algorithm_admits_its_limit_per_period_locally() {
        let q = Quota::per_second(nz(3));
        for algorithm in Algorithm::ALL {
            // Three at once, a fourth denied; after two periods, room again.
            let got = run(algorithm, q, &[0, 1, 2, 3, 2500, 2501]);
            assert_eq!(got, [true, true, true, false, true, true], "{algorithm}");
            // Never more than the limit in any second, whatever the pace.
            let times: Vec<u64> = (0..200).map(|i| i * 37).collect();
            let admitted: Vec<u64> = times
                .iter()
                .zip(run(algorithm, q, &times))
                .filter(|(_, ok)| *ok)
                .map(|(t, _)| *t)
                .collect();
            let most = admitted
                .iter()
                .map(|&t| admitted.iter().filter(|&&u| u >= t && u < t + 1000).count())
                .max()
                .unwrap();
            // Only the log is exact in every window; a fixed window (and
            // the counter's estimate) may admit up to twice the limit across
            // a boundary, and GCRA a full burst and then its rate, as in
            // Redis.
            let bound = if algorithm == Algorithm::SlidingLog {
                3
            } else {
                6
            };
            assert!(
                most <= bound,
                "{algorithm}: {most} in one second: {admitted:?}"
            );
            // And close to the limit over 7.4 s (the counter's weighted
            // estimate, rounded up, is the most cautious).
            let least = if algorithm == Algorithm::SlidingWindow {
                7 * 2
            } else {
                7 * 3 - 3
            };
            assert!(admitted.len() >= least, "{algorithm}: {}", admitted.len());
        }
    }

    #[test]
    fn a_local_denial_leaves_less_than_its_cost() {
        // Fast quotas (GCRA: a unit per 3 us, fractional per 7) at steps of
        // 1-4 us, costs 1-3: every denial says fewer are left than asked.
        let quotas = [
            Quota::with_period(nz(1000), Duration::from_millis(3)).allow_burst(nz(3)),
            Quota::with_period(nz(3), Duration::from_millis(7)),
        ];
        for algorithm in Algorithm::ALL {
            for quota in quotas {
                let quota = if algorithm == Algorithm::Gcra {
                    quota
                } else {
                    Quota::with_period(quota.limit().min(nz(3)), quota.period())
                };
                let mut state = LocalState::default();
                let mut now = 0;
                for i in 0..5000u64 {
                    now += 1 + i * 7 % 4;
                    let cost = 1 + (i * 5 % 3) as u32;
                    let at = Local {
                        now,
                        cost: u64::from(cost),
                        limit: u64::from(quota.limit().get()),
                        capacity: u64::from(algorithm.capacity(&quota)),
                        period: u64::try_from(quota.period().as_micros()).unwrap(),
                        consume: true,
                    };
                    let v = (algorithm.rules().local)(&mut state, at);
                    assert!(
                        v.allowed || v.remaining < u64::from(cost),
                        "{algorithm} {quota:?}: {v:?}"
                    );
                }
            }
        }
        // And every state of a GCRA of 3 per 7 ms (2333.3 us a unit): the
        // TAT any number of microseconds ahead, every cost.
        for ahead in 0..=7_001 {
            for cost in 1..=3 {
                let mut state = LocalState {
                    tat: 10_000 + ahead,
                    ..LocalState::default()
                };
                let at = Local {
                    now: 10_000,
                    cost,
                    limit: 3,
                    capacity: 3,
                    period: 7_000,
                    consume: false,
                };
                let v = (Algorithm::Gcra.rules().local)(&mut state, at);
                assert!(v.allowed || v.remaining < cost, "{ahead} us ahead: {v:?}");
            }
        }
    }

    #[test]
    fn a_local_admission_says_when_more_is_free() {
        // 3 per 600 ms, two admitted at 0 and 10 us: one unit more than the
        // one left is denied a microsecond before `more_after_us`, and
        // admitted at it (the counter states its reset, later).
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::SlidingLog,
            Algorithm::FixedWindow,
        ] {
            let mut state = LocalState::default();
            let at = |now, cost, consume| Local {
                now,
                cost,
                limit: 3,
                capacity: 3,
                period: 600_000,
                consume,
            };
            let local = algorithm.rules().local;
            assert!(local(&mut state, at(0, 1, true)).allowed);
            let v = local(&mut state, at(10, 1, true));
            assert_eq!((v.allowed, v.remaining), (true, 1), "{algorithm}");
            let more = 10 + v.more_after_us;
            assert!(
                !local(&mut state, at(more - 1, 2, false)).allowed,
                "{algorithm}: {v:?}"
            );
            assert!(
                local(&mut state, at(more, 2, false)).allowed,
                "{algorithm}: {v:?}"
            );
        }
    }

    #[test]
    fn a_denial_says_when_to_retry_and_a_peek_takes_nothing() {
        for algorithm in Algorithm::ALL {
            let spec = LimitSpec::new("t", algorithm, Quota::per_second(nz(2)), false).unwrap();
            let local = LocalLimits::new(nz(1));
            let mut state = LocalState::default();
            for _ in 0..2 {
                assert!(local.check(&mut state, &spec, 1, true).allowed);
            }
            let denied = local.check(&mut state, &spec, 1, true);
            assert!(!denied.allowed, "{algorithm}");
            let wait = denied.retry_after_us.unwrap();
            assert!(wait > 0 && wait <= 1_000_000, "{algorithm}: {wait}");
            // A cost above the limit is never admitted: no wait to give.
            let mut fresh = LocalState::default();
            let peek = local.check(&mut fresh, &spec, 2, false);
            assert!(peek.allowed && peek.remaining == 0, "{algorithm}: {peek:?}");
            assert!(
                local.check(&mut fresh, &spec, 2, true).allowed,
                "{algorithm}"
            );
        }
    }
}
