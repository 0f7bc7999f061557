//! The deny cache across a failover: its subscription to other processes'
//! invalidations must follow the slots to the promoted replica.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use shardlimit::{Cluster, Quota, RateLimiter};

use crate::common;
use crate::harness::*;

/// Checks until a denial of `subject` is answered from the cache; how long
/// that took (the subscription is live again), or `None` by `within`.
async fn until_cached(l: &RateLimiter, subject: &str, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Ok(d) = l.check(subject).await {
            if d.cached {
                return Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// A denial cached in one process, its master killed, its replica promoted:
/// once the cache caches again, a reset made in another process through the
/// new master must still lift the cached denial here — the subscription
/// moved to the new master (redis-rs resubscribes after a reconnect), and
/// while it was down nothing stale was kept (the cache is cleared when a
/// subscription is lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn the_deny_cache_follows_invalidations_across_a_failover() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let here = cluster_builder("denyfail").build().await.unwrap();
    let there = Cluster::builder(common::node_urls())
        .namespace(here.namespace())
        .command_timeout(COMMAND_TIMEOUT)
        .build()
        .await
        .unwrap();
    let quota = Quota::per_hour(NonZeroU32::MIN);
    let cached = RateLimiter::builder(&here, "failover", quota)
        .deny_cache(100)
        .build()
        .unwrap();
    let other = RateLimiter::builder(&there, "failover", quota)
        .build()
        .unwrap();
    let subject = subjects_on(port(0), 1).await.remove(0);
    assert!(cached.check(&subject).await.unwrap().allowed);
    let first = until_cached(&cached, &subject, Duration::from_secs(20)).await;
    assert!(first.is_some(), "no denial was cached before the failover");

    let killed = Instant::now();
    node("kill", port(0)).await;
    // The subscription to 7000 is gone: the cache must notice and stop
    // answering (its denials could be lifted by messages it cannot hear).
    let mut noticed = None;
    while noticed.is_none() && killed.elapsed() < Duration::from_secs(10) {
        if cached.check(&subject).await.map_or(true, |d| !d.cached) {
            noticed = Some(killed.elapsed());
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(
        noticed.is_some(),
        "the cache kept answering with its subscription gone"
    );
    let mut promoted = None;
    while killed.elapsed() < Duration::from_secs(20) {
        if is_master(port(3)).await {
            promoted = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(promoted.is_some(), "the replica was never promoted");
    // The state was replicated: still denied, and cached again once the
    // subscription is back.
    let again = until_cached(&cached, &subject, Duration::from_secs(30)).await;
    let live_after = killed.elapsed();
    assert!(
        again.is_some(),
        "the cache never cached again after the failover"
    );

    let mut reset = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reset && Instant::now() < deadline {
        reset = other.reset(&subject).await.is_ok();
        if !reset {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(reset, "the reset never got through");
    let reset_at = Instant::now();
    let mut lifted = None;
    while reset_at.elapsed() < Duration::from_secs(5) {
        if cached.check(&subject).await.is_ok_and(|d| d.allowed) {
            lifted = Some(reset_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    report(
        "the_deny_cache_follows_invalidations_across_a_failover",
        &[format!(
            "7000 killed; the cache stopped answering after {noticed:?}; 7003 promoted after \
             {promoted:?}; caching again {live_after:?} after the kill; a reset in another \
             handle lifted the cached denial after {lifted:?}"
        )],
    );
    assert!(
        lifted.is_some(),
        "a reset after the failover did not lift the cached denial within 5 s"
    );
    common::assert_every_key_has_ttl(here.namespace()).await;
}
