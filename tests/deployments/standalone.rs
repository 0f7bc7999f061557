//! Against one plain redis-server (no cluster): the behaviour suite every
//! deployment runs (`tests/behaviour`: every algorithm, multi-limit, lock,
//! lease, counter, a batch of scripts, scanner, health, the CLI, the deny
//! cache), plus what is standalone's own: one shard owning every slot, the
//! detection rules and the environment. `#[ignore]`d so the cluster run
//! skips them; run with
//!
//! ```text
//! cluster-compose/up.sh --standalone
//! cargo test --all-features --test deployments -- --ignored standalone::
//! cluster-compose/down.sh --standalone
//! ```
//!
//! `SHARDLIMIT_STANDALONE_URL` picks the server (default
//! `redis://127.0.0.1:$SHARDLIMIT_STANDALONE_PORT`, 6390 unless set, as
//! `up.sh --standalone` reads it); the detection tests that need a cluster
//! node use the six-node cluster's first seed (`tests/common`, read only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::behaviour;
use crate::common;
use crate::fake_node;

use std::num::NonZeroU32;
use std::process::Command;

use behaviour::{Setup, standalone_url as url};
use shardlimit::{Cluster, Error, Quota, RateLimiter, cluster::Deployment};

behaviour::suite!(
    Setup::Standalone,
    #[ignore = "needs cluster-compose/up.sh --standalone"]
);

fn namespace(prefix: &str) -> String {
    common::unique_namespace(prefix)
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn topology_is_one_shard_owning_every_slot() {
    let cluster = Setup::Standalone.connect("sa-topo").await;
    let topology = cluster.topology().await.unwrap();
    assert_eq!(topology.shards.len(), 1);
    assert_eq!(topology.covered_slots(), 16384);
    assert_eq!(topology.shards[0].master.id, "standalone");
    // Explicit standalone works too, and builder_from_env takes the env.
    let explicit = Cluster::builder([url()])
        .deployment(Deployment::Standalone)
        .build()
        .await
        .unwrap();
    assert_eq!(explicit.deployment(), Deployment::Standalone);
    assert_eq!(explicit.stats().topology_refreshes, 1);
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn several_seeds_that_are_not_a_cluster_are_refused() {
    // The same server twice (by two names) stands for two standalone
    // servers: detection never picks one of several.
    let other = url().replace("127.0.0.1", "localhost");
    let err = Cluster::builder([url(), other])
        .build()
        .await
        .expect_err("several non-cluster seeds must be refused");
    match &err {
        Error::Config { field, reason } => {
            assert_eq!(*field, "nodes");
            assert!(reason.contains("cluster support disabled"), "{reason}");
            assert!(reason.contains("only seed"), "{reason}");
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    // Explicitly standalone with two seeds: refused before connecting.
    let err = Cluster::builder([url(), url()])
        .deployment(Deployment::Standalone)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config { field: "nodes", .. }),
        "{err:?}"
    );
    // Explicitly a cluster: the standalone server is refused.
    let err = Cluster::builder([url()])
        .deployment(Deployment::Cluster)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config { reason, .. } if reason.contains("cluster support disabled")),
        "{err:?}"
    );
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone and the six-node cluster"]
async fn a_cluster_seed_is_never_taken_as_standalone() {
    let cluster_node = common::node_urls().swap_remove(0);
    let cluster = Cluster::builder([cluster_node.clone()])
        .namespace(namespace("sa-detect"))
        .build()
        .await
        .expect("the six-node cluster (cluster-compose/up.sh) is needed");
    assert_eq!(cluster.deployment(), Deployment::Cluster);
    assert!(cluster.topology().await.unwrap().shards.len() > 1);
    // A cluster node given as standalone is refused, not routed to.
    let err = Cluster::builder([cluster_node.clone()])
        .deployment(Deployment::Standalone)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config { field: "deployment", reason } if reason.contains("is a cluster node")),
        "{err:?}"
    );
    // A mix of a cluster node and a standalone server is a cluster or
    // nothing: with the cluster node first it is a cluster (the standalone
    // seed is never asked), with it last detection refuses.
    let err = Cluster::builder([url(), cluster_node])
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
}

/// Runs `env_child` in a child process of this test binary with `env`:
/// the environment is only ever changed for a fresh process.
fn run_env_child(expect: &str, env: &[(&str, &str)]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &crate::common::child::harness_name(module_path!(), "env_child"),
            "--ignored",
            "--nocapture",
        ])
        .env("SHARDLIMIT_STANDALONE_ENV_CHILD", expect)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // A child that matched no test would pass having checked nothing.
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
fn the_environment_selects_the_server_and_deployment() {
    let url = url();
    run_env_child("standalone", &[("SHARDLIMIT_NODES", &url)]);
    run_env_child(
        "standalone",
        &[
            ("SHARDLIMIT_NODES", &url),
            ("SHARDLIMIT_DEPLOYMENT", "standalone"),
        ],
    );
    run_env_child(
        "refused",
        &[
            ("SHARDLIMIT_NODES", &url),
            ("SHARDLIMIT_DEPLOYMENT", "sentinels"),
        ],
    );
    // A Sentinel deployment from the environment needs its service too.
    run_env_child(
        "no-service",
        &[
            ("SHARDLIMIT_NODES", &url),
            ("SHARDLIMIT_DEPLOYMENT", "sentinel"),
        ],
    );
}

/// The child of `the_environment_selects_the_server_and_deployment`; does
/// nothing unless it set `SHARDLIMIT_STANDALONE_ENV_CHILD`.
#[tokio::test]
#[ignore = "run by the_environment_selects_the_server_and_deployment"]
async fn env_child() {
    let Ok(expect) = std::env::var("SHARDLIMIT_STANDALONE_ENV_CHILD") else {
        return;
    };
    let built = Cluster::builder_from_env().build().await;
    match expect.as_str() {
        "standalone" => assert_eq!(built.unwrap().deployment(), Deployment::Standalone),
        "no-service" => {
            let err = built.unwrap_err();
            assert!(
                matches!(&err, Error::Config { field: "sentinel_service", reason } if reason.contains("SHARDLIMIT_SENTINEL_SERVICE")),
                "{err:?}"
            );
        }
        _ => {
            let err = built.unwrap_err();
            assert!(
                matches!(&err, Error::Config { field: "deployment", reason } if reason.contains("sentinel")),
                "{err:?}"
            );
        }
    }
}

/// Needs no server: a fake standalone node that answers `MOVED`.
#[tokio::test]
async fn a_redirect_from_a_standalone_server_is_an_error_not_followed() {
    let node = fake_node::FakeNode::start_standalone_redirecting().await;
    let cluster = Cluster::builder([node.url()])
        .namespace(namespace("sa-moved"))
        .build()
        .await
        .unwrap();
    assert_eq!(cluster.deployment(), Deployment::Standalone);
    let limiter = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_hour(NonZeroU32::new(3).unwrap()),
    )
    .failure_policy(shardlimit::FailurePolicy::FailClosed)
    .build()
    .unwrap();
    let err = limiter.check("user:1").await.unwrap_err();
    assert!(
        matches!(&err, Error::Redis { source, .. } if source.to_string().contains("Moved")),
        "{err:?}"
    );
    // Not followed: 127.0.0.1:1 was never learnt of.
    assert!(
        cluster.nodes().iter().all(|n| n.addr == node.addr()),
        "{:?}",
        cluster.nodes()
    );
    assert_eq!(cluster.stats().topology_refreshes, 1);
}
