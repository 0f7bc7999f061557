//! Outcome counts per primitive, behind [`Cluster::stats`].
//!
//! Each primitive registers once, when it is built, and keeps an `Arc` to its
//! counters, so recording an outcome is one relaxed atomic increment.
//!
//! The counts are a feature's, not the transport's: the [`Registry`] of a
//! handle (and its clones) lives in the handle's extension slot, made by
//! the first primitive built on it, and is shown by [`Cluster::stats`]
//! through [`PrimitiveCounts`], which the transport defines.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::cluster::{Cluster, PrimitiveCounts, PrimitiveStats};
use crate::metrics::{DecisionMetrics, Outcome};
use crate::warn::WarnLimiter;

/// Live outcome counts of one primitive (what [`PrimitiveStats`] snapshots).
#[derive(Debug)]
pub(crate) struct Outcomes {
    kind: String,
    name: String,
    allowed: AtomicU64,
    denied: AtomicU64,
    denied_cached: AtomicU64,
    would_deny: AtomicU64,
    bypassed: AtomicU64,
    errors: AtomicU64,
    warn: WarnLimiter,
    metrics: DecisionMetrics,
}

impl Outcomes {
    fn new(kind: &str, name: &str) -> Self {
        Outcomes {
            kind: kind.to_owned(),
            name: name.to_owned(),
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            denied_cached: AtomicU64::new(0),
            would_deny: AtomicU64::new(0),
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

    pub(crate) fn denied_cached(&self) {
        self.denied_cached.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::DeniedCached);
    }

    pub(crate) fn would_deny(&self) {
        self.would_deny.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::WouldDeny);
    }

    /// Counts a check's decision: allowed, denied or (shadow mode) would
    /// deny.
    pub(crate) fn decided(&self, allowed: bool, would_deny: bool) {
        match (allowed, would_deny) {
            (_, true) => self.would_deny(),
            (true, false) => self.allowed(),
            (false, false) => self.denied(),
        }
    }

    /// Counts a bypass; [`FailurePolicy::apply`](crate::FailurePolicy)
    /// decides and warns.
    pub(crate) fn bypassed(&self) {
        self.bypassed.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::Bypassed);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.metrics.record(Outcome::Error);
    }

    /// Allowed, denied, denied from the cache, bypassed: what the
    /// throttled view's rates are made of.
    pub(crate) fn counts(&self) -> [u64; 4] {
        [
            self.allowed.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed),
            self.denied_cached.load(Ordering::Relaxed),
            self.bypassed.load(Ordering::Relaxed),
        ]
    }

    /// The primitive's kind and name, as its stats and metrics show them.
    pub(crate) fn kind(&self) -> &str {
        &self.kind
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `Some(n)` when a bypass warning should be logged now, `n` being the
    /// bypasses since the last one; see [`WarnLimiter`].
    pub(crate) fn should_warn(&self) -> Option<u64> {
        self.warn.should_warn()
    }

    fn snapshot(&self) -> PrimitiveStats {
        PrimitiveStats {
            kind: self.kind.clone(),
            name: self.name.clone(),
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            denied_cached: self.denied_cached.load(Ordering::Relaxed),
            would_deny: self.would_deny.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// Every primitive's counters, by kind and name.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    outcomes: Mutex<BTreeMap<(String, String), Arc<Outcomes>>>,
}

impl Registry {
    /// The registry of `cluster`'s handle and its clones, made on first
    /// use and shown in its [`Stats`](crate::cluster::Stats). Takes the
    /// extension slot's lock: for building a primitive, not for deciding.
    pub(crate) fn of(cluster: &Cluster) -> Arc<Registry> {
        let registry = cluster.extension(Registry::default);
        cluster.show_primitives(registry.clone());
        registry
    }

    /// The outcomes of `kind`/`name`, created on first use. Primitives with
    /// the same kind and name share them (they share their keys too).
    pub(crate) fn outcomes(&self, kind: &str, name: &str) -> Arc<Outcomes> {
        let mut map = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry((kind.to_owned(), name.to_owned()))
            .or_insert_with(|| Arc::new(Outcomes::new(kind, name)))
            .clone()
    }

    /// Every primitive's counts now, sorted by kind and name.
    pub(crate) fn snapshot(&self) -> Vec<PrimitiveStats> {
        let map = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(|c| c.snapshot()).collect()
    }
}

impl PrimitiveCounts for Registry {
    fn snapshot(&self) -> Vec<PrimitiveStats> {
        Registry::snapshot(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_kind_and_name_share_outcomes() {
        let registry = Registry::default();
        registry.outcomes("gcra", "api").allowed();
        registry.outcomes("gcra", "api").denied();
        registry.outcomes("lock", "api").error();
        let snap = registry.snapshot();
        assert_eq!(
            snap,
            vec![
                PrimitiveStats {
                    kind: "gcra".into(),
                    name: "api".into(),
                    allowed: 1,
                    denied: 1,
                    bypassed: 0,
                    errors: 0,
                    ..PrimitiveStats::default()
                },
                PrimitiveStats {
                    kind: "lock".into(),
                    name: "api".into(),
                    allowed: 0,
                    denied: 0,
                    bypassed: 0,
                    errors: 1,
                    ..PrimitiveStats::default()
                },
            ]
        );
    }
}
