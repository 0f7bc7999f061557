//! A primitive's state in words, the way a person on call reads it.

use std::time::Duration;

use shardlimit::admin::{Catalog, LimiterInfo, Usage};
use shardlimit::{Algorithm, Quota};

/// What the page knows of each rate limiter's quota: the catalog the
/// limiters published, with the quotas the router was given
/// ([`WebOptionsBuilder::quota`](super::WebOptionsBuilder::quota)), which
/// win.
pub(super) type Quotas = Catalog;

/// A rate limiter's headroom in words, e.g. `0/60 remaining, at limit, full
/// in 12.3 s; 2 specs published`; `None` when its quota is not known.
pub(super) fn headroom(info: &LimiterInfo, quotas: &Quotas) -> Option<String> {
    let headroom = quotas.headroom(info)?;
    let mut text = headroom.describe();
    if !headroom.full_in.is_zero() && headroom.full_in != Duration::MAX {
        text.push_str(&format!(", full in {}", duration(headroom.full_in)));
    }
    if let Some(specs) = headroom.specs_published() {
        text.push_str(&format!("; {specs} specs published"));
    }
    Some(text)
}

/// Whether the row is a rate limiter at its limit (highlighted).
pub(super) fn at_limit(info: &LimiterInfo, quotas: &Quotas) -> bool {
    quotas.headroom(info).is_some_and(|h| h.at_limit)
}

/// What the primitive is doing now, e.g. `7 used this window, resets in
/// 12 s` or `held, fencing token 42, frees itself in 29 s`; for a rate
/// limiter, then the subject's block and override, e.g. `blocked for
/// 59.0 s; override 5 per 1 h 0 min for 29 d 23 h`.
///
/// The TTL is the main key's: for a fixed window, when the window ends;
/// for GCRA, when the bucket is full again; for a lock, when it frees
/// itself unless extended; for a lease set and a counter, how long they
/// stay if nothing touches them. The keys hold no quota: "remaining" is
/// said for the rate limiters whose quota is known (published to the
/// catalog, given to the router, or the subject's override).
pub(super) fn state(info: &LimiterInfo, quotas: &Quotas) -> String {
    match headroom(info, quotas) {
        Some(headroom) => format!("{headroom}; {}", usage(info)),
        None => usage(info),
    }
}

/// [`state`] without the headroom, for the tables that show it in a
/// column of its own.
pub(super) fn usage(info: &LimiterInfo) -> String {
    let mut text = used(info);
    let settings = &info.settings;
    if let Some(left) = settings.blocked_for {
        text.push_str(&format!("; blocked for {}", duration(left)));
    }
    if let Some(quota) = settings.override_quota {
        text.push_str(&format!("; override {}", per(&info.kind, quota)));
        if let Some(ttl) = settings.override_ttl {
            text.push_str(&format!(" for {}", duration(ttl)));
        }
    }
    text
}

/// A quota of limiters of `kind` in words: `5 per 1 h 0 min`; for GCRA with
/// what it admits in any window of one period (see
/// `Algorithm::policy_limit`): `10 per 1.0 s, burst 25: at most 34 in any
/// 1.0 s`.
pub(super) fn per(kind: &str, quota: Quota) -> String {
    let period = duration(quota.period());
    let mut text = format!("{} per {period}", quota.limit());
    if kind == Algorithm::Gcra.kind() {
        let most = Algorithm::Gcra.policy_limit(&quota);
        text.push_str(&format!(
            ", burst {}: at most {most} in any {period}",
            quota.burst()
        ));
    }
    text
}

fn used(info: &LimiterInfo) -> String {
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
        Usage::Lease { leases_held } => {
            format!("{leases_held} lease(s) held{}", within("idle set expires"))
        }
        Usage::Counter { value } => format!("value {value}{}", within("idle counter expires")),
        // The TTL is the override's or the block's, said by `state`.
        Usage::Unused => "unused: no state, the whole quota is available".to_owned(),
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

/// A whole number with thousands separators: `1,234,567`.
pub(super) fn thousands(n: impl TryInto<u64>) -> String {
    let n: u64 = n.try_into().unwrap_or(u64::MAX);
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `n` of `noun`, as a person writes it: `1 key`, `2 keys`, `12,345 keys`
/// (the plural adds an `s`).
pub(super) fn count(n: impl TryInto<u64>, noun: &str) -> String {
    let n = n.try_into().unwrap_or(u64::MAX);
    let s = if n == 1 { "" } else { "s" };
    format!("{} {noun}{s}", thousands(n))
}

/// A share from 0 to 1 in whole percent, rounded down so only a finished
/// walk reads `100%`; `under 1%` once it has begun.
pub(super) fn percent(share: f64) -> String {
    if share >= 1.0 {
        "100%".to_owned()
    } else if share > 0.0 && share < 0.01 {
        "under 1%".to_owned()
    } else {
        format!("{:.0}%", (share.max(0.0) * 100.0).floor().min(99.0))
    }
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

    #[test]
    fn shares_read_down_to_whole_percent() {
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(0.001), "under 1%");
        assert_eq!(percent(0.376), "37%");
        assert_eq!(percent(0.9999), "99%");
        assert_eq!(percent(1.0), "100%");
    }

    #[test]
    fn counts_read_as_written() {
        assert_eq!(count(0, "key"), "0 keys");
        assert_eq!(count(1, "key"), "1 key");
        assert_eq!(count(2, "key"), "2 keys");
        assert_eq!(count(1_234_567, "key"), "1,234,567 keys");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(100_000), "100,000");
    }

    fn info(usage: Usage, ttl: Option<u64>) -> LimiterInfo {
        named("k", "n", usage, ttl)
    }

    fn named(kind: &str, name: &str, usage: Usage, ttl: Option<u64>) -> LimiterInfo {
        let mut info = LimiterInfo::new(kind, name, "s", usage);
        info.node = "127.0.0.1:7000".into();
        info.ttl = ttl.map(Duration::from_millis);
        info
    }

    fn remaining(info: &LimiterInfo, quotas: &Quotas) -> Option<(u64, bool)> {
        quotas.headroom(info).map(|h| (h.remaining, h.exact))
    }

    #[test]
    fn remaining_needs_the_quota() {
        use std::num::NonZeroU32;
        let mut quotas = Quotas::new();
        let fw = named("fw", "api", Usage::FixedWindow { used: 7 }, Some(12_300));
        assert_eq!(remaining(&fw, &quotas), None);
        quotas.give("api", Quota::per_minute(NonZeroU32::new(10).unwrap()));
        assert_eq!(
            state(&fw, &quotas),
            "3/10 remaining, full in 12.3 s; 7 used this window, resets in 12.3 s"
        );
        // 10 a minute: one unit per 6 s. A TAT 13 s ahead: 2 units used
        // (and part of a third), so floor((60 - 13) / 6) = 7 remain.
        let gcra = named(
            "gcra",
            "api",
            Usage::Gcra {
                theoretical_arrival_us: 0,
            },
            Some(13_000),
        );
        assert_eq!(remaining(&gcra, &quotas), Some((7, true)));
        let slog = named("slog", "api", Usage::SlidingLog { entries: 4 }, Some(1_000));
        assert_eq!(remaining(&slog, &quotas), Some((6, false)));
    }

    #[test]
    fn an_override_and_a_block_are_said_and_the_override_counts() {
        use std::num::NonZeroU32;
        let mut fw = named("fw", "api", Usage::FixedWindow { used: 2 }, Some(1_000));
        fw.settings.override_quota = Some(Quota::per_hour(NonZeroU32::new(5).unwrap()));
        fw.settings.override_ttl = Some(Duration::from_secs(86_400));
        fw.settings.blocked_for = Some(Duration::from_secs(59));
        // No quota given to the router: the override's is known.
        assert_eq!(
            state(&fw, &Quotas::new()),
            "3/5 remaining, at limit, full in 59.0 s; 2 used this window, resets in 1.0 s; \
             blocked for 59.0 s; override 5 per 1 h 0 min for 1 d 0 h"
        );
        let mut unused = fw.clone();
        unused.usage = Usage::Unused;
        assert_eq!(remaining(&unused, &Quotas::new()), Some((5, true)));
        assert!(
            state(&unused, &Quotas::new())
                .starts_with("5/5 remaining, at limit, full in 59.0 s; unused: no state"),
            "{}",
            state(&unused, &Quotas::new())
        );
    }

    #[test]
    fn states_read_as_sentences() {
        assert_eq!(
            used(&info(Usage::FixedWindow { used: 7 }, Some(12_300))),
            "7 used this window, resets in 12.3 s"
        );
        assert_eq!(
            used(&info(
                Usage::Lock {
                    held: true,
                    fencing_token: Some(42)
                },
                Some(29_000)
            )),
            "held, fencing token 42, frees itself in 29.0 s"
        );
        assert_eq!(
            used(&info(Usage::Lease { leases_held: 2 }, Some(61_000))),
            "2 lease(s) held, idle set expires in 1 min 1 s"
        );
        assert_eq!(
            used(&info(Usage::Counter { value: 30 }, None)),
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
