//! What reporting throttled subjects adds on the check path
//! ([`RateLimiterBuilder::report_throttled`]): the same denials answered by
//! the deny cache — in-process, no network, so nothing hides the cost —
//! by a limiter that reports and by one that does not. Two cases: one
//! subject denied again and again (held in the sketch: a hash lookup), and
//! 1,000 subjects in turn (nearly every denial a subject the 100-counter
//! sketch does not hold: the eviction scan, the worst case). An admitted
//! check never touches the sketch.
//!
//!
//! A second group measures what automatic slicing
//! ([`Slices::when_hot`](shardlimit::limit::Slices::when_hot)) adds to a
//! check of a subject that is not hot (counted in the limiter's sketch of
//! checks: a mutex, a clock read and a hash lookup, or an eviction), in
//! the same way: cached denials by a limiter with automatic slicing whose
//! threshold is never reached against the same limiter without slices,
//! neither reporting throttled subjects — for one subject, 1,000 in turn
//! (all held by the 1,024-counter sketch) and 5,000 in turn (nearly every
//! check an eviction).
//!
//! ```text
//! SHARDLIMIT_NODES=redis://127.0.0.1:7000 cargo bench --bench throttled
//! ```
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use shardlimit::limit::Slices;
use shardlimit::{Cluster, Quota, RateLimiter};

const SUBJECTS: usize = 1000;
/// More than the 1,024 counters of automatic slicing's sketch.
const MANY_SUBJECTS: usize = 5000;

fn limiter(cluster: &Cluster, name: &str, report: bool) -> RateLimiter {
    RateLimiter::builder(cluster, name, Quota::per_hour(NonZeroU32::new(1).unwrap()))
        .deny_cache(100_000)
        .report_throttled(report)
        .build()
        .unwrap()
}

/// A limiter whose denials the deny cache answers, with automatic slicing
/// never finding a subject hot (`auto`) or without slices; neither reports.
fn cold_limiter(cluster: &Cluster, name: &str, auto: bool) -> RateLimiter {
    // Two units an hour: a bound of one unit, the least slices allow.
    let builder = RateLimiter::builder(cluster, name, Quota::per_hour(NonZeroU32::new(2).unwrap()))
        .deny_cache(100_000)
        .report_throttled(false);
    let builder = if auto {
        builder.slices(Slices::up_to(0.5).when_hot_above(1e12))
    } else {
        builder
    };
    builder.build().unwrap()
}

/// Checks every subject until its denial comes from the deny cache: at
/// once while admitted (spending the quota), after a pause while denied by
/// Redis (the cache answers once the slot's invalidations are followed).
async fn cache_denials(limiter: &RateLimiter, subjects: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for subject in subjects {
        loop {
            let d = limiter.check(subject).await.unwrap();
            if d.cached {
                break;
            }
            assert!(Instant::now() < deadline, "the deny cache never answered");
            if !d.allowed {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Two limiters `make` builds on a fresh namespace, each with every one of
/// `subjects` denied from its deny cache.
fn cached_pair(
    runtime: &tokio::runtime::Runtime,
    prefix: &str,
    subjects: &[String],
    make: impl Fn(&Cluster) -> [RateLimiter; 2],
) -> [RateLimiter; 2] {
    runtime.block_on(async {
        let namespace = format!("{prefix}-{}", std::process::id());
        let cluster = Cluster::builder_from_env()
            .namespace(namespace)
            .build()
            .await
            .expect("set SHARDLIMIT_NODES to a running cluster");
        let pair = make(&cluster);
        for limiter in &pair {
            cache_denials(limiter, subjects).await;
        }
        pair
    })
}

/// One group: each labelled limiter's cached denials of one subject, then
/// of each count of `subjects` in turn.
fn bench_denials(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    limiters: [(&str, &RateLimiter); 2],
    subjects: &[String],
    counts: &[usize],
) {
    let mut group = c.benchmark_group(name);
    for (label, limiter) in limiters {
        group.bench_function(format!("{label}, one subject"), |b| {
            b.iter(|| {
                runtime.block_on(async { black_box(limiter.check("bench:0").await.unwrap()) })
            })
        });
        for &n in counts {
            let mut next = 0;
            group.bench_function(format!("{label}, {n} subjects in turn"), |b| {
                b.iter(|| {
                    next = (next + 1) % n;
                    let subject = &subjects[next];
                    runtime.block_on(async { black_box(limiter.check(subject).await.unwrap()) })
                })
            });
        }
    }
    group.finish();
}

fn throttled(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let subjects: Vec<String> = (0..SUBJECTS).map(|i| format!("bench:{i}")).collect();
    let [off, on] = cached_pair(&runtime, "bench-throttled", &subjects, |cluster| {
        [limiter(cluster, "off", false), limiter(cluster, "on", true)]
    });
    bench_denials(
        c,
        &runtime,
        "cached denial (no network)",
        [("not reporting", &off), ("reporting", &on)],
        &subjects,
        &[SUBJECTS],
    );

    let many: Vec<String> = (0..MANY_SUBJECTS).map(|i| format!("bench:{i}")).collect();
    let [exact, auto] = cached_pair(&runtime, "bench-auto-slices", &many, |cluster| {
        [
            cold_limiter(cluster, "exact", false),
            cold_limiter(cluster, "auto", true),
        ]
    });
    bench_denials(
        c,
        &runtime,
        "cached denial of a cold subject (no network)",
        [("without slices", &exact), ("automatic slicing", &auto)],
        &many,
        &[SUBJECTS, MANY_SUBJECTS],
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = throttled
}
criterion_main!(benches);
