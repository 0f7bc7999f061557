//! The JSON forms of what the pages show (the `/api/…` routes).

use serde_json::{Value, json};

use super::words::{self, Quotas};
use shardlimit::admin::{self, LimiterInfo};

/// A subject: its text when it is UTF-8, else `{"hex": "…"}`.
pub(super) fn subject(subject: &[u8]) -> Value {
    admin::json::subject(subject)
}

/// One primitive as [`admin::json::limiter`] gives it, with its headroom
/// (`remaining`, `limit`, `at_limit`, `full_in_ms`, … when the quota is
/// known; see [`admin::json::headroom`]) and the state in words.
pub(super) fn limiter(info: &LimiterInfo, quotas: &Quotas) -> Value {
    let mut value = admin::json::limiter(info);
    admin::json::add_headroom(&mut value, quotas.headroom(info).as_ref());
    value["words"] = json!(words::state(info, quotas));
    value
}

/// A key, as text (lossy for binary keys).
pub(super) fn key(key: &[u8]) -> Value {
    json!(String::from_utf8_lossy(key))
}
