//! [`Stats`]: what a cluster handle has seen — every primitive's outcome
//! counts, every node's state.

use super::node::NodeState;
use crate::outcomes::PrimitiveStats;

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
