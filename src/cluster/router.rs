//! The crate's own routing: a slot table, one connection per node, and a
//! background topology refresh.
//!
//! Why not redis-rs' `ClusterConnection`: measured on the six-node test
//! cluster, killing one master under load made ~98% of the calls for the
//! *healthy* masters' slots fail for the ~2 s before the cluster even marked
//! the master failed — its slot refresh, started by the first error, stalls
//! every request on every node until it completes. One multiplexed connection
//! per node, chosen here, isolates the nodes completely: a request only ever
//! waits for the node that owns its slot.
//!
//! * The **slot table** maps each of the 16384 slots to the node serving it
//!   (`CLUSTER SLOTS`). A `MOVED` reply updates the slot's entry at once and
//!   asks for a refresh.
//! * The **refresh** runs in the background, single flight, at most once per
//!   `refresh_interval` (jittered); it repeats while a slot is unserved or
//!   served by a node that is down, and backs off when no node answers.
//!   Callers never wait for it.
//! * **Nodes** are created on first use (from the table, a redirect, or an
//!   address the admin tools name) with the seed's settings, and track their
//!   own health (see `node`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::{Client, ConnectionAddr, ConnectionInfo, Value};

use super::deployment::{Deployment, is_cluster_disabled};
use super::node::{Node, NodeConfig, NodeState};
use super::topology::{NodeAddr, Shard, Topology};
use crate::error::{Error, Result};

/// Number of hash slots in a Redis Cluster.
const SLOTS: usize = 16384;

/// Routing settings, from the builder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RouterConfig {
    pub(crate) node: NodeConfig,
    /// Bound on one `CLUSTER SLOTS` request.
    pub(crate) command_timeout: Duration,
    /// Least time between two topology refreshes.
    pub(crate) refresh_interval: Duration,
}

pub(crate) struct Router {
    /// Every seed, as given, for the first topology and whenever no known
    /// master answers.
    seeds: Vec<ConnectionInfo>,
    /// What a discovered node is reached with: the first seed's settings
    /// (credentials, TLS, protocol) at the node's address.
    template: ConnectionInfo,
    /// The seeds as shown in errors.
    seed_list: String,
    config: RouterConfig,
    /// What the seeds are: as configured, and once `Detect` has found out,
    /// `Cluster` or `Standalone` for good.
    deployment: RwLock<Deployment>,
    table: RwLock<Table>,
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    refresh: Mutex<RefreshState>,
    /// The last refresh failed because the nodes refused us (TLS,
    /// credentials); cleared by a successful one.
    refusal: Mutex<Option<redis::RedisError>>,
    this: Weak<Router>,
}

struct Table {
    owners: Vec<Option<Arc<Node>>>,
    /// False until a topology was installed.
    loaded: bool,
}

#[derive(Default)]
struct RefreshState {
    running: bool,
    /// A refresh was asked for since the running one started.
    pending: bool,
    next_allowed: Option<Instant>,
    failures: u32,
    refreshes: u64,
}

impl Router {
    pub(crate) fn new(
        seeds: Vec<ConnectionInfo>,
        seed_list: String,
        config: RouterConfig,
        deployment: Deployment,
    ) -> Result<Arc<Self>> {
        let template = seeds.first().cloned().ok_or_else(|| Error::Config {
            field: "nodes",
            reason: "at least one node URL is needed".to_owned(),
        })?;
        if deployment == Deployment::Standalone && seeds.len() > 1 {
            return Err(Error::Config {
                field: "nodes",
                reason: format!(
                    "a standalone deployment has exactly one server, {} were given ({seed_list})",
                    seeds.len()
                ),
            });
        }
        Ok(Arc::new_cyclic(|this| Router {
            seeds,
            template,
            seed_list,
            config,
            deployment: RwLock::new(deployment),
            table: RwLock::new(Table {
                owners: vec![None; SLOTS],
                loaded: false,
            }),
            nodes: Mutex::new(HashMap::new()),
            refresh: Mutex::new(RefreshState::default()),
            refusal: Mutex::new(None),
            this: this.clone(),
        }))
    }

    /// The seeds as shown to people (passwords as `***`).
    pub(crate) fn seed_list(&self) -> &str {
        &self.seed_list
    }

    /// The deployment: as configured, or what `Detect` found.
    pub(crate) fn deployment(&self) -> Deployment {
        *self
            .deployment
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether every slot is served by the one standalone server.
    pub(crate) fn is_standalone(&self) -> bool {
        self.deployment() == Deployment::Standalone
    }

    fn settle_deployment(&self, deployment: Deployment) {
        let mut current = self
            .deployment
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if *current == Deployment::Detect {
            *current = deployment;
        }
    }

    /// Why the last topology refresh was refused, if it was.
    pub(crate) fn refusal(&self) -> Option<redis::RedisError> {
        self.refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The node serving `slot`, if the table knows one.
    pub(crate) fn owner(&self, slot: u16) -> Option<Arc<Node>> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .owners
            .get(usize::from(slot))
            .cloned()
            .flatten()
    }

    /// Whether a topology was ever installed.
    pub(crate) fn loaded(&self) -> bool {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .loaded
    }

    /// The node at `host:port`, created on first use.
    pub(crate) fn node(&self, host: &str, port: u16) -> Result<Arc<Node>> {
        let addr = format!("{host}:{port}");
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = nodes.get(&addr) {
            return Ok(node.clone());
        }
        let info = self
            .template
            .clone()
            .set_addr(at_address(self.template.addr(), host, port)?);
        let client = Client::open(info).map_err(|err| Error::Config {
            field: "nodes",
            reason: format!("{addr}: {err}"),
        })?;
        let node = Arc::new(Node::new(addr.clone(), client, self.config.node));
        nodes.insert(addr, node.clone());
        Ok(node)
    }

    /// Every node this router has talked to or learnt of, sorted.
    pub(crate) fn node_states(&self) -> Vec<NodeState> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut states: Vec<_> = nodes.values().map(|n| n.state()).collect();
        states.sort_by(|a, b| a.addr.cmp(&b.addr));
        states
    }

    /// Topology refreshes completed.
    pub(crate) fn refreshes(&self) -> u64 {
        self.refresh_state().refreshes
    }

    /// A `MOVED` reply: `slot` is served by `host:port` now.
    pub(crate) fn moved(&self, slot: u16, node: Arc<Node>) {
        if let Some(owner) = self
            .table
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .owners
            .get_mut(usize::from(slot))
        {
            *owner = Some(node);
        }
        self.request_refresh();
    }

    fn refresh_state(&self) -> std::sync::MutexGuard<'_, RefreshState> {
        self.refresh.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks for a topology refresh in the background; returns at once.
    pub(crate) fn request_refresh(&self) {
        // A standalone server's topology never changes: nothing to refresh
        // once it is installed.
        if self.is_standalone() && self.loaded() {
            return;
        }
        let mut state = self.refresh_state();
        state.pending = true;
        if state.running {
            return;
        }
        state.running = true;
        drop(state);
        let this = self.this.clone();
        tokio::spawn(refresh_loop(this));
    }

    /// Reads the topology now (build time): the seeds in order, each within
    /// the command timeout.
    pub(crate) async fn load(&self) -> Result<()> {
        let topology = self.fetch().await?;
        self.install(&topology)?;
        let mut state = self.refresh_state();
        state.refreshes += 1;
        state.next_allowed = Some(Instant::now() + self.config.refresh_interval);
        Ok(())
    }

    /// `CLUSTER SLOTS` from the first node that answers with a non-empty
    /// map: the masters in the table that are up (in random order, to spread
    /// the load), then the seeds.
    ///
    /// A standalone server is never asked: it serves every slot (on first
    /// use, it is checked not to be a cluster node). With
    /// [`Deployment::Detect`], the only seed answering that cluster support
    /// is disabled makes the deployment standalone.
    pub(crate) async fn fetch(&self) -> Result<Topology> {
        if self.is_standalone() {
            if !self.loaded() {
                self.check_standalone().await?;
            }
            return self.standalone_topology();
        }
        let mut candidates: Vec<Arc<Node>> = {
            let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
            let mut masters: Vec<Arc<Node>> = Vec::new();
            for node in table.owners.iter().flatten() {
                if !node.is_down() && !masters.iter().any(|m| Arc::ptr_eq(m, node)) {
                    masters.push(node.clone());
                }
            }
            masters
        };
        shuffle(&mut candidates);
        for seed in &self.seeds {
            if let Some((host, port)) = host_port(seed.addr()) {
                let node = self.node(&host, port)?;
                if !candidates.iter().any(|c| Arc::ptr_eq(c, &node)) {
                    candidates.push(node);
                }
            }
        }
        let mut last: Option<Error> = None;
        for node in candidates {
            match self.cluster_slots(&node).await {
                Ok(topology) if topology.covered_slots() > 0 => {
                    self.settle_deployment(Deployment::Cluster);
                    return Ok(topology);
                }
                Ok(_) => {
                    last = Some(Error::UnexpectedReply {
                        op: "cluster slots".into(),
                        detail: format!("{} serves no slots", node.addr()),
                    });
                }
                Err(err) if is_cluster_disabled(&err) && !self.loaded() => {
                    return self.not_a_cluster(&node);
                }
                Err(err) => last = Some(err),
            }
        }
        Err(Error::Connect {
            nodes: self.seed_list.clone(),
            source: match last {
                Some(Error::Redis { source, .. }) => source,
                Some(other) => std::io::Error::other(other.to_string()).into(),
                None => std::io::Error::other("no node to ask").into(),
            },
        })
    }

    /// A seed said it is no cluster node, before any topology was known:
    /// standalone if that is allowed, else a configuration error.
    fn not_a_cluster(&self, node: &Node) -> Result<Topology> {
        let deployment = self.deployment();
        if deployment == Deployment::Detect && self.seeds.len() == 1 {
            self.settle_deployment(Deployment::Standalone);
            tracing::info!(
                node = node.addr(),
                "shardlimit: standalone Redis (cluster support disabled)"
            );
            return self.standalone_topology();
        }
        let reason = if deployment == Deployment::Detect {
            format!(
                "{} has cluster support disabled, and {} seeds were given ({}): a standalone \
                 server must be the only seed, and a cluster's seeds must all be cluster nodes",
                node.addr(),
                self.seeds.len(),
                self.seed_list
            )
        } else {
            format!(
                "{} has cluster support disabled; for one standalone server use \
                 Deployment::Standalone (or detect)",
                node.addr()
            )
        };
        Err(Error::Config {
            field: "nodes",
            reason,
        })
    }

    /// Refuses a cluster node given as a standalone server: its traffic
    /// would all go to one node and be redirected.
    async fn check_standalone(&self) -> Result<()> {
        let (host, port) = self.standalone_addr()?;
        let node = self.node(&host, port)?;
        let mut cmd = redis::cmd("INFO");
        cmd.arg("cluster");
        let reply: Value = super::exec::node_request(
            &node,
            "info cluster",
            super::exec::Request::Cmd(&cmd),
            self.config.command_timeout,
            self,
        )
        .await?;
        let info: String =
            redis::from_redis_value(reply).map_err(|err| Error::UnexpectedReply {
                op: "info cluster".into(),
                detail: err.to_string(),
            })?;
        if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
            return Err(Error::Config {
                field: "deployment",
                reason: format!(
                    "{host}:{port} is a cluster node, not a standalone server; use \
                     Deployment::Cluster (or detect)"
                ),
            });
        }
        Ok(())
    }

    fn standalone_addr(&self) -> Result<(String, u16)> {
        host_port(self.template.addr()).ok_or_else(|| Error::Config {
            field: "nodes",
            reason: format!(
                "{}: only TCP and TLS addresses are supported",
                self.template.addr()
            ),
        })
    }

    /// The one standalone server, serving every slot.
    fn standalone_topology(&self) -> Result<Topology> {
        let (host, port) = self.standalone_addr()?;
        let last = u16::try_from(SLOTS - 1).unwrap_or(u16::MAX);
        Ok(Topology {
            shards: vec![Shard {
                master: NodeAddr {
                    host,
                    port,
                    id: "standalone".to_owned(),
                },
                replicas: Vec::new(),
                slots: vec![0..=last],
            }],
        })
    }

    async fn cluster_slots(&self, node: &Arc<Node>) -> Result<Topology> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply: Value = super::exec::node_request(
            node,
            "cluster slots",
            super::exec::Request::Cmd(&cmd),
            self.config.command_timeout,
            self,
        )
        .await?;
        Topology::from_cluster_slots(reply)
    }

    fn install(&self, topology: &Topology) -> Result<()> {
        let mut owners: Vec<Option<Arc<Node>>> = vec![None; SLOTS];
        for shard in &topology.shards {
            let node = self.node(&shard.master.host, shard.master.port)?;
            for range in &shard.slots {
                for slot in range.clone() {
                    if let Some(owner) = owners.get_mut(usize::from(slot)) {
                        *owner = Some(node.clone());
                    }
                }
            }
        }
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        table.owners = owners;
        table.loaded = true;
        Ok(())
    }

    /// Whether the table is settled: every slot served, no server down.
    fn settled(&self) -> bool {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        table.loaded
            && table
                .owners
                .iter()
                .all(|owner| owner.as_ref().is_some_and(|n| !n.is_down()))
    }

    /// The wait before the next refresh: the interval while refreshes
    /// succeed (so a failover is noticed quickly), growing to the reconnect
    /// cap while they fail; jittered.
    fn next_interval(&self, failures: u32) -> Duration {
        let base = self.config.refresh_interval;
        let grown = base
            .checked_mul(1u32 << failures.min(16))
            .unwrap_or(Duration::MAX)
            .min(self.config.node.reconnect_max.max(base));
        grown.mul_f64(rand::random_range(0.75..=1.0))
    }
}

/// The background refresh: one at a time, spaced by the interval, repeated
/// while asked for again or while the table is not settled. Holds only a
/// `Weak` between rounds, so it ends with the last `Cluster` clone.
async fn refresh_loop(this: Weak<Router>) {
    loop {
        let wait = {
            let Some(router) = this.upgrade() else { return };
            let mut state = router.refresh_state();
            state.pending = false;
            state.next_allowed.map_or(Duration::ZERO, |at| {
                at.saturating_duration_since(Instant::now())
            })
        };
        tokio::time::sleep(wait).await;
        let Some(router) = this.upgrade() else { return };
        let result = match router.fetch().await {
            Ok(topology) => router.install(&topology),
            Err(err) => Err(err),
        };
        *router
            .refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = match &result {
            Err(Error::Connect { source, .. }) if !crate::error::is_transient_redis(source) => {
                Some(source.clone())
            }
            _ => None,
        };
        let mut state = router.refresh_state();
        match &result {
            Ok(()) => {
                state.failures = 0;
                state.refreshes += 1;
            }
            Err(err) => {
                state.failures += 1;
                tracing::debug!(error = %err, "shardlimit: topology refresh failed");
            }
        }
        crate::metrics::topology_refresh(result.is_ok());
        state.next_allowed = Some(Instant::now() + router.next_interval(state.failures));
        let again = state.pending || result.is_err();
        drop(state);
        if !again && router.settled() {
            let mut state = router.refresh_state();
            // A request that arrived after the check above still runs.
            if !state.pending {
                state.running = false;
                return;
            }
        }
    }
}

/// `template`'s kind of address (plain TCP or TLS with its settings) at
/// `host:port`.
fn at_address(template: &ConnectionAddr, host: &str, port: u16) -> Result<ConnectionAddr> {
    match template {
        ConnectionAddr::Tcp(..) => Ok(ConnectionAddr::Tcp(host.to_owned(), port)),
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => Ok(ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        }),
        other => Err(Error::Config {
            field: "nodes",
            reason: format!("{other}: only TCP and TLS addresses can reach a cluster"),
        }),
    }
}

fn host_port(addr: &ConnectionAddr) -> Option<(String, u16)> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}

fn shuffle<T>(items: &mut [T]) {
    use rand::seq::SliceRandom;
    items.shuffle(&mut rand::rng());
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    fn router(seeds: &[&str], deployment: Deployment) -> Result<Arc<Router>> {
        let seeds: Vec<ConnectionInfo> = seeds
            .iter()
            .map(|s| s.into_connection_info().unwrap())
            .collect();
        let second = Duration::from_secs(1);
        Router::new(
            seeds,
            "test seeds".to_owned(),
            RouterConfig {
                node: NodeConfig {
                    connect_timeout: second,
                    down_after: 3,
                    failure_window: second,
                    reconnect_min: second,
                    reconnect_max: second,
                },
                command_timeout: second,
                refresh_interval: second,
            },
            deployment,
        )
    }

    #[test]
    fn a_standalone_server_owns_every_slot() {
        let router = router(&["redis://127.0.0.1:6390"], Deployment::Standalone).unwrap();
        let topology = router.standalone_topology().unwrap();
        assert_eq!(topology.covered_slots(), SLOTS);
        assert_eq!(topology.shards.len(), 1);
        assert_eq!(topology.shards[0].master.to_string(), "127.0.0.1:6390");
        assert_eq!(topology.shards[0].master.id, "standalone");
        router.install(&topology).unwrap();
        let first = router.owner(0).unwrap();
        assert!(Arc::ptr_eq(&first, &router.owner(16383).unwrap()));
    }

    #[test]
    fn standalone_takes_exactly_one_seed() {
        let err = router(
            &["redis://127.0.0.1:6390", "redis://127.0.0.1:6391"],
            Deployment::Standalone,
        )
        .err()
        .unwrap();
        assert!(matches!(err, Error::Config { field: "nodes", .. }), "{err}");
    }

    #[test]
    fn only_a_lone_detected_seed_becomes_standalone() {
        let lone = router(&["redis://127.0.0.1:6390"], Deployment::Detect).unwrap();
        let node = lone.node("127.0.0.1", 6390).unwrap();
        assert!(lone.not_a_cluster(&node).is_ok());
        assert_eq!(lone.deployment(), Deployment::Standalone);

        let several = router(
            &["redis://127.0.0.1:6390", "redis://127.0.0.1:6391"],
            Deployment::Detect,
        )
        .unwrap();
        let node = several.node("127.0.0.1", 6390).unwrap();
        let err = several.not_a_cluster(&node).unwrap_err();
        assert!(err.to_string().contains("only seed"), "{err}");
        assert_eq!(several.deployment(), Deployment::Detect);

        let cluster = router(&["redis://127.0.0.1:6390"], Deployment::Cluster).unwrap();
        let node = cluster.node("127.0.0.1", 6390).unwrap();
        assert!(cluster.not_a_cluster(&node).is_err());
        assert_eq!(cluster.deployment(), Deployment::Cluster);
    }

    #[test]
    fn a_detected_deployment_is_settled_once() {
        let router = router(&["redis://127.0.0.1:7000"], Deployment::Detect).unwrap();
        router.settle_deployment(Deployment::Cluster);
        router.settle_deployment(Deployment::Standalone);
        assert_eq!(router.deployment(), Deployment::Cluster);
    }
}
