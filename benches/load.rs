//! Load harness: throughput, latency and memory of shardlimit's primitives on
//! the six-node cluster, side by side with bare redis-rs.
//!
//! ```text
//! cargo bench --bench load -- --kind gcra --subjects 1000000 --concurrency 64 \
//!     --rounds 10 --round-secs 3 --baseline raw
//! cargo bench --bench load -- --kind gcra --populate 10000000 --limit 1 --period-secs 3600
//! cargo bench --bench load -- --help
//! ```
//!
//! * `--baseline raw` runs the **same Lua script with the same keys and
//!   arguments** through a bare redis-rs cluster connection (no shardlimit),
//!   interleaved with the library round by round (A B A B …), and reports
//!   medians and the library/raw ratio measured in the same run, so machine
//!   noise cancels.
//! * `--baseline plain --plain-nodes redis://127.0.0.1:7200` measures the
//!   cost of TLS: the library against the cluster of `SHARDLIMIT_NODES`
//!   (`rediss://`, with `SHARDLIMIT_TLS_CA`), interleaved with the library
//!   against a plaintext cluster of the same redis-server build, and reports
//!   the tls/plain ratios of the same run (see README, "Production
//!   connections").
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
    /// fw | slog | swc | gcra | lock | lease | counter; or `tower` (needs
    /// `--features tower`): the HTTP layer around a GCRA limiter against the
    /// limiter called directly.
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
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Length of one round, seconds.
    #[arg(long, default_value_t = 3.0)]
    round_secs: f64,
    /// Requests per round instead of a duration (`--round-secs` is then
    /// ignored for the measured rounds).
    #[arg(long)]
    requests: Option<u64>,
    /// Warm-up before measuring, seconds (both sides).
    #[arg(long, default_value_t = 2.0)]
    warmup_secs: f64,
    /// `raw`: interleave rounds of bare redis-rs running the same script.
    /// `plain`: interleave rounds of the library against `--plain-nodes`.
    #[arg(long)]
    baseline: Option<String>,
    /// Seed URLs (comma-separated) of the plaintext cluster for
    /// `--baseline plain`.
    #[arg(long)]
    plain_nodes: Option<String>,
    /// Instead of a load run: create this many limiters and measure memory.
    #[arg(long)]
    populate: Option<u64>,
    /// Quota of the rate limiters: this many per `--period-secs`. The
    /// default never denies at bench load and keeps every key short-lived;
    /// for `--populate`, a low limit keeps GCRA keys alive (a GCRA key lives
    /// until its bucket is full again): `--limit 1 --period-secs 3600`. A
    /// sliding log uses at most its maximum limit, 128.
    #[arg(long, default_value_t = 1_000_000)]
    limit: u32,
    /// Period of the quota, seconds.
    #[arg(long, default_value_t = 60)]
    period_secs: u64,
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
    #[cfg(feature = "tower")]
    if args.kind == "tower" {
        // The HTTP layer around a GCRA limiter, against the same limiter
        // called directly: the layer's overhead per request.
        let mut inner = args.clone();
        inner.kind = "gcra".into();
        let Target::Limiter(limiter) = target(&cluster, &inner) else {
            unreachable!()
        };
        let (layer, direct) = http_layer::calls(limiter);
        let sampler = Sampler::new(&args);
        return compare(&args, &sampler, ("layer", layer), Some(("direct", direct))).await;
    }
    let target = target(&cluster, &args);
    if let Some(n) = args.populate {
        return populate(&cluster, &target, &args, n).await;
    }
    let sampler = Sampler::new(&args);
    if args.baseline.as_deref() == Some("plain") {
        let nodes = args
            .plain_nodes
            .clone()
            .expect("--baseline plain needs --plain-nodes");
        let plain = Cluster::builder(nodes.split(',').map(str::to_owned))
            .namespace(&namespace)
            .command_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("the plaintext cluster of --plain-nodes");
        let plain = self::target(&plain, &args);
        let tls = move |k| lib_call(target.clone(), k);
        let plain = move |k| lib_call(plain.clone(), k);
        return compare(&args, &sampler, ("tls", tls), Some(("plain", plain))).await;
    }
    let raw = match args.baseline.as_deref() {
        Some("raw") => Some(Arc::new(Raw::new(&cluster, &target).await)),
        Some(other) => panic!("unknown baseline {other:?} (`raw` or `plain`)"),
        None => None,
    };
    let lib = move |k| lib_call(target.clone(), k);
    let raw = raw.map(|raw| ("raw", move |k| raw.call(k)));
    compare(&args, &sampler, ("lib", lib), raw).await;
}

/// Warms up, then runs `a` and `b` in interleaved rounds, and reports.
async fn compare<A, FA, B, FB>(
    args: &Args,
    sampler: &Sampler,
    (a_name, a): (&'static str, A),
    b: Option<(&'static str, B)>,
) where
    A: Fn(u64) -> FA + Clone + Send + 'static,
    FA: std::future::Future<Output = Result<bool, String>> + Send + 'static,
    B: Fn(u64) -> FB + Clone + Send + 'static,
    FB: std::future::Future<Output = Result<bool, String>> + Send + 'static,
{
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
        b.as_ref()
            .map(|(name, _)| format!(", interleaved with {name}"))
            .unwrap_or_default()
    );
    drive(
        &format!("warm-up {a_name}"),
        warmup,
        None,
        args,
        sampler,
        a.clone(),
    )
    .await;
    if let Some((b_name, b)) = &b {
        drive(
            &format!("warm-up {b_name}"),
            warmup,
            None,
            args,
            sampler,
            b.clone(),
        )
        .await;
    }

    let (mut a_side, mut b_side) = (Side::default(), Side::default());
    // A B B A A B …: each side goes first in half the pairs, so a slow
    // drift (an AOF rewrite, a warming cache) weighs on both alike.
    for r in 0..args.rounds {
        let a_first = r % 2 == 0;
        for turn in 0..2 {
            if (turn == 0) == a_first {
                let label = format!("round {}/{} {a_name}", r + 1, args.rounds);
                a_side.push(drive(&label, round, args.requests, args, sampler, a.clone()).await);
            } else if let Some((b_name, b)) = &b {
                let label = format!("round {}/{} {b_name}", r + 1, args.rounds);
                b_side.push(drive(&label, round, args.requests, args, sampler, b.clone()).await);
            }
        }
    }
    eprintln!();

    let mut table = String::new();
    writeln!(
        table,
        "{:<7} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "", "decisions/s", "cpu µs/op", "p50", "p90", "p99", "p99.9", "max", "errors", "bypassed"
    )
    .unwrap();
    table.push_str(&a_side.row(a_name));
    let mut report = json!({
        "kind": args.kind,
        "subjects": args.subjects,
        "distribution": args.dist,
        "zipf_s": args.zipf_s,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "round_secs": args.round_secs,
    });
    report[a_name] = a_side.json();
    if let Some((b_name, _)) = &b {
        table.push_str(&b_side.row(b_name));
        let ratios: Vec<f64> = a_side
            .rates
            .iter()
            .zip(&b_side.rates)
            .map(|(x, y)| x / y)
            .collect();
        let throughput_ratio = median(&a_side.rates) / median(&b_side.rates);
        let (q1, q3) = (quantile(&ratios, 0.25), quantile(&ratios, 0.75));
        // The p99 of all rounds pooled is at the mercy of the few rounds an
        // AOF rewrite lands in; the median of the rounds' own p99 is not.
        let p99_ratio = median(&a_side.p99s) / median(&b_side.p99s);
        let pooled_p99_ratio =
            a_side.quantile(0.99).as_secs_f64() / b_side.quantile(0.99).as_secs_f64();
        let cpu_ratio = median(&a_side.cpu_us) / median(&b_side.cpu_us);
        let extra_us =
            (a_side.quantile(0.5).as_secs_f64() - b_side.quantile(0.5).as_secs_f64()) * 1e6;
        writeln!(
            table,
            "{a_name}/{b_name} throughput: {throughput_ratio:.3} (ratio of the medians); per-round ratios: \
             median {:.3}, interquartile {q1:.3}..{q3:.3} over {} rounds\n\
             {a_name}/{b_name} p99: {p99_ratio:.3} (ratio of the median per-round p99s; pooled {pooled_p99_ratio:.3}); \
             p50 difference: {extra_us:+.0} µs\n\
             {a_name}/{b_name} client CPU per decision: {cpu_ratio:.3} ({:.1} / {:.1} µs, medians of rounds)",
            median(&ratios),
            ratios.len(),
            median(&a_side.cpu_us),
            median(&b_side.cpu_us),
        )
        .unwrap();
        report["ratio_cpu_per_decision"] = json!(cpu_ratio);
        report["ratio_p99_pooled"] = json!(pooled_p99_ratio);
        report[*b_name] = b_side.json();
        report["ratio_throughput"] = json!(throughput_ratio);
        report["ratio_throughput_median_of_rounds"] = json!(median(&ratios));
        report["ratio_p99"] = json!(p99_ratio);
        report["round_ratios"] = json!(ratios);
    }
    print!("{table}");
    write_report(&args.kind, "load", &report);
}

/// The rounds of one side of a comparison.
struct Side {
    rates: Vec<f64>,
    /// Process CPU time per decision in each round, microseconds.
    cpu_us: Vec<f64>,
    /// p99 of each round, microseconds.
    p99s: Vec<f64>,
    hist: Histogram<u64>,
    outcome: Outcome,
}

impl Default for Side {
    fn default() -> Self {
        Side {
            rates: Vec::new(),
            cpu_us: Vec::new(),
            p99s: Vec::new(),
            hist: new_hist(),
            outcome: Outcome::default(),
        }
    }
}

impl Side {
    fn push(&mut self, (rate, hist, outcome, cpu_us): (f64, Histogram<u64>, Outcome, f64)) {
        self.rates.push(rate);
        self.cpu_us.push(cpu_us);
        self.p99s.push(hist.value_at_quantile(0.99) as f64);
        self.hist.add(&hist).unwrap();
        add(&mut self.outcome, outcome);
    }

    fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.hist.value_at_quantile(q))
    }

    fn row(&self, name: &str) -> String {
        let ms = |d: Duration| format!("{:.2}ms", d.as_secs_f64() * 1000.0);
        format!(
            "{name:<7} {:>12.0} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n",
            median(&self.rates),
            median(&self.cpu_us),
            ms(self.quantile(0.5)),
            ms(self.quantile(0.9)),
            ms(self.quantile(0.99)),
            ms(self.quantile(0.999)),
            ms(Duration::from_micros(self.hist.max())),
            self.outcome.errors,
            self.outcome.bypassed
        )
    }

    fn json(&self) -> serde_json::Value {
        let mut json = side_json(&self.rates, &self.hist, self.outcome);
        json["p99_us_rounds"] = json!(self.p99s);
        json["cpu_us_per_decision_rounds"] = json!(self.cpu_us);
        json["cpu_us_per_decision"] = json!(median(&self.cpu_us));
        json
    }
}

/// The HTTP layer (feature `tower`) and the limiter it wraps, as two calls.
#[cfg(feature = "tower")]
mod http_layer {
    use std::convert::Infallible;

    use shardlimit::RateLimiter;
    use shardlimit::tower::{HeaderKey, RateLimitLayer};
    use tower::{Layer, ServiceExt, service_fn};

    type Reply = Result<bool, String>;

    #[allow(clippy::type_complexity)]
    pub(super) fn calls(
        limiter: RateLimiter,
    ) -> (
        impl Fn(u64) -> futures::future::BoxFuture<'static, Reply> + Clone + Send + 'static,
        impl Fn(u64) -> futures::future::BoxFuture<'static, Reply> + Clone + Send + 'static,
    ) {
        let service = RateLimitLayer::new(limiter.clone(), HeaderKey::from_static("x-key")).layer(
            service_fn(|_req: http::Request<String>| async {
                Ok::<_, Infallible>(http::Response::new(String::new()))
            }),
        );
        let through_layer = move |k: u64| -> futures::future::BoxFuture<'static, Reply> {
            let service = service.clone();
            Box::pin(async move {
                let request = http::Request::builder()
                    .header("x-key", format!("s{k}"))
                    .body(String::new())
                    .map_err(|e| e.to_string())?;
                let response = service.oneshot(request).await.map_err(|e| e.to_string())?;
                match response.status().as_u16() {
                    200 | 429 => Ok(false),
                    other => Err(format!("status {other}")),
                }
            })
        };
        // Boxed too, so both sides pay the same for the harness.
        let direct = move |k: u64| -> futures::future::BoxFuture<'static, Reply> {
            let limiter = limiter.clone();
            Box::pin(async move {
                limiter
                    .check(format!("s{k}"))
                    .await
                    .map(|d| d.bypassed.is_some())
                    .map_err(|e| e.to_string())
            })
        };
        (through_layer, direct)
    }
}

fn target(cluster: &Cluster, args: &Args) -> Target {
    let quota = Quota::with_period(
        NonZeroU32::new(args.limit).unwrap(),
        Duration::from_secs(args.period_secs),
    );
    let limiter = |a: Algorithm| {
        // The sliding log refuses limits above its maximum (128); spread
        // over the bench's many subjects that still never denies.
        let quota = Quota::with_period(quota.limit().min(a.max_limit()), quota.period());
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
        let conn = bare_connection().await;
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

/// Runs `call` on `concurrency` tasks for `length`, or until `requests`
/// calls completed if given; returns decisions/s, the latency histogram (µs)
/// and the outcome counts. Prints a progress line.
async fn drive<F, Fut>(
    label: &str,
    length: Duration,
    requests: Option<u64>,
    args: &Args,
    sampler: &Sampler,
    call: F,
) -> (f64, Histogram<u64>, Outcome, f64)
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, String>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let cpu_started = process_cpu();
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
    let finished = || match requests {
        Some(n) => done.load(Ordering::Relaxed) >= n,
        None => started.elapsed() >= length,
    };
    while !finished() {
        tokio::time::sleep(Duration::from_millis(if requests.is_some() {
            10
        } else {
            500
        }))
        .await;
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
    let calls = total.ok + total.errors;
    let cpu_us = (process_cpu() - cpu_started).as_secs_f64() * 1e6 / calls.max(1) as f64;
    (calls as f64 / elapsed, hist, total, cpu_us)
}

/// CPU time (user + system) this process has used, from `/proc/self/stat`
/// (clock ticks of 1/100 s, Linux's fixed user-space `USER_HZ`); zero where
/// there is no procfs.
fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may hold spaces) in parentheses:
    // state is field 3, utime field 14, stime field 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
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
        move |k| lib_call(target.clone(), k)
    };
    let (check_rate, check_hist, check_outcome, _) = drive(
        "checking",
        Duration::from_secs_f64(args.round_secs * args.rounds as f64),
        None,
        &check_args,
        &sampler,
        checks,
    )
    .await;
    eprintln!();

    let report = json!({
        "kind": args.kind,
        "populated": n,
        "errors": outcome.errors,
        "seconds": elapsed,
        "populate_per_sec": (n as f64) / elapsed,
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
    });
    println!(
        "populated {n} {} limiters in {elapsed:.1} s ({:.0}/s, p50 {:?}, p99 {:?}, {} errors)\n\
         memory (used_memory summed over the masters, no AOF rewrite running): {per_limiter:.1} bytes per limiter; \
         MEMORY USAGE {lib_usage:.1} bytes per key; key {} ({} bytes)\n\
         smallest key of that shape: {:.1} bytes per key; MEMORY USAGE {:.1}; key {} ({} bytes) + {}-byte value, same TTL\n\
         scan: {live} primitives counted in {scan_secs:.1} s ({:.0} keys/s)\n\
         checks over all {n} subjects: {check_rate:.0} decisions/s, p50 {:?}, p99 {:?}, {} errors",
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
        live as f64 / scan_secs,
        Duration::from_micros(check_hist.value_at_quantile(0.5)),
        Duration::from_micros(check_hist.value_at_quantile(0.99)),
        check_outcome.errors,
    );
    write_report(&args.kind, "memory", &report);
}

struct RawKeys {
    example: Vec<u8>,
    value_len: usize,
    bytes_per_key: f64,
    /// `MEMORY USAGE` averaged over a sample of the raw keys.
    memory_usage: f64,
}

/// A bare redis-rs cluster connection to the bench's nodes.
async fn bare_connection() -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(node_urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

fn node_urls() -> Vec<String> {
    shardlimit::Cluster::seeds_from_env()
}

/// `MEMORY USAGE` (the key, its value and its hash-table entry, as Redis
/// counts them) averaged over `keys`.
async fn memory_usage(
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
async fn raw_keys(cluster: &Cluster, like: &[u8], n: u64, concurrency: usize) -> RawKeys {
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
    }
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

/// `used_memory` summed over the masters (everything, the keyspace's hash
/// tables included — `used_memory_dataset` would leave those out). Waits
/// for AOF rewrites to finish first: their buffers are not data.
async fn used_memory(cluster: &Cluster) -> u64 {
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
    quantile(values, 0.5)
}

/// Linearly interpolated quantile (`q` in 0..=1).
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
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
