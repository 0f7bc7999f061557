//! The `shardlimit` binary against the six-node cluster: `list --json`,
//! `count`, `show`, `audit` (exit codes) and `reset`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::num::NonZeroU32;
use std::process::{Command, Output};

use serde_json::Value;
use shardlimit::{Algorithm, Quota, RateLimiter};

fn cli(namespace: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardlimit"))
        .arg("--nodes")
        .arg(common::node_urls().join(","))
        .arg("--namespace")
        .arg(namespace)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test]
async fn list_count_show_audit_and_reset() {
    let cluster = common::cluster("cli").await;
    let ns = cluster.namespace().to_owned();
    let quota = Quota::per_hour(NonZeroU32::new(10).unwrap());
    for algorithm in Algorithm::ALL {
        let l = RateLimiter::builder(&cluster, "api", quota)
            .algorithm(algorithm)
            .build()
            .unwrap();
        for subject in ["user:1", "user:2", "bin\u{1}ary{x}"] {
            assert!(l.check(subject).await.unwrap().allowed);
        }
    }

    let out = cli(&ns, &["list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 12);
    for row in &rows {
        assert_eq!(row["name"], "api");
        assert!(row["ttl_ms"].as_u64().unwrap() > 0);
        assert!(["fw", "slog", "swc", "gcra"].contains(&row["kind"].as_str().unwrap()));
        assert!(row["node"].as_str().unwrap().starts_with("127.0.0.1:700"));
    }
    assert!(rows.iter().any(|r| r["subject"] == "bin\u{1}ary{x}"));
    let fixed: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "fw").collect();
    assert!(fixed.iter().all(|r| r["state"]["used"] == 1));

    let out = cli(
        &ns,
        &["list", "--json", "--kind", "gcra", "--subject", "user:*"],
    );
    assert_eq!(stdout(&out).lines().count(), 2);

    let out = cli(&ns, &["count"]);
    assert!(out.status.success());
    assert!(
        stdout(&out).lines().any(|l| l == "total\t12"),
        "{}",
        stdout(&out)
    );

    let out = cli(&ns, &["show", "user:1", "--json"]);
    assert_eq!(stdout(&out).lines().count(), 4);

    let out = cli(&ns, &["audit"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("12 keys scanned: 0 without TTL, 0 unrecognized"));

    // Plant a leak: a key that never expires.
    let leak = format!("{ns}:{{zombie}}:counter:billing").into_bytes();
    let _: () = common::on_owner(&leak, redis::cmd("SET").arg(&leak).arg(5)).await;
    let out = cli(&ns, &["audit", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let problems: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0]["problem"], "no_ttl");
    assert_eq!(problems[0]["key"], String::from_utf8(leak.clone()).unwrap());

    // The leaked counter still holds 5: refused without --force.
    assert_eq!(cli(&ns, &["reset", "zombie"]).status.code(), Some(1));
    let out = cli(&ns, &["reset", "zombie", "--force"]);
    assert!(stdout(&out).contains("deleted 1 keys"), "{}", stdout(&out));
    assert_eq!(cli(&ns, &["audit"]).status.code(), Some(0));

    let out = cli(&ns, &["reset", "user:1", "--kind", "gcra"]);
    assert!(stdout(&out).contains("deleted 1 keys"));
    let out = cli(&ns, &["list", "--json", "--subject", "user:1"]);
    assert_eq!(stdout(&out).lines().count(), 3);
    common::assert_every_key_has_ttl(&ns).await;
}

#[test]
fn unreachable_cluster_is_exit_code_2_with_the_cause() {
    let out = Command::new(env!("CARGO_BIN_EXE_shardlimit"))
        .args(["--nodes", "redis://127.0.0.1:1", "count"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not connect to the cluster at redis://127.0.0.1:1"),
        "{err}"
    );
}

#[tokio::test]
async fn reset_dry_runs_and_refuses_held_locks_live_permits_and_counts_unless_forced() {
    let cluster = common::cluster("cli-reset").await;
    let ns = cluster.namespace().to_owned();
    let hour = std::time::Duration::from_secs(3600);
    let lock = shardlimit::Lock::builder(&cluster, "job")
        .ttl(hour)
        .build()
        .unwrap();
    let guard = lock.try_acquire("busy").await.unwrap().unwrap();
    let lease = shardlimit::ConcurrencyLimiter::builder(&cluster, "exports")
        .lease_ttl(hour)
        .build()
        .unwrap();
    let permit = lease.try_acquire("busy").await.unwrap().unwrap();
    let counter = shardlimit::Counter::builder(&cluster, "billing")
        .build()
        .unwrap();
    counter.add("busy", 30).await.unwrap();
    let limiter = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_hour(NonZeroU32::new(10).unwrap()),
    )
    .build()
    .unwrap();
    assert!(limiter.check("busy").await.unwrap().allowed);
    let keys_before = common::keys_with_pttl(&ns).await.len();
    assert_eq!(keys_before, 5, "gcra, lease, counter, lock and its fence");

    // --dry-run lists exactly the keys, deletes nothing.
    let out = cli(&ns, &["reset", "busy", "--dry-run"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let listed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("would delete"))
        .collect();
    assert_eq!(listed.len(), 5, "{text}");
    assert!(
        text.contains(&format!("{ns}:{{busy}}:lock:job:fence")),
        "{text}"
    );
    assert_eq!(common::keys_with_pttl(&ns).await.len(), 5);

    // Without --force: refused, with the reasons, nothing deleted.
    let out = cli(&ns, &["reset", "busy"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for reason in [
        "lock job is held",
        "lease exports has 1 permit",
        "counter billing holds 30",
    ] {
        assert!(err.contains(reason), "{err}");
    }
    assert_eq!(common::keys_with_pttl(&ns).await.len(), 5);

    // Only the rate limiter: nothing in the way.
    let out = cli(&ns, &["reset", "busy", "--kind", "gcra"]);
    assert!(stdout(&out).contains("deleted 1 keys"), "{}", stdout(&out));

    // A drained counter no longer stands in the way; the lock and lease do.
    assert_eq!(counter.drain("busy").await.unwrap(), Some(30));
    let out = cli(&ns, &["reset", "busy", "--kind", "counter"]);
    assert!(stdout(&out).contains("deleted 1 keys"), "{}", stdout(&out));
    let out = cli(&ns, &["reset", "busy", "--force"]);
    assert!(stdout(&out).contains("deleted 3 keys"), "{}", stdout(&out));
    assert!(common::keys_with_pttl(&ns).await.is_empty());
    assert!(!guard.release().await.unwrap());
    assert!(!permit.release().await.unwrap());
}
