//! The degraded local mode ([`FailurePolicy::Local`](crate::FailurePolicy::Local)):
//! while Redis cannot decide a subject, each process decides it from a
//! limiter of its own, of the same algorithm, with its share of the quota —
//! so that `n` processes declared as `n` instances admit about the quota
//! between them, not `n` times it, nor nothing.
//!
//! The state is this process's alone, kept per limiter and subject (at
//! most [`MAX_SUBJECTS`], least recently used evicted first) and timed by
//! the process's monotonic clock. It follows Redis: every reply to a check
//! of the subject ([`LocalLimits::learn`]) sets it to this process's part of
//! what Redis said was left — the remaining units divided by the instances,
//! rounded down, used up as Redis' are freed — and records whether the
//! subject is blocked (until when) and whether its own quota (an override)
//! applied. A local decision then keeps the block and the override, and
//! starts from there, not from a full share. What is admitted locally is
//! *unsettled*: the next check that reaches Redis first counts it there
//! (see `local/degraded.rs`), so Redis never decides for this process
//! again without it; and the process stays *restrained* to its part until
//! Redis is as strict (see [`Subject`]), since the other processes' local
//! admissions may not be counted there yet.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::limit::algorithm::{Algorithm, Local, LocalState, LocalVerdict};
use crate::limit::decision::{Decision, Settled};
use crate::limit::quota::Quota;
use crate::limit::script::LimitSpec;
use crate::policy::BypassReason;

mod degraded;

/// Subjects whose local state one limiter keeps at most.
pub const MAX_SUBJECTS: u64 = 100_000;

/// One limiter's local limiters, by subject.
pub(crate) struct LocalLimits {
    instances: NonZeroU32,
    epoch: Instant,
    states: moka::sync::Cache<Box<[u8]>, Arc<Mutex<Subject>>>,
}

impl std::fmt::Debug for LocalLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimits")
            .field("instances", &self.instances)
            .finish_non_exhaustive()
    }
}

/// One subject's local limiter and what Redis last said of the subject.
#[derive(Debug, Default)]
pub(crate) struct Subject {
    state: LocalState,
    /// Blocked until then (µs on the limiter's clock; `u64::MAX`: until
    /// Redis says otherwise), as the last reply said.
    blocked_until: Option<u64>,
    /// The subject's own quota, as the last reply said, and until when it
    /// holds (`None`: until Redis says otherwise).
    own: Option<(Quota, Option<u64>)>,
    /// Units admitted locally that Redis has not counted yet.
    unsettled: u64,
    /// Set by a local admission: until Redis has no more left than every
    /// instance having what this process has left here, this process keeps
    /// to its part even when Redis answers again — the other instances'
    /// local admissions may not be counted in Redis yet (see
    /// [`LocalLimits::learn`]).
    restrained: bool,
}

/// A local decision before it is a [`Decision`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verdict {
    pub(crate) verdict: LocalVerdict,
    /// This process's share of the quota in force.
    pub(crate) share: Quota,
    pub(crate) blocked: bool,
    pub(crate) overridden: bool,
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

/// `d` as a number of microseconds.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
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
    pub(crate) fn state(&self, subject: &[u8]) -> Arc<Mutex<Subject>> {
        self.states
            .get_with(subject.into(), || Arc::new(Mutex::new(Subject::default())))
    }

    /// Microseconds since this limiter's epoch, plus the longest period:
    /// a time a period before any reading is still a time (a seed's
    /// stamps are).
    pub(crate) fn now_us(&self) -> u64 {
        micros(self.epoch.elapsed().saturating_add(Quota::MAX_PERIOD))
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

    /// What a local check of `cost` at `now` under `share` is given.
    fn at(algorithm: Algorithm, share: Quota, now: u64, cost: u64, consume: bool) -> Local {
        Local {
            now,
            cost,
            limit: u64::from(share.limit().get()),
            capacity: u64::from(algorithm.capacity(&share)),
            period: micros(share.period()).max(1),
            consume,
        }
    }

    /// Takes in what Redis decided for `subject` under `spec` (`d`, from a
    /// reply; `taken`: the units it admitted and counted): the block and
    /// the override it found, and this process's part of what it says is
    /// left — `remaining / instances` of the share, rounded down, freed
    /// when Redis' units are — with the units admitted here that Redis has
    /// not counted yet on top. Restrained (see [`Subject`]), the state
    /// stays as it is, taking what Redis admitted, until Redis is as
    /// strict.
    pub(crate) fn learn(&self, subject: &mut Subject, spec: &LimitSpec, d: &Decision, taken: u32) {
        let now = self.now_us();
        let settled = match d.settled {
            Settled::For(left) => Some(now.saturating_add(micros(left))),
            Settled::Unbounded | Settled::Unknown => None,
        };
        // A block ends when the same request could next be admitted, or
        // when its key expires; not known: until Redis says otherwise.
        let blocked_until = d.blocked.then(|| {
            d.retry_after
                .map(|wait| now.saturating_add(micros(wait)))
                .or(settled)
                .unwrap_or(u64::MAX)
        });
        // Blocked too, `settled` may be the block's end, not the override's.
        let own = d
            .overridden
            .then_some((d.quota, settled.filter(|_| !d.blocked)));
        let quota = if d.overridden { d.quota } else { spec.quota };
        let share = self.share(quota);
        let at = Self::at(spec.algorithm, share, now, 0, false);
        let left = (u64::from(d.remaining) / u64::from(self.instances.get())).min(at.capacity);
        let mut reset = micros(d.reset_after);
        // Nothing in use in Redis (reset 0): nothing taken, whatever the
        // rounding.
        let taken_in_redis = if reset == 0 { 0 } else { at.capacity - left };
        if subject.unsettled > 0 && reset == 0 {
            // Redis says nothing is in use, but this process's own units
            // are not in Redis yet: they stay a period.
            reset = at.period;
        }
        subject.blocked_until = blocked_until;
        subject.own = own;
        let cost = (taken_in_redis + subject.unsettled).min(at.capacity);
        let mut seeded = LocalState {
            offset: subject.state.offset,
            ..LocalState::default()
        };
        (spec.algorithm.rules().seed)(&mut seeded, Local { cost, ..at }, reset);
        let rules = spec.algorithm.rules();
        if subject.restrained {
            // What Redis admitted here counts in full against this
            // process's part (in Redis' word it counts a quarter, say).
            if taken > 0 {
                let at = Local {
                    cost: u64::from(taken),
                    consume: true,
                    ..at
                };
                (rules.local)(&mut subject.state, at);
            }
            // Redis is as strict when what it has left is no more than
            // every instance having this process's part left: then the
            // others' local admissions are counted there (or were none).
            // Rounded parts would end it early: 3 left among 4 is a part
            // of 0, as is a part spent.
            let left_here = (rules.local)(&mut subject.state, at).remaining;
            if u64::from(d.remaining) > left_here.saturating_mul(u64::from(self.instances.get())) {
                return;
            }
        }
        subject.restrained = false;
        subject.state = seeded;
    }

    /// A local denial of `subject`'s check of `cost` while it is
    /// restrained (see [`Subject`]) and its part is spent: Redis need not
    /// be asked.
    pub(crate) fn restraint(
        &self,
        subject: &mut Subject,
        spec: &LimitSpec,
        cost: u32,
    ) -> Option<Verdict> {
        if !subject.restrained {
            return None;
        }
        Some(self.check(subject, spec, cost, false)).filter(|v| !v.verdict.allowed)
    }

    /// `subject`'s check of `cost` under `spec`, locally: denied while a
    /// block is known; else decided under this process's share of the
    /// quota in force (the subject's own, while known) and, when
    /// `consume` and admitted, taken from the share and left unsettled.
    pub(crate) fn check(
        &self,
        subject: &mut Subject,
        spec: &LimitSpec,
        cost: u32,
        consume: bool,
    ) -> Verdict {
        let now = self.now_us();
        if subject
            .own
            .is_some_and(|(_, until)| until.is_some_and(|u| u <= now))
        {
            subject.own = None;
        }
        let quota = subject.own.map_or(spec.quota, |(own, _)| own);
        let share = self.share(quota);
        let at = Self::at(spec.algorithm, share, now, u64::from(cost), consume);
        let blocked = subject.blocked_until.filter(|&until| until > now);
        let verdict = match blocked {
            Some(until) => LocalVerdict {
                allowed: false,
                remaining: 0,
                retry_after_us: (until < u64::MAX).then(|| until - now),
                reset_after_us: 0,
                // A denial states its wait (`decision` uses retry_after).
                more_after_us: 0,
            },
            None => {
                let verdict = (spec.algorithm.rules().local)(&mut subject.state, at);
                if verdict.allowed && consume {
                    subject.unsettled += u64::from(cost);
                    subject.restrained = true;
                }
                verdict
            }
        };
        Verdict {
            verdict,
            share,
            blocked: blocked.is_some(),
            overridden: subject.own.is_some(),
        }
    }

    /// The units admitted locally that Redis has not counted yet and that
    /// still count here (those that left the share's window no longer
    /// count in Redis either), taken out of `subject`: the caller counts
    /// them in Redis, or gives them back with [`unsettle`](Self::unsettle).
    pub(crate) fn settle(&self, subject: &mut Subject, spec: &LimitSpec) -> u64 {
        if subject.unsettled == 0 {
            return 0;
        }
        let quota = subject.own.map_or(spec.quota, |(own, _)| own);
        let at = Self::at(spec.algorithm, self.share(quota), self.now_us(), 0, false);
        let left = (spec.algorithm.rules().local)(&mut subject.state, at).remaining;
        let units = subject.unsettled.min(at.capacity.saturating_sub(left));
        subject.unsettled = 0;
        units
    }

    /// Gives back unsettled units [`settle`](Self::settle) took, Redis not
    /// having counted them.
    pub(crate) fn unsettle(subject: &mut Subject, units: u64) {
        subject.unsettled += units;
    }

    /// Whether `subject` is restrained (a cheap look: no state is made).
    pub(crate) fn is_restrained(&self, subject: &[u8]) -> bool {
        self.states
            .get(subject)
            .is_some_and(|s| lock(&s).restrained)
    }

    /// Whether `subject` has units admitted locally that Redis has not
    /// counted (a cheap look: no state is made).
    pub(crate) fn has_unsettled(&self, subject: &[u8]) -> bool {
        self.states
            .get(subject)
            .is_some_and(|s| lock(&s).unsettled > 0)
    }
}

/// Locks a state; a poisoned lock (a panic while it was held) still holds
/// a usable state.
pub(crate) fn lock(state: &Mutex<Subject>) -> MutexGuard<'_, Subject> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A local decision, as a [`Decision`]: made without Redis
/// ([`bypassed`](Decision::bypassed) says why) and [`local`](Decision::local).
/// `reason` `None`: a restraint's denial, Redis answering (see [`Subject`]).
pub(crate) fn decision(v: Verdict, algorithm: Algorithm, reason: Option<BypassReason>) -> Decision {
    let mut d = Decision::bypass(v.share, algorithm.capacity(&v.share), BypassReason::Timeout);
    d.bypassed = reason;
    d.local = true;
    d.allowed = v.verdict.allowed;
    d.remaining = u32::try_from(v.verdict.remaining).unwrap_or(u32::MAX);
    d.retry_after = v.verdict.retry_after_us.map(Duration::from_micros);
    d.reset_after = Duration::from_micros(v.verdict.reset_after_us);
    d.more_after = match d.retry_after {
        Some(wait) if !d.allowed => wait,
        _ => Duration::from_micros(v.verdict.more_after_us),
    };
    d.blocked = v.blocked;
    d.overridden = v.overridden;
    d.settled = Settled::Unknown;
    d
}

#[cfg(test)]
mod tests;
