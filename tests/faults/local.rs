//! The degraded local mode (`FailurePolicy::Local`): the whole cluster down
//! for 10 s under load from four handles declared as four instances.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shardlimit::{Algorithm, Cluster, FailurePolicy, Quota, RateLimiter};

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

/// `INSTANCES` processes' handles: their own connections, one namespace.
async fn processes(prefix: &str) -> Vec<Cluster> {
    let first = cluster_builder(prefix).build().await.unwrap();
    let mut clusters = vec![first.clone()];
    for _ in 1..INSTANCES {
        let cluster = cluster_builder(prefix).namespace(first.namespace());
        clusters.push(cluster.build().await.unwrap());
    }
    clusters
}

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
    let clusters = processes("local").await;
    let first = clusters[0].clone();
    let handles: Vec<RateLimiter> = clusters
        .iter()
        .map(|cluster| {
            RateLimiter::builder(cluster, "hot", quota)
                .algorithm(Algorithm::SlidingLog)
                .failure_policy(FailurePolicy::Local { instances })
                .build()
                .unwrap()
        })
        .collect();
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

/// One check's outcome in the bound scenario.
struct Outcome {
    subject: usize,
    limit: usize,
    allowed: bool,
    local: bool,
}

/// Four handles declared as four instances of 20/h (share 5), a GCRA and
/// a sliding log, over one period that straddles normal operation, a stall
/// of the subjects' master (paused for less than the node timeout, so it
/// stays master) and a flapping phase (paused and resumed by turns, so
/// some checks time out and some do not): together they admit at most the
/// quota plus one share — each starts from what Redis last said was left,
/// what is admitted locally reaches Redis before Redis decides for that
/// process again, and a process that decided locally keeps to its part
/// until the others' are counted. A subject blocked for an hour is never admitted, locally
/// or not; a subject whose own quota (8/h) is below the default keeps it
/// locally (at most 8 plus one share of 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn local_mode_keeps_its_bound_through_a_stall_and_flapping() {
    const HOURLY: u32 = 20;
    const OWN: u32 = 8;
    restore_cluster();
    let _restore = RestoreOnDrop;
    let instances = NonZeroU32::new(INSTANCES).unwrap();
    let quota = Quota::per_hour(NonZeroU32::new(HOURLY).unwrap());
    // All three subjects on the master that stalls.
    let subjects = Arc::new(subjects_on(port(0), 3).await);
    let [busy, blocked, own] = [0, 1, 2];
    let algorithms = [Algorithm::Gcra, Algorithm::SlidingLog];
    let clusters = processes("local-bound").await;
    let first = clusters[0].clone();
    let handles: Vec<Vec<RateLimiter>> = clusters
        .iter()
        .map(|cluster| {
            algorithms
                .iter()
                .map(|&algorithm| {
                    RateLimiter::builder(cluster, algorithm.kind(), quota)
                        .algorithm(algorithm)
                        .failure_policy(FailurePolicy::Local { instances })
                        .build()
                        .unwrap()
                })
                .collect()
        })
        .collect();
    for limiter in &handles[0] {
        limiter
            .block(&subjects[blocked], Duration::from_secs(3600))
            .await
            .unwrap();
        let own_quota = Quota::per_hour(NonZeroU32::new(OWN).unwrap());
        limiter
            .set_override(&subjects[own], own_quota, Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let names = subjects.clone();
    let check = move |limiter: RateLimiter, subject: usize, limit: usize| {
        let name = names[subject].clone();
        async move {
            let d = limiter.check(name).await.unwrap();
            Outcome {
                subject,
                limit,
                allowed: d.allowed,
                local: d.local,
            }
        }
    };
    // Normal operation: two checks of the busy subject per handle, one of
    // each other, by turns (8 of the busy subject's 20 admitted by Redis).
    let mut seen = Vec::new();
    for round in 0..2 {
        for limiters in &handles {
            for (l, limiter) in limiters.iter().enumerate() {
                seen.push(check(limiter.clone(), busy, l).await);
                if round == 0 {
                    seen.push(check(limiter.clone(), blocked, l).await);
                    seen.push(check(limiter.clone(), own, l).await);
                }
            }
        }
    }
    assert!(
        seen.iter().all(|o| !o.local),
        "Redis decided before the stall"
    );
    // The stall starts, then the load: two tasks per handle.
    node("pause", port(0)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = handles
        .iter()
        .flat_map(|limiters| (0..2).map(move |_| limiters.clone()))
        .map(|limiters| {
            let (stop, check) = (stop.clone(), check.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for subject in [busy, blocked, own] {
                        for (l, limiter) in limiters.iter().enumerate() {
                            seen.push(check(limiter.clone(), subject, l).await);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    node("unpause", port(0)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Flapping: paused and resumed by turns, each pause well under the
    // node timeout.
    for _ in 0..6 {
        node("pause", port(0)).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        node("unpause", port(0)).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        seen.extend(task.await.unwrap());
    }

    let count = |subject: usize, limit: usize, local: Option<bool>| {
        seen.iter()
            .filter(|o| o.subject == subject && o.limit == limit && o.allowed)
            .filter(|o| local.is_none_or(|l| o.local == l))
            .count()
    };
    let share = |q: u32| q.div_ceil(INSTANCES) as usize;
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for (l, algorithm) in algorithms.iter().enumerate() {
        for (subject, what, bound) in [
            (busy, "busy", HOURLY as usize + share(HOURLY)),
            (blocked, "blocked", 0),
            (own, "own quota", OWN as usize + share(OWN)),
        ] {
            let (all, local) = (count(subject, l, None), count(subject, l, Some(true)));
            let checks = seen
                .iter()
                .filter(|o| o.subject == subject && o.limit == l)
                .count();
            let locally = seen
                .iter()
                .filter(|o| o.subject == subject && o.limit == l && o.local)
                .count();
            let line = format!(
                "{algorithm} {what}: {all} admitted of {checks} ({local} of {locally} \
                 decided locally); bound {bound}"
            );
            if all > bound {
                failures.push(line.clone());
            }
            lines.push(line);
        }
    }
    let decided_locally = seen.iter().filter(|o| o.local).count();
    lines.push(format!(
        "{} checks, {decided_locally} decided locally",
        seen.len()
    ));
    report("local_mode_bound", &lines);
    assert!(
        decided_locally > 0,
        "the stall and the flapping made no local decision"
    );
    assert!(failures.is_empty(), "over the bound: {failures:#?}");
    common::assert_every_key_has_ttl(first.namespace()).await;
}
