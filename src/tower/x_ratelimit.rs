//! The older `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset` fields, as GitHub sends them: one value each, for the
//! binding limit; the reset as UTC epoch seconds.
//!
//! ```text
//! X-RateLimit-Limit: 60
//! X-RateLimit-Remaining: 0
//! X-RateLimit-Reset: 1796218967
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue};

use super::headers::{available, ceil_secs};
use crate::limit::Decision;

/// `X-RateLimit-Limit`: the most one burst may take (the limit, or a GCRA's
/// burst), so that `Remaining` never exceeds it.
pub(crate) static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub(crate) static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: when `wait` is over, in UTC epoch seconds rounded
/// up, on this host's clock.
pub(crate) static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Sets the three fields from `decision` (the binding limit) and `wait`
/// (its `t`, with jitter). These fields hold one value, not a list: with
/// stacked layers the tightest wins — the fields already on the response
/// (an inner layer's) stay if they leave no more remaining than these.
pub(crate) fn add(h: &mut HeaderMap, decision: &Decision, wait: Duration) {
    let ours = available(decision);
    let theirs = h
        .get(&X_REMAINING)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if theirs.is_some_and(|theirs| theirs <= u64::from(ours)) {
        return;
    }
    h.insert(X_LIMIT.clone(), HeaderValue::from(decision.limit));
    h.insert(X_REMAINING.clone(), HeaderValue::from(ours));
    h.insert(
        X_RESET.clone(),
        HeaderValue::from(reset_at(SystemTime::now(), wait)),
    );
}

/// `now + wait` in epoch seconds, rounded up (never early).
fn reset_at(now: SystemTime, wait: Duration) -> u64 {
    ceil_secs(now.duration_since(UNIX_EPOCH).unwrap_or_default() + wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_is_epoch_seconds_rounded_up() {
        let now = UNIX_EPOCH + Duration::from_millis(1_796_218_960_250);
        assert_eq!(reset_at(now, Duration::from_millis(6_750)), 1_796_218_967);
        assert_eq!(reset_at(now, Duration::from_millis(6_751)), 1_796_218_968);
        assert_eq!(reset_at(now, Duration::ZERO), 1_796_218_961);
    }
}
