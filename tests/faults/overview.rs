//! What the operator sees while a master and its replica are both down:
//! the slots no master serves, not the topology's full count.

use std::time::{Duration, Instant};

use shardlimit_web::{WebOptions, router};
use tower::ServiceExt;

use crate::common;
use crate::harness::*;

/// Master 7000 and its replica 7003 killed: the other masters answer
/// `cluster_state:fail` with 10923 slots served. `Cluster::health()` says
/// so (`served_slots`), and the Limits page's overview says "Cluster down"
/// and "10923 of 16384" — it said "16384 of 16384" before, from
/// the topology, which keeps listing the dead master's slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn the_overview_counts_only_the_slots_a_working_master_serves() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let cluster = cluster_builder("overview").build().await.unwrap();
    let dead = common::owner(0).await;
    assert_eq!(
        dead.addr,
        addr(0),
        "the standard layout: 7000 serves slot 0"
    );
    let served_by_dead: usize = dead
        .ranges
        .iter()
        .map(|(a, b)| usize::from(b - a) + 1)
        .sum();
    node("kill", port(0)).await;
    node("kill", port(3)).await;
    // The others mark it failed after cluster-node-timeout (2 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    let health = loop {
        let health = cluster.health().await.unwrap();
        if health.served_slots() < 16384 {
            break health;
        }
        assert!(Instant::now() < deadline, "never seen down: {health:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(health.covered_slots, 16384, "the topology still lists them");
    assert_eq!(health.served_slots(), 16384 - served_by_dead);
    assert!(
        health.lock_problems().iter().any(|p| p.contains(&format!(
            "only {} of 16384 slots are served",
            16384 - served_by_dead
        ))),
        "{:?}",
        health.lock_problems()
    );
    let app = router(&cluster, WebOptions::default());
    let request = http::Request::get("/")
        .header("host", "127.0.0.1")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let page = String::from_utf8_lossy(&body);
    assert!(page.contains("Cluster down"), "{page}");
    assert!(
        page.contains(&format!("{} of 16384", 16384 - served_by_dead)),
        "{page}"
    );
    assert!(!page.contains("16384 of 16384"), "{page}");
}
