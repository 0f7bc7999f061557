//! The HTTP layer's rate-limit fields and problem details
//! (draft-ietf-httpapi-ratelimit-headers-11, and GitHub's `X-RateLimit-*`),
//! byte for byte over a real axum server and through `oneshot`, against the
//! six-node cluster. What each style sends is tabulated in
//! docs/http-headers.md; these tests are that table's proof.
//!
//! Timing: GCRA limits of 3 per 6 s refill one unit per 2 s, so the `t` of
//! consecutive requests (until the next unit frees: 2) is exact unless a
//! request takes over a second; the
//! waits of denials (which count down) are read from the reply, bounded,
//! and then the whole reply is compared with them filled in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::convert::Infallible;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use shardlimit::tower::{HeaderKey, HeaderStyle, MissingKey, QuotaUnit, RateLimitLayer};
use shardlimit::{Cluster, Error, MultiLimiter, Quota, RateLimiter};
use tower::{Layer, ServiceExt, service_fn};

use common::http::{http_get_with, serve_with_connect_info};

/// GCRA, 3 per 6 s: a burst of 3, then one more every 2 s.
fn three_per_six(cluster: &Cluster, name: &str) -> RateLimiter {
    RateLimiter::builder(cluster, name, Quota::with_period(3, Duration::from_secs(6)))
        .build()
        .unwrap()
}

/// An app answering "hello" on `/`, behind `layer`, served on a loopback
/// port; a GET with an `x-api-key`.
async fn serve(layer: RateLimitLayer<HeaderKey>) -> impl AsyncFn(&str) -> String {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let (addr, _server) = serve_with_connect_info(app).await;
    async move |key: &str| {
        let reply = http_get_with(addr, "/", &[("x-api-key", key)]).await;
        without_date(&reply)
    }
}

/// The reply without its `date` line (the only field hyper adds that
/// changes from second to second).
fn without_date(reply: &str) -> String {
    reply
        .split("\r\n")
        .filter(|line| !line.starts_with("date: "))
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// The value of field `name` in a raw reply.
fn field(reply: &str, name: &str) -> String {
    let prefix = format!("\r\n{name}: ");
    let start = reply
        .find(&prefix)
        .unwrap_or_else(|| panic!("no {name}: {reply}"))
        + prefix.len();
    let end = start + reply[start..].find("\r\n").unwrap();
    reply[start..end].to_owned()
}

fn epoch_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A whole reply of the served app but its `date`: `fields` are the lines
/// (each ending in CRLF) between `content-type` and `content-length`.
fn reply_of(status: &str, content_type: &str, fields: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{fields}\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The app's "hello" with `fields`.
fn hello(fields: &str) -> String {
    reply_of("200 OK", "text/plain; charset=utf-8", fields, "hello")
}

/// A 429 with `fields` and the quota-exceeded body naming `violated`.
fn quota_exceeded(fields: &str, violated: &str) -> String {
    let body = format!(
        "{{\"type\":\"{QUOTA_EXCEEDED}\",\"title\":\"Quota Exceeded\",\"status\":429,\
         \"violated-policies\":[\"{violated}\"]}}"
    );
    reply_of(
        "429 Too Many Requests",
        "application/problem+json",
        fields,
        &body,
    )
}

/// The `RateLimit-Policy` of GCRA 3 per 6 s (`key-fast`) and 1000 per hour
/// (`key-1h`): at most 5 (a burst of 3, then one every 2 s) in any 6 s, and
/// 1999 in any hour.
const POLICY: &str =
    "\"key-fast\";q=5;w=6;shardlimit-burst=3, \"key-1h\";q=1999;w=3600;shardlimit-burst=1000";

/// Draft-11 style, the default: every policy of a multi-limit in
/// `RateLimit-Policy`, the binding one in `RateLimit`, and a problem+json
/// 429 naming the limit that denied.
#[tokio::test]
async fn ietf_fields_go_over_the_wire_byte_for_byte() {
    let cluster = common::cluster("hdr-ietf").await;
    let per_hour = RateLimiter::builder(&cluster, "key-1h", Quota::per_hour(1000))
        .build()
        .unwrap();
    let multi = MultiLimiter::new([three_per_six(&cluster, "key-fast"), per_hour]).unwrap();
    let get = serve(RateLimitLayer::new(
        multi,
        HeaderKey::from_static("x-api-key"),
    ))
    .await;

    for remaining in [2, 1, 0] {
        let reply = get("k-1").await;
        // The binding limit is the fast one: fewer left than the hourly.
        // `t`: until more than `r` is free, the next unit in 2 s (not the
        // bucket full again: 2, 4, 6 s).
        assert_eq!(
            reply,
            hello(&format!(
                "ratelimit-policy: {POLICY}\r\n\
                 ratelimit: \"key-fast\";r={remaining};t=2\r\n"
            ))
        );
    }
    let reply = get("k-1").await;
    let wait: u64 = field(&reply, "retry-after").parse().unwrap();
    assert!((1..=2).contains(&wait), "{reply}");
    assert_eq!(
        reply,
        quota_exceeded(
            &format!(
                "retry-after: {wait}\r\n\
                 ratelimit-policy: {POLICY}\r\n\
                 ratelimit: \"key-fast\";r=0;t={wait}\r\n"
            ),
            "key-fast"
        )
    );
    // A client that waits what it was told is admitted.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert!(get("k-1").await.starts_with("HTTP/1.1 200 OK"));
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// GitHub's style: one value each for the binding limit, the reset in UTC
/// epoch seconds; no draft fields.
#[tokio::test]
async fn x_ratelimit_fields_go_over_the_wire_byte_for_byte() {
    let cluster = common::cluster("hdr-x").await;
    let layer = RateLimitLayer::builder(
        three_per_six(&cluster, "api"),
        HeaderKey::from_static("x-api-key"),
    )
    .header_style(HeaderStyle::XRateLimit)
    .build()
    .unwrap();
    let get = serve(layer).await;

    for remaining in [2, 1, 0] {
        let before = epoch_secs();
        let reply = get("k-1").await;
        let after = epoch_secs();
        // When the next unit frees, 2 s after the check, rounded up.
        let reset: u64 = field(&reply, "x-ratelimit-reset").parse().unwrap();
        let earliest = (before + 2.0).floor() as u64;
        let latest = (after + 2.0).ceil() as u64;
        assert!(
            (earliest..=latest).contains(&reset),
            "{earliest} {reset} {latest}"
        );
        assert_eq!(
            reply,
            hello(&format!(
                "x-ratelimit-limit: 3\r\n\
                 x-ratelimit-remaining: {remaining}\r\n\
                 x-ratelimit-reset: {reset}\r\n"
            ))
        );
    }
    let before = epoch_secs();
    let reply = get("k-1").await;
    let wait: u64 = field(&reply, "retry-after").parse().unwrap();
    assert!((1..=2).contains(&wait), "{reply}");
    let reset: u64 = field(&reply, "x-ratelimit-reset").parse().unwrap();
    // The reset of a denial is when the request would be admitted.
    let (earliest, latest) = (before.floor() as u64 + 1, epoch_secs().ceil() as u64 + 2);
    assert!(
        (earliest..=latest).contains(&reset),
        "{earliest} {reset} {latest}"
    );
    assert_eq!(
        reply,
        quota_exceeded(
            &format!(
                "retry-after: {wait}\r\n\
                 x-ratelimit-limit: 3\r\n\
                 x-ratelimit-remaining: 0\r\n\
                 x-ratelimit-reset: {reset}\r\n"
            ),
            "api"
        )
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Both sets at once, with the partition key and a quota unit shown, and
/// plain-text bodies: every switch in one reply.
#[tokio::test]
async fn both_styles_with_partition_key_unit_and_plain_bodies_byte_for_byte() {
    let cluster = common::cluster("hdr-both").await;
    // A key that is no credential, so `pk` is the key itself.
    let layer = RateLimitLayer::builder(
        three_per_six(&cluster, "upload"),
        HeaderKey::from_static("x-api-key").credential(false),
    )
    .header_style(HeaderStyle::Both)
    .show_partition_key(true)
    .quota_unit(QuotaUnit::ContentBytes)
    .problem_details(false)
    .build()
    .unwrap();
    let get = serve(layer).await;

    let reply = get("k-1").await;
    let reset = field(&reply, "x-ratelimit-reset");
    // "k-1" is `ay0x` in base64.
    assert_eq!(
        reply,
        hello(&format!(
            "ratelimit-policy: \"upload\";q=5;qu=\"content-bytes\";w=6;pk=:ay0x:;shardlimit-burst=3\r\n\
             ratelimit: \"upload\";r=2;t=2;pk=:ay0x:\r\n\
             x-ratelimit-limit: 3\r\n\
             x-ratelimit-remaining: 2\r\n\
             x-ratelimit-reset: {reset}\r\n"
        ))
    );
    for _ in 0..2 {
        get("k-1").await;
    }
    let reply = get("k-1").await;
    let wait = field(&reply, "retry-after");
    let reset = field(&reply, "x-ratelimit-reset");
    assert_eq!(
        reply,
        reply_of(
            "429 Too Many Requests",
            "text/plain; charset=utf-8",
            &format!(
                "retry-after: {wait}\r\n\
                 ratelimit-policy: \"upload\";q=5;qu=\"content-bytes\";w=6;pk=:ay0x:;shardlimit-burst=3\r\n\
                 ratelimit: \"upload\";r=0;t={wait};pk=:ay0x:\r\n\
                 x-ratelimit-limit: 3\r\n\
                 x-ratelimit-remaining: 0\r\n\
                 x-ratelimit-reset: {reset}\r\n"
            ),
            "Too Many Requests\n"
        )
    );
    // Another key, another partition: `k-22` is `ay0yMg==`.
    let reply = get("k-22").await;
    assert_eq!(
        field(&reply, "ratelimit"),
        "\"upload\";r=2;t=2;pk=:ay0yMg==:"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

fn ok_inner() -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    })
}

fn request(ip: &str, key: &str) -> Request<String> {
    Request::builder()
        .header("x-ip", ip)
        .header("x-api-key", key)
        .body(String::new())
        .unwrap()
}

fn text<B>(response: &Response<B>, name: &str) -> Vec<String> {
    response
        .headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// `X-RateLimit-*` hold one value, not a list: with a per-IP layer outside
/// a per-key one, the response states whichever leaves fewer requests;
/// the draft fields list both layers.
#[tokio::test]
async fn stacked_layers_send_the_tightest_x_ratelimit_and_every_ietf_item() {
    let cluster = common::cluster("hdr-stack").await;
    let layer = |name: &str, header: &'static str, limit: u32| {
        let limiter = RateLimiter::builder(&cluster, name, Quota::per_minute(limit))
            .build()
            .unwrap();
        RateLimitLayer::builder(limiter, HeaderKey::from_static(header))
            .header_style(HeaderStyle::Both)
            .build()
            .unwrap()
    };
    let per_ip = layer("ip", "x-ip", 10);
    let per_key = layer("key", "x-api-key", 5);
    let service = per_ip.layer(per_key.layer(ok_inner()));

    // Per key 5/min is tighter: its values stay, the outer layer's do not
    // replace them.
    let first = service
        .clone()
        .oneshot(request("ip-1", "k-1"))
        .await
        .unwrap();
    assert_eq!(text(&first, "x-ratelimit-limit"), ["5"]);
    assert_eq!(text(&first, "x-ratelimit-remaining"), ["4"]);
    assert_eq!(
        text(&first, "ratelimit"),
        ["\"key\";r=4;t=12", "\"ip\";r=9;t=6"]
    );
    // More keys from the same IP: the IP's remaining falls one per
    // request, each key's stays at 4. At a tie the inner layer's stay.
    for (key, ip_left) in [("k-2", 8), ("k-3", 7), ("k-4", 6), ("k-5", 5), ("k-6", 4)] {
        let response = service.clone().oneshot(request("ip-1", key)).await.unwrap();
        assert_eq!(text(&response, "x-ratelimit-limit"), ["5"], "{key}");
        assert_eq!(text(&response, "x-ratelimit-remaining"), ["4"], "{key}");
        assert_eq!(
            text(&response, "ratelimit")[1],
            // Until the next unit frees: one every 6 s.
            format!("\"ip\";r={ip_left};t=6")
        );
    }
    // Now the IP's 10 per minute bind: its values replace the key's.
    let tight = service
        .clone()
        .oneshot(request("ip-1", "k-7"))
        .await
        .unwrap();
    assert_eq!(tight.status(), StatusCode::OK);
    assert_eq!(text(&tight, "x-ratelimit-limit"), ["10"]);
    assert_eq!(text(&tight, "x-ratelimit-remaining"), ["3"]);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Jitter (draft §8.5): one random delay per response, added to `t` and
/// `Retry-After` alike; never shorter than the real wait; and different
/// clients get different waits.
#[tokio::test]
async fn jitter_lengthens_t_and_retry_after_alike_and_never_shortens_them() {
    let cluster = common::cluster("hdr-jitter").await;
    let once_a_minute = RateLimiter::builder(&cluster, "slow", Quota::per_minute(1))
        .build()
        .unwrap();
    let service = RateLimitLayer::builder(once_a_minute, HeaderKey::from_static("x-api-key"))
        .jitter(Duration::from_secs(10))
        .build()
        .unwrap()
        .layer(ok_inner());
    let admitted = service.clone().oneshot(request("-", "k")).await.unwrap();
    let t: u64 = text(&admitted, "ratelimit")[0]
        .strip_prefix("\"slow\";r=0;t=")
        .unwrap()
        .parse()
        .unwrap();
    assert!((60..=70).contains(&t), "{t}");

    let mut waits = Vec::new();
    for _ in 0..20 {
        let denied = service.clone().oneshot(request("-", "k")).await.unwrap();
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry_after: u64 = text(&denied, "retry-after")[0].parse().unwrap();
        assert_eq!(
            text(&denied, "ratelimit"),
            [format!("\"slow\";r=0;t={retry_after}")]
        );
        // The real wait is 59-60 s here; jitter adds 0-10 s.
        assert!((59..=70).contains(&retry_after), "{retry_after}");
        waits.push(retry_after);
    }
    waits.sort_unstable();
    waits.dedup();
    assert!(waits.len() > 1, "20 denials, one wait: {waits:?}");

    let err = RateLimitLayer::builder(
        RateLimiter::builder(&cluster, "x", Quota::per_minute(1))
            .build()
            .unwrap(),
        HeaderKey::from_static("x-api-key"),
    )
    .jitter(Duration::from_secs(61))
    .build()
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config {
                field: "jitter",
                ..
            }
        ),
        "{err}"
    );
}

/// A subject an operator blocked is refused as abnormal usage (draft
/// §5.3), not as a used-up quota; a multi-limit names only the limits that
/// denied.
#[tokio::test]
async fn a_blocked_subject_is_abnormal_usage_and_only_denying_limits_are_named() {
    let cluster = common::cluster("hdr-block").await;
    let fast = three_per_six(&cluster, "fast");
    let hourly = RateLimiter::builder(&cluster, "hourly", Quota::per_hour(100))
        .build()
        .unwrap();
    // The API key is a credential: an operator blocks its digest.
    let bad = cluster.subject_hasher().hash("bad");
    hourly.block(bad, Duration::from_secs(30)).await.unwrap();
    let multi = MultiLimiter::new([fast, hourly]).unwrap();
    let service = RateLimitLayer::builder(multi, HeaderKey::from_static("x-api-key"))
        .missing_key(MissingKey::Reject)
        .build()
        .unwrap()
        .layer(ok_inner());

    let blocked = service.clone().oneshot(request("-", "bad")).await.unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        blocked.body(),
        "{\"type\":\"https://iana.org/assignments/http-problem-types#abnormal-usage-detected\",\
         \"title\":\"Abnormal Usage Detected\",\"status\":429,\"violated-policies\":[\"hourly\"]}"
    );
    let retry_after: u64 = text(&blocked, "retry-after")[0].parse().unwrap();
    assert!((29..=30).contains(&retry_after), "{retry_after}");
    assert_eq!(
        text(&blocked, "ratelimit"),
        [format!("\"hourly\";r=0;t={retry_after}")]
    );

    for _ in 0..3 {
        service.clone().oneshot(request("-", "good")).await.unwrap();
    }
    let over = service.clone().oneshot(request("-", "good")).await.unwrap();
    assert_eq!(
        over.body(),
        &format!(
            "{{\"type\":\"{QUOTA_EXCEEDED}\",\"title\":\"Quota Exceeded\",\"status\":429,\
             \"violated-policies\":[\"fast\"]}}"
        )
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
