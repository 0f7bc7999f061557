//! The `shardlimit` binary against the six-node cluster: `list --json`,
//! `count`, `show`, `audit` (exit codes), `reset`, `override` and `top`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::process::{Command, Output};

use serde_json::Value;
use shardlimit::{Algorithm, Quota, RateLimiter};

fn cli(namespace: &str, args: &[&str]) -> Output {
    Command::new(crate::common::cli_exe())
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

/// The JSON Lines of a command that succeeded.
fn json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn list_count_show_audit_and_reset() {
    crate::cli_built();
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
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 12);
    let masters: Vec<String> = common::masters()
        .await
        .into_iter()
        .map(|m| m.addr)
        .collect();
    for row in &rows {
        assert_eq!(row["name"], "api");
        assert!(row["ttl_ms"].as_u64().unwrap() > 0);
        assert!(["fw", "slog", "swc", "gcra"].contains(&row["kind"].as_str().unwrap()));
        // The master the row's key was found on, wherever the cluster runs.
        assert!(masters.iter().any(|m| row["node"] == m.as_str()), "{row}");
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

    // Per master by node id, then its address: a promoted replica's rows
    // are its own.
    let by_id: Vec<(String, String)> = common::masters()
        .await
        .into_iter()
        .map(|m| (m.id, m.addr))
        .collect();
    let rows = json_lines(&cli(&ns, &["count", "--json"]));
    let (total, per_master) = rows.split_last().unwrap();
    assert_eq!(total["total"], 12, "{total}");
    assert_eq!(total["approximate"], serde_json::json!([]), "{total}");
    for row in per_master {
        let (id, addr) = (row["node_id"].as_str().unwrap(), row["node"].as_str());
        assert!(
            by_id
                .iter()
                .any(|(i, a)| i == id && Some(a.as_str()) == addr),
            "{row}"
        );
    }

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
    let out = Command::new(crate::common::cli_exe())
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
async fn reset_dry_runs_and_refuses_held_locks_live_leases_and_counts_unless_forced() {
    crate::cli_built();
    let cluster = common::cluster("cli-reset").await;
    let ns = cluster.namespace().to_owned();
    let hour = std::time::Duration::from_secs(3600);
    let lock = shardlimit::Lock::builder(&cluster, "job")
        .ttl(hour)
        .build()
        .unwrap();
    let guard = lock.try_acquire("busy").await.unwrap().unwrap();
    let exports = shardlimit::LeaseLimiter::builder(&cluster, "exports")
        .lease_ttl(hour)
        .build()
        .unwrap();
    let lease = exports.try_acquire("busy").await.unwrap().unwrap();
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
    // Each state as the library's JSON names it (the Limits page's API
    // serves the same shape): a lease's `leases_held`, a lock's fencing token.
    let out = cli(&ns, &["list", "--json", "--subject", "busy"]);
    let rows: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let state = |kind: &str| rows.iter().find(|r| r["kind"] == kind).unwrap()["state"].clone();
    assert_eq!(state("lease")["leases_held"], 1, "{rows:?}");
    assert_eq!(state("lock")["held"], true, "{rows:?}");
    assert_eq!(state("counter")["value"], 30, "{rows:?}");

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
        "lease exports has 1 lease(s) held",
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
    assert!(!lease.release().await.unwrap());
}

fn json_line(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(out);
    assert_eq!(text.lines().count(), 1, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// An override set with the CLI is what the library's checks apply, in
/// every algorithm: 1 a day by default, 5 for the subject (days, so no
/// fixed window ends during the test but once in 86,400 runs). `get` and
/// `clear` build their limiter with a made-up default quota; the state
/// they leave is byte for byte what the checks wrote.
#[tokio::test]
async fn override_set_get_clear_round_trip_and_checks_apply_it() {
    crate::cli_built();
    let cluster = common::cluster("cli-override").await;
    let ns = cluster.namespace().to_owned();
    let one_a_day = Quota::with_period(NonZeroU32::MIN, std::time::Duration::from_secs(86_400));
    let day_ms = 86_400_000;
    for algorithm in Algorithm::ALL {
        let kind = algorithm.kind();
        let limiter = format!("{kind}:api");
        let api = RateLimiter::builder(&cluster, "api", one_a_day)
            .algorithm(algorithm)
            .build()
            .unwrap();

        let set = json_line(&cli(
            &ns,
            &[
                "override", "set", "user:7", &limiter, "5/1d", "--ttl", "1d", "--json",
            ],
        ));
        assert_eq!(set["subject"], "user:7");
        assert_eq!(
            (&set["limiter"], &set["kind"], &set["name"]),
            (
                &Value::from(limiter.clone()),
                &Value::from(kind),
                &Value::from("api")
            )
        );
        let o = &set["override"];
        assert_eq!(
            (&o["quota"], &o["limit"], &o["burst"]),
            (&Value::from("5/1d"), &Value::from(5), &Value::from(5))
        );
        assert_eq!(o["period_ms"], 86_400_000);
        let ttl = o["ttl_ms"].as_u64().unwrap();
        assert!(ttl <= day_ms && ttl > day_ms - 60_000, "{set}");
        assert_eq!(set["blocked_for_ms"], Value::Null);

        for i in 0..5 {
            let d = api.check("user:7").await.unwrap();
            assert!(d.allowed && d.overridden, "{kind} check {i}: {d:?}");
            assert_eq!(d.limit, 5);
        }
        assert!(!api.check("user:7").await.unwrap().allowed, "{kind}: a 6th");

        // get and clear write nothing of the state, whatever quota they
        // were built with.
        let state = api.key("user:7").unwrap();
        let before = common::dump(&state).await;
        assert!(before.is_some(), "{kind}");
        let got = json_line(&cli(
            &ns,
            &["override", "get", "user:7", &limiter, "--json"],
        ));
        assert_eq!(got["override"]["quota"], "5/1d");
        let text = stdout(&cli(&ns, &["override", "get", "user:7", &limiter]));
        assert!(
            text.starts_with(&format!(
                "override of {limiter} for \"user:7\": 5/1d, ttl 23h5"
            )),
            "{text}"
        );
        let cleared = json_line(&cli(
            &ns,
            &["override", "clear", "user:7", &limiter, "--json"],
        ));
        assert_eq!(cleared["override"], Value::Null);
        assert_eq!(
            common::dump(&state).await,
            before,
            "{kind}: state rewritten"
        );
        let d = api.check("user:7").await.unwrap();
        assert!(
            !d.allowed && !d.overridden,
            "{kind}: the default applies again: {d:?}"
        );
        assert_eq!(d.limit, 1);
        let text = stdout(&cli(&ns, &["override", "clear", "user:7", &limiter]));
        assert_eq!(
            text,
            format!("no override of {limiter} for \"user:7\": its default quota applies\n")
        );
    }

    // A GCRA burst round-trips; a block is shown; list shows the override
    // with its limiter and count does not count it.
    let out = cli(
        &ns,
        &[
            "override",
            "set",
            "user:8",
            "gcra:api",
            "10/1s:burst=20",
            "--ttl",
            "1h30m",
        ],
    );
    assert_eq!(
        stdout(&out),
        "override of gcra:api for \"user:8\": 10/1s:burst=20, ttl 1h30m\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gcra = RateLimiter::builder(&cluster, "api", one_a_day)
        .build()
        .unwrap();
    gcra.block("user:8", std::time::Duration::from_secs(600))
        .await
        .unwrap();
    let text = stdout(&cli(&ns, &["override", "get", "user:8", "gcra:api"]));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("override of gcra:api for \"user:8\": 10/1s:burst=20, ttl 1h29m"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("\"user:8\" is blocked by gcra:api for 9m5"),
        "{text}"
    );
    let rows: Vec<Value> = stdout(&cli(&ns, &["list", "--json", "--subject", "user:8"]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["state"]["unused"], true);
    assert_eq!(rows[0]["override"]["quota"], "10/1s:burst=20");
    // In text, what the GCRA override admits in its worst second too.
    let text = stdout(&cli(&ns, &["list", "--subject", "user:8"]));
    assert!(
        text.contains("override 10/1s:burst=20 (at most 29 in any 1s), ttl 1h29m"),
        "{text}"
    );
    assert!(rows[0]["blocked_for_ms"].as_u64().unwrap() > 590_000);
    let out = cli(&ns, &["show", "user:8"]);
    assert!(
        stdout(&out).contains("unused (full quota); blocked for 9m5"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&cli(&ns, &["count"]))
            .lines()
            .any(|l| l == "total\t5")
    );
    common::assert_every_key_has_ttl(&ns).await;
}

/// `override` acts on a limiter it does not run: setting, reading or
/// clearing a subject's override publishes nothing to the catalog, where a
/// spec made up for the command (its override quota, or a 1/1s default)
/// would be taken for the limiter's own limit by `list`, `show` and the
/// Limits page.
#[tokio::test]
async fn override_publishes_no_spec_of_the_limiter() {
    crate::cli_built();
    let cluster = common::cluster("cli-override-spec").await;
    let ns = cluster.namespace().to_owned();
    for args in [
        &[
            "override", "set", "user:7", "gcra:api", "5/1d", "--ttl", "1h",
        ][..],
        &["override", "get", "user:7", "gcra:api"],
        &["override", "clear", "user:7", "gcra:api"],
    ] {
        let out = cli(&ns, args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let catalog = shardlimit::admin::Scanner::new(&cluster)
        .catalog()
        .await
        .unwrap();
    assert_eq!(
        catalog.specs("gcra", "api"),
        &[],
        "the CLI published a spec of gcra:api"
    );
}

/// What the command line can check is refused before it connects: the
/// same commands against a port nobody listens on fail on the input, not
/// the connection. The quota's bounds for the algorithm are the library's,
/// checked when the limiter is built: nothing is written.
#[tokio::test]
async fn override_refuses_bad_input_before_anything_is_sent() {
    crate::cli_built();
    for (args, says) in [
        (
            &["set", "u", "leaky:api", "5/1h"][..],
            "unknown rate limiter kind \"leaky\": one of fw, slog, swc, gcra",
        ),
        (&["get", "u", "api"], "expected <kind>:<name>"),
        (
            &["clear", "u", "gcra:sp ace"],
            "invalid value 'gcra:sp ace'",
        ),
        (
            &["set", "u", "gcra:api", "5/1x"],
            "period \"1x\": unknown unit \"x\"",
        ),
        (
            &["set", "u", "gcra:api", "five/1h"],
            "limit \"five\" is not a whole number",
        ),
        (
            &["set", "u", "gcra:api", "5/1h:burst"],
            "unknown option \"burst\"",
        ),
        (
            &["set", "u", "gcra:api", "5/1h", "--ttl", "367d"],
            "an override lives at most 366d (set it again to renew it), not 367d",
        ),
        (
            &["set", "u", "gcra:api", "5/1h", "--ttl", "0s"],
            "no time at all",
        ),
    ] {
        let out = Command::new(crate::common::cli_exe())
            .args(["--nodes", "redis://127.0.0.1:1", "override"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("connect"), "{args:?}: {err}");
    }

    let cluster = common::cluster("cli-override-bad").await;
    let ns = cluster.namespace().to_owned();
    for (args, says) in [
        (
            &["set", "u", "fw:api", "5/1h:burst=9"][..],
            "quota.burst: a burst only applies to GCRA",
        ),
        (
            &["set", "u", "slog:api", "500/1h"],
            "quota.limit: 500 is over the sliding log maximum of 128",
        ),
    ] {
        let out = cli(&ns, &[&["override"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(common::keys_with_pttl(&ns).await.is_empty());
}

/// Issue 28, item 6: the CLI takes its namespace from
/// `SHARDLIMIT_NAMESPACE` (it had only `--namespace`, default `sl`).
#[tokio::test]
async fn the_namespace_comes_from_shardlimit_namespace() {
    crate::cli_built();
    let cluster = common::cluster("cli-env-ns").await;
    let l = RateLimiter::builder(&cluster, "api", Quota::per_hour(10))
        .build()
        .unwrap();
    for subject in ["user:1", "user:2", "user:3"] {
        assert!(l.check(subject).await.unwrap().allowed);
    }
    let out = Command::new(crate::common::cli_exe())
        .env("SHARDLIMIT_NODES", common::node_urls().join(","))
        .env("SHARDLIMIT_NAMESPACE", cluster.namespace())
        .arg("count")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        stdout(&out).lines().any(|l| l == "total\t3"),
        "{}",
        stdout(&out)
    );
}

/// Issue 28, item 6: with no `SHARDLIMIT_NODES` (and no test cluster
/// port) the CLI — and every service using `Cluster::builder_from_env` —
/// stops before contacting anything, saying what to set; it used to try
/// the six local test nodes.
#[test]
fn unset_nodes_is_an_error_that_says_what_to_set() {
    crate::cli_built();
    let out = Command::new(crate::common::cli_exe())
        .env_remove("SHARDLIMIT_NODES")
        .env_remove("SHARDLIMIT_CLUSTER_PORT")
        .arg("count")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("SHARDLIMIT_NODES") && err.contains("unset: set SHARDLIMIT_NODES"),
        "{err}"
    );
    assert!(!err.contains("could not connect"), "{err}");
}

#[tokio::test]
async fn top_shows_the_most_denied_subjects_once_and_watching() {
    crate::cli_built();
    let cluster = common::cluster("cli-top").await;
    let ns = cluster.namespace().to_owned();
    let api = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_hour(NonZeroU32::new(1).unwrap()),
    )
    .build()
    .unwrap();
    let login = RateLimiter::builder(
        &cluster,
        "login",
        Quota::per_hour(NonZeroU32::new(1).unwrap()),
    )
    .algorithm(Algorithm::FixedWindow)
    .build()
    .unwrap();
    for (subject, n) in [("abuser", 6), ("user:7", 3)] {
        for _ in 0..n {
            let _ = api.check(subject).await.unwrap();
        }
    }
    let _ = login.check("guesser").await.unwrap();
    let _ = login.check("guesser").await.unwrap();
    // Published within 5 s: every denial of both limiters, not the report
    // published at the first one (one report holds both, and it may have
    // gone out after api's denials and before login's).
    let started = std::time::Instant::now();
    let row = loop {
        let rows = json_lines(&cli(&ns, &["top", "--json"]));
        let denials = |name: &str| {
            rows.iter()
                .find(|row| row["name"] == name)
                .map(|row| row["denials"].clone())
        };
        if denials("api") == Some(7.into()) && denials("login") == Some(1.into()) {
            let api = rows.iter().find(|row| row["name"] == "api");
            break api.cloned().unwrap();
        }
        assert!(started.elapsed().as_secs() < 10, "{rows:?}");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert_eq!(row["kind"], "gcra");
    assert_eq!(row["denials"], 7);
    assert_eq!(row["subjects"][0]["subject"], "abuser");
    assert_eq!(row["subjects"][0]["denials"], 5);
    assert_eq!(row["subjects"][1]["subject"], "user:7");
    assert_eq!(row["window_ms"], 60_000);

    let out = cli(&ns, &["top", "--limit", "1"]);
    let text = stdout(&out);
    assert!(text.contains("gcra api: allowed"), "{text}");
    assert!(text.contains("fw login: allowed"), "{text}");
    assert!(text.contains("guesser"), "{text}");
    assert!(
        text.contains("abuser") && !text.contains("user:7"),
        "--limit 1: {text}"
    );
    let out = cli(&ns, &["top", "--name", "nothing"]);
    assert!(stdout(&out).starts_with("no throttled report for nothing"));

    // --watch prints again every 5 s until stopped.
    let mut child = std::process::Command::new(crate::common::cli_exe())
        .args([
            "--nodes",
            &common::node_urls().join(","),
            "--namespace",
            &ns,
        ])
        .args(["top", "--watch", "--name", "login"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let rounds = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        reader
            .lines()
            .map(Result::unwrap)
            .filter(|l| l.starts_with("fw login:"))
            .take(2)
            .count()
    });
    let rounds = tokio::time::timeout(std::time::Duration::from_secs(15), rounds).await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(rounds.unwrap().unwrap(), 2);
}

#[tokio::test]
async fn list_and_show_say_remaining_of_the_published_or_given_limit() {
    crate::cli_built();
    let cluster = common::cluster("cli-headroom").await;
    let ns = cluster.namespace().to_owned();
    let api = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_hour(NonZeroU32::new(5).unwrap()),
    )
    .build()
    .unwrap();
    for _ in 0..5 {
        assert!(api.check("busy").await.unwrap().allowed);
    }
    assert!(api.check("idle").await.unwrap().allowed);
    common::catalog_published(&api, 1).await;

    let rows = json_lines(&cli(&ns, &["list", "--json"]));
    assert_eq!(rows.len(), 2, "the catalog is no row: {rows:?}");
    let busy = rows.iter().find(|r| r["subject"] == "busy").unwrap();
    assert_eq!(
        (&busy["remaining"], &busy["limit"]),
        (&Value::from(0), &Value::from(5))
    );
    assert_eq!(busy["at_limit"], true);
    assert_eq!(busy["quota_source"], "published");
    assert!(busy["full_in_ms"].as_u64().unwrap() > 0, "{busy}");
    let idle = rows.iter().find(|r| r["subject"] == "idle").unwrap();
    assert_eq!(
        (&idle["remaining"], &idle["at_limit"]),
        (&Value::from(4), &Value::from(false))
    );

    // The table: a REMAINING column.
    let out = cli(&ns, &["show", "busy"]);
    let text = stdout(&out);
    assert!(
        text.lines().next().unwrap().contains("\tREMAINING\t"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("gcra\tapi\tbusy\t")
            && l.contains("\t0/5 remaining, at limit, full in ")),
        "{text}"
    );
    let out = cli(&ns, &["show", "idle"]);
    let text = stdout(&out);
    assert!(text.contains("\t4/5 remaining, full in "), "{text}");
    assert!(!text.contains("at limit"), "{text}");

    // --quota wins over the catalog. (The hour owed by 5 units at 5/h
    // leaves 10 of a burst of 20 at 10/h.)
    let out = cli(&ns, &["show", "busy", "--quota", "api=10/1h:burst=20"]);
    assert!(
        stdout(&out).contains("\t10/20 remaining, full in "),
        "{}",
        stdout(&out)
    );
    let given = json_lines(&cli(&ns, &["list", "--json", "--quota", "api=10/1h"]));
    assert!(
        given
            .iter()
            .all(|r| r["limit"] == 10 && r["quota_source"] == "given"),
        "{given:?}"
    );
    let out = cli(&ns, &["show", "busy", "--quota", "api"]);
    assert_eq!(out.status.code(), Some(2), "a bad --quota is refused");
}

/// Issue 42, item 6: a credential is limited under its keyed digest, so
/// `show` takes the raw key and hashes it with the services' subject
/// secret (from `SHARDLIMIT_SUBJECT_SECRET` or `--subject-secret-file`),
/// saying which rows are the hashed subject; without the secret it finds
/// nothing and says what to give.
#[tokio::test]
async fn show_finds_a_credential_by_its_raw_key_with_the_subject_secret() {
    crate::cli_built();
    let namespace = common::unique_namespace("cli-hashed");
    let secret = "9c2e7a41f0b35d86e1a4c7f29b0d3e58";
    let cluster = shardlimit::Cluster::builder(common::node_urls())
        .namespace(&namespace)
        .subject_secret(secret)
        .build()
        .await
        .unwrap();
    let api = RateLimiter::builder(&cluster, "api", Quota::per_hour(10))
        .build()
        .unwrap();
    let raw = "sk-live-Zq81mXr4";
    let digest = cluster.subject_hasher().hash(raw);
    // What the HTTP layer does with a HeaderKey (tests/http/layer.rs).
    for _ in 0..3 {
        assert!(api.check(digest).await.unwrap().allowed);
    }
    let show = |env: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(crate::common::cli_exe());
        command
            .env_remove("SHARDLIMIT_SUBJECT_SECRET")
            .env_remove("SHARDLIMIT_SUBJECT_SECRET_FILE")
            .env("SHARDLIMIT_NODES", common::node_urls().join(","))
            .env("SHARDLIMIT_NAMESPACE", &namespace)
            .envs(env.iter().copied())
            .arg("show")
            .args(args);
        command.output().unwrap()
    };

    let out = show(&[("SHARDLIMIT_SUBJECT_SECRET", secret)], &[raw, "--json"]);
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["subject"], digest.as_str());
    assert_eq!(rows[0]["found_by"], "keyed_digest");
    assert!(
        rows[0]["state"]["theoretical_arrival_us"].is_u64(),
        "{}",
        rows[0]
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "hashed subject: {digest} is the subject given, hashed with the subject secret (1 of the rows above)"
        )),
        "{err}"
    );
    assert!(!stdout(&out).contains(raw) && !err.contains(secret));

    // The same from a file; the table says the digest.
    let dir = std::env::temp_dir().join(format!("{namespace}-secret"));
    std::fs::write(&dir, format!("{secret}\n")).unwrap();
    let path = dir.to_str().unwrap();
    let out = show(&[], &["--subject-secret-file", path, raw]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("gcra\tapi\t") && l.contains(digest.as_str())),
        "{text}"
    );
    std::fs::remove_file(&dir).unwrap();

    // Without the secret: the namespace's default key finds nothing, and
    // the note says what to give.
    let out = show(&[], &[raw, "--json"]);
    assert!(json_lines(&out).is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing under the subject given")
            && err.contains("SHARDLIMIT_SUBJECT_SECRET"),
        "{err}"
    );

    // A hashed subject given as it is: only read as it is.
    let out = show(&[], &[digest.as_str(), "--json"]);
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["found_by"], "subject");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
