//! The environment variables [`Cluster::builder_from_env`](crate::Cluster::builder_from_env)
//! reads, and the nodes it falls back to.

/// Environment variable with the seed nodes, comma-separated
/// `redis://host:port` (or `rediss://` for TLS) URLs; read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const NODES_ENV: &str = "SHARDLIMIT_NODES";

/// Environment variable with the [`Deployment`](crate::Deployment) (`detect`, `cluster`,
/// `standalone` or `sentinel`; [`ClusterBuilder::deployment`](crate::ClusterBuilder::deployment)); read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env). Unset: `detect`.
pub const DEPLOYMENT_ENV: &str = "SHARDLIMIT_DEPLOYMENT";

/// Environment variable with the Sentinel service name
/// ([`ClusterBuilder::sentinel_service`](crate::ClusterBuilder::sentinel_service)),
/// used with `SHARDLIMIT_DEPLOYMENT=sentinel` and the sentinels as
/// [`NODES_ENV`]; read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const SENTINEL_SERVICE_ENV: &str = "SHARDLIMIT_SENTINEL_SERVICE";

/// Environment variable with the ACL username ([`ClusterBuilder::username`](crate::ClusterBuilder::username));
/// read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const USER_ENV: &str = "SHARDLIMIT_USER";

/// Environment variable with the password ([`ClusterBuilder::password`](crate::ClusterBuilder::password));
/// read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env). Prefer [`PASSWORD_FILE_ENV`]
/// where the environment of a process can be read by others.
pub const PASSWORD_ENV: &str = "SHARDLIMIT_PASSWORD";

/// Environment variable with the path of a file holding the password
/// ([`ClusterBuilder::password_file`](crate::ClusterBuilder::password_file)); read by
/// [`Cluster::builder_from_env`](crate::Cluster::builder_from_env) when [`PASSWORD_ENV`] is unset.
pub const PASSWORD_FILE_ENV: &str = "SHARDLIMIT_PASSWORD_FILE";

/// Environment variable with the path of a PEM file of CA certificates
/// ([`ClusterBuilder::tls_ca_file`](crate::ClusterBuilder::tls_ca_file)); read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const TLS_CA_ENV: &str = "SHARDLIMIT_TLS_CA";

/// Environment variable with the path of a PEM client certificate for
/// mutual TLS ([`ClusterBuilder::tls_client_cert_files`](crate::ClusterBuilder::tls_client_cert_files), with
/// [`TLS_KEY_ENV`]); read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
pub const TLS_CERT_ENV: &str = "SHARDLIMIT_TLS_CERT";

/// Environment variable with the path of the PEM private key of
/// [`TLS_CERT_ENV`]; read by [`Cluster::builder_from_env`](crate::Cluster::builder_from_env).
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
