//! Instrumentation: metrics through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`) and the fields of the crate's tracing spans.
//!
//! The rest of the crate calls in here with one-line hooks; this module
//! decides what they cost:
//!
//! * **Without the feature** every metrics type is zero-sized and every
//!   metrics hook an empty inline function.
//! * **With it**, the hot path never allocates and never formats: the
//!   decision counters of a primitive are registered once, when it is built
//!   (next to its outcome counts), and the latency histograms
//!   once per operation name and [`Cluster`](crate::Cluster) handle, then
//!   found by a read-locked map lookup. Rare events (reconnects, lock losses,
//!   scanner pages) register per call.
//! * **Spans** (`shardlimit.check`, `shardlimit.lock.acquire`, …) are
//!   created by `#[tracing::instrument]` at `debug` level on each primitive
//!   operation. With no subscriber, or one filtering out `debug` for this
//!   crate, creating one is a cached callsite check and recording a field is
//!   skipped after one atomic load ([`tracing::level_enabled!`]).
//!
//! Handles bind to the recorder installed when they are registered: install
//! the recorder before building the [`Cluster`](crate::Cluster) and its
//! primitives. See the table of metrics in [`describe_metrics`].

use std::fmt;

use tracing::Span;

#[cfg(feature = "metrics")]
pub use self::enabled::describe_metrics;

/// `shardlimit_decisions_total`: outcomes of every primitive.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const DECISIONS: &str = "shardlimit_decisions_total";
/// `shardlimit_redis_duration_seconds`: every request to Redis.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const REDIS_DURATION: &str = "shardlimit_redis_duration_seconds";
/// `shardlimit_node_connects_total`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const NODE_CONNECTS: &str = "shardlimit_node_connects_total";
/// `shardlimit_node_connect_failures_total`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const NODE_CONNECT_FAILURES: &str = "shardlimit_node_connect_failures_total";
/// `shardlimit_node_down`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const NODE_DOWN: &str = "shardlimit_node_down";
/// `shardlimit_topology_refreshes_total`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const TOPOLOGY_REFRESHES: &str = "shardlimit_topology_refreshes_total";
/// `shardlimit_lock_losses_total`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const LOCK_LOSSES: &str = "shardlimit_lock_losses_total";
/// `shardlimit_scan_keys_total`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const SCAN_KEYS: &str = "shardlimit_scan_keys_total";
/// `shardlimit_scan_progress_ratio`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const SCAN_PROGRESS: &str = "shardlimit_scan_progress_ratio";

/// What happened to one request of a primitive; the `outcome` label and
/// span field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    Bypassed,
    Error,
    /// Denied from the local deny cache, without Redis.
    DeniedCached,
    /// Shadow mode: Redis denied it, and it was let through.
    WouldDeny,
}

impl Outcome {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    const ALL: [Outcome; 6] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::Bypassed,
        Outcome::Error,
        Outcome::DeniedCached,
        Outcome::WouldDeny,
    ];

    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Bypassed => "bypassed",
            Outcome::Error => "error",
            Outcome::DeniedCached => "denied_cached",
            Outcome::WouldDeny => "would_deny",
        }
    }
}

/// The decision counters of one primitive (kind and name), registered when
/// it is built; also records the outcome on the operation's span.
pub(crate) struct DecisionMetrics {
    #[cfg(feature = "metrics")]
    counters: [metrics::Counter; 6],
}

impl DecisionMetrics {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(kind: &str, name: &str) -> Self {
        DecisionMetrics {
            #[cfg(feature = "metrics")]
            counters: Outcome::ALL.map(|outcome| {
                metrics::counter!(
                    DECISIONS,
                    "kind" => kind.to_owned(),
                    "name" => name.to_owned(),
                    "outcome" => outcome.as_str(),
                )
            }),
        }
    }

    /// Counts `outcome` and records it on the current `shardlimit.*` span.
    #[inline]
    pub(crate) fn record(&self, outcome: Outcome) {
        #[cfg(feature = "metrics")]
        self.counters[outcome as usize].increment(1);
        record_on_span("outcome", outcome.as_str());
    }
}

impl fmt::Debug for DecisionMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecisionMetrics").finish_non_exhaustive()
    }
}

/// When a request to Redis started (nothing without the feature).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Started {
    #[cfg(feature = "metrics")]
    at: std::time::Instant,
}

impl Started {
    #[inline]
    pub(crate) fn now() -> Self {
        Started {
            #[cfg(feature = "metrics")]
            at: std::time::Instant::now(),
        }
    }
}

/// Per-[`Cluster`](crate::Cluster) latency histograms by operation name.
#[derive(Default)]
pub(crate) struct ClusterMetrics {
    #[cfg(feature = "metrics")]
    latency: enabled::LatencyByOp,
}

impl ClusterMetrics {
    /// Records how long the request `op` that started at `started` took, and
    /// whether it answered (`ok`), failed (`error`) or timed out
    /// (`timeout`: the outer `Err`).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    // A `Cow<'static, str>`, not a `&str`: a new name becomes a label by
    // cloning it, which copies nothing for the crate's `'static` names.
    #[allow(clippy::ptr_arg)]
    pub(crate) fn observe<T>(
        &self,
        op: &std::borrow::Cow<'static, str>,
        started: Started,
        outcome: &crate::Result<T>,
    ) {
        #[cfg(feature = "metrics")]
        {
            let status = match outcome {
                Ok(_) => 0,
                Err(crate::Error::Timeout { .. }) => 2,
                Err(_) => 1,
            };
            self.latency.record(op, status, started.at.elapsed());
        }
    }
}

/// A connection to `node` was opened (`ok`) or an attempt failed.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn node_connect(node: &str, ok: bool) {
    #[cfg(feature = "metrics")]
    metrics::counter!(if ok { NODE_CONNECTS } else { NODE_CONNECT_FAILURES }, "node" => node.to_owned())
        .increment(1);
}

/// `node` was marked down (`true`) or answered again (`false`).
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn node_down(node: &str, down: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(NODE_DOWN, "node" => node.to_owned()).set(if down { 1.0 } else { 0.0 });
}

/// A background topology refresh completed (`ok`) or found no node to
/// answer.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn topology_refresh(ok: bool) {
    #[cfg(feature = "metrics")]
    metrics::counter!(TOPOLOGY_REFRESHES, "ok" => if ok { "true" } else { "false" }).increment(1);
}

/// An extension or release of the lock `name` found it expired or taken.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lock_lost(name: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(LOCK_LOSSES, "name" => name.to_owned()).increment(1);
}

/// One `SCAN` page of `keys` keys from `node`; `scanned` of `dbsize` so far.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn scan_page(
    node: &impl fmt::Display,
    keys: usize,
    scanned: u64,
    dbsize: u64,
    done: bool,
) {
    #[cfg(feature = "metrics")]
    {
        let node = node.to_string();
        metrics::counter!(SCAN_KEYS, "node" => node.clone())
            .increment(u64::try_from(keys).unwrap_or(u64::MAX));
        // DBSIZE counts every key of the node, the scan only this
        // namespace's, so the ratio only reaches 1 when the node is done.
        #[allow(clippy::cast_precision_loss)] // a ratio needs no exact count
        let ratio = if done {
            1.0
        } else {
            (scanned as f64 / dbsize.max(1) as f64).min(1.0)
        };
        metrics::gauge!(SCAN_PROGRESS, "node" => node).set(ratio);
    }
}

/// Records the hash slot on the current `shardlimit.*` span.
#[inline]
pub(crate) fn span_slot(slot: Option<u16>) {
    if let Some(slot) = slot {
        record_on_span("slot", slot);
    }
}

/// Records the subject on the current `shardlimit.*` span, only when `trace`
/// is enabled here: a subject (user id, IP address, API key) can be personal
/// data, so it is never in `debug` output.
#[inline]
pub(crate) fn span_subject(subject: &[u8]) {
    if tracing::enabled!(tracing::Level::TRACE) {
        record_on_span("subject", String::from_utf8_lossy(subject).as_ref());
    }
}

/// Records `field` on the current span if it is one of this crate's
/// (`shardlimit.*`): the hooks run inside the crate's spans, but some (e.g. a
/// guard's release) run in the caller's, which may have a field of the same
/// name that is not ours to set.
#[inline]
fn record_on_span(field: &'static str, value: impl tracing::Value) {
    // One atomic load when nothing listens at debug level.
    if !tracing::level_enabled!(tracing::Level::DEBUG) {
        return;
    }
    let span = Span::current();
    if span
        .metadata()
        .is_some_and(|m| m.name().starts_with("shardlimit."))
    {
        span.record(field, value);
    }
}

#[cfg(feature = "metrics")]
mod enabled {
    use std::borrow::Cow;
    use std::collections::HashMap;
    use std::sync::{OnceLock, PoisonError, RwLock};
    use std::time::Duration;

    use metrics::{Histogram, Unit};

    use super::*;
    use crate::scripts::{self, TRANSACTION_OP};

    const STATUSES: [&str; 3] = ["ok", "error", "timeout"];

    /// The operations of the hot path: the crate's scripts, then
    /// `transaction`. Their histograms are found without a lock (a renamed
    /// script would only fall back to the map, still correct).
    fn hot_index(op: &str) -> Option<usize> {
        if op == TRANSACTION_OP {
            return Some(scripts::NAMES.len());
        }
        scripts::NAMES.iter().position(|name| *name == op)
    }

    type Handles = [Histogram; 3];

    /// Histograms by operation name, registered on the first request of each
    /// operation. The hot operations live in a fixed table read without a
    /// lock (an `RwLock`'s reader count is a cache line every core writes);
    /// the rest (admin commands, users' scripts) in a locked map.
    #[derive(Default)]
    pub(super) struct LatencyByOp {
        hot: [OnceLock<Handles>; scripts::NAMES.len() + 1],
        other: RwLock<HashMap<Cow<'static, str>, Handles>>,
    }

    #[allow(clippy::ptr_arg)] // see `ClusterMetrics::observe`
    fn register(op: &Cow<'static, str>) -> Handles {
        STATUSES.map(
            |status| metrics::histogram!(REDIS_DURATION, "op" => op.clone(), "status" => status),
        )
    }

    impl LatencyByOp {
        #[allow(clippy::ptr_arg)] // see `ClusterMetrics::observe`
        pub(super) fn record(&self, op: &Cow<'static, str>, status: usize, elapsed: Duration) {
            if let Some(i) = hot_index(op) {
                self.hot[i].get_or_init(|| register(op))[status].record(elapsed);
                return;
            }
            // A poisoned lock only means a panic while inserting a handle;
            // the map is still whole.
            if let Some(h) = self
                .other
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(op.as_ref())
            {
                h[status].record(elapsed);
                return;
            }
            let mut map = self.other.write().unwrap_or_else(PoisonError::into_inner);
            map.entry(op.clone()).or_insert_with(|| register(op))[status].record(elapsed);
        }
    }

    /// Describes every metric shardlimit emits (type, unit, meaning) to the
    /// installed recorder, for exporters that publish descriptions (e.g.
    /// Prometheus `# HELP`). Optional; call it once after installing the
    /// recorder.
    ///
    /// | metric | type | labels | meaning |
    /// |---|---|---|---|
    /// | `shardlimit_decisions_total` | counter | `kind`, `name`, `outcome` | outcomes per primitive, as in [`Cluster::stats`](crate::Cluster::stats): `allowed`, `denied`, `bypassed`, `error` (locks: acquired, held elsewhere) |
    /// | `shardlimit_redis_duration_seconds` | histogram | `op`, `status` | time of each request to Redis by operation (script name, `transaction`, node command); `status` `ok`, `error`, `timeout` |
    /// | `shardlimit_node_connects_total` | counter | `node` | connections opened to a node (the first and every reconnect) |
    /// | `shardlimit_node_connect_failures_total` | counter | `node` | connection attempts that failed, probes of a down node included |
    /// | `shardlimit_node_down` | gauge | `node` | 1 while the node is believed down (its calls fail fast), else 0 |
    /// | `shardlimit_topology_refreshes_total` | counter | `ok` | background slot-table refreshes, by whether a node answered |
    /// | `shardlimit_lock_losses_total` | counter | `name` | an extension (watchdog or explicit) or release found the lock expired or taken |
    /// | `shardlimit_scan_keys_total` | counter | `node` | keys returned by the admin scanner's `SCAN` pages |
    /// | `shardlimit_scan_progress_ratio` | gauge | `node` | keys scanned / `DBSIZE` of the node; 1 when its walk is done |
    ///
    /// ```
    /// // After installing a recorder (e.g. metrics-exporter-prometheus):
    /// shardlimit::describe_metrics();
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn describe_metrics() {
        metrics::describe_counter!(
            DECISIONS,
            Unit::Count,
            "Outcomes of shardlimit primitives: allowed, denied, denied_cached (local deny cache), would_deny (shadow mode), bypassed (fail-open), error"
        );
        metrics::describe_histogram!(
            REDIS_DURATION,
            Unit::Seconds,
            "Time of each shardlimit request to Redis, by operation and status"
        );
        metrics::describe_counter!(
            NODE_CONNECTS,
            Unit::Count,
            "Connections opened to a Redis node (the first and every reconnect)"
        );
        metrics::describe_counter!(
            NODE_CONNECT_FAILURES,
            Unit::Count,
            "Connection attempts to a Redis node that failed"
        );
        metrics::describe_gauge!(
            NODE_DOWN,
            "1 while a Redis node is believed down and its calls fail fast, else 0"
        );
        metrics::describe_counter!(
            TOPOLOGY_REFRESHES,
            Unit::Count,
            "Background slot-table refreshes, by whether a node answered"
        );
        metrics::describe_counter!(
            LOCK_LOSSES,
            Unit::Count,
            "Locks found expired or taken by an extension or release"
        );
        metrics::describe_counter!(
            SCAN_KEYS,
            Unit::Count,
            "Keys returned by the admin scanner's SCAN pages"
        );
        metrics::describe_gauge!(
            SCAN_PROGRESS,
            "Admin scan progress of a node: keys scanned / DBSIZE, 1 when done"
        );
    }
}

#[cfg(test)]
mod tests;
