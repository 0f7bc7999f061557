//! The JSON forms of what the pages show (the `/api/…` routes).

use serde_json::{Value, json};

use super::csrf::hex;
use super::words::{self, Quotas};
use crate::admin::{LimiterInfo, Usage};

/// A subject: its text when it is UTF-8, else `{"hex": "…"}`.
pub(super) fn subject(subject: &[u8]) -> Value {
    match std::str::from_utf8(subject) {
        Ok(text) => json!(text),
        Err(_) => json!({ "hex": hex(subject) }),
    }
}

/// One primitive: kind, name, subject, slot, node, TTL in milliseconds
/// (`null`: no TTL), the typed state, a rate limiter's override and block
/// for the subject (`null`: none), the units remaining (when the quota is
/// known) and the state in words.
pub(super) fn limiter(info: &LimiterInfo, quotas: &Quotas) -> Value {
    let state = match &info.usage {
        Usage::FixedWindow { used } => json!({ "used": used }),
        Usage::SlidingLog { entries } => json!({ "entries": entries }),
        Usage::SlidingWindow { current, previous } => {
            json!({ "current": current, "previous": previous })
        }
        Usage::Gcra {
            theoretical_arrival_us,
        } => json!({ "theoretical_arrival_us": theoretical_arrival_us }),
        Usage::Lease { holders } => json!({ "permits_in_use": holders }),
        Usage::Lock {
            held,
            fencing_token,
        } => json!({ "held": held, "fencing_token": fencing_token }),
        Usage::Counter { value } => json!({ "value": value }),
        Usage::Unused => json!({ "unused": true }),
        Usage::Other { redis_type } => json!({ "redis_type": redis_type }),
    };
    let settings = &info.settings;
    let overridden = settings.override_quota.map(|quota| {
        json!({
            "limit": quota.limit().get(),
            "period_ms": words::millis(quota.period()),
            "burst": quota.burst().get(),
            "ttl_ms": settings.override_ttl.map(words::millis),
        })
    });
    json!({
        "kind": info.kind,
        "name": info.name,
        "subject": subject(&info.subject),
        "slot": info.slot,
        "node": info.node,
        "ttl_ms": info.ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        "state": state,
        "override": overridden,
        "blocked_for_ms": settings.blocked_for.map(words::millis),
        "remaining": words::remaining(info, quotas).map(|(n, _)| n),
        "words": words::state(info, quotas),
    })
}

/// A key, as text (lossy for binary keys).
pub(super) fn key(key: &[u8]) -> Value {
    json!(String::from_utf8_lossy(key))
}
