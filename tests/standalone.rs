//! Everything against one plain redis-server (no cluster): every algorithm,
//! multi-limit, lock, lease, counter, a batch of scripts, scanner, health and
//! the CLI, plus the detection rules. `#[ignore]`d so the cluster run skips them; run with
//!
//! ```text
//! cluster-compose/up.sh --standalone
//! cargo test --all-features --test standalone -- --ignored
//! cluster-compose/down.sh --standalone
//! ```
//!
//! `SHARDLIMIT_STANDALONE_URL` picks the server (default
//! `redis://127.0.0.1:6390`); the detection tests that need a cluster node
//! use the six-node cluster's 127.0.0.1:7000 (read only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod batches;
mod fake_node;

use std::num::NonZeroU32;
use std::process::{Command, Output};
use std::time::Duration;

use rand::Rng;
use serde_json::Value;
#[path = "lifting/mod.rs"]
mod lifting;

use shardlimit::admin::Scanner;
use shardlimit::{
    Algorithm, Cluster, ConcurrencyLimiter, Counter, Deployment, Error, Lock, MultiLimiter, Quota,
    RateLimiter,
};

fn url() -> String {
    std::env::var("SHARDLIMIT_STANDALONE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "redis://127.0.0.1:6390".to_owned())
}

fn namespace(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::rng().random::<u32>())
}

/// A handle on the standalone server under a fresh namespace, detected.
async fn standalone(prefix: &str) -> Cluster {
    let cluster = Cluster::builder([url()])
        .namespace(namespace(prefix))
        .build()
        .await
        .expect("no standalone server; start it with cluster-compose/up.sh --standalone");
    assert_eq!(cluster.deployment(), Deployment::Standalone);
    cluster
}

async fn conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every key of `namespace` with its PTTL.
async fn keys_with_pttl(namespace: &str) -> Vec<(Vec<u8>, i64)> {
    let mut conn = conn().await;
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{namespace}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for key in keys {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((key, pttl));
    }
    out
}

async fn assert_every_key_has_ttl(namespace: &str) {
    for (key, pttl) in keys_with_pttl(namespace).await {
        assert!(
            pttl > 0,
            "{} has no TTL ({pttl})",
            String::from_utf8_lossy(&key)
        );
    }
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn topology_is_one_shard_owning_every_slot() {
    let cluster = standalone("sa-topo").await;
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
async fn eval_many_is_one_pipeline_to_the_one_server() {
    let cluster = standalone("sa-batch").await;
    let script = batches::uncached(&cluster);
    batches::twice_in_order(&cluster, &script, 40).await;
    assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn every_algorithm_checks_denies_peeks_and_resets() {
    let cluster = standalone("sa-algo").await;
    let quota = Quota::per_hour(NonZeroU32::new(3).unwrap());
    for algorithm in Algorithm::ALL {
        let limiter = RateLimiter::builder(&cluster, "api", quota)
            .algorithm(algorithm)
            .build()
            .unwrap();
        for subject in ["user:1", "weird{sub}ject%"] {
            for _ in 0..3 {
                assert!(
                    limiter.check(subject).await.unwrap().allowed,
                    "{algorithm:?}"
                );
            }
            let denied = limiter.check(subject).await.unwrap();
            assert!(!denied.allowed, "{algorithm:?}");
            assert!(denied.retry_after.is_some());
            assert!(!limiter.peek(subject).await.unwrap().allowed);
            limiter.reset(subject).await.unwrap();
            let peeked = limiter.peek(subject).await.unwrap();
            assert!(peeked.allowed, "{algorithm:?} after reset");
            assert_eq!(peeked.remaining, 3, "{algorithm:?}: peek spends nothing");
            assert!(limiter.check(subject).await.unwrap().allowed);
        }
    }
    assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn multi_limit_binds_on_the_tightest() {
    let cluster = standalone("sa-multi").await;
    let per_second = RateLimiter::builder(
        &cluster,
        "burst",
        Quota::per_second(NonZeroU32::new(5).unwrap()),
    )
    .build()
    .unwrap();
    let per_hour = RateLimiter::builder(
        &cluster,
        "hourly",
        Quota::per_hour(NonZeroU32::new(2).unwrap()),
    )
    .build()
    .unwrap();
    let multi = MultiLimiter::new([per_second, per_hour]).unwrap();
    assert!(multi.check("user:9").await.unwrap().allowed);
    assert!(multi.check("user:9").await.unwrap().allowed);
    let third = multi.check("user:9").await.unwrap();
    assert!(!third.allowed);
    assert_eq!(third.binding().limit, 2);
    assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn lock_acquires_releases_and_fences() {
    let cluster = standalone("sa-lock").await;
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let first = lock.try_acquire("export").await.unwrap().unwrap();
    assert!(first.is_held());
    assert!(lock.try_acquire("export").await.unwrap().is_none());
    let token = first.fencing_token();
    assert!(first.remaining_ttl().await.unwrap().is_some());
    assert!(first.release().await.unwrap());
    let second = lock.try_acquire("export").await.unwrap().unwrap();
    assert!(second.fencing_token() > token, "fencing tokens grow");
    assert!(second.release().await.unwrap());
    assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn lease_caps_holders() {
    let cluster = standalone("sa-lease").await;
    let lease = ConcurrencyLimiter::builder(&cluster, "exports")
        .max_holders(NonZeroU32::new(2).unwrap())
        .lease_ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let a = lease.try_acquire("tenant").await.unwrap().unwrap();
    let b = lease.try_acquire("tenant").await.unwrap().unwrap();
    assert!(lease.try_acquire("tenant").await.unwrap().is_none());
    assert!(a.release().await.unwrap());
    let c = lease.try_acquire("tenant").await.unwrap().unwrap();
    assert!(b.release().await.unwrap());
    assert!(c.release().await.unwrap());
    assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn counter_add_and_drain_keep_the_ttl() {
    let cluster = standalone("sa-counter").await;
    let counter = Counter::builder(&cluster, "billing")
        .idle_ttl(Duration::from_secs(900))
        .build()
        .unwrap();
    assert_eq!(counter.add("session:9", 30).await.unwrap(), 30);
    assert_eq!(counter.add("session:9", 12).await.unwrap(), 42);
    let (value, ttl) = counter.get_with_ttl("session:9").await.unwrap().unwrap();
    assert_eq!(value, 42);
    assert!(ttl > Duration::from_secs(890));
    assert_eq!(counter.drain("session:9").await.unwrap(), Some(42));
    let (value, ttl) = counter.get_with_ttl("session:9").await.unwrap().unwrap();
    assert_eq!(value, 0);
    assert!(ttl > Duration::from_secs(890), "drain keeps the TTL");
    assert_every_key_has_ttl(cluster.namespace()).await;
}

/// One of every primitive under `cluster`'s namespace, for the scanner.
async fn one_of_each(cluster: &Cluster) -> (shardlimit::LockGuard, shardlimit::Permit) {
    let quota = Quota::per_hour(NonZeroU32::new(10).unwrap());
    for algorithm in Algorithm::ALL {
        let l = RateLimiter::builder(cluster, "api", quota)
            .algorithm(algorithm)
            .build()
            .unwrap();
        assert!(l.check("user:1").await.unwrap().allowed);
    }
    let hour = Duration::from_secs(3600);
    let guard = Lock::builder(cluster, "job")
        .ttl(hour)
        .build()
        .unwrap()
        .try_acquire("user:1")
        .await
        .unwrap()
        .unwrap();
    let permit = ConcurrencyLimiter::builder(cluster, "exports")
        .lease_ttl(hour)
        .build()
        .unwrap()
        .try_acquire("user:1")
        .await
        .unwrap()
        .unwrap();
    Counter::builder(cluster, "billing")
        .build()
        .unwrap()
        .add("user:1", 5)
        .await
        .unwrap();
    (guard, permit)
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn scanner_lists_counts_audits_and_resets() {
    let cluster = standalone("sa-scan").await;
    let (guard, permit) = one_of_each(&cluster).await;
    let scanner = Scanner::new(&cluster);

    let kinds: std::collections::BTreeSet<String> = scanner
        .subject("user:1")
        .await
        .unwrap()
        .into_iter()
        .map(|info| {
            assert!(info.ttl.is_some(), "{} has a TTL", info.subject_lossy());
            assert_eq!(info.node, url().trim_start_matches("redis://"));
            info.kind
        })
        .collect();
    for kind in ["fw", "slog", "swc", "gcra", "lock", "lease", "counter"] {
        assert!(kinds.contains(kind), "subject() misses {kind}: {kinds:?}");
    }

    let counts = scanner.count_limiters().await.unwrap();
    assert!(counts.incomplete.is_empty(), "{:?}", counts.incomplete);
    for kind in ["fw", "slog", "swc", "gcra", "lock", "lease", "counter"] {
        assert!(
            counts.counts.keys().any(|(_, k, _)| k == kind),
            "count misses {kind}: {:?}",
            counts.counts
        );
    }

    let audit = scanner.audit().await.unwrap();
    assert!(audit.is_clean(), "{audit:?}");
    assert!(audit.scanned >= 8, "{audit:?}");
    assert_every_key_has_ttl(cluster.namespace()).await;

    // reset refuses what is in use, then deletes it when forced.
    assert!(matches!(
        scanner.reset("user:1", None, None).await,
        Err(Error::ResetRefused { .. })
    ));
    drop((guard, permit));
    let plan = scanner.plan_reset("user:1", None, None).await.unwrap();
    assert!(plan.execute(&scanner, true).await.unwrap() > 0);
    assert!(scanner.subject("user:1").await.unwrap().is_empty());
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn health_reports_the_one_server_fit_except_replicas() {
    let cluster = standalone("sa-health").await;
    let health = cluster.health().await.unwrap();
    assert_eq!(health.covered_slots, 16384);
    assert_eq!(health.masters.len(), 1);
    let status = health.masters[0].status.as_ref().unwrap();
    assert!(status.cluster_state_ok);
    assert!(status.aof_enabled, "up.sh --standalone turns AOF on");
    assert_eq!(status.role, "master");
    // No replica: locks are at risk, and health says so.
    assert!(!health.fit_for_locks());
}

fn cli(namespace: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardlimit"))
        .env_remove("SHARDLIMIT_DEPLOYMENT")
        .arg("--nodes")
        .arg(url())
        .arg("--namespace")
        .arg(namespace)
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --standalone"]
async fn cli_lists_and_reports_health() {
    let cluster = standalone("sa-cli").await;
    let ns = cluster.namespace().to_owned();
    let _held = one_of_each(&cluster).await;

    let out = cli(&ns, &["list", "--json"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 7, "{stdout}");
    for row in &rows {
        assert_eq!(row["subject"], "user:1");
        assert!(row["ttl_ms"].as_u64().unwrap() > 0);
    }

    let out = cli(&ns, &["health"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("slots covered: 16384 of 16384"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let cluster = Cluster::builder(["redis://127.0.0.1:7000"])
        .namespace(namespace("sa-detect"))
        .build()
        .await
        .expect("the six-node cluster (cluster-compose/up.sh) is needed");
    assert_eq!(cluster.deployment(), Deployment::Cluster);
    assert!(cluster.topology().await.unwrap().shards.len() > 1);
    // A cluster node given as standalone is refused, not routed to.
    let err = Cluster::builder(["redis://127.0.0.1:7000"])
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
    let err = Cluster::builder([url(), "redis://127.0.0.1:7000".to_owned()])
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
}

/// Runs `env_child` in a child process of this test binary with `env`:
/// the environment is only ever changed for a fresh process.
fn run_env_child(expect: &str, env: &[(&str, &str)]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "env_child", "--ignored", "--nocapture"])
        .env("SHARDLIMIT_STANDALONE_ENV_CHILD", expect)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
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

#[tokio::test]
#[ignore = "needs the standalone server: cluster-compose/up.sh --standalone"]
async fn a_reset_through_another_handle_lifts_a_cached_denial() {
    let here = standalone("lift").await;
    let there = Cluster::builder([url()])
        .namespace(here.namespace())
        .build()
        .await
        .unwrap();
    lifting::a_reset_elsewhere_lifts_a_cached_denial(&here, &there).await;
}
