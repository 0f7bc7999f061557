//! `Decision`: the answer to one rate-limit check. Being limited is a value,
//! not an error.

use std::time::Duration;

use super::quota::Quota;
use crate::policy::BypassReason;

/// The outcome of one check.
///
/// ```
/// # fn show(decision: shardlimit::Decision) {
/// if decision.allowed {
///     // serve; decision.remaining more fit before the limit
/// } else if let Some(wait) = decision.retry_after {
///     // 429 with Retry-After: wait
/// }
/// if let Some(reason) = decision.bypassed {
///     // admitted without Redis (fail-open): counted and logged
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request may proceed (for a peek: would).
    pub allowed: bool,
    /// The most one burst may take: the limit, or a GCRA's burst.
    pub limit: u32,
    /// Units left, after this request if it was admitted.
    pub remaining: u32,
    /// When the same request would next be admitted; `None` when it was.
    pub retry_after: Option<Duration>,
    /// When the limiter is back to full (nothing in use).
    pub reset_after: Duration,
    /// Set when the decision was made without Redis under
    /// [`FailurePolicy::FailOpen`](crate::FailurePolicy::FailOpen); `allowed`
    /// is then `true`.
    pub bypassed: Option<BypassReason>,
    /// Answered from the local deny cache, without Redis (see
    /// [`RateLimiterBuilder::deny_cache`](crate::RateLimiterBuilder::deny_cache)):
    /// `allowed` is then `false`, and `retry_after` counts down from the
    /// denial Redis gave.
    pub cached: bool,
    /// Shadow mode (see
    /// [`RateLimiterBuilder::shadow`](crate::RateLimiterBuilder::shadow)):
    /// Redis denied the request and it was let through; `allowed` is then
    /// `true`, and `retry_after` is the wait a limiter not in shadow mode
    /// would have imposed.
    pub would_deny: bool,
    /// The subject is blocked ([`RateLimiter::block`](crate::RateLimiter::block))
    /// for at least `retry_after`.
    pub blocked: bool,
    /// The subject's own quota applied
    /// ([`RateLimiter::set_override`](crate::RateLimiter::set_override));
    /// `limit` is then the override's capacity.
    pub overridden: bool,
    /// The quota the decision was made under: the subject's override when
    /// [`overridden`](Self::overridden), else the limiter's quota at the
    /// time of the check (it follows
    /// [`set_quota`](crate::RateLimiter::set_quota)). The HTTP layer's
    /// `RateLimit-Policy` is written from it.
    pub quota: Quota,
}

impl Decision {
    /// A fail-open admission without Redis, under the limiter's `quota`
    /// and `limit` (its capacity).
    pub(crate) fn bypass(quota: Quota, limit: u32, reason: BypassReason) -> Self {
        Decision {
            quota,
            allowed: true,
            limit,
            remaining: 0,
            retry_after: None,
            reset_after: Duration::ZERO,
            bypassed: Some(reason),
            cached: false,
            would_deny: false,
            blocked: false,
            overridden: false,
        }
    }
}

/// The outcome of a check of several limits at once: all admitted (and all
/// consumed) or none consumed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub struct MultiDecision {
    /// Whether every limit admitted the request.
    pub allowed: bool,
    /// One decision per limit, in the order the limits were given.
    pub decisions: Vec<Decision>,
}

impl MultiDecision {
    /// The decision that binds: if denied, the denying limit that frees up
    /// last; if allowed, the one with the fewest units left.
    pub fn binding(&self) -> &Decision {
        let pick = if self.allowed {
            self.decisions.iter().min_by_key(|d| d.remaining)
        } else {
            self.decisions
                .iter()
                .filter(|d| !d.allowed)
                .max_by_key(|d| d.retry_after)
        };
        // A MultiDecision always holds at least one decision.
        pick.unwrap_or(&self.decisions[0])
    }

    /// When the request could next be admitted: the longest wait among the
    /// limits that denied it; `None` when it was admitted.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.decisions.iter().filter_map(|d| d.retry_after).max()
    }

    /// Whether the decision was made without Redis.
    #[must_use]
    pub fn bypassed(&self) -> Option<BypassReason> {
        self.decisions.first().and_then(|d| d.bypassed)
    }

    /// Whether it was answered from the local deny cache, without Redis.
    #[must_use]
    pub fn cached(&self) -> bool {
        self.decisions.first().is_some_and(|d| d.cached)
    }

    /// Whether a limit in shadow mode would have denied it.
    #[must_use]
    pub fn would_deny(&self) -> bool {
        self.decisions.iter().any(|d| d.would_deny)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(allowed: bool, remaining: u32, retry_ms: Option<u64>) -> Decision {
        Decision {
            allowed,
            limit: 10,
            remaining,
            retry_after: retry_ms.map(Duration::from_millis),
            reset_after: Duration::ZERO,
            bypassed: None,
            cached: false,
            would_deny: false,
            blocked: false,
            overridden: false,
            quota: Quota::per_second(10),
        }
    }

    #[test]
    fn binding_decision() {
        let denied = MultiDecision {
            allowed: false,
            decisions: vec![
                d(true, 5, None),
                d(false, 0, Some(10)),
                d(false, 0, Some(900)),
            ],
        };
        assert_eq!(
            denied.binding().retry_after,
            Some(Duration::from_millis(900))
        );
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(900)));
        let allowed = MultiDecision {
            allowed: true,
            decisions: vec![d(true, 5, None), d(true, 2, None)],
        };
        assert_eq!(allowed.binding().remaining, 2);
        assert_eq!(allowed.retry_after(), None);
    }
}
