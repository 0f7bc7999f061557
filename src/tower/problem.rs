//! Problem details (RFC 9457, `application/problem+json`) of the problem
//! types draft-ietf-httpapi-ratelimit-headers-11 defines (§5), each with
//! its `violated-policies` member, the names of the limits concerned:
//!
//! ```text
//! {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"violated-policies":["api-1s"]}
//! ```
//!
//! * `quota-exceeded` (429, §5.1): the limits that denied the request.
//! * `abnormal-usage-detected` (429, §5.3): a limit that denied it has
//!   [blocked](crate::RateLimiter::block) the subject — an operator's
//!   verdict on its behaviour, not a used-up quota.
//! * `temporary-reduced-capacity` (503, §5.2): a fail-closed check that
//!   could not be made (Redis unreachable); every limit of the layer is
//!   named, since none could be checked.
//!
//! Titles are the ones the draft registers (§10.2).

use std::fmt::Write as _;

use http::HeaderValue;

use crate::limit::{Decision, RateLimiter};

/// `Content-Type: application/problem+json`.
pub(crate) static CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/problem+json");

/// The problem types the layer answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Problem {
    QuotaExceeded,
    AbnormalUsageDetected,
    TemporaryReducedCapacity,
}

impl Problem {
    fn uri(self) -> &'static str {
        match self {
            Problem::QuotaExceeded => {
                "https://iana.org/assignments/http-problem-types#quota-exceeded"
            }
            Problem::AbnormalUsageDetected => {
                "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
            }
            Problem::TemporaryReducedCapacity => {
                "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
            }
        }
    }

    fn title(self) -> &'static str {
        match self {
            Problem::QuotaExceeded => "Quota Exceeded",
            Problem::AbnormalUsageDetected => "Abnormal Usage Detected",
            Problem::TemporaryReducedCapacity => "Temporary Reduced Capacity",
        }
    }

    fn status(self) -> u16 {
        match self {
            Problem::QuotaExceeded | Problem::AbnormalUsageDetected => 429,
            Problem::TemporaryReducedCapacity => 503,
        }
    }

    fn body<'a>(self, violated: impl Iterator<Item = &'a str>) -> String {
        let mut out = format!(
            "{{\"type\":\"{}\",\"title\":\"{}\",\"status\":{},\"violated-policies\":[",
            self.uri(),
            self.title(),
            self.status()
        );
        for (i, name) in violated.enumerate() {
            let sep = if i > 0 { "," } else { "" };
            // Limiter names are [A-Za-z0-9_.-]: a JSON string as they are.
            // Writing to a String cannot fail.
            let _ = write!(out, "{sep}\"{name}\"");
        }
        out.push_str("]}");
        out
    }
}

/// The 429 body for a denial: the limits that denied it, one decision per
/// limiter.
pub(crate) fn denied(limiters: &[RateLimiter], decisions: &[Decision]) -> String {
    let denying = || limiters.iter().zip(decisions).filter(|(_, d)| !d.allowed);
    let problem = if denying().any(|(_, d)| d.blocked) {
        Problem::AbnormalUsageDetected
    } else {
        Problem::QuotaExceeded
    };
    problem.body(denying().map(|(l, _)| l.name()))
}

/// The 503 body for a check that could not be made: every limit.
pub(crate) fn unavailable(limiters: &[RateLimiter]) -> String {
    Problem::TemporaryReducedCapacity.body(limiters.iter().map(RateLimiter::name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        assert_eq!(
            Problem::QuotaExceeded.body(["a", "b.c"].into_iter()),
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
             \"title\":\"Quota Exceeded\",\"status\":429,\"violated-policies\":[\"a\",\"b.c\"]}"
        );
        assert_eq!(
            Problem::TemporaryReducedCapacity.body(["x"].into_iter()),
            "{\"type\":\"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity\",\
             \"title\":\"Temporary Reduced Capacity\",\"status\":503,\"violated-policies\":[\"x\"]}"
        );
        let abnormal = Problem::AbnormalUsageDetected.body(std::iter::empty());
        assert!(abnormal.contains("#abnormal-usage-detected\",\"title\":\"Abnormal Usage Detected\",\"status\":429,\"violated-policies\":[]}"));
    }
}
