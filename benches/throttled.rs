//! What reporting throttled subjects adds on the check path
//! ([`RateLimiterBuilder::report_throttled`]): the same denials answered by
//! the deny cache — in-process, no network, so nothing hides the cost —
//! by a limiter that reports and by one that does not. Two cases: one
//! subject denied again and again (held in the sketch: a hash lookup), and
//! 1,000 subjects in turn (nearly every denial a subject the 100-counter
//! sketch does not hold: the eviction scan, the worst case). An admitted
//! check never touches the sketch.
//!
//! ```text
//! SHARDLIMIT_NODES=redis://127.0.0.1:7000 cargo bench --bench throttled
//! ```
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use shardlimit::{Cluster, Quota, RateLimiter};

const SUBJECTS: usize = 1000;

fn limiter(cluster: &Cluster, name: &str, report: bool) -> RateLimiter {
    RateLimiter::builder(cluster, name, Quota::per_hour(NonZeroU32::new(1).unwrap()))
        .deny_cache(100_000)
        .report_throttled(report)
        .build()
        .unwrap()
}

/// Checks every subject until its denial comes from the deny cache.
async fn cache_denials(limiter: &RateLimiter, subjects: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for subject in subjects {
        while !limiter.check(subject).await.unwrap().cached {
            assert!(Instant::now() < deadline, "the deny cache never answered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn throttled(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let subjects: Vec<String> = (0..SUBJECTS).map(|i| format!("bench:{i}")).collect();
    let (off, on) = runtime.block_on(async {
        let namespace = format!("bench-throttled-{}", std::process::id());
        let cluster = Cluster::builder_from_env()
            .namespace(namespace)
            .build()
            .await
            .expect("set SHARDLIMIT_NODES to a running cluster");
        let off = limiter(&cluster, "off", false);
        let on = limiter(&cluster, "on", true);
        cache_denials(&off, &subjects).await;
        cache_denials(&on, &subjects).await;
        (off, on)
    });

    let mut group = c.benchmark_group("cached denial (no network)");
    for (label, limiter) in [("not reporting", &off), ("reporting", &on)] {
        group.bench_function(format!("{label}, one subject"), |b| {
            b.iter(|| {
                runtime.block_on(async { black_box(limiter.check("bench:0").await.unwrap()) })
            })
        });
        let mut next = 0;
        group.bench_function(format!("{label}, 1000 subjects in turn"), |b| {
            b.iter(|| {
                next = (next + 1) % SUBJECTS;
                let subject = &subjects[next];
                runtime.block_on(async { black_box(limiter.check(subject).await.unwrap()) })
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = throttled
}
criterion_main!(benches);
