//! Sliding window counter: the counts of the current and the previous
//! window in one small hash, the previous one weighted by how much of it
//! still overlaps the sliding window. Approximate; cheap at any limit.

use std::num::NonZeroU32;
use std::sync::LazyLock;

use super::{LocalVerdict, Rules, StateRead, count, no_bounds, one_limit, seed_window};
use crate::scripts::Script;
use crate::usage::Usage;

/// Its check alone (the one-limit check).
static SCRIPT: LazyLock<Script> = LazyLock::new(|| one_limit(&RULES));

pub(super) static RULES: Rules = Rules {
    words: "sliding window counter",
    name: "sliding_window",
    lua: include_str!("sliding_window.lua"),
    script: &SCRIPT,
    max_limit: NonZeroU32::MAX,
    bursts: false,
    bounds: no_bounds,
    // `c` and `p`: the counts of the window last written and the one
    // before it.
    state: StateRead::Fields(&["c", "p"], |fields| Usage::SlidingWindow {
        current: count(fields.first().copied().flatten()),
        previous: count(fields.get(1).copied().flatten()),
    }),
    // The weight of the previous window (at most 1) depends on the time
    // within the current one, which the scanner does not read: counting
    // the previous window whole gives a lower bound.
    remaining: |usage, quota, _| match usage {
        Usage::SlidingWindow { current, previous } => Some((
            u64::from(quota.limit().get()).saturating_sub(current.saturating_add(*previous)),
            false,
        )),
        _ => None,
    },
    local: |state, at| {
        let now = at.now + state.offset;
        let window = now / at.period;
        if window != state.window {
            state.previous = if window == state.window + 1 {
                state.count
            } else {
                0
            };
            state.count = 0;
            state.window = window;
        }
        // The previous window weighs what is left of it in the sliding
        // window: (period - elapsed) / period.
        let elapsed = now - window * at.period;
        let weighted = |elapsed: u64| {
            (u128::from(state.previous) * u128::from(at.period - elapsed))
                .div_ceil(u128::from(at.period))
        };
        let used = u64::try_from(weighted(elapsed)).unwrap_or(u64::MAX) + state.count;
        let allowed = used + at.cost <= at.limit;
        // Denied: when the previous window has weighed out enough, if this
        // window's count leaves room; else at the next window.
        let retry = (!allowed && at.cost <= at.limit).then(|| {
            let room = at.limit.saturating_sub(state.count + at.cost);
            let next_window = at.period - elapsed;
            if state.count + at.cost > at.limit || state.previous == 0 {
                return next_window.max(1);
            }
            let needed = at.period - room * at.period / state.previous;
            needed.saturating_sub(elapsed).clamp(1, next_window.max(1))
        });
        if allowed && at.consume {
            state.count += at.cost;
        }
        // Full again when both windows' units have left: this window's a
        // period after it ends, the previous one's when this one ends.
        let reset = if state.count > 0 {
            2 * at.period - elapsed
        } else if state.previous > 0 {
            at.period - elapsed
        } else {
            0
        };
        LocalVerdict {
            allowed,
            remaining: at.left_after(used, allowed && at.consume),
            retry_after_us: retry,
            reset_after_us: reset,
            // Cautious: when the estimate falls by a unit is not worked out
            // here; never before the reset.
            more_after_us: reset,
        }
    },
    // Redis is full again a period after its current window ends when that
    // window counts units: they are all counted in the current window here
    // (weighed out no sooner than in Redis). When only the previous window
    // counts, Redis is full at the current one's end: the units are a
    // previous window here too, weighing as much now and nothing then.
    plain: None,
    seed: |state, at, reset_after| {
        if reset_after == 0 || reset_after > at.period {
            seed_window(state, at, reset_after.saturating_sub(at.period));
            return;
        }
        seed_window(state, at, reset_after);
        state.count = 0;
        let previous =
            (u128::from(at.cost) * u128::from(at.period)).div_ceil(u128::from(reset_after));
        // Bounded so that no sum overflows: a weight of that much is
        // gone within a microsecond anyway.
        state.previous = u64::try_from(previous).unwrap_or(u64::MAX).min(1 << 48);
    },
};
