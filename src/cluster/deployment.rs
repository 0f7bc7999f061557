//! Which kind of Redis the seeds are: a cluster, one standalone primary, or
//! the sentinels of a primary.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The kind of Redis deployment a [`Cluster`](crate::Cluster) talks to, set
/// with [`ClusterBuilder::deployment`](crate::cluster::ClusterBuilder::deployment) or
/// [`DEPLOYMENT_ENV`](crate::cluster::DEPLOYMENT_ENV).
///
/// A **standalone** server (one `redis-server` without `cluster-enabled`)
/// is treated as a cluster of one shard that owns all 16384 slots: every
/// primitive, script, transaction, the scanner, `reset`, health and the CLI
/// work unchanged. `CLUSTER SLOTS` is never sent to it, its topology is
/// never refreshed, and a `MOVED`/`ASK` reply (which a standalone server
/// never sends) is an error.
///
/// The default, [`Detect`](Self::Detect), never guesses in a way that
/// could send a cluster's traffic to one node: a seed is taken as
/// standalone only when it is the **only** seed and itself answers
/// `CLUSTER SLOTS` with `ERR This instance has cluster support disabled`,
/// which no cluster node ever says. Several seeds of which one is not a
/// cluster node are a configuration error.
///
/// With **Sentinel**, the seeds are the sentinels and
/// [`ClusterBuilder::sentinel_service`](crate::cluster::ClusterBuilder::sentinel_service)
/// names the service: the primary is asked of the sentinels
/// (`SENTINEL GET-MASTER-ADDR-BY-NAME`), checked with `ROLE` to be a
/// primary, and then serves every slot like a standalone server. On a
/// broken connection, a hung primary or `READONLY` (an old primary demoted
/// to replica), the sentinels are asked again in the background, so calls
/// go to the new primary as soon as they name it. Detect never picks
/// Sentinel: it must be asked for.
///
/// ```no_run
/// # async fn demo() -> shardlimit::Result<()> {
/// use shardlimit::{Cluster, cluster::Deployment};
/// // A laptop's redis-server, or a service's unit-test server.
/// let redis = Cluster::builder(["redis://127.0.0.1:6379"])
///     .deployment(Deployment::Standalone)
///     .build()
///     .await?;
/// assert_eq!(redis.deployment(), Deployment::Standalone);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Deployment {
    /// Ask the seeds: a cluster if `CLUSTER SLOTS` answers, standalone if
    /// the only seed says cluster support is disabled. The default.
    #[default]
    Detect,
    /// A Redis Cluster; a seed that is not a cluster node is an error.
    Cluster,
    /// One standalone primary, given as the only seed; it serves every slot.
    /// A seed that is a cluster node is refused.
    Standalone,
    /// One primary found and followed through the sentinels given as the
    /// seeds; needs
    /// [`ClusterBuilder::sentinel_service`](crate::cluster::ClusterBuilder::sentinel_service).
    Sentinel,
}

impl Deployment {
    /// The name [`DEPLOYMENT_ENV`](crate::cluster::DEPLOYMENT_ENV) takes for it:
    /// `detect`, `cluster`, `standalone` or `sentinel`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Deployment::Detect => "detect",
            Deployment::Cluster => "cluster",
            Deployment::Standalone => "standalone",
            Deployment::Sentinel => "sentinel",
        }
    }
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Deployment {
    type Err = Error;

    /// `detect`, `cluster`, `standalone` or `sentinel`, in any case.
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "detect" => Ok(Deployment::Detect),
            "cluster" => Ok(Deployment::Cluster),
            "standalone" => Ok(Deployment::Standalone),
            "sentinel" => Ok(Deployment::Sentinel),
            other => Err(Error::Config {
                field: "deployment",
                reason: format!("{other:?}: expected detect, cluster, standalone or sentinel"),
            }),
        }
    }
}

/// Whether `err` is a node's answer that it is not a cluster node
/// (`ERR This instance has cluster support disabled`). Redis sends it as a
/// plain `ERR`, so the text is the only way to tell.
pub(crate) fn is_cluster_disabled(err: &Error) -> bool {
    match err {
        Error::Redis { source, .. } => source
            .to_string()
            .to_ascii_lowercase()
            .contains("cluster support disabled"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in [
            Deployment::Detect,
            Deployment::Cluster,
            Deployment::Standalone,
            Deployment::Sentinel,
        ] {
            assert_eq!(d.as_str().parse::<Deployment>().unwrap(), d);
        }
        assert_eq!(
            " Standalone ".parse::<Deployment>().unwrap(),
            Deployment::Standalone
        );
        assert!("sentinels".parse::<Deployment>().is_err());
        assert_eq!(Deployment::default(), Deployment::Detect);
    }

    #[test]
    fn cluster_disabled_is_recognised() {
        let err = Error::Redis {
            op: "cluster slots".into(),
            slot: None,
            source: redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "An error was signalled by the server",
                "This instance has cluster support disabled".to_owned(),
            )),
        };
        assert!(is_cluster_disabled(&err));
    }
}
