//! The cluster-wide view: every primitive under a namespace, on every
//! master, without transactions and without blocking any node.
//!
//! Hash tags buy scale but lose the global view: a `SCAN` on one node sees
//! only the keys of its slots, so "show me all limiters" needs a walk over
//! every master. [`Scanner`] does that walk concurrently, parses every key
//! back into its subject and primitive with the key parser, reads each
//! primitive's state in pipelines, and streams [`LimiterInfo`]s. It also
//! counts primitives per node, kind and name ([`Scanner::count_limiters`]),
//! audits the namespace for keys without a TTL — which never go away — and
//! keys the parser does not recognise ([`Scanner::audit`]), and deletes one
//! subject's keys in one slot-pinned transaction ([`Scanner::reset`]) —
//! refusing a held lock, a lease limiter with leases held or an undrained
//! counter unless forced, with a dry run first ([`Scanner::plan_reset`], [`ResetPlan`]).
//! A page of the walk is bounded ([`Scanner::page`]), or fills itself
//! within a time budget ([`Scanner::page_within`]) and says how much of the
//! namespace it has walked ([`Page::walked`]). The operator's other
//! actions: lift a subject's block ([`Scanner::unblock`]), clear its
//! override ([`Scanner::clear_override`]), give a key the audit found
//! without a TTL one ([`Scanner::give_ttl`], never changing a TTL a key
//! has). An operator's lookup of a typed subject reads it as it is and by
//! the keyed digest credentials are limited under ([`Scanner::lookup`]).
//!
//! [`throttled()`] merges what every process reports of the subjects its
//! limiters deny most ("throttled now"; on by default, off per limiter
//! with [`report_throttled`](crate::limit::RateLimiterBuilder::report_throttled)),
//! and [`Scanner::throttled_namespaces`] says which namespaces have reports.
//!
//! The `shardlimit` command-line tool (crates/shardlimit-cli) and the Limits
//! page (crates/shardlimit-web) are built on it.

mod catalog;
mod info;
#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub mod json;
mod lookup;
mod reset;
mod scanner;
mod throttled;

pub use crate::usage::Usage;
pub use catalog::{Catalog, Headroom, PublishedSpec, QuotaSource};
pub use info::{LimiterInfo, Progress};
pub use lookup::Lookup;
pub use reset::{InUse, ResetPlan};
pub use scanner::{
    AuditReport, CountReport, DEFAULT_SCAN_COUNT, KeyState, MAX_GIVEN_TTL, MAX_PAGE_ROUNDS,
    MIN_GIVEN_TTL, PAGE_SCANS_PER_MASTER, Page, PageCursor, ScanEvent, Scanner,
};
pub use throttled::{Throttled, ThrottledName, ThrottledSubject, throttled};
