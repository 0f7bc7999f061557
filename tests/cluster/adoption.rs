//! A newcomer's first service (issue 28) against the six-node cluster: the
//! frictions a first adoption hit outside the HTTP layer — plain integers
//! in quotas and builders, a lazily connected handle's first calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::error::Error as _;
use std::num::NonZeroU32;
use std::time::Duration;

use shardlimit::{Cluster, Error, LeaseLimiter, Lock, Quota, RateLimiter};

/// Plain integers configure the same limits as `NonZeroU32`, and 0 is
/// refused by the build with the setting's name before anything is sent.
#[tokio::test]
async fn plain_integers_configure_limits_and_zero_is_refused_by_name() {
    let cluster = common::cluster("adopt-ints").await;

    // 10/s with a burst of 20: twenty at once, not the twenty-first.
    let per_key = RateLimiter::builder(&cluster, "api", Quota::per_second(10).allow_burst(20))
        .build()
        .unwrap();
    let mut admitted = 0;
    for _ in 0..21 {
        admitted += u32::from(per_key.check("key:1").await.unwrap().allowed);
    }
    assert_eq!(admitted, 20);
    assert_eq!(
        Quota::per_hour(1000),
        Quota::per_hour(NonZeroU32::new(1000).unwrap())
    );

    // Three exports per tenant, given as a usize.
    let exports = LeaseLimiter::builder(&cluster, "exports")
        .max_leases(3_usize)
        .build()
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..5 {
        if let Some(lease) = exports.try_acquire("tenant:1").await.unwrap() {
            held.push(lease);
        }
    }
    assert_eq!(held.len(), 3);
    for lease in held {
        lease.release().await.unwrap();
    }

    let refused = [
        RateLimiter::builder(&cluster, "zero", Quota::per_second(0))
            .build()
            .map(drop),
        RateLimiter::builder(&cluster, "zero", Quota::per_minute(5).allow_burst(0))
            .build()
            .map(drop),
        RateLimiter::builder(&cluster, "zero", Quota::per_second(-5))
            .build()
            .map(drop),
        RateLimiter::builder(&cluster, "zero", Quota::per_second(u64::MAX))
            .build()
            .map(drop),
        LeaseLimiter::builder(&cluster, "zero")
            .max_leases(0)
            .build()
            .map(drop),
        Lock::builder(&cluster, "zero")
            .replica_ack(Duration::from_millis(50))
            .replica_ack_count(0)
            .build()
            .map(drop),
    ];
    let fields: Vec<_> = refused
        .into_iter()
        .map(|result| match result {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a configuration error, got {other:?}"),
        })
        .collect();
    assert_eq!(
        fields,
        [
            "quota.limit",
            "quota.burst",
            "quota.limit",
            "quota.limit",
            "max_leases",
            "replica_ack_count"
        ]
    );

    // An override and a live quota change are checked the same way.
    let err = per_key
        .set_override("key:1", Quota::per_second(0), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config {
                field: "quota.limit",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        per_key
            .set_quota(Quota::per_second(5).allow_burst(0))
            .is_err()
    );

    // Nothing was written for the refused ones: only the GCRA key and the
    // lease key (and the catalog's limiter specs) exist.
    let keys = common::keys_with_pttl(cluster.namespace()).await;
    assert!(
        keys.iter()
            .all(|(key, _)| !String::from_utf8_lossy(key).contains("zero")),
        "{keys:?}"
    );
}

/// Issue 28, item 3: a lazily connected handle's first call, before the
/// topology is read, says "not connected yet" (it said "could not connect
/// to the cluster" while the cluster was healthy), and `wait_ready` waits
/// until calls go through. `#[tokio::test]` runs one thread: the background
/// connect cannot finish before the first check, which sends nothing.
#[tokio::test]
async fn a_lazy_handle_says_not_connected_yet_and_wait_ready_waits() {
    let cluster = common::builder("adopt-lazy")
        .lazy_connect(true)
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::builder(&cluster, "api", Quota::per_second(10))
        .build()
        .unwrap();
    let err = limiter.check("user:1").await.unwrap_err();
    assert!(matches!(err, Error::NotConnectedYet { .. }), "{err:?}");
    assert!(err.is_transient());
    let text = err.to_string();
    assert!(
        text.starts_with("not connected yet") && !text.contains("could not connect"),
        "{text}"
    );

    cluster.wait_ready(Duration::from_secs(10)).await.unwrap();
    assert!(limiter.check("user:1").await.unwrap().allowed);
    // Ready stays ready: no wait.
    cluster.wait_ready(Duration::ZERO).await.unwrap();

    // Nothing answers on port 1: the wait ends with a transient error.
    let nowhere = Cluster::builder(["redis://127.0.0.1:1"])
        .lazy_connect(true)
        .command_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let err = nowhere
        .wait_ready(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Connect { .. }) && err.is_transient(),
        "{err:?}"
    );
    assert!(
        err.source()
            .unwrap()
            .to_string()
            .contains("no topology within"),
        "{err}"
    );
}

/// Issue 28, item 6: a service built with `builder_from_env` and no
/// `SHARDLIMIT_NODES` stops at `build()` with an error naming the variable
/// and saying what to set (it connected to 127.0.0.1:7000..7005), and
/// takes its namespace from `SHARDLIMIT_NAMESPACE` — and (issue 42, item 6)
/// its subject secret from `SHARDLIMIT_SUBJECT_SECRET`, refusing one too
/// short. The environment is only changed for a child process of this
/// test binary.
#[test]
fn builder_from_env_needs_the_nodes_and_reads_the_namespace() {
    let child = |nodes: Option<&str>, secret: Option<&str>| {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                &crate::common::child::harness_name(module_path!(), "env_child"),
                "--ignored",
                "--nocapture",
            ])
            .env_remove("SHARDLIMIT_NODES")
            .env_remove("SHARDLIMIT_CLUSTER_PORT")
            .env("SHARDLIMIT_NAMESPACE", "from-env")
            .env("SHARDLIMIT_ADOPTION_CHILD", "1");
        if let Some(nodes) = nodes {
            command.env("SHARDLIMIT_NODES", nodes);
        }
        command.env_remove("SHARDLIMIT_SUBJECT_SECRET");
        command.env_remove("SHARDLIMIT_SUBJECT_SECRET_FILE");
        if let Some(secret) = secret {
            command.env("SHARDLIMIT_SUBJECT_SECRET", secret);
        }
        let out = command.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // A child that matched no test would pass having checked nothing.
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
    };
    let nodes = common::node_urls().join(",");
    child(None, None);
    child(Some(&nodes), None);
    child(Some(&nodes), Some("0d4c8e1f7a2b9c3e5f6a7b8c9d0e1f2a"));
    child(Some(&nodes), Some("too-short"));
}

/// The child of the test above: without nodes, `build()` refuses before
/// contacting anything; with them, the namespace is the environment's.
#[tokio::test]
#[ignore = "run by builder_from_env_needs_the_nodes_and_reads_the_namespace"]
async fn env_child() {
    if std::env::var("SHARDLIMIT_ADOPTION_CHILD").is_err() {
        return;
    }
    let result = Cluster::builder_from_env()
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await;
    if std::env::var("SHARDLIMIT_NODES").is_err() {
        match result {
            Err(Error::Config { field, reason }) => {
                assert_eq!(field, "SHARDLIMIT_NODES");
                assert!(
                    reason.starts_with("unset: set SHARDLIMIT_NODES"),
                    "{reason}"
                );
            }
            other => panic!("expected the unset nodes to be refused, got {other:?}"),
        }
    } else if let Ok(secret) = std::env::var("SHARDLIMIT_SUBJECT_SECRET") {
        if secret.len() < shardlimit::keys::MIN_SUBJECT_SECRET_LEN {
            match result {
                Err(Error::Config { field, reason }) => {
                    assert_eq!(field, "subject_secret");
                    assert!(!reason.contains(&secret), "{reason}");
                }
                other => panic!("expected the short secret to be refused, got {other:?}"),
            }
            return;
        }
        let hasher = result.unwrap().subject_hasher().clone();
        let given = shardlimit::keys::SubjectHasher::with_secret(&secret).unwrap();
        assert!(hasher.has_secret());
        assert_eq!(hasher.hash("k"), given.hash("k"));
    } else {
        let cluster = result.unwrap();
        assert_eq!(cluster.namespace(), "from-env");
        assert!(!cluster.subject_hasher().has_secret());
    }
}

/// Issue 28, item 8: a counter whose adds fail (here: a lazy handle before
/// its topology is read) returns each error to the caller and logs one
/// rate-limited warning for them all, so a service need not write its own
/// (one saw 63 lines in 40 ms). `#[tokio::test]` runs on this thread, so
/// the thread-local subscriber sees the warnings.
#[tokio::test]
async fn failing_counter_adds_warn_once_and_return_every_error() {
    let cluster = common::builder("adopt-counter")
        .lazy_connect(true)
        .build()
        .await
        .unwrap();
    let billing = shardlimit::Counter::builder(&cluster, "billing")
        .build()
        .unwrap();
    let (logs, _guard) = common::LogLines::capture();
    for _ in 0..20 {
        let err = billing.add("session:1", 1).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
    }
    let text = logs.text();
    let warnings = logs.lines_with("counter operation failed");
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("billing"),
        "{text}"
    );
    let stats = cluster.stats();
    assert_eq!(stats.get("counter", "billing").unwrap().errors, 20);
}
