//! Shared by the standalone and Sentinel suites: a denial cached by one
//! handle is lifted by a reset made through another handle (its own
//! connections and subscription, as another process has), through the
//! server's `PUBLISH` channel.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use shardlimit::{Cluster, Quota, RateLimiter};

pub async fn a_reset_elsewhere_lifts_a_cached_denial(here: &Cluster, there: &Cluster) {
    assert_eq!(here.namespace(), there.namespace());
    let quota = Quota::per_hour(NonZeroU32::MIN);
    let cached = RateLimiter::builder(here, "lift", quota)
        .deny_cache(100)
        .build()
        .unwrap();
    let other = RateLimiter::builder(there, "lift", quota).build().unwrap();
    assert!(cached.check("s").await.unwrap().allowed);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cached.check("s").await.unwrap().cached {
        assert!(Instant::now() < deadline, "no denial was ever cached");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other.reset("s").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let d = cached.check("s").await.unwrap();
        if d.allowed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still denied 5 s after the reset: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
