//! `RateLimiter::check_many`: many subjects' checks in one go, one pipeline
//! per master.

use futures::future::join_all;

use super::decision::Decision;
use super::limiter::RateLimiter;
use super::script::{Invocation, parse_reply};
use crate::error::Result;

impl RateLimiter {
    /// Checks many `(subject, cost)` requests at once, for gateways and
    /// batch jobs: the requests are grouped by the master owning each
    /// subject's slot and sent as **one pipeline per master**, all masters
    /// at once (see [`Cluster::eval_many`](crate::Cluster::eval_many)).
    /// Each request is still its own atomic script, exactly what
    /// [`check_n`](Self::check_n) would send, and runs at most once; the
    /// results come back in the order of `requests`, one per request.
    ///
    /// Each result is what `check_n` would return for that request alone: a
    /// bad subject or cost is that request's error (nothing is sent for
    /// it), the failure policy applies per request, the deny cache (if any)
    /// answers the requests it can, and the outcomes are counted per
    /// request. Keep batches to hundreds or a few thousand requests: a
    /// batch is one write on each master's shared connection.
    ///
    /// ```no_run
    /// # async fn demo(api: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// let batch = [("user:1", 1), ("user:2", 3), ("user:3", 1)];
    /// for ((subject, _), decision) in batch.iter().zip(api.check_many(&batch).await) {
    ///     println!("{subject}: allowed {}", decision?.allowed);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check_many<S: AsRef<[u8]>>(&self, requests: &[(S, u32)]) -> Vec<Result<Decision>> {
        let spec = self.spec();
        let specs = [&*spec];
        let script = spec.algorithm.script();
        let cache = self.deny_cache();
        let ticket = cache.map(|c| c.ticket());
        let mut results: Vec<Option<Result<Decision>>> = Vec::with_capacity(requests.len());
        // The requests that go to Redis: their index and what they send.
        let mut sent: Vec<(usize, Invocation)> = Vec::with_capacity(requests.len());
        for (i, (subject, cost)) in requests.iter().enumerate() {
            let subject = subject.as_ref();
            let invocation = Invocation::new(self.cluster(), script, &specs, subject, *cost, true);
            match invocation {
                Err(err) => {
                    self.outcomes().error();
                    results.push(Some(Err(err)));
                }
                Ok(invocation) => {
                    match cache.and_then(|c| c.lookup(subject, spec.fingerprint, *cost)) {
                        Some(decision) => {
                            self.outcomes().denied_cached();
                            results.push(Some(Ok(decision)));
                        }
                        None => {
                            results.push(None);
                            sent.push((i, invocation));
                        }
                    }
                }
            }
        }
        let mut replies = self
            .cluster()
            .eval_many_unless_migrating::<Vec<i64>, _>(
                script,
                sent.iter().map(|(_, inv)| (&inv.keys, &inv.args)),
            )
            .await;
        // Checks whose slot is migrating: again, one key at a time.
        let migrating: Vec<usize> = (0..replies.len())
            .filter(|&j| matches!(&replies[j], Err(err) if err.is_tryagain()))
            .collect();
        let redone = join_all(
            migrating
                .iter()
                .map(|&j| sent[j].1.run_migrating(self.cluster(), &specs)),
        )
        .await;
        for (j, reply) in migrating.into_iter().zip(redone) {
            replies[j] = reply;
        }
        for ((i, _), reply) in sent.iter().zip(replies) {
            let decided = reply
                .and_then(|reply| parse_reply(script, &specs, &reply))
                .map(|(_, mut decisions)| decisions.swap_remove(0));
            let result = match decided {
                Ok(decision) => {
                    self.count(&decision);
                    if let (Some(cache), Some(ticket)) = (cache, ticket) {
                        let (subject, cost) = &requests[*i];
                        cache.offer(subject.as_ref(), spec.fingerprint, *cost, ticket, &decision);
                    }
                    Ok(decision)
                }
                Err(err) => self
                    .failure_policy()
                    .apply(err, &[self.outcomes()], |reason| {
                        Decision::bypass(spec.quota, spec.capacity, reason)
                    }),
            };
            results[*i] = Some(result);
        }
        results
            .into_iter()
            .map(|r| {
                // eval_many answers every call it is given.
                r.unwrap_or_else(|| {
                    Err(crate::Error::UnexpectedReply {
                        op: script.name().to_owned().into(),
                        detail: "no reply for a request of the batch".into(),
                    })
                })
            })
            .collect()
    }
}
