//! The per-master walk: one task per master `SCAN`ning the namespace page
//! by page, rescanning a master's slots from their new owner if it fails.
//!
//! A rescan starts with [`Event::Restart`], so a consumer adding up the
//! walk (`tally`) drops what the failed attempt gave and counts each key
//! once; a rescan on another node, and a topology that differs at the end
//! from the one walked, are reported with [`Event::Approximate`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Scanner;
use super::plan::{Found, Mode};
use super::read::read_page;
use crate::admin::info::Progress;
use crate::cluster::NodeAddr;
use crate::error::{Error, Result};
use crate::limit::catalog_prefix;

/// Attempts per master before its scan is reported incomplete.
const MAX_ATTEMPTS: u32 = 5;

impl Scanner {
    /// Every key on `node` matching `pattern`, `SCAN`ning `count` keys per
    /// call; each key once (SCAN may return a key twice).
    pub(super) async fn scan_matching(
        &self,
        node: &NodeAddr,
        pattern: &[u8],
    ) -> Result<Vec<Vec<u8>>> {
        let mut found = std::collections::BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(self.count);
            let (next, keys): (u64, Vec<Vec<u8>>) =
                self.cluster.node_command("scan", node, scan).await?;
            found.extend(keys);
            if next == 0 {
                return Ok(found.into_iter().collect());
            }
            cursor = next;
        }
    }

    /// Starts one task per master; events arrive on the returned channel,
    /// which closes when every master is done. Dropping the receiver stops
    /// the tasks at their next page.
    pub(super) fn walk(&self, mode: Mode) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel(1024);
        let scanner = self.clone();
        tokio::spawn(async move {
            let topology = match scanner.cluster.topology().await {
                Ok(t) => t,
                Err(error) => {
                    let _ = tx
                        .send(Event::Incomplete {
                            node: "(topology)".into(),
                            error,
                        })
                        .await;
                    return;
                }
            };
            let walked = layout(&topology);
            let tasks: Vec<_> = topology
                .shards
                .into_iter()
                .map(|shard| {
                    let (scanner, tx) = (scanner.clone(), tx.clone());
                    tokio::spawn(async move {
                        scanner
                            .walk_shard(mode, shard.master, shard.slots, tx)
                            .await
                    })
                })
                .collect();
            for task in tasks {
                let _ = task.await;
            }
            let now = scanner.cluster.topology().await.map(|t| layout(&t));
            if now.as_ref().ok() != Some(&walked) {
                let why = match now {
                    Ok(_) => "the masters or their slots changed during the walk (a failover or a slot migration): keys that moved may be counted twice or missed".to_owned(),
                    Err(err) => format!("the topology could not be read again after the walk to see whether it changed: {err}"),
                };
                let _ = tx.send(Event::Approximate(why)).await;
            }
        });
        rx
    }

    /// Walks the master serving `slots`, starting again on its successor if
    /// it fails or changes role.
    async fn walk_shard(
        &self,
        mode: Mode,
        mut node: NodeAddr,
        slots: Vec<std::ops::RangeInclusive<u16>>,
        tx: mpsc::Sender<Event>,
    ) {
        let Some(first_slot) = slots.first().map(|r| *r.start()) else {
            return;
        };
        let mut attempt = 0;
        loop {
            let walking = Arc::new(node.clone());
            match self.walk_node(mode, first_slot, &walking, &tx).await {
                Ok(()) | Err(WalkError::Closed) => return,
                Err(WalkError::Failed(error)) => {
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        let _ = tx
                            .send(Event::Incomplete {
                                node: node.to_string(),
                                error,
                            })
                            .await;
                        return;
                    }
                    tracing::info!(node = %node, attempt, error = %error, "shardlimit scanner: rescanning a master's slots from their current owner");
                    tokio::time::sleep(Duration::from_millis(200) * attempt).await;
                    if let Ok(topology) = self.cluster.topology().await
                        && let Some(shard) = topology.owner(first_slot)
                    {
                        node = shard.master.clone();
                    }
                    if tx.send(Event::Restart { shard: first_slot }).await.is_err() {
                        return;
                    }
                    if node.id != walking.id {
                        let why = format!(
                            "{walking} failed mid-walk ({error}); its slots were walked again on {node}, which may not have every write it took"
                        );
                        let _ = tx.send(Event::Approximate(why)).await;
                    }
                }
            }
        }
    }

    async fn walk_node(
        &self,
        mode: Mode,
        shard: u16,
        node: &Arc<NodeAddr>,
        tx: &mpsc::Sender<Event>,
    ) -> Result<(), WalkError> {
        let dbsize: u64 = self
            .cluster
            .node_command("dbsize", node, redis::cmd("DBSIZE"))
            .await
            .unwrap_or(0);
        let pattern = self.cluster.keys().scan_pattern();
        let catalog_prefix = catalog_prefix(self.cluster.keys());
        let (mut cursor, mut scanned) = (0u64, 0u64);
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(self.count);
            let (next, keys): (u64, Vec<Vec<u8>>) =
                self.cluster.node_command("scan", node, scan).await?;
            // The catalog's keys are not counted: they are not primitives
            // (an audit still checks their TTL).
            let catalog = keys
                .iter()
                .filter(|k| k.starts_with(&catalog_prefix))
                .count();
            scanned += u64::try_from(keys.len() - catalog).unwrap_or(u64::MAX);
            crate::metrics::scan_page(node, keys.len(), scanned, dbsize, next == 0);
            for found in read_page(&self.cluster, &self.filter, mode, node, keys).await? {
                tx.send(Event::NodeFound {
                    shard,
                    node: node.clone(),
                    found,
                })
                .await
                .map_err(|_| WalkError::Closed)?;
            }
            cursor = next;
            if let Some(progress) = &self.progress {
                progress(&Progress {
                    node: node.to_string(),
                    scanned,
                    dbsize,
                    done: cursor == 0,
                });
            }
            if cursor == 0 {
                let _ = tx
                    .send(Event::NodeDone {
                        shard,
                        node: node.clone(),
                        scanned,
                    })
                    .await;
                return Ok(());
            }
        }
    }
}

/// Internal walk events. `shard` is the first slot of the shard walked:
/// it stays the same when the shard's walk starts again on another node.
pub(super) enum Event {
    NodeFound {
        shard: u16,
        node: Arc<NodeAddr>,
        found: Found,
    },
    /// A master's walk finished, having seen `scanned` keys.
    NodeDone {
        shard: u16,
        node: Arc<NodeAddr>,
        scanned: u64,
    },
    /// The shard's walk failed and starts again from the start (on its
    /// current owner): what it found so far will be found again.
    Restart {
        shard: u16,
    },
    /// Why the walk's result may be off, though every master was walked.
    Approximate(String),
    Incomplete {
        node: String,
        error: Error,
    },
}

/// The masters by id and their slots: what a walk walked.
fn layout(topology: &crate::cluster::Topology) -> BTreeSet<(String, Vec<(u16, u16)>)> {
    topology
        .shards
        .iter()
        .map(|s| {
            let slots = s.slots.iter().map(|r| (*r.start(), *r.end())).collect();
            (s.master.id.clone(), slots)
        })
        .collect()
}

enum WalkError {
    /// The consumer went away.
    Closed,
    Failed(Error),
}

impl From<Error> for WalkError {
    fn from(err: Error) -> Self {
        WalkError::Failed(err)
    }
}
