//! Acquisitions cut off on the wire — by a hung master, by a killed
//! connection — leave nothing held by no one (issue 23): what a failed
//! acquisition may have taken is released behind it, whatever happened to
//! its connection meanwhile.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use futures::future::join_all;
use shardlimit::keys::KeyId;
use shardlimit::{ConcurrencyLimiter, Lock};

use crate::common;
use crate::harness::*;

const CALLS: usize = 8;

/// The lock keys and lease keys of `subjects`, named `job` and `jobs`.
fn keys_of(cluster: &shardlimit::Cluster, subjects: &[String]) -> Vec<Vec<u8>> {
    let lock = KeyId::new("lock", "job").unwrap();
    let lease = KeyId::new("lease", "jobs").unwrap();
    subjects
        .iter()
        .flat_map(|s| [&lock, &lease].map(|id| cluster.keys().key(s, id).unwrap()))
        .collect()
}

/// Master 7000 hangs (paused) while locks and permits are taken on its
/// slots: every call times out, and the handle marks the node down and
/// drops its connection. The node resumes before the cluster would fail it
/// over and runs its backlog: the acquisitions, and whatever was sent to
/// release them. Before the fix those releases went through the router,
/// which refused them at once once the node was marked down: 14 and 15 of
/// the 16 locks and permits taken on resuming stayed held by no one for
/// their TTL in two runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn acquisitions_cut_off_by_a_hung_master_leave_nothing_held() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let cluster = cluster_builder("hungacq").build().await.unwrap();
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let leases = ConcurrencyLimiter::builder(&cluster, "jobs")
        .lease_ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut subjects = subjects_on(port(0), CALLS + 1).await;
    // Connected, and both scripts loaded on the node (a NOSCRIPT reply could
    // not come back from a hung node anyway).
    let warm_up = subjects.pop().unwrap();
    let guard = lock.try_acquire(&warm_up).await.unwrap().unwrap();
    assert!(guard.release().await.unwrap());
    let permit = leases.try_acquire(&warm_up).await.unwrap().unwrap();
    assert!(permit.release().await.unwrap());

    node("pause", port(0)).await;
    let paused = Instant::now();
    let (locks, permits) = futures::join!(
        join_all(subjects.iter().map(|s| lock.try_acquire(s))),
        join_all(subjects.iter().map(|s| leases.try_acquire(s))),
    );
    let took = paused.elapsed();
    assert!(locks.iter().all(Result::is_err), "{locks:?}");
    assert!(permits.iter().all(Result::is_err), "{permits:?}");
    let marked_down = cluster
        .nodes()
        .iter()
        .find(|n| n.addr == addr(0))
        .is_some_and(|n| n.down_for.is_some());
    // Past the releases' own timeout, so the handle has let go of the old
    // connection before the node reads anything; well under the cluster's
    // node timeout, so the master is not failed over.
    tokio::time::sleep_until((paused + COMMAND_TIMEOUT * 3).into()).await;
    node("unpause", port(0)).await;
    let resumed = paused.elapsed();

    // The node runs its backlog as soon as it resumes; a release that has
    // to wait for the node to be seen up again (a probe within the
    // reconnect backoff, 500 ms at first) goes out at the next retry.
    let keys = keys_of(&cluster, &subjects);
    let gone = Instant::now();
    common::wait_until_all_gone(&keys, Duration::from_secs(3) + SCHEDULING_SLACK).await;
    report(
        "acquisitions_cut_off_by_a_hung_master_leave_nothing_held",
        &[format!(
            "7000 paused; {CALLS} lock and {CALLS} lease acquisitions failed within {took:?} \
             (node marked down: {marked_down}); resumed after {resumed:?}; \
             every lock and permit gone {:?} later",
            gone.elapsed()
        )],
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Locks with `replica_ack` queue on master 7000's blocking connection
/// behind each other's `WAIT`s; the connections to the node are killed
/// (`CLIENT KILL`) while the first acquisition is in its `WAIT`. That one
/// took its lock; the others were discarded unrun. The release sent behind
/// the first finds its connection broken — the server runs nothing more
/// from it — so it is sent again on a new connection once the node answers.
/// Before the fix, that release was refused at once (a broken connection
/// marks the node down), and the lock stayed held by no one for its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn acquisitions_whose_connection_is_killed_leave_nothing_held() {
    const ACK: Duration = Duration::from_millis(300);
    restore_cluster();
    let _restore = RestoreOnDrop;
    let cluster = common::builder("killacq")
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let mut subjects = subjects_on(port(0), CALLS + 1).await;
    let topology = cluster.topology().await.unwrap();
    let shard = topology
        .owner(shardlimit::keys::slot(subjects[0].as_bytes()))
        .unwrap();
    // One replica more than the master has: every WAIT runs to its timeout.
    let want = u32::try_from(shard.replicas.len() + 1).unwrap();
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(60))
        .replica_ack(ACK)
        .replica_ack_count(NonZeroU32::new(want).unwrap())
        .build()
        .unwrap();
    let warm_up = subjects.pop().unwrap();
    let plain = Lock::builder(&cluster, "job").build().unwrap();
    let guard = plain.try_acquire(&warm_up).await.unwrap().unwrap();
    assert!(guard.release().await.unwrap());

    let started = Instant::now();
    let kill = async {
        // The first acquisition runs at once and then waits in its WAIT.
        tokio::time::sleep(ACK / 2).await;
        common::cmd(&addr(0), &["CLIENT", "KILL", "TYPE", "normal"]).await
    };
    let (results, killed) =
        futures::join!(join_all(subjects.iter().map(|s| lock.try_acquire(s))), kill);
    let took = started.elapsed();
    assert!(results.iter().all(Result::is_err), "{results:?}");

    // The node is down to the handle until a probe reconnects (within the
    // reconnect backoff, 500 ms at first); the release is retried until
    // then, at most 2 s apart, and then takes one round trip.
    let keys: Vec<Vec<u8>> = keys_of(&cluster, &subjects);
    let gone = Instant::now();
    common::wait_until_all_gone(&keys, Duration::from_secs(4) + SCHEDULING_SLACK).await;
    report(
        "acquisitions_whose_connection_is_killed_leave_nothing_held",
        &[format!(
            "{CALLS} replica_ack acquisitions queued on 7000; CLIENT KILL after {:?} killed {killed:?}; \
             every call failed within {took:?}; every lock gone {:?} later",
            ACK / 2,
            gone.elapsed()
        )],
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
