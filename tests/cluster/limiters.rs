//! Rate limiters against the six-node cluster. The shared behaviour suite at
//! the top runs every assertion for every algorithm; algorithm-specific
//! behaviour (the boundary burst) follows.
//!
//! Timing tolerance: Redis keeps time in microseconds but expires keys at
//! millisecond resolution, and tokio's timer wakes within about a
//! millisecond; on a loaded 2-core machine a sleeping task can also wake a
//! little late. Waits "long enough" therefore add `SLACK` (20 ms), and waits
//! "too short" stop at least 100 ms early.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardlimit::{
    Algorithm, Cluster, Error, FailurePolicy, MultiLimiter, Quota, RateLimiter, limit::Invocation,
    policy::BypassReason,
};

const SLACK: Duration = Duration::from_millis(20);

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn limiter(cluster: &Cluster, algorithm: Algorithm, quota: Quota) -> RateLimiter {
    RateLimiter::builder(cluster, format!("t-{}", algorithm.kind()), quota)
        .algorithm(algorithm)
        .build()
        .unwrap()
}

fn window_index(period: Duration) -> u128 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    now.as_micros() / period.as_micros()
}

/// Runs `body` until it completes within one clock-aligned window of
/// `period` (at most 3 tries): a window boundary during a test legitimately
/// resets fixed and sliding windows. The test machine and the containers
/// share one clock.
async fn within_one_window<F, Fut>(period: Duration, mut body: F)
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for attempt in 0..3 {
        let before = window_index(period);
        body(attempt).await;
        if window_index(period) == before {
            return;
        }
    }
    panic!("three attempts straddled a window boundary");
}

// ---- the shared behaviour suite --------------------------------------------

/// 64 tasks hammer one subject: exactly the limit is admitted.
async fn exact_under_contention(algorithm: Algorithm) {
    let cluster = common::cluster("exact").await;
    let quota = Quota::per_hour(nz(100));
    let l = limiter(&cluster, algorithm, quota);
    within_one_window(quota.period(), |attempt| {
        let l = l.clone();
        async move {
            let subject = format!("hot-{attempt}");
            let admitted = Arc::new(AtomicU32::new(0));
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (l, subject, admitted) = (l.clone(), subject.clone(), admitted.clone());
                    tokio::spawn(async move {
                        for _ in 0..5 {
                            if l.check(&subject).await.unwrap().allowed {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            // 320 requests against a limit of 100 in one window. For the
            // sliding window counter this is exact too: in a subject's first
            // window there is no previous window to estimate.
            assert_eq!(admitted.load(Ordering::Relaxed), 100, "{algorithm}");
        }
    })
    .await;
    let stats = cluster.stats();
    let s = stats.get(algorithm.kind(), l.name()).unwrap();
    assert!(s.allowed >= 100 && s.denied >= 220, "{s:?}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Cost 7 against a limit of 100 admits 14 (98 units), then only what fits.
async fn weighted_costs(algorithm: Algorithm) {
    let cluster = common::cluster("weighted").await;
    let quota = Quota::per_hour(nz(100));
    let l = limiter(&cluster, algorithm, quota);
    within_one_window(quota.period(), |attempt| {
        let l = l.clone();
        async move {
            let s = format!("w-{attempt}");
            let mut admitted = 0;
            for _ in 0..20 {
                if l.check_n(&s, 7).await.unwrap().allowed {
                    admitted += 1;
                }
            }
            assert_eq!(admitted, 14, "{algorithm}");
            let d = l.check_n(&s, 2).await.unwrap();
            assert!(d.allowed && d.remaining == 0, "{algorithm}: {d:?}");
            assert!(!l.check(&s).await.unwrap().allowed, "{algorithm}");
        }
    })
    .await;
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Denied requests and peeks write nothing: the stored value is
/// byte-for-byte the same.
async fn rejected_and_peeked_requests_consume_nothing(algorithm: Algorithm) {
    let cluster = common::cluster("noconsume").await;
    let quota = Quota::per_hour(nz(10));
    let l = limiter(&cluster, algorithm, quota);
    within_one_window(quota.period(), |attempt| {
        let l = l.clone();
        async move {
            let s = format!("nc-{attempt}");
            let key = l.key(&s).unwrap();
            for _ in 0..5 {
                let d = l.peek(&s).await.unwrap();
                assert!(d.allowed && d.remaining == 10, "{algorithm}: {d:?}");
            }
            assert_eq!(
                common::dump(&key).await,
                None,
                "{algorithm}: peek created the key"
            );

            assert!(l.check_n(&s, 6).await.unwrap().allowed);
            let before = common::dump(&key).await.unwrap();
            for cost in [5, 10, 7, 5] {
                let d = l.check_n(&s, cost).await.unwrap();
                assert!(!d.allowed, "{algorithm}: cost {cost}");
                assert_eq!(d.remaining, 4, "{algorithm}");
            }
            let p = l.peek_n(&s, 4).await.unwrap();
            assert!(p.allowed && p.remaining == 4, "{algorithm}: {p:?}");
            assert_eq!(
                common::dump(&key).await.unwrap(),
                before,
                "{algorithm}: a rejection wrote"
            );
            assert!(
                l.check_n(&s, 4).await.unwrap().allowed,
                "the 4 units are still there"
            );
        }
    })
    .await;
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// `reset` clears one subject of one limiter, nothing else.
async fn reset_clears_only_that_subject(algorithm: Algorithm) {
    let cluster = common::cluster("reset").await;
    let quota = Quota::per_hour(nz(3));
    let l = limiter(&cluster, algorithm, quota);
    let other = RateLimiter::builder(&cluster, "other", quota)
        .algorithm(algorithm)
        .build()
        .unwrap();
    within_one_window(quota.period(), |attempt| {
        let (l, other) = (l.clone(), other.clone());
        async move {
            let (a, b) = (format!("a-{attempt}"), format!("b-{attempt}"));
            for limiter in [&l, &other] {
                for s in [&a, &b] {
                    assert!(limiter.check_n(s, 3).await.unwrap().allowed);
                }
            }
            l.reset(&a).await.unwrap();
            assert!(
                l.check_n(&a, 3).await.unwrap().allowed,
                "{algorithm}: a was reset"
            );
            assert!(
                !l.check(&b).await.unwrap().allowed,
                "{algorithm}: b untouched"
            );
            assert!(
                !other.check(&a).await.unwrap().allowed,
                "{algorithm}: other limiter untouched"
            );
        }
    })
    .await;
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// After a denial, waiting `retry_after` gets the request in; waiting
/// clearly less does not.
async fn retry_after_is_honest(algorithm: Algorithm) {
    let cluster = common::cluster("retry").await;
    // 2 per second: GCRA's next unit comes 500 ms after exhaustion.
    let l = limiter(&cluster, algorithm, Quota::per_second(nz(2)));
    for round in 0..20 {
        let s = format!("r-{round}");
        assert!(l.check_n(&s, 2).await.unwrap().allowed);
        let denied = l.check(&s).await.unwrap();
        assert!(!denied.allowed, "{algorithm}");
        let retry = denied.retry_after.unwrap();
        assert!(retry <= Duration::from_secs(2), "{algorithm}: {retry:?}");
        if retry < Duration::from_millis(250) {
            // Too close to a window boundary to wait "clearly less"; the
            // fixed window in particular. Try again in a fresh window.
            tokio::time::sleep(retry + SLACK).await;
            continue;
        }
        tokio::time::sleep(retry / 2).await;
        let early = l.check(&s).await.unwrap();
        assert!(
            !early.allowed,
            "{algorithm}: admitted after {:?} of {retry:?}",
            retry / 2
        );
        let rest = early.retry_after.unwrap();
        assert!(
            rest < retry,
            "{algorithm}: the wait shrinks ({rest:?} < {retry:?})"
        );
        tokio::time::sleep(rest + SLACK).await;
        let d = l.check(&s).await.unwrap();
        assert!(
            d.allowed,
            "{algorithm}: denied after waiting retry_after: {d:?}"
        );
        common::assert_every_key_has_ttl(cluster.namespace()).await;
        return;
    }
    panic!("{algorithm}: never got a long enough retry_after");
}

/// Keys carry a TTL no longer than the state needs and vanish on their own.
async fn keys_expire_with_their_state(algorithm: Algorithm) {
    let cluster = common::cluster("ttl").await;
    let l = limiter(&cluster, algorithm, Quota::per_second(nz(10)));
    let key = l.key("t").unwrap();
    assert!(l.check_n("t", 4).await.unwrap().allowed);
    let pttl = common::pttl(&key).await;
    // The sliding window counter keeps the previous window too.
    let bound = if algorithm == Algorithm::SlidingWindow {
        2000
    } else {
        1000
    };
    assert!(pttl > 0 && pttl <= bound, "{algorithm}: PTTL {pttl}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
    tokio::time::sleep(Duration::from_millis(u64::try_from(pttl).unwrap()) + SLACK).await;
    assert_eq!(
        common::pttl(&key).await,
        -2,
        "{algorithm}: key outlived its state"
    );
}

/// `until_ready` waits for admission within its budget and gives up at once
/// when the budget is too small.
async fn until_ready_waits_within_its_budget(algorithm: Algorithm) {
    let cluster = common::cluster("ready").await;
    let l = limiter(&cluster, algorithm, Quota::per_second(nz(2)));
    assert!(l.check_n("u", 2).await.unwrap().allowed);
    let quick = l
        .until_ready("u", 1, Duration::from_millis(1))
        .await
        .unwrap();
    assert!(!quick.allowed, "{algorithm}");
    let started = std::time::Instant::now();
    let d = l.until_ready("u", 1, Duration::from_secs(3)).await.unwrap();
    assert!(d.allowed, "{algorithm}: {d:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "{algorithm}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// `more_after` (the HTTP `RateLimit`'s `t`) is when more than `remaining`
/// is free: a request of one unit more is denied before it and admitted
/// after it (3 per 600 ms: GCRA frees a unit every 200 ms, a sliding log
/// when its oldest entry leaves, a fixed window at its end, the counter
/// when its estimate has fallen by a unit).
async fn more_after_is_when_more_is_free(algorithm: Algorithm) {
    let cluster = common::cluster("more").await;
    let quota = Quota::with_period(nz(3), Duration::from_millis(600));
    let l = limiter(&cluster, algorithm, quota);
    for attempt in 0..3 {
        let s = format!("m-{attempt}");
        let started = std::time::Instant::now();
        assert!(l.check(&s).await.unwrap().allowed, "{algorithm}");
        let d = l.check(&s).await.unwrap();
        if d.remaining != 1 {
            // A fixed window began between the two checks: again.
            continue;
        }
        assert!(d.allowed, "{algorithm}: {d:?}");
        assert!(
            d.more_after > Duration::ZERO && d.more_after <= d.reset_after,
            "{algorithm}: {d:?}"
        );
        if algorithm == Algorithm::Gcra {
            assert!(d.more_after <= Duration::from_millis(200), "{d:?}");
        }
        let early = l.peek_n(&s, 2).await.unwrap();
        if started.elapsed() + Duration::from_millis(5) < d.more_after {
            assert!(!early.allowed, "{algorithm}: {early:?} before {d:?}");
        }
        tokio::time::sleep(d.more_after + SLACK).await;
        let later = l.peek_n(&s, 2).await.unwrap();
        assert!(later.allowed, "{algorithm}: {later:?} after {d:?}");
        common::assert_every_key_has_ttl(cluster.namespace()).await;
        return;
    }
    panic!("{algorithm}: a window began between two checks three times");
}

macro_rules! behaviour_suite {
    ($($module:ident => $algorithm:expr),* $(,)?) => {$(
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn exact_under_contention() {
                super::exact_under_contention($algorithm).await;
            }

            #[tokio::test]
            async fn more_after_is_when_more_is_free() {
                super::more_after_is_when_more_is_free($algorithm).await;
            }

            #[tokio::test]
            async fn weighted_costs() {
                super::weighted_costs($algorithm).await;
            }

            #[tokio::test]
            async fn rejected_and_peeked_requests_consume_nothing() {
                super::rejected_and_peeked_requests_consume_nothing($algorithm).await;
            }

            #[tokio::test]
            async fn reset_clears_only_that_subject() {
                super::reset_clears_only_that_subject($algorithm).await;
            }

            #[tokio::test]
            async fn retry_after_is_honest() {
                super::retry_after_is_honest($algorithm).await;
            }

            #[tokio::test]
            async fn keys_expire_with_their_state() {
                super::keys_expire_with_their_state($algorithm).await;
            }

            #[tokio::test]
            async fn until_ready_waits_within_its_budget() {
                super::until_ready_waits_within_its_budget($algorithm).await;
            }
        }
    )*};
}

behaviour_suite! {
    fixed_window => Algorithm::FixedWindow,
    sliding_log => Algorithm::SlidingLog,
    sliding_window => Algorithm::SlidingWindow,
    gcra => Algorithm::Gcra,
}

// ---- the boundary burst -------------------------------------------------------

/// 60 requests just before a window boundary and 60 just after, against 60
/// per 2 s (the seed's "60 per minute", scaled down so the test is short).
async fn boundary_burst(algorithm: Algorithm) -> u32 {
    let cluster = common::cluster("boundary").await;
    let period = Duration::from_secs(2);
    let l = limiter(&cluster, algorithm, Quota::with_period(nz(60), period));
    let period_us = period.as_micros();
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let to_boundary = period_us - now_us % period_us;
    // Start the first burst 200 ms before the boundary (skip to the next
    // boundary if that moment has passed).
    let lead = if to_boundary > 250_000 {
        to_boundary
    } else {
        to_boundary + period_us
    };
    tokio::time::sleep(Duration::from_micros(
        u64::try_from(lead - 200_000).unwrap(),
    ))
    .await;
    let burst = || async {
        let checks = (0..60).map(|_| l.check("client"));
        futures::future::join_all(checks)
            .await
            .into_iter()
            .filter(|d| d.as_ref().unwrap().allowed)
            .count()
    };
    let first = burst().await;
    tokio::time::sleep(Duration::from_millis(250)).await; // now ~50 ms past the boundary
    let second = burst().await;
    common::assert_every_key_has_ttl(cluster.namespace()).await;
    u32::try_from(first + second).unwrap()
}

#[tokio::test]
async fn fixed_window_admits_twice_the_limit_across_a_boundary() {
    assert_eq!(boundary_burst(Algorithm::FixedWindow).await, 120);
}

#[tokio::test]
async fn sliding_log_never_admits_more_than_the_limit_in_a_window() {
    // Both bursts fall within ~300 ms, far inside one sliding 2 s window.
    assert_eq!(boundary_burst(Algorithm::SlidingLog).await, 60);
}

#[tokio::test]
async fn gcra_admits_the_burst_plus_what_refilled() {
    // 60 at once, then ~250 ms later at most 30/s × 0.3 s (+1 for rounding).
    let admitted = boundary_burst(Algorithm::Gcra).await;
    assert!((60..=70).contains(&admitted), "{admitted}");
}

#[tokio::test]
async fn sliding_window_counter_stays_within_its_bound() {
    // Just after the boundary the previous window weighs ~97%: only a few
    // more fit. The documented worst case is 2x the limit.
    let admitted = boundary_burst(Algorithm::SlidingWindow).await;
    assert!((60..=70).contains(&admitted), "{admitted}");
}

// ---- multi-limit ------------------------------------------------------------

#[tokio::test]
async fn multi_limit_is_all_or_nothing() {
    let cluster = common::cluster("multi").await;
    let wide = RateLimiter::builder(&cluster, "wide", Quota::per_hour(nz(10)))
        .algorithm(Algorithm::SlidingLog)
        .build()
        .unwrap();
    let narrow = RateLimiter::builder(&cluster, "narrow", Quota::per_hour(nz(3)))
        .algorithm(Algorithm::Gcra)
        .build()
        .unwrap();
    let both = MultiLimiter::new([wide.clone(), narrow.clone()]).unwrap();
    for i in 0..3 {
        let d = both.check("k").await.unwrap();
        assert!(d.allowed, "{i}");
        assert_eq!(d.decisions[1].remaining, 2 - i);
    }
    for _ in 0..5 {
        let d = both.check("k").await.unwrap();
        assert!(!d.allowed);
        assert!(d.decisions[0].allowed && !d.decisions[1].allowed);
        assert_eq!(d.binding().limit, 3);
        assert!(d.retry_after().is_some());
    }
    // The wide limit consumed only the three admitted requests.
    assert_eq!(wide.peek("k").await.unwrap().remaining, 7);
    // And a request the wide limit denies consumes nothing from the narrow.
    assert!(wide.check_n("j", 10).await.unwrap().allowed);
    assert!(!both.check("j").await.unwrap().allowed);
    assert_eq!(narrow.peek("j").await.unwrap().remaining, 3);
    assert!(matches!(
        MultiLimiter::new(Vec::<RateLimiter>::new()),
        Err(Error::Config { .. })
    ));
    assert!(matches!(
        MultiLimiter::new([wide.clone(), wide.clone()]),
        Err(Error::Config { .. })
    ));
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

// ---- failure policy ----------------------------------------------------------

#[tokio::test]
async fn unreachable_cluster_fails_open_or_closed_as_configured() {
    // Nothing listens on port 1; the lazily built handle never connects.
    let cluster = common::unreachable_cluster().await;
    let quota = Quota::per_second(nz(1));
    let (open, closed) = common::open_and_closed(&cluster, quota);
    for _ in 0..5 {
        let d = open.check("s").await.unwrap();
        assert!(d.allowed);
        assert!(matches!(
            d.bypassed,
            Some(BypassReason::Connection | BypassReason::Timeout)
        ));
        let err = closed.check("s").await.unwrap_err();
        assert!(err.is_transient(), "{err}");
    }
    let stats = cluster.stats();
    let open_stats = stats.get("gcra", "open").unwrap();
    assert_eq!(
        (open_stats.bypassed, open_stats.errors, open_stats.allowed),
        (5, 0, 0)
    );
    let closed_stats = stats.get("gcra", "closed").unwrap();
    assert_eq!((closed_stats.bypassed, closed_stats.errors), (0, 5));
    // Bad input is an error even under fail-open, and nothing is sent.
    assert!(matches!(
        open.check_n("s", 2).await,
        Err(Error::InvalidCost { cost: 2, max: 1 })
    ));
    assert!(matches!(open.check("").await, Err(Error::EmptySubject)));
}

#[tokio::test]
async fn a_key_of_the_wrong_type_is_an_error_even_when_failing_open() {
    let cluster = common::cluster("wrongtype").await;
    for algorithm in Algorithm::ALL {
        let l = RateLimiter::builder(&cluster, "planted", Quota::per_second(nz(5)))
            .algorithm(algorithm)
            .failure_policy(FailurePolicy::FailOpen)
            .build()
            .unwrap();
        let key = l.key("victim").unwrap();
        // A set is the wrong type for every algorithm's state.
        let _: i64 = common::on_owner(&key, redis::cmd("SADD").arg(&key).arg("x")).await;
        let _: i64 = common::on_owner(&key, redis::cmd("PEXPIRE").arg(&key).arg(60_000)).await;
        let err = l.check("victim").await.unwrap_err();
        assert!(!err.is_transient(), "{algorithm}: {err}");
        assert!(err.to_string().contains("WRONGTYPE"), "{algorithm}: {err}");
        let s = cluster.stats();
        let s = s.get(algorithm.kind(), "planted").unwrap();
        assert_eq!((s.bypassed, s.errors), (0, 1), "{algorithm}");
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Every `(quota, algorithm, field)` is refused when built, with a
/// `Config` error naming `field` and saying why.
fn refuse_quotas<const N: usize>(cluster: &Cluster, bad: [(Quota, Algorithm, &str); N]) {
    for (quota, algorithm, field) in bad {
        match RateLimiter::builder(cluster, "x", quota)
            .algorithm(algorithm)
            .build()
        {
            Err(Error::Config { field: f, reason }) => {
                assert_eq!(f, field, "{reason}");
                assert!(!reason.is_empty());
            }
            other => panic!("{quota:?} {algorithm}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn bad_quotas_and_costs_are_refused_before_sending() {
    let cluster = common::cluster("badquota").await;
    refuse_quotas(
        &cluster,
        [
            (
                Quota::with_period(nz(1), Duration::ZERO),
                Algorithm::Gcra,
                "quota.period",
            ),
            (
                Quota::with_period(nz(1), Duration::from_micros(1500)),
                Algorithm::FixedWindow,
                "quota.period",
            ),
            (
                Quota::per_second(nz(5)).allow_burst(nz(10)),
                Algorithm::SlidingLog,
                "quota.burst",
            ),
        ],
    );
    assert!(matches!(
        RateLimiter::builder(&cluster, "bad name", Quota::per_second(nz(1))).build(),
        Err(Error::InvalidIdent { field: "name", .. })
    ));
    let gcra = RateLimiter::builder(
        &cluster,
        "burst",
        Quota::per_second(nz(5)).allow_burst(nz(8)),
    )
    .build()
    .unwrap();
    assert_eq!(gcra.capacity(), 8);
    assert!(gcra.check_n("s", 8).await.unwrap().allowed);
    assert!(matches!(
        gcra.check_n("s", 9).await,
        Err(Error::InvalidCost { cost: 9, max: 8 })
    ));
    assert!(matches!(
        gcra.check_n("s", 0).await,
        Err(Error::InvalidCost { cost: 0, .. })
    ));
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn invocation_is_exactly_what_a_check_sends() {
    let cluster = common::cluster("invocation").await;
    let l = RateLimiter::builder(&cluster, "inv", Quota::per_hour(nz(3)))
        .build()
        .unwrap();
    let invocation = l.invocation("s", 2).unwrap();
    // The state key, then the subject's override and block of the limit.
    let state = l.key("s").unwrap();
    let part = |p: &str| [state.clone(), format!(":{p}").into_bytes()].concat();
    assert_eq!(
        invocation.keys.keys(),
        [state.clone(), part("quota"), part("block")]
    );
    // Run it through a bare redis-rs connection: same effect as check_n(2).
    let reply: Vec<i64> = run_bare(invocation.script.code(), &invocation)
        .await
        .unwrap();
    // The compact reply of a subject with no override and no block:
    // { 2 * all_allowed + allowed, remaining, retry_after_us, reset_after_us },
    // the retry slot of an admission holding when more than `remaining` is
    // free: one unit, 20 minutes.
    assert_eq!(
        reply,
        [3, 1, 3_600_000_000 / 3, 3_600_000_000 * 2 / 3],
        "admitted, remaining 1"
    );
    assert_eq!(l.peek("s").await.unwrap().remaining, 1);
    assert!(matches!(
        l.invocation("s", 4),
        Err(Error::InvalidCost { cost: 4, max: 3 })
    ));
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Runs `code` with `invocation`'s keys and arguments through a bare redis-rs
/// cluster connection (not through the library under test).
async fn run_bare(code: &str, invocation: &Invocation) -> redis::RedisResult<Vec<i64>> {
    let mut bare = redis::cluster::ClusterClient::new(common::node_urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let script = redis::Script::new(code);
    let mut call = script.prepare_invoke();
    for key in invocation.keys.keys() {
        call.key(key);
    }
    for arg in &invocation.args {
        call.arg(arg);
    }
    call.invoke_async(&mut bare).await
}

/// The server's clock in microseconds, asked of the master owning `key`.
async fn server_micros(key: &[u8]) -> u64 {
    let (secs, micros): (u64, u64) = common::on_owner(key, &mut redis::cmd("TIME")).await;
    secs * 1_000_000 + micros
}

// ---- safety bounds (issue 12) -----------------------------------------------

/// A quota whose numbers could leave a double's exact integer range (2^53)
/// in any script is refused when built: GCRA's TAT with a huge burst over a
/// long period once wrapped negative and admitted everything.
#[tokio::test]
async fn quotas_that_could_overflow_are_refused_when_built() {
    let cluster = common::cluster("overflow").await;
    let year = Quota::MAX_PERIOD;
    // TAT 4e9 years ahead: it wrapped past 2^63 us. Then a full bucket that
    // takes two years to refill, and a sliding log over its maximum.
    refuse_quotas(
        &cluster,
        [
            (
                Quota::with_period(nz(1), year).allow_burst(nz(u32::MAX)),
                Algorithm::Gcra,
                "quota.burst",
            ),
            (
                Quota::with_period(nz(1), year).allow_burst(nz(2)),
                Algorithm::Gcra,
                "quota.burst",
            ),
            (
                Quota::per_hour(nz(Algorithm::SlidingLog.max_limit().get() + 1)),
                Algorithm::SlidingLog,
                "quota.limit",
            ),
        ],
    );
    // The extremes that are allowed work, and their keys expire in time.
    let extremes = [
        (Quota::with_period(nz(1), year), Algorithm::Gcra, u32::MAX),
        (
            Quota::with_period(nz(u32::MAX), year),
            Algorithm::FixedWindow,
            u32::MAX,
        ),
        (
            Quota::with_period(nz(u32::MAX), year),
            Algorithm::SlidingWindow,
            u32::MAX,
        ),
        (
            Quota::with_period(nz(u32::MAX), Duration::from_millis(1)).allow_burst(nz(u32::MAX)),
            Algorithm::Gcra,
            u32::MAX,
        ),
    ];
    for (quota, algorithm, cost) in extremes {
        let l = limiter(&cluster, algorithm, quota);
        let cost = cost.min(l.capacity());
        let d = l.check_n("edge", cost).await.unwrap();
        assert!(d.allowed, "{algorithm} {quota:?}: {d:?}");
        let d = l.check_n("edge", cost).await.unwrap();
        assert!(
            !d.allowed || quota.period() == Duration::from_millis(1),
            "{algorithm} {quota:?}: {d:?}"
        );
        let pttl = common::pttl(&l.key("edge").unwrap()).await;
        let bound = i64::try_from(2 * Quota::MAX_PERIOD.as_millis()).unwrap();
        assert!(
            pttl == -2 || (0..=bound).contains(&pttl),
            "{algorithm}: {pttl}"
        );
        l.reset("edge").await.unwrap();
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// A multi-limit script that fails after computing its decisions writes
/// nothing: the GCRA limit's numbers are out of range (sent by hand, as the
/// builder refuses them) and the fixed window checked before it must stay
/// untouched. Before: the window was consumed, then `SET ... PXAT` failed.
#[tokio::test]
async fn a_failing_multi_limit_script_writes_nothing() {
    let cluster = common::cluster("multifail").await;
    let fw = limiter(&cluster, Algorithm::FixedWindow, Quota::per_hour(nz(10)));
    let gcra = limiter(&cluster, Algorithm::Gcra, Quota::per_hour(nz(1)));
    let both = MultiLimiter::new([fw.clone(), gcra.clone()]).unwrap();
    let mut invocation = both.invocation("s", 1).unwrap();
    // ARGV: cost, mode, then 5 per limit (code, limit, period, burst,
    // shadow): a GCRA period of 10^22 us puts its TAT past 2^63.
    let period = invocation.args.len() - 3;
    invocation.args[period] = b"10000000000000000000000".to_vec();
    let result = run_bare(invocation.script.code(), &invocation).await;
    for l in [&fw, &gcra] {
        assert_eq!(
            common::dump(&l.key("s").unwrap()).await,
            None,
            "{}: written by a failed check ({result:?})",
            l.algorithm()
        );
    }
    let err = result.unwrap_err();
    assert!(
        err.to_string().contains("shardlimit: number out of range"),
        "{err}"
    );
}

/// A denied or failing multi-limit check leaves every key byte-identical,
/// even a sliding log holding entries that have left its window (trimming
/// them is a write, so it waits for an admission).
#[tokio::test]
async fn a_denied_or_failing_multi_limit_check_changes_no_key() {
    let cluster = common::cluster("multidump").await;
    let log = limiter(&cluster, Algorithm::SlidingLog, Quota::per_hour(nz(3)));
    let gcra = limiter(&cluster, Algorithm::Gcra, Quota::per_hour(nz(10)));
    let both = MultiLimiter::new([log.clone(), gcra.clone()]).unwrap();
    let (log_key, gcra_key) = (log.key("s").unwrap(), gcra.key("s").unwrap());
    assert!(both.check_n("s", 3).await.unwrap().allowed);
    // An entry two hours old: out of the window, not yet trimmed.
    let old = server_micros(&log_key).await - 2 * 3_600_000_000;
    let _: i64 = common::on_owner(
        &log_key,
        redis::cmd("ZADD")
            .arg(&log_key)
            .arg(old)
            .arg(format!("{old}:1")),
    )
    .await;
    let before = (common::dump(&log_key).await, common::dump(&gcra_key).await);
    let denied = both.check("s").await.unwrap();
    assert!(!denied.allowed, "{denied:?}");
    assert_eq!(
        (common::dump(&log_key).await, common::dump(&gcra_key).await),
        before,
        "a denied check wrote"
    );
    // The same with a script that fails: the GCRA key is of the wrong type.
    let _: i64 = common::on_owner(&gcra_key, redis::cmd("DEL").arg(&gcra_key)).await;
    let _: i64 = common::on_owner(&gcra_key, redis::cmd("SADD").arg(&gcra_key).arg("x")).await;
    let _: i64 =
        common::on_owner(&gcra_key, redis::cmd("PEXPIRE").arg(&gcra_key).arg(60_000)).await;
    let before = common::dump(&log_key).await;
    let err = both.check("s").await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(common::dump(&log_key).await, before, "a failed check wrote");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Inside a script Redis expires keys by the time the script started, while
/// `TIME` moves on: a window's key can still be visible a few milliseconds
/// into the next window. Provoked here by planting a full window whose
/// expiry is the next window's first millisecond, then busy-waiting inside
/// the same script until `TIME` is 2 ms into that window before running the
/// fixed-window check. The old count must not carry over.
#[tokio::test]
async fn fixed_window_never_carries_a_count_into_the_next_window() {
    let cluster = common::cluster("fwcarry").await;
    let period_ms = 20;
    let l = limiter(
        &cluster,
        Algorithm::FixedWindow,
        Quota::with_period(nz(5), Duration::from_millis(period_ms)),
    );
    let invocation = l.invocation("s", 1).unwrap();
    let plant = format!(
        "do
  local function now_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local next_ms = (math.floor(now_us() / 1000 / {period_ms}) + 1) * {period_ms}
  redis.call('SET', KEYS[1], 5, 'PXAT', string.format('%d', next_ms))
  while now_us() < (next_ms + 2) * 1000 do end
end
"
    );
    let code = format!("{plant}{}", invocation.script.code());
    let reply = run_bare(&code, &invocation).await.unwrap();
    // The compact reply: admitted (3), remaining 4.
    assert_eq!(
        &reply[..2],
        [3, 4],
        "admitted into a fresh window: {reply:?}"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// A fixed-window key left without a TTL (an older version, a hand edit)
/// belongs to no window: it starts fresh and gets an expiry.
#[tokio::test]
async fn a_fixed_window_key_without_ttl_starts_fresh() {
    let cluster = common::cluster("fwimmortal").await;
    let l = limiter(&cluster, Algorithm::FixedWindow, Quota::per_hour(nz(5)));
    let key = l.key("s").unwrap();
    let _: () = common::on_owner(&key, redis::cmd("SET").arg(&key).arg(5)).await;
    let d = l.check("s").await.unwrap();
    assert!(d.allowed && d.remaining == 4, "{d:?}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// "Wait forever" waits (it used to panic computing `now + Duration::MAX`).
#[tokio::test]
async fn until_ready_can_wait_forever() {
    let cluster = common::cluster("forever").await;
    for algorithm in Algorithm::ALL {
        let l = limiter(&cluster, algorithm, Quota::per_second(nz(2)));
        assert!(l.check_n("f", 2).await.unwrap().allowed);
        let d = l.until_ready("f", 1, Duration::MAX).await.unwrap();
        assert!(d.allowed, "{algorithm}: {d:?}");
    }
    let a = RateLimiter::builder(&cluster, "a", Quota::per_second(nz(2)))
        .build()
        .unwrap();
    let both = MultiLimiter::new([a.clone()]).unwrap();
    assert!(a.check_n("m", 2).await.unwrap().allowed);
    let d = both.until_ready("m", 1, Duration::MAX).await.unwrap();
    assert!(d.allowed, "{d:?}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Two sliding logs in one multi-limit share one log's members per check:
/// the capacity says so, and a cost above it is refused before sending.
#[tokio::test]
async fn sliding_logs_in_a_multi_limit_share_one_check_budget() {
    let cluster = common::cluster("multilogs").await;
    let most = Algorithm::SlidingLog.max_limit();
    let a = RateLimiter::builder(&cluster, "a", Quota::per_hour(most))
        .algorithm(Algorithm::SlidingLog)
        .build()
        .unwrap();
    let b = RateLimiter::builder(&cluster, "b", Quota::per_hour(most))
        .algorithm(Algorithm::SlidingLog)
        .build()
        .unwrap();
    let both = MultiLimiter::new([a.clone(), b]).unwrap();
    let half = most.get() / 2;
    assert_eq!(both.capacity(), half);
    assert!(matches!(
        both.check_n("s", half + 1).await,
        Err(Error::InvalidCost { max, .. }) if max == u64::from(half)
    ));
    assert_eq!(common::dump(&a.key("s").unwrap()).await, None);
    assert!(both.check_n("s", half).await.unwrap().allowed);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
