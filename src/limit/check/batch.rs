//! `check_many`: a batch of checks, the ones the deny cache cannot
//! answer sent as one pipeline per master — scripts, or for a fixed window
//! plain commands (`check/plain.rs`) — each result what
//! [`Pipeline::run`] would give for that request alone.

use futures::future::join_all;

use super::plain::{Judged, Settings};
use super::{Pipeline, Round, ScriptCall};
use crate::error::{Error, Result};
use crate::limit::decision::MultiDecision;
use crate::limit::stages::settings_cache::says_none;

impl Pipeline<'_> {
    /// Many subjects' checks: the ones the cache cannot answer go out as
    /// one pipeline per master (see
    /// [`RateLimiter::check_many`](RateLimiter::check_many)); each result is
    /// what [`run`](Self::run) would give for that request alone.
    pub(crate) async fn run_many<S: AsRef<[u8]>>(
        &self,
        requests: &[(S, u32)],
    ) -> Vec<Result<MultiDecision>> {
        if let [limiter] = self.limiters
            && limiter.plain().is_some()
        {
            return self.run_many_plain(requests).await;
        }
        let specs = self.specs();
        let round = Round::new(*self, &specs, true);
        let ticket = round.ticket();
        let mut results: Vec<Option<Result<MultiDecision>>> = Vec::with_capacity(requests.len());
        // The requests that go to Redis: their index, what they send and
        // what they knew of their subject's settings. A subject known to
        // have none is checked in the one-key form (see
        // `stages/settings_cache.rs`); the others tell the cache what they
        // find.
        let mut sent: Vec<(usize, ScriptCall, Settings<'_>)> = Vec::with_capacity(requests.len());
        // The requests the degraded local mode has work for before sending
        // (see `stages/local/degraded.rs`): each checked alone, as `run` does.
        let mut alone = Vec::new();
        for (i, (subject, cost)) in requests.iter().enumerate() {
            let subject = subject.as_ref();
            if self.local_work(subject) {
                results.push(None);
                alone.push(i);
                continue;
            }
            if let Some(answer) = round.screen(subject, *cost) {
                results.push(Some(answer));
                continue;
            }
            let settings = round.settings(subject);
            match round.script_call(subject, *cost, settings) {
                Ok(call) => {
                    results.push(None);
                    sent.push((i, call, settings));
                }
                Err(err) => results.push(Some(round.fail(err, subject, *cost))),
            }
        }
        let cluster = self.cluster();
        let mut replies = cluster
            .eval_many_with::<Vec<i64>, _>(
                round.script,
                sent.iter().map(|(_, call, _)| call.keys_and_args()),
                true,
            )
            .await;
        for ((i, _, settings), reply) in sent.iter().zip(&replies) {
            if let Settings::Read {
                cache: Some(cache),
                ticket,
            } = settings
                && says_none(reply)
            {
                cache.found_none(requests[*i].0.as_ref(), *ticket);
            }
        }
        // Checks whose slot is migrating: again, one key at a time.
        let migrating: Vec<usize> = (0..replies.len())
            .filter(|&j| matches!(&replies[j], Err(err) if err.is_tryagain()))
            .collect();
        let redone = join_all(migrating.iter().map(|&j| {
            let (subject, cost) = &requests[sent[j].0];
            round.run_migrating(subject.as_ref(), *cost, &sent[j].1)
        }))
        .await;
        for (j, reply) in migrating.into_iter().zip(redone) {
            replies[j] = reply;
        }
        for ((i, _, _), reply) in sent.iter().zip(replies) {
            let (subject, cost) = &requests[*i];
            results[*i] = Some(round.conclude(subject.as_ref(), *cost, ticket, reply));
        }
        let checked = self.check_alone(requests, &alone).await;
        for (i, result) in alone.into_iter().zip(checked) {
            results[i] = Some(result);
        }
        // eval_many answers every call it is given.
        in_order(results, round.script.name())
    }

    /// [`run_many`](Self::run_many) of a limiter whose checks may be plain
    /// commands: those that are go out as one pipeline per master (see
    /// `check/plain.rs`); the others (too near a window's edge, with work
    /// for the local mode) are checked as [`run`](Self::run) checks them.
    async fn run_many_plain<S: AsRef<[u8]>>(
        &self,
        requests: &[(S, u32)],
    ) -> Vec<Result<MultiDecision>> {
        let specs = self.specs();
        let round = Round::new(*self, &specs, true);
        let mut results: Vec<Option<Result<MultiDecision>>> =
            (0..requests.len()).map(|_| None).collect();
        let mut planned = Vec::with_capacity(requests.len());
        let mut alone = Vec::new();
        for (i, (subject, cost)) in requests.iter().enumerate() {
            let subject = subject.as_ref();
            if self.local_work(subject) {
                alone.push(i);
                continue;
            }
            if let Some(answer) = round.screen(subject, *cost) {
                results[i] = Some(answer);
                continue;
            }
            let settings = round.settings(subject);
            let keys = match round.plain_keys(subject, settings) {
                Some(Ok(keys)) => keys,
                Some(Err(err)) => {
                    results[i] = Some(round.fail(err, subject, *cost));
                    continue;
                }
                None => {
                    alone.push(i);
                    continue;
                }
            };
            match round.plan(*cost, &keys, settings) {
                Some(plan) => planned.push((i, keys, plan)),
                None => alone.push(i),
            }
        }
        let sent = std::time::Instant::now();
        let calls: Vec<_> = planned
            .iter()
            .map(|(_, keys, plan)| (keys, &plan.commands))
            .collect();
        let op = planned
            .first()
            .map_or("fixed_window_plain", |(_, _, p)| p.op());
        let replies = self.cluster().pipeline_many(op, &calls).await;
        drop(calls);
        // Judged at once; only the checks with something left to do (a
        // denial's give-back, the script) wait, all together.
        let mut unfinished = Vec::new();
        for ((i, keys, plan), replies) in planned.into_iter().zip(replies) {
            let (subject, cost) = (requests[i].0.as_ref(), requests[i].1);
            match round.judge(subject, cost, plan, sent, replies) {
                Judged::Reply(reply) => {
                    results[i] = Some(round.conclude(subject, cost, None, reply))
                }
                judged => unfinished.push((i, keys, judged)),
            }
        }
        let finished = join_all(unfinished.into_iter().map(|(i, keys, judged)| {
            let round = &round;
            async move {
                let (subject, cost) = (requests[i].0.as_ref(), requests[i].1);
                let reply = round.finish(subject, cost, &keys, judged).await;
                (i, round.conclude(subject, cost, None, reply))
            }
        }));
        let checked = self.check_alone(requests, &alone);
        let (finished, checked) = futures::join!(finished, checked);
        for (i, result) in finished {
            results[i] = Some(result);
        }
        for (i, result) in alone.into_iter().zip(checked) {
            results[i] = Some(result);
        }
        in_order(results, "check_many")
    }

    /// The requests `alone` of a batch, each checked as [`run`](Self::run)
    /// checks it, all at once.
    async fn check_alone<S: AsRef<[u8]>>(
        &self,
        requests: &[(S, u32)],
        alone: &[usize],
    ) -> Vec<Result<MultiDecision>> {
        join_all(alone.iter().map(|&i| {
            let (subject, cost) = &requests[i];
            self.run(subject.as_ref(), *cost, true)
        }))
        .await
    }
}

/// A batch's results in the order of its requests; one left unanswered (a
/// bug, not a reply) is an error of `op`, not a panic.
fn in_order(results: Vec<Option<Result<MultiDecision>>>, op: &str) -> Vec<Result<MultiDecision>> {
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(Error::UnexpectedReply {
                    op: op.to_owned().into(),
                    detail: "no reply for a request of the batch".into(),
                })
            })
        })
        .collect()
}
