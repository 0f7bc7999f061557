//! Outcome counters per primitive, behind [`Cluster::stats`](crate::Cluster::stats).
//!
//! Each primitive registers once, when it is built, and keeps an `Arc` to its
//! counters, so recording an outcome is one relaxed atomic increment.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::metrics::{DecisionMetrics, Outcome};
use crate::policy::{BypassReason, FailurePolicy, WarnLimiter};

/// Counts of one primitive's outcomes since the [`Cluster`](crate::Cluster)
/// was built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrimitiveStats {
    /// The primitive's kind, e.g. `gcra`, `lock`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Requests admitted (locks: acquired; counters: operations done).
    pub allowed: u64,
    /// Requests refused (locks: held elsewhere).
    pub denied: u64,
    /// Requests admitted without Redis under
    /// [`FailurePolicy::FailOpen`].
    pub bypassed: u64,
    /// Errors returned to the caller.
    pub errors: u64,
}

/// A snapshot of every primitive's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// One entry per kind and name, sorted.
    pub primitives: Vec<PrimitiveStats>,
    /// Every node the handle knows, with its connection counts and whether
    /// it is believed down.
    pub nodes: Vec<crate::cluster::NodeState>,
    /// Topology reads completed (at build, after redirects, failovers).
    pub topology_refreshes: u64,
}

impl Stats {
    /// The counters of the primitive `kind`/`name`, if it was ever built.
    #[must_use]
    pub fn get(&self, kind: &str, name: &str) -> Option<&PrimitiveStats> {
        self.primitives
            .iter()
            .find(|p| p.kind == kind && p.name == name)
    }
}

/// Live counters of one primitive.
#[derive(Debug)]
pub(crate) struct Counters {
    kind: String,
    name: String,
    allowed: AtomicU64,
    denied: AtomicU64,
    bypassed: AtomicU64,
    errors: AtomicU64,
    warn: WarnLimiter,
    metrics: DecisionMetrics,
}

impl Counters {
    fn new(kind: &str, name: &str) -> Self {
        Counters {
            kind: kind.to_owned(),
            name: name.to_owned(),
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            warn: WarnLimiter::new(),
            metrics: DecisionMetrics::new(kind, name),
        }
    }

    pub(crate) fn allowed(&self) {
        self.allowed.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::Allowed);
    }

    pub(crate) fn denied(&self) {
        self.denied.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::Denied);
    }

    /// Counts a bypass whose warning another primitive already logged.
    pub(crate) fn bypassed(&self) {
        self.bypassed.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::Bypassed);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::Error);
    }

    /// Applies `policy` to a failed call: a transient error under fail-open
    /// becomes `Ok(bypass(reason))` (counted, and warned about at most every
    /// few seconds); anything else is counted and returned.
    pub(crate) fn fail<T>(
        &self,
        policy: FailurePolicy,
        err: Error,
        bypass: impl FnOnce(BypassReason) -> T,
    ) -> Result<T> {
        match (policy, BypassReason::of(&err)) {
            (FailurePolicy::FailOpen, Some(reason)) => {
                self.bypassed();
                if let Some(count) = self.warn.should_warn() {
                    tracing::warn!(
                        kind = %self.kind,
                        name = %self.name,
                        reason = %reason,
                        bypassed_since_last_warning = count,
                        error = %err,
                        "shardlimit: limiter bypassed (fail-open): Redis did not answer"
                    );
                }
                Ok(bypass(reason))
            }
            _ => {
                self.error();
                Err(err)
            }
        }
    }

    fn snapshot(&self) -> PrimitiveStats {
        PrimitiveStats {
            kind: self.kind.clone(),
            name: self.name.clone(),
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// Every primitive's counters, by kind and name.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    counters: Mutex<BTreeMap<(String, String), Arc<Counters>>>,
}

impl Registry {
    /// The counters of `kind`/`name`, created on first use. Primitives with
    /// the same kind and name share them (they share their keys too).
    pub(crate) fn counters(&self, kind: &str, name: &str) -> Arc<Counters> {
        let mut map = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry((kind.to_owned(), name.to_owned()))
            .or_insert_with(|| Arc::new(Counters::new(kind, name)))
            .clone()
    }

    pub(crate) fn snapshot(&self) -> Vec<PrimitiveStats> {
        let map = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(|c| c.snapshot()).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn fail_open_bypasses_only_transient_errors() {
        let registry = Registry::default();
        let c = registry.counters("gcra", "api");
        let timeout = || Error::Timeout {
            op: "gcra".into(),
            slot: Some(1),
            timeout: Duration::from_millis(1),
        };
        let got = c.fail(FailurePolicy::FailOpen, timeout(), |r| r);
        assert_eq!(got.unwrap(), BypassReason::Timeout);
        assert!(c.fail(FailurePolicy::FailClosed, timeout(), |r| r).is_err());
        let config = Error::EmptySubject;
        assert!(c.fail(FailurePolicy::FailOpen, config, |r| r).is_err());
        c.allowed();
        c.denied();
        let snap = registry.snapshot();
        assert_eq!(
            snap,
            vec![PrimitiveStats {
                kind: "gcra".into(),
                name: "api".into(),
                allowed: 1,
                denied: 1,
                bypassed: 1,
                errors: 2,
            }]
        );
        // Same kind and name: same counters.
        registry.counters("gcra", "api").allowed();
        assert_eq!(registry.snapshot()[0].allowed, 2);
    }
}
