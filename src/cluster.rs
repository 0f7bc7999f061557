//! The connection and its plumbing: the [`Cluster`] handle and its
//! [`ClusterBuilder`], the crate's own routing (one connection per node),
//! the two slot-pinned operations every primitive is built on
//! ([`Cluster::eval`] with a [`Script`], [`Cluster::transaction`] with a
//! [`Transaction`]) and the batch of scripts, one pipeline per master
//! ([`Cluster::eval_many`]), the [`Topology`] it routes by, [`Stats`], and the
//! environment variables [`Cluster::builder_from_env`] reads.
//!
//! `Cluster`, `ClusterBuilder` and `Deployment` are also at the crate root;
//! the rest is here for services that write their own scripts or watch
//! the connection.
//!
//! The transport knows no feature: it routes, connects, sends, follows
//! redirects and undoes. What the layers above keep per handle (the
//! primitives' outcome counts, the deny caches' invalidation hub, the
//! throttled reporters) they keep in the handle's extension slot, and what
//! the transport reports to them or shows of them goes through traits
//! defined here (the subscriber's channel sink, the primitives' counts in
//! [`Stats`]); `tests/layout.rs` checks that nothing here imports them.
//!
//! The handle's methods live in this file, except where a method is the
//! door to a concept that has a file of its own in this folder, with the
//! docs, types and machinery the method shares: `batch.rs`
//! ([`Cluster::eval_many`] and the failure table of its pipelines),
//! `probe.rs` (a fresh look at one node, outside its lanes, for
//! [`Cluster::health`]), `builder.rs` and `builder/env.rs` (the
//! constructors, beside the settings and variables they read),
//! `extensions.rs` (the slot the layers above keep their state in) and
//! `subscriber.rs` (following pub/sub channels for a layer above).
//! `Cluster::health` itself is in [`health`](crate::health), above the
//! transport: its report judges fitness for locks, and the transport could
//! not name it without a loop of imports.

mod access;
mod batch;
mod builder;
mod call;
mod deployment;
mod exec;
mod extensions;
mod node;
mod probe;
mod router;
mod socket;
mod stats;
mod subscriber;
mod topology;
mod transaction;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, ToRedisArgs, Value};

pub use self::builder::ClusterBuilder;
pub use self::builder::env::{
    CLUSTER_PORT_ENV, DEFAULT_NODES, DEPLOYMENT_ENV, NAMESPACE_ENV, NODES_ENV, PASSWORD_ENV,
    PASSWORD_FILE_ENV, SENTINEL_SERVICE_ENV, SUBJECT_SECRET_ENV, SUBJECT_SECRET_FILE_ENV,
    TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, USER_ENV,
};
use self::call::{Op, Request};
pub use self::deployment::Deployment;
use self::exec::Payload;
pub(crate) use self::exec::Undo;
use self::extensions::Extensions;
pub use self::node::NodeState;
pub(crate) use self::probe::Probe;
use self::router::Router;
pub(crate) use self::stats::PrimitiveCounts;
pub use self::stats::{PrimitiveStats, Stats};
pub(crate) use self::subscriber::ChannelSink;
use self::subscriber::SubscriberConfig;
pub use self::topology::{NodeAddr, Shard, Topology};
pub use self::transaction::{Transaction, TxCommand};
use crate::error::{Error, Result};
use crate::keys::{KeyBuilder, KeySet, SubjectHasher};
use crate::metrics::ClusterMetrics;
use crate::scripts::TRANSACTION_OP;
pub use crate::scripts::{NO_ARGS, Script};

/// How often [`Cluster::wait_ready`] looks whether the background connect
/// finished. Short next to a connect (a round trip per seed), long next to
/// a spin.
const READY_POLL: Duration = Duration::from_millis(10);

/// A handle to a Redis Cluster, or to one standalone server — or the
/// primary of a Sentinel deployment — that serves every slot (see
/// [`Deployment`]). Cheap to clone; clones share one slot
/// table and one multiplexed connection per node.
///
/// Everything shardlimit sends goes through [`Cluster::eval`] (a Lua script),
/// [`Cluster::eval_many`] (the script for many key sets, pipelined per
/// master) or [`Cluster::transaction`] (MULTI/EXEC). They take
/// [`KeySet`]s, which only exist if their keys share a hash slot, so
/// `CROSSSLOT` cannot happen; each call is routed to the master owning its
/// slot, follows `MOVED`/`ASK` redirects itself, and is bounded by the
/// command timeout.
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
/// # Idle and closed connections
///
/// Servers and networks close connections as a matter of course: Redis'
/// idle `timeout`, `CLIENT KILL`, a load balancer's idle cut. None of that
/// costs a call an error or marks a healthy node down:
///
/// * A connection that has ended is replaced by a fresh one before the
///   next request, and so is one unused for longer than
///   [`ClusterBuilder::connection_max_idle`] (default 60 s), which a
///   middlebox may have dropped without a word.
/// * A request that met a connection ending under it is sent again, once,
///   on a fresh connection when it provably was never written: the
///   connection had ended and its socket took no byte after the request
///   was handed to it. Otherwise the at-most-once rule above holds: it may
///   have run, and it is returned as an error.
///
/// # Routing and failure isolation
///
/// The handle keeps its own slot table (`CLUSTER SLOTS`) and one multiplexed
/// connection per master, so a call only ever waits for the node that serves
/// its slot: a dead or hung master does not slow the others. (redis-rs'
/// cluster connection stalls every node while it refreshes its slot map
/// after one node fails; see [docs/failures.md](https://github.com/shardlimit/shardlimit/blob/main/docs/failures.md).)
///
/// * A node whose connection breaks under a request that may have been
///   written, that refuses a connection, or that times out
///   [`ClusterBuilder::node_down_after`] times within
///   [`ClusterBuilder::failure_window`], is marked **down**: calls for its
///   slots fail at once with the transient [`Error::NodeDown`] (fail-open
///   limiters bypass, fail-closed callers are freed) instead of waiting for
///   the timeout. The node then probes itself in the background, one
///   reconnect per backoff interval ([`ClusterBuilder::reconnect_backoff`],
///   jittered, growing to its cap), until one succeeds — whichever of its
///   connections broke, and whether or not anything calls it.
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
    /// What credentials are limited under: the subject secret's digests.
    subject_hasher: SubjectHasher,
    command_timeout: Duration,
    metrics: ClusterMetrics,
    subscriber: SubscriberConfig,
    /// What the layers above keep per handle (see extensions.rs).
    extensions: Extensions,
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

    /// The hasher of credential subjects: keyed by the subject secret this
    /// handle was built with
    /// ([`ClusterBuilder::subject_secret`]), else by the namespace's
    /// default key, which is no secret (see [`SubjectHasher`]). The HTTP
    /// and gRPC layers limit credential keys under its digests; the CLI and
    /// the Limits page look raw keys up with it.
    ///
    /// ```no_run
    /// # fn demo(cluster: shardlimit::Cluster) {
    /// let subject = cluster.subject_hasher().hash("sk-live-4eC39HqLyjWD");
    /// println!("the API key is limited as {subject}");
    /// # }
    /// ```
    #[must_use]
    pub fn subject_hasher(&self) -> &SubjectHasher {
        &self.inner.subject_hasher
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
        // The counts are kept above the transport (`outcomes.rs`, in the
        // extension slot), which shows them here through `PrimitiveCounts`.
        Stats {
            primitives: self.inner.extensions.primitives(),
            nodes: self.nodes(),
            topology_refreshes: self.inner.router.refreshes(),
        }
    }

    /// Whether `other` is this handle or a clone of it.
    pub(crate) fn same_connection(&self, other: &Cluster) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
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
    /// use shardlimit::{cluster::Script, keys::KeyId};
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

    /// Like [`eval`](Self::eval), but a `TRYAGAIN` (the key set is split
    /// by a slot migration) is returned at once, for a caller that then does
    /// the work one key at a time (see `limit::migrating`).
    pub(crate) async fn eval_unless_migrating<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &KeySet,
        args: impl ToRedisArgs,
    ) -> Result<T> {
        let payload = Payload::script(script, keys, args).split_when_migrating();
        let value = self.run(script.name_cow(), keys.slot(), payload).await?;
        convert(script.name_cow(), value)
    }

    /// The value of `key` (a string key, made by the key builder), read on
    /// its own: for the steps of an operation done one key at a time while
    /// its slot migrates.
    pub(crate) async fn read_alone(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let keys = KeySet::checked(vec![key.to_vec()])?;
        self.eval(&crate::scripts::KEY_READ, &keys, NO_ARGS).await
    }

    /// Runs `script` like [`eval`](Self::eval), for an operation that takes
    /// something (a lock, a lease) — and gives back what it may have taken
    /// if it fails.
    ///
    /// With `then`, that command goes right behind the script in one
    /// pipeline on the same connection to the same node (on the node's
    /// blocking lane), and the reply is `[script reply, then reply]`: for
    /// commands whose meaning depends on the connection, such as `WAIT`
    /// (which counts the writes made on its own connection).
    ///
    /// When the call fails in a way that leaves it possible that the script
    /// ran — no reply in time, a broken connection, an error reply other
    /// than those that prove it did not run (a script error, `NOPERM`, an
    /// error of `then`), a reply that is not a `T` — `undo` is sent in the
    /// background, ordered after the script on the wire (see
    /// `exec::undo`), and the error is returned. A `TRYAGAIN` comes back at
    /// once, as with [`eval_unless_migrating`](Self::eval_unless_migrating)
    /// (it proves the script did not run: nothing is undone).
    pub(crate) async fn eval_or_undo<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &KeySet,
        args: impl ToRedisArgs,
        then: Option<redis::Cmd>,
        undo: Undo,
    ) -> Result<T> {
        let mut payload = Payload::script(script, keys, args)
            .undo(undo.clone())
            .split_when_migrating();
        if let Some(then) = then {
            payload = payload.then(then);
        }
        let value = self.run(script.name_cow(), keys.slot(), payload).await?;
        convert(script.name_cow(), value).inspect_err(|_| self.undo(undo))
    }

    /// Sends `undo` in the background by slot: for an operation that was
    /// answered but failed all the same (its reply made no sense), as
    /// anything sent now comes after it on the wire; and for a release that
    /// failed, which is harmless to send twice and has nothing to overtake.
    pub(crate) fn undo(&self, undo: Undo) {
        exec::spawn_undo(&self.inner.router, undo, None, self.command_timeout());
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
    /// use shardlimit::{cluster::{Transaction, TxCommand}, keys::KeyId};
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

    /// Sends `commands` (keys by index into `keys`, so one slot) as one
    /// pipeline on the connection to the node serving the slot, **not**
    /// atomically, and returns one reply per command, errors included as
    /// [`Value::ServerError`]: which commands ran is the caller's to judge
    /// from them. Resent whole only when every command was refused unrun
    /// (the slot moved, or every key of a migrating slot has left).
    /// `op` names the operation in errors, spans and metrics.
    pub(crate) async fn pipeline(
        &self,
        op: &'static str,
        keys: &KeySet,
        commands: &Transaction,
    ) -> Result<Vec<Value>> {
        commands.validate(keys)?;
        let payload = Payload::Pipeline { commands, keys };
        let value = self.run(Cow::Borrowed(op), keys.slot(), payload).await?;
        convert(Cow::Borrowed(op), value)
    }

    /// The deployment: [`Deployment::Cluster`] or
    /// [`Deployment::Standalone`] once known, [`Deployment::Sentinel`] when
    /// configured; [`Deployment::Detect`] only
    /// while a [lazily connected](ClusterBuilder::lazy_connect) handle has
    /// not reached a node yet.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) {
    /// if cluster.deployment() == shardlimit::cluster::Deployment::Standalone {
    ///     println!("one redis-server serves every slot");
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn deployment(&self) -> Deployment {
        self.inner.router.deployment()
    }

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
                match exec::not_connected(router) {
                    refused @ Error::Connect { .. } => return Err(refused),
                    _ => router.request_refresh(),
                }
                tokio::time::sleep(READY_POLL).await;
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

    /// Whether one server that is no cluster node serves every slot: a
    /// standalone server or a Sentinel primary (no cluster commands).
    pub(crate) fn is_standalone(&self) -> bool {
        self.inner.router.is_standalone()
    }

    /// The masters, their slots and replicas, as a node of the cluster sees
    /// them now (`CLUSTER SLOTS` from a master that is up, else a seed). A
    /// standalone server is one shard serving every slot, with the id
    /// `standalone`, and is not asked; a Sentinel deployment is the primary
    /// the sentinels name, with the id `sentinel` and the replicas its
    /// `ROLE` lists.
    /// Bounded by the command timeout per node asked.
    pub async fn topology(&self) -> Result<Topology> {
        self.inner.router.fetch().await
    }

    /// [`topology`](Self::topology), bounded by `per_node` per node asked
    /// instead of the command timeout: a page that must answer while a
    /// master hangs reads the topology once with this, then passes it to
    /// [`health_at`](Self::health_at) and
    /// [`Scanner::catalog_at`](crate::admin::Scanner::catalog_at).
    pub async fn topology_within(&self, per_node: Duration) -> Result<Topology> {
        self.inner.router.fetch_within(per_node).await
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
            call::node_request(&target, op, request, self.command_timeout(), &**router).await;
        self.inner.metrics.observe(&op.into(), started, &outcome);
        outcome
    }

    async fn run(&self, op: Cow<'static, str>, slot: u16, payload: Payload<'_>) -> Result<Value> {
        crate::metrics::span_slot(Some(slot));
        let started = crate::metrics::Started::now();
        let call = Op::new(op, Some(slot), self.command_timeout());
        let outcome = exec::run(&self.inner.router, &call, slot, payload).await;
        self.inner.metrics.observe(&call.name, started, &outcome);
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
