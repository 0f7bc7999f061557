//! The catalog of rate limiter specs against the six-node cluster: each
//! limiter publishes its spec with a TTL, refreshes it while it lives,
//! publishes a change at once, and the scanner reads it back (and never
//! shows it as a primitive).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::time::Duration;

use shardlimit::admin::{QuotaSource, Scanner};
use shardlimit::keys::KeyId;
use shardlimit::limit::CATALOG_TTL;
use shardlimit::{Algorithm, Cluster, Quota, RateLimiter};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// The catalog key of limiter `kind`/`name`.
fn catalog_key(cluster: &Cluster, kind: &str, name: &str) -> Vec<u8> {
    let id = KeyId::new("catalog", kind)
        .unwrap()
        .with_part(name)
        .unwrap();
    cluster.keys().key("shardlimit.catalog", &id).unwrap()
}

/// The specs a catalog key holds, without their times.
async fn specs_held(key: &[u8]) -> Vec<String> {
    let held: Option<String> = common::on_owner(key, redis::cmd("GET").arg(key)).await;
    held.unwrap_or_default()
        .split(',')
        .filter_map(|entry| Some(entry.rsplit_once(' ')?.0.to_owned()))
        .collect()
}

#[tokio::test]
async fn a_limiter_publishes_its_spec_with_a_ttl_and_publishes_changes_at_once() {
    let cluster = common::cluster("catalog").await;
    let api = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_second(nz(10)).allow_burst(nz(25)),
    )
    .build()
    .unwrap();
    common::catalog_published(&api, 1).await;
    assert_eq!(api.catalog_publishing().failed, 0);

    let key = catalog_key(&cluster, "gcra", "api");
    let ttl = common::pttl(&key).await;
    assert!(
        ttl > 0 && ttl <= i64::try_from(CATALOG_TTL.as_millis()).unwrap(),
        "{ttl}"
    );
    assert_eq!(specs_held(&key).await, ["10 1000000 25 0"]);

    let catalog = Scanner::new(&cluster).catalog().await.unwrap();
    let specs = catalog.specs("gcra", "api");
    assert_eq!(specs.len(), 1, "{catalog:?}");
    assert_eq!(specs[0].algorithm, Some(Algorithm::Gcra));
    assert_eq!(
        specs[0].quota,
        Quota::per_second(nz(10)).allow_burst(nz(25))
    );
    assert!(!specs[0].shadow);
    assert!(specs[0].age < Duration::from_secs(5), "{:?}", specs[0].age);

    // set_quota: the new spec replaces the old one at once.
    api.set_quota(Quota::per_minute(nz(60))).unwrap();
    common::catalog_published(&api, 2).await;
    assert_eq!(specs_held(&key).await, ["60 60000000 60 0"]);
    // set_shadow too.
    api.set_shadow(true);
    common::catalog_published(&api, 3).await;
    let catalog = Scanner::new(&cluster).catalog().await.unwrap();
    let specs = catalog.specs("gcra", "api");
    assert_eq!(specs.len(), 1, "{catalog:?}");
    assert_eq!(specs[0].quota, Quota::per_minute(nz(60)));
    assert!(specs[0].shadow);

    // Checks never publish: the count stays.
    for _ in 0..20 {
        let _ = api.check("user:1").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(api.catalog_publishing().published, 3);

    // The catalog is no primitive: not listed, not counted, and its keys
    // have their TTL like every key.
    let scanner = Scanner::new(&cluster);
    let report = scanner.count_limiters().await.unwrap();
    assert_eq!(report.total(), 1, "{report:?}");
    assert!(scanner.audit().await.unwrap().is_clean());
    assert!(
        scanner
            .subject("shardlimit.catalog")
            .await
            .unwrap()
            .is_empty()
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn the_ttl_is_refreshed_while_the_limiter_lives_and_not_after() {
    let cluster = common::cluster("catalog-refresh").await;
    let login = RateLimiter::builder(&cluster, "login", Quota::per_minute(nz(5)))
        .algorithm(Algorithm::FixedWindow)
        .catalog_refresh(Duration::from_millis(300))
        .build()
        .unwrap();
    common::catalog_published(&login, 1).await;
    let key = catalog_key(&cluster, "fw", "login");
    // Age the entry by hand: the next refresh restores the TTL.
    let _: () = common::on_owner(&key, redis::cmd("PEXPIRE").arg(&key).arg(5_000)).await;
    let before = login.catalog_publishing().published;
    common::catalog_published(&login, before + 2).await;
    let ttl = common::pttl(&key).await;
    assert!(ttl > 60_000, "not refreshed: {ttl}");

    // Dropped: nothing refreshes it any more, and it expires.
    drop(login);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _: () = common::on_owner(&key, redis::cmd("PEXPIRE").arg(&key).arg(1_000)).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(common::pttl(&key).await, -2, "still refreshed after drop");
}

#[tokio::test]
async fn processes_that_disagree_are_all_shown_and_the_strictest_counts() {
    let cluster = common::cluster("catalog-two").await;
    // Two processes' limiters: same name, different quotas.
    let old = RateLimiter::builder(&cluster, "api", Quota::per_hour(nz(100)))
        .build()
        .unwrap();
    let new = RateLimiter::builder(&cluster, "api", Quota::per_hour(nz(60)))
        .build()
        .unwrap();
    common::catalog_published(&old, 1).await;
    common::catalog_published(&new, 1).await;
    let catalog = Scanner::new(&cluster).catalog().await.unwrap();
    let specs = catalog.specs("gcra", "api");
    assert_eq!(specs.len(), 2, "{catalog:?}");
    let (quota, source) = catalog.quota("gcra", "api").unwrap();
    assert_eq!(quota.limit().get(), 60);
    assert_eq!(source, QuotaSource::Published { specs: 2 });

    for _ in 0..60 {
        let _ = new.check("busy").await.unwrap();
    }
    let _ = new.check("idle").await.unwrap();
    let rows = Scanner::new(&cluster).subject("busy").await.unwrap();
    let headroom = catalog.headroom(&rows[0]).unwrap();
    assert_eq!((headroom.remaining, headroom.limit), (0, 60));
    assert!(headroom.at_limit);
    assert!(headroom.full_in > Duration::ZERO && headroom.full_in <= Duration::from_secs(3600));
    let rows = Scanner::new(&cluster).subject("idle").await.unwrap();
    let headroom = catalog.headroom(&rows[0]).unwrap();
    assert_eq!((headroom.remaining, headroom.at_limit), (59, false));
}

#[tokio::test]
async fn a_publication_that_fails_never_fails_a_check() {
    let cluster = common::cluster("catalog-fails").await;
    // A key of another type where the catalog entry goes: every
    // publication fails (WRONGTYPE) and writes nothing.
    let key = catalog_key(&cluster, "gcra", "api");
    let _: () = common::on_owner(&key, redis::cmd("RPUSH").arg(&key).arg("in the way")).await;
    let _: () = common::on_owner(&key, redis::cmd("PEXPIRE").arg(&key).arg(60_000)).await;
    let api = RateLimiter::builder(&cluster, "api", Quota::per_hour(nz(3)))
        .catalog_refresh(Duration::from_millis(100))
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(api.check("user:1").await.unwrap().allowed);
    }
    assert!(!api.check("user:1").await.unwrap().allowed);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while api.catalog_publishing().failed < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            api.catalog_publishing()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(api.catalog_publishing().published, 0);
    // Checks go on as before while the refreshes keep failing, and the
    // catalog reads nothing for the name (the key is not its type).
    assert!(!api.check("user:1").await.unwrap().allowed);
    assert!(api.check("user:2").await.unwrap().allowed);
    let catalog = Scanner::new(&cluster).catalog().await.unwrap();
    assert!(catalog.specs("gcra", "api").is_empty(), "{catalog:?}");
    let kind: String = common::on_owner(&key, redis::cmd("TYPE").arg(&key)).await;
    assert_eq!(kind, "list");
}

#[tokio::test]
async fn a_lease_limiter_publishes_its_max_leases_and_reads_at_limit_when_all_are_held() {
    let cluster = common::cluster("catalog-lease").await;
    let exports = shardlimit::LeaseLimiter::builder(&cluster, "exports")
        .max_leases(2)
        .lease_ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while exports.catalog_publishing().published == 0 {
        assert!(std::time::Instant::now() < deadline, "never published");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let catalog = Scanner::new(&cluster).catalog().await.unwrap();
    let specs = catalog.specs("lease", "exports");
    assert_eq!(specs.len(), 1, "{catalog:?}");
    assert_eq!(specs[0].algorithm, None);
    assert_eq!(
        specs[0].quota,
        Quota::with_period(nz(2), Duration::from_secs(60))
    );

    let _a = exports.try_acquire("tenant:1").await.unwrap().unwrap();
    let _b = exports.try_acquire("tenant:1").await.unwrap().unwrap();
    let _c = exports.try_acquire("tenant:2").await.unwrap().unwrap();
    let full = Scanner::new(&cluster).subject("tenant:1").await.unwrap();
    let headroom = catalog.headroom(&full[0]).unwrap();
    assert_eq!(headroom.describe(), "0/2 remaining, at limit");
    assert!(headroom.full_in > Duration::from_secs(50), "{headroom:?}");
    let one = Scanner::new(&cluster).subject("tenant:2").await.unwrap();
    assert_eq!(
        catalog.headroom(&one[0]).unwrap().describe(),
        "1/2 remaining"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
