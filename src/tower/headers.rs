//! The response header fields: `Retry-After` (RFC 9110) and `RateLimit-Policy`
//! / `RateLimit` as defined by draft-ietf-httpapi-ratelimit-headers-11
//! (structured-field lists, one item per limit, named after the limiter):
//!
//! ```text
//! RateLimit-Policy: "api";q=60;w=60
//! RateLimit: "api";r=0;t=17
//! ```
//!
//! * `q` is the limit per window `w` (seconds). A period that is not a whole
//!   number of seconds cannot be a `w` (sub-second precision is not
//!   supported by the draft): it goes in `shardlimit-window-ms` instead. A
//!   GCRA burst above the limit is `shardlimit-burst` (vendor-prefixed, as
//!   the draft asks of implementation-specific parameters).
//! * `r` is the remaining quota; `t` the seconds, rounded up, until the
//!   request would be admitted (a limit that denied it) or until the limit is
//!   full again (one that admitted it). `Retry-After` is the longest wait of
//!   the limits that denied, so it is never earlier than a denying limit's
//!   `t`, as the draft asks.
//! * No partition key (`pk`): the key is the client's identity (an IP
//!   address, an API key) and has no business in a response.

use std::fmt::{self, Write as _};
use std::time::Duration;

use http::HeaderValue;
use http::header::HeaderName;

use crate::limit::{Decision, Quota, RateLimiter};

/// `RateLimit-Policy` (header names are lowercase in `http`; HTTP/2 and
/// HTTP/3 require it and HTTP/1.1 field names are case-insensitive).
pub(crate) static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub(crate) static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Whole seconds, rounded up: a client that waits this long is never early.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The quota and capacity each of `limiters` has now: what a layer's
/// `RateLimit-Policy` is built from once.
pub(crate) fn quotas(limiters: &[RateLimiter]) -> Vec<(Quota, u32)> {
    limiters.iter().map(|l| (l.quota(), l.capacity())).collect()
}

/// The `RateLimit-Policy` value of named limits, each with its quota and
/// capacity.
pub(crate) fn policy<'a>(items: impl IntoIterator<Item = (&'a str, Quota, u32)>) -> HeaderValue {
    let mut out = String::new();
    for (i, (name, quota, capacity)) in items.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        // Writing to a String cannot fail.
        let _ = write_policy_item(&mut out, name, quota, capacity);
    }
    // Limiter names are [A-Za-z0-9_.-], numbers are digits: always a valid
    // header value. Fall back to nothing rather than panic if that changes.
    HeaderValue::from_str(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn write_policy_item(
    out: &mut impl fmt::Write,
    name: &str,
    quota: Quota,
    capacity: u32,
) -> fmt::Result {
    write!(out, "\"{name}\";q={}", quota.limit())?;
    let period = quota.period();
    if period.subsec_nanos() == 0 {
        write!(out, ";w={}", period.as_secs())?;
    } else {
        write!(out, ";shardlimit-window-ms={}", period.as_millis())?;
    }
    if capacity != quota.limit().get() {
        write!(out, ";shardlimit-burst={capacity}")?;
    }
    Ok(())
}

/// The `RateLimit` value for one check: one item per limit, in order.
pub(crate) fn ratelimit<'a>(items: impl Iterator<Item = (&'a str, &'a Decision)>) -> HeaderValue {
    let mut buf = HeaderBuf::new();
    for (i, (name, decision)) in items.enumerate() {
        let t = match decision.retry_after {
            Some(wait) if !decision.allowed => wait,
            _ => decision.reset_after,
        };
        let sep = if i > 0 { ", " } else { "" };
        // HeaderBuf never fails.
        let _ = write!(
            buf,
            "{sep}\"{name}\";r={};t={}",
            decision.remaining,
            ceil_secs(t)
        );
    }
    buf.finish()
}

/// `Retry-After` in seconds, at least 1.
pub(crate) fn retry_after(wait: Option<Duration>) -> HeaderValue {
    HeaderValue::from(ceil_secs(wait.unwrap_or(Duration::ZERO)).max(1))
}

/// A header value built on the stack and copied once into the
/// `HeaderValue` (its only allocation); it spills to the heap only past
/// `STACK` bytes (about three limits).
struct HeaderBuf {
    stack: [u8; HeaderBuf::STACK],
    len: usize,
    heap: Option<Vec<u8>>,
}

impl HeaderBuf {
    const STACK: usize = 320;

    fn new() -> Self {
        HeaderBuf {
            stack: [0; Self::STACK],
            len: 0,
            heap: None,
        }
    }

    fn finish(self) -> HeaderValue {
        let bytes = match &self.heap {
            Some(heap) => heap.as_slice(),
            None => &self.stack[..self.len],
        };
        HeaderValue::from_bytes(bytes).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

impl fmt::Write for HeaderBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Some(heap) = &mut self.heap {
            heap.extend_from_slice(s.as_bytes());
        } else if let Some(room) = self.stack.get_mut(self.len..self.len + s.len()) {
            room.copy_from_slice(s.as_bytes());
            self.len += s.len();
        } else {
            let mut heap = Vec::with_capacity(self.len + s.len() + Self::STACK);
            heap.extend_from_slice(&self.stack[..self.len]);
            heap.extend_from_slice(s.as_bytes());
            self.heap = Some(heap);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn policy_item(name: &str, quota: Quota, capacity: u32) -> String {
        let mut s = String::new();
        write_policy_item(&mut s, name, quota, capacity).unwrap();
        s
    }

    fn decision(allowed: bool, remaining: u32, retry_ms: Option<u64>, reset_ms: u64) -> Decision {
        let mut d = Decision::bypass(
            crate::Quota::per_second(10),
            10,
            crate::BypassReason::Timeout,
        );
        d.allowed = allowed;
        d.remaining = remaining;
        d.retry_after = retry_ms.map(Duration::from_millis);
        d.reset_after = Duration::from_millis(reset_ms);
        d.bypassed = None;
        d
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after(Some(Duration::from_millis(16_200))), "17");
        assert_eq!(retry_after(Some(Duration::ZERO)), "1");
        assert_eq!(retry_after(None), "1");
    }

    #[test]
    fn policy_items() {
        let q = Quota::per_minute(nz(60));
        assert_eq!(policy_item("api", q, 60), "\"api\";q=60;w=60");
        let bursty = Quota::per_second(nz(10)).allow_burst(nz(50));
        assert_eq!(
            policy_item("ip", bursty, 50),
            "\"ip\";q=10;w=1;shardlimit-burst=50"
        );
        let fast = Quota::with_period(nz(5), Duration::from_millis(1500));
        assert_eq!(
            policy_item("f", fast, 5),
            "\"f\";q=5;shardlimit-window-ms=1500"
        );
    }

    #[test]
    fn ratelimit_items() {
        let denied = decision(false, 0, Some(16_200), 60_000);
        let allowed = decision(true, 7, None, 2_500);
        assert_eq!(
            ratelimit([("api", &denied)].into_iter()),
            "\"api\";r=0;t=17"
        );
        assert_eq!(
            ratelimit([("a", &allowed), ("b", &denied)].into_iter()),
            "\"a\";r=7;t=3, \"b\";r=0;t=17"
        );
    }

    #[test]
    fn long_values_spill_to_the_heap() {
        let allowed = decision(true, u32::MAX, None, u64::MAX / 1_000_000);
        let name = "n".repeat(64);
        let items: Vec<_> = (0..10).map(|_| (name.as_str(), &allowed)).collect();
        let value = ratelimit(items.into_iter());
        let text = value.to_str().unwrap();
        assert_eq!(text.matches(";r=4294967295;").count(), 10);
        assert!(text.len() > HeaderBuf::STACK);
    }
}
