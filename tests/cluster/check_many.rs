//! `RateLimiter::check_many` and `MultiLimiter::check_many` against the
//! six-node cluster: per-request results in order, per-request errors,
//! counting, the deny cache, all-or-nothing per request, and a batch after
//! `SCRIPT FLUSH` as the least-privilege ACL user.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;

use shardlimit::{Algorithm, Cluster, Error, MultiLimiter, Quota, RateLimiter};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

#[tokio::test]
async fn a_batch_decides_each_request_as_a_single_check_would() {
    let cluster = common::cluster("many").await;
    for algorithm in Algorithm::ALL {
        let l = RateLimiter::builder(&cluster, "many", Quota::per_hour(nz(5)))
            .algorithm(algorithm)
            .build()
            .unwrap();
        // 120 subjects over every master, costs 1 to 5 by position.
        let subjects: Vec<String> = (0..120).map(|i| format!("user:{i}")).collect();
        let batch: Vec<(&str, u32)> = subjects
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), (i % 5) as u32 + 1))
            .collect();
        let first = l.check_many(&batch).await;
        assert_eq!(first.len(), batch.len());
        for ((subject, cost), d) in batch.iter().zip(&first) {
            let d = d.as_ref().unwrap();
            assert!(d.allowed, "{algorithm} {subject}: {d:?}");
            assert_eq!(d.remaining, 5 - cost, "{algorithm} {subject}");
        }
        // Again: only those with room left for their cost are admitted.
        let second = l.check_many(&batch).await;
        for ((subject, cost), d) in batch.iter().zip(&second) {
            let d = d.as_ref().unwrap();
            assert_eq!(
                d.allowed,
                2 * cost <= 5,
                "{algorithm} {subject} cost {cost}"
            );
        }
        // What each subject holds agrees with single peeks.
        for ((subject, cost), d) in batch.iter().zip(&second).take(10) {
            let expected = if d.as_ref().unwrap().allowed {
                5 - 2 * cost
            } else {
                5 - cost
            };
            assert_eq!(l.peek(subject).await.unwrap().remaining, expected);
        }
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_bad_request_fails_alone_and_outcomes_are_counted_per_request() {
    let cluster = common::cluster("many-bad").await;
    let l = RateLimiter::builder(&cluster, "bad", Quota::per_hour(nz(1)))
        .build()
        .unwrap();
    let long = "x".repeat(2000);
    let batch = [
        ("a", 1),
        ("", 1),
        ("b", 0),
        ("c", 2),
        (long.as_str(), 1),
        ("a", 1),
        ("d", 1),
    ];
    let results = l.check_many(&batch).await;
    assert!(results[0].as_ref().unwrap().allowed);
    assert!(matches!(results[1], Err(Error::EmptySubject)));
    assert!(matches!(
        results[2],
        Err(Error::InvalidCost { cost: 0, .. })
    ));
    assert!(matches!(
        results[3],
        Err(Error::InvalidCost { cost: 2, max: 1 })
    ));
    assert!(matches!(results[4], Err(Error::SubjectTooLong { .. })));
    // The same subject twice in one batch: both run, in order.
    assert!(!results[5].as_ref().unwrap().allowed);
    assert!(results[6].as_ref().unwrap().allowed);
    let s = cluster.stats().get("gcra", "bad").cloned().unwrap();
    assert_eq!((s.allowed, s.denied, s.errors), (2, 1, 4));
    assert!(l.check_many::<&str>(&[]).await.is_empty());
}

#[tokio::test]
async fn a_multi_limit_batch_is_all_or_nothing_per_request() {
    let cluster = common::cluster("many-multi").await;
    let small = RateLimiter::builder(&cluster, "small", Quota::per_hour(nz(2)))
        .build()
        .unwrap();
    let big = RateLimiter::builder(&cluster, "big", Quota::per_hour(nz(3)))
        .algorithm(Algorithm::SlidingWindow)
        .build()
        .unwrap();
    let both = MultiLimiter::new([small.clone(), big.clone()]).unwrap();
    // Where built with one, a deny cache: the denials it keeps change
    // nothing a batch decides.
    #[cfg(feature = "deny-cache")]
    let both = both.with_deny_cache(100).unwrap();
    let subjects: Vec<String> = (0..60).map(|i| format!("user:{i}")).collect();
    let batch: Vec<(&str, u32)> = subjects.iter().map(|s| (s.as_str(), 1)).collect();
    for round in 0..2 {
        for (d, (subject, _)) in both.check_many(&batch).await.iter().zip(&batch) {
            let d = d.as_ref().expect("an admitting batch");
            assert!(d.allowed, "round {round} {subject}: {d:?}");
        }
    }
    // The small limit is spent: every request is denied, and the big limit,
    // which would admit, is not consumed.
    for (d, (subject, _)) in both.check_many(&batch).await.iter().zip(&batch) {
        let d = d.as_ref().expect("a denying batch");
        assert!(!d.allowed && !d.decisions[0].allowed && d.decisions[1].allowed);
        assert_eq!(big.peek(subject).await.unwrap().remaining, 1, "{subject}");
    }
    let s = cluster.stats().get("gcra", "small").cloned().unwrap();
    assert_eq!((s.allowed, s.denied), (120, 60), "{s:?}");
    let s = cluster
        .stats()
        .get(Algorithm::SlidingWindow.kind(), "big")
        .cloned()
        .unwrap();
    assert_eq!((s.allowed, s.denied), (120, 0), "{s:?}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_batch_after_script_flush_sends_nothing_the_least_privilege_user_lacks() {
    // The user's key pattern allows the namespaces `aclsmoke-*`.
    let cluster = Cluster::builder(common::node_urls())
        .namespace(common::unique_namespace("aclsmoke"))
        .username(common::acl::USER)
        .password_file(common::acl::password_file())
        .build()
        .await
        .expect("the ACL user up.sh creates");
    let l = RateLimiter::builder(&cluster, "flushed", Quota::per_hour(nz(5)))
        .build()
        .unwrap();
    // Subjects on every master, so every master's pipeline meets NOSCRIPT.
    let batch: Vec<(String, u32)> = (0..60).map(|i| (format!("user:{i}"), 1)).collect();
    for d in l.check_many(&batch).await {
        assert!(d.expect("first batch").allowed);
    }
    let mut admins = Vec::new();
    for m in common::masters().await {
        admins.push(common::node(&m.addr).await);
    }
    let refused_before = common::acl::script_load_refusals(&mut admins).await;
    common::acl::flush_scripts(&mut admins).await;
    for d in l.check_many(&batch).await {
        let d = d.unwrap();
        assert!(d.allowed && d.remaining == 3, "{d:?}");
    }
    assert_eq!(
        common::acl::script_load_refusals(&mut admins).await - refused_before,
        0,
        "the batch sent SCRIPT LOAD, which the least-privilege user may not (docs/production.md)"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
