//! `--populate`: memory per limiter next to minimal raw keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::json;
use shardlimit::Cluster;

use crate::args::Args;
use crate::drive::{Outcome, Sampler, Shape, add, drive, new_hist, process_cpu};
use crate::raw::bare_connection;
use crate::report::write_report;
use crate::target::{Target, lib_call, lib_call_keep};

/// Creates `n` limiters (one operation per subject `s0..s{n}`) and reports
/// memory per limiter against minimal raw keys.
pub(crate) async fn populate(cluster: &Cluster, target: &Target, args: &Args, n: u64) {
    let before = used_memory(cluster).await;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let cpu_started = process_cpu();
    let mut hist = new_hist();
    let mut outcome = Outcome::default();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (next, target) = (next.clone(), target.clone());
            tokio::spawn(async move {
                let mut hist = new_hist();
                let mut outcome = Outcome::default();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        break;
                    }
                    let t = Instant::now();
                    match lib_call_keep(target.clone(), k).await {
                        Ok(()) => outcome.ok += 1,
                        Err(_) => outcome.errors += 1,
                    }
                    hist.saturating_record(
                        u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
                    );
                }
                (hist, outcome)
            })
        })
        .collect();
    let progress = {
        let next = next.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let done = next.load(Ordering::Relaxed).min(n);
                eprint!(
                    "\rpopulating: {done}/{n} ({:.0}/s)   ",
                    done as f64 / started.elapsed().as_secs_f64()
                );
                if done >= n {
                    break;
                }
            }
        })
    };
    for t in tasks {
        let (h, o) = t.await.unwrap();
        hist.add(&h).unwrap();
        add(&mut outcome, o);
    }
    progress.abort();
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_us = (process_cpu() - cpu_started).as_secs_f64() * 1e6 / n.max(1) as f64;
    eprintln!();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = used_memory(cluster).await;
    let per_limiter = (after.saturating_sub(before)) as f64 / n as f64;
    let sample_key = match target {
        Target::Limiter(l) => l.key(format!("s{}", n / 2)).unwrap(),
        _ => format!("{}:{{s{}}}:{}:bench", cluster.namespace(), n / 2, args.kind).into_bytes(),
    };

    // `MEMORY USAGE` of a sample of the limiters' keys.
    let lib_usage = match target {
        Target::Limiter(l) => {
            let mut conn = bare_connection().await;
            let step = usize::try_from(n / 200).unwrap_or(1).max(1);
            let keys = (0..n)
                .step_by(step)
                .map(|k| l.key(format!("s{k}")).unwrap());
            memory_usage(&mut conn, keys).await
        }
        _ => f64::NAN,
    };

    // The same number of the smallest keys of the same shape: one string
    // key with a hash tag, the same value, a TTL.
    let raw = raw_keys(cluster, &sample_key, n, args.concurrency).await;

    // Scan them all: the admin view at this size.
    let scan_started = Instant::now();
    let live = count_keys(cluster).await;
    let scan_secs = scan_started.elapsed().as_secs_f64();

    // And check them: decisions per second over all `n` subjects.
    let mut check_args = args.clone();
    check_args.subjects = n;
    let sampler = Sampler::new(&check_args);
    let checks = {
        let target = target.clone();
        move |k: &[u64]| lib_call(target.clone(), k[0])
    };
    let checked = drive(
        "checking",
        Duration::from_secs_f64(args.round_secs * args.rounds as f64),
        None,
        Shape::single(args.concurrency),
        &sampler,
        checks,
    )
    .await;
    let (check_rate, check_hist, check_outcome) = (checked.rate, &checked.hist, checked.outcome);
    eprintln!();

    let report = json!({
        "kind": args.kind,
        "populated": n,
        "errors": outcome.errors,
        "seconds": elapsed,
        "populate_per_sec": (n as f64) / elapsed,
        "populate_cpu_us_per_op": cpu_us,
        "raw_keys_cpu_us_per_op": raw.cpu_us,
        "p50_us": hist.value_at_quantile(0.5),
        "p99_us": hist.value_at_quantile(0.99),
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_limiter": per_limiter,
        "key_example": String::from_utf8_lossy(&sample_key),
        "key_bytes": sample_key.len(),
        "raw_key_example": String::from_utf8_lossy(&raw.example),
        "raw_key_bytes": raw.example.len(),
        "raw_value_bytes": raw.value_len,
        "bytes_per_raw_key": raw.bytes_per_key,
        "memory_usage_per_limiter_key": lib_usage,
        "memory_usage_per_raw_key": raw.memory_usage,
        "primitives_counted_by_scan": live,
        "scan_seconds": scan_secs,
        "scan_keys_per_sec": (live as f64) / scan_secs,
        "check_decisions_per_sec": check_rate,
        "check_p50_us": check_hist.value_at_quantile(0.5),
        "check_p99_us": check_hist.value_at_quantile(0.99),
        "check_errors": check_outcome.errors,
        "check_cpu_us_per_decision": checked.cpu_us,
    });
    println!(
        "populated {n} {} limiters in {elapsed:.1} s ({:.0}/s, client CPU {cpu_us:.1} µs per operation, p50 {:?}, p99 {:?}, {} errors)\n\
         memory (used_memory summed over the masters, no AOF rewrite running): {per_limiter:.1} bytes per limiter; \
         MEMORY USAGE {lib_usage:.1} bytes per key; key {} ({} bytes)\n\
         smallest key of that shape: {:.1} bytes per key; MEMORY USAGE {:.1}; key {} ({} bytes) + {}-byte value, same TTL; \
         bare redis-rs SETs, client CPU {:.1} µs per operation\n\
         scan: {live} primitives counted in {scan_secs:.1} s ({:.0} keys/s)\n\
         checks over all {n} subjects: {check_rate:.0} decisions/s, client CPU {:.1} µs per decision, p50 {:?}, p99 {:?}, {} errors",
        args.kind,
        n as f64 / elapsed,
        Duration::from_micros(hist.value_at_quantile(0.5)),
        Duration::from_micros(hist.value_at_quantile(0.99)),
        outcome.errors,
        String::from_utf8_lossy(&sample_key),
        sample_key.len(),
        raw.bytes_per_key,
        raw.memory_usage,
        String::from_utf8_lossy(&raw.example),
        raw.example.len(),
        raw.value_len,
        raw.cpu_us,
        live as f64 / scan_secs,
        checked.cpu_us,
        Duration::from_micros(check_hist.value_at_quantile(0.5)),
        Duration::from_micros(check_hist.value_at_quantile(0.99)),
        check_outcome.errors,
    );
    write_report(&args.kind, "memory", &report);
}

pub(crate) struct RawKeys {
    pub(crate) example: Vec<u8>,
    pub(crate) value_len: usize,
    pub(crate) bytes_per_key: f64,
    /// `MEMORY USAGE` averaged over a sample of the raw keys.
    pub(crate) memory_usage: f64,
    /// Process CPU time per `SET`, microseconds.
    pub(crate) cpu_us: f64,
}

/// `MEMORY USAGE` (the key, its value and its hash-table entry, as Redis
/// counts them) averaged over `keys`.
pub(crate) async fn memory_usage(
    conn: &mut redis::cluster_async::ClusterConnection,
    keys: impl Iterator<Item = Vec<u8>>,
) -> f64 {
    let (mut total, mut n) = (0u64, 0u64);
    for key in keys {
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap_or(None);
        if let Some(b) = bytes {
            total += b;
            n += 1;
        }
    }
    total as f64 / n.max(1) as f64
}

/// Creates `n` keys `{<k><salt>}` holding the value `like` holds, with its TTL,
/// through bare redis-rs, and measures their memory.
pub(crate) async fn raw_keys(
    cluster: &Cluster,
    like: &[u8],
    n: u64,
    concurrency: usize,
) -> RawKeys {
    let mut conn = bare_connection().await;
    let value: Option<Vec<u8>> = redis::cmd("GET")
        .arg(like)
        .query_async(&mut conn)
        .await
        .unwrap_or(None);
    let value = Arc::new(value.unwrap_or_else(|| b"1".to_vec()));
    let ttl_ms: i64 = redis::cmd("PTTL")
        .arg(like)
        .query_async(&mut conn)
        .await
        .unwrap_or(600_000);
    let ttl_ms = ttl_ms.max(600_000);
    // A fresh 4-hex-digit salt per run, so an earlier run's keys (alive
    // for their TTL) are not overwritten instead of added.
    let salt: u16 = rand::rng().random();
    let before = used_memory(cluster).await;
    let cpu_started = process_cpu();
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (next, value, mut conn) = (next.clone(), value.clone(), conn.clone());
            tokio::spawn(async move {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        break;
                    }
                    let _: () = redis::cmd("SET")
                        .arg(format!("{{{k}{salt:04x}}}"))
                        .arg(&*value)
                        .arg("PX")
                        .arg(ttl_ms)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let cpu_us = (process_cpu() - cpu_started).as_secs_f64() * 1e6 / n.max(1) as f64;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = used_memory(cluster).await;
    let sample = (0..n).step_by(usize::try_from(n / 200).unwrap_or(1).max(1));
    let memory_usage = memory_usage(
        &mut conn,
        sample.map(|k| format!("{{{k}{salt:04x}}}").into_bytes()),
    )
    .await;
    RawKeys {
        example: format!("{{{}{salt:04x}}}", n / 2).into_bytes(),
        value_len: value.len(),
        bytes_per_key: after.saturating_sub(before) as f64 / n as f64,
        memory_usage,
        cpu_us,
    }
}

/// `used_memory` summed over the masters (everything, the keyspace's hash
/// tables included — `used_memory_dataset` would leave those out). Waits
/// for AOF rewrites to finish first: their buffers are not data.
pub(crate) async fn used_memory(cluster: &Cluster) -> u64 {
    let topology = cluster.topology().await.unwrap();
    let mut total = 0;
    for shard in &topology.shards {
        let client = redis::Client::open(format!("redis://{}", shard.master)).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        loop {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query_async(&mut conn)
                .await
                .unwrap();
            if info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .unwrap();
        total += info
            .lines()
            .find_map(|l| l.trim_end().strip_prefix("used_memory:"))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

pub(crate) async fn count_keys(cluster: &Cluster) -> u64 {
    shardlimit::admin::Scanner::new(cluster)
        .count_limiters()
        .await
        .map(|r| r.total())
        .unwrap_or(0)
}
