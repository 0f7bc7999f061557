//! `Cluster::health`: is this cluster fit to hold locks?
//!
//! A lock lives in one master's memory. It survives a restart only with AOF
//! on, and survives a failover only if a replica had it — which asynchronous
//! replication does not promise unless the lock waits for one
//! ([`LockBuilder::replica_ack`](crate::lock::LockBuilder::replica_ack)), and which
//! is impossible without a connected replica. This report checks both, per
//! master: a Redis restart without AOF loses every lock at once, and the
//! jobs holding them do not find out.
//!
//! [`Cluster::health`] and its kin are the handle's methods, written here
//! beside the report they make and judge: the transport below asks the
//! nodes (`cluster/probe.rs`) and cannot name a [`Health`] without
//! importing this module back.

use std::time::Duration;

use futures::future::join_all;

use crate::cluster::{Cluster, NodeAddr, NodeState, Topology};
use crate::error::Result;
use crate::keys::SLOT_COUNT;

mod parse;

/// What [`Cluster::health`] found: every master with its persistence and
/// replication state.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// let health = cluster.health().await?;
/// for problem in health.lock_problems() {
///     eprintln!("locks are not safe here: {problem}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Health {
    /// One entry per master, sorted by address.
    pub masters: Vec<MasterHealth>,
    /// Slots with an owner in the topology (`CLUSTER SLOTS`); 16384 on a
    /// complete cluster. The topology keeps listing a dead master's slots
    /// until a replica takes them over: what is served is
    /// [`served_slots`](Self::served_slots).
    pub covered_slots: usize,
}

/// One master of the cluster and what it reported.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// for m in cluster.health().await?.masters {
///     println!("{} has {} replicas in the topology", m.master, m.known_replicas);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct MasterHealth {
    /// The master, as the cluster announces it.
    pub master: NodeAddr,
    /// Replicas the topology lists for it (connected or not).
    pub known_replicas: usize,
    /// Its `INFO` and `CLUSTER INFO`, or why it could not be asked.
    pub status: Result<NodeHealth>,
    /// This handle's own view of the node: connections opened, failed
    /// attempts, and whether it is believed down (its calls then fail at
    /// once). The [`status`](Self::status) does not come from it: each
    /// report asks the node afresh.
    pub client_view: Option<NodeState>,
}

/// What one master reported about itself.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// for m in cluster.health().await?.masters {
///     if let Ok(node) = &m.status {
///         assert!(node.aof_enabled, "{}: a restart would lose every lock", m.master);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHealth {
    /// `aof_enabled:1` — without AOF a restart loses every lock.
    pub aof_enabled: bool,
    /// `aof_last_write_status:ok` — false when the disk is failing writes.
    pub aof_last_write_ok: bool,
    /// `role`, e.g. `master` (anything else: the topology is changing).
    pub role: String,
    /// `connected_slaves`: replicas streaming from it now. Zero means a
    /// failover has nothing up to date to promote, and `WAIT` cannot succeed.
    pub connected_replicas: u32,
    /// `cluster_state:ok` as this node sees the cluster; always true for a
    /// standalone server (which is not asked `CLUSTER INFO`).
    pub cluster_state_ok: bool,
    /// `cluster_slots_assigned`: slots this node sees assigned to a master;
    /// `None` for a standalone server.
    pub slots_assigned: Option<usize>,
    /// `cluster_slots_ok`: slots this node sees served by a master in no
    /// failure state; `None` for a standalone server.
    pub slots_ok: Option<usize>,
    /// `cluster_slots_pfail`: slots whose master this node cannot reach
    /// (not yet agreed failed by the others); `None` for a standalone server.
    pub slots_pfail: Option<usize>,
    /// `cluster_slots_fail`: slots whose master the cluster agreed has
    /// failed, and that no replica has taken over; `None` for a standalone
    /// server.
    pub slots_fail: Option<usize>,
    /// `used_memory`: bytes the node's data and overhead take.
    pub used_memory: u64,
    /// `DBSIZE`: keys on the node, every namespace.
    pub keys: u64,
    /// The replicas streaming from it now, as it lists them (`slaveN:` in
    /// `INFO replication`): a replica the topology still lists but that is
    /// not here is not connected.
    pub replicas: Vec<ReplicaLink>,
}

/// One replica connected to a master, as the master lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaLink {
    /// `host:port` the replica announced.
    pub addr: String,
    /// `online` when streaming; `wait_bgsave` or `send_bulk` while it
    /// resynchronises.
    pub state: String,
    /// Seconds since its last acknowledgement.
    pub lag: Option<u64>,
}

impl Health {
    /// Everything that makes locks on this cluster unsafe, one sentence
    /// each; empty when every master answered, has AOF on and writing, has a
    /// connected replica, and sees the cluster as `ok` with every slot
    /// covered.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// let problems = cluster.health().await?.lock_problems();
    /// assert!(problems.is_empty(), "{problems:?}");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn lock_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let served = self.served_slots();
        if served != usize::from(SLOT_COUNT) {
            problems.push(format!("only {served} of {SLOT_COUNT} slots are served"));
        }
        for m in &self.masters {
            let node = &m.master;
            let status = match &m.status {
                Ok(status) => status,
                Err(err) => {
                    problems.push(format!("{node}: did not answer: {err}"));
                    continue;
                }
            };
            if !status.aof_enabled {
                problems.push(format!(
                    "{node}: AOF is off, so a restart loses every lock on it"
                ));
            } else if !status.aof_last_write_ok {
                problems.push(format!("{node}: the last AOF write failed"));
            }
            if status.connected_replicas == 0 {
                problems.push(format!(
                    "{node}: no connected replica, so a failover loses its locks and WAIT cannot succeed"
                ));
            }
            if status.role != "master" {
                problems.push(format!("{node}: reports role {:?}", status.role));
            }
            if !status.cluster_state_ok {
                problems.push(format!("{node}: sees the cluster state as not ok"));
            }
        }
        problems
    }

    /// Slots served now, from the masters' `CLUSTER INFO`: the fewest any
    /// answering master reports as served by a master in no failure state
    /// (`cluster_slots_ok`), and no more than the topology assigns
    /// ([`covered_slots`](Self::covered_slots)). The topology still lists a
    /// dead master's slots until a replica takes them over; the masters'
    /// own view does not. A standalone server serves what the topology
    /// says; with no master answering, nothing is known to be served: 0.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// let health = cluster.health().await?;
    /// if health.served_slots() < 16384 {
    ///     eprintln!("{} slots have no working master", 16384 - health.served_slots());
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn served_slots(&self) -> usize {
        let answered = || self.masters.iter().filter_map(|m| m.status.as_ref().ok());
        match answered().filter_map(|s| s.slots_ok).min() {
            Some(ok) => ok.min(self.covered_slots),
            None if answered().next().is_some() => self.covered_slots,
            None => 0,
        }
    }

    /// Whether the cluster is down, even in part: a master reports
    /// `cluster_state:fail` (it then refuses every command, on every slot),
    /// fewer than 16384 slots are [served](Self::served_slots), or no
    /// master answered.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// let health = cluster.health().await?;
    /// if health.cluster_down() {
    ///     eprintln!("cluster down: {} slots unserved", 16384 - health.served_slots());
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn cluster_down(&self) -> bool {
        self.served_slots() < usize::from(SLOT_COUNT)
            || self
                .masters
                .iter()
                .any(|m| matches!(&m.status, Ok(s) if !s.cluster_state_ok))
    }

    /// Whether [`lock_problems`](Self::lock_problems) is empty.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// if !cluster.health().await?.fit_for_locks() {
    ///     eprintln!("refusing to run the export: locks are not durable here");
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fit_for_locks(&self) -> bool {
        self.lock_problems().is_empty()
    }
}

impl Cluster {
    /// [`health_within`](Self::health_within) the command timeout per node.
    ///
    /// Why it matters for locks: see [`Lock`](crate::Lock#why-persistence-and-replication-matter).
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// for m in cluster.health().await?.masters {
    ///     match m.status {
    ///         Ok(s) => println!("{} aof={} replicas={}", m.master, s.aof_enabled, s.connected_replicas),
    ///         Err(err) => println!("{} unreachable: {err}", m.master),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn health(&self) -> Result<Health> {
        self.health_within(self.command_timeout()).await
    }

    /// Asks every master (as `CLUSTER SLOTS` lists them, asked within
    /// `per_node` too), all at once, for
    /// its persistence, replication, memory, key count and `CLUSTER INFO`,
    /// each afresh — on a connection of its own, whether or not this handle
    /// believes it down — and within `per_node` (connecting included): a
    /// master back from an outage reads healthy at once, and a hung one
    /// costs the report `per_node`, reported as a timeout.
    ///
    /// Errors only when the topology cannot be read; a master that does not
    /// answer is reported in its [`MasterHealth::status`]. Writes nothing,
    /// and leaves this handle's own view of the nodes as it was.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// let health = cluster.health_within(Duration::from_millis(500)).await?;
    /// println!("{} of 16384 slots served", health.served_slots());
    /// # Ok(()) }
    /// ```
    pub async fn health_within(&self, per_node: Duration) -> Result<Health> {
        let topology = self.topology_within(per_node).await?;
        Ok(self.health_at(&topology, per_node).await)
    }

    /// [`health_within`](Self::health_within) for the masters of a topology
    /// the caller read (one topology read serving a whole page; see
    /// [`topology_within`](Self::topology_within)).
    pub async fn health_at(&self, topology: &Topology, per_node: Duration) -> Health {
        let masters = join_all(topology.shards.iter().map(|shard| async move {
            let status = self
                .probe_fresh(&shard.master, per_node)
                .await
                .map(|probe| parse::parse(&probe));
            let addr = shard.master.to_string();
            MasterHealth {
                master: shard.master.clone(),
                known_replicas: shard.replicas.len(),
                status,
                client_view: self.nodes().into_iter().find(|n| n.addr == addr),
            }
        }))
        .await;
        Health {
            masters,
            covered_slots: topology.covered_slots(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(aof: bool, replicas: u32) -> MasterHealth {
        MasterHealth {
            master: NodeAddr {
                host: "127.0.0.1".into(),
                port: 7000,
                id: "a".into(),
            },
            known_replicas: 1,
            client_view: None,
            status: Ok(NodeHealth {
                aof_enabled: aof,
                aof_last_write_ok: true,
                role: "master".into(),
                connected_replicas: replicas,
                cluster_state_ok: true,
                slots_assigned: Some(16384),
                slots_ok: Some(16384),
                slots_pfail: Some(0),
                slots_fail: Some(0),
                used_memory: 1 << 20,
                keys: 0,
                replicas: Vec::new(),
            }),
        }
    }

    #[test]
    fn problems_name_the_node_and_the_risk() {
        let good = Health {
            masters: vec![node(true, 1)],
            covered_slots: 16384,
        };
        assert!(good.fit_for_locks());
        let bad = Health {
            masters: vec![node(false, 0)],
            covered_slots: 16000,
        };
        let problems = bad.lock_problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("16000"));
        assert!(problems[1].contains("127.0.0.1:7000: AOF is off"));
        assert!(problems[2].contains("no connected replica"));
        assert!(!bad.fit_for_locks());
    }

    #[test]
    fn served_slots_and_cluster_down_come_from_cluster_info() {
        let failing = |ok: usize| {
            let mut m = node(true, 1);
            if let Ok(s) = &mut m.status {
                s.cluster_state_ok = false;
                s.slots_ok = Some(ok);
                s.slots_fail = Some(16384 - ok);
            }
            m
        };
        let down = Health {
            masters: vec![failing(10923), node(true, 1)],
            covered_slots: 16384,
        };
        assert_eq!(down.served_slots(), 10923, "the fewest any master serves");
        assert!(down.cluster_down());
        let up = Health {
            masters: vec![node(true, 1)],
            covered_slots: 16384,
        };
        assert!(!up.cluster_down());
        let mut silent = node(true, 1);
        silent.status = Err(crate::Error::UnexpectedReply {
            op: "health probe".into(),
            detail: "no answer".into(),
        });
        let unknown = Health {
            masters: vec![silent],
            covered_slots: 16384,
        };
        assert_eq!(unknown.served_slots(), 0, "not the topology's 16384");
        assert!(unknown.cluster_down());
    }
}
