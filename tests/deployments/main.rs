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

/// Run by `tls::an_application_installs_its_crypto_provider_*` in a
/// process of its own: installs an application's rustls provider before
/// or after connecting, as `SHARDLIMIT_CHILD_PROVIDER` says. Outside the
/// `tls` module, so that `--ignored tls::` does not run it in the shared
/// process.
#[tokio::test]
#[ignore = "a helper run in a child process"]
async fn child_installs_a_crypto_provider() {
    tls::run_provider_child().await;
}
