//! The background topology refresh: single flight, spaced, backing off
//! while it fails, ending with the last handle.

use std::sync::{PoisonError, Weak};
use std::time::{Duration, Instant};

use super::Router;
use crate::error::Error;

impl Router {
    /// Whether the table is settled: every slot served, no server down.
    fn settled(&self) -> bool {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        table.loaded
            && table
                .owners
                .iter()
                .all(|owner| owner.as_ref().is_some_and(|n| !n.is_down()))
    }

    /// The wait before the next refresh: the interval while refreshes
    /// succeed (so a failover is noticed quickly), growing to the reconnect
    /// cap while they fail; jittered.
    fn next_interval(&self, failures: u32) -> Duration {
        let base = self.config.refresh_interval;
        let grown = base
            .checked_mul(1u32 << failures.min(16))
            .unwrap_or(Duration::MAX)
            .min(self.config.node.reconnect_max.max(base));
        // Three quarters to all of it, at random.
        let quarter = grown / 4;
        crate::backoff::jitter(grown - quarter, quarter)
    }
}

/// The background refresh: one at a time, spaced by the interval, repeated
/// while asked for again or while the table is not settled. Holds only a
/// `Weak` between rounds, so it ends with the last `Cluster` clone.
pub(super) async fn refresh_loop(this: Weak<Router>) {
    loop {
        let wait = {
            let Some(router) = this.upgrade() else { return };
            let mut state = router.refresh_state();
            state.pending = false;
            state.next_allowed.map_or(Duration::ZERO, |at| {
                at.saturating_duration_since(Instant::now())
            })
        };
        if !wait.is_zero() {
            let Some(wake) = this.upgrade().map(|router| router.wake.clone()) else {
                return;
            };
            // A switch the sentinels announce cuts the wait short.
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = wake.notified() => {}
            }
        }
        let Some(router) = this.upgrade() else { return };
        let result = match router.fetch().await {
            Ok(topology) => router.install(&topology),
            Err(err) => Err(err),
        };
        *router
            .refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = match &result {
            Err(Error::Connect { source, .. }) if !crate::error::is_transient_redis(source) => {
                Some(source.clone())
            }
            _ => None,
        };
        let mut state = router.refresh_state();
        match &result {
            Ok(()) => {
                state.failures = 0;
                state.refreshes += 1;
            }
            Err(err) => {
                state.failures += 1;
                tracing::debug!(error = %err, "shardlimit: topology refresh failed");
            }
        }
        crate::metrics::topology_refresh(result.is_ok());
        state.next_allowed = Some(Instant::now() + router.next_interval(state.failures));
        let again = state.pending || result.is_err();
        drop(state);
        if !again && router.settled() {
            let mut state = router.refresh_state();
            // A request that arrived after the check above still runs.
            if !state.pending {
                state.running = false;
                return;
            }
        }
    }
}
