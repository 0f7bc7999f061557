//! Clock-aligned fixed window: one counter key whose TTL ends with the
//! window. Exact per window; up to twice the limit across a boundary.

use std::num::NonZeroU32;

use super::{Rules, StateRead, count, left, no_bounds, seed_window, windowed};
use crate::admin::Usage;
use crate::scripts;

pub(super) static RULES: Rules = Rules {
    words: "fixed window",
    script: &scripts::FIXED_WINDOW,
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
    // Redis' window ends when its count does.
    seed: seed_window,
};
