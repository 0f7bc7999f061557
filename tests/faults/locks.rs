//! Locks across a failover.

use std::time::{Duration, Instant};

use crate::common;
use crate::harness::*;

/// A lock acquired with replica acknowledgement survives its master's
/// death: after the replica is promoted the lock is still held — another
/// client is refused, and the holder can still extend it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn lock_survives_failover_with_replica_ack() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let holder_cluster = cluster_builder("lockfail").build().await.unwrap();
    let namespace = holder_cluster.namespace().to_owned();
    let rival_cluster = common::node_urls();
    let rival_cluster = shardlimit::Cluster::builder(rival_cluster)
        .namespace(&namespace)
        .command_timeout(COMMAND_TIMEOUT)
        .build()
        .await
        .unwrap();
    let build = |cluster: &shardlimit::Cluster| {
        shardlimit::Lock::builder(cluster, "export")
            .ttl(Duration::from_secs(60))
            .replica_ack(Duration::from_millis(100))
            .build()
            .unwrap()
    };
    let (holder, rival) = (build(&holder_cluster), build(&rival_cluster));
    let resource = subjects_on(7000, 1).await.remove(0);
    let guard = holder
        .try_acquire(&resource)
        .await
        .unwrap()
        .expect("free at first");
    let token = guard.fencing_token();

    let killed = Instant::now();
    node("kill", 7000).await;
    let mut promoted_after = None;
    while killed.elapsed() < Duration::from_secs(20) {
        if is_master(7003).await {
            promoted_after = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(promoted_after.is_some(), "the replica was never promoted");

    // The rival keeps trying until the cluster answers; every answer must be
    // "held elsewhere", never a guard.
    let mut refusals = 0;
    let mut errors = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && refusals < 20 {
        match rival.try_acquire(&resource).await {
            Ok(None) => refusals += 1,
            Ok(Some(stolen)) => panic!(
                "lock re-granted after failover (fence {})",
                stolen.fencing_token()
            ),
            Err(_) => errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(refusals, 20, "the cluster never answered the rival");
    let mut extended = false;
    for _ in 0..20 {
        match guard.extend(Duration::from_secs(60)).await {
            Ok(held) => {
                extended = held;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    report(
        "lock_survives_failover_with_replica_ack",
        &[format!(
            "lock (fence {token}) on 7000; 7000 killed; 7003 promoted after {promoted_after:?}; \
             rival refused {refusals} times ({errors} errors while the cluster recovered); holder extend after failover: {extended}"
        )],
    );
    assert!(extended, "the holder lost its lock in the failover");
    assert!(guard.release().await.unwrap());
    common::assert_every_key_has_ttl(&namespace).await;
}
