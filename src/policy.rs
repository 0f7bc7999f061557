//! What a limiter does when Redis cannot answer: fail open, fail closed or
//! decide locally, and never silently.
//!
//! The rule of thumb: fail **closed** when the failure mode is
//! duplicated work or corrupted data (locks always do); fail **open** when it
//! is a policy the service can survive not enforcing for ten minutes (most
//! rate limits); decide **locally** ([`FailurePolicy::Local`]) when it can
//! survive neither, and knows how many processes share the limit. Either way the outcome is counted in
//! [`Cluster::stats`](crate::Cluster::stats) and, for bypasses, logged with a
//! rate-limited `tracing::warn!` — the bypass counter is the only thing that
//! tells you the limiter has been off since Tuesday.
//!
//! Only **transient** faults are ever bypassed ([`Error::is_transient`]):
//! timeouts, lost connections, a cluster being reconfigured. Configuration
//! faults — `WRONGTYPE`, `CROSSSLOT`, a script error, missing permissions —
//! return `Err` even under [`FailurePolicy::FailOpen`]; bypassing them is how
//! limiters end up silently off for weeks.

use std::fmt;
use std::num::NonZeroU32;

use crate::error::{Error, Result, is_reconfiguring};
use crate::outcomes::Outcomes;

/// Per-limiter choice of behaviour when Redis cannot answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit the request, marked [`bypassed`](crate::Decision::bypassed),
    /// count it and warn. For limits the service can survive not enforcing.
    FailOpen,
    /// Return the error. For limits whose breach is worse than an outage.
    /// The default: opening a limit must be a decision.
    #[default]
    FailClosed,
    /// Neither open nor closed: decide from a limiter in this process, of
    /// the same algorithm, with this process's share of the quota — the
    /// limit (and burst) divided by `instances`, the number of processes
    /// sharing the limit, rounded up — so that the instances together
    /// admit about the quota, not `instances` times it. A rate limiter's
    /// option only: a lease limiter's leases or a lock cannot be shared
    /// out (their builders refuse it).
    ///
    /// The local limiter follows what Redis last said of the subject:
    /// every reply sets it to this process's part of what Redis had left
    /// (the remaining units divided by `instances`, rounded down, freed as
    /// Redis frees its own; a full share for a subject it never heard of),
    /// and to the subject's block and own quota (override), which local
    /// decisions keep: a blocked subject is never admitted locally while
    /// its block is known. What is admitted locally is counted in Redis
    /// (as a [`penalize`](crate::RateLimiter::penalize)) before Redis
    /// decides for this process again, and until Redis has no more left
    /// than every instance having this process's part left, the process
    /// keeps to its part even though Redis answers: the other instances'
    /// local admissions may not be counted there yet.
    ///
    /// **Bound**: over any period, the instances admit together at most
    /// the quota plus one share, through a stall and a flapping master
    /// alike (measured: `tests/faults/local.rs`), when each has heard from
    /// Redis about the subject before it stopped answering. What may pass
    /// beyond the quota is what each share's rounding up adds (fewer than
    /// `instances` units per period), what the others took since an
    /// instance's last reply (its part is of that older remaining), a full
    /// share per instance that never heard of the subject, and what an
    /// instance that decided nothing locally takes from Redis before the
    /// others have counted theirs. More processes than declared admit
    /// more.
    ///
    /// Each local decision is [`local`](crate::Decision::local), carries
    /// its [`bypassed`](crate::Decision::bypassed) reason, is counted as a
    /// bypass and warned about like one; the next check asks Redis again,
    /// so decisions come from Redis again as soon as it answers (but for
    /// the restraint above). The local state is per process and per
    /// subject (at most
    /// [`LOCAL_MAX_SUBJECTS`](crate::limit::LOCAL_MAX_SUBJECTS) subjects
    /// per limiter, least recently used evicted), timed by the process's
    /// clock.
    Local {
        /// How many processes share the limit.
        instances: NonZeroU32,
    },
}

impl FailurePolicy {
    /// Applies the policy to `err`, a failed call shared by the primitives
    /// whose outcomes are `outcomes` (one, or every limiter of a
    /// multi-limiter): a transient error under fail-open or local becomes
    /// `Ok(bypass(reason))` (the caller's decision without Redis), counted as a bypass for each and warned about
    /// (by the first, at most every few seconds); anything else is counted
    /// as an error for each and returned. The only place a policy is
    /// applied.
    pub(crate) fn apply<T>(
        self,
        err: Error,
        outcomes: &[&Outcomes],
        bypass: impl FnOnce(BypassReason) -> T,
    ) -> Result<T> {
        match (self, BypassReason::of(&err)) {
            (FailurePolicy::FailOpen | FailurePolicy::Local { .. }, Some(reason)) => {
                outcomes.iter().for_each(|o| o.bypassed());
                if let Some(first) = outcomes.first()
                    && let Some(count) = first.should_warn()
                {
                    let decided = if self == FailurePolicy::FailOpen {
                        "admitted (fail-open)"
                    } else {
                        "decided locally with this process's share of the quota"
                    };
                    tracing::warn!(
                        kind = %first.kind(),
                        name = %first.name(),
                        reason = %reason,
                        bypassed_since_last_warning = count,
                        error = %err,
                        "shardlimit: limiter bypassed, Redis did not answer: {decided}"
                    );
                }
                Ok(bypass(reason))
            }
            _ => {
                outcomes.iter().for_each(|o| o.error());
                Err(err)
            }
        }
    }
}

/// Why a decision was made without Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BypassReason {
    /// The command timeout expired.
    Timeout,
    /// No connection to the node, or it broke.
    Connection,
    /// The node serving the slot is known to be down; nothing was sent.
    NodeDown,
    /// The cluster was failing over, migrating or loading (`CLUSTERDOWN`,
    /// `TRYAGAIN`, `MASTERDOWN`, `LOADING`, `READONLY`, unresolved redirect).
    ClusterUnavailable,
}

impl BypassReason {
    /// The reason for a transient error; `None` for errors that must never be
    /// bypassed.
    #[must_use]
    pub fn of(err: &Error) -> Option<Self> {
        if !err.is_transient() {
            return None;
        }
        Some(match err {
            Error::Timeout { .. } => BypassReason::Timeout,
            Error::NodeDown { .. } => BypassReason::NodeDown,
            Error::Redis { source, .. } if is_reconfiguring(source) => {
                BypassReason::ClusterUnavailable
            }
            Error::Redis { source, .. } if source.is_timeout() => BypassReason::Timeout,
            _ => BypassReason::Connection,
        })
    }

    /// A short label: `timeout`, `connection`, `node_down`,
    /// `cluster_unavailable`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            BypassReason::Timeout => "timeout",
            BypassReason::Connection => "connection",
            BypassReason::NodeDown => "node_down",
            BypassReason::ClusterUnavailable => "cluster_unavailable",
        }
    }
}

impl fmt::Display for BypassReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::{ErrorKind, ServerErrorKind};

    use super::*;

    fn redis_err(kind: ErrorKind) -> Error {
        Error::Redis {
            op: "t".into(),
            slot: Some(1),
            source: redis::RedisError::from((kind, "x")),
        }
    }

    #[test]
    fn reasons_follow_the_error() {
        let timeout = Error::Timeout {
            op: "t".into(),
            slot: Some(1),
            timeout: Duration::from_millis(1),
        };
        assert_eq!(BypassReason::of(&timeout), Some(BypassReason::Timeout));
        assert_eq!(
            BypassReason::of(&redis_err(ErrorKind::Server(ServerErrorKind::ClusterDown))),
            Some(BypassReason::ClusterUnavailable)
        );
        let io = Error::Redis {
            op: "t".into(),
            slot: Some(1),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        };
        assert_eq!(BypassReason::of(&io), Some(BypassReason::Connection));
    }

    #[test]
    fn configuration_faults_are_never_bypassed() {
        let wrongtype = Error::Redis {
            op: "t".into(),
            slot: Some(1),
            source: redis::make_extension_error("WRONGTYPE".into(), None),
        };
        assert_eq!(BypassReason::of(&wrongtype), None);
        assert_eq!(
            BypassReason::of(&redis_err(ErrorKind::Server(ServerErrorKind::CrossSlot))),
            None
        );
        assert_eq!(
            BypassReason::of(&redis_err(ErrorKind::Server(ServerErrorKind::NoScript))),
            None
        );
        assert_eq!(BypassReason::of(&Error::EmptySubject), None);
    }

    #[test]
    fn fail_open_bypasses_only_transient_errors_and_counts_every_primitive() {
        let registry = crate::outcomes::Registry::default();
        let (a, b) = (registry.outcomes("gcra", "a"), registry.outcomes("fw", "b"));
        let timeout = || Error::Timeout {
            op: "gcra".into(),
            slot: Some(1),
            timeout: Duration::from_millis(1),
        };
        let got = FailurePolicy::FailOpen.apply(timeout(), &[&a, &b], |r| r);
        assert_eq!(got.unwrap(), BypassReason::Timeout);
        assert!(
            FailurePolicy::FailClosed
                .apply(timeout(), &[&a], |r| r)
                .is_err()
        );
        let config = FailurePolicy::FailOpen.apply(Error::EmptySubject, &[&a, &b], |r| r);
        assert!(config.is_err());
        let snap = registry.snapshot();
        let counts: Vec<(u64, u64)> = snap.iter().map(|p| (p.bypassed, p.errors)).collect();
        // Sorted by kind: fw "b", then gcra "a".
        assert_eq!(counts, vec![(1, 1), (1, 2)]);
    }
}
