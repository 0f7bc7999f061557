//! The deployments beside the cluster, each running the behaviour suite
//! (`tests/behaviour`) with what is its own: one plain redis-server
//! (`standalone`), a Sentinel setup (`sentinel`), and the TLS-only cluster
//! as the least-privilege ACL user (`tls`). Each needs its setup up, so
//! every test here is `#[ignore]`d; `scripts/test.sh` brings each up and
//! runs its module:
//!
//! ```text
//! cargo test --all-features --test deployments -- --ignored tls::
//! cargo test --all-features --test deployments -- --ignored standalone::
//! cargo test --all-features --test deployments -- --ignored sentinel:: --skip fault_
//! cargo test --all-features --test deployments -- --ignored sentinel::fault_ --test-threads=1
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../batches/mod.rs"]
mod batches;
#[path = "../behaviour/mod.rs"]
mod behaviour;
#[path = "../common/mod.rs"]
mod common;
#[path = "../fake_node/mod.rs"]
mod fake_node;

mod sentinel;
mod standalone;
mod tls;
