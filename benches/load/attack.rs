//! `--workload attack`: the deny cache under an attack, against the same
//! limiter without it (`--baseline nocache`, implied).
//!
//! Subjects `0..n/100` are attackers; each request picks an attacker with
//! probability `--attack-share` (0.9), else a normal user (uniform within
//! each group). The two sides are two limiters with different names (so
//! they share no state), the same algorithm and quota; `lib` has
//! `.deny_cache(max(10000, n/50))` (`--deny-cache`), room for every attacker.
//!
//! **Calibration.** After a warm-up of both sides under the never-denying
//! `--limit`, the uncached side's throughput is measured, and measured
//! again under the quota that gives (denials are cheaper than the
//! admissions of the first measurement): that is `R0`. For a phase run at `R`
//! decisions per second an attacker sends `a = share · R / attackers` per
//! second, and both limiters get the rate `a / --overload` through
//! `set_quota`, as `L` per `P` with `L = max(10, round(rate))`: a whole
//! number per second would round a rate below one up to one (with a million
//! subjects, 10,000 attackers share `R0`: 2.7× instead of 10×), and ten
//! units per period let the normal users through even when the cached
//! side's faster loop sends them more (below). While one side runs its
//! round, the other side's buckets refill (by up to their burst of `L`), so
//! each round is preceded by `P / (overload - 1)` of unmeasured load, the
//! time the uncached side takes to drain that at its excess rate: the
//! rounds measure the attack's steady state, not the start of a new one.
//! That refill also puts every attacker's admissions on the same phase of
//! their cycle (a GCRA's emission interval `P / L`, a window), so a round
//! is a whole number of cycles (at least `--round-secs`): a shorter one
//! would catch the admissions of part of a cycle, not their average. The
//! attackers' overload as measured on each side is printed with the quota.
//!
//! **Closed loop.** Every task sends its next request when the last one is
//! answered: this measures the most decisions per second each side makes
//! (the ratio is the headline). But the mix is fixed per *decision*: 10% of
//! either side's decisions are normal users', and those always go to
//! Redis. The cached side answers most attacker requests locally, runs
//! faster, and so sends its normal users' requests faster too: its script
//! runs per second are at least `0.1 · R_lib`, growing with the speed-up (at
//! about 8× the uncached throughput, as many per second as the uncached
//! side). The same floor bounds the speed-up: at 0.1 script per decision,
//! `R_lib / R0 ≤ 10 ×` (Redis's script throughput on the cached side's mix
//! / on the uncached side's). Both sides keep `--concurrency` requests
//! waiting on Redis, whose latency is then set by its throughput on that
//! mix — the cached side leaves it the costlier scripts (admissions, which
//! write and replicate; the cheap denials stay local) and shares the cores
//! with a client making many more decisions — so the normal users'
//! closed-loop latency says little about the cache. Hence:
//! * script runs **per decision**: the Redis work per request answered;
//!   its floor is the normal users' share (0.1) plus the attackers' own (an
//!   admission and the denial after it, per emission interval).
//! * script runs **per second**: absolute, each side at its own throughput.
//!
//! **Paced.** Then both sides are offered the same load, `--paced-share`
//! (0.5) of `R0`, by tasks that start calls at fixed intervals, the quota
//! calibrated again for that load (attackers at 10× again): Redis commands
//! per second and the normal users' latency at equal load, which is what an
//! attack on a service looks like. Its floor is `0.1 + 2 · 0.9 / 10`: 72%
//! fewer script runs at best, the normal users' and each admission's pair.
//!
//! Script runs are counted twice: by the masters (`INFO commandstats`,
//! every client on the cluster: other work on it shows up there) and by the
//! client (decisions not answered from the cache).

use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::time::Duration;

use serde_json::json;
use shardlimit::{Algorithm, Cluster, Quota, RateLimiter};

use crate::args::Args;
use crate::commandstats::{CommandProbe, Costs, Masters};
use crate::compare::{Contender, Side, header, rounds, summary};
use crate::drive::{Reply, Sampler, Shape, attackers, drive};
use crate::report::{median, write_report};
use crate::target::{Target, lib_call, quota};

/// The smallest limit per period of the calibrated quota.
const MIN_LIMIT: u32 = 10;

pub(crate) async fn attack(cluster: &Cluster, args: &Args) {
    match args.baseline.as_deref() {
        None | Some("nocache") => {}
        Some(other) => panic!("--workload attack compares with `nocache`, not {other:?}"),
    }
    let attackers = attackers(args.subjects);
    assert!(attackers < args.subjects, "--subjects: at least 2");
    assert!(args.batch.is_none(), "--workload attack is single checks");
    let algorithm = Algorithm::from_kind(&args.kind)
        .unwrap_or_else(|| panic!("--workload attack needs a rate limiter kind"));
    let entries = args.deny_cache.unwrap_or((args.subjects / 50).max(10_000));
    let build = |name: &str| {
        RateLimiter::builder(cluster, name, quota(args, algorithm)).algorithm(algorithm)
    };
    let lib = build("attack-lib").deny_cache(entries).build().unwrap();
    let nocache = build("attack-nocache").build().unwrap();
    let sampler = Sampler::new(args);
    // One check through the library, as every other bench side makes it.
    let call = |limiter: &RateLimiter| {
        let target = Target::Limiter(limiter.clone());
        move |k: &[u64]| lib_call(target.clone(), k[0])
    };
    let warmup = Duration::from_secs_f64(args.warmup_secs);
    let shape = Shape::single(args.concurrency);
    // Both sides once under the never-denying quota first (connections,
    // scripts loaded, the cache's subscriptions live), so the calibration
    // measures the uncached side's steady throughput.
    for (name, limiter) in [("warm-up lib", &lib), ("warm-up nocache", &nocache)] {
        drive(name, warmup, None, shape, &sampler, call(limiter)).await;
    }
    let mut setup = Setup {
        args,
        sampler,
        limiters: [lib.clone(), nocache.clone()],
        attackers,
        masters: Masters::connect(cluster).await,
    };
    // Under the attack most of the uncached side's checks are denials,
    // which write nothing and run faster than the admissions of the
    // never-denying quota: measure again under the quota the first
    // measurement gives, and calibrate from that.
    let mut r0 = 0.0;
    for pass in ["calibrating", "calibrating under attack"] {
        if r0 > 0.0 {
            let quota = setup.quota(r0).0;
            nocache.set_quota(quota).unwrap();
        }
        let calibrating = drive(pass, warmup, None, shape, &setup.sampler, call(&nocache));
        r0 = calibrating.await.rate;
    }
    eprintln!();

    let calls = [call(&lib), call(&nocache)];
    let closed = setup.phase(r0, shape, calls.clone()).await;
    let offered = args.paced_share * r0;
    // `--paced-share 0` (or a calibration that admitted nothing): no paced
    // phase, and no shape, whose interval would be tasks / 0.
    let paced = match Shape::paced(4 * args.concurrency, offered) {
        Some(shape) => Some((shape, setup.phase(offered, shape, calls).await)),
        None => None,
    };

    let [a, b] = &closed.sides;
    let (mut table, mut report) = summary(args, ("lib", a), Some(("nocache", b)));
    let title = format!(
        "closed loop, {} tasks, the uncached side calibrated at {r0:.0} decisions/s\n{}\n",
        args.concurrency,
        closed.lines()
    );
    table.insert_str(0, &title);
    closed.tables(&mut table);
    report["attackers"] = json!(attackers);
    report["attack_share"] = json!(args.attack_share);
    report["deny_cache_entries"] = json!(entries);
    report["calibration_decisions_per_sec"] = json!(r0);
    report["quota"] = closed.quota_json();
    for (i, name) in NAMES.iter().enumerate() {
        report[*name]["redis"] = closed.costs[i].json();
        report[*name]["normal_users"] = normal_json(&closed.sides[i]);
    }
    let mut lines = closed.ratio_lines("closed");
    if let Some((paced_shape, paced)) = &paced {
        writeln!(
            table,
            "paced: {offered:.0} decisions/s offered to each side ({:.0}% of the calibration), {} tasks \
             (cpu µs/dec includes the pacing timers)\n{}",
            args.paced_share * 100.0,
            paced_shape.tasks,
            paced.lines(),
        )
        .unwrap();
        table.push_str(&header());
        for (name, side) in NAMES.iter().zip(&paced.sides) {
            table.push_str(&side.row(name));
        }
        paced.tables(&mut table);
        lines.extend(paced.ratio_lines("paced"));
        report["paced"] = paced.json(offered);
    }
    lines.push(library_stats(cluster));
    lines.push(format!(
        "lib/nocache throughput: {:.2}",
        median(&a.rates) / median(&b.rates)
    ));
    for line in lines {
        writeln!(table, "{line}").unwrap();
    }
    print!("{table}");
    write_report(&args.kind, "attack", &report);
}

const NAMES: [&str; 2] = ["lib", "nocache"];

/// What every phase of the run shares.
struct Setup<'a> {
    args: &'a Args,
    sampler: Sampler,
    /// With and without the deny cache.
    limiters: [RateLimiter; 2],
    attackers: u64,
    masters: Masters,
}

impl Setup<'_> {
    /// Sets both limiters' quota so the attackers send `--overload` times
    /// their limit when `rate` decisions per second are made, then runs
    /// interleaved rounds of both driven as `shape`, with the masters'
    /// command counts around each round.
    async fn phase<F, Fut>(&mut self, rate: f64, shape: Shape, [lib, nocache]: [F; 2]) -> Phase
    where
        F: Fn(&[u64]) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        let (quota, quota_line) = self.quota(rate);
        for limiter in &self.limiters {
            limiter.set_quota(quota).unwrap();
        }
        // Each side's round lets the other side's buckets refill, by up to
        // their burst; drain that before measuring, at the excess rate of
        // the uncached side (the slower): `limit` units at `(overload - 1)
        // · limit / period`.
        let settle = quota
            .period()
            .div_f64((self.args.overload - 1.0).max(1.0))
            .max(Duration::from_millis(200));
        // An attacker is admitted on a fixed grid (a GCRA's emission
        // interval, a window), whose phase the refill above sets alike for
        // all of them: a round shorter than that cycle would catch the
        // admissions of a part of it, not their average. Whole cycles do.
        let cycle = cycle(self.limiters[0].algorithm(), quota);
        let cycles = (self.args.round_secs / cycle.as_secs_f64()).ceil().max(1.0);
        let round = cycle.mul_f64(cycles);
        let mut args = self.args.clone();
        args.round_secs = round.as_secs_f64();
        eprintln!("{quota_line}; settling {settle:.2?} before each round of {round:.2?}");
        let contender = |name, call| Contender {
            name,
            call,
            shape,
            settle,
        };
        let (lib, nocache) = (contender("lib", lib), contender("nocache", nocache));
        let mut probe = CommandProbe::new(&mut self.masters);
        let (a, b) = rounds(&args, &self.sampler, &lib, Some(&nocache), &mut probe).await;
        let costs = probe.costs(&a, &b);
        // How far over their limit the attackers really were, per side.
        let limit_rate = f64::from(quota.limit().get()) / quota.period().as_secs_f64();
        let overload = |side: &Side| {
            let normal = side.normal.as_ref().map_or(0, |n| n.outcome.decisions());
            let secs: f64 = side.secs.iter().sum();
            (side.outcome.decisions() - normal) as f64 / secs / self.attackers as f64 / limit_rate
        };
        Phase {
            overloads: [overload(&a), overload(&b)],
            sides: [a, b],
            costs,
            quota,
            quota_line,
            settle,
            round,
        }
    }

    /// The quota (see the module docs) for `rate` decisions per second,
    /// and a line saying what it is.
    fn quota(&self, rate: f64) -> (Quota, String) {
        let (args, attackers) = (self.args, self.attackers);
        let per_attacker = args.attack_share * rate / attackers as f64;
        let limit_rate = per_attacker / args.overload;
        let algorithm = self.limiters[0].algorithm();
        let limit = NonZeroU32::new(MIN_LIMIT.max(limit_rate.round() as u32))
            .unwrap()
            .min(algorithm.max_limit());
        let period_ms = (f64::from(limit.get()) * 1000.0 / limit_rate)
            .round()
            .max(1.0) as u64;
        let quota = Quota::with_period(limit, Duration::from_millis(period_ms));
        let per_sec = f64::from(limit.get()) * 1000.0 / period_ms as f64;
        let normal = (1.0 - args.attack_share) * rate / (args.subjects - attackers) as f64;
        let line = format!(
            "quota: {limit} per {period_ms} ms ({per_sec:.3}/s) on both sides; at {rate:.0} \
             decisions/s, {attackers} attackers at {per_attacker:.2}/s each ({:.1}× their limit), \
             normal users at {normal:.4}/s each ({:.2}% of it)",
            per_attacker / per_sec,
            100.0 * normal / per_sec,
        );
        (quota, line)
    }
}

/// What repeats in an overloaded subject's admissions under `quota`: a
/// window, or a log's oldest entry leaving (the period); else one unit's
/// worth of the rate (period / limit).
fn cycle(algorithm: Algorithm, quota: Quota) -> Duration {
    match algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingLog => quota.period(),
        _ => quota.period() / quota.limit().get(),
    }
}

/// Both sides' rounds in one way of driving them, and what they cost Redis.
struct Phase {
    sides: [Side; 2],
    costs: [Costs; 2],
    quota: Quota,
    quota_line: String,
    settle: Duration,
    round: Duration,
    /// The attackers' requests per second over their limit, per side.
    overloads: [f64; 2],
}

impl Phase {
    fn tables(&self, table: &mut String) {
        writeln!(
            table,
            "Redis, medians of rounds: srv = the masters' INFO commandstats (every client's), \
             cli = decisions not answered from the cache\n\
             {:<7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
            "",
            "scripts/s",
            "srv/dec",
            "srv µs/dec",
            "commands/s",
            "cli/s",
            "cli/dec",
            "attacker/dec"
        )
        .unwrap();
        for (name, c) in NAMES.iter().zip(&self.costs) {
            writeln!(
                table,
                "{name:<7} {:>11.0} {:>11.4} {:>11.2} {:>11.0} {:>11.0} {:>11.4} {:>11.4}",
                c.server_per_sec,
                c.server_per_decision,
                c.server_usec_per_decision,
                c.commands_per_sec,
                c.client_per_sec,
                c.client_per_decision,
                c.attacker_per_decision,
            )
            .unwrap();
        }
        writeln!(
            table,
            "normal users (subjects ≥ n/100): p99 = median of the rounds' p99, the rest pooled\n\
             {:<7} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "decisions/s", "p50", "p99", "p99 pool", "p99.9", "denied"
        )
        .unwrap();
        for (name, side) in NAMES.iter().zip(&self.sides) {
            let n = side.normal.as_ref().unwrap();
            let ms = |us: f64| format!("{:.2}ms", us / 1000.0);
            let q = |q: f64| ms(n.hist.value_at_quantile(q) as f64);
            writeln!(
                table,
                "{name:<7} {:>12.0} {:>9} {:>9} {:>9} {:>9} {:>9}",
                n.outcome.decisions() as f64 / side.secs.iter().sum::<f64>(),
                q(0.5),
                ms(median(&side.normal_p99s)),
                q(0.99),
                q(0.999),
                n.outcome.denied,
            )
            .unwrap();
        }
    }

    fn ratio_lines(&self, phase: &str) -> Vec<String> {
        let ([l, n], [a, b]) = (&self.costs, &self.sides);
        let fewer = |x: f64, y: f64| format!("{:.3}, {:.1}% fewer", x / y, 100.0 * (1.0 - x / y));
        vec![
            format!(
                "{phase}: lib/nocache script runs per decision: srv {}; cli {}",
                fewer(l.server_per_decision, n.server_per_decision),
                fewer(l.client_per_decision, n.client_per_decision),
            ),
            format!(
                "{phase}: lib/nocache script runs per second: srv {}; cli {}; attackers' per attacker decision {}",
                fewer(l.server_per_sec, n.server_per_sec),
                fewer(l.client_per_sec, n.client_per_sec),
                fewer(l.attacker_per_decision, n.attacker_per_decision),
            ),
            format!(
                "{phase}: lib/nocache normal users' p99: {:.3} ({:.0} / {:.0} µs, medians of rounds); \
                 client CPU per decision: {:.3} ({:.1} / {:.1} µs)",
                median(&a.normal_p99s) / median(&b.normal_p99s),
                median(&a.normal_p99s),
                median(&b.normal_p99s),
                median(&a.cpu_us) / median(&b.cpu_us),
                median(&a.cpu_us),
                median(&b.cpu_us),
            ),
        ]
    }

    /// The quota, the rounds, and how far over their limit the attackers
    /// were.
    fn lines(&self) -> String {
        format!(
            "{}\nrounds of {:.2?} (whole cycles of the quota), each after {:.2?} of settling; \
             attackers measured at {:.1}× their limit on lib, {:.1}× on nocache",
            self.quota_line, self.round, self.settle, self.overloads[0], self.overloads[1]
        )
    }

    fn quota_json(&self) -> serde_json::Value {
        json!({
            "limit": self.quota.limit().get(),
            "period_ms": self.quota.period().as_millis() as u64,
            "settle_ms": self.settle.as_millis() as u64,
            "round_ms": self.round.as_millis() as u64,
            "attackers_over_their_limit": { "lib": self.overloads[0], "nocache": self.overloads[1] },
        })
    }

    fn json(&self, offered: f64) -> serde_json::Value {
        let mut json = json!({
            "offered_decisions_per_sec": offered,
            "quota": self.quota_json(),
        });
        for (i, name) in NAMES.iter().enumerate() {
            json[*name] = self.sides[i].json();
            json[*name]["redis"] = self.costs[i].json();
            json[*name]["normal_users"] = normal_json(&self.sides[i]);
        }
        json
    }
}

fn normal_json(side: &Side) -> serde_json::Value {
    let n = side.normal.as_ref().unwrap();
    json!({
        "decisions": n.outcome.decisions(),
        "denied": n.outcome.denied,
        "p50_us": n.hist.value_at_quantile(0.5),
        "p99_us_median_of_rounds": median(&side.normal_p99s),
        "p99_us_rounds": side.normal_p99s,
        "p99_us_pooled": n.hist.value_at_quantile(0.99),
        "p999_us": n.hist.value_at_quantile(0.999),
    })
}

/// The library's own counts (`cluster.stats()`) of both limiters, warm-ups
/// included: a check on the client-side counts above.
fn library_stats(cluster: &Cluster) -> String {
    let mut line = String::from("library stats (warm-ups included):");
    for p in cluster.stats().primitives {
        if p.name.starts_with("attack-") {
            write!(
                line,
                " {} allowed {}, denied {}, denied_cached {};",
                p.name, p.allowed, p.denied, p.denied_cached
            )
            .unwrap();
        }
    }
    line
}
