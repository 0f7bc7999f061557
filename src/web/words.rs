//! A primitive's state in words, the way a person on call reads it.

use std::time::Duration;

use crate::admin::{LimiterInfo, Usage};

/// What the primitive is doing now, e.g. `7 used this window, resets in
/// 12 s` or `held, fencing token 42, frees itself in 29 s`.
///
/// The TTL is the main key's: for a fixed window, when the window ends;
/// for GCRA, when the bucket is full again; for a lock, when it frees
/// itself unless extended; for a lease set and a counter, how long they
/// stay if nothing touches them. The scanner knows no quota, so "used" is
/// said rather than "remaining".
pub(super) fn state(info: &LimiterInfo) -> String {
    let ttl = info.ttl.map(duration);
    let within = |what: &str| match &ttl {
        Some(t) => format!(", {what} in {t}"),
        None => ", never expires (no TTL)".to_owned(),
    };
    match &info.usage {
        Usage::FixedWindow { used } => format!("{used} used this window{}", within("resets")),
        Usage::SlidingLog { entries } => {
            format!("{entries} in the log{}", within("log empties"))
        }
        Usage::SlidingWindow { current, previous } => format!(
            "{current} this window, {previous} the window before{}",
            within("idle state expires")
        ),
        Usage::Gcra { .. } => format!("refilling{}", within("full again")),
        Usage::Lock {
            held: true,
            fencing_token,
        } => format!(
            "held{}{}",
            fencing_token.map_or(String::new(), |t| format!(", fencing token {t}")),
            within("frees itself")
        ),
        Usage::Lock {
            held: false,
            fencing_token,
        } => format!(
            "free{}{}",
            fencing_token.map_or(String::new(), |t| format!(", last fencing token {t}")),
            within("fence forgotten")
        ),
        Usage::Lease { holders } => {
            format!("{holders} permit(s) in use{}", within("idle set expires"))
        }
        Usage::Counter { value } => format!("value {value}{}", within("idle counter expires")),
        other => format!("{}{}", other.describe(), within("expires")),
    }
}

/// A duration as a person says it: `850 ms`, `12.3 s`, `4 min 5 s`,
/// `2 h 10 min`, `3 d 4 h`.
pub(super) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    match s {
        _ if ms < 1000 => format!("{ms} ms"),
        0..60 => format!("{}.{} s", s, d.subsec_millis() / 100),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Whole milliseconds, for the JSON.
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Bytes in binary units: `512 B`, `1.5 MiB`.
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    // Tenths of the unit, in integers: no float casts.
    let mut tenths = u128::from(n) * 10;
    while tenths >= 10 * 1024 && unit < UNITS.len() - 1 {
        tenths /= 1024;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{}.{} {}", tenths / 10, tenths % 10, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(usage: Usage, ttl: Option<u64>) -> LimiterInfo {
        LimiterInfo {
            kind: "k".into(),
            name: "n".into(),
            subject: b"s".to_vec(),
            slot: 0,
            node: "127.0.0.1:7000".into(),
            ttl: ttl.map(Duration::from_millis),
            usage,
            keys: Vec::new(),
        }
    }

    #[test]
    fn states_read_as_sentences() {
        assert_eq!(
            state(&info(Usage::FixedWindow { used: 7 }, Some(12_300))),
            "7 used this window, resets in 12.3 s"
        );
        assert_eq!(
            state(&info(
                Usage::Lock {
                    held: true,
                    fencing_token: Some(42)
                },
                Some(29_000)
            )),
            "held, fencing token 42, frees itself in 29.0 s"
        );
        assert_eq!(
            state(&info(Usage::Lease { holders: 2 }, Some(61_000))),
            "2 permit(s) in use, idle set expires in 1 min 1 s"
        );
        assert_eq!(
            state(&info(Usage::Counter { value: 30 }, None)),
            "value 30, never expires (no TTL)"
        );
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_secs(7200 + 600)), "2 h 10 min");
        assert_eq!(
            duration(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3 d 4 h"
        );
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536 * 1024), "1.5 MiB");
    }
}
