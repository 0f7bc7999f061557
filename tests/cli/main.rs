//! The `shardlimit` binary against the six-node cluster (feature `cli`):
//! its commands and their output (`cli`), and that no path it prints a
//! node through shows a password (`secrets`, with the `tower` layer's).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../fake_node/mod.rs"]
mod fake_node;

mod cli;
#[cfg(feature = "tower")]
mod secrets;
mod top;

/// Every test of this binary starts here, before it checks or times
/// anything: the first call builds the `shardlimit` binary (`cargo build -p
/// shardlimit-cli`, which on a fresh clone compiles the library again with
/// the CLI's features — over a minute on 2 cores), and the others wait for
/// it. Tests that checked the cluster while that build ran, with the
/// default 250 ms command timeout, timed out (a clean-clone CI run,
/// 2026-12-03: two `Timeout { timeout: 250ms }` while seeding limiters).
fn cli_built() {
    common::cli_exe();
}
