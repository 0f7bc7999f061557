//! One fresh look at one node, for a health report: a connection of its
//! own, one pipeline (`INFO persistence`, `INFO replication`, `INFO memory`,
//! `DBSIZE`, and `CLUSTER INFO` unless the server is standalone), all
//! within one bound.
//!
//! Not through the node's lanes, on purpose: a report must say how the node
//! is *now*. Through the lanes, a node that was believed down a minute ago
//! is reported down without being asked, a connection broken while it was
//! away answers "broken pipe" after it is back, and a hung node costs the
//! command timeout per command; and a probe's failure would mark the node
//! down for everyone else. Here a recovered node reads healthy at once, and
//! a hung one costs the report at most `within`.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::{Cluster, NodeAddr};
use crate::error::{Error, Result};

/// What one node replied, unparsed.
pub(crate) struct Probe {
    pub(crate) persistence: String,
    pub(crate) replication: String,
    pub(crate) memory: String,
    /// `DBSIZE`: keys in the node's database, every namespace.
    pub(crate) keys: u64,
    /// `CLUSTER INFO`; `None` for a standalone server or Sentinel primary.
    pub(crate) cluster_info: Option<String>,
}

impl Cluster {
    /// Asks `node` afresh, on a connection of its own, connecting and
    /// replying within `within`.
    pub(crate) async fn probe_fresh(&self, node: &NodeAddr, within: Duration) -> Result<Probe> {
        let op = format!("health probe of {node}");
        let target = self.inner.router.node(&node.host, node.port)?;
        let standalone = self.is_standalone();
        let mut pipe = redis::pipe();
        pipe.cmd("INFO").arg("persistence");
        pipe.cmd("INFO").arg("replication");
        pipe.cmd("INFO").arg("memory");
        pipe.cmd("DBSIZE");
        if !standalone {
            pipe.cmd("CLUSTER").arg("INFO");
        }
        let failed = |source| Error::Redis {
            op: op.clone().into(),
            slot: None,
            source,
        };
        let ask = async {
            // The socket lives until the replies are in: dropping it closes
            // the connection.
            let (mut conn, _socket) = target.open_probe(within).await.map_err(failed)?;
            let replies: Vec<Value> = pipe.query_async(&mut conn).await.map_err(failed)?;
            let reply = |i: usize| replies.get(i).cloned().unwrap_or(Value::Nil);
            let unexpected = |err: &dyn std::fmt::Display| Error::UnexpectedReply {
                op: op.clone().into(),
                detail: err.to_string(),
            };
            let text = |i: usize| String::from_redis_value(reply(i)).map_err(|e| unexpected(&e));
            Ok(Probe {
                persistence: text(0)?,
                replication: text(1)?,
                memory: text(2)?,
                keys: u64::from_redis_value(reply(3)).map_err(|e| unexpected(&e))?,
                cluster_info: if standalone { None } else { Some(text(4)?) },
            })
        };
        match tokio::time::timeout(within, ask).await {
            Ok(probe) => probe,
            Err(_) => Err(Error::Timeout {
                op: op.clone().into(),
                slot: None,
                timeout: within,
            }),
        }
    }
}
