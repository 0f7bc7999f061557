//! Limits are known: the catalog the limiters publish tells the page each
//! rate limiter's limit, so an exhausted subject reads "at limit", with 0
//! of its limit remaining, highlighted — and an idle one does not. No
//! quota is given to the router. GCRA, whose state is not aligned to the
//! clock: a fixed window's would reset at the top of the hour mid-test.

use std::num::NonZeroU32;

use fantoccini::Locator;
use shardlimit::{Quota, RateLimiter};
use shardlimit_web::WebOptions;

use super::browser::Browser;
use super::{ONE_AT_A_TIME, common, limits_app, texts};

/// The subject page's rate limiter rows: (classes, remaining cell).
async fn rows(b: &Browser) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for row in b
        .client
        .find_all(Locator::Css("table#primitives tbody tr"))
        .await
        .unwrap()
    {
        let class = row.attr("class").await.unwrap().unwrap_or_default();
        let cell = row.find(Locator::Css("td.headroom")).await.unwrap();
        out.push((class, cell.text().await.unwrap()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_subject_reads_at_limit_and_an_idle_one_does_not() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-headroom").await;
    let api = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_hour(NonZeroU32::new(3).unwrap()),
    )
    .build()
    .unwrap();
    for _ in 0..3 {
        assert!(api.check("busy").await.unwrap().allowed);
    }
    assert!(!api.check("busy").await.unwrap().allowed);
    assert!(api.check("idle").await.unwrap().allowed);
    common::catalog_published(&api, 1).await;

    let base = limits_app(&cluster, WebOptions::default()).await;
    let b = Browser::start().await;

    b.client
        .goto(&format!("{base}/subject?subject=busy"))
        .await
        .unwrap();
    let busy = rows(&b).await;
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(busy[0].0.contains("at-limit"), "{busy:?}");
    assert!(
        busy[0].1.starts_with("0/3 remaining, at limit, full in "),
        "{busy:?}"
    );
    // Highlighted: the row's cells take the "bad" background.
    let cell = b
        .client
        .find(Locator::Css("tr.at-limit td.headroom"))
        .await
        .unwrap();
    assert_eq!(
        cell.css_value("background-color").await.unwrap(),
        "rgba(253, 236, 236, 1)"
    );
    b.screenshot("subject-at-limit").await;

    b.client
        .goto(&format!("{base}/subject?subject=idle"))
        .await
        .unwrap();
    let idle = rows(&b).await;
    assert_eq!(idle.len(), 1, "{idle:?}");
    assert!(!idle[0].0.contains("at-limit"), "{idle:?}");
    assert!(idle[0].1.starts_with("2/3 remaining, full in "), "{idle:?}");
    assert!(!idle[0].1.contains("at limit"), "{idle:?}");

    // The limiters page says the same, row by row.
    let mut seen = Vec::new();
    b.client
        .goto(&format!("{base}/limiters?name=api"))
        .await
        .unwrap();
    loop {
        for row in b
            .client
            .find_all(Locator::Css("table#limiters tbody tr"))
            .await
            .unwrap()
        {
            let class = row.attr("class").await.unwrap().unwrap_or_default();
            seen.push((class, row.text().await.unwrap()));
        }
        match b.client.find(Locator::Css("a#next")).await {
            Ok(next) => {
                let href = next.attr("href").await.unwrap().unwrap();
                let here = b.client.current_url().await.unwrap();
                b.client
                    .goto(here.join(&href).unwrap().as_str())
                    .await
                    .unwrap();
            }
            Err(_) => break,
        }
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    let busy = seen.iter().find(|(_, t)| t.contains(" busy ")).unwrap();
    assert!(
        busy.0.contains("at-limit") && busy.1.contains("0/3 remaining, at limit"),
        "{busy:?}"
    );
    let idle = seen.iter().find(|(_, t)| t.contains(" idle ")).unwrap();
    assert!(
        !idle.0.contains("at-limit") && idle.1.contains("2/3 remaining"),
        "{idle:?}"
    );
    b.screenshot("limiters-at-limit").await;

    // Another process publishes another spec for the name: both are
    // known, the page says so, and the strictest counts.
    let other = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_hour(NonZeroU32::new(10).unwrap()),
    )
    .build()
    .unwrap();
    common::catalog_published(&other, 1).await;
    b.client
        .goto(&format!("{base}/subject?subject=busy"))
        .await
        .unwrap();
    let cells = texts(&b, "td.headroom").await;
    assert_eq!(cells.len(), 1, "{cells:?}");
    assert!(
        cells[0].starts_with("0/3 remaining, at limit")
            && cells[0].ends_with("; 2 specs published"),
        "{cells:?}"
    );
    b.close().await;
}
