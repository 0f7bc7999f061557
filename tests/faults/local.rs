//! The degraded local mode (`FailurePolicy::Local`): the whole cluster down
//! for 10 s under load from four handles declared as four instances.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shardlimit::{Algorithm, FailurePolicy, Quota, RateLimiter};

use crate::common;
use crate::harness::*;

/// What one check gave, and when it ended (since the scenario's start).
struct Checked {
    ended: Duration,
    allowed: bool,
    local: bool,
    error: Option<String>,
}

const LIMIT: u32 = 40;
const INSTANCES: u32 = 4;

/// Four handles of one sliding log (exact in every window, so any 1 s span
/// shows what was admitted in it), 40 per second, each declared one of 4
/// instances: while every node is down, they decide locally and admit at
/// most the quota plus one share (40 + 10) in any second — and about the
/// quota, not nothing; no call fails; decisions come from Redis again once
/// the cluster is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn degraded_local_mode_admits_about_the_quota_while_the_cluster_is_down() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let instances = NonZeroU32::new(INSTANCES).unwrap();
    let quota = Quota::per_second(NonZeroU32::new(LIMIT).unwrap());
    let mut handles = Vec::new();
    let first = cluster_builder("local").build().await.unwrap();
    for i in 0..INSTANCES {
        // Four processes' handles: their own connections, one namespace.
        let cluster = if i == 0 {
            first.clone()
        } else {
            cluster_builder("local")
                .namespace(first.namespace())
                .build()
                .await
                .unwrap()
        };
        handles.push(
            RateLimiter::builder(&cluster, "hot", quota)
                .algorithm(Algorithm::SlidingLog)
                .failure_policy(FailurePolicy::Local { instances })
                .build()
                .unwrap(),
        );
    }
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = handles
        .iter()
        .flat_map(|limiter| (0..4).map(move |_| limiter.clone()))
        .map(|limiter| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let checked = limiter.check("tenant:hot").await;
                    seen.push(Checked {
                        ended: t0.elapsed(),
                        allowed: checked.as_ref().is_ok_and(|d| d.allowed),
                        local: checked.as_ref().is_ok_and(|d| d.local),
                        error: checked.err().map(|e| e.to_string()),
                    });
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                seen
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let Outage {
        down_at,
        up_at,
        healthy_at,
    } = whole_cluster_down(t0, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = Vec::new();
    for task in tasks {
        seen.extend(task.await.unwrap());
    }
    seen.sort_by_key(|c| c.ended);

    let errors: Vec<&String> = seen.iter().filter_map(|c| c.error.as_ref()).collect();
    let local: Vec<&Checked> = seen.iter().filter(|c| c.local).collect();
    let admitted_locally: Vec<Duration> = local
        .iter()
        .filter(|c| c.allowed)
        .map(|c| c.ended)
        .collect();
    // The most admitted locally in any one second (a span starting at each
    // admission).
    let busiest = admitted_locally
        .iter()
        .map(|&t| {
            admitted_locally
                .iter()
                .filter(|&&u| u >= t && u < t + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let outage = up_at - down_at;
    let last_local = local.last().map(|c| c.ended);
    let from_redis_after = seen
        .iter()
        .filter(|c| last_local.is_none_or(|t| c.ended > t) && !c.local && c.error.is_none())
        .count();
    report(
        "degraded_local_mode",
        &[
            format!(
                "down {down_at:?}, restarted after {outage:?}, healthy after {:?} (since the kill)",
                healthy_at - down_at
            ),
            format!(
                "{} checks, {} local ({} admitted), {} errors; busiest second locally: {busiest} \
                 admitted (quota {LIMIT}, share {})",
                seen.len(),
                local.len(),
                admitted_locally.len(),
                errors.len(),
                LIMIT / INSTANCES
            ),
            format!(
                "last local decision {:?} after the kill; {from_redis_after} decisions from Redis after it",
                last_local.map(|t| t.saturating_sub(down_at))
            ),
        ],
    );
    assert!(
        errors.is_empty(),
        "{} errors: {:?}",
        errors.len(),
        errors.first()
    );
    assert!(
        busiest <= (LIMIT + LIMIT / INSTANCES) as usize,
        "{busiest} admitted locally in one second"
    );
    // About the quota while down, not nothing: at least half of it per
    // second of the outage.
    let expected = (outage.as_secs_f64() * f64::from(LIMIT) / 2.0) as usize;
    assert!(
        admitted_locally.len() >= expected,
        "{} admitted locally over {outage:?}",
        admitted_locally.len()
    );
    assert!(
        from_redis_after > 100,
        "not back to Redis: {from_redis_after}"
    );
    let back = last_local.unwrap_or_default().saturating_sub(down_at);
    assert!(
        back <= healthy_at - down_at + Duration::from_secs(3),
        "still local {back:?} after the kill"
    );
    common::assert_every_key_has_ttl(first.namespace()).await;
}
