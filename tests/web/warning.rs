//! A reset that would delete a paid override or lift a block says so
//! before anything is deleted, and deletes them only when the operator
//! reviews a forced reset and confirms it.

use std::num::NonZeroU32;
use std::time::Duration;

use fantoccini::Locator;
use shardlimit::{Algorithm, Quota, RateLimiter};

use super::browser::Browser;
use super::{ONE_AT_A_TIME, common, follow, settle, texts, writable_app};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_says_it_deletes_an_override_and_lifts_a_block_before_it_does() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-warning").await;
    let per_minute = |name: &str, limit: u32, algorithm: Algorithm| {
        RateLimiter::builder(&cluster, name, Quota::per_minute(limit))
            .algorithm(algorithm)
            .build()
            .unwrap()
    };
    let api = per_minute("api", 60, Algorithm::Gcra);
    let login = per_minute("login", 5, Algorithm::FixedWindow);
    let month = Duration::from_secs(29 * 86_400);
    let premium = Quota::per_minute(NonZeroU32::new(600).unwrap());
    api.set_override("customer:acme", premium, month)
        .await
        .unwrap();
    assert!(api.check("customer:acme").await.unwrap().allowed);
    login
        .block("customer:acme", Duration::from_secs(86_400))
        .await
        .unwrap();
    let base = writable_app(&cluster).await;
    let b = Browser::start().await;

    // "Reset everything of customer:acme": the warning names both, and
    // there is no plain confirmation to click.
    b.client
        .goto(&format!("{base}/reset?subject=customer:acme"))
        .await
        .unwrap();
    settle(&b, "#in-use").await;
    let warning = texts(&b, "#in-use li").await;
    assert!(
        warning
            .iter()
            .any(|w| w.contains("gcra api has an override of 600")
                && w.contains("which the reset deletes")),
        "{warning:?}"
    );
    assert!(
        warning
            .iter()
            .any(|w| w.contains("fw login is blocked for") && w.contains("which the reset lifts")),
        "{warning:?}"
    );
    assert!(
        b.client.find(Locator::Css("form#confirm")).await.is_err(),
        "a plain reset of a paid override is offered"
    );
    b.screenshot("reset-override-warning").await;
    // Nothing was deleted by showing it.
    let settings = api.subject_settings("customer:acme").await.unwrap();
    assert_eq!(settings.override_quota, Some(premium));
    assert!(
        login
            .subject_settings("customer:acme")
            .await
            .unwrap()
            .blocked_for
            .is_some()
    );

    // Reviewed and forced: both go.
    follow(&b, "a#force").await;
    settle(&b, "form#confirm").await;
    b.click("form#confirm button").await;
    settle(&b, "#deleted").await;
    let settings = api.subject_settings("customer:acme").await.unwrap();
    assert_eq!(settings.override_quota, None);
    assert!(
        login
            .subject_settings("customer:acme")
            .await
            .unwrap()
            .blocked_for
            .is_none()
    );
    assert!(
        login.check("customer:acme").await.unwrap().allowed,
        "the block is lifted"
    );
    b.close().await;
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
