//! [`ClusterBuilder`]: every setting of a [`Cluster`], validated before
//! anything is contacted.

pub(super) mod env;
mod security;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use self::env::{
    DEPLOYMENT_ENV, NAMESPACE_ENV, NODES_ENV, PASSWORD_ENV, PASSWORD_FILE_ENV,
    SENTINEL_SERVICE_ENV, SUBJECT_SECRET_ENV, SUBJECT_SECRET_FILE_ENV, TLS_CA_ENV, TLS_CERT_ENV,
    TLS_KEY_ENV, USER_ENV,
};
use super::access::{self, Pem, SecretSource, Security};
use super::deployment::Deployment;
use super::node::NodeConfig;
use super::router::{Router, RouterConfig};
use super::socket::Connector;
use super::subscriber::SubscriberConfig;
use super::{Cluster, Extensions, Inner};
use crate::error::{Error, Result};
use crate::keys::KeyBuilder;
use crate::metrics::ClusterMetrics;

impl Cluster {
    /// A builder for the nodes of [`seeds_from_env`](Self::seeds_from_env)
    /// (`SHARDLIMIT_NODES`, comma-separated URLs), the namespace of
    /// [`NAMESPACE_ENV`] (default `sl`; a later
    /// [`namespace`](ClusterBuilder::namespace) call wins), the deployment
    /// of [`DEPLOYMENT_ENV`] (default: detect), with the credentials and TLS
    /// files of the environment when they are set: [`USER_ENV`],
    /// [`PASSWORD_ENV`] (else [`PASSWORD_FILE_ENV`]), [`TLS_CA_ENV`],
    /// [`TLS_CERT_ENV`] and [`TLS_KEY_ENV`], and the subject secret of
    /// [`SUBJECT_SECRET_ENV`] (else [`SUBJECT_SECRET_FILE_ENV`]). Files are read by
    /// [`ClusterBuilder::build`], which also reports a missing node list —
    /// [`Error::Config`] naming `SHARDLIMIT_NODES` — before contacting
    /// anything: a service never falls back to nodes it was not given.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// // SHARDLIMIT_NODES=rediss://10.0.0.5:6379 SHARDLIMIT_TLS_CA=/etc/redis/ca.crt
    /// // SHARDLIMIT_USER=app SHARDLIMIT_PASSWORD_FILE=/run/secrets/redis
    /// // SHARDLIMIT_NAMESPACE=myapp
    /// let cluster = shardlimit::Cluster::builder_from_env().build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_from_env() -> ClusterBuilder {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut builder = match Self::seeds_from_env() {
            Ok(seeds) => Self::builder(seeds),
            Err(err) => {
                let mut builder = Self::builder(Vec::<String>::new());
                builder.nodes_env = Some(match err {
                    Error::Config { reason, .. } => reason,
                    other => other.to_string(),
                });
                builder
            }
        };
        if let Some(namespace) = var(NAMESPACE_ENV) {
            builder = builder.namespace(namespace.trim());
        }
        if let Some(deployment) = var(DEPLOYMENT_ENV) {
            match deployment.parse() {
                Ok(deployment) => builder = builder.deployment(deployment),
                // Let build() report it instead of ignoring it.
                Err(_) => builder.deployment_env = Some(deployment),
            }
        }
        if let Some(service) = var(SENTINEL_SERVICE_ENV) {
            builder = builder.sentinel_service(service);
        }
        if let Some(user) = var(USER_ENV) {
            builder = builder.username(user);
        }
        if let Some(password) = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()) {
            builder = builder.password(password);
        } else if let Some(path) = var(PASSWORD_FILE_ENV) {
            builder = builder.password_file(path);
        }
        if let Some(secret) = std::env::var(SUBJECT_SECRET_ENV)
            .ok()
            .filter(|s| !s.is_empty())
        {
            builder = builder.subject_secret(secret);
        } else if let Some(path) = var(SUBJECT_SECRET_FILE_ENV) {
            builder = builder.subject_secret_file(path);
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
    /// Why [`NODES_ENV`] gave no nodes, reported by `build`.
    nodes_env: Option<String>,
    sentinel_service: Option<String>,
    security: Security,
    /// The key of credential subjects' digests; `Debug` hides it.
    subject_secret: Option<SecretSource>,
    namespace: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    node_down_after: u32,
    failure_window: Duration,
    refresh_interval: Duration,
    reconnect_min: Duration,
    reconnect_max: Duration,
    max_idle: Duration,
    lazy: bool,
}

impl ClusterBuilder {
    pub(super) fn new(nodes: Vec<String>) -> Self {
        ClusterBuilder {
            nodes,
            deployment: Deployment::Detect,
            deployment_env: None,
            nodes_env: None,
            sentinel_service: None,
            security: Security::default(),
            subject_secret: None,
            namespace: "sl".to_owned(),
            command_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(2),
            node_down_after: 3,
            failure_window: Duration::from_secs(1),
            refresh_interval: Duration::from_millis(500),
            reconnect_min: Duration::from_millis(500),
            reconnect_max: Duration::from_secs(5),
            max_idle: Duration::from_secs(60),
            lazy: false,
        }
    }

    /// What the nodes are: a Redis Cluster, one standalone server, the
    /// sentinels of a primary (with
    /// [`sentinel_service`](Self::sentinel_service)), or detected. Default:
    /// [`Deployment::Detect`] — standalone only when the one seed given says
    /// it has cluster support disabled, never Sentinel; see [`Deployment`].
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// use shardlimit::{Cluster, cluster::Deployment};
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

    /// The Sentinel service name (`sentinel monitor <name> …`) whose primary
    /// this handle uses, for [`Deployment::Sentinel`], where the seeds are
    /// the sentinels (any number; they are asked in order). Default: none;
    /// [`build`](Self::build) refuses a Sentinel deployment without one,
    /// and a service name with any other deployment. The sentinels are
    /// reached with the same credentials and TLS settings as the primary.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// use shardlimit::{Cluster, cluster::Deployment};
    /// let redis = Cluster::builder([
    ///     "redis://127.0.0.1:26400",
    ///     "redis://127.0.0.1:26401",
    ///     "redis://127.0.0.1:26402",
    /// ])
    /// .deployment(Deployment::Sentinel)
    /// .sentinel_service("shardlimit")
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_service(mut self, name: impl Into<String>) -> Self {
        self.sentinel_service = Some(name.into());
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

    /// Bound on [`build`](Self::build): reading the first topology, then
    /// connecting to every master. Default 2 s. Must be non-zero.
    ///
    /// While the topology is read, each node gets the command timeout (at
    /// least 100 ms, at most half of this) to accept a connection and
    /// answer: a hung node then fails alone and the next seed is asked.
    /// The masters are then connected all at once in what is left of this
    /// bound, so the first request to each does not spend its command
    /// timeout connecting. A master that does not accept in time fails
    /// nothing: the first request to it connects, as after a reconnect.
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

    /// How long a node connection may stay unused: one unused for longer is
    /// replaced by a fresh one before its next request. Default 60 s. Must
    /// be non-zero.
    ///
    /// A connection the server closed (its idle `timeout`, `CLIENT KILL`)
    /// is noticed and replaced before use anyway; this bound is for the
    /// ones a load balancer, NAT gateway or firewall drops after a while
    /// without telling either end, where the next request would be lost.
    /// Keep it below their idle timeout (often 4 to 10 minutes; Redis' own
    /// `timeout` needs no margin).
    pub fn connection_max_idle(mut self, idle: Duration) -> Self {
        self.max_idle = idle;
        self
    }

    /// Return from [`build`](Self::build) without connecting, and connect in
    /// the background. Default `false` (connect in `build`, and fail there).
    ///
    /// For services that must start while Redis is unreachable: until the
    /// topology is first read, every call fails with a transient
    /// [`Error::NotConnectedYet`] — which fail-open limiters turn into
    /// bypassed decisions — and the seeds are asked again with the
    /// reconnect backoff. Even with a healthy cluster the first calls come
    /// before the topology is read: [`Cluster::wait_ready`] waits for it,
    /// with a timeout.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// let cluster = shardlimit::Cluster::builder(["redis://10.0.0.5:6379"])
    ///     .lazy_connect(true)
    ///     .build()
    ///     .await?;                                     // returns at once
    /// cluster.wait_ready(Duration::from_secs(2)).await?; // the topology is read
    /// # Ok(()) }
    /// ```
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
        let subject_hasher = self.subject_hasher()?;
        if let Some(reason) = &self.nodes_env {
            return Err(config(NODES_ENV, reason.clone()));
        }
        if let Some(bad) = &self.deployment_env {
            return Err(config(
                "deployment",
                format!(
                    "{DEPLOYMENT_ENV}={bad:?}: expected detect, cluster, standalone or sentinel"
                ),
            ));
        }
        match (&self.deployment, &self.sentinel_service) {
            (Deployment::Sentinel, None) => {
                return Err(config(
                    "sentinel_service",
                    format!(
                        "a Sentinel deployment needs the service name (sentinel_service, or \
                         {SENTINEL_SERVICE_ENV})"
                    ),
                ));
            }
            (Deployment::Sentinel, Some(name)) if name.trim().is_empty() => {
                return Err(config("sentinel_service", "the service name is empty"));
            }
            (Deployment::Sentinel, Some(_)) | (_, None) => {}
            (other, Some(name)) => {
                return Err(config(
                    "sentinel_service",
                    format!(
                        "service {name:?} given for a {other} deployment; sentinels need \
                         Deployment::Sentinel"
                    ),
                ));
            }
        }
        if self.nodes.is_empty() {
            return Err(config("nodes", "at least one node URL is needed"));
        }
        let seeds = self.security.apply(&self.nodes)?;
        let certificates = self.security.certificates()?;
        let subscriber = SubscriberConfig {
            connect_timeout: self.connect_timeout,
        };
        for (field, value) in [
            ("command_timeout", self.command_timeout),
            ("connect_timeout", self.connect_timeout),
            ("failure_window", self.failure_window),
            ("refresh_interval", self.refresh_interval),
            ("reconnect_backoff", self.reconnect_min),
            ("connection_max_idle", self.max_idle),
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
        let connector = Connector::new(&seeds, certificates.as_ref())?;
        let seed_list = seeds.iter().map(access::show).collect::<Vec<_>>().join(",");
        let router = Router::new(
            seeds,
            seed_list,
            RouterConfig {
                node: NodeConfig {
                    connector,
                    connect_timeout: self.node_connect_timeout(),
                    max_idle: self.max_idle,
                    down_after: self.node_down_after,
                    failure_window: self.failure_window,
                    reconnect_min: self.reconnect_min,
                    reconnect_max: self.reconnect_max,
                },
                command_timeout: self.command_timeout,
                refresh_interval: self.refresh_interval,
            },
            self.deployment,
            self.sentinel_service.clone(),
        )?;
        if self.lazy {
            router.request_refresh();
        } else {
            let started = tokio::time::Instant::now();
            match tokio::time::timeout(self.connect_timeout, router.load()).await {
                Ok(result) => {
                    result?;
                    // What is left of the bound: no request waits on these.
                    let left = self.connect_timeout.saturating_sub(started.elapsed());
                    router.connect_masters(left).await;
                }
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
        if self.deployment == Deployment::Sentinel {
            router.listen_for_switches();
        }
        Ok(Cluster {
            inner: Arc::new(Inner {
                router,
                keys,
                subject_hasher,
                command_timeout: self.command_timeout,
                metrics: ClusterMetrics::default(),
                subscriber,
                extensions: Extensions::default(),
            }),
        })
    }
}

impl fmt::Debug for ClusterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|n| access::redact_url(n)).collect();
        f.debug_struct("ClusterBuilder")
            .field("nodes", &nodes)
            .field("deployment", &self.deployment)
            .field("sentinel_service", &self.sentinel_service)
            .field("security", &self.security)
            .field("subject_secret", &self.subject_secret)
            .field("namespace", &self.namespace)
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("node_down_after", &self.node_down_after)
            .field("failure_window", &self.failure_window)
            .field("refresh_interval", &self.refresh_interval)
            .field("reconnect_min", &self.reconnect_min)
            .field("reconnect_max", &self.reconnect_max)
            .field("max_idle", &self.max_idle)
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
