//! The library against the six-node cluster, one module per primitive or
//! concern: the `Cluster` handle and the behaviour suite every deployment
//! runs (`handle`), each rate-limit algorithm, multi-limits, locks, leases,
//! counters, the deny cache, slices, the catalog, "throttled now", the
//! admin scanner, and the property tests over keys and limits.
//!
//! One binary, not one per file: each test binary links the whole crate,
//! and the modules share the helpers below. Tests that change server-wide
//! state (`tests/connection.rs`: the idle timeout, `CLIENT KILL`;
//! `tests/migration.rs`: moving slots) or install a process-wide recorder
//! (`tests/metrics.rs`) keep binaries of their own, so they cannot disturb
//! these.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../batches/mod.rs"]
mod batches;
#[path = "../behaviour/mod.rs"]
mod behaviour;
#[path = "../common/mod.rs"]
mod common;
#[path = "../fake_node/mod.rs"]
mod fake_node;

mod adjust;
mod admin;
mod adoption;
mod algorithms;
mod batch;
mod catalog;
mod check_many;
mod counter;
#[cfg(feature = "deny-cache")]
mod deny_cache;
mod handle;
mod health;
mod keys_prop;
mod lease;
mod limiters;
mod limits_bounds;
mod limits_prop;
mod lock;
mod one_limit_checks;
mod plain_commands;
mod redaction;
#[cfg(feature = "slices")]
mod slices;
mod stages;
mod throttled;

/// Run by tests of `adjust` and `deny_cache` in a second process (see
/// `common::child`): one change to one subject, described by the
/// environment.
#[tokio::test]
#[ignore = "a helper run in a child process"]
async fn child_adjusts_a_subject() {
    common::child::run_child_adjustment().await;
}
