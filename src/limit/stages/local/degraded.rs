//! The pipeline's part in the degraded local mode
//! ([`FailurePolicy::Local`](crate::FailurePolicy::Local)): what every
//! reply teaches the local limiters, the local decision when Redis does
//! not answer, and the settling of what was admitted locally — counted in
//! Redis before Redis decides for this process again, so that a stall or
//! a flapping master never lets both paths spend the same quota.

use std::num::NonZeroU32;
use std::sync::{Arc, MutexGuard};

use super::{self as local, LocalLimits, Subject, Verdict};
use crate::error::Result;
use crate::limit::check::{Pipeline, Prepared, Round};
use crate::limit::decision::{Decision, MultiDecision};
use crate::limit::script::LimitSpec;
use crate::policy::BypassReason;

impl Pipeline<'_> {
    /// Whether a limit with local limiters has work before a check of
    /// `subject` is sent: units admitted locally that Redis has not
    /// counted yet, or a restraint (see [`Round::before_sending`]).
    pub(crate) fn local_work(&self, subject: &[u8]) -> bool {
        self.limiters
            .iter()
            .filter_map(|l| l.local())
            .any(|local| local.has_unsettled(subject) || local.is_restrained(subject))
    }

    fn has_unsettled(&self, subject: &[u8]) -> bool {
        self.limiters
            .iter()
            .filter_map(|l| l.local())
            .any(|local| local.has_unsettled(subject))
    }

    /// Counts in Redis, as a penalty of that many units, what each limit
    /// admitted locally for `subject` and still counts; what could not be
    /// counted stays unsettled, and the error is the check's.
    async fn settle(&self, subject: &[u8], specs: &[Arc<LimitSpec>]) -> Result<()> {
        for (limiter, spec) in self.limiters.iter().zip(specs) {
            let Some(local) = limiter.local() else {
                continue;
            };
            let state = local.state(subject);
            let units = local.settle(&mut local::lock(&state), spec);
            let Some(units) = NonZeroU32::new(u32::try_from(units).unwrap_or(u32::MAX)) else {
                continue;
            };
            // A penalty that timed out may have been counted: then it is
            // counted again later, which only ever takes more.
            if let Err(err) = limiter.penalize(subject, units).await {
                LocalLimits::unsettle(&mut local::lock(&state), u64::from(units.get()));
                return Err(err);
            }
        }
        Ok(())
    }
}

impl Round<'_> {
    /// The degraded local mode's part before a check of `subject` for
    /// `cost` is sent: a consuming check first counts in Redis what was
    /// admitted here locally (failing that, it fails as the check would).
    /// A restrained subject whose part is spent then asks Redis only what
    /// it would say — nothing taken — so as to learn whether the restraint
    /// ends, and is denied here if not. `Some`: the answer; `None`: send
    /// the check.
    pub(crate) async fn before_sending(
        &self,
        subject: &[u8],
        cost: u32,
    ) -> Option<Result<MultiDecision>> {
        let pipeline = self.pipeline;
        if self.consume
            && pipeline.has_unsettled(subject)
            && let Err(err) = pipeline.settle(subject, self.specs).await
        {
            return Some(self.fail(err, subject, cost));
        }
        // Restrained and spent, or nothing to do here.
        self.restrained(subject, cost).map(drop)?;
        let peek = Round::new(pipeline, self.specs, false);
        let invocation = match peek.prepare(subject, cost) {
            Prepared::Send(invocation) => invocation,
            Prepared::Answered(answer) => return Some(answer),
        };
        let said = match invocation.send(pipeline.cluster(), self.specs).await {
            Ok(reply) => peek.conclude(subject, cost, None, Ok(reply)),
            Err(err) => return Some(self.fail(err, subject, cost)),
        };
        match self.restrained(subject, cost) {
            Some(denied) => {
                if self.consume {
                    for (limiter, d) in pipeline.limiters.iter().zip(&denied.decisions) {
                        if !d.allowed {
                            limiter.denied(subject, false);
                        }
                    }
                }
                Some(Ok(denied))
            }
            None if self.consume => None,
            None => Some(said),
        }
    }

    /// Every limit with local limiters takes in what Redis decided for
    /// `subject`'s check of `cost` (see [`LocalLimits::learn`]): `allowed`,
    /// every limit admitted it.
    pub(crate) fn learn(&self, subject: &[u8], cost: u32, allowed: bool, decisions: &[Decision]) {
        let limits = self.pipeline.limiters.iter().zip(self.specs);
        for ((limiter, spec), d) in limits.zip(decisions) {
            if let Some(local) = limiter.local() {
                // Counted in Redis: admitted, consumed, and not a shadow
                // limit's would-be denial.
                let taken = if allowed && self.consume && !d.would_deny {
                    cost
                } else {
                    0
                };
                local.learn(&mut local::lock(&local.state(subject)), spec, d, taken);
            }
        }
    }

    /// A restrained subject's denial, without Redis (see
    /// [`LocalLimits::restraint`]), when every limit decides locally and
    /// one of them has spent its part.
    pub(crate) fn restrained(&self, subject: &[u8], cost: u32) -> Option<MultiDecision> {
        let limiters = self.pipeline.limiters;
        let mut locals = limiters.iter().map(|l| l.local());
        if !locals.clone().all(|l| l.is_some())
            || !locals.any(|l| l.is_some_and(|l| l.is_restrained(subject)))
        {
            return None;
        }
        let locals: Vec<&LocalLimits> = limiters.iter().filter_map(|l| l.local()).collect();
        let verdicts: Vec<Option<Verdict>> = locals
            .iter()
            .zip(self.specs)
            .map(|(local, spec)| {
                local.restraint(&mut local::lock(&local.state(subject)), spec, cost)
            })
            .collect();
        if verdicts.iter().all(Option::is_none) {
            return None;
        }
        let decisions = verdicts
            .into_iter()
            .zip(locals.iter().zip(self.specs))
            .map(|(verdict, (local, spec))| {
                // The limits not spent: what they would say, nothing taken.
                let verdict = verdict.unwrap_or_else(|| {
                    local.check(&mut local::lock(&local.state(subject)), spec, cost, false)
                });
                local::decision(verdict, spec.algorithm, None)
            })
            .collect();
        Some(MultiDecision {
            allowed: false,
            decisions,
        })
    }

    /// Every limit with local limiters decides from its share, all or
    /// nothing (the others, fail-open, admit): their states are locked
    /// together, in one global order, checked, then consumed if all admit.
    pub(crate) fn decide_locally(
        &self,
        subject: &[u8],
        cost: u32,
        reason: BypassReason,
    ) -> MultiDecision {
        let limiters = self.pipeline.limiters;
        let states: Vec<_> = limiters
            .iter()
            .map(|l| l.local().map(|local| (local, local.state(subject))))
            .collect();
        let mut order: Vec<usize> = (0..states.len()).filter(|&i| states[i].is_some()).collect();
        order.sort_by_key(|&i| states[i].as_ref().map(|(_, s)| Arc::as_ptr(s)));
        let mut guards: Vec<Option<MutexGuard<'_, Subject>>> =
            states.iter().map(|_| None).collect();
        for i in order {
            guards[i] = states[i].as_ref().map(|(_, state)| local::lock(state));
        }
        let check = |guards: &mut [Option<MutexGuard<'_, Subject>>], consume: bool| {
            states
                .iter()
                .zip(guards.iter_mut())
                .zip(self.specs)
                .map(|((local, guard), spec)| {
                    let (local, _) = local.as_ref()?;
                    let state: &mut Subject = guard.as_mut()?;
                    Some(local.check(state, spec, cost, consume))
                })
                .collect::<Vec<Option<Verdict>>>()
        };
        let mut verdicts = check(&mut guards, false);
        let allowed = verdicts.iter().flatten().all(|v| v.verdict.allowed);
        if allowed && self.consume {
            // What each leaves after taking the request, as Redis reports.
            verdicts = check(&mut guards, true);
        }
        let decisions = verdicts
            .into_iter()
            .zip(self.specs)
            .map(|(verdict, spec)| match verdict {
                Some(verdict) => local::decision(verdict, spec.algorithm, Some(reason)),
                None => Decision::bypass(spec.quota, spec.capacity, reason),
            })
            .collect();
        MultiDecision { allowed, decisions }
    }
}
