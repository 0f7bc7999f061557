//! Unit tests of the standalone rules and the deployment settling.

use super::*;
use crate::cluster::socket::Connector;
use redis::IntoConnectionInfo;

fn config() -> RouterConfig {
    let second = Duration::from_secs(1);
    RouterConfig {
        node: NodeConfig {
            connector: Connector::default(),
            connect_timeout: second,
            max_idle: second,
            down_after: 3,
            failure_window: second,
            reconnect_min: second,
            reconnect_max: second,
        },
        command_timeout: second,
        refresh_interval: second,
    }
}

fn router(seeds: &[&str], deployment: Deployment) -> Result<Arc<Router>> {
    let seeds: Vec<ConnectionInfo> = seeds
        .iter()
        .map(|s| s.into_connection_info().unwrap())
        .collect();
    Router::new(
        seeds,
        "test seeds".to_owned(),
        config(),
        deployment,
        (deployment == Deployment::Sentinel).then(|| "shardlimit".to_owned()),
    )
}

#[test]
fn a_standalone_server_owns_every_slot() {
    let router = router(&["redis://127.0.0.1:6390"], Deployment::Standalone).unwrap();
    let topology = router.standalone_topology().unwrap();
    assert_eq!(topology.covered_slots(), SLOTS);
    assert_eq!(topology.shards.len(), 1);
    assert_eq!(topology.shards[0].master.to_string(), "127.0.0.1:6390");
    assert_eq!(topology.shards[0].master.id, "standalone");
    router.install(&topology).unwrap();
    let first = router.owner(0).unwrap();
    assert!(Arc::ptr_eq(&first, &router.owner(16383).unwrap()));
}

#[test]
fn standalone_takes_exactly_one_seed() {
    let err = router(
        &["redis://127.0.0.1:6390", "redis://127.0.0.1:6391"],
        Deployment::Standalone,
    )
    .err()
    .unwrap();
    assert!(matches!(err, Error::Config { field: "nodes", .. }), "{err}");
}

#[test]
fn only_a_lone_detected_seed_becomes_standalone() {
    let lone = router(&["redis://127.0.0.1:6390"], Deployment::Detect).unwrap();
    let node = lone.node("127.0.0.1", 6390).unwrap();
    assert!(lone.not_a_cluster(&node).is_ok());
    assert_eq!(lone.deployment(), Deployment::Standalone);

    let several = router(
        &["redis://127.0.0.1:6390", "redis://127.0.0.1:6391"],
        Deployment::Detect,
    )
    .unwrap();
    let node = several.node("127.0.0.1", 6390).unwrap();
    let err = several.not_a_cluster(&node).unwrap_err();
    assert!(err.to_string().contains("only seed"), "{err}");
    assert_eq!(several.deployment(), Deployment::Detect);

    let cluster = router(&["redis://127.0.0.1:6390"], Deployment::Cluster).unwrap();
    let node = cluster.node("127.0.0.1", 6390).unwrap();
    assert!(cluster.not_a_cluster(&node).is_err());
    assert_eq!(cluster.deployment(), Deployment::Cluster);
}

#[test]
fn a_detected_deployment_is_settled_once() {
    let router = router(&["redis://127.0.0.1:7000"], Deployment::Detect).unwrap();
    router.settle_deployment(Deployment::Cluster);
    router.settle_deployment(Deployment::Standalone);
    assert_eq!(router.deployment(), Deployment::Cluster);
}

#[test]
fn a_sentinel_deployment_needs_a_service_and_only_it_takes_one() {
    let seeds = ["redis://127.0.0.1:26400".into_connection_info().unwrap()];
    let make = |deployment, service: Option<&str>| {
        Router::new(
            seeds.to_vec(),
            "s".to_owned(),
            config(),
            deployment,
            service.map(str::to_owned),
        )
    };
    assert!(make(Deployment::Sentinel, None).is_err());
    assert!(make(Deployment::Cluster, Some("shardlimit")).is_err());
    let router = make(Deployment::Sentinel, Some("shardlimit")).unwrap();
    assert!(router.is_standalone(), "one primary serves every slot");
}
