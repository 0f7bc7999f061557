//! The local deny cache against the six-node cluster: every cached denial
//! re-checked against Redis (0 disagreements), costs, multi-limits, counts,
//! and changes made in another process lifting cached denials here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use shardlimit::{Algorithm, Cluster, MultiLimiter, Quota, RateLimiter};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn cached_limiter(
    cluster: &Cluster,
    name: &str,
    algorithm: Algorithm,
    quota: Quota,
) -> RateLimiter {
    RateLimiter::builder(cluster, name, quota)
        .algorithm(algorithm)
        .deny_cache(10_000)
        .build()
        .unwrap()
}

/// Checks `subject` until a denial comes from the cache (the subscription
/// to other processes' invalidations goes live in the background first).
async fn until_cached(l: &RateLimiter, subject: &str, cost: u32) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    loop {
        let d = l.check_n(subject, cost).await.unwrap();
        if d.cached {
            assert!(!d.allowed);
            eprintln!("first cached denial after {:?}", started.elapsed());
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no denial was ever cached: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stats(cluster: &Cluster, kind: &str, name: &str) -> shardlimit::cluster::PrimitiveStats {
    cluster
        .stats()
        .primitives
        .into_iter()
        .find(|p| p.kind == kind && p.name == name)
        .unwrap()
}

/// The proof obligation, tested: a mixed workload over every
/// algorithm (hot and cold subjects, costs 1 to 3, eight tasks), where every
/// denial answered from the cache is at once asked of Redis with a peek of
/// the same cost. Redis admitting it while the cached entry still held —
/// the peek's reply arrived before the entry's end — is a disagreement.
#[tokio::test]
async fn every_cached_denial_agrees_with_redis() {
    let cluster = common::cluster("deny-agree").await;
    let limiters: Vec<RateLimiter> = Algorithm::ALL
        .into_iter()
        .map(|a| cached_limiter(&cluster, "mixed", a, Quota::per_second(nz(5))))
        .collect();
    until_cached(&limiters[0], "warmup", 5).await;
    let checked = Arc::new(AtomicU64::new(0));
    let disagreements = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let limiters = limiters.clone();
        let (checked, disagreements) = (checked.clone(), disagreements.clone());
        tasks.push(tokio::spawn(async move {
            let l = &limiters[t % limiters.len()];
            while Instant::now() < stop {
                let (subject, cost) = {
                    let mut rng = rand::rng();
                    // Two hot subjects take most of the traffic.
                    let n: u32 = if rng.random_bool(0.8) {
                        rng.random_range(0..2)
                    } else {
                        rng.random_range(2..20)
                    };
                    (format!("user:{n}"), rng.random_range(1..=3))
                };
                let d = l.check_n(&subject, cost).await.unwrap();
                if !d.cached {
                    continue;
                }
                let until = Instant::now() + d.retry_after.unwrap();
                let redis = l.peek_n(&subject, cost).await.unwrap();
                if Instant::now() >= until {
                    continue; // the entry ended meanwhile: nothing to compare
                }
                checked.fetch_add(1, Ordering::Relaxed);
                if redis.allowed {
                    disagreements.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "{}: cached denial of {subject} cost {cost}, Redis admits: {redis:?}",
                        l.algorithm()
                    );
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let checked = checked.load(Ordering::Relaxed);
    assert!(
        checked >= 200,
        "only {checked} cached denials were re-checked"
    );
    assert_eq!(disagreements.load(Ordering::Relaxed), 0, "of {checked}");
    for a in Algorithm::ALL {
        let s = stats(&cluster, a.kind(), "mixed");
        assert!(s.denied_cached > 0, "{a}: {s:?}");
    }
    eprintln!("re-checked {checked} cached denials against Redis: 0 disagreements");
}

#[tokio::test]
async fn only_a_cost_at_least_the_denied_one_is_answered_from_the_cache() {
    let cluster = common::cluster("deny-cost").await;
    let l = cached_limiter(&cluster, "cost", Algorithm::Gcra, Quota::per_hour(nz(10)));
    assert!(l.check_n("s", 8).await.unwrap().allowed);
    until_cached(&l, "s", 5).await;
    // Cheaper: asked of Redis, which admits it.
    let d = l.check_n("s", 2).await.unwrap();
    assert!(d.allowed && !d.cached, "{d:?}");
    let d = l.check_n("s", 7).await.unwrap();
    assert!(d.cached && !d.allowed, "{d:?}");
    // retry_after counts down from the denial Redis gave.
    assert!(d.retry_after.unwrap() <= Duration::from_secs(3 * 360));
    let s = stats(&cluster, "gcra", "cost");
    assert!(s.denied_cached >= 2 && s.allowed == 2, "{s:?}");
}

#[tokio::test]
async fn a_cached_denial_takes_the_load_off_redis() {
    let cluster = common::cluster("deny-load").await;
    let l = cached_limiter(
        &cluster,
        "hot",
        Algorithm::SlidingLog,
        Quota::per_hour(nz(1)),
    );
    assert!(l.check("attacker").await.unwrap().allowed);
    until_cached(&l, "attacker", 1).await;
    let before = stats(&cluster, "slog", "hot");
    for _ in 0..1000 {
        let d = l.check("attacker").await.unwrap();
        assert!(d.cached && !d.allowed);
    }
    let after = stats(&cluster, "slog", "hot");
    assert_eq!(after.denied_cached - before.denied_cached, 1000);
    assert_eq!(after.denied, before.denied, "no denial asked Redis");
}

#[tokio::test]
async fn a_multi_limiter_caches_its_denials_too() {
    let cluster = common::cluster("deny-multi").await;
    // Its one-hour fixed window must outlast the test.
    common::clear_of_window_end(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let fast = RateLimiter::builder(&cluster, "m-1s", Quota::per_hour(nz(100)))
        .build()
        .unwrap();
    let slow = RateLimiter::builder(&cluster, "m-1h", Quota::per_hour(nz(1)))
        .algorithm(Algorithm::FixedWindow)
        .build()
        .unwrap();
    let both = MultiLimiter::new([fast.clone(), slow.clone()])
        .unwrap()
        .with_deny_cache(100)
        .unwrap();
    assert!(both.check("s").await.unwrap().allowed);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = both.check("s").await.unwrap();
        assert!(!d.allowed);
        if d.cached() {
            assert!(d.decisions[0].allowed && !d.decisions[1].allowed);
            break;
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A reset of either limit here lifts it at once.
    slow.reset("s").await.unwrap();
    let d = both.check("s").await.unwrap();
    assert!(d.allowed && !d.cached(), "{d:?}");
    assert_eq!(fast.peek("s").await.unwrap().remaining, 98);
}

/// What a process that did not make a change sees: the change is published
/// on the subject's slot and this process's cache forgets the subject, long
/// before the cached denial (an hour) would end.
#[tokio::test]
async fn changes_in_another_process_lift_a_cached_denial_here() {
    let cluster = common::cluster("deny-remote").await;
    for (op, algorithm) in [
        ("reset", Algorithm::Gcra),
        ("reward", Algorithm::FixedWindow),
        ("override", Algorithm::SlidingLog),
        ("unblock", Algorithm::SlidingWindow),
    ] {
        let name = format!("remote-{op}");
        let l = cached_limiter(&cluster, &name, algorithm, Quota::per_hour(nz(1)));
        let subject = format!("user:{op}");
        if op == "unblock" {
            l.block(&subject, Duration::from_secs(3600)).await.unwrap();
        } else {
            assert!(l.check(&subject).await.unwrap().allowed);
        }
        until_cached(&l, &subject, 1).await;
        common::child::child_process(
            "child_adjusts_a_subject",
            &[
                ("NS", cluster.namespace()),
                ("OP", op),
                ("ALGO", algorithm.kind()),
                ("NAME", &name),
                ("SUBJECT", &subject),
            ],
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let d = l.check(&subject).await.unwrap();
            if d.allowed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{op}: still denied 5 s after another process's change: {d:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_zero_sized_cache_is_refused() {
    let cluster = common::cluster("deny-zero").await;
    let built = RateLimiter::builder(&cluster, "z", Quota::per_hour(nz(1)))
        .deny_cache(0)
        .build();
    assert!(matches!(
        built,
        Err(shardlimit::Error::Config {
            field: "deny_cache",
            ..
        })
    ));
}

/// An admin reset (the scanner's, which `shardlimit reset` and the Limits
/// page use) through another handle publishes too.
#[tokio::test]
async fn an_admin_reset_elsewhere_lifts_a_cached_denial() {
    let cluster = common::cluster("deny-admin").await;
    let l = cached_limiter(
        &cluster,
        "admin",
        Algorithm::FixedWindow,
        Quota::per_hour(nz(1)),
    );
    assert!(l.check("user:1").await.unwrap().allowed);
    until_cached(&l, "user:1", 1).await;
    let there = Cluster::builder(common::node_urls())
        .namespace(cluster.namespace())
        .build()
        .await
        .unwrap();
    let scanner = shardlimit::admin::Scanner::new(&there);
    let plan = scanner.plan_reset("user:1", None, None).await.unwrap();
    assert_eq!(plan.execute(&scanner, false).await.unwrap(), 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !l.check("user:1").await.unwrap().allowed {
        assert!(
            Instant::now() < deadline,
            "still denied 5 s after the admin reset"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks a multi-limiter on `subject` until a denial comes from the cache.
async fn until_multi_cached(m: &MultiLimiter, subject: &str) -> shardlimit::limit::MultiDecision {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = m.check(subject).await.unwrap();
        if d.cached() {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "no denial was ever cached: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 23, item 9: a shadow limit never denies, so its wait (an hour)
/// never sets the multi-limit's `retry_after`, nor the cached entry's end:
/// only the enforcing limit that denied does (2 s).
#[tokio::test]
async fn a_shadow_limit_does_not_set_a_multi_limits_wait() {
    let cluster = common::cluster("deny-shadow-multi").await;
    let warm = cached_limiter(&cluster, "warm", Algorithm::Gcra, Quota::per_hour(nz(1)));
    until_cached(&warm, "warmup", 1).await;
    let shadow = RateLimiter::builder(&cluster, "sh-1h", Quota::per_hour(nz(1)))
        .shadow(true)
        .build()
        .unwrap();
    let enforcing = RateLimiter::builder(
        &cluster,
        "en-2s",
        Quota::with_period(nz(1), Duration::from_secs(2)),
    )
    .algorithm(Algorithm::SlidingLog)
    .build()
    .unwrap();
    let both = MultiLimiter::new([shadow, enforcing])
        .unwrap()
        .with_deny_cache(100)
        .unwrap();
    assert!(both.check("s").await.unwrap().allowed);
    let denied = both.check("s").await.unwrap();
    assert!(!denied.allowed && !denied.cached(), "{denied:?}");
    assert!(denied.decisions[0].allowed && denied.decisions[0].would_deny);
    let wait = denied.retry_after().unwrap();
    assert!(wait <= Duration::from_secs(2), "{denied:?}");
    assert_eq!(denied.binding().retry_after, Some(wait));
    let cached = until_multi_cached(&both, "s").await;
    let sent = Instant::now();
    let left = cached.retry_after().unwrap();
    assert!(left <= Duration::from_secs(2), "{cached:?}");
    // Once the enforcing limit admits again, so does the check: the entry
    // ended with the enforcing limit's wait, not the shadow limit's hour.
    tokio::time::sleep(left + Duration::from_millis(100)).await;
    let after = both.check("s").await.unwrap();
    assert!(
        after.allowed && !after.cached(),
        "{:?} later: {after:?}",
        sent.elapsed()
    );
}

/// Issue 23, item 10: shadow mode never denies, so `set_shadow(true)`
/// stops cached denials at once, for the limiter and for a multi-limiter
/// holding it.
#[tokio::test]
async fn set_shadow_stops_cached_denials_at_once() {
    let cluster = common::cluster("deny-set-shadow").await;
    // Its one-hour fixed windows must outlast the test.
    common::clear_of_window_end(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let l = cached_limiter(
        &cluster,
        "to-shadow",
        Algorithm::Gcra,
        Quota::per_hour(nz(1)),
    );
    assert!(l.check("s").await.unwrap().allowed);
    until_cached(&l, "s", 1).await;
    l.set_shadow(true);
    let d = l.check("s").await.unwrap();
    assert!(d.allowed && d.would_deny && !d.cached, "{d:?}");

    let one = RateLimiter::builder(&cluster, "m-to-shadow", Quota::per_hour(nz(1)))
        .algorithm(Algorithm::FixedWindow)
        .build()
        .unwrap();
    let other = RateLimiter::builder(&cluster, "m-other", Quota::per_hour(nz(100)))
        .build()
        .unwrap();
    let both = MultiLimiter::new([one.clone(), other])
        .unwrap()
        .with_deny_cache(100)
        .unwrap();
    assert!(both.check("s").await.unwrap().allowed);
    let cached = until_multi_cached(&both, "s").await;
    assert!(!cached.allowed);
    one.set_shadow(true);
    let d = both.check("s").await.unwrap();
    assert!(d.allowed && !d.cached() && d.would_deny(), "{d:?}");
    // Back to enforcing: Redis denies again (nothing was consumed by it).
    one.set_shadow(false);
    let d = both.check("s").await.unwrap();
    assert!(!d.allowed, "{d:?}");
}

/// Issue 23, item 8: an override's expiry is announced by no one, so it
/// bounds a denial cached under it: once the override (1/hour, 3 s TTL) is
/// gone, the check asks Redis again, which admits under the default quota
/// (100/min), instead of answering from the cache for the rest of the hour.
#[tokio::test]
async fn an_expiring_override_ends_a_cached_denial() {
    let cluster = common::cluster("deny-override-ttl").await;
    // Its one-hour fixed window must outlast the test.
    common::clear_of_window_end(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let l = cached_limiter(
        &cluster,
        "ovr-ttl",
        Algorithm::FixedWindow,
        Quota::per_minute(nz(100)),
    );
    until_cached(&l, "warmup", 100).await;
    let set = Instant::now();
    l.set_override("s", Quota::per_hour(nz(1)), Duration::from_secs(3))
        .await
        .unwrap();
    assert!(l.check("s").await.unwrap().allowed);
    until_cached(&l, "s", 1).await;
    let d = l.check("s").await.unwrap();
    assert!(d.cached && d.overridden, "{d:?}");
    tokio::time::sleep(
        (set + Duration::from_millis(3500)).saturating_duration_since(Instant::now()),
    )
    .await;
    let peek = l.peek("s").await.unwrap();
    assert!(peek.allowed && !peek.overridden, "{peek:?}");
    let d = l.check("s").await.unwrap();
    assert!(d.allowed && !d.cached && !d.overridden, "{d:?}");
}

/// The re-check of every cached denial against Redis (as in
/// `every_cached_denial_agrees_with_redis`), through what can end or forbid
/// a denial without the usual announcement (issue 23, items 8 to 10): an
/// override (1/min) that keeps expiring after 400 ms and being set again a
/// second later, a multi-limit holding a shadow limit, and a limiter
/// switched in and out of shadow mode every 250 ms (a cached denial while
/// it is in shadow mode is a disagreement by itself).
#[tokio::test]
async fn every_cached_denial_agrees_through_expiring_overrides_and_shadow_mode() {
    let cluster = common::cluster("deny-agree-more").await;
    let overridden = cached_limiter(
        &cluster,
        "agree-ovr",
        Algorithm::FixedWindow,
        Quota::per_second(nz(5)),
    );
    let toggled = cached_limiter(
        &cluster,
        "agree-toggle",
        Algorithm::Gcra,
        Quota::per_second(nz(5)),
    );
    let shadow = RateLimiter::builder(&cluster, "agree-sh", Quota::per_second(nz(1)))
        .shadow(true)
        .build()
        .unwrap();
    let enforcing = RateLimiter::builder(&cluster, "agree-en", Quota::per_second(nz(5)))
        .algorithm(Algorithm::SlidingWindow)
        .build()
        .unwrap();
    let multi = MultiLimiter::new([shadow, enforcing])
        .unwrap()
        .with_deny_cache(10_000)
        .unwrap();
    until_cached(&overridden, "warmup", 5).await;
    let stop = Instant::now() + Duration::from_secs(5);
    // Odd while a change (overrides set, shadow mode switched) is under
    // way; a comparison counts only if no change happened from the check
    // to the peek: a change made meanwhile is not the cache's to know.
    let switches = Arc::new(AtomicU64::new(0));
    let background = {
        let (toggled, overridden, switches) =
            (toggled.clone(), overridden.clone(), switches.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            while Instant::now() < stop {
                if n % 4 == 0 {
                    switches.fetch_add(1, Ordering::SeqCst);
                    for i in 0..2 {
                        let quota = Quota::per_minute(nz(1));
                        overridden
                            .set_override(format!("user:{i}"), quota, Duration::from_millis(400))
                            .await
                            .unwrap();
                    }
                    switches.fetch_add(1, Ordering::SeqCst);
                }
                switches.fetch_add(1, Ordering::SeqCst);
                toggled.set_shadow(!toggled.is_shadow());
                switches.fetch_add(1, Ordering::SeqCst);
                n += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    // Re-checked denials per kind: overridden, toggled, multi.
    let checked: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let disagreements = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..6 {
        let (overridden, toggled, multi) = (overridden.clone(), toggled.clone(), multi.clone());
        let (checked, disagreements, switches) =
            (checked.clone(), disagreements.clone(), switches.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            while Instant::now() < stop {
                n += 1;
                let subject = format!("user:{}", n % 3);
                let before = switches.load(Ordering::SeqCst);
                // What was answered from the cache and when its entry ends,
                // then what Redis says now (a peek), and when.
                let (until, admitted, what) = match t % 3 {
                    0 | 1 => {
                        let l = if t % 3 == 0 { &overridden } else { &toggled };
                        let d = l.check(&subject).await.unwrap();
                        if !d.cached {
                            continue;
                        }
                        let until = Instant::now() + d.retry_after.unwrap();
                        (until, l.peek(&subject).await.unwrap().allowed, l.name().to_owned())
                    }
                    _ => {
                        let d = multi.check(&subject).await.unwrap();
                        if !d.cached() {
                            continue;
                        }
                        let until = Instant::now() + d.retry_after().unwrap();
                        (until, multi.peek(&subject).await.unwrap().allowed, "multi".into())
                    }
                };
                let after = switches.load(Ordering::SeqCst);
                if Instant::now() >= until || (t % 3 != 2 && (before != after || before % 2 == 1)) {
                    continue; // nothing to compare
                }
                checked[t % 3].fetch_add(1, Ordering::Relaxed);
                let shadowed = t % 3 == 1 && toggled.is_shadow();
                if admitted || shadowed {
                    disagreements.fetch_add(1, Ordering::Relaxed);
                    eprintln!("{what}: cached denial of {subject}; Redis admits: {admitted}, shadow mode: {shadowed}");
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    background.await.unwrap();
    let checked = checked.each_ref().map(|c| c.load(Ordering::Relaxed));
    assert!(
        checked.iter().all(|&c| c >= 20),
        "too few cached denials re-checked (overridden, toggled, multi): {checked:?}"
    );
    assert_eq!(disagreements.load(Ordering::Relaxed), 0, "of {checked:?}");
    eprintln!(
        "re-checked {checked:?} cached denials (overridden, toggled, multi) against Redis: \
         0 disagreements"
    );
}

#[tokio::test]
async fn a_batch_is_answered_from_the_deny_cache_where_it_can() {
    let cluster = common::cluster("many-cache").await;
    let l = RateLimiter::builder(&cluster, "cached", Quota::per_hour(nz(1)))
        .deny_cache(1000)
        .build()
        .unwrap();
    let batch: Vec<(String, u32)> = (0..50).map(|i| (format!("bot:{i}"), 1)).collect();
    for d in l.check_many(&batch).await {
        assert!(d.expect("first batch").allowed);
    }
    // Denied by Redis (and cached once the subscription is live), then
    // from the cache.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let results = l.check_many(&batch).await;
        let decisions: Vec<_> = results
            .into_iter()
            .map(|r| r.expect("later batch"))
            .collect();
        assert!(decisions.iter().all(|d| !d.allowed));
        if decisions.iter().all(|d| d.cached) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the batch was never answered from the cache"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = cluster.stats().get("gcra", "cached").cloned().unwrap();
    assert!(s.denied_cached >= 50, "{s:?}");
}

#[tokio::test]
async fn a_limiter_alone_as_a_multi_limiter_shares_its_deny_cache() {
    let cluster = common::cluster("many-one").await;
    let l = RateLimiter::builder(&cluster, "one", Quota::per_hour(nz(1)))
        .deny_cache(100)
        .build()
        .unwrap();
    let alone = MultiLimiter::from(l.clone());
    assert!(l.check("bot").await.unwrap().allowed);
    // Denied by Redis, then cached once the subscription is live.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !l.check("bot").await.unwrap().cached {
        assert!(Instant::now() < deadline, "never answered from the cache");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The multi-limiter of one answers from the limiter's cache, with the
    // same script: what it sends is what the limiter sends.
    let d = alone.check("bot").await.unwrap();
    assert!(!d.allowed && d.cached(), "{d:?}");
    let (one, many) = (
        l.invocation("bot", 1).unwrap(),
        alone.invocation("bot", 1).unwrap(),
    );
    assert_eq!(one.script.name(), many.script.name());
    assert_eq!(one.args, many.args);
    // A reset through either forgets it for both.
    l.reset("bot").await.unwrap();
    assert!(alone.check("bot").await.unwrap().allowed);
}
