//! `--workload hot`: one subject whose limit is far above what one master
//! decides (`--hot-limit`, default 200,000 per second), checked by
//! `--concurrency` tasks (64) spread over `--hot-handles` (4) separate
//! `Cluster` handles, as separate processes would be. Two limiters of the
//! same quota under different names (no shared state): `sliced` with
//! `Slices::up_to(--hot-bound)` (0.1), `exact` without; rounds interleaved
//! (sliced, exact, sliced, …).
//!
//! Before each round the subject's state is reset and then drained (a
//! penalty of the whole burst), and every handle's slices are given back
//! after it: each round starts from a spent limit, so what the exact GCRA
//! admits in any period is at most the limit, and the sliced limiter's
//! bound is `limit + bound`. Admissions are counted per period (by the
//! client's clock from the round's start) and compared with it.
//!
//! Printed: each round's decisions and admissions per second, admitted per
//! period against `limit + bound`, Redis script runs per decision (`INFO
//! commandstats` over the masters: every client's), and the headline
//! `lib/exact hot throughput: R`, the ratio of the medians of decisions per
//! second (and the same for admissions, which a spent limit caps).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use shardlimit::limit::Slices;
use shardlimit::{Cluster, Quota, RateLimiter};

use crate::args::Args;
use crate::commandstats::Masters;
use crate::report::{median, write_report};

const SUBJECT: &str = "hot-tenant";

struct RoundResult {
    decisions_per_sec: f64,
    admitted_per_sec: f64,
    per_period: Vec<u64>,
    scripts_per_decision: Option<f64>,
}

pub(crate) async fn hot(cluster: &Cluster, args: &Args) {
    let quota = Quota::per_second(args.hot_limit);
    let slices = Slices::up_to(args.hot_bound);
    let bound = u64::from(slices.bound(args.hot_limit));
    let limit = u64::from(args.hot_limit);
    let [sliced, exact] = sliced_and_exact(
        cluster,
        args.hot_handles,
        ["hot-sliced", "hot-exact"],
        quota,
        slices,
    )
    .await;
    let mut masters = Masters::connect(cluster).await;
    println!(
        "hot subject: limit {limit}/s, declared bound {bound} ({} of the limit), {} tasks over {} handles, {} rounds of {} s per side",
        args.hot_bound, args.concurrency, args.hot_handles, args.rounds, args.round_secs
    );
    let warmup = Duration::from_secs_f64(args.warmup_secs);
    round(&sliced, args, warmup, None).await;
    round(&exact, args, warmup, None).await;
    let length = Duration::from_secs_f64(args.round_secs);
    let mut results: [Vec<RoundResult>; 2] = [Vec::new(), Vec::new()];
    let mut all_within = true;
    for r in 0..args.rounds {
        for (side, (name, limiters)) in [("sliced", &sliced), ("exact", &exact)]
            .into_iter()
            .enumerate()
        {
            let result = round(limiters, args, length, Some(&mut masters)).await;
            let worst = result.per_period.iter().copied().max().unwrap_or(0);
            let within = worst <= limit + bound;
            all_within &= within;
            println!(
                "round {r} {name:>6}: {:>10.0} decisions/s, {:>9.0} admitted/s, admitted per period {:?} (limit {limit} + bound {bound} = {}{}), script runs per decision {}",
                result.decisions_per_sec,
                result.admitted_per_sec,
                result.per_period,
                limit + bound,
                if within { "" } else { " EXCEEDED" },
                result
                    .scripts_per_decision
                    .map_or("n/a".into(), |s| format!("{s:.5}")),
            );
            results[side].push(result);
        }
    }
    let med = |side: usize, f: fn(&RoundResult) -> f64| {
        median(&results[side].iter().map(f).collect::<Vec<_>>())
    };
    let ratio = med(0, |r| r.decisions_per_sec) / med(1, |r| r.decisions_per_sec);
    let admitted_ratio = med(0, |r| r.admitted_per_sec) / med(1, |r| r.admitted_per_sec);
    let scripts = |side: usize| {
        let v: Vec<f64> = results[side]
            .iter()
            .filter_map(|r| r.scripts_per_decision)
            .collect();
        if v.is_empty() { f64::NAN } else { median(&v) }
    };
    println!("lib/exact hot throughput: {ratio:.2}");
    println!("lib/exact hot admitted per second: {admitted_ratio:.2}");
    println!(
        "script runs per decision (median): sliced {:.5}, exact {:.5}",
        scripts(0),
        scripts(1)
    );
    println!(
        "admitted <= limit + bound ({}) in every period of every round: {}",
        limit + bound,
        if all_within { "yes" } else { "NO" }
    );
    let side_json = |side: usize| {
        json!(
            results[side]
                .iter()
                .map(|r| json!({
                    "decisions_per_sec": r.decisions_per_sec,
                    "admitted_per_sec": r.admitted_per_sec,
                    "admitted_per_period": r.per_period,
                    "scripts_per_decision": r.scripts_per_decision,
                }))
                .collect::<Vec<_>>()
        )
    };
    write_report(
        "gcra",
        "hot",
        &json!({
            "limit_per_sec": limit, "bound": bound, "handles": args.hot_handles,
            "concurrency": args.concurrency, "ratio": ratio, "admitted_ratio": admitted_ratio,
            "within_bound": all_within, "sliced": side_json(0), "exact": side_json(1),
        }),
    );
}

/// Two limiters of `quota` per handle, on `handles` separate `Cluster`
/// handles (as separate processes would be): named `names[0]` with
/// `slices`, `names[1]` without.
pub(crate) async fn sliced_and_exact(
    cluster: &Cluster,
    handles: usize,
    names: [&str; 2],
    quota: Quota,
    slices: Slices,
) -> [Vec<RateLimiter>; 2] {
    let mut sides = [Vec::new(), Vec::new()];
    for _ in 0..handles {
        let handle = Cluster::builder_from_env()
            .namespace(cluster.namespace())
            .command_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("cluster");
        sides[0].push(
            RateLimiter::builder(&handle, names[0], quota)
                .slices(slices)
                .build()
                .unwrap(),
        );
        sides[1].push(
            RateLimiter::builder(&handle, names[1], quota)
                .build()
                .unwrap(),
        );
    }
    sides
}

/// One round of `length` on `limiters` (one per handle), from a drained
/// subject; slices given back after it.
async fn round(
    limiters: &[RateLimiter],
    args: &Args,
    length: Duration,
    masters: Option<&mut Masters>,
) -> RoundResult {
    let first = &limiters[0];
    first.reset(SUBJECT).await.unwrap();
    let burst = NonZeroU32::new(first.capacity()).unwrap();
    first.penalize(SUBJECT, burst).await.unwrap();
    let periods = usize::try_from(length.as_secs().max(1)).unwrap();
    let admitted: Arc<Vec<AtomicU64>> =
        Arc::new((0..=periods).map(|_| AtomicU64::new(0)).collect());
    let decisions = Arc::new(AtomicU64::new(0));
    let mut masters = masters;
    let before = match masters.as_deref_mut() {
        Some(m) => m.snapshot().await,
        None => None,
    };
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..args.concurrency {
        let limiter = limiters[t % limiters.len()].clone();
        let (admitted, decisions) = (admitted.clone(), decisions.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while start.elapsed() < length {
                let d = limiter.check(SUBJECT).await.unwrap();
                n += 1;
                if d.allowed {
                    let p = usize::try_from(start.elapsed().as_secs()).unwrap();
                    admitted[p.min(periods)].fetch_add(1, Ordering::Relaxed);
                }
            }
            decisions.fetch_add(n, Ordering::Relaxed);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = match masters {
        Some(m) => m.snapshot().await,
        None => None,
    };
    for limiter in limiters {
        limiter.return_slices().await.unwrap();
    }
    let decisions = decisions.load(Ordering::Relaxed);
    let counts: Vec<u64> = admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let total: u64 = counts.iter().sum();
    let scripts_per_decision = match (before, after) {
        (Some(b), Some(a)) => Some(a.since(&b).scripts() as f64 / decisions.max(1) as f64),
        _ => None,
    };
    RoundResult {
        decisions_per_sec: decisions as f64 / elapsed,
        admitted_per_sec: total as f64 / elapsed,
        // Whole periods only: the last bucket holds what came after them.
        per_period: counts[..periods].to_vec(),
        scripts_per_decision,
    }
}
