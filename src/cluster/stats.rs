//! [`Stats`]: what a cluster handle has seen — every primitive's outcome
//! counts, every node's state.
//!
//! The nodes are the transport's own; the outcome counts are kept above it
//! (`outcomes.rs`, in the handle's extension slot), and shown here through
//! [`PrimitiveCounts`], so that the transport names none of the
//! primitives.

use super::node::NodeState;

/// A snapshot of every primitive's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// One entry per kind and name, sorted.
    pub primitives: Vec<PrimitiveStats>,
    /// Every node the handle knows, with its connection counts and whether
    /// it is believed down.
    pub nodes: Vec<NodeState>,
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
    /// Requests Redis refused (locks: held elsewhere).
    pub denied: u64,
    /// Requests refused from the local deny cache, without Redis; not also
    /// counted in `denied`.
    pub denied_cached: u64,
    /// Shadow mode: requests Redis refused and that were let through; not
    /// also counted in `allowed` or `denied`.
    pub would_deny: u64,
    /// Requests admitted without Redis under
    /// [`FailurePolicy::FailOpen`](crate::FailurePolicy::FailOpen).
    pub bypassed: u64,
    /// Errors returned to the caller.
    pub errors: u64,
}

/// Where [`Cluster::stats`](crate::Cluster::stats) finds the primitives'
/// counts: kept by the layer above the transport, which tells the handle
/// once (see `Cluster::show_primitives`).
pub(crate) trait PrimitiveCounts: Send + Sync {
    /// Every primitive's counts now, sorted by kind and name.
    fn snapshot(&self) -> Vec<PrimitiveStats>;
}
