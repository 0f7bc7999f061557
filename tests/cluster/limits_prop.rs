//! Property test of the safety bounds against the cluster: random quotas of
//! every algorithm — extreme limits, periods, bursts and costs, anywhere
//! within what the builders accept — checked back to back:
//!
//! * no check ever fails (no script error, whatever the numbers);
//! * never more units admitted than the quota allows over the time the
//!   sequence took;
//! * every key written has a TTL, and no longer than its algorithm's bound;
//! * a denied check, single or multi-limit, leaves every key's `DUMP`
//!   byte-identical
//!   (each multi-limit includes a small sliding log whose entries expire
//!   between checks, so a denial that trimmed them would show);
//! * a denial says less is left than it was asked for (`remaining <
//!   cost`), for every algorithm, one-limit and multi-limit: here, and in
//!   `a_denial_leaves_less_than_its_cost`, which sends random costs from
//!   tasks at once against fast quotas of every algorithm, so that checks
//!   land within microseconds of the moment a unit comes free.
//!
//! 64 cases (16 for the concurrent one); each case uses fresh limiter names
//! and a fresh subject under one test namespace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use shardlimit::{Algorithm, Cluster, Error, MultiLimiter, Quota, RateLimiter};

static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

/// One connection (and namespace) for every case.
static CLUSTER: tokio::sync::OnceCell<Cluster> = tokio::sync::OnceCell::const_new();

async fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| common::cluster("prop")).await
}

const MAX_PERIOD_MS: u64 = 366 * 24 * 3600 * 1000;

fn unix_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

/// A period in ms: the extremes, round values and anything in between.
fn period_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        Just(1000),
        Just(3_600_000),
        Just(MAX_PERIOD_MS),
        // A few ms: entries and windows expire between two checks.
        2..=10u64,
        1..=MAX_PERIOD_MS,
    ]
}

fn limit(max: u32) -> impl Strategy<Value = u32> {
    prop_oneof![Just(1u32), Just(max), 1..=max.min(20), 1..=max]
}

/// A quota the builder accepts for `algorithm`: a GCRA burst is kept within
/// `burst × period / limit ≤ 366 days`.
fn quota(algorithm: Algorithm) -> impl Strategy<Value = Quota> {
    let max = algorithm.max_limit().get();
    (limit(max), period_ms(), any::<u32>(), any::<bool>()).prop_map(
        move |(limit, period_ms, burst_seed, custom)| {
            let q = Quota::with_period(
                NonZeroU32::new(limit).unwrap(),
                Duration::from_millis(period_ms),
            );
            if algorithm != Algorithm::Gcra || !custom {
                return q;
            }
            let most = u128::from(MAX_PERIOD_MS) * u128::from(limit) / u128::from(period_ms);
            let most = u32::try_from(most.min(u128::from(u32::MAX))).unwrap();
            q.allow_burst(NonZeroU32::new(burst_seed % most + 1).unwrap())
        },
    )
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

/// `(algorithm, quota)`.
fn limit_def() -> impl Strategy<Value = (Algorithm, Quota)> {
    algorithm().prop_flat_map(|a| (Just(a), quota(a)))
}

/// A small sliding log whose entries leave its window between checks (a
/// period of 3-8 ms; a check with its `DUMP`s takes a few ms), so a denial
/// often meets a log half expired: it must not trim it.
fn short_sliding_log() -> impl Strategy<Value = (Algorithm, Quota)> {
    (2..=4u32, 3..=8u64).prop_map(|(limit, ms)| {
        let quota = Quota::with_period(NonZeroU32::new(limit).unwrap(), Duration::from_millis(ms));
        (Algorithm::SlidingLog, quota)
    })
}

/// A cost from a fraction in [0, 1] of the capacity, biased to the ends.
fn cost_fraction() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), Just(0.5), 0.0..=1.0f64]
}

fn cost_of(capacity: u32, fraction: f64) -> u32 {
    // 1 ..= capacity; the float only picks a point in between.
    let scaled = (f64::from(capacity) * fraction) as u64;
    u32::try_from(scaled.clamp(1, u64::from(capacity))).unwrap()
}

/// The most units `quota` may admit within `span_us`, started at unix time
/// `start_us` (client clock; the cluster runs on the same host).
fn allowed_units(algorithm: Algorithm, quota: Quota, start_us: u128, end_us: u128) -> u128 {
    let period = quota.period().as_micros();
    let limit = u128::from(quota.limit().get());
    let span = end_us - start_us;
    match algorithm {
        // At most `limit` per window (the sliding window counter's current
        // window can never exceed the limit either): count the windows the
        // sequence touched.
        Algorithm::FixedWindow | Algorithm::SlidingWindow => {
            limit * (end_us / period - start_us / period + 1)
        }
        // At most `limit` in any window of one period.
        Algorithm::SlidingLog => limit * (span / period + 1),
        // The burst, plus what refilled; +1 for microsecond rounding.
        _ => u128::from(quota.burst().get()) + (limit * span).div_ceil(period) + 1,
    }
}

/// The longest TTL a key of `algorithm` may have right after a check (ms).
fn ttl_bound_ms(algorithm: Algorithm, quota: Quota) -> i64 {
    let period = quota.period().as_millis();
    let bound = match algorithm {
        Algorithm::SlidingWindow => 2 * period,
        Algorithm::Gcra => {
            period * u128::from(quota.burst().get()) / u128::from(quota.limit().get()) + 1
        }
        _ => period + 1,
    };
    assert!(bound <= 2 * u128::from(MAX_PERIOD_MS) + 1);
    i64::try_from(bound).unwrap()
}

async fn assert_ttl(l: &RateLimiter, subject: &str) {
    let pttl = common::pttl(&l.key(subject).unwrap()).await;
    let bound = ttl_bound_ms(l.algorithm(), l.quota());
    assert!(
        pttl == -2 || (0..=bound).contains(&pttl),
        "{} {:?}: PTTL {pttl}, bound {bound}",
        l.algorithm(),
        l.quota()
    );
}

/// After a denied check: `key` is byte-identical to `before`, or gone (it
/// expired meanwhile, which periods of a few ms make likely).
async fn assert_unchanged(key: &[u8], before: &Option<Vec<u8>>, what: &str) {
    let after = common::dump(key).await;
    assert!(
        after.is_none() || after == *before,
        "{what}: a denied check changed {}",
        String::from_utf8_lossy(key)
    );
}

fn build(cluster: &Cluster, name: String, algorithm: Algorithm, quota: Quota) -> RateLimiter {
    match RateLimiter::builder(cluster, name, quota)
        .algorithm(algorithm)
        .build()
    {
        Ok(l) => l,
        Err(err) => panic!("the strategy made a quota the builder refuses: {err}"),
    }
}

fn case_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

async fn single(algorithm: Algorithm, quota: Quota, costs: Vec<f64>) {
    let id = case_id();
    let l = build(cluster().await, format!("p{id}"), algorithm, quota);
    let costs: Vec<u32> = costs.iter().map(|&f| cost_of(l.capacity(), f)).collect();
    let subject = format!("s{id}");
    let key = l.key(&subject).unwrap();
    let start = unix_micros();
    let mut admitted: u128 = 0;
    for &cost in &costs {
        let before = common::dump(&key).await;
        match l.check_n(&subject, cost).await {
            Ok(d) if d.allowed => admitted += u128::from(cost),
            Ok(d) => {
                assert_denial_below_cost(&d, cost, &format!("{algorithm} {quota:?}"));
                assert_unchanged(&key, &before, &format!("{algorithm} {quota:?}")).await;
            }
            Err(err) => panic!("{algorithm} {quota:?} cost {cost}: {err}"),
        }
    }
    let end = unix_micros();
    let most = allowed_units(algorithm, quota, start, end);
    assert!(
        admitted <= most,
        "{algorithm} {quota:?}: admitted {admitted} > {most} in {} us ({costs:?})",
        end - start
    );
    assert_ttl(&l, &subject).await;
    // A cost above the capacity is refused before sending.
    if let Some(over) = l.capacity().checked_add(1) {
        assert!(matches!(
            l.check_n(&subject, over).await,
            Err(Error::InvalidCost { .. })
        ));
    }
}

async fn multi(defs: Vec<(Algorithm, Quota)>, costs: Vec<f64>) {
    let id = case_id();
    let cluster = cluster().await;
    let limiters: Vec<RateLimiter> = defs
        .iter()
        .enumerate()
        .map(|(i, &(a, q))| build(cluster, format!("m{id}-{i}"), a, q))
        .collect();
    let capacity = limiters.iter().map(RateLimiter::capacity).min().unwrap();
    let both = MultiLimiter::new(limiters.clone()).unwrap();
    let subject = format!("s{id}");
    let keys: Vec<Vec<u8>> = limiters.iter().map(|l| l.key(&subject).unwrap()).collect();
    for &f in &costs {
        let cost = cost_of(capacity, f);
        let mut before = Vec::new();
        for key in &keys {
            before.push(common::dump(key).await);
        }
        let d = match both.check_n(&subject, cost).await {
            Ok(d) => d,
            Err(err) => panic!("{defs:?} cost {cost}: {err}"),
        };
        if !d.allowed {
            for denied in d.decisions.iter().filter(|d| !d.allowed) {
                assert_denial_below_cost(denied, cost, &format!("{defs:?}"));
            }
            for (key, before) in keys.iter().zip(&before) {
                assert_unchanged(key, before, &format!("{defs:?}")).await;
            }
        }
    }
    for l in &limiters {
        assert_ttl(l, &subject).await;
    }
}

/// A denial leaves less than it was asked for: a request of `remaining`
/// units would have been admitted, one of `cost` was not.
fn assert_denial_below_cost(d: &shardlimit::Decision, cost: u32, what: &str) {
    assert!(
        d.remaining < cost,
        "{what}: denied a cost of {cost} yet says {} left ({d:?})",
        d.remaining
    );
}

/// A quota whose units come free every few microseconds, so that checks
/// sent at once meet the moment one does: GCRA one unit per 2-40 us with a
/// small burst; the windows a small limit per 1-20 ms.
fn fast_quota(algorithm: Algorithm) -> impl Strategy<Value = Quota> {
    let max = algorithm.max_limit().get().min(50);
    (
        2..=40u32,
        1..=5u64,
        prop_oneof![Just(1u32), 1..=4u32],
        1..=max,
        1..=20u64,
    )
        .prop_map(move |(interval_us, period_ms, burst, limit, window_ms)| {
            if algorithm == Algorithm::Gcra {
                let limit = u32::try_from(period_ms * 1000).unwrap() / interval_us;
                Quota::with_period(limit, Duration::from_millis(period_ms)).allow_burst(burst)
            } else {
                Quota::with_period(limit, Duration::from_millis(window_ms))
            }
        })
}

/// One fast quota per algorithm, in `Algorithm::ALL`'s order.
fn fast_quotas() -> impl Strategy<Value = [Quota; 4]> {
    Algorithm::ALL.map(fast_quota)
}

/// Eight tasks at once, each sending its share of `costs` (fractions of the
/// capacity) as fast as the replies come, one-limit through `l` and
/// multi-limit through `l` beside a limit that never binds: every denial
/// must say less is left than it was asked for.
async fn denials_below_cost(l: RateLimiter, costs: Vec<f64>) {
    let roomy = build(
        cluster().await,
        format!("{}-roomy", l.name()),
        Algorithm::FixedWindow,
        Quota::per_hour(u32::MAX),
    );
    let both = MultiLimiter::new([l.clone(), roomy]).unwrap();
    let what = format!("{} {:?}", l.algorithm(), l.quota());
    let mut tasks = Vec::new();
    for (n, share) in costs.chunks(costs.len().div_ceil(8)).enumerate() {
        let (l, both, what) = (l.clone(), both.clone(), what.clone());
        let share: Vec<u32> = share.iter().map(|&f| cost_of(l.capacity(), f)).collect();
        tasks.push(tokio::spawn(async move {
            let subject = format!("s{}", l.name());
            for cost in share {
                let d = if n % 2 == 0 {
                    l.check_n(&subject, cost).await.unwrap()
                } else {
                    let d = both.check_n(&subject, cost).await.unwrap();
                    d.decisions.into_iter().next().unwrap()
                };
                if !d.allowed {
                    assert_denial_below_cost(&d, cost, &what);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn a_denial_leaves_less_than_its_cost(
        quotas in fast_quotas(),
        costs in prop::collection::vec(prop_oneof![4 => Just(0.0), 1 => 0.0..=1.0f64], 400..600),
    ) {
        RT.block_on(async {
            let id = case_id();
            for (algorithm, quota) in Algorithm::ALL.into_iter().zip(quotas) {
                let l = build(cluster().await, format!("d{id}-{}", algorithm.kind()), algorithm, quota);
                denials_below_cost(l, costs.clone()).await;
            }
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_accepted_quota_is_safe(
        (algorithm, quota) in limit_def(),
        costs in prop::collection::vec(cost_fraction(), 1..6),
    ) {
        RT.block_on(single(algorithm, quota, costs));
    }

    #[test]
    fn a_denied_multi_limit_check_writes_nothing(
        log in short_sliding_log(),
        others in prop::collection::vec(limit_def(), 1..3),
        costs in prop::collection::vec(cost_fraction(), 4..10),
    ) {
        RT.block_on(multi([vec![log], others].concat(), costs));
    }
}
