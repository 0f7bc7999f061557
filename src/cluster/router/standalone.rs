//! One standalone server as the router sees it: a single shard owning every
//! slot, and the checks that it is what the configuration says.

use redis::Value;

use super::{Router, SLOTS, host_port};
use crate::cluster::call::{Request, node_request};
use crate::cluster::deployment::Deployment;
use crate::cluster::node::Node;
use crate::cluster::topology::{NodeAddr, Shard, Topology};
use crate::error::{Error, Result};

impl Router {
    /// A seed said it is no cluster node, before any topology was known:
    /// standalone if that is allowed, else a configuration error.
    pub(super) fn not_a_cluster(&self, node: &Node) -> Result<Topology> {
        let deployment = self.deployment();
        if deployment == Deployment::Detect && self.seeds.len() == 1 {
            self.settle_deployment(Deployment::Standalone);
            tracing::info!(
                node = node.addr(),
                "shardlimit: standalone Redis (cluster support disabled)"
            );
            return self.standalone_topology();
        }
        let reason = if deployment == Deployment::Detect {
            format!(
                "{} has cluster support disabled, and {} seeds were given ({}): a standalone \
                 server must be the only seed, and a cluster's seeds must all be cluster nodes",
                node.addr(),
                self.seeds.len(),
                self.seed_list
            )
        } else {
            format!(
                "{} has cluster support disabled; for one standalone server use \
                 Deployment::Standalone (or detect)",
                node.addr()
            )
        };
        Err(Error::Config {
            field: "nodes",
            reason,
        })
    }

    /// Refuses a cluster node given as a standalone server: its traffic
    /// would all go to one node and be redirected.
    pub(super) async fn check_standalone(&self) -> Result<()> {
        let (host, port) = self.standalone_addr()?;
        let node = self.node(&host, port)?;
        let mut cmd = redis::cmd("INFO");
        cmd.arg("cluster");
        let reply: Value = node_request(
            &node,
            "info cluster",
            Request::Cmd(&cmd),
            self.config.command_timeout,
            self,
        )
        .await?;
        let info: String =
            redis::from_redis_value(reply).map_err(|err| Error::UnexpectedReply {
                op: "info cluster".into(),
                detail: err.to_string(),
            })?;
        if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
            return Err(Error::Config {
                field: "deployment",
                reason: format!(
                    "{host}:{port} is a cluster node, not a standalone server; use \
                     Deployment::Cluster (or detect)"
                ),
            });
        }
        Ok(())
    }

    pub(super) fn standalone_addr(&self) -> Result<(String, u16)> {
        host_port(self.template.addr()).ok_or_else(|| Error::Config {
            field: "nodes",
            reason: format!(
                "{}: only TCP and TLS addresses are supported",
                self.template.addr()
            ),
        })
    }

    /// The one standalone server, serving every slot.
    pub(super) fn standalone_topology(&self) -> Result<Topology> {
        let (host, port) = self.standalone_addr()?;
        let last = u16::try_from(SLOTS - 1).unwrap_or(u16::MAX);
        Ok(Topology {
            shards: vec![Shard {
                master: NodeAddr {
                    host,
                    port,
                    id: "standalone".to_owned(),
                },
                replicas: Vec::new(),
                slots: vec![0..=last],
            }],
        })
    }
}
