//! The command line: global options and one subcommand.

use clap::{Parser, Subcommand};

/// `--namespace` when neither it nor `SHARDLIMIT_NAMESPACE` is given: the
/// library's default.
pub(crate) const DEFAULT_NAMESPACE: &str = "sl";

#[derive(Parser, Debug)]
#[command(
    name = "shardlimit",
    version,
    about = "See and manage every shardlimit primitive on a Redis Cluster"
)]
pub(crate) struct Cli {
    /// Seed nodes, comma-separated redis:// (or rediss:// for TLS) URLs.
    #[arg(
        long,
        env = "SHARDLIMIT_NODES",
        hide_env_values = true,
        value_delimiter = ',',
        global = true
    )]
    pub(crate) nodes: Vec<String>,
    /// What the nodes are: detect (default; standalone only when the one
    /// node given has cluster support disabled), cluster, standalone, or
    /// sentinel (the nodes are sentinels; needs --sentinel-service).
    #[arg(long, env = "SHARDLIMIT_DEPLOYMENT", global = true)]
    pub(crate) deployment: Option<shardlimit::cluster::Deployment>,
    /// With --deployment sentinel: the name the sentinels monitor the
    /// primary under.
    #[arg(long, env = "SHARDLIMIT_SENTINEL_SERVICE", global = true)]
    pub(crate) sentinel_service: Option<String>,
    /// ACL username for every node.
    #[arg(long, env = "SHARDLIMIT_USER", hide_env_values = true, global = true)]
    pub(crate) user: Option<String>,
    /// File holding the password (one trailing newline ignored). The
    /// password can also come from the environment variable
    /// SHARDLIMIT_PASSWORD; there is no flag for it, so it never shows in `ps`.
    #[arg(
        long,
        env = "SHARDLIMIT_PASSWORD_FILE",
        hide_env_values = true,
        global = true
    )]
    pub(crate) password_file: Option<std::path::PathBuf>,
    /// PEM file of the CA certificates to trust for rediss:// nodes
    /// (default: the system's trust store).
    #[arg(long, env = "SHARDLIMIT_TLS_CA", hide_env_values = true, global = true)]
    pub(crate) tls_ca: Option<std::path::PathBuf>,
    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(
        long,
        env = "SHARDLIMIT_TLS_CERT",
        hide_env_values = true,
        requires = "tls_key",
        global = true
    )]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        env = "SHARDLIMIT_TLS_KEY",
        hide_env_values = true,
        requires = "tls_cert",
        global = true
    )]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// File holding the subject secret, the key the services hash
    /// credential subjects (API keys, bearer tokens) with, so that `show`
    /// finds them by the raw key (one trailing newline ignored). It can
    /// also come from the environment variable SHARDLIMIT_SUBJECT_SECRET;
    /// there is no flag for the secret itself, so it never shows in `ps`.
    /// Neither: the namespace's default key, as services without a secret.
    #[arg(
        long,
        env = "SHARDLIMIT_SUBJECT_SECRET_FILE",
        hide_env_values = true,
        global = true
    )]
    pub(crate) subject_secret_file: Option<std::path::PathBuf>,
    /// The namespace the primitives were built with.
    #[arg(
        long,
        env = "SHARDLIMIT_NAMESPACE",
        default_value = DEFAULT_NAMESPACE,
        global = true
    )]
    pub(crate) namespace: String,
    /// Timeout of each command, in milliseconds.
    #[arg(long, default_value_t = 2000, global = true)]
    pub(crate) timeout_ms: u64,
    /// Keys asked for per SCAN call.
    #[arg(long, default_value_t = shardlimit::admin::DEFAULT_SCAN_COUNT, global = true)]
    pub(crate) scan_count: u32,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Every primitive, one line each.
    List {
        /// Only this kind (fw, slog, swc, gcra, lock, lease, counter, ...).
        #[arg(long)]
        kind: Option<String>,
        /// Only this name.
        #[arg(long)]
        name: Option<String>,
        /// Only subjects matching this glob (* and ?).
        #[arg(long)]
        subject: Option<String>,
        /// JSON Lines instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        quotas: crate::quotas::QuotaArgs,
    },
    /// Every primitive of one subject: as typed, and under its keyed digest
    /// (hmac:…), where credentials such as API keys are limited — so give
    /// the raw key, with the services' subject secret.
    Show {
        subject: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        quotas: crate::quotas::QuotaArgs,
    },
    /// Primitives per master, kind and name.
    Count {
        #[arg(long)]
        json: bool,
    },
    /// Keys without a TTL and keys that are not shardlimit's; exit code 1 if any.
    Audit {
        #[arg(long)]
        json: bool,
    },
    /// Delete one subject's keys (all, or one kind / name) in one transaction.
    ///
    /// Refuses (exit code 1) when a lock is held, a lease limiter has leases
    /// held or a counter has a value, unless --force. Asks for confirmation when stdin
    /// is a terminal, unless --yes.
    Reset(ResetArgs),
    /// A subject's own quota for one rate limiter: set, get or clear it.
    ///
    /// The limiter is <kind>:<name> (kind fw, slog, swc or gcra), e.g.
    /// gcra:api; a quota is <limit>/<period>[:burst=<n>], e.g. 100/1m or
    /// 10/1s:burst=20; a duration is e.g. 30d, 1h30m, 90s or 1500ms.
    #[command(subcommand)]
    Override(crate::overrides::OverrideCommand),
    /// Cluster state, masters and replicas, AOF, memory per master.
    Health,
    /// The subjects denied most in the last minutes, per limiter, across
    /// every process of the namespace (rate limiters report by default).
    ///
    /// Reads two keys' worth from one master: no SCAN. Rates are over each
    /// process's last 5 s, summed over the processes; DENIALS (over the
    /// window) never under-counts and over-counts by at most ERROR. With
    /// no report under the namespace, says which namespaces have some.
    Top(TopArgs),
    /// Serve the Limits page (read-only unless --allow-writes).
    Web(crate::web::WebArgs),
}

/// The arguments of `top`.
#[derive(clap::Args, Debug)]
pub(crate) struct TopArgs {
    /// Only limiters of this name.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Only limiters of this kind (fw, slog, swc, gcra).
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Subjects shown per limiter (at most 100 are known).
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: usize,
    /// Read again every 5 s until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,
    /// JSON Lines (one object per limiter) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The arguments of `reset`.
#[derive(clap::Args, Debug)]
pub(crate) struct ResetArgs {
    pub(crate) subject: String,
    #[arg(long)]
    pub(crate) kind: Option<String>,
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// List exactly what would be deleted, and what is in use; delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Delete held locks, held leases and undrained counters too.
    #[arg(long)]
    pub(crate) force: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}
