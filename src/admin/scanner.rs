//! `Scanner`: walks every master with `SCAN`, never `KEYS`, never MULTI.

mod actions;
mod catalog;
mod cursor;
mod filter;
mod page;
mod plan;
mod read;
mod reply;
mod settings;
mod subject;
mod tally;
mod throttled;
mod walk;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::{Stream, StreamExt};

use self::plan::{Found, Mode};
use self::tally::tally;
use self::walk::Event;
use super::info::{LimiterInfo, Progress};
use crate::cluster::{Cluster, Topology};
use crate::error::{Error, Result};

pub use self::actions::{KeyState, MAX_GIVEN_TTL, MIN_GIVEN_TTL};
pub use self::cursor::PageCursor;
use self::filter::Filter;
pub use self::page::{MAX_PAGE_ROUNDS, PAGE_SCANS_PER_MASTER, Page};

/// How many keys one `SCAN` call asks for by default. See
/// [`Scanner::count`].
pub const DEFAULT_SCAN_COUNT: u32 = 100;

/// Walks every master of the cluster for the keys of one namespace and turns
/// them back into primitives: the "all limiters" view that hash tags
/// otherwise lose.
///
/// * **Non-transactional by design**: each master is walked with `SCAN`
///   (never `KEYS`, never MULTI), and the state of each page's keys is read
///   in one pipeline (and a rate limiter's override and block, when its
///   state key's `EXISTS` found one, in a second); nothing blocks a node for
///   longer than one `SCAN` call.
/// * **At-least-once**: masters are walked concurrently. If a master fails or
///   changes role mid-scan, its slots' new owner is looked up in a fresh
///   topology and walked **from the start** (SCAN cursors do not carry over
///   between nodes), so primitives already reported may be reported again.
///   With no failover, each primitive is reported exactly once. A master
///   that cannot be walked after several attempts is reported with
///   [`ScanEvent::Incomplete`]. [`count_limiters`](Self::count_limiters)
///   and [`audit`](Self::audit) instead count such a master once (its last
///   walk) and say the result is approximate.
/// * **A snapshot in motion**: keys created or expiring during the walk may
///   or may not be seen (SCAN's own guarantee: keys present for the whole
///   walk are returned).
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use futures::StreamExt;
/// use shardlimit::admin::{ScanEvent, Scanner};
///
/// let scanner = Scanner::new(&cluster).kind("gcra").subject_glob("user:*");
/// let mut events = Box::pin(scanner.scan());
/// while let Some(event) = events.next().await {
///     match event {
///         ScanEvent::Limiter(info) => println!("{} {} {}", info.kind, info.subject_lossy(), info.usage.describe()),
///         ScanEvent::Unrecognized { key, .. } => println!("not ours: {}", String::from_utf8_lossy(&key)),
///         ScanEvent::Incomplete { node, error } => eprintln!("{node} not fully scanned: {error}"),
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct Scanner {
    cluster: Cluster,
    count: u32,
    filter: Filter,
    progress: Option<ProgressFn>,
}

/// A progress callback.
type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// One thing a scan found.
#[derive(Debug)]
#[non_exhaustive]
pub enum ScanEvent {
    /// A primitive and its state.
    Limiter(LimiterInfo),
    /// A key under the namespace that the key parser does not recognise, or
    /// one named like a primitive but holding another Redis type (its state
    /// read answered `WRONGTYPE`). Either way the walk goes on.
    Unrecognized {
        /// The key.
        key: Vec<u8>,
        /// The master it is on.
        node: String,
    },
    /// A master whose walk could not be completed: some primitives may be
    /// missing.
    Incomplete {
        /// The master last tried.
        node: String,
        /// The last error.
        error: Error,
    },
}

/// Primitives per master, kind and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CountReport {
    /// `(node id, kind, name)` → number of primitives: keys without a part,
    /// and a part key only when it stands for a primitive whose main key
    /// is gone (a free lock's fence; a rate limiter's override for a
    /// subject with no state, or its block with neither). A rate limiter's
    /// override and block are never counted beside its state.
    ///
    /// Keyed by the master's node id, not its address: a replica promoted
    /// after a failover is a master with an id of its own, and its counts
    /// are its own. [`masters`](Self::masters) gives each id's address.
    pub counts: BTreeMap<(String, String, String), u64>,
    /// The masters walked: node id → address (`host:port`).
    pub masters: BTreeMap<String, String>,
    /// Keys the parser does not recognise.
    pub unrecognized: u64,
    /// Masters that could not be fully walked (address), with the last
    /// error: their counts may be low.
    pub incomplete: Vec<(String, String)>,
    /// Why the counts may be off though every master was walked — a master
    /// failed mid-walk and its slots were walked again on its successor, or
    /// the masters or their slots changed during the walk — one sentence
    /// each; empty when nothing moved. A master walked again is counted
    /// once (its last walk), never twice.
    pub approximate: Vec<String>,
}

impl CountReport {
    /// Total over every node, kind and name.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Primitives per master, by node id.
    #[must_use]
    pub fn per_master(&self) -> BTreeMap<&str, u64> {
        let mut per = BTreeMap::new();
        for id in self.masters.keys() {
            per.insert(id.as_str(), 0);
        }
        for ((id, _, _), n) in &self.counts {
            *per.entry(id.as_str()).or_default() += n;
        }
        per
    }
}

/// Keys that break the namespace's promises.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditReport {
    /// Keys scanned (a master walked again after a failover counts once:
    /// its last walk).
    pub scanned: u64,
    /// Keys with **no TTL** (a counter written with GETSET, say: they never go away), with
    /// their master.
    pub immortal: Vec<(Vec<u8>, String)>,
    /// Keys the parser does not recognise, with their master.
    pub unrecognized: Vec<(Vec<u8>, String)>,
    /// Masters that could not be fully walked (address), with the last
    /// error.
    pub incomplete: Vec<(String, String)>,
    /// Why the result may be off though every master was walked (see
    /// [`CountReport::approximate`]).
    pub approximate: Vec<String>,
}

impl AuditReport {
    /// Whether nothing was found and every master was walked.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.immortal.is_empty() && self.unrecognized.is_empty() && self.incomplete.is_empty()
    }
}

/// One shard's finds while counting.
#[derive(Default)]
struct ShardCount {
    counts: BTreeMap<(String, String), u64>,
    unrecognized: u64,
}

/// One shard's finds while auditing.
#[derive(Default)]
struct ShardAudit {
    immortal: Vec<Vec<u8>>,
    unrecognized: Vec<Vec<u8>>,
}

impl Scanner {
    /// A scanner for `cluster`'s namespace.
    pub fn new(cluster: &Cluster) -> Self {
        Scanner {
            cluster: cluster.clone(),
            count: DEFAULT_SCAN_COUNT,
            filter: Filter::default(),
            progress: None,
        }
    }

    /// Keys asked for per `SCAN` call. Default 100.
    ///
    /// A `SCAN` call blocks its node for time proportional to `COUNT` (it
    /// visits that many hash-table buckets). Measured on the project's
    /// 2-core test machine with 666k keys per master: COUNT 1000 took
    /// 1.9 ms per call at the median (p99 6.7 ms) — a stall for every
    /// other client of that node; COUNT 100 takes 150 µs (p99 0.7 ms) and
    /// still walks 1,000,000 limiters in about 3 s; COUNT 50 halves the
    /// call again for about 40% less throughput. Raise it on a dedicated,
    /// idle cluster; lower it if your latency budget is tighter.
    pub fn count(mut self, count: u32) -> Self {
        self.count = count.max(1);
        self
    }

    /// Only primitives of this kind (e.g. `gcra`, `lock`).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.filter.kind = Some(kind.into());
        self
    }

    /// Only primitives with this name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.filter.name = Some(name.into());
        self
    }

    /// Only subjects matching this glob: `*` any bytes, `?` one byte, `\`
    /// escapes the next byte.
    pub fn subject_glob(mut self, glob: impl AsRef<[u8]>) -> Self {
        self.filter.subject_glob = Some(glob.as_ref().to_vec());
        self
    }

    /// Called after every `SCAN` page with the node's progress.
    pub fn on_progress(mut self, progress: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// Every primitive under the namespace (matching the filters), as a
    /// stream; masters are walked concurrently. See the type docs for the
    /// at-least-once guarantee.
    pub fn scan(&self) -> impl Stream<Item = ScanEvent> + Send + 'static {
        let rx = self.walk(Mode::List);
        futures::stream::unfold(rx, |mut rx| async move {
            let event = match rx.recv().await? {
                Event::NodeFound { node, found, .. } => match found {
                    Found::Limiter(info) => Some(ScanEvent::Limiter(info)),
                    Found::Unrecognized(key) => Some(ScanEvent::Unrecognized {
                        key,
                        node: node.to_string(),
                    }),
                    Found::Counted { .. } | Found::Immortal(_) => None,
                },
                Event::Incomplete { node, error } => Some(ScanEvent::Incomplete { node, error }),
                // At least once: what a failed walk gave stays given.
                Event::NodeDone { .. } | Event::Restart { .. } | Event::Approximate(_) => None,
            };
            Some((event, rx))
        })
        .filter_map(|event| async move { event })
    }

    /// Primitives per master, kind and name (keys are parsed, not read;
    /// a part key costs one `EXISTS` of the keys that stand before it).
    /// A master that fails mid-walk is walked again on its successor and
    /// counted once; see [`CountReport::approximate`].
    pub async fn count_limiters(&self) -> Result<CountReport> {
        let walked = tally(
            self.walk(Mode::Count),
            |c: &mut ShardCount, found| match found {
                Found::Counted { kind, name } => *c.counts.entry((kind, name)).or_default() += 1,
                Found::Unrecognized(_) => c.unrecognized += 1,
                Found::Limiter(_) | Found::Immortal(_) => {}
            },
        )
        .await;
        let mut report = CountReport {
            incomplete: walked.incomplete,
            approximate: walked.approximate,
            ..CountReport::default()
        };
        for shard in walked.shards.into_values() {
            let id = &shard.node.id;
            report.masters.insert(id.clone(), shard.node.to_string());
            report.unrecognized += shard.found.unrecognized;
            for ((kind, name), n) in shard.found.counts {
                *report.counts.entry((id.clone(), kind, name)).or_default() += n;
            }
        }
        Ok(report)
    }

    /// Checks that every key under the namespace has a TTL and is one the
    /// parser recognises. The kind/name/subject filters do not apply: an
    /// audit looks at every key.
    pub async fn audit(&self) -> Result<AuditReport> {
        let rx = self.unfiltered().walk(Mode::Audit);
        let walked = tally(rx, |a: &mut ShardAudit, found| match found {
            Found::Immortal(key) => a.immortal.push(key),
            Found::Unrecognized(key) => a.unrecognized.push(key),
            Found::Limiter(_) | Found::Counted { .. } => {}
        })
        .await;
        let mut report = AuditReport {
            incomplete: walked.incomplete,
            approximate: walked.approximate,
            ..AuditReport::default()
        };
        for shard in walked.shards.into_values() {
            let node = shard.node.to_string();
            report.scanned += shard.scanned;
            let with_node = |keys: Vec<Vec<u8>>| keys.into_iter().map(|k| (k, node.clone()));
            report.immortal.extend(with_node(shard.found.immortal));
            report
                .unrecognized
                .extend(with_node(shard.found.unrecognized));
        }
        report.immortal.sort();
        report.unrecognized.sort();
        Ok(report)
    }

    /// Every primitive of one subject (all kinds and names; the filters do
    /// not apply), read from the subject's slot on its master — no walk:
    /// `CLUSTER SLOTS`, `CLUSTER GETKEYSINSLOT` for the whole slot in one
    /// call (a slot holds about `keys / 16384`; one of over 1,000 keys is
    /// counted first, and one of over 50,000, which `GETKEYSINSLOT`, having
    /// no cursor, would return at once, is searched with a `SCAN` for the
    /// subject's key prefix), and one pipeline reading its primitives (two
    /// when a rate limiter has an override or a block).
    pub async fn subject(&self, subject: impl AsRef<[u8]>) -> Result<Vec<LimiterInfo>> {
        let topology = self.cluster.topology().await?;
        self.subject_at(&topology, subject.as_ref()).await
    }

    /// [`subject`](Self::subject) with the topology the caller read (see
    /// [`Cluster::topology_within`](crate::Cluster::topology_within)).
    pub async fn subject_at(
        &self,
        topology: &Topology,
        subject: &[u8],
    ) -> Result<Vec<LimiterInfo>> {
        let (_, primitives) = self
            .subject_primitives(topology, subject, None, None)
            .await?;
        Ok(primitives)
    }

    /// Deletes one subject's keys — all of them, or only those of `kind`
    /// and/or `name` — in one MULTI/EXEC on the subject's slot, unless one
    /// of them is in use: a held lock, a lease limiter with leases held, a
    /// counter with a non-zero value. Returns how many keys were deleted.
    ///
    /// Errors with [`Error::ResetRefused`] (nothing deleted) when something
    /// is in use; [`plan_reset`](Self::plan_reset) shows what would be
    /// deleted and [`ResetPlan::execute`](super::ResetPlan::execute) with
    /// `force` deletes regardless.
    ///
    /// ```no_run
    /// # async fn demo(scanner: shardlimit::admin::Scanner) -> shardlimit::Result<()> {
    /// let deleted = scanner.reset("user:42", Some("gcra"), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset(
        &self,
        subject: impl AsRef<[u8]>,
        kind: Option<&str>,
        name: Option<&str>,
    ) -> Result<u64> {
        self.plan_reset(subject, kind, name)
            .await?
            .execute(self, false)
            .await
    }

    /// This scanner without its kind, name and subject filters.
    fn unfiltered(&self) -> Scanner {
        Scanner {
            filter: Filter::default(),
            ..self.clone()
        }
    }

    pub(super) fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

impl fmt::Debug for Scanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scanner")
            .field("namespace", &self.cluster.namespace())
            .field("count", &self.count)
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}
