//! Sliding log: a sorted set with one member per admitted unit. Exact in
//! every window; its memory and the work of one check grow with the limit,
//! so the limit is bounded.

use std::num::NonZeroU32;
use std::sync::LazyLock;

use super::{LocalVerdict, Rules, StateRead, no_bounds, one_limit};
use crate::scripts::Script;
use crate::usage::Usage;

/// The largest limit (and cost): see
/// [`Algorithm::SLIDING_LOG_MAX_LIMIT`](crate::Algorithm::SLIDING_LOG_MAX_LIMIT).
pub(super) const MAX_LIMIT: NonZeroU32 = match NonZeroU32::new(128) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// Its check alone (the one-limit check).
static SCRIPT: LazyLock<Script> = LazyLock::new(|| one_limit(&RULES));

pub(super) static RULES: Rules = Rules {
    words: "sliding log",
    name: "sliding_log",
    lua: include_str!("sliding_log.lua"),
    script: &SCRIPT,
    max_limit: MAX_LIMIT,
    bursts: false,
    bounds: no_bounds,
    state: StateRead::Members(|entries| Usage::SlidingLog { entries }),
    // Entries that left the window stay until the next check trims them:
    // the count is a lower bound.
    remaining: |usage, quota, _| match usage {
        Usage::SlidingLog { entries } => Some((
            u64::from(quota.limit().get()).saturating_sub(*entries),
            false,
        )),
        _ => None,
    },
    local: |state, at| {
        // Units admitted more than a period ago have left the window.
        while state.log.front().is_some_and(|&t| t + at.period <= at.now) {
            state.log.pop_front();
        }
        let used = state.log.len() as u64;
        let allowed = used + at.cost <= at.limit;
        // Denied: when enough of the oldest units leave for `cost` to fit.
        let must_leave = (used + at.cost).saturating_sub(at.limit);
        let retry = (!allowed && at.cost <= at.limit)
            .then(|| {
                let index = usize::try_from(must_leave - 1).ok()?;
                state
                    .log
                    .get(index)
                    .map(|&t| (t + at.period - at.now).max(1))
            })
            .flatten();
        let counted = allowed && at.consume;
        let newest = if counted {
            Some(at.now)
        } else {
            state.log.back().copied()
        };
        // When the oldest unit (after an admission: the new ones if none
        // was in) leaves the window.
        let oldest = if counted {
            Some(state.log.front().copied().unwrap_or(at.now))
        } else {
            state.log.front().copied()
        };
        if counted {
            state.log.extend((0..at.cost).map(|_| at.now));
        }
        LocalVerdict {
            allowed,
            remaining: at.left_after(used, counted),
            retry_after_us: retry,
            reset_after_us: newest.map_or(0, |t| t + at.period - at.now),
            more_after_us: oldest.map_or(0, |t| t + at.period - at.now),
        }
    },
    // Redis does not say when each of its entries leaves, only when the
    // newest does: the units all leave then (never sooner than in Redis).
    plain: None,
    seed: |state, at, reset_after| {
        state.log.clear();
        let stamp = (at.now + reset_after).saturating_sub(at.period).min(at.now);
        state.log.extend((0..at.cost).map(|_| stamp));
    },
};
