//! Each algorithm's Rust side agrees with its Lua: degraded local mode's
//! limiter (`src/limit/algorithm/<name>/mod.rs`) decides as the one-limit
//! check (`<name>.lua`, through `one_limit.lua`) does, on random sequences
//! of checks and peeks with random costs and quotas, both on one simulated
//! clock (the one-limit agreement test's stand-in for `clock.lua`).
//!
//! Where the two are written to agree exactly — the fixed window, the
//! sliding log, and GCRA with an emission interval of whole microseconds
//! (the local limiter rounds each unit's interval up, the Lua keeps the
//! fraction) — every field of every reply is compared: allowed, remaining,
//! the wait (a denial's retry, an admission's "more"), the reset. The
//! sliding window counter's local limiter weighs the previous window up
//! (never admitting what Redis would deny) and states its reset for "more":
//! it must admit nothing Redis denies, leave no more than Redis says, and
//! its reset must be Redis'; a sequence is compared up to the first
//! request Redis admits and it does not (their histories part there).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shardlimit::__private::LocalLimiter;
use shardlimit::Algorithm;

use crate::common;
use crate::one_limit_checks::{on_test_clock, server_time_us};

/// The one-limit check's reply, with the verdict split: `(allowed,
/// remaining, wait, reset)`.
type Lua = (bool, u64, i64, u64);

#[tokio::test]
async fn each_local_limiter_decides_as_its_lua() {
    const SEEDS: u64 = 16;
    const STEPS: usize = 200;
    let namespace = common::unique_namespace("algorithms");
    let tag = format!("{{{namespace}}}");
    let owner = common::owner(shardlimit::keys::slot(namespace.as_bytes())).await;
    let mut conn = common::node(&owner.addr).await;
    for (algorithm, script) in [
        (Algorithm::Gcra, "gcra"),
        (Algorithm::FixedWindow, "fixed_window"),
        (Algorithm::SlidingLog, "sliding_log"),
        (Algorithm::SlidingWindow, "sliding_window"),
    ] {
        let lua = on_test_clock(script);
        let exact = algorithm != Algorithm::SlidingWindow;
        let (mut compared, mut denied, mut parted) = (0usize, 0usize, 0usize);
        for seed in 0..SEEDS {
            let mut rng = StdRng::seed_from_u64(seed);
            let keys = ["s", "o", "b"].map(|k| format!("{tag}:{script}:{seed}:{k}"));
            // Ahead of the server and only moving on (see one_limit_checks).
            let mut now = server_time_us(&mut conn).await + 1_000_000;
            let max = if algorithm == Algorithm::SlidingLog {
                20
            } else {
                50
            };
            let limit: u64 = rng.random_range(1..=max);
            // Whole ms (the windows' rule); for GCRA a whole number of µs
            // per unit too.
            let period: u64 = limit * rng.random_range(1..=40) * 1_000;
            let burst: u64 = if algorithm == Algorithm::Gcra {
                rng.random_range(1..=2 * limit)
            } else {
                limit
            };
            // The most one request may cost: the burst, which is the limit
            // but for GCRA.
            let capacity = burst;
            let mut local = LocalLimiter::new(algorithm);
            for step in 0..STEPS {
                // Strictly later each time: the Lua's sliding-log stamps
                // are then the time itself, as the local limiter's are.
                now += match rng.random_range(0..4) {
                    0 => rng.random_range(1..=50),
                    1 => rng.random_range(1..=period / 4),
                    2 => rng.random_range(1..=period),
                    _ => rng.random_range(1..=2 * period),
                };
                let cost = rng.random_range(1..=capacity.min(4));
                let consume = rng.random_bool(0.85);
                let args = [
                    limit.to_string(),
                    period.to_string(),
                    burst.to_string(),
                    cost.to_string(),
                    if consume { "1" } else { "0" }.to_owned(),
                    "0".to_owned(),
                ];
                let mut invocation = lua.prepare_invoke();
                for key in &keys {
                    invocation.key(key);
                }
                for arg in &args {
                    invocation.arg(arg);
                }
                let reply: Vec<i64> = invocation
                    .arg(now / 1_000_000)
                    .arg(now % 1_000_000)
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                let redis: Lua = match reply[..] {
                    [verdict, remaining, wait, reset] => (
                        verdict & 1 == 1,
                        u64::try_from(remaining).unwrap(),
                        wait,
                        u64::try_from(reset).unwrap(),
                    ),
                    _ => panic!("{script}: not a compact reply: {reply:?}"),
                };
                let (allowed, remaining, retry, reset, more) =
                    local.check(now, cost, (limit, burst, period), consume);
                let wait = if allowed {
                    i64::try_from(more).unwrap()
                } else {
                    retry.map_or(-1, |r| i64::try_from(r).unwrap())
                };
                let context = format!(
                    "{script} seed {seed} step {step}: {limit}/{period}us burst {burst}, cost \
                     {cost}, consume {consume}: Redis (allowed, remaining, wait, reset) = \
                     {redis:?}, local = {:?}",
                    (allowed, remaining, wait, reset)
                );
                compared += 1;
                denied += usize::from(!redis.0);
                if exact {
                    assert_eq!((allowed, remaining, wait, reset), redis, "{context}");
                    continue;
                }
                assert!(!allowed || redis.0, "admitted what Redis denies: {context}");
                assert!(remaining <= redis.1, "leaves more than Redis: {context}");
                assert_eq!(reset, redis.3, "{context}");
                if redis.0 && !allowed {
                    parted += 1;
                    break;
                }
            }
        }
        eprintln!(
            "{script}: {compared} replies compared, {denied} of them denials, {parted} sequences \
             parted"
        );
        assert!(
            denied * 20 > compared,
            "{script}: too few denials ({denied} of {compared})"
        );
    }
}
