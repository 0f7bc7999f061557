//! `--workload skewed`: many subjects of one limit, a few of them hot —
//! Zipf over `--skewed-subjects` (10,000) with exponent `--zipf-s` (1.1),
//! each subject limited to `--skewed-limit` (2,000) per second — checked
//! by `--concurrency` tasks (64) spread over `--skewed-handles` (4)
//! separate `Cluster` handles, as separate processes would be. Two
//! limiters of the same quota under different names: `auto` with
//! automatic slicing (`Slices::up_to(--skewed-bound).when_hot()`, slices
//! of `--skewed-lifetime-ms` (100), the library's default threshold of 8
//! units per longest slice (10 lifetimes: 8 checks a second) unless
//! `--skewed-threshold` sets one: nobody says
//! which subjects are hot), `exact` without; rounds interleaved (auto,
//! exact, auto, …), the same subjects in every round, as a service's
//! tenants would be.
//!
//! The quota's burst is the largest slice (half the declared bound), the
//! least a full slice can be taken from, so that what one period may
//! admit is close to the limit: **at most burst + limit + bound**, the
//! exact GCRA's most plus the declared bound, whatever a subject's bucket
//! held when the period began (plus 1% of the limit, 10 ms of its rate:
//! the client counts an admission a little after Redis counted its
//! units). Admissions are counted per subject and period (by the client's
//! clock from the round's start) and every subject's every period is
//! compared with it; a failure prints a line and the summary says `NO`.
//!
//! Printed: each round's decisions per second, the share decided from a
//! slice, Redis commands (every command the masters ran, those scripts
//! call included: `INFO commandstats`), script runs and script
//! microseconds per decision, the most one subject was admitted in one
//! period; then medians, and last `automatic slicing: Redis work per
//! decision on/off: R`, the ratio of the medians of commands per
//! decision.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand_distr::{Distribution, Zipf};
use serde_json::json;
use shardlimit::limit::Slices;
use shardlimit::{Cluster, Quota, RateLimiter};

use crate::args::Args;
use crate::commandstats::{Calls, Masters, snapshot};
use crate::hot::sliced_and_exact;
use crate::report::{median, write_report};

struct RoundResult {
    decisions_per_sec: f64,
    sliced_share: f64,
    /// Commands, script runs and script µs per decision (`None`: a
    /// failover during the round).
    commands_per_decision: Option<f64>,
    scripts_per_decision: Option<f64>,
    script_usec_per_decision: Option<f64>,
    /// The most one subject was admitted in one period: (admitted,
    /// subject's rank, period).
    worst: (u32, usize, usize),
    /// Subject periods above the ceiling.
    exceeded: usize,
}

/// What every round shares.
struct Setup {
    subjects: usize,
    zipf: Zipf<f64>,
    ceiling: u32,
}

pub(crate) async fn skewed(cluster: &Cluster, args: &Args) {
    let probe = Slices::up_to(args.skewed_bound);
    let bound = probe.bound(args.skewed_limit);
    assert!(bound >= 2, "--skewed-bound leaves less than 2 units");
    // The largest slice: half the bound.
    let burst = bound / 2;
    let quota = Quota::per_second(args.skewed_limit).allow_burst(burst);
    let slices = probe
        .lasting(Duration::from_millis(args.skewed_lifetime_ms))
        .when_hot();
    let slices = match args.skewed_threshold {
        Some(per_second) => slices.when_hot_above(per_second),
        None => slices,
    };
    let slack = args.skewed_limit / 100;
    let setup = Setup {
        subjects: args.skewed_subjects,
        zipf: Zipf::new(args.skewed_subjects as f64, args.zipf_s).unwrap(),
        ceiling: burst + args.skewed_limit + bound + slack,
    };
    let [auto, exact] = sliced_and_exact(
        cluster,
        args.skewed_handles,
        ["skewed-auto", "skewed-exact"],
        quota,
        slices,
    )
    .await;
    let mut masters = Masters::connect(cluster).await;
    println!(
        "skewed: {} subjects, Zipf s = {}, each {}/s (burst {burst}), declared bound {bound} ({} of the limit), \
         slices of {} ms, hot above {:.0} checks/s per process; {} tasks over {} handles, {} rounds of {} s per side",
        args.skewed_subjects,
        args.zipf_s,
        args.skewed_limit,
        args.skewed_bound,
        args.skewed_lifetime_ms,
        slices.hot_threshold().unwrap_or(f64::NAN),
        args.concurrency,
        args.skewed_handles,
        args.rounds,
        args.round_secs
    );
    println!(
        "ceiling per subject and period: burst {burst} + limit {} + bound {bound} + {slack} = {}",
        args.skewed_limit, setup.ceiling
    );
    let warmup = Duration::from_secs_f64(args.warmup_secs);
    round(&auto, args, &setup, warmup, None).await;
    round(&exact, args, &setup, warmup, None).await;
    let length = Duration::from_secs_f64(args.round_secs);
    let mut results: [Vec<RoundResult>; 2] = [Vec::new(), Vec::new()];
    for r in 0..args.rounds {
        for (side, (name, limiters)) in [("auto", &auto), ("exact", &exact)].into_iter().enumerate()
        {
            let result = round(limiters, args, &setup, length, Some(&mut masters)).await;
            let opt =
                |v: Option<f64>, digits: usize| v.map_or("n/a".into(), |v| format!("{v:.digits$}"));
            println!(
                "round {r} {name:>5}: {:>8.0} decisions/s, {:>5.1}% sliced, {} commands, {} script runs, {} script µs per decision; \
                 most admitted in a period {} (rank {}, period {}){}",
                result.decisions_per_sec,
                result.sliced_share * 100.0,
                opt(result.commands_per_decision, 3),
                opt(result.scripts_per_decision, 4),
                opt(result.script_usec_per_decision, 2),
                result.worst.0,
                result.worst.1 + 1,
                result.worst.2,
                if result.exceeded == 0 {
                    String::new()
                } else {
                    format!(", {} subject periods EXCEEDED", result.exceeded)
                },
            );
            results[side].push(result);
        }
    }
    let med = |side: usize, f: &dyn Fn(&RoundResult) -> Option<f64>| {
        let v: Vec<f64> = results[side].iter().filter_map(f).collect();
        median(&v)
    };
    let within = results.iter().flatten().all(|r| r.exceeded == 0);
    let commands = [0, 1].map(|s| med(s, &|r| r.commands_per_decision));
    let scripts = [0, 1].map(|s| med(s, &|r| r.scripts_per_decision));
    let usec = [0, 1].map(|s| med(s, &|r| r.script_usec_per_decision));
    let rates = [0, 1].map(|s| med(s, &|r| Some(r.decisions_per_sec)));
    let sliced = med(0, &|r| Some(r.sliced_share));
    println!(
        "medians: auto {:.0} decisions/s ({:.1}% sliced), exact {:.0}: auto/exact {:.2}",
        rates[0],
        sliced * 100.0,
        rates[1],
        rates[0] / rates[1]
    );
    println!(
        "per decision, auto / exact: commands {:.3} / {:.3} ({:.3}), script runs {:.4} / {:.4} ({:.3}), script µs {:.2} / {:.2} ({:.3})",
        commands[0],
        commands[1],
        commands[0] / commands[1],
        scripts[0],
        scripts[1],
        scripts[0] / scripts[1],
        usec[0],
        usec[1],
        usec[0] / usec[1],
    );
    println!(
        "admitted <= burst + limit + bound (+1%) = {} for every subject in every period of every round: {}",
        setup.ceiling,
        if within { "yes" } else { "NO" }
    );
    let ratio = commands[0] / commands[1];
    let side_json = |side: usize| {
        json!(
            results[side]
                .iter()
                .map(|r| json!({
                    "decisions_per_sec": r.decisions_per_sec,
                    "sliced_share": r.sliced_share,
                    "commands_per_decision": r.commands_per_decision,
                    "scripts_per_decision": r.scripts_per_decision,
                    "script_usec_per_decision": r.script_usec_per_decision,
                    "most_admitted_in_a_period": r.worst.0,
                    "exceeded": r.exceeded,
                }))
                .collect::<Vec<_>>()
        )
    };
    write_report(
        "gcra",
        "skewed",
        &json!({
            "subjects": args.skewed_subjects, "zipf_s": args.zipf_s,
            "limit_per_sec": args.skewed_limit, "burst": burst, "bound": bound,
            "lifetime_ms": args.skewed_lifetime_ms,
            "hot_threshold": slices.hot_threshold(), "handles": args.skewed_handles,
            "concurrency": args.concurrency, "ceiling": setup.ceiling, "within_bound": within,
            "work_ratio": ratio, "auto": side_json(0), "exact": side_json(1),
        }),
    );
    println!("automatic slicing: Redis work per decision on/off: {ratio:.3}");
}

/// One round of `length` on `limiters` (one per handle); slices given back
/// after it (counted: giving back is part of the work).
async fn round(
    limiters: &[RateLimiter],
    args: &Args,
    setup: &Setup,
    length: Duration,
    masters: Option<&mut Masters>,
) -> RoundResult {
    let periods = usize::try_from(length.as_secs().max(1)).unwrap();
    // Per subject, per period (and one for what came after the last
    // whole period): admitted.
    let width = periods + 1;
    let admitted: Arc<Vec<AtomicU32>> = Arc::new(
        (0..setup.subjects * width)
            .map(|_| AtomicU32::new(0))
            .collect(),
    );
    let decisions = Arc::new(AtomicU64::new(0));
    let sliced = Arc::new(AtomicU64::new(0));
    let mut masters = masters;
    let before = snapshot(masters.as_deref_mut()).await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..args.concurrency {
        let limiter = limiters[t % limiters.len()].clone();
        let (admitted, decisions, sliced) = (admitted.clone(), decisions.clone(), sliced.clone());
        let zipf = setup.zipf;
        tasks.push(tokio::spawn(async move {
            let (mut n, mut from_slices) = (0, 0);
            while start.elapsed() < length {
                // 1..=subjects.
                let rank = zipf.sample(&mut rand::rng()) as usize - 1;
                let d = limiter.check(format!("tenant:{rank}")).await.unwrap();
                n += 1;
                from_slices += u64::from(d.sliced);
                if d.allowed {
                    let p = usize::try_from(start.elapsed().as_secs()).unwrap();
                    admitted[rank * width + p.min(periods)].fetch_add(1, Ordering::Relaxed);
                }
            }
            decisions.fetch_add(n, Ordering::Relaxed);
            sliced.fetch_add(from_slices, Ordering::Relaxed);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    for limiter in limiters {
        limiter.return_slices().await.unwrap();
    }
    let after = snapshot(masters).await;
    let decisions = decisions.load(Ordering::Relaxed).max(1);
    let calls: Option<Calls> = match (before, after) {
        (Some(b), Some(a)) => Some(a.since(&b)),
        _ => None,
    };
    let per = |f: fn(&Calls) -> u64| calls.as_ref().map(|c| f(c) as f64 / decisions as f64);
    let mut worst = (0, 0, 0);
    let mut exceeded = 0;
    for rank in 0..setup.subjects {
        // Whole periods only: the last one holds what came after them.
        for p in 0..periods {
            let n = admitted[rank * width + p].load(Ordering::Relaxed);
            if n > worst.0 {
                worst = (n, rank, p);
            }
            if n > setup.ceiling {
                exceeded += 1;
                println!(
                    "EXCEEDED: subject tenant:{rank} admitted {n} in period {p} > ceiling {}",
                    setup.ceiling
                );
            }
        }
    }
    RoundResult {
        decisions_per_sec: decisions as f64 / elapsed,
        sliced_share: sliced.load(Ordering::Relaxed) as f64 / decisions as f64,
        commands_per_decision: per(Calls::total),
        scripts_per_decision: per(Calls::scripts),
        script_usec_per_decision: per(Calls::script_usec),
        worst,
        exceeded,
    }
}
