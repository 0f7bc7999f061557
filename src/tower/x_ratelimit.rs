//! The older `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset` fields, as GitHub sends them: one value each, for the
//! binding limit; the reset as UTC epoch seconds.
//!
//! ```text
//! X-RateLimit-Limit: 60
//! X-RateLimit-Remaining: 0
//! X-RateLimit-Reset: 1796218967
//! ```

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue};

/// `X-RateLimit-Limit`: the most one burst may take (the limit, or a GCRA's
/// burst), so that `Remaining` never exceeds it.
pub(crate) static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub(crate) static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: when the wait is over, in UTC epoch seconds rounded
/// up, on this host's clock.
pub(crate) static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Sets the three fields of the binding limit: its `limit`, the
/// `remaining` it states, and the epoch second its wait ends (`reset`).
/// These fields hold one value, not a list: with stacked layers the
/// tightest wins — the fields already on the response (an inner layer's)
/// stay if they leave no more remaining than these.
pub(crate) fn add(h: &mut HeaderMap, limit: u32, remaining: u32, reset: u64) {
    let theirs = h
        .get(&X_REMAINING)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if theirs.is_some_and(|theirs| theirs <= u64::from(remaining)) {
        return;
    }
    h.insert(X_LIMIT.clone(), HeaderValue::from(limit));
    h.insert(X_REMAINING.clone(), HeaderValue::from(remaining));
    h.insert(X_RESET.clone(), HeaderValue::from(reset));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(h: &HeaderMap) -> Vec<&str> {
        [&X_LIMIT, &X_REMAINING, &X_RESET]
            .iter()
            .map(|name| h.get(*name).unwrap().to_str().unwrap())
            .collect()
    }

    #[test]
    fn stacked_layers_leave_the_tightest_values() {
        let mut h = HeaderMap::new();
        add(&mut h, 5, 4, 100);
        assert_eq!(fields(&h), ["5", "4", "100"]);
        // An outer layer with more left, or as much: the inner one's stay.
        add(&mut h, 10, 9, 200);
        add(&mut h, 10, 4, 200);
        assert_eq!(fields(&h), ["5", "4", "100"]);
        // One with fewer left replaces all three, never adds a value.
        add(&mut h, 10, 3, 200);
        assert_eq!(fields(&h), ["10", "3", "200"]);
        assert_eq!(h.get_all(&X_REMAINING).iter().count(), 1);
    }
}
