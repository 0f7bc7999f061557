//! `Cluster::wait_ready`: for a lazily connected handle, wait until the
//! topology is read.

use std::time::Duration;

use super::Cluster;
use super::exec::not_connected;
use crate::error::{Error, Result};

/// How often `wait_ready` looks whether the background connect finished.
/// Short next to a connect (a round trip per seed), long next to a spin.
const POLL: Duration = Duration::from_millis(10);

impl Cluster {
    /// Waits until the handle has read the cluster's topology, at most
    /// `timeout`: at once for a handle built without
    /// [`lazy_connect`](crate::cluster::ClusterBuilder::lazy_connect), which read it
    /// in `build`. Until then every call fails with
    /// [`Error::NotConnectedYet`].
    ///
    /// Errors with [`Error::Connect`]: not transient when the seeds refused
    /// the connection (TLS, credentials), transient when no topology was
    /// read within `timeout` (the background connect carries on).
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// use shardlimit::Cluster;
    ///
    /// // Start serving even if Redis is down; give it 2 s to be ready first.
    /// let cluster = Cluster::builder(["redis://10.0.0.5:6379"]).lazy_connect(true).build().await?;
    /// if let Err(err) = cluster.wait_ready(Duration::from_secs(2)).await {
    ///     eprintln!("starting without Redis for now: {err}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let router = &self.inner.router;
        let wait = async {
            loop {
                if router.loaded() {
                    return Ok(());
                }
                match not_connected(router) {
                    refused @ Error::Connect { .. } => return Err(refused),
                    _ => router.request_refresh(),
                }
                tokio::time::sleep(POLL).await;
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_) => Err(Error::Connect {
                nodes: router.seed_list().to_owned(),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no topology within {timeout:?}"),
                )
                .into(),
            }),
        }
    }
}
