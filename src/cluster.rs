//! The `Cluster` handle: the crate's own routing (one connection per node),
//! two slot-pinned operations. The public documentation lives on
//! [`Cluster`].

mod deployment;
mod exec;
mod node;
mod router;
mod seeds;
mod stats;
mod topology;
mod transaction;

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, ToRedisArgs, Value};

pub use self::deployment::Deployment;
use self::exec::{Payload, Request};
use self::node::NodeConfig;
pub use self::node::NodeState;
use self::router::{Router, RouterConfig};
use self::seeds::{PasswordSource, Pem, Secret, Security};
pub use self::stats::Stats;
pub use self::topology::{NodeAddr, Shard, Topology};
pub use self::transaction::{Transaction, TxCommand};
use crate::error::{Error, Result};
use crate::keys::{KeyBuilder, KeySet};
use crate::metrics::ClusterMetrics;
use crate::outcomes::{Outcomes, Registry};
use crate::scripts::{Script, TRANSACTION_OP};

/// Environment variable with the seed nodes, comma-separated
/// `redis://host:port` (or `rediss://` for TLS) URLs; read by
/// [`Cluster::builder_from_env`].
pub const NODES_ENV: &str = "SHARDLIMIT_NODES";

/// Environment variable with the [`Deployment`] (`detect`, `cluster` or
/// `standalone`; [`ClusterBuilder::deployment`]); read by
/// [`Cluster::builder_from_env`]. Unset: `detect`.
pub const DEPLOYMENT_ENV: &str = "SHARDLIMIT_DEPLOYMENT";

/// Environment variable with the ACL username ([`ClusterBuilder::username`]);
/// read by [`Cluster::builder_from_env`].
pub const USER_ENV: &str = "SHARDLIMIT_USER";

/// Environment variable with the password ([`ClusterBuilder::password`]);
/// read by [`Cluster::builder_from_env`]. Prefer [`PASSWORD_FILE_ENV`]
/// where the environment of a process can be read by others.
pub const PASSWORD_ENV: &str = "SHARDLIMIT_PASSWORD";

/// Environment variable with the path of a file holding the password
/// ([`ClusterBuilder::password_file`]); read by
/// [`Cluster::builder_from_env`] when [`PASSWORD_ENV`] is unset.
pub const PASSWORD_FILE_ENV: &str = "SHARDLIMIT_PASSWORD_FILE";

/// Environment variable with the path of a PEM file of CA certificates
/// ([`ClusterBuilder::tls_ca_file`]); read by [`Cluster::builder_from_env`].
pub const TLS_CA_ENV: &str = "SHARDLIMIT_TLS_CA";

/// Environment variable with the path of a PEM client certificate for
/// mutual TLS ([`ClusterBuilder::tls_client_cert_files`], with
/// [`TLS_KEY_ENV`]); read by [`Cluster::builder_from_env`].
pub const TLS_CERT_ENV: &str = "SHARDLIMIT_TLS_CERT";

/// Environment variable with the path of the PEM private key of
/// [`TLS_CERT_ENV`]; read by [`Cluster::builder_from_env`].
pub const TLS_KEY_ENV: &str = "SHARDLIMIT_TLS_KEY";

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

/// A handle to a Redis Cluster, or to one standalone server that serves
/// every slot (see [`Deployment`]). Cheap to clone; clones share one slot
/// table and one multiplexed connection per node.
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
/// # Routing and failure isolation
///
/// The handle keeps its own slot table (`CLUSTER SLOTS`) and one multiplexed
/// connection per master, so a call only ever waits for the node that serves
/// its slot: a dead or hung master does not slow the others. (redis-rs'
/// cluster connection stalls every node while it refreshes its slot map
/// after one node fails; see the README's "Failure behaviour".)
///
/// * A node whose connection breaks, or that times out
///   [`ClusterBuilder::node_down_after`] times within
///   [`ClusterBuilder::failure_window`], is marked **down**: calls for its
///   slots fail at once with the transient [`Error::NodeDown`] (fail-open
///   limiters bypass, fail-closed callers are freed) instead of waiting for
///   the timeout. One probe per backoff interval
///   ([`ClusterBuilder::reconnect_backoff`], jittered, growing to its cap)
///   tries to reconnect.
/// * The topology is refreshed in the background (single flight, at most
///   every [`ClusterBuilder::refresh_interval`]) after a `MOVED`, when a
///   node goes down, and while a slot is served by a down node — so the
///   moment a replica is promoted, its slots are called again. Callers
///   never wait for a refresh.
/// * [`Cluster::nodes`] (and [`Stats::nodes`]) shows each node's state.
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
    router: Arc<Router>,
    keys: KeyBuilder,
    command_timeout: Duration,
    registry: Registry,
    metrics: ClusterMetrics,
}

impl Cluster {
    /// A builder for a cluster reached through `nodes` (one or more
    /// `redis://[user:password@]host:port` URLs of any nodes, or `rediss://`
    /// for TLS; the rest of the topology is discovered and reached with the
    /// first URL's scheme, credentials and TLS settings). Credentials are
    /// better given apart, with [`ClusterBuilder::username`] and
    /// [`ClusterBuilder::password_file`].
    pub fn builder<I, S>(nodes: I) -> ClusterBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClusterBuilder::new(nodes.into_iter().map(Into::into).collect())
    }

    /// The seed URLs of [`NODES_ENV`] (`SHARDLIMIT_NODES`, comma-separated,
    /// blanks ignored), or [`DEFAULT_NODES`] when it is unset or empty: the
    /// one reading of that variable, shared by
    /// [`builder_from_env`](Self::builder_from_env), the CLI and the benches.
    ///
    /// ```
    /// let seeds = shardlimit::Cluster::seeds_from_env();
    /// assert!(!seeds.is_empty());
    /// ```
    #[must_use]
    pub fn seeds_from_env() -> Vec<String> {
        let list = std::env::var(NODES_ENV).unwrap_or_default();
        let seeds: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if seeds.is_empty() {
            DEFAULT_NODES.iter().map(|s| (*s).to_owned()).collect()
        } else {
            seeds
        }
    }

    /// A builder for the nodes in `SHARDLIMIT_NODES` (comma-separated URLs),
    /// or [`DEFAULT_NODES`] when it is unset or empty, the deployment of
    /// [`DEPLOYMENT_ENV`] (default: detect), with the credentials
    /// and TLS files of the environment when they are set:
    /// [`USER_ENV`], [`PASSWORD_ENV`] (else [`PASSWORD_FILE_ENV`]),
    /// [`TLS_CA_ENV`], [`TLS_CERT_ENV`] and [`TLS_KEY_ENV`]. Files are read
    /// by [`ClusterBuilder::build`].
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// // SHARDLIMIT_NODES=rediss://10.0.0.5:6379 SHARDLIMIT_TLS_CA=/etc/redis/ca.crt
    /// // SHARDLIMIT_USER=app SHARDLIMIT_PASSWORD_FILE=/run/secrets/redis
    /// let cluster = shardlimit::Cluster::builder_from_env().build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_from_env() -> ClusterBuilder {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut builder = Self::builder(Self::seeds_from_env());
        if let Some(deployment) = var(DEPLOYMENT_ENV) {
            match deployment.parse() {
                Ok(deployment) => builder = builder.deployment(deployment),
                // Let build() report it instead of ignoring it.
                Err(_) => builder.deployment_env = Some(deployment),
            }
        }
        if let Some(user) = var(USER_ENV) {
            builder = builder.username(user);
        }
        if let Some(password) = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()) {
            builder = builder.password(password);
        } else if let Some(path) = var(PASSWORD_FILE_ENV) {
            builder = builder.password_file(path);
        }
        if let Some(ca) = var(TLS_CA_ENV) {
            builder = builder.tls_ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (var(TLS_CERT_ENV), var(TLS_KEY_ENV)) {
            builder = builder.tls_client_cert_files(cert, key);
        } else if let Some(half) = var(TLS_CERT_ENV).or_else(|| var(TLS_KEY_ENV)) {
            // Let build() report the missing half instead of ignoring it.
            builder.security.tls_cert = Some(Pem::File(half.into()));
        }
        builder
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

    /// Every node this handle has connected to or learnt of from the
    /// topology, with its connection counts and whether it is believed down.
    #[must_use]
    pub fn nodes(&self) -> Vec<NodeState> {
        self.inner.router.node_states()
    }

    /// Allowed / denied / bypassed / error counts of every primitive built
    /// from this handle (or its clones), by kind and name, and the state of
    /// every node.
    #[must_use]
    pub fn stats(&self) -> Stats {
        Stats {
            primitives: self.inner.registry.snapshot(),
            nodes: self.nodes(),
            topology_refreshes: self.inner.router.refreshes(),
        }
    }

    /// Whether `other` is this handle or a clone of it.
    pub(crate) fn same_connection(&self, other: &Cluster) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The outcome counts of primitive `kind`/`name`.
    pub(crate) fn outcomes(&self, kind: &str, name: &str) -> Arc<Outcomes> {
        self.inner.registry.outcomes(kind, name)
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

    /// Runs `script` like [`eval`](Self::eval), then `then` right behind it
    /// in one pipeline on the same connection to the same node, and returns
    /// both replies. For commands whose meaning depends on the connection,
    /// such as `WAIT` (which counts the writes made on its own connection).
    pub(crate) async fn eval_then<T: FromRedisValue, U: FromRedisValue>(
        &self,
        script: &Script,
        keys: &KeySet,
        args: impl ToRedisArgs,
        then: redis::Cmd,
    ) -> Result<(T, U)> {
        let payload = Payload::script(script, keys, args).then(then);
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
            .run(Cow::Borrowed(TRANSACTION_OP), keys.slot(), payload)
            .await?;
        convert(Cow::Borrowed(TRANSACTION_OP), value)
    }

    /// The deployment: [`Deployment::Cluster`] or
    /// [`Deployment::Standalone`] once known; [`Deployment::Detect`] only
    /// while a [lazily connected](ClusterBuilder::lazy_connect) handle has
    /// not reached a node yet.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) {
    /// if cluster.deployment() == shardlimit::Deployment::Standalone {
    ///     println!("one redis-server serves every slot");
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn deployment(&self) -> Deployment {
        self.inner.router.deployment()
    }

    /// Whether one standalone server serves every slot.
    pub(crate) fn is_standalone(&self) -> bool {
        self.inner.router.is_standalone()
    }

    /// The masters, their slots and replicas, as a node of the cluster sees
    /// them now (`CLUSTER SLOTS` from a master that is up, else a seed). A
    /// standalone server is one shard serving every slot, with the id
    /// `standalone`, and is not asked.
    /// Bounded by the command timeout per node asked.
    pub async fn topology(&self) -> Result<Topology> {
        self.inner.router.fetch().await
    }

    /// Sends `cmd` to one node, by the address the cluster announces for it.
    /// Bounded by the command timeout.
    pub(crate) async fn node_command<T: FromRedisValue>(
        &self,
        op: &'static str,
        node: &NodeAddr,
        cmd: redis::Cmd,
    ) -> Result<T> {
        let reply = self.node_request(op, node, Request::Cmd(&cmd)).await?;
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
        match self
            .node_request(op, node, Request::Pipeline(&pipe))
            .await?
        {
            Value::Array(replies) => Ok(replies),
            other => Err(Error::UnexpectedReply {
                op: op.into(),
                detail: format!("pipeline replied {other:?}"),
            }),
        }
    }

    async fn node_request(
        &self,
        op: &'static str,
        node: &NodeAddr,
        request: Request<'_>,
    ) -> Result<Value> {
        let router = &self.inner.router;
        let target = router.node(&node.host, node.port)?;
        let started = crate::metrics::Started::now();
        let outcome =
            exec::node_request(&target, op, request, self.command_timeout(), router).await;
        self.inner.metrics.observe(&op.into(), started, &outcome);
        outcome
    }

    async fn run(&self, op: Cow<'static, str>, slot: u16, payload: Payload<'_>) -> Result<Value> {
        crate::metrics::span_slot(Some(slot));
        let started = crate::metrics::Started::now();
        let outcome = exec::run(
            &self.inner.router,
            &op,
            slot,
            payload,
            self.command_timeout(),
        )
        .await;
        self.inner.metrics.observe(&op, started, &outcome);
        outcome
    }
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
///
/// Its `Debug` shows every node URL with the password replaced by `***`,
/// and never a password or private key given to a setter.
#[derive(Clone)]
#[must_use]
pub struct ClusterBuilder {
    nodes: Vec<String>,
    deployment: Deployment,
    /// An unparseable [`DEPLOYMENT_ENV`], reported by `build`.
    deployment_env: Option<String>,
    security: Security,
    namespace: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    node_down_after: u32,
    failure_window: Duration,
    refresh_interval: Duration,
    reconnect_min: Duration,
    reconnect_max: Duration,
    lazy: bool,
}

impl ClusterBuilder {
    fn new(nodes: Vec<String>) -> Self {
        ClusterBuilder {
            nodes,
            deployment: Deployment::Detect,
            deployment_env: None,
            security: Security::default(),
            namespace: "sl".to_owned(),
            command_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(2),
            node_down_after: 3,
            failure_window: Duration::from_secs(1),
            refresh_interval: Duration::from_millis(500),
            reconnect_min: Duration::from_millis(500),
            reconnect_max: Duration::from_secs(5),
            lazy: false,
        }
    }

    /// What the nodes are: a Redis Cluster, one standalone server, or
    /// detected. Default: [`Deployment::Detect`] — standalone only when the
    /// one seed given says it has cluster support disabled; see
    /// [`Deployment`].
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// use shardlimit::{Cluster, Deployment};
    /// let redis = Cluster::builder(["redis://127.0.0.1:6379"])
    ///     .deployment(Deployment::Standalone)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn deployment(mut self, deployment: Deployment) -> Self {
        self.deployment = deployment;
        self.deployment_env = None;
        self
    }

    /// The ACL username every node is authenticated as, overriding any in
    /// the URLs. Default: the URL's, else none (Redis' `default` user).
    ///
    /// ```no_run
    /// # async fn demo(password: String) -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .username("shardlimit")
    ///     .password(password)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.security.username = Some(username.into());
        self
    }

    /// The password every node is authenticated with, overriding any in the
    /// URLs (and any [`password_file`](Self::password_file)). Default: the
    /// URL's, else none. Never shown: `Debug`, errors and logs print `***`.
    ///
    /// ```
    /// let builder = shardlimit::Cluster::builder(["redis://10.0.0.5:6379"])
    ///     .username("shardlimit")
    ///     .password("s3cret");
    /// assert!(!format!("{builder:?}").contains("s3cret"));
    /// ```
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.security.password = Some(PasswordSource::Value(Secret(password.into())));
        self
    }

    /// Reads the password from `path` in [`build`](Self::build) (one
    /// trailing newline is ignored; an empty file is an error), overriding
    /// any in the URLs (and any [`password`](Self::password)). Default:
    /// none. For secrets mounted as files (Kubernetes, systemd
    /// credentials).
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["redis://10.0.0.5:6379"])
    ///     .username("shardlimit")
    ///     .password_file("/run/secrets/redis-password")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn password_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.security.password = Some(PasswordSource::File(path.into()));
        self
    }

    /// Trust only the CA certificates in this PEM data for `rediss://`
    /// nodes. Default: the operating system's trust store. The server's
    /// name (the host of each node's address, DNS name or IP) is always
    /// checked against its certificate. Needs `rediss://` URLs.
    ///
    /// ```no_run
    /// # async fn demo(ca_pem: Vec<u8>) -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .tls_ca_pem(ca_pem)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.security.tls_ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Like [`tls_ca_pem`](Self::tls_ca_pem), with the PEM read from `path`
    /// in [`build`](Self::build). Default: the operating system's trust
    /// store.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://127.0.0.1:7000"])
    ///     .tls_ca_file("cluster-compose/.state/tls/ca.crt")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.security.tls_ca = Some(Pem::File(path.into()));
        self
    }

    /// A client certificate (chain) and its private key, both PEM, for
    /// mutual TLS. Default: none (no client certificate is presented).
    /// Needs `rediss://` URLs. The key is never shown by `Debug`.
    ///
    /// ```no_run
    /// # async fn demo(cert: Vec<u8>, key: Vec<u8>) -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .tls_client_cert_pem(cert, key)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_client_cert_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.security.tls_cert = Some(Pem::Bytes(cert.into()));
        self.security.tls_key = Some(Pem::Bytes(key.into()));
        self
    }

    /// Like [`tls_client_cert_pem`](Self::tls_client_cert_pem), with both
    /// read from files in [`build`](Self::build). Default: none.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .tls_client_cert_files("/etc/shardlimit/client.crt", "/etc/shardlimit/client.key")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_client_cert_files(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.security.tls_cert = Some(Pem::File(cert.into()));
        self.security.tls_key = Some(Pem::File(key.into()));
        self
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

    /// Bound on reading the first topology in [`build`](Self::build).
    /// Default 2 s. Must be non-zero.
    ///
    /// Each node gets the command timeout (at least 100 ms, at most half of
    /// this) to accept a connection and answer: a hung node then fails alone
    /// and the next seed is asked.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Number of timeouts on one node within
    /// [`failure_window`](Self::failure_window) that mark it down (a broken
    /// or refused connection marks it down at once). Default 3. Must be at
    /// least 1.
    pub fn node_down_after(mut self, timeouts: u32) -> Self {
        self.node_down_after = timeouts;
        self
    }

    /// Window in which [`node_down_after`](Self::node_down_after) timeouts
    /// are counted. Default 1 s. Must be non-zero.
    pub fn failure_window(mut self, window: Duration) -> Self {
        self.failure_window = window;
        self
    }

    /// Least time between two topology refreshes (jittered). Default
    /// 500 ms. While a slot is served by a down node the topology is read
    /// this often, so a promoted replica is found within about this long
    /// after the cluster promotes it. Must be non-zero.
    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// Wait before the first reconnect attempt to a down node, and the
    /// largest wait it grows to (doubling after every failed attempt;
    /// jittered to between half and all of it). Defaults 500 ms and 5 s.
    /// `min` must be non-zero and at most `max`.
    ///
    /// A failed topology refresh backs off the same way, from
    /// [`refresh_interval`](Self::refresh_interval) up to `max`.
    pub fn reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
        self
    }

    /// Return from [`build`](Self::build) without connecting, and connect in
    /// the background. Default `false` (connect in `build`, and fail there).
    ///
    /// For services that must start while Redis is unreachable: until the
    /// topology is first read, every call fails with a transient
    /// [`Error::Connect`] — which fail-open limiters turn into bypassed
    /// decisions — and the seeds are asked again with the reconnect
    /// backoff.
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
        if let Some(bad) = &self.deployment_env {
            return Err(config(
                "deployment",
                format!("{DEPLOYMENT_ENV}={bad:?}: expected detect, cluster or standalone"),
            ));
        }
        if self.nodes.is_empty() {
            return Err(config("nodes", "at least one node URL is needed"));
        }
        let seeds = self.security.apply(&self.nodes)?;
        for (field, value) in [
            ("command_timeout", self.command_timeout),
            ("connect_timeout", self.connect_timeout),
            ("failure_window", self.failure_window),
            ("refresh_interval", self.refresh_interval),
            ("reconnect_backoff", self.reconnect_min),
        ] {
            if value.is_zero() {
                return Err(config(field, "must be greater than zero"));
            }
        }
        if self.node_down_after == 0 {
            return Err(config("node_down_after", "must be at least 1"));
        }
        if self.reconnect_min > self.reconnect_max {
            return Err(config(
                "reconnect_backoff",
                format!(
                    "the first wait ({:?}) is longer than the largest ({:?})",
                    self.reconnect_min, self.reconnect_max
                ),
            ));
        }
        if seeds::any_tls(&seeds) {
            seeds::install_crypto_provider();
        }
        let seed_list = seeds.iter().map(seeds::show).collect::<Vec<_>>().join(",");
        let router = Router::new(
            seeds,
            seed_list,
            RouterConfig {
                node: NodeConfig {
                    connect_timeout: self.node_connect_timeout(),
                    down_after: self.node_down_after,
                    failure_window: self.failure_window,
                    reconnect_min: self.reconnect_min,
                    reconnect_max: self.reconnect_max,
                },
                command_timeout: self.command_timeout,
                refresh_interval: self.refresh_interval,
            },
            self.deployment,
        )?;
        if self.lazy {
            router.request_refresh();
        } else {
            match tokio::time::timeout(self.connect_timeout, router.load()).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(Error::Connect {
                        nodes: router.seed_list().to_owned(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no topology within {:?}", self.connect_timeout),
                        )
                        .into(),
                    });
                }
            }
        }
        Ok(Cluster {
            inner: Arc::new(Inner {
                router,
                keys,
                command_timeout: self.command_timeout,
                registry: Registry::default(),
                metrics: ClusterMetrics::default(),
            }),
        })
    }
}

impl fmt::Debug for ClusterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|n| seeds::redact_url(n)).collect();
        f.debug_struct("ClusterBuilder")
            .field("nodes", &nodes)
            .field("deployment", &self.deployment)
            .field("security", &self.security)
            .field("namespace", &self.namespace)
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("node_down_after", &self.node_down_after)
            .field("failure_window", &self.failure_window)
            .field("refresh_interval", &self.refresh_interval)
            .field("reconnect_min", &self.reconnect_min)
            .field("reconnect_max", &self.reconnect_max)
            .field("lazy", &self.lazy)
            .finish()
    }
}

fn config(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Config {
        field,
        reason: reason.into(),
    }
}
