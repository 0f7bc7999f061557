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
    /// When more than [`remaining`](Self::remaining) units are free: when a
    /// request of one unit more could be admitted — the draft HTTP
    /// `RateLimit` field's `t`. Zero when nothing more is to come (all
    /// free). For a denial, the same as `retry_after` (or `reset_after`
    /// when the request can never be admitted). Per algorithm: a fixed
    /// window's end; a sliding log's oldest entry leaving the window; a
    /// sliding window counter's estimate falling by a unit; one more GCRA
    /// unit coming back — one interval (`period / limit`) or less; the
    /// same for a [`local`](Self::local) decision, but the sliding window
    /// counter's, which states its `reset_after` (never shorter). A bypass
    /// or a slice's admission: zero (nothing known).
    pub more_after: Duration,
    /// Set when the decision was made without Redis: under
    /// [`FailurePolicy::FailOpen`](crate::FailurePolicy::FailOpen) `allowed`
    /// is then `true`; under [`FailurePolicy::Local`](crate::FailurePolicy::Local)
    /// [`local`](Self::local) is set too.
    pub bypassed: Option<BypassReason>,
    /// Decided by this process's local limiter with its share of the quota
    /// ([`FailurePolicy::Local`](crate::FailurePolicy::Local)): `allowed`,
    /// `limit`, `remaining`, `retry_after` and `quota` are the local
    /// limiter's (`blocked` and `overridden` what Redis last said). Redis
    /// did not answer, and [`bypassed`](Self::bypassed) says why; or,
    /// `bypassed` being `None`, Redis answers again but this process has
    /// spent its part of what Redis had left after deciding locally, and
    /// the other processes' local admissions may not be counted there yet:
    /// a denial.
    pub local: bool,
    /// Answered from the local deny cache, without Redis (see
    /// [`RateLimiterBuilder::deny_cache`](crate::limit::RateLimiterBuilder::deny_cache)):
    /// `allowed` is then `false`, and `retry_after` counts down to the end
    /// of the cached denial: the wait Redis gave, or sooner if an override
    /// or block the denial was decided under expires first.
    pub cached: bool,
    /// Shadow mode (see
    /// [`RateLimiterBuilder::shadow`](crate::limit::RateLimiterBuilder::shadow)):
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
    /// Decided by this process from its quota slice of a hot subject,
    /// without Redis (see
    /// [`RateLimiterBuilder::slices`](crate::limit::RateLimiterBuilder::slices)):
    /// admitted from the slice (`remaining` is what the slice has left), or
    /// denied because the subject's limit is spent, until `retry_after`.
    pub sliced: bool,
    /// The quota the decision was made under: the subject's override when
    /// [`overridden`](Self::overridden), else the limiter's quota at the
    /// time of the check (it follows
    /// [`set_quota`](crate::RateLimiter::set_quota)). The HTTP layer's
    /// `RateLimit-Policy` is written from it.
    pub quota: Quota,
    /// How long what Redis decided this by stays as it is unannounced: the
    /// end of a denial cached from it.
    pub(crate) settled: Settled,
}

/// How long a limit's per-subject settings (override, block) stay as they
/// are unless changed by a call that announces it (an invalidation): their
/// expiry is announced by no one, so a cached denial must end by then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Neither exists (or neither expires): no bound.
    Unbounded,
    /// The earliest of their expiries, this long after the check ran.
    For(Duration),
    /// Not known (read on their own while the slot migrated, or not from
    /// Redis at all): nothing may be cached from the decision.
    #[default]
    Unknown,
}

impl Settled {
    /// The script's `settled_ms`: -1 no bound, -2 not known, else ms.
    pub(crate) fn from_reply(ms: i64) -> Self {
        match ms {
            -1 => Settled::Unbounded,
            ms => u64::try_from(ms).map_or(Settled::Unknown, |ms| {
                Settled::For(Duration::from_millis(ms))
            }),
        }
    }

    /// `wait` cut short by this bound; `None` when not known.
    #[cfg(feature = "deny-cache")]
    pub(crate) fn bound(self, wait: Duration) -> Option<Duration> {
        match self {
            Settled::Unbounded => Some(wait),
            Settled::For(settled) => Some(wait.min(settled)),
            Settled::Unknown => None,
        }
    }
}

impl Decision {
    /// A fail-open admission without Redis, under the limiter's `quota`
    /// and `limit` (its capacity).
    pub(crate) fn bypass(quota: Quota, limit: u32, reason: BypassReason) -> Self {
        Decision {
            bypassed: Some(reason),
            ..Decision::admitted_here(quota, limit)
        }
    }

    /// Admitted by this process from a quota slice, under `quota` (the
    /// subject's override, if the slice was taken under one) and `limit`
    /// (its capacity); how long until full is not known here.
    #[cfg(feature = "slices")]
    pub(crate) fn sliced(quota: Quota, limit: u32) -> Self {
        Decision {
            sliced: true,
            ..Decision::admitted_here(quota, limit)
        }
    }

    /// An admission decided in this process, nothing known of Redis.
    fn admitted_here(quota: Quota, limit: u32) -> Self {
        Decision {
            quota,
            allowed: true,
            limit,
            remaining: 0,
            retry_after: None,
            reset_after: Duration::ZERO,
            more_after: Duration::ZERO,
            bypassed: None,
            local: false,
            cached: false,
            would_deny: false,
            blocked: false,
            overridden: false,
            sliced: false,
            settled: Settled::Unknown,
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

    /// The position of [`binding`](Self::binding) in
    /// [`decisions`](Self::decisions).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn binding_index(&self) -> usize {
        let binding = self.binding();
        self.decisions
            .iter()
            .position(|d| std::ptr::eq(d, binding))
            .unwrap_or(0)
    }

    /// When the request could next be admitted: the longest wait among the
    /// limits that denied it; `None` when it was admitted. A limit in shadow
    /// mode never denies (its decision is `allowed`, with
    /// [`would_deny`](Decision::would_deny) set), so its wait never counts.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        if self.allowed {
            return None;
        }
        self.decisions
            .iter()
            .filter(|d| !d.allowed)
            .filter_map(|d| d.retry_after)
            .max()
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
            remaining,
            retry_after: retry_ms.map(Duration::from_millis),
            settled: Settled::Unbounded,
            ..Decision::admitted_here(Quota::per_second(10), 10)
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
        // A shadow limit's wait (it would deny, and admits) never counts.
        let mut shadow = d(true, 0, Some(3_600_000));
        shadow.would_deny = true;
        let denied = MultiDecision {
            allowed: false,
            decisions: vec![shadow, d(false, 0, Some(2000))],
        };
        assert_eq!(denied.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(denied.binding().retry_after, Some(Duration::from_secs(2)));
    }
}
