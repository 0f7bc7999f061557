//! The response header fields: `Retry-After` (RFC 9110), and the fields of
//! the configured [`HeaderStyle`](super::HeaderStyle) — `RateLimit-Policy`
//! and `RateLimit` as draft-ietf-httpapi-ratelimit-headers-11 defines them
//! (structured-field lists, one item per limit, named after the limiter),
//! or the older `X-RateLimit-*` fields (`x_ratelimit.rs`):
//!
//! ```text
//! RateLimit-Policy: "api-1s";q=10;w=1, "api-1h";q=1000;w=3600
//! RateLimit: "api-1s";r=0;t=1
//! ```
//!
//! * `RateLimit-Policy` (draft §3) lists every limit: `q` what it admits per
//!   window `w` (seconds, §3.1.3) as [`Algorithm::policy_limit`] says, so
//!   that it holds — for GCRA the limit plus the burst less one, in any
//!   window of `w`. A period that is not a whole number of
//!   seconds cannot be a `w` ("sub-second precision is not supported"): it
//!   goes in `shardlimit-window-ms` instead. A GCRA's burst is
//!   `shardlimit-burst` (vendor-prefixed, as §3.1 asks of
//!   implementation-specific parameters). `qu` (§3.1.2) only when the unit
//!   is not the default `requests`.
//! * `RateLimit` (§4) names the binding limit only — the one that denied
//!   with the longest wait, or the one closest to exhaustion — as §B.1.2
//!   allows: `r` the remaining quota; `t` the seconds, rounded up, until the
//!   request would be admitted (a limit that denied it) or until more than
//!   `r` is free (one that admitted it: the draft's effective window,
//!   [`Decision::more_after`]). `Retry-After` is a denial's wait, so it is
//!   never earlier than `t` (§6).
//! * `pk` (§3.1.4, §4.1.3), a byte sequence, only when the layer is told
//!   the key may be shown: it is the client's identity (an IP address, an
//!   API key) or its digest.
//! * Jitter (§8.5): one random delay per response, added to every wait the
//!   response states (`t`, `Retry-After`, `X-RateLimit-Reset`), so clients
//!   throttled together do not all come back in the same second. Only ever
//!   added: a client that waits what it is told is never early.

use std::fmt::{self, Write as _};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue};

use super::buf::HeaderBuf;
use super::config::{Config, QuotaUnit};
use super::x_ratelimit;
use crate::limit::MultiDecision;
use crate::limit::{Algorithm, Decision, Quota, RateLimiter};

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

/// Adds the rate-limit fields of `config`'s style for one decided check of
/// `subject`, its waits lengthened by `jitter`. Appends (not inserts) the
/// IETF fields: with one layer per key — per IP, then per API key — every
/// layer's items are listed, as the draft allows a list to be split over
/// several fields (§3, §4).
pub(crate) fn add(
    h: &mut HeaderMap,
    config: &Config,
    verdict: &MultiDecision,
    subject: &[u8],
    jitter: Duration,
) {
    let decisions = &verdict.decisions;
    let binding = verdict.binding_index();
    let (Some(limiter), Some(decision)) = (
        config.limits.limiters().get(binding),
        decisions.get(binding),
    ) else {
        return;
    };
    let wait = stated_wait(decision) + jitter;
    if config.style.ietf() {
        let pk = config.show_partition_key.then_some(subject);
        h.append(RATELIMIT_POLICY.clone(), policy_for(config, decisions, pk));
        h.append(
            RATELIMIT.clone(),
            ratelimit(limiter.name(), decision, ceil_secs(wait), pk),
        );
    }
    if config.style.x_ratelimit() {
        let reset = reset_at(SystemTime::now(), wait);
        x_ratelimit::add(h, decision.limit, available(decision), reset);
    }
}

/// `now + wait` in epoch seconds, rounded up (never early).
fn reset_at(now: SystemTime, wait: Duration) -> u64 {
    ceil_secs(now.duration_since(UNIX_EPOCH).unwrap_or_default() + wait)
}

/// The wait a limit's `t` states: until the request would be admitted, for
/// a limit that denied it (`Retry-After`'s wait); until more than its `r` is
/// free, for one that admitted it — the draft's effective window, within
/// which the client can use no more than `r` (§4.1.2).
fn stated_wait(d: &Decision) -> Duration {
    match d.retry_after {
        Some(wait) if !d.allowed => wait,
        _ => d.more_after,
    }
}

/// The quota a limit states as available (`r`, `X-RateLimit-Remaining`):
/// what it has left, but nothing while it blocks the subject — its unused
/// units are not the client's to use until the block ends.
fn available(d: &Decision) -> u32 {
    if d.blocked { 0 } else { d.remaining }
}

/// `RateLimit-Policy` for one check: the layer's prebuilt value, unless the
/// check applied other quotas (a subject's override, a `set_quota` since
/// the layer was built) or the partition key is shown.
fn policy_for(config: &Config, decisions: &[Decision], pk: Option<&[u8]>) -> HeaderValue {
    let as_built = decisions
        .iter()
        .map(|d| (d.quota, d.limit))
        .eq(config.policy_quotas.iter().copied());
    if as_built && pk.is_none() {
        return config.policy.clone();
    }
    let limiters = config.limits.limiters().iter();
    policy(
        limiters
            .zip(decisions)
            .map(|(l, d)| (l.name(), l.algorithm(), d.quota, d.limit)),
        config.unit,
        pk,
    )
}

/// The `RateLimit-Policy` value of named limits, each with its algorithm,
/// quota and capacity, counted in `unit`, with the partition key `pk` if
/// shown.
pub(crate) fn policy<'a>(
    items: impl IntoIterator<Item = (&'a str, Algorithm, Quota, u32)>,
    unit: QuotaUnit,
    pk: Option<&[u8]>,
) -> HeaderValue {
    let mut buf = HeaderBuf::new();
    for (i, (name, algorithm, quota, capacity)) in items.into_iter().enumerate() {
        let sep = if i > 0 { ", " } else { "" };
        // HeaderBuf never fails.
        let _ = buf.write_str(sep);
        let _ = write_policy_item(&mut buf, name, algorithm, quota, capacity, unit, pk);
    }
    buf.finish()
}

/// One quota policy item (§3.1): parameters in the order of the draft's
/// examples (`q`, `qu`, `w`, `pk`), then ours. `q` is what the algorithm
/// advertises per period ([`Algorithm::policy_limit`]): for GCRA the
/// limit plus the burst less one, which holds in any window of `w`, and
/// `shardlimit-burst` the most at once.
fn write_policy_item(
    out: &mut HeaderBuf,
    name: &str,
    algorithm: Algorithm,
    quota: Quota,
    capacity: u32,
    unit: QuotaUnit,
    pk: Option<&[u8]>,
) -> fmt::Result {
    // Limiter names are [A-Za-z0-9_.-]: a valid sf-string as they are.
    let quota = if algorithm == Algorithm::Gcra {
        quota.allow_burst(capacity)
    } else {
        quota
    };
    write!(out, "\"{name}\";q={}", algorithm.policy_limit(&quota))?;
    if unit != QuotaUnit::Requests {
        write!(out, ";qu=\"{}\"", unit.as_str())?;
    }
    let period = quota.period();
    let whole_seconds = period.subsec_nanos() == 0;
    if whole_seconds {
        write!(out, ";w={}", period.as_secs())?;
    }
    if let Some(key) = pk {
        out.write_str(";pk=")?;
        out.write_byte_sequence(key);
    }
    if !whole_seconds {
        write!(out, ";shardlimit-window-ms={}", period.as_millis())?;
    }
    if algorithm == Algorithm::Gcra {
        write!(out, ";shardlimit-burst={capacity}")?;
    }
    Ok(())
}

/// The `RateLimit` value: the binding limit's service-limit item (§4.1).
fn ratelimit(name: &str, decision: &Decision, t: u64, pk: Option<&[u8]>) -> HeaderValue {
    let mut buf = HeaderBuf::new();
    // HeaderBuf never fails.
    let _ = write!(buf, "\"{name}\";r={};t={t}", available(decision));
    if let Some(key) = pk {
        let _ = buf.write_str(";pk=");
        buf.write_byte_sequence(key);
    }
    buf.finish()
}

/// `Retry-After` in seconds, at least 1: `wait` plus the response's jitter.
pub(crate) fn retry_after(wait: Option<Duration>, jitter: Duration) -> HeaderValue {
    HeaderValue::from(ceil_secs(wait.unwrap_or(Duration::ZERO) + jitter).max(1))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn policy_item(
        name: &str,
        algorithm: Algorithm,
        quota: Quota,
        capacity: u32,
        unit: QuotaUnit,
        pk: Option<&[u8]>,
    ) -> String {
        let mut buf = HeaderBuf::new();
        write_policy_item(&mut buf, name, algorithm, quota, capacity, unit, pk).unwrap();
        buf.finish().to_str().unwrap().to_owned()
    }

    fn decision(allowed: bool, remaining: u32, retry_ms: Option<u64>, more_ms: u64) -> Decision {
        let mut d = Decision::bypass(
            crate::Quota::per_second(10),
            10,
            crate::policy::BypassReason::Timeout,
        );
        d.allowed = allowed;
        d.remaining = remaining;
        d.retry_after = retry_ms.map(Duration::from_millis);
        d.reset_after = Duration::from_secs(60);
        d.more_after = Duration::from_millis(more_ms);
        d.bypassed = None;
        d
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        let none = Duration::ZERO;
        assert_eq!(retry_after(Some(Duration::from_millis(16_200)), none), "17");
        assert_eq!(retry_after(Some(Duration::ZERO), none), "1");
        assert_eq!(retry_after(None, none), "1");
        let jitter = Duration::from_millis(2_900);
        assert_eq!(
            retry_after(Some(Duration::from_millis(16_200)), jitter),
            "20"
        );
    }

    #[test]
    fn the_reset_is_epoch_seconds_rounded_up() {
        let now = UNIX_EPOCH + Duration::from_millis(1_796_218_960_250);
        assert_eq!(reset_at(now, Duration::from_millis(6_750)), 1_796_218_967);
        assert_eq!(reset_at(now, Duration::from_millis(6_751)), 1_796_218_968);
        assert_eq!(reset_at(now, Duration::ZERO), 1_796_218_961);
    }

    #[test]
    fn policy_items() {
        let requests = QuotaUnit::Requests;
        let (log, gcra) = (Algorithm::SlidingLog, Algorithm::Gcra);
        let q = Quota::per_minute(nz(60));
        assert_eq!(
            policy_item("api", log, q, 60, requests, None),
            "\"api\";q=60;w=60"
        );
        // GCRA: what it admits in any window of w, a burst then the rate.
        assert_eq!(
            policy_item("api", gcra, q, 60, requests, None),
            "\"api\";q=119;w=60;shardlimit-burst=60"
        );
        assert_eq!(
            policy_item("api", gcra, q.allow_burst(nz(1)), 1, requests, None),
            "\"api\";q=60;w=60;shardlimit-burst=1"
        );
        let bursty = Quota::per_second(nz(10)).allow_burst(nz(50));
        assert_eq!(
            policy_item("ip", gcra, bursty, 50, requests, None),
            "\"ip\";q=59;w=1;shardlimit-burst=50"
        );
        let fast = Quota::with_period(nz(5), Duration::from_millis(1500));
        assert_eq!(
            policy_item("f", log, fast, 5, requests, None),
            "\"f\";q=5;shardlimit-window-ms=1500"
        );
        // The draft's own example (§3.2), our names and numbers.
        let bytes = Quota::with_period(nz(65535), Duration::from_secs(10));
        assert_eq!(
            policy_item(
                "peruser",
                Algorithm::FixedWindow,
                bytes,
                65535,
                QuotaUnit::ContentBytes,
                Some(b"user-1")
            ),
            "\"peruser\";q=65535;qu=\"content-bytes\";w=10;pk=:dXNlci0x:"
        );
        assert_eq!(
            policy_item(
                "f",
                gcra,
                fast,
                6,
                QuotaUnit::ConcurrentRequests,
                Some(b"k")
            ),
            "\"f\";q=10;qu=\"concurrent-requests\";pk=:aw==:;shardlimit-window-ms=1500;shardlimit-burst=6"
        );
    }

    #[test]
    fn ratelimit_items() {
        let denied = decision(false, 0, Some(16_200), 60_000);
        assert_eq!(ratelimit("api", &denied, 17, None), "\"api\";r=0;t=17");
        assert_eq!(
            ratelimit("api", &denied, 17, Some(b"203.0.113.7")),
            "\"api\";r=0;t=17;pk=:MjAzLjAuMTEzLjc=:"
        );
        assert_eq!(stated_wait(&denied), Duration::from_millis(16_200));
        let allowed = decision(true, 7, None, 2_500);
        assert_eq!(stated_wait(&allowed), Duration::from_millis(2_500));
        let mut blocked = decision(false, 9, Some(30_000), 0);
        blocked.blocked = true;
        assert_eq!(ratelimit("api", &blocked, 30, None), "\"api\";r=0;t=30");
    }

    #[test]
    fn long_values_spill_to_the_heap() {
        let name = "n".repeat(64);
        let q = Quota::per_second(nz(u32::MAX));
        let items: Vec<_> = (0..10)
            .map(|_| (name.as_str(), Algorithm::SlidingWindow, q, u32::MAX))
            .collect();
        let value = policy(items, QuotaUnit::Requests, Some(&[0xff; 1024]));
        let text = value.to_str().unwrap();
        assert_eq!(text.matches(";q=4294967295;").count(), 10);
        assert!(text.len() > 10 * 1024);
    }
}
