//! What every handler shares.

use std::sync::Arc;

use super::csrf::Csrf;
use super::jobs::Job;
use super::options::WebOptions;
use shardlimit::Cluster;
use shardlimit::admin::{AuditReport, Catalog, CountReport, Scanner};
use shardlimit::cluster::Topology;

/// The router's state: one per [`router`](super::router) call.
pub(super) struct AppState {
    pub(super) cluster: Cluster,
    /// Unfiltered, with the configured `COUNT`.
    pub(super) scanner: Scanner,
    pub(super) options: WebOptions,
    pub(super) csrf: Csrf,
    pub(super) count: Arc<Job<CountReport>>,
    pub(super) audit: Arc<Job<AuditReport>>,
}

pub(super) type Shared = Arc<AppState>;

impl AppState {
    pub(super) fn new(cluster: &Cluster, options: WebOptions) -> Shared {
        Arc::new(AppState {
            cluster: cluster.clone(),
            scanner: Scanner::new(cluster).count(options.scan_count),
            csrf: Csrf::new(options.confirm_ttl),
            options,
            count: Job::new(),
            audit: Job::new(),
        })
    }
}

impl AppState {
    /// What rows are judged against: the catalog the limiters published,
    /// read now (its one slot: `CLUSTER SLOTS`, `GETKEYSINSLOT` and one
    /// pipeline on its master), with the quotas the router was given,
    /// which win. A catalog that cannot be read leaves the given quotas,
    /// and the error to show.
    pub(super) async fn quotas(&self) -> (Catalog, Option<String>) {
        self.with_given(self.scanner.catalog().await)
    }

    /// [`quotas`](Self::quotas) with the topology the page read.
    pub(super) async fn quotas_at(&self, topology: &Topology) -> (Catalog, Option<String>) {
        self.with_given(self.scanner.catalog_at(topology).await)
    }

    fn with_given(&self, read: shardlimit::Result<Catalog>) -> (Catalog, Option<String>) {
        let (mut catalog, error) = match read {
            Ok(catalog) => (catalog, None),
            Err(err) => (Catalog::new(), Some(err.to_string())),
        };
        for (name, quota) in &self.options.quotas {
            catalog.give(name.clone(), *quota);
        }
        (catalog, error)
    }
}
