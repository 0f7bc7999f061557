//! The write actions beyond a reset, in the browser: lift a block, clear an
//! override, give a key without a TTL one — each through its confirmation
//! and a POST, seen in Redis — and a reset per row of the limiters list and
//! the audit. Forged, replayed and misdirected tokens are refused, and a
//! read-only page refuses every action.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use shardlimit::keys::KeyId;
use shardlimit::{Algorithm, Cluster, Quota, RateLimiter};
use shardlimit_web::WebOptions;

use super::browser::Browser;
use super::{ONE_AT_A_TIME, common, follow, http, limits_app, settle, texts, writable_app};

/// `gcra api` (60 a day) with customer:acme given 600 a day for 29 days
/// and blocked for a day. Per day: a GCRA key lives one emission interval
/// after a check (2.4 min at 600 a day), so its row stays listed while the
/// test runs under load.
async fn acme(cluster: &Cluster) -> RateLimiter {
    let day = Duration::from_secs(86_400);
    let api = RateLimiter::builder(
        cluster,
        "api",
        Quota::with_period(NonZeroU32::new(60).unwrap(), day),
    )
    .algorithm(Algorithm::Gcra)
    .build()
    .unwrap();
    let premium = Quota::with_period(NonZeroU32::new(600).unwrap(), day);
    api.set_override("customer:acme", premium, Duration::from_secs(29 * 86_400))
        .await
        .unwrap();
    api.block("customer:acme", Duration::from_secs(86_400))
        .await
        .unwrap();
    api
}

/// Submits the confirmation's form and waits for the result page.
async fn confirm(b: &Browser) {
    b.click("#confirm button").await;
    settle(b, "#done").await;
}

/// Opens the limiters list at `url` and pages on until `css` shows: other
/// tests' keys share the masters, so a page's time budget may run out
/// before the walk reaches this namespace's few rows.
async fn list_until(b: &Browser, url: &str, css: &str) {
    b.client.goto(url).await.unwrap();
    while b.client.find(Locator::Css(css)).await.is_err() {
        follow(b, "a#next").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unblock_clear_override_and_give_ttl_through_their_confirmations() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-actions").await;
    let api = acme(&cluster).await;
    // A key of the namespace's layout that never expires: what the audit
    // finds when something wrote a limiter's key without its TTL.
    let immortal = cluster
        .keys()
        .key("user:immortal", &KeyId::new("fw", "login").unwrap())
        .unwrap();
    let _: () = common::on_owner(&immortal, redis::cmd("SET").arg(&immortal).arg(3)).await;
    let base = writable_app(&cluster).await;
    let b = Browser::start().await;

    // Unblock, from the subject's page: the confirmation says what the
    // block does, the POST lifts it, the override stays.
    b.client
        .goto(&format!("{base}/subject?subject=customer%3Aacme"))
        .await
        .unwrap();
    follow(&b, "a.unblock").await;
    let what = texts(&b, "#what").await.remove(0);
    assert!(what.starts_with("Blocked for 23 h"), "{what}");
    b.screenshot("unblock-confirm").await;
    confirm(&b).await;
    let settings = api.subject_settings("customer:acme").await.unwrap();
    assert_eq!(settings.blocked_for, None, "the block is lifted");
    assert!(settings.override_quota.is_some(), "the override stays");
    assert!(api.check("customer:acme").await.unwrap().allowed);

    // Clear the override, from the limiters list.
    list_until(
        &b,
        &format!("{base}/limiters?kind=gcra&name=api"),
        "a.clear-override",
    )
    .await;
    follow(&b, "a.clear-override").await;
    let what = texts(&b, "#what").await.remove(0);
    assert!(what.starts_with("Its own quota, 600 per "), "{what}");
    confirm(&b).await;
    let settings = api.subject_settings("customer:acme").await.unwrap();
    assert_eq!(settings.override_quota, None, "the override is cleared");
    assert_eq!(api.check("customer:acme").await.unwrap().limit, 60);

    // Give a TTL, from the audit's row of a key without one; the row also
    // links to its subject and its reset.
    let link = "#immortal a.give-ttl";
    let deadline = Instant::now() + Duration::from_secs(30);
    b.client
        .goto(&format!("{base}/audit?refresh=1"))
        .await
        .unwrap();
    while b.client.find(Locator::Css(link)).await.is_err() {
        assert!(Instant::now() < deadline, "the audit never listed the key");
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.client.goto(&format!("{base}/audit")).await.unwrap();
    }
    b.screenshot("audit-actions").await;
    let reset = b
        .client
        .find(Locator::Css("#immortal a.reset"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    assert!(
        reset.ends_with("/reset?subject=user%3Aimmortal&kind=fw&name=login"),
        "{reset}"
    );
    assert_eq!(texts(&b, "#immortal a.subject").await.len(), 1);
    follow(&b, link).await;
    let what = texts(&b, "#what").await.remove(0);
    assert!(what.starts_with("A string key without a TTL"), "{what}");
    assert_eq!(common::pttl(&immortal).await, -1, "shown, not changed");
    confirm(&b).await;
    let pttl = common::pttl(&immortal).await;
    assert!(
        (86_300_000..=86_400_000).contains(&pttl),
        "a day's TTL, not {pttl}"
    );

    // A reset per row of the limiters list and of the audit leads to the
    // reset's confirmation of that limiter.
    list_until(
        &b,
        &format!("{base}/limiters?kind=gcra&name=api"),
        "#limiters a.reset",
    )
    .await;
    follow(&b, "#limiters a.reset").await;
    assert_eq!(
        texts(&b, "h1").await,
        ["Reset gcra api of subject customer:acme?"]
    );
    let origin = &base[..base.find("/limits").unwrap()];
    b.client.goto(&format!("{origin}{reset}")).await.unwrap();
    assert_eq!(
        texts(&b, "h1").await,
        ["Reset fw login of subject user:immortal?"]
    );
    b.close().await;
}

// Takes its turn too: its unblocks and resets are commands on the masters,
// which the tests that count a page's commands would count.
#[tokio::test]
async fn forged_replayed_and_misdirected_tokens_and_read_only_pages_are_refused() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-actions-tokens").await;
    let api = acme(&cluster).await;
    let read_only = limits_app(&cluster, WebOptions::default()).await;
    let acme = "subject=customer%3Aacme&kind=gcra&name=api";
    for (method, path) in [
        ("GET", format!("/unblock?{acme}")),
        ("GET", format!("/api/clear-override?{acme}")),
        ("POST", "/api/unblock".to_owned()),
        ("GET", "/give-ttl?key_hex=00".to_owned()),
        ("POST", "/api/give-ttl".to_owned()),
    ] {
        let (status, body) = http(&read_only, method, &path, acme).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(body.contains("read-only"), "{body}");
    }

    let base = writable_app(&cluster).await;
    let (status, body) = http(&base, "GET", &format!("/api/unblock?{acme}"), "").await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(json["settings"]["blocked_for_ms"].as_u64().unwrap() > 86_000_000);
    let token = json["token"].as_str().unwrap().to_owned();
    // Forged, or minted for another subject or another operation: refused,
    // and the block stays.
    let forged = format!("{acme}&token=1.0000000000000007.{}", "ab".repeat(32));
    assert_eq!(http(&base, "POST", "/api/unblock", &forged).await.0, 403);
    let other_subject = format!("subject=customer%3Aother&kind=gcra&name=api&token={token}");
    let (status, body) = http(&base, "POST", "/api/unblock", &other_subject).await;
    assert_eq!(
        (status, body.contains("another action")),
        (403, true),
        "{body}"
    );
    let other_op = format!("{acme}&token={token}");
    assert_eq!(
        http(&base, "POST", "/api/clear-override", &other_op)
            .await
            .0,
        403
    );
    assert!(
        api.subject_settings("customer:acme")
            .await
            .unwrap()
            .blocked_for
            .is_some()
    );
    // The token itself: good once.
    let (status, body) = http(&base, "POST", "/api/unblock", &other_op).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        api.subject_settings("customer:acme")
            .await
            .unwrap()
            .blocked_for,
        None
    );
    let (status, body) = http(&base, "POST", "/api/unblock", &other_op).await;
    assert_eq!(
        (status, body.contains("already used")),
        (403, true),
        "{body}"
    );

    // What the request gets wrong is a 400 saying so.
    let state_key = api.key("customer:acme").unwrap();
    let hex: String = state_key.iter().map(|b| format!("{b:02x}")).collect();
    for (path, says) in [
        (
            "/api/unblock?subject=customer%3Aacme&kind=lock&name=api".to_owned(),
            "not a rate limiter's kind",
        ),
        (
            format!("/api/give-ttl?key_hex={hex}&ttl=0"),
            "1 s to 366 days",
        ),
        (
            format!("/api/give-ttl?key_hex={hex}&ttl=31622401"),
            "1 s to 366 days",
        ),
        (
            "/api/give-ttl?key_hex=6f746865723a6b6579".to_owned(),
            "is not a key of namespace",
        ),
    ] {
        let (status, body) = http(&base, "GET", &path, "").await;
        assert_eq!((status, body.contains(says)), (400, true), "{path}: {body}");
    }
    // A key with a TTL is never given another: no token is offered.
    assert!(api.check("customer:acme").await.unwrap().allowed);
    let (status, body) = http(&base, "GET", &format!("/api/give-ttl?key_hex={hex}"), "").await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        json["ttl_ms"].as_u64().is_some() && json["token"].is_null(),
        "{json}"
    );
}
