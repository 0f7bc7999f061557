//! The environment variables [`Cluster::builder_from_env`](crate::Cluster::builder_from_env)
//! reads, and [`Cluster::seeds_from_env`](crate::Cluster::seeds_from_env).

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// Environment variable with the seed nodes, comma-separated
/// `redis://host:port` (or `rediss://` for TLS) URLs; read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const NODES_ENV: &str = "SHARDLIMIT_NODES";

/// Environment variable with the [`Deployment`](crate::cluster::Deployment) (`detect`, `cluster`,
/// `standalone` or `sentinel`; [`ClusterBuilder::deployment`](crate::cluster::ClusterBuilder::deployment)); read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env). Unset: `detect`.
pub const DEPLOYMENT_ENV: &str = "SHARDLIMIT_DEPLOYMENT";

/// Environment variable with the Sentinel service name
/// ([`ClusterBuilder::sentinel_service`](crate::cluster::ClusterBuilder::sentinel_service)),
/// used with `SHARDLIMIT_DEPLOYMENT=sentinel` and the sentinels as
/// [`NODES_ENV`]; read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const SENTINEL_SERVICE_ENV: &str = "SHARDLIMIT_SENTINEL_SERVICE";

/// Environment variable with the ACL username ([`ClusterBuilder::username`](crate::cluster::ClusterBuilder::username));
/// read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const USER_ENV: &str = "SHARDLIMIT_USER";

/// Environment variable with the password ([`ClusterBuilder::password`](crate::cluster::ClusterBuilder::password));
/// read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env). Prefer [`PASSWORD_FILE_ENV`]
/// where the environment of a process can be read by others.
pub const PASSWORD_ENV: &str = "SHARDLIMIT_PASSWORD";

/// Environment variable with the path of a file holding the password
/// ([`ClusterBuilder::password_file`](crate::cluster::ClusterBuilder::password_file)); read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env) when [`PASSWORD_ENV`] is unset.
pub const PASSWORD_FILE_ENV: &str = "SHARDLIMIT_PASSWORD_FILE";

/// Environment variable with the subject secret, the key of the digests
/// credentials are limited under
/// ([`ClusterBuilder::subject_secret`](crate::cluster::ClusterBuilder::subject_secret),
/// at least 16 bytes); read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env) and the
/// CLI. Every process of a service, its CLI and its Limits page need the
/// same. Unset (and [`SUBJECT_SECRET_FILE_ENV`] too): the namespace's
/// default key, which is no secret (see
/// [`SubjectHasher`](crate::keys::SubjectHasher)).
pub const SUBJECT_SECRET_ENV: &str = "SHARDLIMIT_SUBJECT_SECRET";

/// Environment variable with the path of a file holding the subject secret
/// ([`ClusterBuilder::subject_secret_file`](crate::cluster::ClusterBuilder::subject_secret_file));
/// read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env)
/// and the CLI when [`SUBJECT_SECRET_ENV`] is unset.
pub const SUBJECT_SECRET_FILE_ENV: &str = "SHARDLIMIT_SUBJECT_SECRET_FILE";

/// Environment variable with the path of a PEM file of CA certificates
/// ([`ClusterBuilder::tls_ca_file`](crate::cluster::ClusterBuilder::tls_ca_file)); read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const TLS_CA_ENV: &str = "SHARDLIMIT_TLS_CA";

/// Environment variable with the path of a PEM client certificate for
/// mutual TLS ([`ClusterBuilder::tls_client_cert_files`](crate::cluster::ClusterBuilder::tls_client_cert_files), with
/// [`TLS_KEY_ENV`]); read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const TLS_CERT_ENV: &str = "SHARDLIMIT_TLS_CERT";

/// Environment variable with the path of the PEM private key of
/// [`TLS_CERT_ENV`]; read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const TLS_KEY_ENV: &str = "SHARDLIMIT_TLS_KEY";

/// Environment variable with the namespace
/// ([`ClusterBuilder::namespace`](crate::cluster::ClusterBuilder::namespace)); read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env) and the
/// CLI (`--namespace`). Unset: `sl`.
pub const NAMESPACE_ENV: &str = "SHARDLIMIT_NAMESPACE";

/// Environment variable with the first port of a local six-node test
/// cluster (`cluster-compose/up.sh` runs it on that port and the five
/// after): when [`NODES_ENV`] is unset, the seeds are
/// `redis://127.0.0.1:<port>` to `<port + 5>`. For tests and demos only.
pub const CLUSTER_PORT_ENV: &str = "SHARDLIMIT_CLUSTER_PORT";

/// The six nodes of the `cluster-compose/` test cluster on its default
/// ports (`SHARDLIMIT_CLUSTER_PORT=7000`).
pub const DEFAULT_NODES: [&str; 6] = [
    "redis://127.0.0.1:7000",
    "redis://127.0.0.1:7001",
    "redis://127.0.0.1:7002",
    "redis://127.0.0.1:7003",
    "redis://127.0.0.1:7004",
    "redis://127.0.0.1:7005",
];

impl Cluster {
    /// The seed URLs of [`NODES_ENV`] (`SHARDLIMIT_NODES`, comma-separated,
    /// blanks ignored), else the six local nodes of a test cluster at
    /// [`CLUSTER_PORT_ENV`]: the one reading of those variables, shared by
    /// [`builder_from_env`](Self::builder_from_env), the CLI and the
    /// benches.
    ///
    /// Errors with [`Error::Config`] naming `SHARDLIMIT_NODES`, and saying
    /// what to set, when neither is set: a production service without the
    /// variable must not try `127.0.0.1`.
    ///
    /// ```no_run
    /// // SHARDLIMIT_NODES=redis://10.0.0.5:6379,redis://10.0.0.6:6379
    /// let seeds = shardlimit::Cluster::seeds_from_env()?;
    /// assert_eq!(seeds.len(), 2);
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn seeds_from_env() -> Result<Vec<String>> {
        let list = std::env::var(NODES_ENV).unwrap_or_default();
        let seeds: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if !seeds.is_empty() {
            return Ok(seeds);
        }
        let unset = |reason: String| Error::Config {
            field: NODES_ENV,
            reason,
        };
        match std::env::var(CLUSTER_PORT_ENV) {
            Ok(port) if !port.trim().is_empty() => {
                let base: u16 = port
                    .trim()
                    .parse()
                    .ok()
                    .filter(|p| *p <= u16::MAX - 5)
                    .ok_or_else(|| unset(format!("{CLUSTER_PORT_ENV}={port:?} is not a port")))?;
                Ok((base..=base + 5)
                    .map(|port| format!("redis://127.0.0.1:{port}"))
                    .collect())
            }
            _ => Err(unset(format!(
                "unset: set {NODES_ENV} to the cluster's seed nodes, comma-separated \
                 (e.g. {NODES_ENV}=redis://10.0.0.5:6379,redis://10.0.0.6:6379; \
                 rediss:// for TLS), or {CLUSTER_PORT_ENV}=7000 for the local test \
                 cluster of cluster-compose/"
            ))),
        }
    }
}
