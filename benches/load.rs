//! Load harness: throughput, latency and memory of shardlimit's primitives on
//! the six-node cluster, side by side with bare redis-rs.
//!
//! ```text
//! cargo bench --bench load -- --kind gcra --subjects 1000000 --concurrency 64 \
//!     --rounds 5 --round-secs 5 --baseline raw
//! cargo bench --bench load -- --kind gcra --populate 10000000 --quota-per-hour 1
//! cargo bench --bench load -- --help
//! ```
//!
//! * `--baseline raw` runs the **same Lua script with the same keys and
//!   arguments** through a bare redis-rs cluster connection (no shardlimit),
//!   interleaved with the library round by round (A B A B …), and reports
//!   medians and the library/raw ratio measured in the same run, so machine
//!   noise cancels.
//! * `--populate N` measures memory: `used_memory` summed over the masters
//!   before and after creating N limiters (one operation per subject),
//!   divided by N, next to N minimal raw keys of the same value and TTL.
//!
//! Results: a table on stdout and a JSON file under `target/bench/`.
//! Only ever targets the cluster in `SHARDLIMIT_NODES` / the local test
//! nodes on 127.0.0.1.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use hdrhistogram::Histogram;
use rand::Rng;
use rand_distr::{Distribution, Zipf};
use serde_json::json;
use shardlimit::{Algorithm, Cluster, ConcurrencyLimiter, Counter, Lock, Quota, RateLimiter};

#[derive(Parser, Debug, Clone)]
#[command(about = "shardlimit load harness")]
struct Args {
    /// fw | slog | swc | gcra | lock | lease | counter
    #[arg(long, default_value = "gcra")]
    kind: String,
    /// Distinct subjects.
    #[arg(long, default_value_t = 1_000_000)]
    subjects: u64,
    /// uniform | zipf
    #[arg(long, default_value = "uniform")]
    dist: String,
    /// Zipf exponent (with --dist zipf).
    #[arg(long, default_value_t = 1.1)]
    zipf_s: f64,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Measured rounds per side.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Length of one round, seconds.
    #[arg(long, default_value_t = 5.0)]
    round_secs: f64,
    /// Warm-up before measuring, seconds (both sides).
    #[arg(long, default_value_t = 2.0)]
    warmup_secs: f64,
    /// `raw`: interleave rounds of bare redis-rs running the same script.
    #[arg(long)]
    baseline: Option<String>,
    /// Instead of a load run: create this many limiters and measure memory.
    #[arg(long)]
    populate: Option<u64>,
    /// Quota of the rate limiters, per hour (a low quota keeps GCRA keys
    /// alive for long: a GCRA key lives until its bucket is full again).
    #[arg(long, default_value_t = 1_000_000)]
    quota_per_hour: u32,
    /// Namespace (a fresh one per run by default).
    #[arg(long)]
    namespace: Option<String>,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(args));
}

/// One primitive under test, driven by the library and (where possible)
/// raw.
#[derive(Clone)]
enum Target {
    Limiter(RateLimiter),
    Lock(Lock),
    Lease(ConcurrencyLimiter),
    Counter(Counter),
}

#[derive(Default, Clone, Copy)]
struct Outcome {
    ok: u64,
    errors: u64,
    bypassed: u64,
}

async fn run(args: Args) {
    let namespace = args.namespace.clone().unwrap_or_else(|| {
        format!(
            "bench{}",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
        )
    });
    let cluster = Cluster::builder_from_env()
        .namespace(&namespace)
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("cluster: start it with cluster-compose/up.sh");
    let target = target(&cluster, &args);
    if let Some(n) = args.populate {
        return populate(&cluster, &target, &args, n).await;
    }
    let sampler = Sampler::new(&args);
    let raw = match args.baseline.as_deref() {
        Some("raw") => Some(Arc::new(Raw::new(&cluster, &target).await)),
        Some(other) => panic!("unknown baseline {other:?} (only `raw`)"),
        None => None,
    };

    let round = Duration::from_secs_f64(args.round_secs);
    let warmup = Duration::from_secs_f64(args.warmup_secs);
    eprintln!(
        "{} on {} subjects ({}), concurrency {}, {} rounds of {:?}{}",
        args.kind,
        args.subjects,
        args.dist,
        args.concurrency,
        args.rounds,
        round,
        if raw.is_some() {
            ", interleaved with raw redis-rs"
        } else {
            ""
        }
    );
    let lib = {
        let target = target.clone();
        move |k| lib_call(target.clone(), k)
    };
    let raw_call = raw.clone().map(|raw| move |k| raw.call(k));
    drive("warm-up lib", warmup, &args, &sampler, lib.clone()).await;
    if let Some(raw) = &raw_call {
        drive("warm-up raw", warmup, &args, &sampler, raw.clone()).await;
    }

    let mut lib_rounds = Vec::new();
    let mut raw_rounds = Vec::new();
    let mut lib_hist = new_hist();
    let mut raw_hist = new_hist();
    let mut lib_total = Outcome::default();
    let mut raw_total = Outcome::default();
    for r in 0..args.rounds {
        let label = format!("round {}/{} lib", r + 1, args.rounds);
        let (rate, hist, outcome) = drive(&label, round, &args, &sampler, lib.clone()).await;
        lib_rounds.push(rate);
        lib_hist.add(&hist).unwrap();
        add(&mut lib_total, outcome);
        if let Some(raw) = &raw_call {
            let label = format!("round {}/{} raw", r + 1, args.rounds);
            let (rate, hist, outcome) = drive(&label, round, &args, &sampler, raw.clone()).await;
            raw_rounds.push(rate);
            raw_hist.add(&hist).unwrap();
            add(&mut raw_total, outcome);
        }
    }
    eprintln!();

    let mut table = String::new();
    let q = |h: &Histogram<u64>, p: f64| Duration::from_micros(h.value_at_quantile(p));
    let ms = |d: Duration| format!("{:.2}ms", d.as_secs_f64() * 1000.0);
    let row = |name: &str, rates: &[f64], h: &Histogram<u64>, o: Outcome| {
        format!(
            "{name:<6} {:>12.0} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n",
            median(rates),
            ms(q(h, 0.5)),
            ms(q(h, 0.9)),
            ms(q(h, 0.99)),
            ms(q(h, 0.999)),
            ms(Duration::from_micros(h.max())),
            o.errors,
            o.bypassed
        )
    };
    writeln!(
        table,
        "{:<6} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "", "decisions/s", "p50", "p90", "p99", "p99.9", "max", "errors", "bypassed"
    )
    .unwrap();
    table.push_str(&row("lib", &lib_rounds, &lib_hist, lib_total));
    let mut report = json!({
        "kind": args.kind,
        "subjects": args.subjects,
        "distribution": args.dist,
        "zipf_s": args.zipf_s,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "round_secs": args.round_secs,
        "lib": side_json(&lib_rounds, &lib_hist, lib_total),
    });
    if raw.is_some() {
        table.push_str(&row("raw", &raw_rounds, &raw_hist, raw_total));
        let ratios: Vec<f64> = lib_rounds
            .iter()
            .zip(&raw_rounds)
            .map(|(l, r)| l / r)
            .collect();
        let throughput_ratio = median(&ratios);
        let p99_ratio = q(&lib_hist, 0.99).as_secs_f64() / q(&raw_hist, 0.99).as_secs_f64();
        writeln!(
            table,
            "lib/raw throughput: {throughput_ratio:.3} (median of per-round ratios {:?}); lib/raw p99: {p99_ratio:.3}",
            ratios.iter().map(|r| (r * 1000.0).round() / 1000.0).collect::<Vec<_>>()
        )
        .unwrap();
        report["raw"] = side_json(&raw_rounds, &raw_hist, raw_total);
        report["ratio_throughput"] = json!(throughput_ratio);
        report["ratio_p99"] = json!(p99_ratio);
        report["round_ratios"] = json!(ratios);
    }
    print!("{table}");
    write_report(&args.kind, "load", &report);
}

fn target(cluster: &Cluster, args: &Args) -> Target {
    let quota = Quota::per_hour(NonZeroU32::new(args.quota_per_hour).unwrap());
    let limiter = |a: Algorithm| {
        Target::Limiter(
            RateLimiter::builder(cluster, "bench", quota)
                .algorithm(a)
                .build()
                .unwrap(),
        )
    };
    match args.kind.as_str() {
        "lock" => Target::Lock(
            Lock::builder(cluster, "bench")
                .ttl(Duration::from_secs(60))
                .build()
                .unwrap(),
        ),
        "lease" => Target::Lease(
            ConcurrencyLimiter::builder(cluster, "bench")
                .max_holders(NonZeroU32::new(1_000_000).unwrap())
                .lease_ttl(Duration::from_secs(60))
                .build()
                .unwrap(),
        ),
        "counter" => Target::Counter(
            Counter::builder(cluster, "bench")
                .idle_ttl(Duration::from_secs(600))
                .build()
                .unwrap(),
        ),
        kind => {
            limiter(Algorithm::from_kind(kind).unwrap_or_else(|| panic!("unknown kind {kind:?}")))
        }
    }
}

/// One library operation on subject `k`.
async fn lib_call(target: Target, k: u64) -> Result<bool, String> {
    let subject = format!("s{k}");
    match target {
        Target::Limiter(l) => l
            .check(&subject)
            .await
            .map(|d| d.bypassed.is_some())
            .map_err(|e| e.to_string()),
        Target::Lock(l) => match l.try_acquire(&subject).await {
            Ok(Some(guard)) => guard
                .release()
                .await
                .map(|_| false)
                .map_err(|e| e.to_string()),
            Ok(None) => Ok(false),
            Err(e) => Err(e.to_string()),
        },
        Target::Lease(l) => match l.try_acquire(&subject).await {
            Ok(Some(permit)) => {
                let bypassed = permit.bypassed().is_some();
                permit
                    .release()
                    .await
                    .map(|_| bypassed)
                    .map_err(|e| e.to_string())
            }
            Ok(None) => Ok(false),
            Err(e) => Err(e.to_string()),
        },
        Target::Counter(c) => c
            .add(&subject, 1)
            .await
            .map(|_| false)
            .map_err(|e| e.to_string()),
    }
}

/// The same work without shardlimit: a bare redis-rs cluster connection
/// running the script the library would send, with the same keys and args.
struct Raw {
    conn: redis::cluster_async::ClusterConnection,
    work: RawWork,
    namespace: String,
    kind: String,
    name: String,
}

enum RawWork {
    Script {
        script: redis::Script,
        args: Vec<Vec<u8>>,
    },
    CounterAdd {
        ttl_ms: u64,
    },
}

impl Raw {
    async fn new(cluster: &Cluster, target: &Target) -> Self {
        let nodes: Vec<String> = match std::env::var(shardlimit::NODES_ENV) {
            Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_owned()).collect(),
            _ => shardlimit::DEFAULT_NODES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        };
        let conn = redis::cluster::ClusterClient::new(nodes)
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        let (work, kind, name) = match target {
            Target::Limiter(l) => {
                let inv = l.invocation("s0", 1).unwrap();
                (
                    RawWork::Script {
                        script: redis::Script::new(inv.script.code()),
                        args: inv.args,
                    },
                    l.algorithm().kind().to_owned(),
                    l.name().to_owned(),
                )
            }
            Target::Counter(_) => (
                RawWork::CounterAdd { ttl_ms: 600_000 },
                "counter".to_owned(),
                "bench".to_owned(),
            ),
            _ => panic!("--baseline raw is implemented for the rate limiters and the counter"),
        };
        Raw {
            conn,
            work,
            namespace: cluster.namespace().to_owned(),
            kind,
            name,
        }
    }

    fn call(
        &self,
        k: u64,
    ) -> impl std::future::Future<Output = Result<bool, String>> + Send + use<> {
        // What a user of bare redis-rs writes: format the key, send it.
        let key = format!("{}:{{s{k}}}:{}:{}", self.namespace, self.kind, self.name);
        let mut conn = self.conn.clone();
        let work = match &self.work {
            RawWork::Script { script, args } => RawWork::Script {
                script: script.clone(),
                args: args.clone(),
            },
            RawWork::CounterAdd { ttl_ms } => RawWork::CounterAdd { ttl_ms: *ttl_ms },
        };
        async move {
            match work {
                RawWork::Script { script, args } => {
                    let mut inv = script.key(&key);
                    for a in &args {
                        inv.arg(a);
                    }
                    inv.invoke_async::<Vec<i64>>(&mut conn)
                        .await
                        .map(|_| false)
                        .map_err(|e| e.to_string())
                }
                RawWork::CounterAdd { ttl_ms } => redis::pipe()
                    .atomic()
                    .cmd("INCRBY")
                    .arg(&key)
                    .arg(1)
                    .cmd("PEXPIRE")
                    .arg(&key)
                    .arg(ttl_ms)
                    .query_async::<(i64, i64)>(&mut conn)
                    .await
                    .map(|_| false)
                    .map_err(|e| e.to_string()),
            }
        }
    }
}

/// Picks subjects: uniform or Zipf over `0..subjects`.
#[derive(Clone)]
enum Sampler {
    Uniform(u64),
    Zipf(Zipf<f64>),
}

impl Sampler {
    fn new(args: &Args) -> Self {
        match args.dist.as_str() {
            "uniform" => Sampler::Uniform(args.subjects),
            "zipf" => Sampler::Zipf(Zipf::new(args.subjects as f64, args.zipf_s).unwrap()),
            other => panic!("unknown distribution {other:?}"),
        }
    }

    fn sample(&self, rng: &mut impl Rng) -> u64 {
        match self {
            Sampler::Uniform(n) => rng.random_range(0..*n),
            Sampler::Zipf(z) => z.sample(rng) as u64 - 1,
        }
    }
}

/// Runs `call` on `concurrency` tasks for `length`; returns decisions/s, the
/// latency histogram (µs) and the outcome counts. Prints a progress line.
async fn drive<F, Fut>(
    label: &str,
    length: Duration,
    args: &Args,
    sampler: &Sampler,
    call: F,
) -> (f64, Histogram<u64>, Outcome)
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, String>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (stop, done, call, sampler) =
                (stop.clone(), done.clone(), call.clone(), sampler.clone());
            tokio::spawn(async move {
                let mut hist = new_hist();
                let mut outcome = Outcome::default();
                let mut first_error = None;
                while !stop.load(Ordering::Relaxed) {
                    let k = sampler.sample(&mut rand::rng());
                    let t = Instant::now();
                    match call(k).await {
                        Ok(bypassed) => {
                            outcome.ok += 1;
                            outcome.bypassed += u64::from(bypassed);
                        }
                        Err(e) => {
                            outcome.errors += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                    hist.saturating_record(
                        u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
                    );
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (hist, outcome, first_error)
            })
        })
        .collect();
    while started.elapsed() < length {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let secs = started.elapsed().as_secs_f64();
        eprint!(
            "\r{label}: {:>9.0} decisions/s   ",
            done.load(Ordering::Relaxed) as f64 / secs
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut hist = new_hist();
    let mut total = Outcome::default();
    for t in tasks {
        let (h, o, e) = t.await.unwrap();
        hist.add(&h).unwrap();
        add(&mut total, o);
        if let Some(e) = e {
            eprintln!("\n{label}: error: {e}");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    ((total.ok + total.errors) as f64 / elapsed, hist, total)
}

/// Creates `n` limiters (one operation per subject `s0..s{n}`) and reports
/// memory per limiter against minimal raw keys.
async fn populate(cluster: &Cluster, target: &Target, args: &Args, n: u64) {
    let before = used_memory(cluster).await;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
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
    eprintln!();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = used_memory(cluster).await;
    let live = count_keys(cluster).await;
    let per_limiter = (after.saturating_sub(before)) as f64 / n as f64;
    let sample_key = match target {
        Target::Limiter(l) => l.key(format!("s{}", n / 2)).unwrap(),
        _ => format!("{}:{{s{}}}:{}:bench", cluster.namespace(), n / 2, args.kind).into_bytes(),
    };
    let report = json!({
        "kind": args.kind,
        "populated": n,
        "errors": outcome.errors,
        "seconds": elapsed,
        "decisions_per_sec": (n as f64) / elapsed,
        "p50_us": hist.value_at_quantile(0.5),
        "p99_us": hist.value_at_quantile(0.99),
        "used_memory_before": before,
        "used_memory_after": after,
        "keys_in_namespace_after": live,
        "bytes_per_limiter": per_limiter,
        "key_example": String::from_utf8_lossy(&sample_key),
        "key_bytes": sample_key.len(),
    });
    println!(
        "{} limiters of kind {} in {:.1} s ({:.0}/s, p50 {:?}, p99 {:?}, {} errors)\n\
         used_memory over the masters: {} -> {} bytes: {:.1} bytes per limiter \
         ({} keys live; key like {} = {} bytes)",
        n,
        args.kind,
        elapsed,
        n as f64 / elapsed,
        Duration::from_micros(hist.value_at_quantile(0.5)),
        Duration::from_micros(hist.value_at_quantile(0.99)),
        outcome.errors,
        before,
        after,
        per_limiter,
        live,
        String::from_utf8_lossy(&sample_key),
        sample_key.len()
    );
    write_report(&args.kind, "memory", &report);
}

/// Like `lib_call`, but leaves state behind (locks and permits are not
/// released) so the memory they take can be measured.
async fn lib_call_keep(target: Target, k: u64) -> Result<(), String> {
    let subject = format!("s{k}");
    match target {
        Target::Limiter(l) => l.check(&subject).await.map(drop).map_err(|e| e.to_string()),
        Target::Lock(l) => l
            .try_acquire(&subject)
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        Target::Lease(l) => l
            .try_acquire(&subject)
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        Target::Counter(c) => c
            .add(&subject, 1)
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
    }
}

async fn used_memory(cluster: &Cluster) -> u64 {
    let health = cluster.health().await.unwrap();
    health
        .masters
        .iter()
        .map(|m| m.status.as_ref().map(|s| s.used_memory).unwrap_or(0))
        .sum()
}

async fn count_keys(cluster: &Cluster) -> u64 {
    shardlimit::admin::Scanner::new(cluster)
        .count_limiters()
        .await
        .map(|r| r.total())
        .unwrap_or(0)
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).unwrap()
}

fn add(total: &mut Outcome, o: Outcome) {
    total.ok += o.ok;
    total.errors += o.errors;
    total.bypassed += o.bypassed;
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn side_json(rates: &[f64], h: &Histogram<u64>, o: Outcome) -> serde_json::Value {
    json!({
        "decisions_per_sec_rounds": rates,
        "decisions_per_sec_median": median(rates),
        "latency_us": {
            "p50": h.value_at_quantile(0.5),
            "p90": h.value_at_quantile(0.9),
            "p99": h.value_at_quantile(0.99),
            "p999": h.value_at_quantile(0.999),
            "max": h.max(),
        },
        "ok": o.ok,
        "errors": o.errors,
        "bypassed": o.bypassed,
    })
}

fn write_report(kind: &str, what: &str, report: &serde_json::Value) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench");
    std::fs::create_dir_all(dir).unwrap();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let path = format!("{dir}/{stamp}-{what}-{kind}.json");
    let mut report = report.clone();
    report["machine"] = json!(machine());
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("wrote {path}");
}

fn machine() -> BTreeMap<&'static str, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "cpus",
        std::thread::available_parallelism()
            .map(|n| n.to_string())
            .unwrap_or_default(),
    );
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo")
        && let Some(line) = info.lines().find(|l| l.starts_with("model name"))
    {
        m.insert(
            "cpu",
            line.split(':').nth(1).unwrap_or("").trim().to_owned(),
        );
    }
    m
}
