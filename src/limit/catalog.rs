//! The catalog of limiter specs: how the admin side learns a rate
//! limiter's quota (and a lease limiter's `max_leases`) without being told.
//!
//! Each [`RateLimiter`](super::RateLimiter) publishes its spec — kind,
//! name, algorithm, limit, period, burst, shadow — and each
//! [`LeaseLimiter`](crate::LeaseLimiter) its `max_leases` and
//! `lease_ttl` (as limit and period) to one small string key per kind and name,
//! `<ns>:{shardlimit.catalog}:catalog:<kind>:<name>`, holding the specs
//! published (`limit period_us burst shadow`), each with when it was last
//! published (server time, ms): `60 60000000 60 0 1796233532503,…`. Every
//! catalog key has the same hash tag, so the whole catalog is one slot and
//! the admin side reads it in one call on one master at any cluster size;
//! it is written only off the check path (at build, on a change, and by a
//! background refresh every [`CATALOG_REFRESH`]), so that one slot is never
//! hot.
//!
//! * **Always a TTL**: each publication is one `SET … PX` of
//!   [`CATALOG_TTL`] (after one `GET`), dropping the specs not published
//!   again within it, so a limiter no process runs any more leaves the
//!   catalog within [`CATALOG_TTL`], and no refused or failed command can
//!   leave the key without its TTL.
//! * **Never on the check path**: a background task per limiter publishes
//!   when it is built (or at its first check, if it was built outside a
//!   tokio runtime), when [`set_quota`](super::RateLimiter::set_quota) or
//!   [`set_shadow`](super::RateLimiter::set_shadow) change it, and every
//!   [`CATALOG_REFRESH`] while a handle to it exists. A check only reads one
//!   atomic flag.
//! * **Never fails a check**: a publication that fails is logged
//!   (`tracing::warn!`) and counted ([`CatalogPublishing`]), and tried again
//!   at the next refresh.
//! * **Several specs for one name** (two processes, or two versions of a
//!   service, disagreeing on `api`'s quota) are all kept (at most 16, the
//!   newest); the admin side shows them all and says so ("2 specs
//!   published"), and counts against the strictest. A
//!   limiter whose spec changes drops its previous spec at once; another
//!   process still publishing it puts it back at its next refresh.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::quota::Quota;
use super::script::LimitSpec;
use crate::cluster::Cluster;
use crate::error::Result;
use crate::keys::{KeyBuilder, KeyId, ParsedKey};
use crate::scripts;

/// How long a catalog entry lives without being published again: the
/// key's TTL, and the age at which one spec of it is stale.
pub const CATALOG_TTL: Duration = Duration::from_secs(90);

/// How often a live limiter publishes its spec again by default (a tenth
/// jittered, so processes started together spread out; see
/// [`RateLimiterBuilder::catalog_refresh`](super::RateLimiterBuilder::catalog_refresh)).
pub const CATALOG_REFRESH: Duration = Duration::from_secs(30);

/// The hash tag of every catalog key: the whole catalog is one slot.
pub(crate) const CATALOG_SUBJECT: &str = "shardlimit.catalog";

/// The `kind` part of every catalog key; its `name` part is the limiter's
/// kind and its `part` the limiter's name.
pub(crate) const CATALOG_KIND: &str = "catalog";

/// The most specs one name's entry keeps (the oldest beyond are dropped):
/// bounds the entry whatever the processes publish.
const MOST_SPECS: u32 = 16;

/// The id of the catalog key of limiter `kind`/`name`.
pub(crate) fn catalog_id(kind: &str, name: &str) -> Result<KeyId> {
    KeyId::new(CATALOG_KIND, kind)?.with_part(name)
}

/// What every catalog key of `keys`' namespace starts with.
pub(crate) fn catalog_prefix(keys: &KeyBuilder) -> Vec<u8> {
    format!("{}:{{{CATALOG_SUBJECT}}}:{CATALOG_KIND}:", keys.namespace()).into_bytes()
}

/// Whether `parsed` is a catalog key: `(kind, name)` of the limiter it
/// describes.
pub(crate) fn catalog_entry<'k>(parsed: &ParsedKey<'k>) -> Option<(&'k str, &'k str)> {
    (parsed.kind == CATALOG_KIND && *parsed.subject == *CATALOG_SUBJECT.as_bytes())
        .then_some(())
        .and_then(|()| Some((parsed.name, parsed.part?)))
}

/// A spec as a catalog field: `limit period_us burst shadow`.
pub(crate) fn encode(quota: &Quota, shadow: bool) -> String {
    format!(
        "{} {} {} {}",
        quota.limit(),
        quota.period().as_micros(),
        quota.burst(),
        u8::from(shadow)
    )
}

/// A catalog field back into its quota and shadow mode; `None` for
/// anything [`encode`] cannot have written (fields of ASCII digits only,
/// as strict as an override's).
pub(crate) fn decode(field: &str) -> Option<(Quota, bool)> {
    let number = |text: &str| {
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse::<u64>().ok())
            .flatten()
    };
    let fields: Vec<u64> = field.split(' ').map(number).collect::<Option<_>>()?;
    let [limit, period_us, burst, shadow] = fields[..] else {
        return None;
    };
    let limit = NonZeroU32::new(u32::try_from(limit).ok()?)?;
    let burst = NonZeroU32::new(u32::try_from(burst).ok()?)?;
    let shadow = match shadow {
        0 => false,
        1 => true,
        _ => return None,
    };
    let quota = Quota::with_period(limit, Duration::from_micros(period_us));
    let quota = if burst == limit {
        quota
    } else {
        quota.allow_burst(burst)
    };
    Some((quota, shadow))
}

/// How a limiter's catalog publications went, for this process (see
/// [`RateLimiter::catalog_publishing`](super::RateLimiter::catalog_publishing)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CatalogPublishing {
    /// Publications Redis confirmed.
    pub published: u64,
    /// Publications that failed (each logged; the next refresh tries again).
    pub failed: u64,
}

/// One limiter's publishing state, shared by its clones.
#[derive(Debug)]
pub(crate) struct Publication {
    /// How often it publishes again.
    refresh: Duration,
    /// Whether its background task runs.
    started: AtomicBool,
    /// Wakes the task to publish now: the spec changed.
    wake: Arc<Notify>,
    published: AtomicU64,
    failed: AtomicU64,
}

impl Publication {
    pub(crate) fn new(refresh: Duration) -> Self {
        Publication {
            refresh,
            started: AtomicBool::new(false),
            wake: Arc::default(),
            published: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// A limiter that never publishes: marked as started, so no task is
    /// ever spawned for it (see `RateLimiterBuilder::publish_spec`).
    pub(crate) fn never(refresh: Duration) -> Self {
        let publication = Publication::new(refresh);
        publication.started.store(true, Ordering::Relaxed);
        publication
    }

    /// Whether the background task runs (one relaxed load: the check path's
    /// only cost).
    pub(crate) fn started(&self) -> bool {
        self.started.load(Ordering::Relaxed)
    }

    /// Publishes again now: the spec changed.
    pub(crate) fn changed(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn counts(&self) -> CatalogPublishing {
        CatalogPublishing {
            published: self.published.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// What the background task needs of a limiter, which it holds weakly:
/// the task ends once every handle is dropped.
pub(crate) trait Publishes: Send + Sync + 'static {
    fn cluster(&self) -> &Cluster;
    /// Its key id (kind and name) and its spec as a catalog field.
    fn entry(&self) -> (KeyId, String);
    fn publication(&self) -> &Publication;
}

/// A rate limiter's entry.
pub(crate) fn limit_entry(spec: &LimitSpec) -> (KeyId, String) {
    (spec.id.clone(), encode(&spec.quota, spec.shadow))
}

/// A lease limiter's entry: its `max_leases` as the limit and burst, its
/// `lease_ttl` (ms) as the period (never shadow).
pub(crate) fn lease_entry(id: &KeyId, max_leases: NonZeroU32, lease_ms: u64) -> (KeyId, String) {
    let lease = Quota::with_period(max_leases, Duration::from_millis(lease_ms));
    (id.clone(), encode(&lease, false))
}

/// Starts `this`'s background task, once; without a tokio runtime, nothing
/// (the next check tries again).
pub(crate) fn start<T: Publishes>(this: &Arc<T>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if this.publication().started.swap(true, Ordering::AcqRel) {
        return;
    }
    runtime.spawn(run(Arc::downgrade(this)));
}

/// Publishes now, then at every refresh or change, while a handle lives.
async fn run<T: Publishes>(limiter: Weak<T>) {
    let mut before: Option<String> = None;
    loop {
        let Some(this) = limiter.upgrade() else {
            return;
        };
        let (id, field) = this.entry();
        match publish(this.cluster(), &id, &field, before.as_deref()).await {
            Ok(()) => {
                this.publication().published.fetch_add(1, Ordering::Relaxed);
                before = Some(field);
            }
            Err(error) => {
                this.publication().failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    limiter = %id.name(),
                    kind = %id.kind(),
                    %error,
                    "shardlimit: publishing the limiter's spec to the catalog failed; \
                     checks go on, the next refresh tries again"
                );
            }
        }
        let (wake, refresh) = (this.publication().wake.clone(), this.publication().refresh);
        drop(this);
        tokio::select! {
            () = tokio::time::sleep(jittered(refresh)) => {}
            () = wake.notified() => {}
        }
    }
}

/// One `catalog_publish` script on the catalog's slot.
async fn publish(cluster: &Cluster, id: &KeyId, field: &str, before: Option<&str>) -> Result<()> {
    let id = catalog_id(id.kind(), id.name())?;
    let keys = cluster.keys().key_set(CATALOG_SUBJECT, [&id])?;
    let ttl = CATALOG_TTL.as_millis().to_string();
    let _held: u32 = cluster
        .eval(
            &scripts::CATALOG_PUBLISH,
            &keys,
            (field, before.unwrap_or(""), ttl, MOST_SPECS),
        )
        .await?;
    Ok(())
}

/// `period` less up to a tenth, at random.
fn jittered(period: Duration) -> Duration {
    period - period.mul_f64(rand::random::<f64>() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_back_as_written() {
        let nz = |n| NonZeroU32::new(n).unwrap();
        for (quota, shadow) in [
            (Quota::per_minute(nz(60)), false),
            (Quota::per_second(nz(10)).allow_burst(nz(25)), true),
        ] {
            let field = encode(&quota, shadow);
            assert_eq!(decode(&field), Some((quota, shadow)), "{field}");
        }
        assert_eq!(
            encode(&Quota::per_minute(nz(60)), false),
            "60 60000000 60 0"
        );
        for bad in ["", "60 60000000 60", "60 60000000 60 2", "x 1 1 0"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn catalog_keys_are_recognised_and_share_one_slot() {
        let keys = crate::keys::KeyBuilder::new("sl").unwrap();
        let api = keys
            .key(CATALOG_SUBJECT, &catalog_id("gcra", "api").unwrap())
            .unwrap();
        assert_eq!(api, b"sl:{shardlimit.catalog}:catalog:gcra:api");
        assert!(api.starts_with(&catalog_prefix(&keys)));
        let parsed = ParsedKey::parse(&api).unwrap();
        assert_eq!(catalog_entry(&parsed), Some(("gcra", "api")));
        let other = keys
            .key(CATALOG_SUBJECT, &catalog_id("fw", "login").unwrap())
            .unwrap();
        assert_eq!(crate::keys::slot(&api), crate::keys::slot(&other));
        // A subject's own keys are never catalog keys, whatever it is named.
        let user = keys
            .key(CATALOG_SUBJECT, &KeyId::new("gcra", "api").unwrap())
            .unwrap();
        assert_eq!(catalog_entry(&ParsedKey::parse(&user).unwrap()), None);
    }
}
