//! Clock-aligned fixed window: one counter key whose TTL ends with the
//! window. Exact per window; up to twice the limit across a boundary.

use std::num::NonZeroU32;
use std::sync::LazyLock;

use super::{
    Local, LocalVerdict, Plain, Remaining, Rules, StateRead, count, no_bounds, one_limit,
    seed_window,
};
use crate::cluster::TxCommand;
use crate::limit::Quota;
use crate::scripts::Script;
use crate::usage::Usage;

/// Its check alone (the one-limit check).
static SCRIPT: LazyLock<Script> = LazyLock::new(|| one_limit(&RULES));

pub(super) static RULES: Rules = Rules {
    words: "fixed window",
    name: "fixed_window",
    lua: include_str!("fixed_window.lua"),
    script: &SCRIPT,
    max_limit: NonZeroU32::MAX,
    bursts: false,
    bounds: no_bounds,
    // The units used in the current window.
    state: StateRead::Integer(|v| Usage::FixedWindow { used: count(v) }),
    remaining: |usage, quota, _| match usage {
        Usage::FixedWindow { used } => left(quota, *used),
        _ => None,
    },
    local: |state, at| {
        let now = at.now + state.offset;
        let window = now / at.period;
        if state.window != window {
            state.window = window;
            state.count = 0;
        }
        let verdict = windowed(state.count, (window + 1) * at.period - now, at);
        if verdict.allowed && at.consume {
            state.count += at.cost;
        }
        verdict
    },
    plain: Some(&PLAIN),
    // Redis' window ends when its count does.
    seed: seed_window,
};

/// Units given back to the window they were counted in, and to no other.
static GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new("fixed_window_give_back", include_str!("give_back.lua")));

/// A check of it alone from plain commands (`limit/check/plain.rs`): the
/// count is an `INCRBY` of the state key and its expiry a `PEXPIREAT` at
/// the window's end, set only if it has none (`NX`) — the key the script
/// would have written, with the expiry it would have given it. The script
/// counts only what it admits; here the units are counted first and a
/// denial gives them back (`DECRBY`), so the count holds them for one
/// round trip. A plain `DECRBY` could give them to the next window, or
/// bring a key made again after a reset below zero: the give-back is a
/// script that checks the key's expiry first.
static PLAIN: Plain = Plain {
    op: "fixed_window_plain",
    window: |now, period| {
        let start = now / period * period;
        (start, start + period)
    },
    count: |tx, cost, end_ms| {
        tx.command(TxCommand::new("INCRBY").key(0).arg(cost))
            .command(TxCommand::new("PEXPIREAT").key(0).arg(end_ms).arg("NX"))
    },
    give_back: &GIVE_BACK,
    // The count before this request's units decides, as in the script.
    judge: |after, at, ends_in| {
        let after = u64::try_from(after).unwrap_or(0);
        windowed(after.saturating_sub(at.cost), ends_in, at)
    },
};

/// A check's reply's limit less what is used: exact.
fn left(quota: &Quota, used: u64) -> Option<Remaining> {
    Some((u64::from(quota.limit().get()).saturating_sub(used), true))
}

/// The local verdict: `used` units in a window that ends in
/// `ends_in` µs; denied requests wait for the window's end.
fn windowed(used: u64, ends_in: u64, at: Local) -> LocalVerdict {
    let allowed = used + at.cost <= at.limit;
    let counted = allowed && at.consume;
    let after = if counted { used + at.cost } else { used };
    let reset = if after > 0 { ends_in } else { 0 };
    LocalVerdict {
        allowed,
        remaining: at.left_after(used, counted),
        retry_after_us: (!allowed && at.cost <= at.limit).then_some(ends_in.max(1)),
        reset_after_us: reset,
        // Everything frees at the window's end.
        more_after_us: reset,
    }
}
