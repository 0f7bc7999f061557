//! `check_many`: many subjects' checks in one go, one pipeline per master.

use super::decision::{Decision, MultiDecision};
use super::limiter::{RateLimiter, only};
use super::multi::MultiLimiter;
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
        let results = self.pipeline().run_many(requests).await;
        results.into_iter().map(|r| r.map(only)).collect()
    }
}

impl MultiLimiter {
    /// Checks many `(subject, cost)` requests at once, each against every
    /// limit, as [`RateLimiter::check_many`] does for one limit: one
    /// pipeline per master, each request its own all-or-nothing script, the
    /// results in the order of `requests`.
    pub async fn check_many<S: AsRef<[u8]>>(
        &self,
        requests: &[(S, u32)],
    ) -> Vec<Result<MultiDecision>> {
        self.pipeline().run_many(requests).await
    }
}
