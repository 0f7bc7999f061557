//! The local deny cache: denials Redis gave, answered again without Redis
//! until the earliest time Redis could admit the same request.
//!
//! Why it never denies what Redis would admit, per algorithm, and what a
//! process that misses an invalidation sees: [the `limit` module
//! docs](crate::limit#deny-cache). Here: the entries (one per subject,
//! expiring when their denial ends), the ticket that keeps a denial whose
//! check raced an invalidation out, and the listener that forgets subjects
//! when the hub (`limit/invalidation.rs`) hears of a change.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::keys::subject_slot;
use crate::limit::decision::MultiDecision;
use crate::limit::invalidation::{Invalidations, Listener};
use crate::limit::script::LimitSpec;

mod steps;

/// How long the same request is denied for sure, if Redis denied it (not
/// bypassed, not in shadow mode) and it can be admitted at all: until it
/// could be admitted, or until an override or block it was decided under
/// expires (announced by no one), whichever is first.
fn denied_for(decision: &MultiDecision) -> Option<Duration> {
    let never = decision
        .decisions
        .iter()
        .any(|d| !d.allowed && d.retry_after.is_none());
    if decision.allowed || never || decision.bypassed().is_some() {
        return None;
    }
    // Any limit's override or block expiring may change the decision.
    decision
        .decisions
        .iter()
        .try_fold(decision.retry_after()?, |wait, d| d.settled.bound(wait))
}

/// `decision` answered again `elapsed` later, `left` before its entry
/// ends: a denying limit's wait is what is left of the entry (the wait
/// Redis gave, or less when an override or block it was decided under
/// expires first, after which Redis may admit it), and never more than
/// its own wait.
fn replay(decision: &MultiDecision, elapsed: Duration, left: Duration) -> MultiDecision {
    let decisions = decision
        .decisions
        .iter()
        .map(|d| {
            let mut d = d.clone();
            d.cached = true;
            if !d.allowed {
                let own = d.retry_after.map_or(left, |w| w.saturating_sub(elapsed));
                if d.retry_after.is_some() {
                    d.retry_after = Some(own.min(left));
                }
                d.reset_after = d.reset_after.saturating_sub(elapsed);
                d.more_after = d.retry_after.unwrap_or(d.reset_after);
            }
            d
        })
        .collect();
    MultiDecision {
        allowed: false,
        decisions,
    }
}

struct Entry {
    fingerprint: u64,
    cost: u32,
    sent: Instant,
    until: Instant,
    decision: MultiDecision,
}

/// Expires each entry when its denial ends.
struct UntilDenialEnds;

impl moka::Expiry<Box<[u8]>, Arc<Entry>> for UntilDenialEnds {
    fn expire_after_create(
        &self,
        _key: &Box<[u8]>,
        entry: &Arc<Entry>,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(entry.until.saturating_duration_since(created_at))
    }
}

/// The entries, by subject, of one limiter or multi-limiter.
struct Entries {
    cache: moka::sync::Cache<Box<[u8]>, Arc<Entry>>,
    /// The limits (kind, name) whose changes invalidate an entry.
    limits: Vec<(String, String)>,
}

impl Listener for Entries {
    fn invalidate(&self, kind: &str, name: &str, subject: &[u8]) {
        if self.limits.iter().any(|(k, n)| k == kind && n == name) {
            self.cache.invalidate(subject);
        }
    }

    fn invalidate_all(&self) {
        self.cache.invalidate_all();
    }
}

/// A check in flight: when it was sent and the invalidation epoch then.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    sent: Instant,
    epoch: u64,
}

/// A bounded cache of denials (see the module docs).
pub(crate) struct DenyCache {
    entries: Arc<Entries>,
    hub: Arc<Invalidations>,
    cluster: Cluster,
}

/// One fingerprint for several limits checked together (a lone limit's
/// own).
pub(crate) fn fingerprint(specs: &[Arc<LimitSpec>]) -> u64 {
    if let [one] = specs {
        return one.fingerprint;
    }
    let mut hasher = std::hash::DefaultHasher::new();
    for spec in specs {
        spec.fingerprint.hash(&mut hasher);
    }
    hasher.finish()
}

/// `max_entries` as a deny cache's size: at least one entry, else the
/// `deny_cache` line's error.
pub(crate) fn room(max_entries: u64) -> crate::error::Result<u64> {
    super::at_least_one(
        max_entries,
        "deny_cache",
        "a deny cache needs room for at least one entry",
    )
}

impl DenyCache {
    /// A cache of at most `max_entries` subjects for the limits `limits`
    /// (kind, name), following `cluster`'s invalidations.
    pub(crate) fn new(cluster: &Cluster, max_entries: u64, limits: Vec<(String, String)>) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(max_entries)
            .expire_after(UntilDenialEnds)
            .build();
        let entries = Arc::new(Entries { cache, limits });
        let hub = Invalidations::listen(cluster, entries.clone());
        DenyCache {
            entries,
            hub,
            cluster: cluster.clone(),
        }
    }

    /// The cached denial of `subject` for a request of `cost` under
    /// `fingerprint`, if one holds now.
    pub(crate) fn lookup(
        &self,
        subject: &[u8],
        fingerprint: u64,
        cost: u32,
    ) -> Option<MultiDecision> {
        self.hub.follow(&self.cluster);
        let entry = self.entries.cache.get(subject)?;
        // Its slot's invalidations may be missed now (the entry goes with
        // the rest of the cache, but maybe not yet).
        if !self.hub.is_live(subject_slot(subject)) {
            return None;
        }
        let now = Instant::now();
        if entry.fingerprint != fingerprint || cost < entry.cost || now >= entry.until {
            return None;
        }
        Some(replay(
            &entry.decision,
            now.duration_since(entry.sent),
            entry.until - now,
        ))
    }

    /// Taken just before a check is sent.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket {
            epoch: self.hub.epoch(),
            sent: Instant::now(),
        }
    }

    /// Caches `decision` if it is a denial that may be cached: Redis denied
    /// it (no bypass, no shadow), it can be admitted some day, the
    /// subscription of the subject's slot is live and nothing was
    /// invalidated while it was in flight.
    pub(crate) fn offer(
        &self,
        subject: &[u8],
        fingerprint: u64,
        cost: u32,
        ticket: Ticket,
        decision: &MultiDecision,
    ) {
        let Some(wait) = denied_for(decision) else {
            return;
        };
        if wait.is_zero() {
            return;
        }
        let Some(until) = ticket.sent.checked_add(wait) else {
            return;
        };
        let cache = &self.entries.cache;
        self.hub.keep_unless_announced(
            ticket.epoch,
            subject_slot(subject),
            || {
                let entry = Arc::new(Entry {
                    fingerprint,
                    cost,
                    sent: ticket.sent,
                    until,
                    decision: decision.clone(),
                });
                cache.insert(subject.into(), entry);
            },
            || cache.invalidate(subject),
        );
    }

    /// Forgets everything (the quota changed).
    pub(crate) fn clear(&self) {
        self.entries.cache.invalidate_all();
    }
}

impl std::fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenyCache")
            .field("max_entries", &self.entries.cache.policy().max_capacity())
            .finish_non_exhaustive()
    }
}
