//! The `Cluster` handle: one self-healing connection, two slot-pinned
//! operations. The public documentation lives on [`Cluster`].

mod conn;
mod exec;
mod topology;
mod transaction;

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{FromRedisValue, IntoConnectionInfo, RedisError, ToRedisArgs, Value};

use self::conn::{HealingConfig, HealingConnection};
use self::exec::Payload;
pub use self::topology::{NodeAddr, Shard, Topology};
pub use self::transaction::{Transaction, TxCommand};
use crate::error::{Error, Result};
use crate::keys::{KeyBuilder, KeySet};
use crate::metrics::ClusterMetrics;
use crate::scripts::Script;
use crate::stats::{Counters, Registry, Stats};

/// Environment variable with the seed nodes, comma-separated
/// `redis://host:port` URLs; read by [`Cluster::builder_from_env`].
pub const NODES_ENV: &str = "SHARDLIMIT_NODES";

/// Nodes used when [`NODES_ENV`] is unset: the six-node test cluster of
/// `cluster-compose/`.
pub const DEFAULT_NODES: [&str; 6] = [
    "redis://127.0.0.1:7000",
    "redis://127.0.0.1:7001",
    "redis://127.0.0.1:7002",
    "redis://127.0.0.1:7003",
    "redis://127.0.0.1:7004",
    "redis://127.0.0.1:7005",
];

/// A handle to a Redis Cluster. Cheap to clone; clones share one multiplexed
/// connection.
///
/// Everything shardlimit sends goes through [`Cluster::eval`] (a Lua script)
/// or [`Cluster::transaction`] (MULTI/EXEC). Both take a [`KeySet`], which
/// only exists if its keys share a hash slot, so `CROSSSLOT` cannot happen;
/// both are routed to the master owning that slot, follow `MOVED`/`ASK`
/// redirects themselves, and are bounded by the command timeout.
///
/// # Timeouts and ambiguous outcomes
///
/// Every call returns within [`ClusterBuilder::command_timeout`]. Replies
/// that prove the operation did not run — `MOVED`, `ASK`, `TRYAGAIN`,
/// `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY`, `NOSCRIPT` — are
/// retried (after a short backoff where the cluster is reconfiguring) within
/// that time. A call that times out, or whose connection breaks after it was
/// written, **may or may not have run** on the server: it is returned as a
/// transient error and never resent. So every operation runs **at most
/// once**.
///
/// During a slot migration, Redis refuses a multi-key script on the importing
/// node while some of its keys are still on the source (`TRYAGAIN`); such a
/// call is retried until the migration moves them or the timeout expires.
///
/// # Self-healing
///
/// Transient failures (timeouts, connection errors) are counted; when
/// [`ClusterBuilder::rebuild_after`] of them fall within
/// [`ClusterBuilder::failure_window`], one caller starts a rebuild of the
/// connection from the client in the background (single flight; the others
/// return their own error at once rather than queue), at most once per
/// [`ClusterBuilder::rebuild_interval`]. The new connection replaces the old
/// one for every later call. This is what keeps calls from hanging when a
/// master dies under load, where redis-rs' own connection can wedge or keep a
/// stale slot map.
///
/// ```no_run
/// # async fn demo() -> shardlimit::Result<()> {
/// use std::time::Duration;
/// use shardlimit::Cluster;
/// let cluster = Cluster::builder(["redis://127.0.0.1:7000"])
///     .namespace("myapp")
///     .command_timeout(Duration::from_millis(100))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Arc<HealingConnection>,
    keys: KeyBuilder,
    command_timeout: Duration,
    registry: Registry,
    metrics: ClusterMetrics,
}

impl Cluster {
    /// A builder for a cluster reached through `nodes` (one or more
    /// `redis://[user:password@]host:port` URLs of any nodes; the rest of the
    /// topology is discovered).
    pub fn builder<I, S>(nodes: I) -> ClusterBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClusterBuilder::new(nodes.into_iter().map(Into::into).collect())
    }

    /// A builder for the nodes in `SHARDLIMIT_NODES` (comma-separated URLs),
    /// or [`DEFAULT_NODES`] when it is unset or empty.
    pub fn builder_from_env() -> ClusterBuilder {
        match std::env::var(NODES_ENV) {
            Ok(list) if !list.trim().is_empty() => Self::builder(
                list.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            ),
            _ => Self::builder(DEFAULT_NODES),
        }
    }

    /// The key builder for this cluster's namespace.
    #[must_use]
    pub fn keys(&self) -> &KeyBuilder {
        &self.inner.keys
    }

    /// The namespace every key starts with.
    #[must_use]
    pub fn namespace(&self) -> &str {
        self.inner.keys.namespace()
    }

    /// The bound on every call.
    #[must_use]
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// How many times the connection was rebuilt after repeated transient
    /// failures.
    #[must_use]
    pub fn connection_rebuilds(&self) -> u64 {
        self.inner.conn.rebuilds()
    }

    /// Allowed / denied / bypassed / error counts of every primitive built
    /// from this handle (or its clones), by kind and name.
    #[must_use]
    pub fn stats(&self) -> Stats {
        Stats {
            primitives: self.inner.registry.snapshot(),
            connection_rebuilds: self.connection_rebuilds(),
        }
    }

    /// Whether `other` is this handle or a clone of it.
    pub(crate) fn same_connection(&self, other: &Cluster) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The outcome counters of primitive `kind`/`name`.
    pub(crate) fn counters(&self, kind: &str, name: &str) -> Arc<Counters> {
        self.inner.registry.counters(kind, name)
    }

    /// Runs `script` with `KEYS` = `keys` and `ARGV` = `args` on the master
    /// owning the key set's slot, and converts the reply to `T`.
    ///
    /// `EVALSHA` first, `EVAL` after a `NOSCRIPT`. Redirects are followed;
    /// see [Timeouts and ambiguous outcomes](Cluster#timeouts-and-ambiguous-outcomes)
    /// for what is and is not retried.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::{Script, keys::KeyId};
    /// let script = Script::new("touch", "redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return 1");
    /// let id = KeyId::new("demo", "touch")?;
    /// let keys = cluster.keys().key_set("user:42", [&id])?;
    /// let done: i64 = cluster.eval(&script, &keys, "hello").await?;
    /// # Ok(()) }
    /// ```
    pub async fn eval<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &KeySet,
        args: impl ToRedisArgs,
    ) -> Result<T> {
        let payload = Payload::script(script, keys, args);
        let value = self.run(script.name_cow(), keys.slot(), payload).await?;
        convert(script.name_cow(), value)
    }

    /// Runs `tx` as one MULTI/EXEC on the master owning the key set's slot and
    /// converts the EXEC reply (one element per command) to `T`.
    ///
    /// An `EXECABORT` caused by a redirect (the slot moved, or is migrating)
    /// executed nothing, so the whole transaction is resent to the right node
    /// — redis-rs does not do this itself. Any other abort is returned with
    /// the queued command's error.
    ///
    /// Errors with [`Error::KeyIndex`] before sending if a command refers to a
    /// key the set does not have.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::{Transaction, TxCommand, keys::KeyId};
    /// let id = KeyId::new("counter", "billing")?;
    /// let keys = cluster.keys().key_set("session:9", [&id])?;
    /// let tx = Transaction::new()
    ///     .command(TxCommand::new("INCRBY").key(0).arg(30))
    ///     .command(TxCommand::new("PEXPIRE").key(0).arg(900_000));
    /// let (total, _): (i64, i64) = cluster.transaction(&keys, &tx).await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction<T: FromRedisValue>(
        &self,
        keys: &KeySet,
        tx: &Transaction,
    ) -> Result<T> {
        tx.validate(keys)?;
        let payload = Payload::Transaction { tx, keys };
        let value = self
            .run(Cow::Borrowed("transaction"), keys.slot(), payload)
            .await?;
        convert(Cow::Borrowed("transaction"), value)
    }

    /// The masters, their slots and replicas, as a node of the cluster sees
    /// them now (`CLUSTER SLOTS`). Bounded by the command timeout.
    pub async fn topology(&self) -> Result<Topology> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let reply = self
            .bounded(
                "cluster slots".into(),
                None,
                self.command_timeout(),
                |mut conn| async move { conn.route_command(cmd, routing).await },
            )
            .await?;
        Topology::from_cluster_slots(reply)
    }

    /// Sends `cmd` to one node, by the address the cluster announces for it.
    /// Bounded by the command timeout.
    pub(crate) async fn node_command<T: FromRedisValue>(
        &self,
        op: &'static str,
        node: &NodeAddr,
        cmd: redis::Cmd,
    ) -> Result<T> {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: node.host.clone(),
            port: node.port,
        });
        let reply = self
            .bounded(
                op.into(),
                None,
                self.command_timeout(),
                |mut conn| async move { conn.route_command(cmd, routing).await?.extract_error() },
            )
            .await?;
        convert(op.into(), reply)
    }

    /// Sends `pipe` (not a transaction) to one node and returns every reply,
    /// server errors included as values. Bounded by the command timeout.
    pub(crate) async fn node_pipeline(
        &self,
        op: &'static str,
        node: &NodeAddr,
        pipe: redis::Pipeline,
    ) -> Result<Vec<Value>> {
        let routing = SingleNodeRoutingInfo::ByAddress {
            host: node.host.clone(),
            port: node.port,
        };
        let count = pipe.len();
        let reply = self
            .bounded(
                op.into(),
                None,
                self.command_timeout(),
                |mut conn| async move {
                    let replies = conn.route_pipeline(pipe, 0, count, routing).await?;
                    Ok(Value::Array(replies))
                },
            )
            .await?;
        match reply {
            Value::Array(replies) => Ok(replies),
            other => Err(Error::UnexpectedReply {
                op: op.into(),
                detail: format!("pipeline replied {other:?}"),
            }),
        }
    }

    /// Sends `cmd` to the master owning `slot` on the shared connection (so
    /// e.g. `WAIT` covers this connection's earlier writes), bounded by
    /// `timeout` rather than the command timeout.
    pub(crate) async fn slot_command<T: FromRedisValue>(
        &self,
        op: &'static str,
        slot: u16,
        cmd: redis::Cmd,
        timeout: Duration,
    ) -> Result<T> {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
            redis::cluster_routing::Route::new(slot, redis::cluster_routing::SlotAddr::Master),
        ));
        let reply = self
            .bounded(op.into(), Some(slot), timeout, |mut conn| async move {
                conn.route_command(cmd, routing).await?.extract_error()
            })
            .await?;
        convert(op.into(), reply)
    }

    async fn run(&self, op: Cow<'static, str>, slot: u16, payload: Payload<'_>) -> Result<Value> {
        self.bounded(
            op,
            Some(slot),
            self.command_timeout(),
            |mut conn| async move { exec::run(&mut conn, slot, payload).await },
        )
        .await
    }

    /// Runs `request` on the current connection within `timeout`, reporting
    /// connection trouble to the healing logic.
    async fn bounded<F, Fut>(
        &self,
        op: Cow<'static, str>,
        slot: Option<u16>,
        timeout: Duration,
        request: F,
    ) -> Result<Value>
    where
        F: FnOnce(ClusterConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<Value>>,
    {
        let generation = self.inner.conn.current();
        let Some(conn) = generation.conn.clone() else {
            // Built lazily and not connected yet: fail fast, connect soon.
            self.inner.conn.report_failure(generation.id, true);
            return Err(Error::Connect {
                nodes: self.inner.conn.nodes().to_owned(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "not connected to the cluster yet",
                )
                .into(),
            });
        };
        crate::metrics::span_slot(slot);
        let started = crate::metrics::Started::now();
        let outcome = tokio::time::timeout(timeout, request(conn)).await;
        self.inner.metrics.observe(&op, started, &outcome);
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => {
                if breaks_connection(&source) {
                    self.inner.conn.report_failure(generation.id, false);
                }
                Err(Error::Redis { op, slot, source })
            }
            Err(_elapsed) => {
                self.inner.conn.report_failure(generation.id, false);
                Err(Error::Timeout { op, slot, timeout })
            }
        }
    }
}

/// Failures that say the connection (not the cluster's configuration) is in
/// trouble, and so count towards a rebuild.
fn breaks_connection(err: &RedisError) -> bool {
    crate::error::is_connection_fault(err)
}

fn convert<T: FromRedisValue>(op: Cow<'static, str>, value: Value) -> Result<T> {
    T::from_redis_value(value).map_err(|err| Error::UnexpectedReply {
        op,
        detail: err.to_string(),
    })
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace())
            .field("command_timeout", &self.inner.command_timeout)
            .finish_non_exhaustive()
    }
}

/// Configures and connects a [`Cluster`]. Every setter states its default;
/// [`build`](Self::build) validates everything before connecting.
#[derive(Clone, Debug)]
#[must_use]
pub struct ClusterBuilder {
    nodes: Vec<String>,
    namespace: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    rebuild_after: u32,
    failure_window: Duration,
    rebuild_interval: Duration,
    lazy: bool,
}

impl ClusterBuilder {
    fn new(nodes: Vec<String>) -> Self {
        ClusterBuilder {
            nodes,
            namespace: "sl".to_owned(),
            command_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(2),
            rebuild_after: 3,
            failure_window: Duration::from_secs(1),
            rebuild_interval: Duration::from_millis(500),
            lazy: false,
        }
    }

    /// The namespace all keys start with (`[A-Za-z0-9_.-]{1,64}`). Default
    /// `"sl"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Bound on every operation, including redirects and retries. Default
    /// 250 ms — a limiter must not hang the request it protects. Must be
    /// non-zero.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Bound on establishing the connection (at build and on every rebuild).
    /// Default 2 s. Must be non-zero.
    ///
    /// Each node gets the command timeout (at least 100 ms, at most half of
    /// this) to accept a connection and answer: a hung node then fails alone
    /// and the attempt completes with the others.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Number of transient failures (timeouts, connection errors) within
    /// [`failure_window`](Self::failure_window) that triggers a rebuild of the
    /// connection. Default 3. Must be at least 1.
    pub fn rebuild_after(mut self, failures: u32) -> Self {
        self.rebuild_after = failures;
        self
    }

    /// Window in which [`rebuild_after`](Self::rebuild_after) failures are
    /// counted. Default 1 s. Must be non-zero.
    pub fn failure_window(mut self, window: Duration) -> Self {
        self.failure_window = window;
        self
    }

    /// Least time between two rebuild attempts, so a node that stays down
    /// costs one reconnect per interval. Default 500 ms.
    pub fn rebuild_interval(mut self, interval: Duration) -> Self {
        self.rebuild_interval = interval;
        self
    }

    /// Return from [`build`](Self::build) without connecting, and connect in
    /// the background. Default `false` (connect in `build`, and fail there).
    ///
    /// For services that must start while Redis is unreachable: until the
    /// first connection succeeds, every call fails with a transient
    /// [`Error::Connect`] — which fail-open limiters turn into bypassed
    /// decisions — and a connection is retried at most once per
    /// [`rebuild_interval`](Self::rebuild_interval).
    pub fn lazy_connect(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    fn node_connect_timeout(&self) -> Duration {
        self.command_timeout
            .max(Duration::from_millis(100))
            .min(self.connect_timeout / 2)
    }

    /// Validates the configuration and connects (see
    /// [`lazy_connect`](Self::lazy_connect)).
    ///
    /// Errors with [`Error::Config`] (nothing is contacted) or
    /// [`Error::Connect`].
    pub async fn build(self) -> Result<Cluster> {
        let keys = KeyBuilder::new(&self.namespace)?;
        if self.nodes.is_empty() {
            return Err(config("nodes", "at least one node URL is needed"));
        }
        for node in &self.nodes {
            node.as_str()
                .into_connection_info()
                .map_err(|err| config("nodes", format!("{node:?}: {err}")))?;
        }
        for (field, value) in [
            ("command_timeout", self.command_timeout),
            ("connect_timeout", self.connect_timeout),
            ("failure_window", self.failure_window),
        ] {
            if value.is_zero() {
                return Err(config(field, "must be greater than zero"));
            }
        }
        if self.rebuild_after == 0 {
            return Err(config("rebuild_after", "must be at least 1"));
        }
        let client = ClusterClientBuilder::new(self.nodes.iter().map(String::as_str))
            // Every retry decision is made in `exec`, where it is known
            // whether a command may have run; redis-rs would resend after
            // I/O errors.
            .retries(0)
            // redis-rs waits for every seed node before it asks for the slot
            // map, so one hung (paused) node would stall every rebuild for
            // the whole budget. A node gets no longer to connect than a
            // command gets to answer (at least 100 ms, at most half the
            // budget): a hung node then fails alone and quickly.
            .connection_timeout(self.node_connect_timeout())
            .response_timeout(self.command_timeout)
            .build()
            .map_err(|err| config("nodes", err.to_string()))?;
        let healing = HealingConfig {
            connect_timeout: self.connect_timeout,
            rebuild_after: self.rebuild_after,
            failure_window: self.failure_window,
            rebuild_interval: self.rebuild_interval,
        };
        let conn =
            HealingConnection::connect(client, self.nodes.join(","), healing, self.lazy).await?;
        Ok(Cluster {
            inner: Arc::new(Inner {
                conn,
                keys,
                command_timeout: self.command_timeout,
                registry: Registry::default(),
                metrics: ClusterMetrics::default(),
            }),
        })
    }
}

fn config(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Config {
        field,
        reason: reason.into(),
    }
}
