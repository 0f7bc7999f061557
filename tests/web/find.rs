//! Issue 42, item 6: the find box takes a raw API key. Credentials are
//! limited under their keyed digest, so the page hashes what the operator
//! types with its cluster's subject secret (the services') and leads to
//! the digest's page, which says it shows a hashed subject; the raw key is
//! posted, never put in a URL.

use std::num::NonZeroU32;

use shardlimit::{Cluster, Quota, RateLimiter};
use shardlimit_web::WebOptions;

use super::browser::Browser;
use super::{ONE_AT_A_TIME, arrive, common, limits_app, settle, texts};

/// Types `text` in the find box of the current page and submits it.
async fn find(b: &Browser, text: &str) {
    b.client
        .find(fantoccini::Locator::Css("form.find input[name=subject]"))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
    b.click("form.find button").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_find_box_finds_a_credential_by_its_raw_key() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let namespace = common::unique_namespace("web-find");
    let secret = "5e0b9d27c4a18f63b2e7d04a9c15f8e3";
    let handle = |secret: Option<&str>| {
        let mut builder = Cluster::builder(common::node_urls()).namespace(&namespace);
        if let Some(secret) = secret {
            builder = builder.subject_secret(secret);
        }
        async move { builder.build().await.unwrap() }
    };
    // The service's process, and the page's, given the same secret.
    let service = handle(Some(secret)).await;
    let api = RateLimiter::builder(
        &service,
        "api",
        Quota::per_hour(NonZeroU32::new(10).unwrap()),
    )
    .build()
    .unwrap();
    let raw = "sk-live-Hq7Tn2Vb";
    let digest = service.subject_hasher().hash(raw);
    // What the HTTP layer does with a HeaderKey (tests/http/layer.rs).
    for _ in 0..3 {
        assert!(api.check(digest).await.unwrap().allowed);
    }
    assert!(api.check("user:7").await.unwrap().allowed);
    let base = limits_app(&handle(Some(secret)).await, WebOptions::default()).await;
    let b = Browser::start().await;

    // The raw key: the digest's page, marked as a hashed subject.
    b.client.goto(&base).await.unwrap();
    find(&b, raw).await;
    arrive(&b, "/subject?subject=hmac%3A").await;
    settle(&b, "#hashed").await;
    assert_eq!(texts(&b, "#subject").await, [digest.as_str()]);
    assert!(texts(&b, "#hashed").await[0].contains("hashed"));
    let note = texts(&b, "#hashed-note").await;
    assert!(
        note[0].contains("keyed digest") && note[0].contains("the subject secret"),
        "{note:?}"
    );
    let rows = texts(&b, "table#primitives tbody tr").await;
    assert!(
        rows.len() == 1 && rows[0].starts_with("gcra api"),
        "{rows:?}"
    );
    let url = b.client.current_url().await.unwrap();
    assert!(!url.as_str().contains(raw), "{url}");
    b.screenshot("find-hashed").await;
    // Its JSON twin says so too.
    let json = b
        .json(&format!("{base}/api/subject?subject={}", digest.as_str()))
        .await;
    assert_eq!(
        (json["subject"].as_str(), &json["hashed"]),
        (Some(digest.as_str()), &serde_json::Value::Bool(true))
    );
    b.client.goto(&base).await.unwrap();

    // A subject that is no credential: its own page, unmarked.
    find(&b, "user:7").await;
    arrive(&b, "/subject?subject=user%3A7").await;
    settle(&b, "#slot").await;
    assert_eq!(texts(&b, "#subject").await, ["user:7"]);
    assert!(texts(&b, "#hashed").await.is_empty());

    // A key with nothing: said so, with the digest that was read.
    find(&b, "sk-live-unknown").await;
    settle(&b, "#nothing").await;
    let unknown = service.subject_hasher().hash("sk-live-unknown");
    assert_eq!(texts(&b, "#digest").await, [unknown.as_str()]);
    assert!(texts(&b, "#no-secret").await.is_empty());
    let url = b.client.current_url().await.unwrap();
    assert!(!url.as_str().contains("unknown"), "{url}");

    // A page without the secret hashes with the namespace's default key:
    // it finds nothing, and says what to give it.
    let blind = limits_app(&handle(None).await, WebOptions::default()).await;
    b.client.goto(&blind).await.unwrap();
    find(&b, raw).await;
    settle(&b, "#nothing").await;
    assert!(texts(&b, "#no-secret").await[0].contains("SHARDLIMIT_SUBJECT_SECRET"));
    b.screenshot("find-no-secret").await;
    b.close().await;
}
