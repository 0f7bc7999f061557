//! Sliding log: a sorted set with one member per admitted unit. Exact in
//! every window; its memory and the work of one check grow with the limit,
//! so the limit is bounded.

use std::num::NonZeroU32;

use super::{Rules, StateRead, no_bounds};
use crate::admin::Usage;
use crate::scripts;

/// The largest limit (and cost): see
/// [`Algorithm::SLIDING_LOG_MAX_LIMIT`](crate::Algorithm::SLIDING_LOG_MAX_LIMIT).
pub(super) const MAX_LIMIT: NonZeroU32 = match NonZeroU32::new(128) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

pub(super) static RULES: Rules = Rules {
    words: "sliding log",
    script: &scripts::SLIDING_LOG,
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
};
