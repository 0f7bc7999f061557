//! The documented worst case of every rate-limit algorithm, measured where
//! Redis measures it: `SLOWLOG` on the master that owns the subject. Each
//! algorithm runs its largest allowed quota and cost (the sliding log its
//! worst check: trim a full log and write a full one), and a multi-limit
//! runs all of them at once; the table in docs/limits.md
//! comes from this test's output (`cargo test --test cluster limits_bounds::
//! -- --nocapture`).
//!
//! To see sub-millisecond scripts the owning master's
//! `slowlog-log-slower-than` is set to 0 (and `slowlog-max-len` raised to
//! 8192) for the few seconds of the test and then restored; only entries
//! whose arguments contain this test's unique namespace are read, and only
//! those logged after the test started.
//!
//! The bound asserted is the median of three runs of each check, not the
//! maximum: the test cluster shares two cores with builds, and a script
//! preempted mid-run is logged with the wall time it waited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use redis::Value;
use shardlimit::{Algorithm, Cluster, MultiLimiter, Quota, RateLimiter};

/// The bound every check's fastest run must stay under, in microseconds.
///
/// The design budget is 1 ms per check, and the table this test prints is
/// how it is measured (docs/limits.md). On the shared
/// 2-core test machine the same scripts measure up to ~2x apart between
/// runs (a clean CI run saw the heaviest check at 1.1 ms, another run at
/// 0.52 ms), so the assertion is 5x the budget: it catches a script whose
/// cost grew by an order of magnitude (a loop that lost its bound), not
/// machine noise. What keeps scripts short is the quota bounds, which
/// tests/cluster/limiters.rs and tests/cluster/limits_prop.rs check exactly.
const MAX_SCRIPT_MICROS: u64 = 5000;

/// Runs of every extreme check. The assertion is on the fastest run:
/// contention only ever adds to a script's time, so the minimum is the
/// script's own cost while a median still moves with the load.
const RUNS: usize = 5;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// A limiter whose every check is its script (what this measures): a
/// fixed window's checks would otherwise be plain commands.
fn build(cluster: &Cluster, name: &str, algorithm: Algorithm, quota: Quota) -> RateLimiter {
    RateLimiter::builder(cluster, name, quota)
        .algorithm(algorithm)
        .plain_commands(false)
        .build()
        .unwrap()
}

/// How many entries the master's `SLOWLOG` holds while the test runs.
const SLOWLOG_LEN: usize = 8192;

/// One `SLOWLOG` entry of ours: id, microseconds, arguments.
struct Entry {
    id: i64,
    micros: u64,
    args: Vec<String>,
}

async fn slowlog(conn: &mut redis::aio::MultiplexedConnection, count: usize) -> Vec<Entry> {
    let entries: Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(count)
        .query_async(conn)
        .await
        .unwrap();
    let Value::Array(entries) = entries else {
        panic!("SLOWLOG GET: {entries:?}")
    };
    entries
        .into_iter()
        .map(|e| {
            let Value::Array(fields) = e else {
                panic!("{e:?}")
            };
            let args: Vec<Vec<u8>> = redis::from_redis_value(fields[3].clone()).unwrap();
            Entry {
                id: redis::from_redis_value(fields[0].clone()).unwrap(),
                micros: redis::from_redis_value(fields[2].clone()).unwrap(),
                args: args
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect(),
            }
        })
        .collect()
}

async fn config_get(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> String {
    let (_, value): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await
        .unwrap();
    value
}

async fn config_set(conn: &mut redis::aio::MultiplexedConnection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(conn)
        .await
        .unwrap();
}

/// `None` once the key is gone: the GCRA u32::MAX/1ms state lives a
/// millisecond, and Redis' active expiry removes it at a random moment
/// (`MEMORY USAGE` itself does not expire keys, so it is usually still read).
async fn memory_usage(key: &[u8]) -> Option<i64> {
    common::on_owner(key, redis::cmd("MEMORY").arg("USAGE").arg(key)).await
}

/// Reads the `SLOWLOG` entry of each check right after it ran (with a
/// threshold of 0 other traffic fills even a longer log fast), under a label
/// saying which check it was.
struct Recorder {
    conn: redis::aio::MultiplexedConnection,
    ns: String,
    last_id: i64,
    runs: BTreeMap<String, Vec<u64>>,
}

impl Recorder {
    async fn record(&mut self, label: &str) {
        // The last 1,024 entries, or, if other tests' traffic on this
        // master pushed ours out of those (a parallel run on a loaded
        // 2-core box, 2026-12-07: no entry of ours among 1,024 of a
        // property test's), all the log holds (`SLOWLOG_LEN`).
        let mut entries = slowlog(&mut self.conn, 1024).await;
        if entries.last().is_some_and(|e| e.id > self.last_id + 1) {
            entries = slowlog(&mut self.conn, SLOWLOG_LEN).await;
        }
        let mine: Vec<&Entry> = entries
            .iter()
            .filter(|e| {
                e.id > self.last_id
                    && e.args[0].eq_ignore_ascii_case("evalsha")
                    && e.args.iter().any(|a| a.starts_with(&self.ns))
            })
            .collect();
        assert_eq!(
            mine.len(),
            1,
            "{label}: expected one script in SLOWLOG (a failover moved the slot?): {:?}",
            entries
                .iter()
                .map(|e| (e.id, &e.args[..e.args.len().min(4)]))
                .collect::<Vec<_>>()
        );
        self.last_id = mine[0].id;
        self.runs
            .entry(label.to_owned())
            .or_default()
            .push(mine[0].micros);
    }
}

/// Runs every extreme check three times (under three limiter names, on one
/// subject, so on one master), recording each; returns the limiters of the
/// first run.
async fn run_extremes(cluster: &Cluster, rec: &mut Recorder) -> Vec<RateLimiter> {
    let year = Quota::MAX_PERIOD;
    let log_max = Algorithm::SlidingLog.max_limit();
    let max = NonZeroU32::MAX;
    let mut last = Vec::new();
    for run in 0..RUNS {
        let l = |name: &str, algorithm, quota| {
            build(cluster, &format!("{name}-{run}"), algorithm, quota)
        };
        let log = l(
            "log",
            Algorithm::SlidingLog,
            Quota::with_period(log_max, Duration::from_secs(1)),
        );
        let fw = l("fw", Algorithm::FixedWindow, Quota::with_period(max, year));
        let swc = l(
            "swc",
            Algorithm::SlidingWindow,
            Quota::with_period(max, year),
        );
        let slow = l(
            "gcra-year",
            Algorithm::Gcra,
            Quota::with_period(nz(1), year),
        );
        let fast = l(
            "gcra-fast",
            Algorithm::Gcra,
            Quota::with_period(max, Duration::from_millis(1)).allow_burst(max),
        );
        let multi = MultiLimiter::new([
            l(
                "m-log",
                Algorithm::SlidingLog,
                Quota::with_period(log_max, Duration::from_secs(1)),
            ),
            l(
                "m-fw",
                Algorithm::FixedWindow,
                Quota::with_period(max, year),
            ),
            l(
                "m-swc",
                Algorithm::SlidingWindow,
                Quota::with_period(max, year),
            ),
            l("m-gcra", Algorithm::Gcra, Quota::with_period(max, year)),
        ])
        .unwrap();
        let full = log_max.get();
        assert!(log.check_n("s", full).await.unwrap().allowed);
        rec.record(&format!("sliding log {full}/1s: fill, cost {full}"))
            .await;
        assert!(!log.check("s").await.unwrap().allowed);
        rec.record(&format!("sliding log {full}/1s: full, denied"))
            .await;
        assert!(multi.check_n("s", full).await.unwrap().allowed);
        rec.record(&format!("multi-limit of all four: fill, cost {full}"))
            .await;
        for (what, l) in [
            ("fixed window", &fw),
            ("sliding window", &swc),
            ("GCRA u32::MAX/1ms", &fast),
        ] {
            assert!(l.check_n("s", u32::MAX).await.unwrap().allowed, "{what}");
            rec.record(&format!("{what}: cost u32::MAX")).await;
        }
        assert!(!fw.check("s").await.unwrap().allowed);
        rec.record("fixed window: full, denied").await;
        assert!(slow.check("s").await.unwrap().allowed);
        rec.record("GCRA 1/366d: cost 1").await;
        assert!(!slow.check("s").await.unwrap().allowed);
        rec.record("GCRA 1/366d: denied").await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(log.check_n("s", full).await.unwrap().allowed);
        rec.record(&format!("sliding log {full}/1s: trim {full} + add {full}"))
            .await;
        assert!(multi.check_n("s", full).await.unwrap().allowed);
        rec.record(&format!(
            "multi-limit of all four: trim {full} + add {full}"
        ))
        .await;
        // The last run's limiters: their 1 s keys are the ones still alive
        // when MEMORY USAGE is read.
        if run == RUNS - 1 {
            last = vec![log, fw, swc, slow, fast];
        }
    }
    last
}

#[tokio::test]
async fn the_largest_quotas_keep_every_check_short() {
    let cluster = common::cluster("bounds").await;
    let ns = cluster.namespace().to_owned();
    let probe = build(&cluster, "probe", Algorithm::Gcra, Quota::per_second(nz(1)));
    let key = probe.key("s").unwrap();
    // Load every script on the owner first, so what is measured is EVALSHA.
    for algorithm in Algorithm::ALL {
        let l = build(&cluster, "warm", algorithm, Quota::per_second(nz(1)));
        let _ = l.peek("s").await.unwrap();
        let _ = MultiLimiter::new([l]).unwrap().peek("s").await.unwrap();
    }
    let owner = common::owner(shardlimit::keys::slot(&key)).await;
    let mut conn = common::node(&owner.addr).await;
    let threshold = config_get(&mut conn, "slowlog-log-slower-than").await;
    let max_len = config_get(&mut conn, "slowlog-max-len").await;
    let last_id = slowlog(&mut conn, 1).await.first().map_or(-1, |e| e.id);
    config_set(&mut conn, "slowlog-max-len", &SLOWLOG_LEN.to_string()).await;
    config_set(&mut conn, "slowlog-log-slower-than", "0").await;
    let mut rec = Recorder {
        conn: common::node(&owner.addr).await,
        ns: ns.clone(),
        last_id,
        runs: BTreeMap::new(),
    };
    let run = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let limiters = run_extremes(&cluster, &mut rec).await;
            (limiters, rec.runs)
        })
    }
    .await;
    // Restored before any assertion can fail.
    config_set(&mut conn, "slowlog-log-slower-than", &threshold).await;
    config_set(&mut conn, "slowlog-max-len", &max_len).await;
    let (limiters, runs) = run.unwrap();

    println!("owner of the subject: {}", owner.addr);
    println!("| check | runs (us) | median (us) | fastest (us) |");
    println!("|---|---|---|---|");
    let mut too_slow = Vec::new();
    for (what, mut micros) in runs {
        micros.sort_unstable();
        let median = micros[micros.len() / 2];
        let fastest = micros[0];
        println!("| {what} | {micros:?} | {median} | {fastest} |");
        if fastest > MAX_SCRIPT_MICROS {
            too_slow.push(format!("{what}: {micros:?}"));
        }
    }
    for l in &limiters {
        let key = l.key("s").unwrap();
        let bytes = memory_usage(&key)
            .await
            .map_or_else(|| "expired".to_owned(), |b| format!("{b} bytes"));
        println!(
            "memory per subject, {} {:?}: {bytes}",
            l.algorithm(),
            l.quota(),
        );
    }
    assert!(
        too_slow.is_empty(),
        "fastest of {RUNS} runs over {MAX_SCRIPT_MICROS} us: {too_slow:?}"
    );
    common::assert_every_key_has_ttl(&ns).await;
}
