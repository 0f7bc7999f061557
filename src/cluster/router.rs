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

mod refresh;
mod sentinel;
mod standalone;

use redis::{ConnectionAddr, ConnectionInfo, Value};

use super::call::{Refresh, Request, node_request};
use super::deployment::{Deployment, is_cluster_disabled};
use super::node::{Node, NodeConfig, NodeState};
use super::topology::Topology;
use crate::error::{Error, Result};

/// Number of hash slots in a Redis Cluster.
const SLOTS: usize = 16384;

/// Routing settings, from the builder.
#[derive(Clone)]
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
    /// The service the sentinels are asked about (`Deployment::Sentinel`).
    service: Option<String>,
    table: RwLock<Table>,
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    refresh: Mutex<RefreshState>,
    /// The last refresh failed because the nodes refused us (TLS,
    /// credentials); cleared by a successful one.
    refusal: Mutex<Option<redis::RedisError>>,
    /// Wakes a refresh waiting out its spacing (`refresh_now`).
    wake: Arc<tokio::sync::Notify>,
    /// The last switch of the primary the sentinels announced.
    switch: Mutex<Option<sentinel::Switch>>,
    this: Weak<Router>,
}

struct Table {
    owners: Vec<Option<Arc<Node>>>,
    /// False until a topology was installed.
    loaded: bool,
    /// Bumped by every change of `owners`.
    version: u64,
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

impl Refresh for Router {
    fn request_refresh(&self) {
        Router::request_refresh(self);
    }
}

impl Router {
    pub(crate) fn new(
        seeds: Vec<ConnectionInfo>,
        seed_list: String,
        config: RouterConfig,
        deployment: Deployment,
        service: Option<String>,
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
        if (deployment == Deployment::Sentinel) != service.is_some() {
            return Err(Error::Config {
                field: "sentinel_service",
                reason: "a Sentinel deployment needs a service name, and only it takes one"
                    .to_owned(),
            });
        }
        Ok(Arc::new_cyclic(|this| Router {
            seeds,
            template,
            seed_list,
            config,
            deployment: RwLock::new(deployment),
            service,
            table: RwLock::new(Table {
                owners: vec![None; SLOTS],
                loaded: false,
                version: 0,
            }),
            nodes: Mutex::new(HashMap::new()),
            refresh: Mutex::new(RefreshState::default()),
            refusal: Mutex::new(None),
            wake: Arc::new(tokio::sync::Notify::new()),
            switch: Mutex::new(None),
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

    /// Whether every slot is served by one server that is no cluster node:
    /// a standalone server, or the primary the sentinels name. No cluster
    /// command is sent to it and a redirect from it is an error.
    pub(crate) fn is_standalone(&self) -> bool {
        matches!(
            self.deployment(),
            Deployment::Standalone | Deployment::Sentinel
        )
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

    /// A weak handle to this router, for background tasks that must end
    /// with it.
    pub(crate) fn handle(&self) -> Weak<Router> {
        self.this.clone()
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

    /// The node serving each slot, as the table knows it now, and the
    /// table's version.
    pub(crate) fn owners(&self) -> (u64, Vec<Option<Arc<Node>>>) {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        (table.version, table.owners.clone())
    }

    /// The table's version: a change of any slot's owner changes it.
    pub(crate) fn table_version(&self) -> u64 {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .version
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
        let node = Arc::new(Node::new(addr.clone(), info, self.config.node.clone()));
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
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(owner) = table.owners.get_mut(usize::from(slot)) {
            *owner = Some(node);
            table.version += 1;
        }
        drop(table);
        self.request_refresh();
    }

    fn refresh_state(&self) -> std::sync::MutexGuard<'_, RefreshState> {
        self.refresh.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks for a topology refresh in the background; returns at once.
    pub(crate) fn request_refresh(&self) {
        // A standalone server's topology never changes: nothing to refresh
        // once it is installed.
        // (A Sentinel primary's does: the sentinels may name another.)
        if self.deployment() == Deployment::Standalone && self.loaded() {
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
        tokio::spawn(refresh::refresh_loop(this));
    }

    /// Asks for a refresh at once: no spacing after the last one, no
    /// backoff from failed ones (the sentinels announced a switch).
    pub(crate) fn refresh_now(&self) {
        let mut state = self.refresh_state();
        state.failures = 0;
        state.next_allowed = None;
        drop(state);
        self.wake.notify_one();
        self.request_refresh();
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

    /// The masters of the table, each once, those believed down left out.
    fn masters_up(&self) -> Vec<Arc<Node>> {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        let mut masters: Vec<Arc<Node>> = Vec::new();
        for node in table.owners.iter().flatten() {
            if !node.is_down() && !masters.iter().any(|m| Arc::ptr_eq(m, node)) {
                masters.push(node.clone());
            }
        }
        masters
    }

    /// Opens a connection to every master that has none, all at once, each
    /// within `within` (see `Node::warm`): so the first request to each
    /// does not spend its command timeout connecting.
    pub(crate) async fn connect_masters(&self, within: Duration) {
        let masters = self.masters_up();
        futures::future::join_all(masters.iter().map(|node| node.warm(within))).await;
    }

    /// `CLUSTER SLOTS` from the first node that answers with a non-empty
    /// map: the masters in the table that are up (in random order, to spread
    /// the load), then the seeds.
    ///
    /// With [`Deployment::Sentinel`], the sentinels are asked instead (see
    /// `sentinel`).
    ///
    /// A standalone server is never asked: it serves every slot (on first
    /// use, it is checked not to be a cluster node). With
    /// [`Deployment::Detect`], the only seed answering that cluster support
    /// is disabled makes the deployment standalone.
    pub(crate) async fn fetch(&self) -> Result<Topology> {
        self.fetch_within(self.config.command_timeout).await
    }

    /// [`fetch`](Self::fetch), each `CLUSTER SLOTS` bounded by `per_node`
    /// instead of the command timeout.
    pub(crate) async fn fetch_within(&self, per_node: Duration) -> Result<Topology> {
        if self.deployment() == Deployment::Sentinel {
            return self.sentinel_topology().await;
        }
        if self.is_standalone() {
            if !self.loaded() {
                self.check_standalone().await?;
            }
            return self.standalone_topology();
        }
        let mut candidates = self.masters_up();
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
            match self.cluster_slots(&node, per_node).await {
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

    async fn cluster_slots(&self, node: &Arc<Node>, timeout: Duration) -> Result<Topology> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply: Value =
            node_request(node, "cluster slots", Request::Cmd(&cmd), timeout, self).await?;
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
        table.version += 1;
        Ok(())
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
mod tests;
