//! [`Usage`]: what the state of one primitive's key holds, by kind. The
//! admin scanner reports it (`admin::Usage`); each rate-limit algorithm
//! says how its state reads as one (`limit/algorithm/<name>/mod.rs`), so it
//! lives below both.

/// The state of a primitive, by kind.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Usage {
    /// Fixed window: units used in the current window.
    FixedWindow {
        /// Units used.
        used: u64,
    },
    /// Sliding log: entries in the log (expired ones are trimmed by the next
    /// check).
    SlidingLog {
        /// Entries.
        entries: u64,
    },
    /// Sliding window counter.
    SlidingWindow {
        /// Units in the current window.
        current: u64,
        /// Units in the previous window.
        previous: u64,
    },
    /// GCRA: the bucket is full again when the key expires (see `ttl`).
    Gcra {
        /// The theoretical arrival time, microseconds since the Unix epoch.
        theoretical_arrival_us: u64,
    },
    /// Lease limiter: leases held (expired ones not yet reclaimed by the
    /// next acquire count).
    Lease {
        /// Leases held.
        leases_held: u64,
    },
    /// Lock.
    Lock {
        /// Whether someone holds it.
        held: bool,
        /// The last fencing token issued, if the fence is still kept.
        fencing_token: Option<u64>,
    },
    /// TTL-preserving counter.
    Counter {
        /// Its value.
        value: i64,
    },
    /// A rate limiter with no state for the subject (never checked, or its
    /// state expired): the whole quota is available. Reported for a subject
    /// that has only an override or a block (see
    /// [`LimiterInfo::settings`](crate::admin::LimiterInfo::settings)).
    Unused,
    /// A kind the scanner does not know: its Redis type.
    Other {
        /// `string`, `hash`, `zset`, …
        redis_type: String,
    },
}

impl Usage {
    /// A short human description, e.g. `used 7`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Usage::FixedWindow { used } => format!("used {used}"),
            Usage::SlidingLog { entries } => format!("{entries} in log"),
            Usage::SlidingWindow { current, previous } => {
                format!("current {current}, previous {previous}")
            }
            Usage::Gcra { .. } => "refilling (full when the key expires)".to_owned(),
            Usage::Unused => "unused (full quota)".to_owned(),
            Usage::Lease { leases_held } => format!("{leases_held} leases held"),
            Usage::Lock {
                held,
                fencing_token,
            } => match (held, fencing_token) {
                (true, Some(t)) => format!("held, fence {t}"),
                (true, None) => "held".to_owned(),
                (false, Some(t)) => format!("free, last fence {t}"),
                (false, None) => "free".to_owned(),
            },
            Usage::Counter { value } => format!("value {value}"),
            Usage::Other { redis_type } => format!("({redis_type})"),
        }
    }
}
