//! Fault injection against the six-node cluster: a master killed or hung
//! under load, the whole cluster down and back, slots migrating under load.
//!
//! These tests stop, kill and pause nodes of the shared test cluster, so
//! they are `#[ignore]`d in the normal run; `scripts/test.sh` runs them
//! afterwards, one at a time:
//!
//! ```text
//! cargo test --test faults -- --ignored --test-threads=1 --nocapture
//! ```
//!
//! Nodes are controlled through `cluster-compose/node.sh` (docker kill /
//! pause, or signals in native mode). Every scenario starts from, and
//! restores — even when it fails — the layout masters 7000–7002 with
//! replicas 7003–7005. Against a second cluster started with
//! `SHARDLIMIT_CLUSTER_PORT=7100 cluster-compose/up.sh`, run them with the
//! same `SHARDLIMIT_CLUSTER_PORT` and `SHARDLIMIT_NODES=redis://127.0.0.1:7100`
//! (the port numbers in the reports stay the default layout's names). Measurements are printed (`--nocapture`) and written
//! to `target/faults/<scenario>.txt`.
//!
//! Timing bounds: the cluster's `cluster-node-timeout` is 2 s; a killed or
//! hung master's replica takes over after about 3.5–4.5 s. Calls are bounded
//! by the command timeout (250 ms); the bounds below add `SCHEDULING_SLACK`
//! for a 2-core machine running six Redis containers and 100+ client tasks.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "../web/browser.rs"]
#[allow(dead_code, unreachable_pub)]
mod browser;
#[path = "../common/mod.rs"]
mod common;
mod harness;

mod acquire;
mod deny_cache;
mod failover;
mod isolation;
mod local;
mod locks;
mod migration;
mod operational;
mod outage;
mod overview;
mod scan;
