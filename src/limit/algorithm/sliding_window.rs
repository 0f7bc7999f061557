//! Sliding window counter: the counts of the current and the previous
//! window in one small hash, the previous one weighted by how much of it
//! still overlaps the sliding window. Approximate; cheap at any limit.

use std::num::NonZeroU32;

use super::{Rules, StateRead, count, no_bounds};
use crate::admin::Usage;
use crate::scripts;

pub(super) static RULES: Rules = Rules {
    words: "sliding window counter",
    script: &scripts::SLIDING_WINDOW,
    max_limit: NonZeroU32::MAX,
    bursts: false,
    bounds: no_bounds,
    // `c` and `p`: the counts of the window last written and the one
    // before it.
    state: StateRead::Fields(&["c", "p"], |fields| Usage::SlidingWindow {
        current: count(fields.first().copied().flatten()),
        previous: count(fields.get(1).copied().flatten()),
    }),
    // The weight of the previous window depends on the time within the
    // current one, which the scanner does not read: not said.
    remaining: |_, _, _| None,
};
