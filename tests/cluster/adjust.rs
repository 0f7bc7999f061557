//! Per-subject changes against the six-node cluster: block, penalty and
//! reward for every algorithm, overrides read by the check's own script,
//! live quotas and shadow mode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::time::Duration;

use shardlimit::{Algorithm, Cluster, Error, MultiLimiter, Quota, RateLimiter};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn limiter(cluster: &Cluster, algorithm: Algorithm, quota: Quota) -> RateLimiter {
    RateLimiter::builder(cluster, format!("adj-{}", algorithm.kind()), quota)
        .algorithm(algorithm)
        .build()
        .unwrap()
}

async fn remaining(l: &RateLimiter, subject: &str) -> u32 {
    l.peek(subject).await.unwrap().remaining
}

#[tokio::test]
async fn penalties_and_rewards_move_usage_for_every_algorithm() {
    let cluster = common::cluster("penalty").await;
    for algorithm in Algorithm::ALL {
        let l = limiter(&cluster, algorithm, Quota::per_hour(nz(10)));
        l.penalize("s", nz(7)).await.unwrap();
        assert_eq!(remaining(&l, "s").await, 3, "{algorithm}: penalized 7");
        l.reward("s", nz(5)).await.unwrap();
        assert_eq!(remaining(&l, "s").await, 8, "{algorithm}: rewarded 5");
        // Never past an empty quota, never past a full one.
        l.penalize("s", nz(1000)).await.unwrap();
        assert_eq!(remaining(&l, "s").await, 0, "{algorithm}: emptied");
        assert!(!l.check("s").await.unwrap().allowed, "{algorithm}");
        l.reward("s", nz(1000)).await.unwrap();
        assert_eq!(remaining(&l, "s").await, 10, "{algorithm}: full again");
        assert!(l.check_n("s", 10).await.unwrap().allowed, "{algorithm}");
        l.reward("s", nz(3)).await.unwrap();
        assert_eq!(remaining(&l, "s").await, 3, "{algorithm}");
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_block_denies_until_it_ends_or_is_lifted() {
    let cluster = common::cluster("block").await;
    for algorithm in Algorithm::ALL {
        let l = limiter(&cluster, algorithm, Quota::per_hour(nz(100)));
        l.block("abuser", Duration::from_secs(600)).await.unwrap();
        let d = l.check("abuser").await.unwrap();
        assert!(!d.allowed && d.blocked, "{algorithm}: {d:?}");
        let wait = d.retry_after.unwrap();
        assert!(wait > Duration::from_secs(590) && wait <= Duration::from_secs(600));
        // Others are not blocked; a blocked check consumed nothing.
        assert!(l.check("neighbour").await.unwrap().allowed);
        let settings = l.subject_settings("abuser").await.unwrap();
        assert!(settings.blocked_for.unwrap() > Duration::from_secs(590));
        l.unblock("abuser").await.unwrap();
        let d = l.check("abuser").await.unwrap();
        assert!(
            d.allowed && !d.blocked && d.remaining == 99,
            "{algorithm}: {d:?}"
        );
    }
    // A short block ends by itself, and its key with it.
    let l = limiter(&cluster, Algorithm::Gcra, Quota::per_hour(nz(100)));
    l.block("brief", Duration::from_millis(200)).await.unwrap();
    assert!(l.check("brief").await.unwrap().blocked);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(l.check("brief").await.unwrap().allowed);
    // Out-of-range durations are refused before anything is sent.
    for bad in [Duration::ZERO, Duration::from_secs(367 * 86_400)] {
        assert!(matches!(
            l.block("x", bad).await,
            Err(Error::Config {
                field: "duration",
                ..
            })
        ));
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_block_made_in_another_process_is_seen_here() {
    let cluster = common::cluster("block2").await;
    let l = limiter(&cluster, Algorithm::SlidingWindow, Quota::per_hour(nz(100)));
    assert!(l.check("ip:7").await.unwrap().allowed);
    common::child::child_process(
        "child_adjusts_a_subject",
        &[
            ("NS", cluster.namespace()),
            ("OP", "block"),
            ("ALGO", "swc"),
            ("NAME", "adj-swc"),
            ("SUBJECT", "ip:7"),
        ],
    )
    .await;
    let d = l.check("ip:7").await.unwrap();
    assert!(d.blocked && !d.allowed, "{d:?}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn an_override_is_read_by_the_checks_own_script() {
    let cluster = common::cluster("override").await;
    for algorithm in Algorithm::ALL {
        let l = limiter(&cluster, algorithm, Quota::per_hour(nz(1)));
        let premium = Quota::per_hour(nz(5));
        let set = l
            .set_override("acme", premium, Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(set.override_quota, Some(premium), "{algorithm}");
        assert!(set.override_ttl.unwrap() > Duration::from_secs(3590));
        for i in 0..5 {
            let d = l.check("acme").await.unwrap();
            assert!(
                d.allowed && d.overridden && d.limit == 5,
                "{algorithm} #{i}: {d:?}"
            );
        }
        let d = l.check("acme").await.unwrap();
        assert!(!d.allowed && d.overridden, "{algorithm}: {d:?}");
        // Everyone else keeps the default.
        assert!(l.check("other").await.unwrap().allowed);
        let d = l.check("other").await.unwrap();
        assert!(!d.allowed && !d.overridden && d.limit == 1);
        // Cleared: the default applies again to the same state.
        let cleared = l.clear_override("acme").await.unwrap();
        assert_eq!(cleared.override_quota, None);
        assert!(!l.check("acme").await.unwrap().overridden);
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn overrides_are_validated_and_a_smaller_one_can_deny_for_good() {
    let cluster = common::cluster("override-bounds").await;
    let log = limiter(&cluster, Algorithm::SlidingLog, Quota::per_hour(nz(10)));
    let too_big = Quota::per_hour(nz(129));
    assert!(matches!(
        log.set_override("s", too_big, Duration::from_secs(60))
            .await,
        Err(Error::Config {
            field: "quota.limit",
            ..
        })
    ));
    for ttl in [Duration::ZERO, Duration::from_secs(367 * 86_400)] {
        assert!(matches!(
            log.set_override("s", Quota::per_hour(nz(5)), ttl).await,
            Err(Error::Config { field: "ttl", .. })
        ));
    }
    assert_eq!(
        log.subject_settings("s").await.unwrap().override_quota,
        None
    );
    // An override smaller than the cost: denied, and never admissible.
    log.set_override("s", Quota::per_hour(nz(2)), Duration::from_secs(60))
        .await
        .unwrap();
    let d = log.check_n("s", 5).await.unwrap();
    assert!(
        !d.allowed && d.retry_after.is_none() && d.limit == 2,
        "{d:?}"
    );
    assert!(log.check_n("s", 2).await.unwrap().allowed);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn set_quota_changes_a_live_limiter_and_its_clones() {
    let cluster = common::cluster("setquota").await;
    // Its one-hour fixed window must outlast the test.
    common::clear_of_window_end(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let l = limiter(&cluster, Algorithm::FixedWindow, Quota::per_hour(nz(2)));
    let clone = l.clone();
    let both = MultiLimiter::new([l.clone()]).unwrap();
    assert!(l.check_n("s", 2).await.unwrap().allowed);
    assert!(!l.check("s").await.unwrap().allowed);
    clone.set_quota(Quota::per_hour(nz(4))).unwrap();
    assert_eq!(l.quota(), Quota::per_hour(nz(4)));
    // The window's 2 units count against the new limit of 4.
    let d = l.check("s").await.unwrap();
    assert!(d.allowed && d.remaining == 1, "{d:?}");
    assert!(both.check("s").await.unwrap().allowed);
    assert!(!both.check("s").await.unwrap().allowed);
    // A bad quota is refused and the old one stays.
    assert!(
        l.set_quota(Quota::per_hour(nz(1)).allow_burst(nz(3)))
            .is_err()
    );
    assert_eq!(l.quota(), Quota::per_hour(nz(4)));
}

#[tokio::test]
async fn shadow_mode_refuses_nothing_and_counts_what_it_would_deny() {
    let cluster = common::cluster("shadow").await;
    // Its one-hour fixed windows must outlast the test.
    common::clear_of_window_end(Duration::from_secs(3600), Duration::from_secs(30)).await;
    for algorithm in Algorithm::ALL {
        let shadow = RateLimiter::builder(&cluster, "trial", Quota::per_hour(nz(2)))
            .algorithm(algorithm)
            .shadow(true)
            .build()
            .unwrap();
        let mut would = 0;
        for _ in 0..10 {
            let d = shadow.check("s").await.unwrap();
            assert!(d.allowed, "{algorithm}: shadow mode refused {d:?}");
            would += u32::from(d.would_deny);
        }
        assert_eq!(would, 8, "{algorithm}");
        // What it admitted was counted: enforced, it denies at once.
        shadow.set_shadow(false);
        let d = shadow.check("s").await.unwrap();
        assert!(!d.allowed && !d.would_deny, "{algorithm}: {d:?}");
        let stats = cluster.stats();
        let s = stats
            .primitives
            .iter()
            .find(|p| p.kind == algorithm.kind() && p.name == "trial")
            .unwrap();
        assert_eq!(
            (s.allowed, s.would_deny, s.denied),
            (2, 8, 1),
            "{algorithm}"
        );
    }
    // In a multi-limit, a shadow limit's denial does not stop the others.
    let real = RateLimiter::builder(&cluster, "real", Quota::per_hour(nz(10)))
        .build()
        .unwrap();
    let trial = RateLimiter::builder(&cluster, "tight", Quota::per_hour(nz(1)))
        .algorithm(Algorithm::FixedWindow)
        .shadow(true)
        .build()
        .unwrap();
    let both = MultiLimiter::new([real.clone(), trial]).unwrap();
    for i in 0..3 {
        let d = both.check("m").await.unwrap();
        assert!(d.allowed, "#{i}: {d:?}");
        assert_eq!(d.would_deny(), i > 0, "#{i}");
    }
    assert_eq!(real.peek("m").await.unwrap().remaining, 7);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
