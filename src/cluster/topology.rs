//! The cluster's shape: which master serves which slots, and its replicas.

use std::fmt;
use std::ops::RangeInclusive;

use redis::Value;

use crate::error::{Error, Result};

/// A node as the cluster announces it. The host is exactly what the cluster
/// announces (`127.0.0.1` and `localhost` are different nodes to redis-rs).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddr {
    /// Announced host.
    pub host: String,
    /// Announced port.
    pub port: u16,
    /// The node's cluster id.
    pub id: String,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// One master, the slots it serves and its replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The master.
    pub master: NodeAddr,
    /// Its replicas.
    pub replicas: Vec<NodeAddr>,
    /// Slot ranges it serves.
    pub slots: Vec<RangeInclusive<u16>>,
}

/// Every shard of the cluster, as one node saw it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Topology {
    /// Shards sorted by master address.
    pub shards: Vec<Shard>,
}

impl Topology {
    /// The shard whose master serves `slot`.
    #[must_use]
    pub fn owner(&self, slot: u16) -> Option<&Shard> {
        self.shards
            .iter()
            .find(|s| s.slots.iter().any(|r| r.contains(&slot)))
    }

    /// Number of slots with an owner (16384 on a healthy cluster).
    #[must_use]
    pub fn covered_slots(&self) -> usize {
        self.shards
            .iter()
            .flat_map(|s| &s.slots)
            .map(|r| usize::from(*r.end()) - usize::from(*r.start()) + 1)
            .sum()
    }

    /// Parses a `CLUSTER SLOTS` reply.
    pub(crate) fn from_cluster_slots(reply: Value) -> Result<Self> {
        let bad = |detail: &str| Error::UnexpectedReply {
            op: "cluster slots".into(),
            detail: detail.to_owned(),
        };
        let Value::Array(ranges) = reply else {
            return Err(bad("not an array"));
        };
        let mut shards: Vec<Shard> = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(bad("range is not an array"));
            };
            let [start, end, master, replicas @ ..] = fields.as_slice() else {
                return Err(bad("range has fewer than three fields"));
            };
            let int = |v: &Value| match v {
                Value::Int(n) => u16::try_from(*n).map_err(|_| bad("slot out of range")),
                _ => Err(bad("slot is not an integer")),
            };
            let slots = int(start)?..=int(end)?;
            let master = node(master).ok_or_else(|| bad("malformed master entry"))?;
            let replicas = replicas
                .iter()
                .map(|r| node(r).ok_or_else(|| bad("malformed replica entry")))
                .collect::<Result<Vec<_>>>()?;
            match shards.iter_mut().find(|s| s.master == master) {
                Some(shard) => shard.slots.push(slots),
                None => shards.push(Shard {
                    master,
                    replicas,
                    slots: vec![slots],
                }),
            }
        }
        shards.sort_by(|a, b| a.master.cmp(&b.master));
        Ok(Topology { shards })
    }
}

fn node(value: &Value) -> Option<NodeAddr> {
    let Value::Array(fields) = value else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let host = text(fields.first()?)?;
    let port = match fields.get(1)? {
        Value::Int(p) => u16::try_from(*p).ok()?,
        _ => return None,
    };
    let id = text(fields.get(2)?)?;
    Some(NodeAddr { host, port, id })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    #[test]
    fn parses_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                n("127.0.0.1", 7000, "a"),
                n("127.0.0.1", 7004, "d"),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10000),
                n("127.0.0.1", 7001, "b"),
            ]),
            Value::Array(vec![
                Value::Int(10001),
                Value::Int(16383),
                n("127.0.0.1", 7001, "b"),
            ]),
        ]);
        let topo = Topology::from_cluster_slots(reply).unwrap();
        assert_eq!(topo.shards.len(), 2);
        assert_eq!(topo.shards[0].master.to_string(), "127.0.0.1:7000");
        assert_eq!(topo.shards[0].replicas[0].port, 7004);
        assert_eq!(topo.owner(5461).unwrap().master.id, "b");
        assert_eq!(topo.owner(16383).unwrap().master.id, "b");
        assert_eq!(topo.shards[1].slots.len(), 2);
        assert_eq!(topo.covered_slots(), 16384);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Topology::from_cluster_slots(Value::Int(1)).is_err());
        let short = Value::Array(vec![Value::Array(vec![Value::Int(0)])]);
        assert!(Topology::from_cluster_slots(short).is_err());
    }
}
