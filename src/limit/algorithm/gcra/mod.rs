//! GCRA (a token or leaky bucket in one number): the theoretical arrival
//! time of the next request. An exact rate with a burst, in the least
//! memory; the key expires when the bucket is full again.

use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::time::Duration;

use super::{Local, LocalState, LocalVerdict, Remaining, Rules, StateRead, count, one_limit};
use crate::error::{Error, Result};
use crate::limit::Quota;
use crate::scripts::Script;
use crate::usage::Usage;

/// Its check alone (the one-limit check).
static SCRIPT: LazyLock<Script> = LazyLock::new(|| one_limit(&RULES));

pub(super) static RULES: Rules = Rules {
    words: "GCRA",
    name: "gcra",
    lua: include_str!("gcra.lua"),
    script: &SCRIPT,
    max_limit: NonZeroU32::MAX,
    bursts: true,
    bounds,
    state: StateRead::Integer(|v| Usage::Gcra {
        theoretical_arrival_us: count(v),
    }),
    remaining,
    local,
    plain: None,
    seed,
};

/// The time a full bucket takes to refill — how far ahead of the server
/// clock the TAT may run, and the key's longest TTL — is at most
/// [`Quota::MAX_PERIOD`].
fn bounds(quota: &Quota, period: u64) -> Result<()> {
    let refill =
        u128::from(period) * u128::from(quota.burst().get()) / u128::from(quota.limit().get());
    if refill > Quota::MAX_PERIOD.as_micros() {
        return Err(Error::Config {
            field: "quota.burst",
            reason: format!(
                "burst {} x period {:?} / limit {} = {:?} to refill a full bucket, over the \
                 maximum of {:?}",
                quota.burst(),
                quota.period(),
                quota.limit(),
                Duration::from_micros(u64::try_from(refill).unwrap_or(u64::MAX)),
                Quota::MAX_PERIOD,
            ),
        });
    }
    Ok(())
}

/// The key expires at the theoretical arrival time, so its TTL is how far
/// ahead of now it is: remaining = (tolerance - ttl) / interval, at most
/// the burst (gcra.lua's formula, in integers).
fn remaining(usage: &Usage, quota: &Quota, ttl: Option<Duration>) -> Option<Remaining> {
    let Usage::Gcra { .. } = usage else {
        return None;
    };
    let burst = u128::from(quota.burst().get());
    let limit = u128::from(quota.limit().get());
    let period = quota.period().as_micros();
    let ahead = ttl?.as_micros();
    let tolerance = burst * period / limit;
    let left = tolerance.saturating_sub(ahead) * limit / period.max(1);
    u64::try_from(left.min(burst)).ok().map(|n| (n, true))
}

/// A bucket of `capacity` refilling `limit` per `period`: each unit moves
/// the theoretical arrival time (TAT) on by `period / limit`. As in
/// gcra.lua, one number decides and is reported: the units free now, the
/// capacity less those the TAT still holds (rounded up); a request is
/// admitted if its cost fits in them.
fn local(state: &mut LocalState, at: Local) -> LocalVerdict {
    let limit = u128::from(at.limit.max(1));
    let period = u128::from(at.period);
    // The time `units` take to come back, in µs rounded up (never early).
    let interval = |units: u64| {
        u64::try_from((u128::from(units) * period).div_ceil(limit)).unwrap_or(u64::MAX)
    };
    let tat = state.tat.max(at.now);
    let held = u64::try_from((u128::from(tat - at.now) * limit).div_ceil(period.max(1)))
        .unwrap_or(u64::MAX);
    let free = at.capacity.saturating_sub(held);
    let allowed = at.cost <= free;
    let next = tat.saturating_add(interval(at.cost));
    // Until the TAT is within (capacity - cost) units of now, rounded so
    // as never to be early.
    let retry = (!allowed && at.cost <= at.capacity).then(|| {
        let within = u128::from(at.capacity - at.cost) * period / limit;
        (tat - at.now)
            .saturating_sub(u64::try_from(within).unwrap_or(u64::MAX))
            .max(1)
    });
    if allowed && at.consume {
        state.tat = next;
    }
    let (left, ahead) = if allowed && at.consume {
        (free - at.cost, next - at.now)
    } else {
        (free, tat - at.now)
    };
    // When the TAT holds one unit fewer (0: it holds none).
    let held = at.capacity.saturating_sub(left);
    let more = match held.checked_sub(1) {
        Some(fewer) => {
            let within = u128::from(fewer) * period / limit;
            ahead
                .saturating_sub(u64::try_from(within).unwrap_or(u64::MAX))
                .max(1)
        }
        None => 0,
    };
    LocalVerdict {
        allowed,
        remaining: left,
        retry_after_us: retry,
        reset_after_us: ahead,
        more_after_us: more,
    }
}

/// The units taken as of now, at this process's rate: the bucket refills
/// as a bucket of the share does (Redis' own refills at the full rate, so
/// its `reset_after` is about the same time).
fn seed(state: &mut LocalState, at: Local, _reset_after: u64) {
    let ahead = u128::from(at.cost) * u128::from(at.period) / u128::from(at.limit.max(1));
    state.tat = at
        .now
        .saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX));
}
