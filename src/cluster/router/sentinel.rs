//! The primary of a Sentinel deployment: asked of the sentinels, checked
//! with `ROLE`, installed as one shard owning every slot.
//!
//! The sentinels are the seeds, asked in order until one names the
//! service's primary (`SENTINEL GET-MASTER-ADDR-BY-NAME`). The primary must
//! say `master` to `ROLE` before it is used: a sentinel that has not seen
//! the failover yet names a node that is a replica now, and writing there
//! would only get `READONLY`. A named primary that cannot be reached (it
//! is the one that just died) is installed anyway: nothing is sent to a
//! node believed down, and since the table is then not settled, the
//! refresh asks the sentinels again every `refresh_interval` until they
//! name the promoted replica — without the growing backoff of a failed
//! refresh, which would add seconds to every failover.
//!
//! A switch with no fault to show it (the old primary alive) is heard from
//! the sentinels' `+switch-master` announcements instead (`switches`).

use std::sync::Arc;

use redis::Value;

mod switches;

pub(super) use switches::Switch;

use super::{Router, SLOTS, host_port};
use crate::cluster::call::{Request, node_request};
use crate::cluster::node::Node;
use crate::cluster::topology::{NodeAddr, Shard, Topology};
use crate::error::{Error, Result};

/// What `ROLE` said about a node.
#[derive(Debug, PartialEq, Eq)]
enum Role {
    /// A primary, with the replicas streaming from it.
    Master { replicas: Vec<(String, u16)> },
    /// A replica or a sentinel.
    Other(String),
}

impl Router {
    /// The primary the first answering sentinel names, as one shard owning
    /// every slot, with the replicas its `ROLE` lists.
    pub(super) async fn sentinel_topology(&self) -> Result<Topology> {
        let service = self.service.as_deref().unwrap_or_default();
        let mut last: Option<Error> = None;
        // Sentinels that answered they do not monitor the service.
        let mut unaware: Vec<String> = Vec::new();
        // The primary the last switch heard promoted, with its replicas,
        // once a sentinel named the one it demoted while it says `master`.
        let mut promoted: Option<Topology> = None;
        for seed in &self.seeds {
            let Some((host, port)) = host_port(seed.addr()) else {
                continue;
            };
            let sentinel = self.node(&host, port)?;
            let (master_host, master_port) = match self.ask_sentinel(&sentinel, service).await {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    unaware.push(sentinel.addr().to_owned());
                    continue;
                }
                Err(err) => {
                    last = Some(err);
                    continue;
                }
            };
            if let Some(switch) = self.demoted_by_last_switch(&master_host, master_port) {
                // The promoted one's `ROLE` asked once per refresh.
                if promoted.is_none() {
                    promoted = self.still_promoted(switch).await?;
                }
                if promoted.is_some() {
                    continue;
                }
            }
            let master = self.node(&master_host, master_port)?;
            let replicas = match self.role(&master).await {
                Ok(Role::Master { replicas }) => replicas,
                Ok(Role::Other(role)) => {
                    last = Some(Error::UnexpectedReply {
                        op: "role".into(),
                        detail: format!(
                            "sentinel {} names {master_host}:{master_port} the primary of \
                             {service:?}, but it says it is a {role}",
                            sentinel.addr()
                        ),
                    });
                    continue;
                }
                // Unreachable: the primary that just failed, most likely;
                // see the module docs.
                Err(err) if err.is_transient() => Vec::new(),
                Err(err) => return Err(err),
            };
            return Ok(one_shard(master_host, master_port, replicas));
        }
        if let Some(topology) = promoted {
            // Every sentinel that named a primary named the demoted one:
            // none has heard of the switch yet but the one that announced
            // it, which did not answer now.
            return Ok(topology);
        }
        if last.is_none() && !unaware.is_empty() {
            // Every sentinel reached answered, and none knows the service:
            // a wrong name, which asking again will not fix.
            return Err(Error::Config {
                field: "sentinel_service",
                reason: format!(
                    "no sentinel monitors a service {service:?} (asked {})",
                    unaware.join(", ")
                ),
            });
        }
        Err(Error::Connect {
            nodes: self.seed_list.clone(),
            source: match last {
                Some(Error::Redis { source, .. }) => source,
                Some(other) => std::io::Error::other(other.to_string()).into(),
                None => std::io::Error::other("no sentinel to ask").into(),
            },
        })
    }

    /// The last switch heard, if it demoted `host:port`.
    fn demoted_by_last_switch(&self, host: &str, port: u16) -> Option<Switch> {
        self.last_switch()
            .filter(|switch| switch.from.0 == host && switch.from.1 == port)
    }

    /// The primary `switch` promoted, as the topology to install, while it
    /// says `master`; `None` once it is demoted in turn or gone (then a
    /// sentinel naming the one it replaced may well be right; see
    /// `switches`).
    async fn still_promoted(&self, switch: Switch) -> Result<Option<Topology>> {
        let (host, port) = switch.to;
        let promoted = self.node(&host, port)?;
        Ok(match self.role(&promoted).await {
            Ok(Role::Master { replicas }) => Some(one_shard(host, port, replicas)),
            Ok(Role::Other(_)) | Err(_) => None,
        })
    }

    /// `host:port` of `service`'s primary, as `sentinel` knows it; `None`
    /// if it does not monitor `service`.
    async fn ask_sentinel(
        &self,
        sentinel: &Arc<Node>,
        service: &str,
    ) -> Result<Option<(String, u16)>> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(service);
        let op = "sentinel get-master-addr-by-name";
        let reply = node_request(
            sentinel,
            op,
            Request::Cmd(&cmd),
            self.config.command_timeout,
            self,
        )
        .await?;
        if reply == Value::Nil {
            return Ok(None);
        }
        parse_master_addr(reply)
            .map(Some)
            .ok_or_else(|| Error::UnexpectedReply {
                op: op.into(),
                detail: format!(
                    "sentinel {} sent an address for {service:?} that is not one",
                    sentinel.addr()
                ),
            })
    }

    async fn role(&self, node: &Arc<Node>) -> Result<Role> {
        let cmd = redis::cmd("ROLE");
        let reply = node_request(
            node,
            "role",
            Request::Cmd(&cmd),
            self.config.command_timeout,
            self,
        )
        .await?;
        parse_role(reply).ok_or_else(|| Error::UnexpectedReply {
            op: "role".into(),
            detail: format!("{} sent a ROLE reply that is not one", node.addr()),
        })
    }
}

fn one_shard(host: String, port: u16, replicas: Vec<(String, u16)>) -> Topology {
    let last = u16::try_from(SLOTS - 1).unwrap_or(u16::MAX);
    Topology {
        shards: vec![Shard {
            master: NodeAddr {
                host,
                port,
                id: "sentinel".to_owned(),
            },
            replicas: replicas
                .into_iter()
                .map(|(host, port)| NodeAddr {
                    host,
                    port,
                    id: "sentinel".to_owned(),
                })
                .collect(),
            slots: vec![0..=last],
        }],
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `[host, port]`; `None` for a nil (an unknown service) or anything else.
fn parse_master_addr(reply: Value) -> Option<(String, u16)> {
    let Value::Array(fields) = reply else {
        return None;
    };
    let [host, port] = fields.as_slice() else {
        return None;
    };
    Some((text(host)?, text(port)?.parse().ok()?))
}

/// `["master", offset, [[host, port, offset], …]]`, or another role's
/// reply (`["slave", …]`, `["sentinel", …]`).
fn parse_role(reply: Value) -> Option<Role> {
    let Value::Array(fields) = reply else {
        return None;
    };
    let role = text(fields.first()?)?;
    if role != "master" {
        return Some(Role::Other(role));
    }
    let mut replicas = Vec::new();
    if let Some(Value::Array(list)) = fields.get(2) {
        for replica in list {
            if let Value::Array(parts) = replica
                && let (Some(host), Some(port)) = (parts.first(), parts.get(1))
            {
                replicas.push((text(host)?, text(port)?.parse().ok()?));
            }
        }
    }
    Some(Role::Master { replicas })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_master_address_is_host_and_port() {
        let reply = Value::Array(vec![bulk("127.0.0.1"), bulk("6401")]);
        assert_eq!(
            parse_master_addr(reply),
            Some(("127.0.0.1".to_owned(), 6401))
        );
        assert_eq!(parse_master_addr(Value::Nil), None, "unknown service");
        assert_eq!(
            parse_master_addr(Value::Array(vec![bulk("h"), bulk("port")])),
            None
        );
    }

    #[test]
    fn role_tells_a_primary_and_its_replicas_from_the_rest() {
        let master = Value::Array(vec![
            bulk("master"),
            Value::Int(1643),
            Value::Array(vec![Value::Array(vec![
                bulk("127.0.0.1"),
                bulk("6401"),
                bulk("1508"),
            ])]),
        ]);
        assert_eq!(
            parse_role(master),
            Some(Role::Master {
                replicas: vec![("127.0.0.1".to_owned(), 6401)]
            })
        );
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(6400),
            bulk("connected"),
            Value::Int(10),
        ]);
        assert_eq!(parse_role(replica), Some(Role::Other("slave".to_owned())));
        assert_eq!(parse_role(Value::Okay), None);
    }

    #[test]
    fn the_primary_owns_every_slot() {
        let topology = one_shard(
            "127.0.0.1".to_owned(),
            6400,
            vec![("127.0.0.1".to_owned(), 6401)],
        );
        assert_eq!(topology.covered_slots(), SLOTS);
        assert_eq!(topology.shards[0].replicas[0].port, 6401);
    }
}
