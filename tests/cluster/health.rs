//! `Cluster::health` against the six-node cluster: every master, its AOF and
//! its connected replicas, cross-checked with each node's own `INFO`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use shardlimit::Cluster;

async fn info_field(addr: &str, section: &str, key: &str) -> String {
    let mut conn = common::node(addr).await;
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| {
            l.trim_end()
                .strip_prefix(&format!("{key}:"))
                .map(str::to_owned)
        })
        .unwrap()
}

#[tokio::test]
async fn health_reports_every_master_with_its_aof_and_replicas() {
    let cluster = common::cluster("health").await;
    let health = cluster.health().await.unwrap();
    let masters = common::masters().await;
    assert_eq!(health.masters.len(), masters.len());
    assert_eq!(health.covered_slots, 16384);
    for m in &health.masters {
        let addr = m.master.to_string();
        assert!(
            masters.iter().any(|x| x.addr == addr),
            "{addr} is not a master"
        );
        let status = m.status.as_ref().unwrap();
        // The library's view agrees with the node's own INFO.
        assert_eq!(
            status.aof_enabled,
            info_field(&addr, "persistence", "aof_enabled").await == "1"
        );
        assert_eq!(
            status.connected_replicas.to_string(),
            info_field(&addr, "replication", "connected_slaves").await
        );
        assert_eq!(status.role, "master");
        assert!(status.cluster_state_ok);
        assert_eq!(status.slots_assigned, Some(16384));
        assert_eq!(status.slots_ok, Some(16384));
        assert_eq!((status.slots_pfail, status.slots_fail), (Some(0), Some(0)));
        // Its replicas' links, as it lists them: one per connected replica,
        // streaming, and each one the topology lists.
        assert_eq!(status.replicas.len(), status.connected_replicas as usize);
        for link in &status.replicas {
            assert_eq!(link.state, "online", "{link:?}");
            assert!(link.addr.starts_with("127.0.0.1:"), "{link:?}");
        }
        // The handle's own view of the node: known, up. The report asked
        // the node on a connection of its own, which leaves that view as it
        // was (no connection counted, never marked down by a probe).
        let view = m.client_view.as_ref().expect("the handle knows the node");
        assert_eq!(view.addr, addr);
        assert_eq!(view.down_for, None, "{view:?}");
        assert_eq!(view.marked_down, 0, "{view:?}");
        eprintln!(
            "{addr}: aof_enabled={} connected_replicas={} known_replicas={}",
            status.aof_enabled, status.connected_replicas, m.known_replicas
        );
    }
    // cluster-compose/ runs AOF on and one replica per master: fit for locks.
    assert_eq!(health.lock_problems(), Vec::<String>::new());
    assert!(health.fit_for_locks());
    assert_eq!(health.served_slots(), 16384);
    assert!(!health.cluster_down());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn health_of_an_unreachable_cluster_is_an_error() {
    let cluster = Cluster::builder(["redis://127.0.0.1:1"])
        .lazy_connect(true)
        .command_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let err = cluster.health().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
}
