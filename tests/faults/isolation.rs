//! A master killed under open-loop load: the healthy masters' slots must
//! not pay for the dead one.
//!
//! The driver behaves like a service: requests arrive at a fixed rate (60% of
//! the capacity measured just before), each in its own task, whether or not
//! earlier ones have finished. Every request is recorded with its start, end,
//! outcome and whether its slot belongs to the master that is killed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardlimit::keys::slot;
use shardlimit::{Error, RateLimiter};

use crate::common;
use crate::harness::*;

/// Subjects spread over every slot.
const SUBJECTS: usize = 10_000;
const BUCKET: Duration = Duration::from_millis(500);

struct Call {
    started: Duration,
    ended: Duration,
    on_dead: bool,
    /// `None`: decided. Otherwise the error, and whether it was a
    /// `NodeDown` (refused without sending).
    error: Option<(String, bool)>,
}

impl Call {
    fn took(&self) -> Duration {
        self.ended - self.started
    }
}

/// Decisions per second with 64 tasks in a closed loop for `for_how_long`.
async fn capacity(limiter: &RateLimiter, subjects: &Arc<Vec<(String, bool)>>) -> f64 {
    let for_how_long = Duration::from_secs(2);
    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let (limiter, subjects) = (limiter.clone(), subjects.clone());
            tokio::spawn(async move {
                let mut done = 0u64;
                let mut i = task;
                while started.elapsed() < for_how_long {
                    if limiter.check(&subjects[i % SUBJECTS].0).await.is_ok() {
                        done += 1;
                    }
                    i += 64;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn a_dead_master_does_not_slow_the_healthy_ones() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let cluster = cluster_builder("isolate").build().await.unwrap();
    // GCRA, fail-closed (the default): every failure is visible as an error.
    let limiter = RateLimiter::builder(&cluster, "iso", big_quota())
        .build()
        .unwrap();
    let dead = common::masters()
        .await
        .into_iter()
        .find(|m| m.addr == addr(0))
        .unwrap();
    let subjects: Arc<Vec<(String, bool)>> = Arc::new(
        (0..SUBJECTS)
            .map(|i| {
                let s = format!("iso-{i}");
                let on_dead = dead.owns(slot(s.as_bytes()));
                (s, on_dead)
            })
            .collect(),
    );
    let rate = 0.6 * capacity(&limiter, &subjects).await;

    let calls = Arc::new(Mutex::new(Vec::<Call>::with_capacity(200_000)));
    let t0 = Instant::now();
    let warmup = Duration::from_secs(2);
    let after_kill = Duration::from_secs(12);
    let generator = {
        let (limiter, subjects, calls) = (limiter.clone(), subjects.clone(), calls.clone());
        tokio::spawn(async move {
            let mut sent: u64 = 0;
            let mut inflight = Vec::new();
            while t0.elapsed() < warmup + after_kill {
                let due = (t0.elapsed().as_secs_f64() * rate) as u64;
                while sent < due {
                    let (limiter, subjects, calls) =
                        (limiter.clone(), subjects.clone(), calls.clone());
                    let i = usize::try_from(sent).unwrap() % SUBJECTS;
                    inflight.push(tokio::spawn(async move {
                        let (subject, on_dead) = &subjects[i];
                        let started = t0.elapsed();
                        let result = limiter.check(subject).await;
                        let ended = t0.elapsed();
                        let error = result.err().map(|e| {
                            let down = matches!(e, Error::NodeDown { .. });
                            (e.to_string(), down)
                        });
                        calls.lock().unwrap().push(Call {
                            started,
                            ended,
                            on_dead: *on_dead,
                            error,
                        });
                    }));
                    sent += 1;
                }
                inflight.retain(|t: &tokio::task::JoinHandle<()>| !t.is_finished());
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            inflight
        })
    };

    tokio::time::sleep(warmup).await;
    let killed_at = t0.elapsed();
    node("kill", port(0)).await;
    let mut promoted_after = None;
    while t0.elapsed() < warmup + after_kill {
        if promoted_after.is_none() && is_master(port(3)).await {
            promoted_after = Some(t0.elapsed() - killed_at);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // No hang: every request still in flight ends within the timeout.
    let inflight = generator.await.unwrap();
    for task in inflight {
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("a request hung")
            .unwrap();
    }
    let calls = std::mem::take(&mut *calls.lock().unwrap());
    let since_kill = |t: Duration| t.as_secs_f64() - killed_at.as_secs_f64();

    // Redis' own CLUSTERDOWN window: from the first healthy-slot call that
    // got CLUSTERDOWN to the end of the last one.
    let cluster_down: Vec<&Call> = calls
        .iter()
        .filter(|c| !c.on_dead)
        .filter(|c| {
            c.error
                .as_ref()
                .is_some_and(|(e, _)| e.contains("ClusterDown"))
        })
        .collect();
    let window = (!cluster_down.is_empty()).then(|| {
        (
            cluster_down.iter().map(|c| c.started).min().unwrap(),
            cluster_down.iter().map(|c| c.ended).max().unwrap(),
        )
    });
    let in_window = |from: Duration, to: Duration| {
        window.is_some_and(|(start, end)| {
            from <= end + COMMAND_TIMEOUT && to + COMMAND_TIMEOUT >= start
        })
    };

    // The per-bucket table.
    let buckets = (warmup + after_kill).as_millis() / BUCKET.as_millis();
    let mut lines = vec![
        format!(
            "offered {rate:.0}/s (60% of capacity); 7000 killed at {:.2}s; replica 7003 promoted {promoted_after:?} after the kill; CLUSTERDOWN window on healthy slots: {}",
            killed_at.as_secs_f64(),
            window.map_or("none".to_owned(), |(s, e)| format!(
                "{:+.2}s..{:+.2}s",
                since_kill(s),
                since_kill(e)
            ))
        ),
        "bucket (s since kill) | healthy offered | healthy decided | healthy errors | dead offered | dead decided | dead errors (node down)".to_owned(),
    ];
    let mut short_buckets = Vec::new();
    for b in 0..buckets {
        let from = BUCKET * u32::try_from(b).unwrap();
        let to = from + BUCKET;
        let mine = |dead: bool| {
            calls
                .iter()
                .filter(move |c| c.on_dead == dead && c.started >= from && c.started < to)
        };
        let count = |dead: bool| {
            let offered = mine(dead).count();
            let decided = mine(dead).filter(|c| c.error.is_none()).count();
            let node_down = mine(dead)
                .filter(|c| c.error.as_ref().is_some_and(|e| e.1))
                .count();
            (offered, decided, offered - decided, node_down)
        };
        let (h_offered, h_decided, h_errors, _) = count(false);
        let (d_offered, d_decided, d_errors, d_down) = count(true);
        lines.push(format!(
            "{:+6.1} | {h_offered} | {h_decided} | {h_errors} | {d_offered} | {d_decided} | {d_errors} ({d_down})",
            since_kill(from)
        ));
        // Buckets that end before the run does (requests started in the last
        // one may still be running when the table is cut).
        if !in_window(from, to)
            && to <= warmup + after_kill - COMMAND_TIMEOUT
            && (h_decided as f64) < 0.9 * h_offered as f64
        {
            short_buckets.push(format!(
                "{:+.1}s: {h_decided}/{h_offered}",
                since_kill(from)
            ));
        }
    }

    let healthy_errors: Vec<&Call> = calls
        .iter()
        .filter(|c| !c.on_dead && c.error.is_some() && !in_window(c.started, c.ended))
        .collect();
    let known_down = calls
        .iter()
        .filter(|c| c.error.as_ref().is_some_and(|e| e.1))
        .map(|c| c.started)
        .min();
    let mut refused: Vec<Duration> = calls
        .iter()
        .filter(|c| c.on_dead && c.error.as_ref().is_some_and(|e| e.1))
        .map(Call::took)
        .collect();
    refused.sort();
    let slowest = calls.iter().map(Call::took).max().unwrap();
    let last_error = calls
        .iter()
        .filter(|c| c.error.is_some())
        .map(|c| c.ended)
        .max()
        .map(|t| t.saturating_sub(killed_at));
    let pct = |v: &[Duration], p: f64| v.get(((v.len() as f64 - 1.0) * p) as usize).copied();
    // Refusals over 10 ms, grouped by overlapping time: one stall of a
    // worker thread (the OS running something else on the 2 cores) delays
    // every refusal in flight on it at once, and shows as one group.
    let mut slow: Vec<(Duration, Duration)> = calls
        .iter()
        .filter(|c| c.on_dead && c.error.as_ref().is_some_and(|e| e.1))
        .filter(|c| c.took() > Duration::from_millis(10))
        .map(|c| (c.started, c.ended))
        .collect();
    slow.sort();
    let mut stalls: Vec<(Duration, Duration, usize)> = Vec::new();
    for (start, end) in &slow {
        match stalls.last_mut() {
            Some((_, group_end, n)) if start < group_end => {
                *group_end = (*group_end).max(*end);
                *n += 1;
            }
            _ => stalls.push((*start, *end, 1)),
        }
    }
    lines.push(format!(
        "node-down refusals over 10 ms: {} in {} overlapping groups: {:?}",
        slow.len(),
        stalls.len(),
        stalls
            .iter()
            .map(|(s, e, n)| format!(
                "{n} in {:.1}..{:.1} ms",
                s.as_secs_f64() * 1e3,
                e.as_secs_f64() * 1e3
            ))
            .collect::<Vec<_>>()
    ));
    lines.push(format!(
        "{} calls; healthy errors outside the CLUSTERDOWN window: {}; dead master known down {:?} after the kill; node-down refusals: {}, took p50 {:?} p99 {:?} p99.9 {:?} max {:?}; slowest call {slowest:?}; last error {last_error:?} after the kill",
        calls.len(),
        healthy_errors.len(),
        known_down.map(|t| t.saturating_sub(killed_at)),
        refused.len(),
        pct(&refused, 0.5),
        pct(&refused, 0.99),
        pct(&refused, 0.999),
        refused.last(),
    ));
    let mut kinds: std::collections::BTreeMap<(bool, String), (usize, f64, f64)> =
        Default::default();
    for c in calls.iter() {
        if let Some((e, _)) = &c.error {
            // The error without its numbers (slot, durations), so errors
            // group by kind.
            let mut kind = String::new();
            for ch in e.chars() {
                if !ch.is_ascii_digit() {
                    kind.push(ch);
                } else if !kind.ends_with('#') {
                    kind.push('#');
                }
            }
            let entry = kinds
                .entry((c.on_dead, kind))
                .or_insert((0, f64::MAX, f64::MIN));
            entry.0 += 1;
            entry.1 = entry.1.min(since_kill(c.started));
            entry.2 = entry.2.max(since_kill(c.ended));
        }
    }
    for ((on_dead, kind), (n, first, last)) in kinds {
        lines.push(format!(
            "{} slots: {n} x {kind:?}, {first:+.2}s..{last:+.2}s",
            if on_dead { "dead" } else { "healthy" }
        ));
    }
    lines.push(format!("nodes: {:?}", cluster.nodes()));
    report("a_dead_master_does_not_slow_the_healthy_ones", &lines);

    assert!(promoted_after.is_some(), "the replica was never promoted");
    assert!(
        healthy_errors.is_empty(),
        "{} healthy-slot errors outside Redis' CLUSTERDOWN window, first: {:?}",
        healthy_errors.len(),
        healthy_errors
            .first()
            .map(|c| (&c.error, since_kill(c.started)))
    );
    assert!(
        short_buckets.is_empty(),
        "healthy completions under 90% of offered: {short_buckets:?}"
    );
    // A refusal is a few microseconds of work in one poll. What the clock
    // saw beyond that came in one group, right when the node was marked
    // down (17 ms in the run that first reported the groups; 12-28 ms in
    // two that failed a 99.9th-percentile bound; 53 ms when plain
    // connections first wrote without holding, 2026-12-07): the callers
    // that had found the connection gone while a reconnect was under way
    // took the connect lock one after another to learn it had failed,
    // each waiting for the one before to be scheduled. They now wake
    // together (`Node::connection`; traced over this test: the slowest of
    // them 20.8 ms before, the slowest refusal 3.9 ms after). The bound
    // still holds for all but one refusal in a hundred, as the 2 cores
    // also run Docker and six servers, and no refusal may come near the
    // timeout.
    assert!(!refused.is_empty(), "the dead master was never known down");
    let p99 = pct(&refused, 0.99).unwrap();
    assert!(
        p99 <= Duration::from_millis(10),
        "calls for a node known down took up to {p99:?} (99th percentile)"
    );
    let max_refusal = *refused.last().unwrap();
    assert!(
        max_refusal <= COMMAND_TIMEOUT / 5,
        "a call for a node known down took {max_refusal:?}"
    );
    assert!(
        slowest <= COMMAND_TIMEOUT + COMMAND_TIMEOUT / 10,
        "a call took {slowest:?}"
    );
    let last_error = last_error.unwrap_or_default();
    // Promotion alone takes 3.2-4.5 s here; a clean CI run saw the last
    // error 5.03 s after the kill, so recovery is bounded at 6 s.
    assert!(
        last_error <= NODE_TIMEOUT + Duration::from_secs(4),
        "still failing {last_error:?} after the kill"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
