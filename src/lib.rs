//! # shardlimit
//!
//! Rate limits, concurrency leases, fenced locks and TTL-preserving counters
//! on **Redis Cluster** (or one standalone Redis server), for services that
//! run millions of them.
//!
//! Every limiter lives in exactly one hash slot — its keys share the
//! subject's hash tag — so every operation on it is one atomic Lua script or
//! MULTI/EXEC on one node, and the population spreads evenly over the
//! cluster.
//!
//! # Quick start
//!
//! ```no_run
//! # async fn demo() -> shardlimit::Result<()> {
//! use shardlimit::{Cluster, Script, keys::KeyId};
//!
//! // SHARDLIMIT_NODES, or the six local nodes of cluster-compose/.
//! let cluster = Cluster::builder_from_env().namespace("myapp").build().await?;
//!
//! // Keys are only ever made by the key builder; a KeySet proves one slot.
//! let hits = KeyId::new("demo", "hits")?;
//! let keys = cluster.keys().key_set("user:42", [&hits])?;
//! println!("slot {}", keys.slot());
//!
//! let incr = Script::new(
//!     "incr_with_ttl",
//!     "local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return n",
//! );
//! let n: i64 = cluster.eval(&incr, &keys, 60_000).await?;
//! # Ok(()) }
//! ```
//!
//! # Production connections
//!
//! `rediss://` seeds connect over TLS (rustls): a custom CA with
//! [`ClusterBuilder::tls_ca_file`], mutual TLS with
//! [`ClusterBuilder::tls_client_cert_files`]; every node the topology
//! reveals is reached with the same settings. Credentials go apart from the
//! URLs ([`ClusterBuilder::username`], [`ClusterBuilder::password_file`]) and
//! are never shown: nodes print as `redis://user:***@host:port`. A TLS,
//! authentication or permission refusal is not transient, so it is never
//! bypassed. The README gives the least-privilege ACL rule.
//!
//! ```no_run
//! # async fn demo() -> shardlimit::Result<()> {
//! let cluster = shardlimit::Cluster::builder(["rediss://redis-0.internal:6379"])
//!     .tls_ca_file("/etc/redis/ca.crt")
//!     .username("shardlimit")
//!     .password_file("/run/secrets/redis-password")
//!     .build()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Standalone Redis (a laptop, unit tests)
//!
//! One plain `redis-server` works too, as one shard owning every slot; the
//! API is the same. By default ([`Deployment::Detect`]) a single seed that
//! says it has cluster support disabled is taken as standalone — nothing
//! else is, so a cluster's traffic never goes to one node. Say it
//! explicitly with [`ClusterBuilder::deployment`] or [`DEPLOYMENT_ENV`]:
//!
//! ```no_run
//! # async fn demo() -> shardlimit::Result<()> {
//! use shardlimit::{Cluster, Deployment};
//! let redis = Cluster::builder(["redis://127.0.0.1:6379"])
//!     .deployment(Deployment::Standalone)
//!     .namespace("myapp")
//!     .build()
//!     .await?;
//! assert_eq!(redis.topology().await?.covered_slots(), 16384);
//! # Ok(()) }
//! ```
//!
//! # Key layout
//!
//! ```text
//! <namespace>:{<subject>}:<kind>:<name>[:<part>]
//! sl:{user:42}:gcra:api
//! ```
//!
//! The subject is the hash tag; `{`, `}` and `%` in it are percent-escaped.
//! See [`keys`] for why, and for the slot calculator and parser.
//!
//! # Layout of the crate
//!
//! * [`keys`] — key builder, CRC16 slot calculator, [`KeySet`](keys::KeySet), parser.
//! * [`Cluster`] — its own routing (one connection per node; a node known
//!   down fails fast), [`Cluster::eval`] and [`Cluster::transaction`], the
//!   only two ways the crate talks to Redis.
//! * [`limit`] — rate limiters ([`RateLimiter`], [`MultiLimiter`],
//!   [`Quota`], [`Decision`]) and their [`FailurePolicy`].
//! * [`Lock`] — fenced locks with watchdog and replica acknowledgement;
//!   [`ConcurrencyLimiter`] — at most N leases per subject; [`Counter`] —
//!   TTL-preserving counters (add / drain / get); [`Cluster::health`] — is
//!   the cluster fit to hold locks (AOF, replicas).
//! * [`Script`] — a Lua script hashed once.
//! * [`Error`] — the one error type; [`Error::is_transient`] drives failure
//!   policies.
//! * `tower` (feature `tower`) — a `tower::Layer` that rate-limits HTTP
//!   requests (axum, hyper) with `429`, `Retry-After` and the IETF
//!   `RateLimit` headers.
//! * Observability: [`Cluster::stats`] always; with feature `metrics`,
//!   counters and histograms through the `metrics` facade (see
//!   `describe_metrics`); `debug` spans per operation (`shardlimit.check`,
//!   `shardlimit.lock.acquire`, …) with the primitive's kind, name, slot and
//!   outcome, and the subject only at `trace`.

pub mod admin;
mod backoff;
mod cluster;
mod concurrency;
mod counter;
mod error;
mod health;
pub mod keys;
pub mod limit;
mod lock;
mod metrics;
mod outcomes;
mod policy;
mod primitive;
mod scripts;
#[cfg(feature = "tower")]
pub mod tower;
mod warn;

#[cfg(feature = "metrics")]
pub use self::metrics::describe_metrics;
pub use cluster::Stats;
pub use cluster::{
    Cluster, ClusterBuilder, DEFAULT_NODES, DEPLOYMENT_ENV, Deployment, NODES_ENV, NodeAddr,
    NodeState, PASSWORD_ENV, PASSWORD_FILE_ENV, Shard, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV,
    Topology, Transaction, TxCommand, USER_ENV,
};
pub use concurrency::{ConcurrencyLimiter, ConcurrencyLimiterBuilder, Permit};
pub use counter::{Counter, CounterBuilder};
pub use error::{Error, Result};
pub use health::{Health, MasterHealth, NodeHealth};
pub use limit::{
    Algorithm, Decision, MultiDecision, MultiLimiter, Quota, RateLimiter, RateLimiterBuilder,
};
pub use lock::{Lock, LockBuilder, LockGuard};
pub use outcomes::PrimitiveStats;
pub use policy::{BypassReason, FailurePolicy};
pub use scripts::{NO_ARGS, Script};
