//! TTL-preserving counters against the six-node cluster: drain
//! keeps the TTL and never creates a key, an abandoned session's key expires
//! after the idle TTL, and concurrent adds and drains lose nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use shardlimit::keys::KeyId;
use shardlimit::{Cluster, Counter, Error};

fn counter_key(cluster: &Cluster, name: &str, subject: &str) -> Vec<u8> {
    cluster
        .keys()
        .key(subject, &KeyId::new("counter", name).unwrap())
        .unwrap()
}

#[tokio::test]
async fn drain_keeps_the_ttl_and_add_refreshes_it() {
    let cluster = common::cluster("counter-ttl").await;
    let billable = Counter::builder(&cluster, "billing")
        .idle_ttl(Duration::from_secs(900))
        .build()
        .unwrap();
    let key = counter_key(&cluster, "billing", "session:9");
    assert_eq!(billable.add("session:9", 30).await.unwrap(), 30);
    assert_eq!(billable.add("session:9", 15).await.unwrap(), 45);
    // Let the TTL run down a little so "kept" and "reset" differ.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let before = common::pttl(&key).await;
    assert!((890_000..=898_900).contains(&before), "{before}");
    assert_eq!(billable.drain("session:9").await.unwrap(), Some(45));
    let after = common::pttl(&key).await;
    // Unchanged, give or take the time between the two reads (generous
    // 2 s); a reset would read ~900000, GETSET's bug -1.
    assert!(after > 0, "drain removed the TTL: {after}");
    assert!(
        after <= before && before - after < 2_000,
        "{before} -> {after}"
    );
    assert_eq!(billable.get("session:9").await.unwrap(), Some(0));
    let (value, ttl) = billable.get_with_ttl("session:9").await.unwrap().unwrap();
    assert_eq!(value, 0);
    assert!(ttl <= Duration::from_millis(u64::try_from(after).unwrap()));
    // Draining again reads 0 and still keeps the TTL.
    assert_eq!(billable.drain("session:9").await.unwrap(), Some(0));
    assert!(common::pttl(&key).await > 0);
    // Only add refreshes it.
    billable.add("session:9", 1).await.unwrap();
    assert!(common::pttl(&key).await > 899_000);
    eprintln!("drain: PTTL {before} ms before, {after} ms after");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn drain_of_a_missing_key_returns_none_and_creates_nothing() {
    let cluster = common::cluster("counter-missing").await;
    let billable = Counter::builder(&cluster, "billing").build().unwrap();
    let key = counter_key(&cluster, "billing", "session:gone");
    assert_eq!(billable.drain("session:gone").await.unwrap(), None);
    assert_eq!(billable.get("session:gone").await.unwrap(), None);
    assert_eq!(billable.get_with_ttl("session:gone").await.unwrap(), None);
    assert_eq!(common::pttl(&key).await, -2);
    assert!(common::keys_with_pttl(cluster.namespace()).await.is_empty());
}

#[tokio::test]
async fn zombie_session_ends_with_its_key_gone_after_the_idle_ttl() {
    let cluster = common::cluster("counter-zombie").await;
    let billable = Counter::builder(&cluster, "billing")
        .idle_ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let key = counter_key(&cluster, "billing", "session:z");
    billable.add("session:z", 30).await.unwrap();
    let last_add = Instant::now();
    assert_eq!(billable.drain("session:z").await.unwrap(), Some(30));
    // No more adds. With GETSET the key would now live forever.
    loop {
        let t = common::pttl(&key).await;
        assert_ne!(t, -1, "the drained key lost its TTL");
        if t == -2 {
            break;
        }
        // 1 s idle TTL; 10 s is generous for a slow machine.
        assert!(
            last_add.elapsed() < Duration::from_secs(10),
            "key outlived its idle TTL: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "zombie session key gone {:?} after the last add",
        last_add.elapsed()
    );
    assert_eq!(billable.drain("session:z").await.unwrap(), None);
    assert!(common::keys_with_pttl(cluster.namespace()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_adders_and_a_drainer_lose_nothing() {
    const ADDERS: usize = 16;
    const ADDS: usize = 200;
    let cluster = common::cluster("counter-race").await;
    let billable = Counter::builder(&cluster, "billing")
        .idle_ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let added = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let drainer = tokio::spawn({
        let (billable, done) = (billable.clone(), done.clone());
        async move {
            let (mut sum, mut drains) = (0i64, 0u32);
            while !done.load(Ordering::SeqCst) {
                if let Some(v) = billable.drain("session:race").await.unwrap() {
                    sum += v;
                    drains += 1;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (sum, drains)
        }
    });
    let mut adders = Vec::new();
    for _ in 0..ADDERS {
        let (billable, added) = (billable.clone(), added.clone());
        adders.push(tokio::spawn(async move {
            for _ in 0..ADDS {
                let n = rand::rng().random_range(1..=60);
                billable.add("session:race", n).await.unwrap();
                added.fetch_add(n, Ordering::SeqCst);
            }
        }));
    }
    for adder in adders {
        adder.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let (drained, drains) = drainer.await.unwrap();
    let last = billable.get("session:race").await.unwrap().unwrap_or(0);
    let added = added.load(Ordering::SeqCst);
    eprintln!("{ADDERS}x{ADDS} adds = {added}; {drains} drains took {drained}, {last} left");
    assert!(drains > 1, "the drainer must have raced the adders");
    assert_eq!(drained + last, added);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_non_integer_value_is_an_error_and_is_left_alone() {
    let cluster = common::cluster("counter-bad").await;
    let billable = Counter::builder(&cluster, "billing").build().unwrap();
    let key = counter_key(&cluster, "billing", "s");
    let mut conn = common::owner_conn(&key).await;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("twelve")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = billable.drain("s").await.unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(
        err.to_string().contains("does not hold an integer"),
        "{err}"
    );
    assert!(billable.add("s", 1).await.is_err());
    let value: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "twelve");
    let s = cluster.stats();
    assert_eq!(s.get("counter", "billing").unwrap().errors, 2);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn builder_refuses_bad_settings_and_input() {
    let cluster = common::cluster("counter-config").await;
    assert!(matches!(
        Counter::builder(&cluster, "billing")
            .idle_ttl(Duration::ZERO)
            .build(),
        Err(Error::Config {
            field: "idle_ttl",
            ..
        })
    ));
    assert!(matches!(
        Counter::builder(&cluster, "bill ing").build(),
        Err(Error::InvalidIdent { .. })
    ));
    let c = Counter::builder(&cluster, "billing").build().unwrap();
    assert!(matches!(c.add("", 1).await, Err(Error::EmptySubject)));
    assert!(matches!(c.drain("").await, Err(Error::EmptySubject)));
    // Negative adds are allowed (refunds); extremes are exact.
    assert_eq!(c.add("s", -5).await.unwrap(), -5);
    assert_eq!(c.add("s", i64::MAX).await.unwrap(), i64::MAX - 5);
    assert_eq!(c.drain("s").await.unwrap(), Some(i64::MAX - 5));
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
