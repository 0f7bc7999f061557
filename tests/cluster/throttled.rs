//! "Throttled now" against the six-node cluster: denials from every entry
//! point of the check pipeline reach the view, reports carry a TTL, two
//! processes (two `Cluster` handles) merge, and denials age out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

#[cfg(feature = "deny-cache")]
use shardlimit::MultiLimiter;
use shardlimit::admin::{self, Throttled, ThrottledName};
#[cfg(feature = "deny-cache")]
use shardlimit::keys::KeyId;
#[cfg(feature = "slices")]
use shardlimit::limit::Slices;
use shardlimit::{Cluster, Quota, RateLimiter};

fn one_per_minute(cluster: &Cluster, name: &str, window: Duration) -> RateLimiter {
    RateLimiter::builder(
        cluster,
        name,
        Quota::per_minute(NonZeroU32::new(1).unwrap()),
    )
    .throttled_window(window)
    .build()
    .unwrap()
}

fn name<'a>(view: &'a Throttled, name: &str) -> Option<&'a ThrottledName> {
    view.names.iter().find(|n| n.name == name)
}

fn denials(view: &Throttled, limiter: &str, subject: &str) -> Option<u64> {
    name(view, limiter)?
        .subjects
        .iter()
        .find(|s| s.subject == subject.as_bytes())
        .map(|s| s.denials)
}

/// Reads the view until `done` holds (the reports are published every
/// 5 s), for at most `bound`.
async fn until(cluster: &Cluster, bound: Duration, done: impl Fn(&Throttled) -> bool) -> Throttled {
    let started = Instant::now();
    loop {
        let view = admin::throttled(cluster).await.unwrap();
        if done(&view) {
            return view;
        }
        assert!(started.elapsed() < bound, "not within {bound:?}: {view:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(feature = "deny-cache")]
#[tokio::test]
async fn denials_from_every_entry_point_appear_within_ten_seconds_with_a_ttl() {
    let cluster = common::handle(&common::unique_namespace("throttled")).await;
    let api = one_per_minute(&cluster, "api", Duration::from_secs(60));
    let other = RateLimiter::builder(
        &cluster,
        "other",
        Quota::per_minute(NonZeroU32::new(100).unwrap()),
    )
    .report_throttled(false)
    .build()
    .unwrap();
    let cached = RateLimiter::builder(
        &cluster,
        "cached",
        Quota::per_minute(NonZeroU32::new(1).unwrap()),
    )
    .deny_cache(100)
    .build()
    .unwrap();
    for _ in 0..10 {
        let _ = api.check("hot").await.unwrap();
    }
    for d in api
        .check_many(&[("batch", 1), ("batch", 1), ("batch", 1)])
        .await
    {
        let _ = d.unwrap();
    }
    let multi = MultiLimiter::new([api.clone(), other.clone()]).unwrap();
    for _ in 0..3 {
        let _ = multi.check("multi").await.unwrap();
    }
    // Until the deny cache answers (its subscription goes live in the
    // background first): 1 admitted, the rest denied.
    let mut spammer_denials = 0;
    let started = Instant::now();
    loop {
        let d = cached.check("spammer").await.unwrap();
        spammer_denials += u64::from(!d.allowed);
        if d.cached {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let view = until(&cluster, Duration::from_secs(10), |v| {
        denials(v, "cached", "spammer") == Some(spammer_denials)
            && name(v, "api").is_some_and(|n| n.subjects.len() == 3)
    })
    .await;
    assert_eq!(view.processes, 1);
    let api_view = name(&view, "api").unwrap();
    assert_eq!(api_view.kind, "gcra");
    assert_eq!(denials(&view, "api", "hot"), Some(9));
    assert_eq!(denials(&view, "api", "batch"), Some(2));
    assert_eq!(denials(&view, "api", "multi"), Some(2));
    assert_eq!(api_view.denials, 13);
    assert_eq!(api_view.subjects[0].subject, b"hot");
    assert!(api_view.subjects.iter().all(|s| s.error == 0));
    assert!(
        name(&view, "other").is_none(),
        "a limiter that does not report is not shown"
    );
    // Most of the spammer's denials came from the deny cache, and the
    // rates say so.
    let cached_view = name(&view, "cached").unwrap();
    assert!(denied_cached(&cluster, "cached") >= 1);
    assert!(cached_view.cached_per_sec > 0.0 || cached_view.denied_per_sec > 0.0);

    // Every key the view made expires: the report within 15 s, the index
    // with it.
    let ids = [KeyId::new("throttled", "index").unwrap()];
    let index = cluster.keys().key("shardlimit:throttled", &ids[0]).unwrap();
    let pttl = common::pttl(&index).await;
    assert!(pttl > 0 && pttl <= 15_000, "index PTTL {pttl}");
    let reports: Vec<(Vec<u8>, i64)> = common::all_keys_with_pttl(cluster.namespace())
        .await
        .into_iter()
        .filter(|(k, _)| k.windows(12).any(|w| w == b"}:throttled:"))
        .collect();
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(
        reports.iter().all(|(_, pttl)| *pttl > 0 && *pttl <= 15_000),
        "{reports:?}"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// The deny cache's denials of limiter `name`, from the cluster's stats.
#[cfg(feature = "deny-cache")]
fn denied_cached(cluster: &Cluster, name: &str) -> u64 {
    cluster
        .stats()
        .primitives
        .iter()
        .find(|p| p.name == name)
        .map_or(0, |p| p.denied_cached)
}

/// A limiter with quota slices denies from its slices, in the process,
/// once its limit is spent: those denials reach the view too (they were
/// counted in the stats but never reported).
#[cfg(feature = "slices")]
#[tokio::test]
async fn denials_decided_from_quota_slices_are_reported() {
    let cluster = common::handle(&common::unique_namespace("throttled-sliced")).await;
    let hot = RateLimiter::builder(&cluster, "hot", Quota::per_hour(100))
        .slices(Slices::up_to(0.5).lasting(Duration::from_secs(60)))
        .build()
        .unwrap();
    let (mut denied, mut sliced_denials) = (0, 0);
    for _ in 0..300 {
        let d = hot.check("tenant").await.unwrap();
        if !d.allowed {
            denied += 1;
            sliced_denials += u64::from(d.sliced);
        }
    }
    assert!(sliced_denials > 0, "no denial came from a slice");
    let view = until(&cluster, Duration::from_secs(10), |v| {
        denials(v, "hot", "tenant") == Some(denied)
    })
    .await;
    assert_eq!(name(&view, "hot").unwrap().denials, denied);
    hot.return_slices().await.unwrap();
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn two_processes_reports_merge_per_subject() {
    let namespace = common::unique_namespace("throttled-two");
    let (one, two) = (
        common::handle(&namespace).await,
        common::handle(&namespace).await,
    );
    let window = Duration::from_secs(60);
    let (api_one, api_two) = (
        one_per_minute(&one, "api", window),
        one_per_minute(&two, "api", window),
    );
    // 1 admitted, then denied: "shared" 3 times here, 4 there.
    for _ in 0..4 {
        let _ = api_one.check("shared").await.unwrap();
    }
    for _ in 0..4 {
        let _ = api_two.check("shared").await.unwrap();
    }
    for _ in 0..6 {
        let _ = api_one.check("only-one").await.unwrap();
    }
    // Each process publishes at its first denial, then every 5 s: wait for
    // the publication that holds all of them (process one's first may
    // have come before its "only-one" denials).
    let view = until(&one, Duration::from_secs(10), |v| {
        v.processes == 2
            && denials(v, "api", "shared") == Some(7)
            && denials(v, "api", "only-one") == Some(5)
    })
    .await;
    let api = name(&view, "api").unwrap();
    assert_eq!(api.processes, 2);
    assert!(
        api.covered > Duration::ZERO && api.covered <= window,
        "{api:?}"
    );
    assert_eq!(denials(&view, "api", "only-one"), Some(5));
    assert_eq!(api.denials, 12);
    assert_eq!(api.subjects[0].subject, b"shared");
    // Either handle reads the same view.
    let other = admin::throttled(&two).await.unwrap();
    assert_eq!(denials(&other, "api", "shared"), Some(7));
}

#[tokio::test]
async fn a_subject_leaves_the_view_once_its_denials_are_older_than_the_window() {
    let cluster = common::handle(&common::unique_namespace("throttled-age")).await;
    let api = one_per_minute(&cluster, "api", Duration::from_secs(6));
    for _ in 0..3 {
        let _ = api.check("brief").await.unwrap();
    }
    until(&cluster, Duration::from_secs(10), |v| {
        denials(v, "api", "brief") == Some(2)
    })
    .await;
    let denied_at = Instant::now();
    // Gone within the window plus one publication (and the read).
    until(&cluster, Duration::from_secs(14), |v| {
        denials(v, "api", "brief").is_none()
    })
    .await;
    assert!(denied_at.elapsed() >= Duration::from_secs(4));
    // The publication that emptied it still names the limiter, with its
    // rates; it is the last: nothing is denied, so nothing more is sent,
    // and the report expires within its 15 s TTL.
    let view = admin::throttled(&cluster).await.unwrap();
    assert!(name(&view, "api").is_some());
    until(&cluster, Duration::from_secs(20), |v| v.processes == 0).await;
}

/// Reporting is on by default (issue 42, item 7: it was opt-in, and the
/// view stayed empty for services that never knew to ask), off with
/// `report_throttled(false)`, and a process that denies nothing writes
/// nothing.
#[tokio::test]
async fn a_rate_limiter_reports_by_default_and_a_process_that_denies_nothing_writes_nothing() {
    let cluster = common::handle(&common::unique_namespace("throttled-default")).await;
    let api = RateLimiter::builder(&cluster, "api", Quota::per_hour(2))
        .build()
        .unwrap();
    let quiet = RateLimiter::builder(&cluster, "quiet", Quota::per_hour(1))
        .report_throttled(false)
        .build()
        .unwrap();
    // Admitted only: nothing to report, no key. (Publication would be at
    // once and then every 5 s; 6 s covers two.)
    assert!(api.check("calm").await.unwrap().allowed);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let view = admin::throttled(&cluster).await.unwrap();
    assert_eq!(view.processes, 0, "{view:?}");
    for _ in 0..3 {
        let _ = api.check("abuser").await.unwrap();
        let _ = quiet.check("abuser").await.unwrap();
    }
    let view = until(&cluster, Duration::from_secs(10), |v| {
        denials(v, "api", "abuser") == Some(1)
    })
    .await;
    assert!(name(&view, "quiet").is_none(), "{view:?}");
    let api_view = name(&view, "api").unwrap();
    assert_eq!(
        api_view.window,
        Duration::from_secs(60),
        "the default window"
    );
    assert!(api_view.interval > Duration::ZERO, "{api_view:?}");
}

/// With reporting on by default, a publication refused by configuration
/// (here an ACL without `ZADD`) must not be silent: it was logged at
/// `debug` only, and the view simply stayed empty. Warned once, not at
/// every 5 s attempt; checks go on. `#[tokio::test]` runs the publishing
/// task on this thread, so the thread-local subscriber sees it.
#[tokio::test]
async fn a_publication_refused_by_configuration_is_warned_about_once() {
    let user = common::AclUser::without("+zadd").await;
    let cluster = user.builder().build().await.unwrap();
    let api = RateLimiter::builder(&cluster, "api", Quota::per_hour(1))
        .build()
        .unwrap();
    let (logs, _guard) = common::LogLines::capture();
    for _ in 0..3 {
        let _ = api.check("abuser").await.unwrap();
    }
    // The first attempt at once, the second 5 s later: both refused.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let warnings = logs.lines_with("publishing the throttled report failed");
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("report_throttled(false)"),
        "{warnings:?}"
    );
    let admin = common::handle(cluster.namespace()).await;
    assert_eq!(admin::throttled(&admin).await.unwrap().processes, 0);
}

#[tokio::test]
async fn a_window_out_of_bounds_is_refused() {
    let cluster = common::cluster("throttled-bounds").await;
    for window in [Duration::from_secs(5), Duration::from_secs(3601)] {
        let err = RateLimiter::builder(
            &cluster,
            "api",
            Quota::per_second(NonZeroU32::new(1).unwrap()),
        )
        .throttled_window(window)
        .build()
        .unwrap_err();
        assert!(err.to_string().contains("throttled_window"), "{err}");
    }
}

/// The HTTP layer runs the same pipeline: its 429s are reported too.
#[cfg(feature = "tower")]
#[tokio::test]
async fn the_http_layers_denials_are_reported() {
    use shardlimit::tower::{HeaderKey, RateLimitLayer};
    use tower::{Layer, ServiceExt, service_fn};

    let cluster = common::handle(&common::unique_namespace("throttled-http")).await;
    let api = one_per_minute(&cluster, "http", Duration::from_secs(60));
    let service = RateLimitLayer::new(api, HeaderKey::from_static("x-key")).layer(service_fn(
        |_: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        },
    ));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let request = http::Request::builder()
            .header("x-key", "client-7")
            .body(String::new())
            .unwrap();
        statuses.push(
            service
                .clone()
                .oneshot(request)
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 429, 429, 429]);
    // The key is a credential: reported under its keyed digest, never as
    // it is.
    let digest = cluster.subject_hasher().hash("client-7");
    until(&cluster, Duration::from_secs(10), |v| {
        denials(v, "http", digest.as_str()) == Some(3)
    })
    .await;
    let view = admin::throttled(&cluster).await.unwrap();
    let reported = name(&view, "http").unwrap();
    assert!(
        reported
            .subjects
            .iter()
            .all(|s| !s.subject.windows(8).any(|w| w == b"client-7")),
        "{:?}",
        reported.subjects
    );
}
