//! The JSON form of what the scanner finds, defined once: `shardlimit list
//! --json` prints it, the Limits page's `/api/…` routes serve it (with the
//! words and units left they add).

use std::time::Duration;

use serde_json::{Value, json};

use super::catalog::{Headroom, QuotaSource};
use super::info::LimiterInfo;
use super::throttled::ThrottledName;
use crate::limit::SubjectSettings;
use crate::usage::Usage;

/// One primitive: `kind`, `name`, `subject` (its text when it is UTF-8,
/// else `{"hex": "…"}`), `slot`, `node`, `ttl_ms` (`null`: no TTL),
/// `state` (the typed usage, named as [`Usage`]'s fields are),
/// `override` (see [`override_of`]) and `blocked_for_ms` (`null`: not
/// blocked).
///
/// ```
/// # #[cfg(feature = "json")] {
/// use shardlimit::admin::{LimiterInfo, Usage, json};
/// # fn show(info: &LimiterInfo) {
/// let value = json::limiter(info);
/// if let Usage::Lease { leases_held } = info.usage {
///     assert_eq!(value["state"]["leases_held"], leases_held);
/// }
/// # }
/// # }
/// ```
#[must_use]
pub fn limiter(info: &LimiterInfo) -> Value {
    json!({
        "kind": info.kind,
        "name": info.name,
        "subject": subject(&info.subject),
        "slot": info.slot,
        "node": info.node,
        "ttl_ms": info.ttl.map(millis),
        "state": usage(&info.usage),
        "override": override_of(&info.settings),
        "blocked_for_ms": info.settings.blocked_for.map(millis),
    })
}

/// Adds a rate limiter's headroom to its object (see [`limiter`]):
/// `remaining`, `limit`, `remaining_exact`, `at_limit`, `full_in_ms`,
/// `quota_source` (`override`, `given` or `published`) and
/// `specs_published` (how many specs the catalog holds for it; 0 unless
/// published) — each `null` when the quota is not known.
///
/// ```
/// # #[cfg(feature = "json")] {
/// use shardlimit::admin::{Catalog, LimiterInfo, json};
/// # fn show(info: &LimiterInfo, catalog: &Catalog) {
/// let mut value = json::limiter(info);
/// json::add_headroom(&mut value, catalog.headroom(info).as_ref());
/// println!("{} of {}", value["remaining"], value["limit"]);
/// # }
/// # }
/// ```
pub fn add_headroom(value: &mut Value, headroom: Option<&Headroom>) {
    let field = |f: fn(&Headroom) -> Value| headroom.map_or(Value::Null, f);
    value["remaining"] = field(|h| json!(h.remaining));
    value["limit"] = field(|h| json!(h.limit));
    value["remaining_exact"] = field(|h| json!(h.exact));
    value["at_limit"] = field(|h| json!(h.at_limit));
    value["full_in_ms"] = field(|h| json!(millis(h.full_in)));
    value["quota_source"] = field(|h| {
        json!(match h.source {
            QuotaSource::Override => "override",
            QuotaSource::Given => "given",
            QuotaSource::Published { .. } => "published",
        })
    });
    value["specs_published"] = field(|h| match h.source {
        QuotaSource::Published { specs } => json!(specs),
        _ => json!(0),
    });
}

/// A usage, its fields named as [`Usage`]'s are.
#[must_use]
pub fn usage(usage: &Usage) -> Value {
    match usage {
        Usage::FixedWindow { used } => json!({ "used": used }),
        Usage::SlidingLog { entries } => json!({ "entries": entries }),
        Usage::SlidingWindow { current, previous } => {
            json!({ "current": current, "previous": previous })
        }
        Usage::Gcra {
            theoretical_arrival_us,
        } => json!({ "theoretical_arrival_us": theoretical_arrival_us }),
        Usage::Lease { leases_held } => json!({ "leases_held": leases_held }),
        Usage::Lock {
            held,
            fencing_token,
        } => json!({ "held": held, "fencing_token": fencing_token }),
        Usage::Counter { value } => json!({ "value": value }),
        Usage::Unused => json!({ "unused": true }),
        Usage::Other { redis_type } => json!({ "redis_type": redis_type }),
    }
}

/// A subject's override of a rate limiter: `{"limit": 5, "period_ms":
/// 3600000, "burst": 5, "ttl_ms": 86399000}`, or `null` when it has none.
#[must_use]
pub fn override_of(settings: &SubjectSettings) -> Value {
    match &settings.override_quota {
        Some(quota) => json!({
            "limit": quota.limit().get(),
            "period_ms": millis(quota.period()),
            "burst": quota.burst().get(),
            "ttl_ms": settings.override_ttl.map(millis),
        }),
        None => Value::Null,
    }
}

/// One limiter kind and name of the throttled view: `kind`, `name`,
/// `processes`, `window_ms`, `covered_ms`, `interval_ms` (what the
/// per-second rates cover), `allowed_per_sec`, `denied_per_sec`,
/// `cached_per_sec`, `bypassed_per_sec`, `denials`, `floor` and
/// `subjects`, each `{"subject", "denials", "error", "denials_per_sec"}`,
/// most denied first.
#[must_use]
pub fn throttled(name: &ThrottledName) -> Value {
    json!({
        "kind": name.kind,
        "name": name.name,
        "processes": name.processes,
        "window_ms": millis(name.window),
        "covered_ms": millis(name.covered),
        "interval_ms": millis(name.interval),
        "allowed_per_sec": name.allowed_per_sec,
        "denied_per_sec": name.denied_per_sec,
        "cached_per_sec": name.cached_per_sec,
        "bypassed_per_sec": name.bypassed_per_sec,
        "denials": name.denials,
        "floor": name.floor,
        "subjects": name.subjects.iter().map(|s| json!({
            "subject": subject(&s.subject),
            "denials": s.denials,
            "error": s.error,
            "denials_per_sec": s.denials_per_sec,
        })).collect::<Vec<_>>(),
    })
}

/// A subject: its text when it is UTF-8, else `{"hex": "…"}`.
#[must_use]
pub fn subject(subject: &[u8]) -> Value {
    match std::str::from_utf8(subject) {
        Ok(text) => json!(text),
        Err(_) => {
            let hex: String = subject.iter().map(|b| format!("{b:02x}")).collect();
            json!({ "hex": hex })
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
