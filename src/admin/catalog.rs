//! What the admin side knows of each rate limiter's quota: the specs the
//! limiters published to the catalog, quotas given by the operator, and
//! what a subject's state then means — units remaining of the limit,
//! whether it is at the limit, and when it is full again.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::time::Duration;

use super::info::LimiterInfo;
use crate::keys::Kind;
use crate::limit::{Algorithm, Quota};
use crate::usage::Usage;

/// The rate limiter specs known to the admin side: those the limiters
/// published ([`Scanner::catalog`](super::Scanner::catalog); see
/// [the catalog](crate::limit#the-catalog)) and quotas the operator gave
/// ([`give`](Self::give), `--quota name=60/1m` on the command line), which
/// win over what was published.
///
/// ```
/// use std::num::NonZeroU32;
/// use shardlimit::Quota;
/// use shardlimit::admin::{Catalog, QuotaSource};
///
/// let mut catalog = Catalog::new();
/// catalog.give("api", Quota::per_minute(NonZeroU32::new(60).unwrap()));
/// let (quota, source) = catalog.quota("gcra", "api").unwrap();
/// assert_eq!((quota.limit().get(), source), (60, QuotaSource::Given));
/// assert!(catalog.quota("gcra", "login").is_none());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    /// `(kind, name)` → the specs published for it, strictest first.
    published: BTreeMap<(String, String), Vec<PublishedSpec>>,
    /// Quotas given by name, for every kind.
    given: BTreeMap<String, Quota>,
}

/// One spec a rate limiter published to the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PublishedSpec {
    /// The limiter's kind (`fw`, `slog`, `swc`, `gcra`; `lease` for a
    /// [`LeaseLimiter`](crate::LeaseLimiter)).
    pub kind: String,
    /// Its name.
    pub name: String,
    /// A rate limiter's algorithm (the kind's); `None` for a lease.
    pub algorithm: Option<Algorithm>,
    /// A rate limiter's default quota; a lease limiter's `max_leases` (its
    /// limit) and `lease_ttl` (its period).
    pub quota: Quota,
    /// Whether it runs in shadow mode (counts, never refuses).
    pub shadow: bool,
    /// How long ago (server time) a process last published it: under
    /// [`CATALOG_TTL`](crate::limit::CATALOG_TTL), or it is not reported.
    pub age: Duration,
}

/// Where a row's quota came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaSource {
    /// The subject's own override of the limiter.
    Override,
    /// The operator's ([`Catalog::give`], `--quota`).
    Given,
    /// The catalog: `specs` specs are published for the limiter (more than
    /// one when processes disagree), and the strictest counts.
    Published {
        /// How many.
        specs: usize,
    },
}

/// A rate limiter's headroom for one subject: how many units are left of
/// how many, whether it is at the limit and when it is full again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Headroom {
    /// Units a request could take now.
    pub remaining: u64,
    /// The most it could ever take: the limit, or a GCRA's burst.
    pub limit: u64,
    /// `false` when `remaining` is a lower bound: a sliding log's expired
    /// entries stay until the next check trims them, and a sliding window
    /// counter's previous window weighs less as its window goes on.
    pub exact: bool,
    /// Whether a one-unit request would be refused now: nothing remains
    /// (by an exact count), or the subject is blocked.
    pub at_limit: bool,
    /// When the whole limit is available again: when the subject's state
    /// key expires (at the latest, for a sliding window counter), and a
    /// block's end if later. Zero when it is full now.
    pub full_in: Duration,
    /// Where the quota came from.
    pub source: QuotaSource,
}

impl Catalog {
    /// An empty catalog: nothing published, nothing given.
    #[must_use]
    pub fn new() -> Self {
        Catalog::default()
    }

    /// The quota of every rate limiter named `name`, whatever its kind: it
    /// wins over what the limiters published (for limiters of versions
    /// that do not publish, or to judge against another quota).
    pub fn give(&mut self, name: impl Into<String>, quota: Quota) -> &mut Self {
        self.given.insert(name.into(), quota);
        self
    }

    /// Adds a published spec (what [`Scanner::catalog`](super::Scanner::catalog)
    /// read).
    pub(crate) fn publish(&mut self, spec: PublishedSpec) {
        let specs = self
            .published
            .entry((spec.kind.clone(), spec.name.clone()))
            .or_default();
        specs.push(spec);
        // Strictest first: the smallest capacity, then the longest period.
        specs.sort_by_key(|s| {
            (
                capacity(s.algorithm, &s.quota),
                Reverse(s.quota.period()),
                s.shadow,
            )
        });
    }

    /// Every published spec, by kind and name, strictest first within one.
    pub fn published(&self) -> impl Iterator<Item = &PublishedSpec> {
        self.published.values().flatten()
    }

    /// The specs published for limiter `kind`/`name`, strictest first; more
    /// than one when processes publish different specs for it.
    #[must_use]
    pub fn specs(&self, kind: &str, name: &str) -> &[PublishedSpec] {
        self.published
            .get(&(kind.to_owned(), name.to_owned()))
            .map_or(&[], Vec::as_slice)
    }

    /// The quota the admin side counts limiter `kind`/`name` against: the
    /// given one, else the strictest published.
    #[must_use]
    pub fn quota(&self, kind: &str, name: &str) -> Option<(Quota, QuotaSource)> {
        if let Some(quota) = self.given.get(name) {
            return Some((*quota, QuotaSource::Given));
        }
        let specs = self.specs(kind, name);
        specs
            .first()
            .map(|s| (s.quota, QuotaSource::Published { specs: specs.len() }))
    }

    /// A rate limiter's (or lease's) headroom for the subject of `info`,
    /// under the subject's override, else [`quota`](Self::quota); `None`
    /// for other kinds and when no quota is known. Each algorithm reads its
    /// own state (its `remaining` rule); a lease limiter has its
    /// `max_leases` less the leases held (expired ones not yet reclaimed
    /// count), and is full again when its set expires.
    #[must_use]
    pub fn headroom(&self, info: &LimiterInfo) -> Option<Headroom> {
        let kind = Kind::parse(&info.kind)?;
        let algorithm = Algorithm::from_key_kind(kind);
        if algorithm.is_none() && kind != Kind::Lease {
            return None;
        }
        let (quota, source) = match info.settings.override_quota {
            Some(quota) => (quota, QuotaSource::Override),
            None => self.quota(&info.kind, &info.name)?,
        };
        let limit = u64::from(capacity(algorithm, &quota));
        let (remaining, exact, state_for) = match (&info.usage, algorithm) {
            (Usage::Unused, _) => (limit, true, Duration::ZERO),
            (Usage::Lease { leases_held }, None) => {
                (limit.saturating_sub(*leases_held), true, Duration::ZERO)
            }
            (usage, Some(algorithm)) => {
                let (n, exact) = (algorithm.rules().remaining)(usage, &quota, info.ttl)?;
                (n, exact, info.ttl.unwrap_or(Duration::MAX))
            }
            _ => return None,
        };
        // A lease limiter is full again when its leases expire: its set's TTL is
        // the longest lease.
        let state_for = match algorithm {
            None if remaining < limit => info.ttl.unwrap_or(Duration::MAX),
            _ => state_for,
        };
        let blocked = info.settings.blocked_for.unwrap_or(Duration::ZERO);
        Some(Headroom {
            remaining,
            limit,
            exact,
            at_limit: (remaining == 0 && exact) || !blocked.is_zero(),
            full_in: state_for.max(blocked),
            source,
        })
    }
}

/// The most one request may take: a rate limiter's capacity, a lease
/// limiter's `max_leases`.
fn capacity(algorithm: Option<Algorithm>, quota: &Quota) -> u32 {
    algorithm.map_or(quota.limit().get(), |a| a.capacity(quota))
}

impl Headroom {
    /// `remaining/limit remaining` (`at least 3/60 remaining` for a lower
    /// bound), then `, at limit` when it is: the words every view uses.
    ///
    /// ```
    /// # fn show(headroom: shardlimit::admin::Headroom) {
    /// println!("{}", headroom.describe()); // "0/60 remaining, at limit"
    /// # }
    /// ```
    #[must_use]
    pub fn describe(&self) -> String {
        let bound = if self.exact { "" } else { "at least " };
        let at = if self.at_limit { ", at limit" } else { "" };
        format!("{bound}{}/{} remaining{at}", self.remaining, self.limit)
    }

    /// How many specs were published for the limiter, when more than one
    /// (processes disagree; the strictest counts).
    #[must_use]
    pub fn specs_published(&self) -> Option<usize> {
        match self.source {
            QuotaSource::Published { specs } if specs > 1 => Some(specs),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::limit::SubjectSettings;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn info(kind: &str, usage: Usage, ttl_ms: u64) -> LimiterInfo {
        LimiterInfo {
            kind: kind.into(),
            name: "api".into(),
            subject: b"s".to_vec(),
            slot: 0,
            node: "127.0.0.1:7000".into(),
            ttl: Some(Duration::from_millis(ttl_ms)),
            usage,
            settings: SubjectSettings {
                override_quota: None,
                override_ttl: None,
                blocked_for: None,
            },
            keys: Vec::new(),
        }
    }

    fn spec(quota: Quota, shadow: bool) -> PublishedSpec {
        PublishedSpec {
            kind: "fw".into(),
            name: "api".into(),
            algorithm: Some(Algorithm::FixedWindow),
            quota,
            shadow,
            age: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_strictest_published_spec_counts_and_a_given_quota_wins() {
        let mut catalog = Catalog::new();
        catalog.publish(spec(Quota::per_minute(nz(100)), false));
        catalog.publish(spec(Quota::per_minute(nz(60)), false));
        let (quota, source) = catalog.quota("fw", "api").unwrap();
        assert_eq!(quota.limit().get(), 60);
        assert_eq!(source, QuotaSource::Published { specs: 2 });
        let used = info("fw", Usage::FixedWindow { used: 60 }, 12_000);
        let headroom = catalog.headroom(&used).unwrap();
        assert_eq!((headroom.remaining, headroom.limit), (0, 60));
        assert!(headroom.at_limit && headroom.exact);
        assert_eq!(headroom.full_in, Duration::from_secs(12));
        assert_eq!(headroom.describe(), "0/60 remaining, at limit");
        assert_eq!(headroom.specs_published(), Some(2));

        catalog.give("api", Quota::per_minute(nz(100)));
        let headroom = catalog.headroom(&used).unwrap();
        assert_eq!(headroom.describe(), "40/100 remaining");
        assert_eq!(headroom.source, QuotaSource::Given);
    }

    #[test]
    fn unknown_quotas_and_other_kinds_have_no_headroom() {
        let catalog = Catalog::new();
        assert_eq!(
            catalog.headroom(&info("fw", Usage::FixedWindow { used: 1 }, 1)),
            None
        );
        let mut catalog = Catalog::new();
        catalog.give("api", Quota::per_minute(nz(1)));
        assert_eq!(
            catalog.headroom(&info("counter", Usage::Counter { value: 1 }, 1)),
            None
        );
        // A lease: its `max_leases` less the leases held.
        let lease = catalog
            .headroom(&info("lease", Usage::Lease { leases_held: 1 }, 5_000))
            .unwrap();
        assert_eq!(lease.describe(), "0/1 remaining, at limit");
        assert_eq!(lease.full_in, Duration::from_secs(5));
        // Unused: full now.
        let unused = catalog.headroom(&info("gcra", Usage::Unused, 1)).unwrap();
        assert_eq!((unused.remaining, unused.at_limit), (1, false));
        assert_eq!(unused.full_in, Duration::ZERO);
    }

    #[test]
    fn a_block_is_at_the_limit_until_it_ends() {
        let mut catalog = Catalog::new();
        catalog.give("api", Quota::per_minute(nz(10)));
        let mut blocked = info("fw", Usage::FixedWindow { used: 1 }, 1_000);
        blocked.settings.blocked_for = Some(Duration::from_secs(30));
        let headroom = catalog.headroom(&blocked).unwrap();
        assert!(headroom.at_limit);
        assert_eq!(headroom.remaining, 9);
        assert_eq!(headroom.full_in, Duration::from_secs(30));
    }
}
