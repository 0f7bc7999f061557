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
    let resource = subjects_on(port(0), 1).await.remove(0);
    let guard = holder
        .try_acquire(&resource)
        .await
        .unwrap()
        .expect("free at first");
    let token = guard.fencing_token();

    let killed = Instant::now();
    node("kill", port(0)).await;
    let mut promoted_after = None;
    while killed.elapsed() < Duration::from_secs(20) {
        if is_master(port(3)).await {
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

/// `replica_ack` must never confirm a write its replica did not get. The
/// replica of 7000 is paused (it acknowledges nothing) while 32 tasks take
/// locks on 7000's slots with `replica_ack`, and — to shake the client's
/// connections — master 7001 is paused under load from the same handle
/// (timeouts there made the old shared connection rebuild itself, after
/// which a `WAIT` sent apart from its acquisition found a fresh connection
/// with nothing to wait for and "confirmed" at once). Then 7000 is killed
/// and its lagging replica promoted: any guard handed out before would now
/// be granted a second time. It must never happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn replica_ack_never_confirms_an_unreplicated_lock() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use shardlimit::{Lock, RateLimiter};

    restore_cluster();
    let _restore = RestoreOnDrop;
    let holder_cluster = cluster_builder("ackfail").build().await.unwrap();
    let namespace = holder_cluster.namespace().to_owned();
    let lock = Lock::builder(&holder_cluster, "ack")
        .ttl(Duration::from_secs(120))
        .replica_ack(Duration::from_millis(100))
        .build()
        .unwrap();
    let noise = RateLimiter::builder(&holder_cluster, "noise", big_quota())
        .build()
        .unwrap();
    let resources = Arc::new(subjects_on(port(0), 4000).await);
    let noisy_subjects = Arc::new(subjects_on(port(1), 64).await);

    node("pause", port(3)).await;
    node("pause", port(1)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let noise_tasks: Vec<_> = (0..64)
        .map(|task| {
            let (noise, subjects, stop) = (noise.clone(), noisy_subjects.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let _ = noise.check(&subjects[task]).await;
                }
            })
        })
        .collect();
    let started = Instant::now();
    let takers: Vec<_> = (0..32)
        .map(|task| {
            let (lock, resources) = (lock.clone(), resources.clone());
            tokio::spawn(async move {
                let (mut guards, mut attempts, mut errors) = (Vec::new(), 0, 0);
                let mut i = task;
                while started.elapsed() < Duration::from_millis(1500) && i < resources.len() {
                    attempts += 1;
                    match lock.try_acquire(&resources[i]).await {
                        Ok(Some(guard)) => guards.push((resources[i].clone(), guard)),
                        Ok(None) => {}
                        Err(_) => errors += 1,
                    }
                    i += 32;
                }
                (guards, attempts, errors)
            })
        })
        .collect();
    let (mut granted, mut attempts, mut errors) = (Vec::new(), 0, 0);
    for taker in takers {
        let (g, a, e) = taker.await.unwrap();
        granted.extend(g);
        attempts += a;
        errors += e;
    }
    stop.store(true, Ordering::Relaxed);
    for task in noise_tasks {
        task.await.unwrap();
    }
    node("unpause", port(1)).await;
    // WAITs blocking on a lagging replica run on their own connection: they
    // never make their healthy master look down to everyone else.
    let master = holder_cluster
        .nodes()
        .into_iter()
        .find(|n| n.addr == addr(0))
        .unwrap();
    assert_eq!(master.marked_down, 0, "{master:?}");

    // The master dies; its replica, which saw none of these locks, takes
    // over.
    node("kill", port(0)).await;
    node("unpause", port(3)).await;
    let killed = Instant::now();
    let mut promoted_after = None;
    while killed.elapsed() < Duration::from_secs(30) {
        if is_master(port(3)).await {
            promoted_after = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(promoted_after.is_some(), "the replica was never promoted");

    // A rival takes every lock the holder was granted, if it can.
    let rival_cluster = shardlimit::Cluster::builder(common::node_urls())
        .namespace(&namespace)
        .build()
        .await
        .unwrap();
    let rival = Lock::builder(&rival_cluster, "ack")
        .ttl(Duration::from_secs(120))
        .build()
        .unwrap();
    let mut double_grants = 0;
    for (resource, _guard) in &granted {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match rival.try_acquire(resource).await {
                Ok(Some(_)) => {
                    double_grants += 1;
                    break;
                }
                Ok(None) => break,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("the rival never got an answer: {e}"),
            }
        }
    }
    report(
        "replica_ack_never_confirms_an_unreplicated_lock",
        &[format!(
            "replica 7003 paused, master 7001 paused under load: {attempts} acquisitions with replica_ack, {} granted, {errors} refused as unconfirmed or failed; 7000 killed, 7003 promoted after {promoted_after:?}; double grants: {double_grants}",
            granted.len()
        )],
    );
    assert_eq!(double_grants, 0, "locks granted twice after the failover");
    assert!(
        granted.is_empty(),
        "{} locks confirmed by a replica that was paused",
        granted.len()
    );
    assert!(attempts > 0 && errors > 0);
    drop(granted);
    common::assert_every_key_has_ttl(&namespace).await;
}
