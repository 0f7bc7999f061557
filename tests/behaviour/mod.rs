//! The behaviour suite every deployment runs: the same test bodies against
//! the six-node cluster (`tests/cluster/handle.rs`), one standalone server
//! (`tests/deployments/standalone.rs`), a Sentinel setup (`tests/deployments/sentinel.rs`) and the
//! TLS-only cluster as the least-privilege ACL user (`tests/deployments/tls.rs`), with
//! the deployment — a [`Setup`] — as the parameter. Each of those files
//! expands [`suite!`] once and keeps only what is its deployment's own
//! (detection, discovery, certificates, failover).
//!
//! Where each one is found, overridable so that two setups can run side by
//! side: the cluster at `SHARDLIMIT_NODES` / `SHARDLIMIT_CLUSTER_PORT`
//! (`tests/common`); the standalone server at `SHARDLIMIT_STANDALONE_URL`,
//! else `redis://127.0.0.1:$SHARDLIMIT_STANDALONE_PORT` (default 6390); the
//! sentinels at `SHARDLIMIT_SENTINEL_NODES` (comma-separated), else three
//! from `SHARDLIMIT_SENTINEL_PORT` (default 26400), service
//! `SHARDLIMIT_SENTINEL_SERVICE` (default `shardlimit`); the TLS cluster at
//! `SHARDLIMIT_TLS_NODES` (default `rediss://127.0.0.1:7000`, one seed) with
//! `SHARDLIMIT_TLS_CA` (default `cluster-compose/.state/tls/ca.crt`; the
//! client certificate and the ACL password are read from beside it).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

mod bodies;

pub use bodies::*;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use shardlimit::{Cluster, cluster::ClusterBuilder, cluster::Deployment};

use crate::common;

/// A deployment the suite runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// The six-node cluster of `cluster-compose/up.sh`.
    Cluster,
    /// One plain redis-server (`up.sh --standalone`).
    Standalone,
    /// A primary, a replica and three sentinels (`up.sh --sentinel`).
    Sentinel,
    /// The TLS-only cluster (`up.sh --tls`), as the ACL user, one seed.
    Tls,
}

/// The command timeout of the Sentinel handles: the fault test's bounds
/// are stated in it.
pub const SENTINEL_COMMAND_TIMEOUT: Duration = Duration::from_millis(250);

fn env_or(name: &str, default: impl FnOnce() -> String) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(default)
}

/// The standalone server's URL.
pub fn standalone_url() -> String {
    env_or("SHARDLIMIT_STANDALONE_URL", || {
        let port = env_or("SHARDLIMIT_STANDALONE_PORT", || "6390".to_owned());
        format!("redis://127.0.0.1:{port}")
    })
}

/// The sentinels, in the order to ask them.
pub fn sentinels() -> Vec<String> {
    let given: Vec<String> = std::env::var("SHARDLIMIT_SENTINEL_NODES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if !given.is_empty() {
        return given;
    }
    let first: u16 = env_or("SHARDLIMIT_SENTINEL_PORT", || "26400".to_owned())
        .parse()
        .expect("SHARDLIMIT_SENTINEL_PORT is a port");
    (first..=first + 2)
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect()
}

/// The service the sentinels monitor.
pub fn sentinel_service() -> String {
    env_or("SHARDLIMIT_SENTINEL_SERVICE", || "shardlimit".to_owned())
}

/// The TLS cluster's one seed.
pub fn tls_seed() -> String {
    env_or("SHARDLIMIT_TLS_NODES", || {
        "rediss://127.0.0.1:7000".to_owned()
    })
}

/// The TLS cluster's CA; the client certificate, key and ACL password are
/// found from it.
pub fn tls_ca() -> PathBuf {
    std::env::var("SHARDLIMIT_TLS_CA").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cluster-compose/.state/tls/ca.crt"),
        PathBuf::from,
    )
}

/// A file `up.sh --tls` wrote beside the CA (`client.crt`, `node.key`, …).
pub fn tls_file(name: &str) -> PathBuf {
    tls_ca().parent().unwrap().join(name)
}

/// The ACL user's password, as `up.sh` keeps it beside the TLS directory.
pub fn acl_password_file() -> PathBuf {
    tls_ca()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("acl/password")
}

impl Setup {
    /// What `Cluster::deployment` must say of a handle on it.
    pub fn deployment(self) -> Deployment {
        match self {
            Setup::Cluster | Setup::Tls => Deployment::Cluster,
            Setup::Standalone => Deployment::Standalone,
            Setup::Sentinel => Deployment::Sentinel,
        }
    }

    /// Masters serving the 16384 slots.
    pub fn masters(self) -> usize {
        match self {
            Setup::Cluster | Setup::Tls => 3,
            Setup::Standalone | Setup::Sentinel => 1,
        }
    }

    /// Replicas per master.
    pub fn replicas(self) -> usize {
        match self {
            Setup::Standalone => 0,
            Setup::Cluster | Setup::Tls | Setup::Sentinel => 1,
        }
    }

    /// A namespace no other test uses (the ACL user's keys must match
    /// `aclsmoke-*`).
    pub fn namespace(self, prefix: &str) -> String {
        let ns = common::unique_namespace(prefix);
        match self {
            Setup::Tls => format!("aclsmoke-{ns}"),
            _ => ns,
        }
    }

    /// A builder for it, under `namespace`, with nothing else set but what
    /// reaching it needs.
    pub fn builder_in(self, namespace: &str) -> ClusterBuilder {
        let builder = match self {
            Setup::Cluster => Cluster::builder(common::node_urls()),
            Setup::Standalone => Cluster::builder([standalone_url()]),
            Setup::Sentinel => Cluster::builder(sentinels())
                .deployment(Deployment::Sentinel)
                .sentinel_service(sentinel_service())
                .command_timeout(SENTINEL_COMMAND_TIMEOUT),
            Setup::Tls => Cluster::builder([tls_seed()])
                .tls_ca_file(tls_ca())
                .username(common::acl::USER)
                .password_file(acl_password_file())
                .command_timeout(Duration::from_secs(1)),
        };
        builder.namespace(namespace)
    }

    /// A connected handle under a fresh namespace.
    pub async fn connect(self, prefix: &str) -> Cluster {
        let cluster = self
            .builder_in(&self.namespace(prefix))
            .build()
            .await
            .unwrap_or_else(|err| panic!("{} is not reachable ({err})", self.how_to_start()));
        assert_eq!(cluster.deployment(), self.deployment());
        cluster
    }

    fn how_to_start(self) -> &'static str {
        match self {
            Setup::Cluster => "the test cluster: start it with cluster-compose/up.sh",
            Setup::Standalone => {
                "no standalone server: start it with cluster-compose/up.sh --standalone"
            }
            Setup::Sentinel => "no Sentinel setup: start it with cluster-compose/up.sh --sentinel",
            Setup::Tls => {
                "the TLS cluster as the ACL user: start it with cluster-compose/up.sh --tls"
            }
        }
    }

    /// How long a `replica_ack` lock waits for its replica (at least 100 ms
    /// under the command timeout), or `None` without replicas.
    pub fn replica_ack(self) -> Option<Duration> {
        match self {
            Setup::Standalone => None,
            Setup::Cluster | Setup::Sentinel => Some(Duration::from_millis(100)),
            Setup::Tls => Some(Duration::from_millis(500)),
        }
    }

    /// A direct connection to one node (`host:port`) as the default user:
    /// an independent view, not through the library under test.
    pub async fn node(self, addr: &str) -> redis::aio::MultiplexedConnection {
        let client = match self {
            Setup::Tls => redis::Client::build_with_tls(
                format!("rediss://{addr}"),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(std::fs::read(tls_ca()).unwrap()),
                },
            )
            .unwrap(),
            _ => redis::Client::open(format!("redis://{addr}")).unwrap(),
        };
        client.get_multiplexed_async_connection().await.unwrap()
    }

    /// The `shardlimit` command, pointed at this deployment and namespace
    /// by its flags alone.
    pub fn cli(self, namespace: &str) -> Command {
        let mut cmd = Command::new(crate::common::cli_exe());
        cmd.env_remove("SHARDLIMIT_DEPLOYMENT")
            .env_remove("SHARDLIMIT_SENTINEL_SERVICE")
            .arg("--namespace")
            .arg(namespace)
            .arg("--nodes");
        match self {
            Setup::Cluster => cmd.arg(common::node_urls().join(",")),
            Setup::Standalone => cmd.arg(standalone_url()),
            Setup::Sentinel => cmd
                .arg(sentinels().join(","))
                .args(["--deployment", "sentinel", "--sentinel-service"])
                .arg(sentinel_service()),
            Setup::Tls => cmd
                .arg(tls_seed())
                .args(["--user", common::acl::USER, "--password-file"])
                .arg(acl_password_file())
                .arg("--tls-ca")
                .arg(tls_ca()),
        };
        cmd
    }

    /// Every key under `namespace` on the node at `addr`.
    pub async fn keys_on(self, addr: &str, namespace: &str) -> Vec<Vec<u8>> {
        common::scan_keys(&mut self.node(addr).await, namespace).await
    }

    /// Fails the test unless `cluster`'s namespace has keys and every one
    /// of them, on every master, has a TTL.
    pub async fn assert_every_key_has_ttl(self, cluster: &Cluster) {
        let namespace = cluster.namespace();
        let mut seen = 0;
        for shard in cluster.topology().await.unwrap().shards {
            let addr = shard.master.to_string();
            let keys = self.keys_on(&addr, namespace).await;
            let mut conn = self.node(&addr).await;
            for key in keys {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                // -1: no TTL. -2: expired between SCAN and PTTL, so it had
                // one (a TLS CI run, 2026-12-03: a GCRA state of a few ms).
                assert!(
                    pttl != -1,
                    "{} has no TTL ({pttl})",
                    String::from_utf8_lossy(&key)
                );
                seen += 1;
            }
        }
        assert!(seen > 0, "no keys under {namespace}");
    }
}

/// Expands, in the test binary that calls it, one `#[tokio::test]` per
/// test of the suite against `$setup`, each with the attributes given
/// (e.g. `#[ignore = "needs cluster-compose/up.sh --standalone"]`).
macro_rules! suite {
    ($setup:expr $(, #[$attr:meta])*) => {
        $crate::behaviour::suite!(@each ($setup) [$(#[$attr])*]
            topology_covers_every_slot
            eval_many_runs_every_call_once_in_order
            every_algorithm_checks_denies_peeks_and_resets
            multi_limit_binds_on_the_tightest
            lock_is_held_once_and_fenced
            lease_caps_leases_held
            counter_add_and_drain_keep_the_ttl
            scanner_lists_counts_audits_and_resets
            health_reports_every_master
        );
        $crate::behaviour::suite!(@each ($setup) [$(#[$attr])* #[cfg(feature = "deny-cache")]]
            a_reset_lifts_a_cached_denial_here_and_through_another_handle
            a_block_denies_and_a_reward_gives_back
        );
        $crate::behaviour::suite!(@each ($setup) [$(#[$attr])*]
            cli_lists_shows_and_reports_health
        );
    };
    (@each ($setup:expr) [$(#[$attr:meta])*]) => {};
    (@each ($setup:expr) [$(#[$attr:meta])*] $name:ident $($rest:ident)*) => {
        #[tokio::test]
        $(#[$attr])*
        async fn $name() {
            $crate::behaviour::$name($setup).await;
        }
        $crate::behaviour::suite!(@each ($setup) [$(#[$attr])*] $($rest)*);
    };
}
pub(crate) use suite;
