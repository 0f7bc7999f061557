//! A rate limiter's override and block on the Limits page: said with the
//! limiter on the subject and limiters pages (escaped like everything
//! else), in the JSON, and counted under the override. No browser needed.

use std::num::NonZeroU32;
use std::time::Duration;

use serde_json::Value;
use shardlimit::{Algorithm, Quota, RateLimiter};
use shardlimit_web::WebOptions;

use super::{ONE_AT_A_TIME, common, http, limits_app};

/// Every byte but letters and digits as `%XX`.
fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn overrides_and_blocks_show_with_their_limiter() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-settings").await;
    let ten = Quota::per_hour(NonZeroU32::new(10).unwrap());
    let fw = RateLimiter::builder(&cluster, "api", ten)
        .algorithm(Algorithm::FixedWindow)
        .build()
        .unwrap();
    let gcra = RateLimiter::builder(&cluster, "api", ten).build().unwrap();
    let vip = "<b>vip</b>";
    let premium = Quota::per_minute(NonZeroU32::new(600).unwrap());
    let month = Duration::from_secs(30 * 86_400);
    assert!(fw.check(vip).await.unwrap().allowed);
    fw.set_override(vip, Quota::per_hour(NonZeroU32::new(5).unwrap()), month)
        .await
        .unwrap();
    fw.block(vip, Duration::from_secs(600)).await.unwrap();
    gcra.set_override(vip, premium, month).await.unwrap();

    let options = WebOptions::builder().build().unwrap();
    let base = limits_app(&cluster, options).await;
    let (status, body) = http(
        &base,
        "GET",
        &format!("/api/subject?subject={}", percent(vip)),
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    let primitives = view["primitives"].as_array().unwrap();
    assert_eq!(primitives.len(), 2, "{body}");
    let by_kind = |kind: &str| primitives.iter().find(|p| p["kind"] == kind).unwrap();
    let (f, g) = (by_kind("fw"), by_kind("gcra"));
    assert_eq!(f["state"]["used"], 1);
    assert_eq!(
        (&f["override"]["limit"], &f["override"]["period_ms"]),
        (&Value::from(5), &Value::from(3_600_000))
    );
    assert!(f["blocked_for_ms"].as_u64().unwrap() > 590_000, "{f}");
    // No quota was given to the router: the override's is known.
    assert_eq!(f["remaining"], 4);
    let words = f["words"].as_str().unwrap();
    assert!(
        words.starts_with("4/5 remaining, at limit, full in ")
            && words.contains("; 1 used this window"),
        "{words}"
    );
    assert!(words.contains("; blocked for 9 min 5"), "{words}");
    assert!(
        words.contains("; override 5 per 1 h 0 min for 29 d 23 h"),
        "{words}"
    );
    assert_eq!(g["state"]["unused"], true);
    assert_eq!(g["override"]["limit"], 600);
    assert_eq!(g["blocked_for_ms"], Value::Null);
    assert_eq!(g["remaining"], 600);

    let (status, html) = http(
        &base,
        "GET",
        &format!("/subject?subject={}", percent(vip)),
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        html.contains(
            "override 600 per 1 min 0 s, burst 600: at most 1199 in any 1 min 0 s for 29 d 23 h"
        ),
        "{html}"
    );
    assert!(
        html.contains(":{&lt;b&gt;vip&lt;/b&gt;}:gcra:api:quota"),
        "{html}"
    );
    assert!(!html.contains(vip), "unescaped subject in {html}");

    // The limiters pages, walked to the end (a page is bounded, and the
    // keyspace is shared with other tests): the same two entries.
    let mut found = Vec::new();
    let mut query = "/api/limiters?name=api".to_owned();
    loop {
        let (status, body) = http(&base, "GET", &query, "").await;
        assert_eq!(status, 200, "{body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        assert!(
            page["unrecognized"].as_array().unwrap().is_empty(),
            "{body}"
        );
        found.extend(page["limiters"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(next) => query = format!("/api/limiters?name=api&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(found.len(), 2, "{found:?}");
    let f = found.iter().find(|p| p["kind"] == "fw").unwrap();
    assert!(
        f["words"]
            .as_str()
            .unwrap()
            .contains("; blocked for 9 min 5"),
        "{f}"
    );
}
