//! The admin scanner across a failover.

use std::num::NonZeroU32;

use shardlimit::{Quota, RateLimiter};

use std::time::Instant;

use crate::common;
use crate::harness::*;

/// A scan that runs while a master is failed over (`CLUSTER FAILOVER` on its
/// replica) completes without an error reaching the caller and misses no
/// primitive (it may report some twice: at-least-once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn scan_survives_a_failover() {
    use futures::StreamExt;
    use shardlimit::admin::{ScanEvent, Scanner};

    restore_cluster();
    let _restore = RestoreOnDrop;
    let cluster = cluster_builder("scanfail").build().await.unwrap();
    let limiter = RateLimiter::builder(
        &cluster,
        "scan",
        Quota::per_hour(NonZeroU32::new(10).unwrap()),
    )
    .build()
    .unwrap();
    let subjects: Vec<String> = (0..6000).map(|i| format!("scan-{i}")).collect();
    let decisions: Vec<_> = futures::stream::iter(subjects.iter().map(|s| limiter.check(s)))
        .buffer_unordered(64)
        .collect()
        .await;
    assert!(decisions.into_iter().all(|d| d.unwrap().allowed));

    // Small pages so the walk is still going when the failover happens.
    let scanner = Scanner::new(&cluster).count(10);
    let mut events = Box::pin(scanner.scan());
    let mut seen = std::collections::BTreeMap::<Vec<u8>, usize>::new();
    let mut failover_started = false;
    let started = Instant::now();
    while let Some(event) = events.next().await {
        match event {
            ScanEvent::Limiter(info) => *seen.entry(info.subject).or_default() += 1,
            ScanEvent::Incomplete { node, error } => panic!("{node} incomplete: {error}"),
            other => panic!("{other:?}"),
        }
        if !failover_started && seen.len() >= 300 {
            failover_started = true;
            common::cmd(&addr(3), &["CLUSTER", "FAILOVER"]).await;
        }
    }
    let took = started.elapsed();
    assert!(failover_started);
    assert!(is_master(port(3)).await, "the failover did not happen");
    let missing: Vec<&String> = subjects
        .iter()
        .filter(|s| !seen.contains_key(s.as_bytes()))
        .collect();
    let twice = seen.values().filter(|&&n| n > 1).count();
    report(
        "scan_survives_a_failover",
        &[format!(
            "6000 limiters, COUNT 10, CLUSTER FAILOVER on 7003 after 300 results: scan took {took:?}, {} found, {} reported more than once, {} missing",
            seen.len(),
            twice,
            missing.len()
        )],
    );
    assert!(
        missing.is_empty(),
        "missing e.g. {:?}",
        &missing[..missing.len().min(5)]
    );
    assert_eq!(seen.len(), 6000);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
