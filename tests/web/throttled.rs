//! "Throttled now" in a real browser: a throttled subject appears within
//! 10 s of its denials, links to its subject page, is reset from its row
//! (confirmation, CSRF-bound POST) and leaves the view once its denials
//! are older than the limiter's window.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use shardlimit::{Quota, RateLimiter};
use shardlimit_web::WebOptions;

use super::browser::Browser;
use super::{ONE_AT_A_TIME, XSS, common, follow, http, limits_app, settle, texts};

/// The subjects the "Throttled now" page lists for limiter `name`.
async fn listed(b: &Browser, base: &str, name: &str) -> Vec<String> {
    b.client.goto(&format!("{base}/throttled")).await.unwrap();
    settle(b, "h1").await;
    texts(b, &format!("section.throttled[data-name={name}] a.subject")).await
}

/// Reloads the page until `done` holds for `name`'s subjects, for at most
/// `bound`; returns when.
async fn until_listed(
    b: &Browser,
    base: &str,
    name: &str,
    bound: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let started = Instant::now();
    loop {
        let subjects = listed(b, base, name).await;
        if done(&subjects) {
            return subjects;
        }
        assert!(
            started.elapsed() < bound,
            "not within {bound:?}: {subjects:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_subject_appears_within_ten_seconds_and_leaves_after_its_reset() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-throttled").await;
    let api = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_hour(NonZeroU32::new(1).unwrap()),
    )
    .throttled_window(Duration::from_secs(6))
    .build()
    .unwrap();
    let options = WebOptions::builder().writes(true).build().unwrap();
    let base = limits_app(&cluster, options).await;
    let b = Browser::start().await;

    // Found from the overview.
    b.client.goto(&base).await.unwrap();
    follow(&b, "a#throttled-now").await;
    settle(&b, "h1").await;

    for (subject, checks) in [("abuser", 8), (XSS, 3)] {
        for _ in 0..checks {
            let _ = api.check(subject).await.unwrap();
        }
    }
    let denied = Instant::now();
    // The report holding every denial (a process publishes at its first
    // denial, then every 5 s), then the page.
    while shardlimit::admin::throttled(&cluster)
        .await
        .unwrap()
        .names
        .iter()
        .all(|n| n.name != "api" || n.denials < 9)
    {
        assert!(denied.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let subjects = until_listed(&b, &base, "api", Duration::from_secs(10), |s| s.len() == 2).await;
    assert!(denied.elapsed() < Duration::from_secs(10));
    // Most denied first; a hostile subject is text.
    assert_eq!(subjects, ["abuser", XSS]);
    let counts = texts(&b, "section.throttled[data-name=api] td.denials").await;
    assert_eq!(counts, ["7", "2"]);
    // Each subject's rate is over the last seconds, and says so (it was
    // the average over the window, unlabelled).
    let header = texts(&b, "section.throttled[data-name=api] th.rate").await;
    assert!(
        header.len() == 1 && header[0].starts_with("Per second, last "),
        "{header:?}"
    );
    let rates = texts(&b, "section.throttled[data-name=api] td.rate").await;
    assert_eq!(rates.len(), 2, "{rates:?}");
    assert!(rates.iter().all(|r| r.parse::<f64>().is_ok()), "{rates:?}");
    b.screenshot("throttled").await;
    // A page of a namespace without reports says which namespaces have
    // some (this one, now).
    let elsewhere = common::cluster("web-throttled-none").await;
    let other = limits_app(&elsewhere, WebOptions::default()).await;
    b.client.goto(&format!("{other}/throttled")).await.unwrap();
    settle(&b, "#none").await;
    let named = texts(&b, "#elsewhere code.namespace").await;
    assert!(named.iter().any(|n| n == cluster.namespace()), "{named:?}");
    listed(&b, &base, "api").await;
    // Its JSON twin.
    let (status, body) = http(&base, "GET", "/api/throttled?name=api", "").await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["names"][0]["subjects"][0]["subject"], "abuser");
    assert_eq!(json["names"][0]["subjects"][0]["denials"], 7);
    assert!(json["names"][0]["interval_ms"].as_u64().unwrap() > 0);
    assert!(json["names"][0]["subjects"][0]["denials_per_sec"].is_f64());

    // The row links to the subject's page.
    follow(
        &b,
        "section.throttled[data-name=api] tr.subject:first-child a.subject",
    )
    .await;
    settle(&b, "#subject").await;
    assert_eq!(texts(&b, "#subject").await, ["abuser"]);

    // Reset from its row: the existing confirmation, then the POST.
    listed(&b, &base, "api").await;
    follow(
        &b,
        "section.throttled[data-name=api] tr.subject:first-child a.reset",
    )
    .await;
    settle(&b, "form#confirm").await;
    b.click("form#confirm button").await;
    settle(&b, "#deleted").await;
    let reset = Instant::now();
    assert!(
        api.check("abuser").await.unwrap().allowed,
        "the reset lifted the limit"
    );

    // Its denials stopped: it leaves the view within the 6 s window and a
    // publication.
    let subjects = until_listed(&b, &base, "api", Duration::from_secs(15), |s| {
        !s.iter().any(|s| s == "abuser")
    })
    .await;
    assert!(subjects.is_empty(), "{XSS} aged out with it: {subjects:?}");
    assert!(reset.elapsed() < Duration::from_secs(15));
    b.screenshot("throttled-after-reset").await;
    b.close().await;
}
