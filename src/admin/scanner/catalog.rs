//! Reading the catalog of rate limiter specs: one slot, one master.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::Scanner;
use crate::admin::catalog::{Catalog, PublishedSpec};
use crate::cluster::Topology;
use crate::error::{Error, Result};
use crate::keys::{Kind, ParsedKey};
use crate::limit::{Algorithm, CATALOG_SUBJECT, CATALOG_TTL, catalog_entry, decode_catalog};

impl Scanner {
    /// The rate limiter specs published to the
    /// [catalog](crate::limit#the-catalog) under this namespace, fresher
    /// than [`CATALOG_TTL`](crate::limit::CATALOG_TTL) — one slot on one
    /// master, whatever the namespace holds: `CLUSTER SLOTS`,
    /// `GETKEYSINSLOT`, and `TIME` with one `GET` per limiter name in one
    /// pipeline. The filters do not apply. Give it quotas of your own with
    /// [`Catalog::give`], then ask it each row's
    /// [`headroom`](Catalog::headroom).
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::admin::Scanner;
    /// let catalog = Scanner::new(&cluster).catalog().await?;
    /// for spec in catalog.published() {
    ///     println!("{} {}: {} per {:?}", spec.kind, spec.name, spec.quota.limit(), spec.quota.period());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn catalog(&self) -> Result<Catalog> {
        let topology = self.cluster.topology().await?;
        self.catalog_at(&topology).await
    }

    /// [`catalog`](Self::catalog) with the topology the caller read (see
    /// [`Cluster::topology_within`](crate::Cluster::topology_within)).
    pub async fn catalog_at(&self, topology: &Topology) -> Result<Catalog> {
        let (owner, keys) = self
            .subject_keys(topology, CATALOG_SUBJECT.as_bytes(), None, None, true)
            .await?;
        let mut catalog = Catalog::new();
        if keys.is_empty() {
            return Ok(catalog);
        }
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for key in &keys {
            pipe.cmd("GET").arg(key);
        }
        let mut replies = self
            .cluster
            .node_pipeline("catalog read", &owner, pipe)
            .await?
            .into_iter();
        let now_ms = server_ms(replies.next())?;
        for (key, reply) in keys.iter().zip(replies) {
            let Ok(parsed) = ParsedKey::parse(key) else {
                continue;
            };
            let Some((kind, name)) = catalog_entry(&parsed) else {
                continue;
            };
            let algorithm = Algorithm::from_kind(kind);
            if algorithm.is_none() && kind != Kind::Lease.as_str() {
                continue;
            }
            // A key of another type (WRONGTYPE) or gone: nothing published.
            let held = Option::<String>::from_redis_value(reply)
                .ok()
                .flatten()
                .unwrap_or_default();
            for entry in held.split(',') {
                let Some((field, at)) = entry.rsplit_once(' ') else {
                    continue;
                };
                let (Some((quota, shadow)), Ok(at)) = (decode_catalog(field), at.parse::<u64>())
                else {
                    continue;
                };
                let age = Duration::from_millis(now_ms.saturating_sub(at));
                if age <= CATALOG_TTL {
                    catalog.publish(PublishedSpec {
                        kind: kind.to_owned(),
                        name: name.to_owned(),
                        algorithm,
                        quota,
                        shadow,
                        age,
                    });
                }
            }
        }
        Ok(catalog)
    }
}

/// `TIME` → milliseconds since the epoch.
fn server_ms(reply: Option<Value>) -> Result<u64> {
    let fail = |detail: String| Error::UnexpectedReply {
        op: "catalog read".into(),
        detail,
    };
    let reply = reply.ok_or_else(|| fail("no reply to TIME".into()))?;
    let (secs, micros) =
        <(u64, u64)>::from_redis_value(reply).map_err(|err| fail(err.to_string()))?;
    Ok(secs * 1000 + micros / 1000)
}
