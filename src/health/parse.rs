//! Reading a master's replies (`INFO` sections, `CLUSTER INFO`) into a
//! [`NodeHealth`].

use super::{NodeHealth, ReplicaLink};
use crate::cluster::Probe;

/// A node's replies, read.
pub(super) fn parse(probe: &Probe) -> NodeHealth {
    let cluster = |key| number(probe.cluster_info.as_deref()?, key);
    NodeHealth {
        aof_enabled: field(&probe.persistence, "aof_enabled") == Some("1"),
        aof_last_write_ok: field(&probe.persistence, "aof_last_write_status") == Some("ok"),
        role: field(&probe.replication, "role")
            .unwrap_or_default()
            .to_owned(),
        connected_replicas: number(&probe.replication, "connected_slaves").unwrap_or(0),
        // A standalone server has no cluster to be in: its state is its own,
        // which answering shows.
        cluster_state_ok: probe
            .cluster_info
            .as_deref()
            .is_none_or(|info| field(info, "cluster_state") == Some("ok")),
        slots_assigned: cluster("cluster_slots_assigned"),
        slots_ok: cluster("cluster_slots_ok"),
        slots_pfail: cluster("cluster_slots_pfail"),
        slots_fail: cluster("cluster_slots_fail"),
        used_memory: number(&probe.memory, "used_memory").unwrap_or(0),
        keys: probe.keys,
        replicas: replica_links(&probe.replication),
    }
}

/// The value of `key:value` in an `INFO`-style reply, parsed.
fn number<T: std::str::FromStr>(info: &str, key: &str) -> Option<T> {
    field(info, key)?.parse().ok()
}

/// The value of `key:value` in an `INFO`-style reply.
fn field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .find_map(|(k, v)| (k == key).then_some(v))
}

/// The `slaveN:ip=…,port=…,state=…,offset=…,lag=…` lines of `INFO
/// replication`.
fn replica_links(replication: &str) -> Vec<ReplicaLink> {
    replication
        .lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .filter(|(key, _)| {
            key.strip_prefix("slave")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .map(|(_, value)| {
            let part = |name: &str| {
                value
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or_default()
            };
            ReplicaLink {
                addr: format!("{}:{}", part("ip"), part("port")),
                state: part("state").to_owned(),
                lag: part("lag").parse().ok(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERSISTENCE: &str = "# Persistence\r\nloading:0\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\naof_last_write_status:ok\r\n";
    const REPLICATION: &str = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=7003,state=online,offset=1,lag=0\r\n";

    #[test]
    fn info_fields_are_found_by_exact_key() {
        assert_eq!(field(PERSISTENCE, "aof_enabled"), Some("1"));
        assert_eq!(field(PERSISTENCE, "aof_last_write_status"), Some("ok"));
        assert_eq!(field(REPLICATION, "connected_slaves"), Some("1"));
        assert_eq!(field(REPLICATION, "role"), Some("master"));
        // "slave0" holds colons in its value; the key is still exact.
        assert_eq!(
            field(REPLICATION, "slave0"),
            Some("ip=127.0.0.1,port=7003,state=online,offset=1,lag=0")
        );
        assert_eq!(field(REPLICATION, "connected"), None);
    }

    #[test]
    fn replica_links_are_read_from_the_slave_lines() {
        let two = format!(
            "{REPLICATION}slave1:ip=10.0.0.9,port=6380,state=wait_bgsave,offset=0,lag=3\r\nslaves_extra:x\r\n"
        );
        assert_eq!(
            replica_links(&two),
            [
                ReplicaLink {
                    addr: "127.0.0.1:7003".into(),
                    state: "online".into(),
                    lag: Some(0),
                },
                ReplicaLink {
                    addr: "10.0.0.9:6380".into(),
                    state: "wait_bgsave".into(),
                    lag: Some(3),
                },
            ]
        );
        assert!(replica_links("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n").is_empty());
    }
}
