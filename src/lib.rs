//! # shardlimit
//!
//! Rate limits, concurrency leases, fenced locks and TTL-preserving counters
//! on **Redis Cluster** (or one standalone Redis server, or the primary of
//! a Sentinel deployment), for services that run millions of them.
//!
//! Every limiter lives in exactly one hash slot — its keys share the
//! subject's hash tag — so every operation on it is one atomic Lua script or
//! MULTI/EXEC on one node, and the population spreads evenly over the
//! cluster.
//!
//! # Quick start: a rate limiter in a service
//!
//! ```no_run
//! # async fn demo() -> shardlimit::Result<()> {
//! use shardlimit::{Cluster, Quota, RateLimiter};
//!
//! // Once, at start-up: the nodes from SHARDLIMIT_NODES (required), the namespace here.
//! let cluster = Cluster::builder_from_env().namespace("myapp").build().await?;
//! let per_key = RateLimiter::builder(&cluster, "api", Quota::per_minute(60))
//!     .build()?;
//!
//! // Per request: one script on the master that owns the subject's slot.
//! let decision = per_key.check("api-key:7f3a").await?;
//! if !decision.allowed {
//!     println!("429 Too Many Requests, retry after {:?}", decision.retry_after);
//! }
//! # Ok(()) }
//! ```
//!
//! A [`Decision`] is a value, not an error: `allowed`, `remaining`,
//! `retry_after`, `reset_after`, and `bypassed` when Redis did not answer
//! and a fail-open limiter let the request through (or a
//! [local](FailurePolicy::Local) one decided it from its share of the
//! quota, `local` set; see [`FailurePolicy`]). Several limits on one subject are checked in one
//! script with [`MultiLimiter`]; an HTTP service puts a limiter in front of
//! its routes with the `tower` layer (feature `tower`).
//!
//! At scale: an exact local [deny cache](limit#deny-cache)
//! ([`RateLimiterBuilder::deny_cache`](limit::RateLimiterBuilder::deny_cache)) answers repeated denials without
//! Redis and never denies what Redis would admit;
//! [`check_many`](RateLimiter::check_many) sends one pipeline per master;
//! [`block`](RateLimiter::block), [`penalize`](RateLimiter::penalize) and
//! [`reward`](RateLimiter::reward) adjust one subject, and
//! [`set_override`](RateLimiter::set_override) gives it its own quota, read
//! by the check's own script; [`set_quota`](RateLimiter::set_quota) changes
//! a live limiter; [shadow mode](limit::RateLimiterBuilder::shadow) counts what a
//! new limit would deny and refuses nothing.
//!
//! # Locks, leases and counters
//!
//! ```no_run
//! # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
//! use std::time::Duration;
//! use shardlimit::{Counter, LeaseLimiter, Lock};
//!
//! // One cron host out of three runs the export; the fencing token only grows.
//! let lock = Lock::builder(&cluster, "job").ttl(Duration::from_secs(3600)).build()?;
//! if let Some(guard) = lock.try_acquire("nightly-export").await? {
//!     println!("exporting with fencing token {}", guard.fencing_token());
//!     guard.release().await?;
//! }
//!
//! // At most five exports per tenant at once; a crashed process's lease expires.
//! let exports = LeaseLimiter::builder(&cluster, "exports")
//!     .max_leases(5) // default 1
//!     .build()?;
//! if let Some(lease) = exports.try_acquire("tenant:42").await? {
//!     lease.release().await?;
//! }
//!
//! // A billing counter read and reset without ever losing its TTL.
//! let billable = Counter::builder(&cluster, "billing").build()?;
//! billable.add("session:9", 30).await?;
//! let seconds = billable.drain("session:9").await?;
//! # Ok(()) }
//! ```
//!
//! # The admin view
//!
//! Hash tags spread a namespace over every master, so "show me all
//! limiters" is a walk: [`admin::Scanner`] `SCAN`s every master (never
//! `KEYS`, never MULTI), audits for keys without a TTL, and resets one
//! subject. The `shardlimit` command-line tool (crate `shardlimit-cli`) is
//! built on it. "Who is throttled now" is no walk: rate limiters summarise
//! their denials per process and, while they deny, publish them every 5 s
//! (on by default; [`RateLimiterBuilder::report_throttled`](limit::RateLimiterBuilder::report_throttled)
//! states the cost and turns it off); [`admin::throttled()`] merges them
//! (two calls to one master; `shardlimit top`, the Limits page).
//!
//! ```no_run
//! # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
//! let audit = shardlimit::admin::Scanner::new(&cluster).audit().await?;
//! assert!(audit.immortal.is_empty(), "keys that never expire: {:?}", audit.immortal);
//! # Ok(()) }
//! ```
//!
//! # Production connections
//!
//! `rediss://` seeds connect over TLS (rustls): a custom CA with
//! [`ClusterBuilder::tls_ca_file`](cluster::ClusterBuilder::tls_ca_file), mutual TLS with
//! [`ClusterBuilder::tls_client_cert_files`](cluster::ClusterBuilder::tls_client_cert_files); every node the topology
//! reveals is reached with the same settings. Credentials go apart from the
//! URLs ([`ClusterBuilder::username`](cluster::ClusterBuilder::username), [`ClusterBuilder::password_file`](cluster::ClusterBuilder::password_file)) and
//! are never shown: nodes print as `redis://user:***@host:port`. A TLS,
//! authentication or permission refusal is not transient, so it is never
//! bypassed. [docs/production.md](https://github.com/shardlimit/shardlimit/blob/main/docs/production.md) gives the
//! least-privilege ACL rule.
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
//! API is the same. By default ([`Deployment::Detect`](cluster::Deployment::Detect)) a single seed that
//! says it has cluster support disabled is taken as standalone — nothing
//! else is, so a cluster's traffic never goes to one node. Say it
//! explicitly with [`ClusterBuilder::deployment`](cluster::ClusterBuilder::deployment) or
//! [`DEPLOYMENT_ENV`](cluster::DEPLOYMENT_ENV):
//!
//! ```no_run
//! # async fn demo() -> shardlimit::Result<()> {
//! use shardlimit::{Cluster, cluster::Deployment};
//! let redis = Cluster::builder(["redis://127.0.0.1:6379"])
//!     .deployment(Deployment::Standalone)
//!     .namespace("myapp")
//!     .build()
//!     .await?;
//! assert_eq!(redis.topology().await?.covered_slots(), 16384);
//! # Ok(()) }
//! ```
//!
//! # Redis Sentinel
//!
//! With [`Deployment::Sentinel`](cluster::Deployment::Sentinel) the seeds are sentinels and
//! [`ClusterBuilder::sentinel_service`](cluster::ClusterBuilder::sentinel_service) (or
//! [`SENTINEL_SERVICE_ENV`](cluster::SENTINEL_SERVICE_ENV)) names
//! the service: the primary they name (checked with `ROLE`) serves every
//! slot, and after a failover the sentinels are asked again, so calls
//! follow the promoted replica with the same timeout and at-most-once rules
//! as in cluster mode.
//!
//! ```no_run
//! # async fn demo() -> shardlimit::Result<()> {
//! use shardlimit::{Cluster, cluster::Deployment};
//! let redis = Cluster::builder(["redis://10.0.0.7:26379", "redis://10.0.0.8:26379"])
//!     .deployment(Deployment::Sentinel)
//!     .sentinel_service("mymaster")
//!     .build()
//!     .await?;
//! assert_eq!(redis.deployment(), Deployment::Sentinel);
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
//! See [`keys`] for why, and for the slot calculator and parser. One tag is
//! shared: the catalog of rate limiter specs
//! (`sl:{shardlimit.catalog}:catalog:gcra:api`), which limiters publish in
//! the background and the admin side reads in one call (see
//! [the catalog](limit#the-catalog)).
//!
//! A credential is never stored as it is: the HTTP and gRPC layers limit an
//! API key or a bearer token under its keyed digest (`sl:{hmac:…}:gcra:api`,
//! [`keys::SubjectHasher`], keyed by the
//! [subject secret](cluster::ClusterBuilder::subject_secret)), which the CLI
//! and the Limits page find from the raw key.
//!
//! # Escape hatch: your own scripts
//!
//! The primitives are built on two calls you can use too, with the same
//! routing, timeout and at-most-once rules: [`Cluster::eval`] runs a Lua
//! [`Script`](cluster::Script) and [`Cluster::transaction`] a MULTI/EXEC,
//! both on a [`KeySet`](keys::KeySet) — keys made by the key builder and
//! proven to share one slot, so `CROSSSLOT` cannot happen.
//!
//! ```no_run
//! # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
//! use shardlimit::{cluster::Script, keys::KeyId};
//!
//! let hits = KeyId::new("demo", "hits")?;
//! let keys = cluster.keys().key_set("user:42", [&hits])?;
//! let incr = Script::new(
//!     "incr_with_ttl",
//!     "local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return n",
//! );
//! let n: i64 = cluster.eval(&incr, &keys, 60_000).await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! Each module's room, in one line:
//!
//! * [`limit`] — rate limiters: [`RateLimiter`], [`MultiLimiter`], [`Quota`],
//!   [`Decision`], one folder per algorithm, the script protocol and the one
//!   check pipeline; the stages a limiter may add to its checks (the deny
//!   cache, the subject-settings cache, quota slices, the local fallback),
//!   each in its own module of `limit/stages/` and composed in
//!   `limit/stages.rs`; the hub of invalidations the caches listen on.
//! * [`lock`] — [`Lock`]: fenced locks, watchdog, replica acknowledgement.
//! * [`lease`] — [`LeaseLimiter`]: at most N leases per subject.
//! * [`counter`] — [`Counter`]: add / drain / get, the drain keeps the TTL.
//! * `primitive` — the core every primitive holds (cluster, key id,
//!   outcome counts) and the one acquire loop of locks and leases.
//! * [`policy`] — [`FailurePolicy`]: when a fault is bypassed, and how it shows.
//! * [`keys`] — key builder, CRC16 slot calculator, [`KeySet`](keys::KeySet), parser.
//! * [`cluster`] — the connection: its own routing (one connection per
//!   node, a node known down fails fast), [`Cluster::eval`] and
//!   [`Cluster::transaction`] (the only two ways the crate talks to Redis),
//!   topology, stats, environment variables, the pub/sub subscriber. It
//!   knows no feature: the layers above keep their state per handle in its
//!   extension slot.
//! * `scripts` — the Lua scripts, one file per operation, and their loader.
//! * [`health`] — [`Cluster::health`]: is the cluster fit to hold locks.
//! * [`admin`] — the scanner: every primitive on every master, audit, reset;
//!   the merged throttled view.
//! * `throttled` — what a process reports of its denials: the Space-Saving
//!   sketch, its window, the publishing task and the keys it writes.
//! * `tower` (feature `tower`) — a `tower::Layer` that rate-limits HTTP
//!   requests with `429`, `Retry-After` and the IETF `RateLimit` headers;
//!   feature `axum` adds axum's connection info (`PeerIp::connect_info`),
//!   feature `tonic` gRPC statuses and tonic's (`PeerIp::tonic_connect_info`).
//! * The operator apps are crates of their own in this workspace, built on
//!   [`admin`]: the Limits page (`shardlimit-web`, an axum router of
//!   server-rendered pages and JSON — overview, every limiter paged across
//!   masters, one subject, throttled now, the audit, guarded writes) and
//!   the `shardlimit` command-line tool (`shardlimit-cli`), which serves
//!   it as `shardlimit web`. Feature `json` gives the admin types' JSON
//!   ([`admin`]`::json`) that both print.
//! * `metrics`, `outcomes`, `warn` — observability: [`Cluster::stats`]
//!   always; with feature `metrics`, counters and histograms through the
//!   `metrics` facade (`describe_metrics`); `debug` spans per operation
//!   (`shardlimit.check`, `shardlimit.lock.acquire`, …) with the subject
//!   only at `trace`; rate-limited warnings for every bypass.
//! * [`Error`] — the one error type; [`Error::is_transient`] drives
//!   failure policies.
//!
//! # Cargo features
//!
//! On by default, for the two largest stages of a rate limiter's check,
//! which most services do not need: `deny-cache` (the deny cache:
//! [`RateLimiterBuilder::deny_cache`](limit::RateLimiterBuilder::deny_cache),
//! [`MultiLimiter::with_deny_cache`]) and `slices` (quota slices for hot
//! subjects: [`RateLimiterBuilder::slices`](limit::RateLimiterBuilder::slices),
//! [`limit::Slices`]). A service that uses neither may build without them
//! (`default-features = false`). Optional: `json`, `tower`, `axum`,
//! `tonic`, `metrics` (see above). A limiter built without a stage does
//! none of its work either way: no lookup and no background task.

// docs.rs (`--cfg docsrs`, Cargo.toml) marks every item an optional
// feature brings with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admin;
mod backoff;
pub mod cluster;
mod count;
pub mod counter;
mod error;
pub mod health;
pub mod keys;
pub mod lease;
pub mod limit;
pub mod lock;
mod metrics;
mod outcomes;
pub mod policy;
mod primitive;
mod scripts;
mod throttled;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod tonic;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
mod usage;
mod warn;

#[doc(hidden)]
pub mod __private {
    //! Not part of the API, and under no semver promise: the crate's Lua as
    //! it sends it, for the repository's own tests and benches, which check
    //! and measure the very text the crate sends.

    /// Every script the crate sends, as `(name, code)`.
    #[must_use]
    pub fn scripts() -> Vec<(&'static str, &'static str)> {
        crate::limit::algorithm::scripts()
            .into_iter()
            .chain(crate::scripts::others())
            .map(|script| (script.name(), script.code()))
            .collect()
    }

    /// One subject's limiter of degraded local mode, by itself: the Rust
    /// side of an algorithm, which the tests check against its Lua.
    #[derive(Debug)]
    pub struct LocalLimiter {
        algorithm: crate::Algorithm,
        state: crate::limit::algorithm::LocalState,
    }

    /// What a [`LocalLimiter`] check found: `(allowed, remaining,
    /// retry_after_us, reset_after_us, more_after_us)`.
    pub type LocalVerdict = (bool, u64, Option<u64>, u64, u64);

    impl LocalLimiter {
        /// A limiter of `algorithm` with nothing in use.
        #[must_use]
        pub fn new(algorithm: crate::Algorithm) -> Self {
            LocalLimiter {
                algorithm,
                state: crate::limit::algorithm::LocalState::default(),
            }
        }

        /// A check of `cost` at `now_us` under `limit` per `period_us`
        /// (with `burst`, GCRA's capacity); `consume`: an admission counts.
        pub fn check(
            &mut self,
            now_us: u64,
            cost: u64,
            (limit, burst, period_us): (u64, u64, u64),
            consume: bool,
        ) -> LocalVerdict {
            let rules = self.algorithm.rules();
            let at = crate::limit::algorithm::Local {
                now: now_us,
                cost,
                limit,
                capacity: self.algorithm.capacity_of(limit, burst),
                period: period_us,
                consume,
            };
            let v = (rules.local)(&mut self.state, at);
            (
                v.allowed,
                v.remaining,
                v.retry_after_us,
                v.reset_after_us,
                v.more_after_us,
            )
        }
    }
}

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use self::metrics::describe_metrics;
// The names nearly every user writes; everything else lives in the module
// of its concept (`shardlimit::lock::LockGuard`, `shardlimit::health::Health`).
pub use cluster::Cluster;
pub use count::Count;
pub use counter::Counter;
pub use error::{Error, Result};
pub use lease::LeaseLimiter;
pub use limit::{Algorithm, Decision, MultiLimiter, Quota, RateLimiter};
pub use lock::Lock;
pub use policy::FailurePolicy;

// The README's examples are compiled (and run: they only define functions)
// as doctests, so the front door cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
