//! The HTTP layer (feature `tower`) against the six-node cluster: driven with
//! `tower::ServiceExt::oneshot`, through an axum `Router`, and through a real
//! axum server on a loopback port.
//!
//! Timing: limits refill at one unit per 2 s, so consecutive requests of a
//! test see exact counts unless a request takes more than a second; the one
//! wait ("after Retry-After seconds") sleeps the advertised time, which is
//! enough by construction (both waits are measured on the server's clock).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::http::{http_get, serve_with_connect_info};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use shardlimit::tower::{
    ForwardedIp, HeaderKey, MissingKey, PeerIp, ProxyHeader, RateLimitBypassed, RateLimitLayer,
};
use shardlimit::{
    Cluster, Error, FailurePolicy, MultiLimiter, Quota, RateLimiter, policy::BypassReason,
};
use tower::{Layer, Service, ServiceExt, service_fn};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// GCRA, 3 per 6 s: a burst of 3, then one more every 2 s.
fn three_per_six(cluster: &Cluster, name: &str) -> RateLimiter {
    RateLimiter::builder(
        cluster,
        name,
        Quota::with_period(nz(3), Duration::from_secs(6)),
    )
    .build()
    .unwrap()
}

/// An inner service that counts its calls and answers 200 "ok".
fn counting_inner(
    calls: Arc<AtomicU32>,
) -> impl Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    service_fn(move |_req: Request<String>| {
        calls.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
    })
}

fn with_key(key: &str) -> Request<String> {
    Request::builder()
        .header("x-api-key", key)
        .body(String::new())
        .unwrap()
}

fn header<B>(response: &Response<B>, name: &str) -> Option<String> {
    let values: Vec<_> = response
        .headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// `RateLimit` items as `(name, r, t)`.
fn ratelimit<B>(response: &Response<B>) -> Vec<(String, u64, u64)> {
    let Some(value) = header(response, "ratelimit") else {
        return Vec::new();
    };
    value
        .split(", ")
        .map(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap().trim_matches('"').to_owned();
            let mut param = |key: &str| {
                let p = parts.next().unwrap();
                p.strip_prefix(key).unwrap().parse::<u64>().unwrap()
            };
            let r = param("r=");
            let t = param("t=");
            (name, r, t)
        })
        .collect()
}

#[tokio::test]
async fn the_request_over_the_limit_gets_429_with_retry_after_and_ratelimit_headers() {
    let cluster = common::cluster("tower-429").await;
    let calls = Arc::new(AtomicU32::new(0));
    let service = RateLimitLayer::new(
        three_per_six(&cluster, "api"),
        HeaderKey::from_static("x-api-key"),
    )
    .layer(counting_inner(calls.clone()));

    // The limit: admitted, each with the headers; `t` is when more than `r`
    // is free: the next unit, in 2 s.
    for remaining in [2u64, 1, 0] {
        let response = service.clone().oneshot(with_key("k-1")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), "ok");
        assert_eq!(
            header(&response, "ratelimit-policy").as_deref(),
            Some("\"api\";q=5;w=6;shardlimit-burst=3")
        );
        assert_eq!(ratelimit(&response), [("api".into(), remaining, 2)]);
        assert_eq!(header(&response, "retry-after"), None);
    }

    // One more: 429, and the inner service is not called.
    let denied = service.clone().oneshot(with_key("k-1")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&denied, "content-type").as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        denied.body(),
        "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
         \"title\":\"Quota Exceeded\",\"status\":429,\"violated-policies\":[\"api\"]}"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    let retry_after: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
    // The next unit frees up 2 s after the first request, rounded up.
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    assert_eq!(
        header(&denied, "ratelimit-policy").as_deref(),
        Some("\"api\";q=5;w=6;shardlimit-burst=3")
    );
    assert_eq!(ratelimit(&denied), [("api".into(), 0, retry_after)]);
    // The limiter agrees, on the server's clock.
    // The API key is a credential: limited under its keyed digest.
    let k1 = cluster.subject_hasher().hash("k-1");
    let peek = three_per_six(&cluster, "api").peek(k1).await.unwrap();
    assert!(peek.retry_after.unwrap() <= Duration::from_secs(retry_after));

    // Another key is unaffected.
    let other = service.clone().oneshot(with_key("k-2")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(ratelimit(&other), [("api".into(), 2, 2)]);

    // After Retry-After seconds the first key is admitted again.
    tokio::time::sleep(Duration::from_secs(retry_after) + Duration::from_millis(20)).await;
    let again = service.clone().oneshot(with_key("k-1")).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);

    let stats = cluster.stats();
    let s = stats.get("gcra", "api").unwrap();
    assert_eq!((s.allowed, s.denied), (5, 1));
    assert_eq!(calls.load(Ordering::Relaxed), 5);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn an_axum_router_limits_by_peer_ip() {
    let cluster = common::cluster("tower-axum").await;
    let per_ip = RateLimiter::builder(&cluster, "ip", Quota::per_minute(nz(2)))
        .build()
        .unwrap();
    let app = peer_app(per_ip, PeerIp::from_extension(connect_info));
    let from = |ip: &str| from_peer(ip, &[]);

    for remaining in [1, 0] {
        let response = app.clone().oneshot(from("203.0.113.7")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(ratelimit(&response)[0].1, remaining);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello");
    }
    let denied = app.clone().oneshot(from("203.0.113.7")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&denied, "retry-after").is_some());
    // Another address, and the same address written IPv4-mapped.
    let other = app.clone().oneshot(from("198.51.100.1")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    let mapped = app
        .clone()
        .oneshot(from("[::ffff:203.0.113.7]"))
        .await
        .unwrap();
    assert_eq!(mapped.status(), StatusCode::TOO_MANY_REQUESTS);
    // No connection info at all: rejected by the default policy.
    let anonymous = app
        .clone()
        .oneshot(Request::new(Body::empty()))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::BAD_REQUEST);

    // The key is the address as text, under the limiter's name.
    let stored = format!("{}:{{203.0.113.7}}:gcra:ip", cluster.namespace());
    assert!(common::pttl(stored.as_bytes()).await > 0, "{stored}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// A real server: `axum::serve` with connect info, a raw HTTP/1.1 client.
#[tokio::test]
async fn a_served_axum_app_answers_429_over_the_wire() {
    let cluster = common::cluster("tower-serve").await;
    let per_ip = RateLimiter::builder(&cluster, "ip", Quota::per_minute(nz(1)))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(
            per_ip,
            PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0),
        ));
    let (addr, server) = serve_with_connect_info(app).await;
    let get = || http_get(addr, "/");
    let first = get().await;
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(
        first.contains("\r\nratelimit: \"ip\";r=0;t=60\r\n"),
        "{first}"
    );
    let second = get().await;
    assert!(
        second.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{second}"
    );
    assert!(second.contains("\r\nretry-after: 60\r\n"), "{second}");
    assert!(
        second.contains("\r\nratelimit-policy: \"ip\";q=1;w=60;shardlimit-burst=1\r\n"),
        "{second}"
    );
    assert!(
        second.ends_with(",\"status\":429,\"violated-policies\":[\"ip\"]}"),
        "{second}"
    );
    server.abort();
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_multi_limit_lists_every_policy_and_the_binding_limit_and_denies_on_the_tightest() {
    let cluster = common::cluster("tower-multi").await;
    let per_second = three_per_six(&cluster, "key-fast");
    let per_hour = RateLimiter::builder(&cluster, "key-1h", Quota::per_hour(nz(1000)))
        .build()
        .unwrap();
    let multi = MultiLimiter::new([per_second, per_hour]).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let service = RateLimitLayer::new(multi, HeaderKey::from_static("x-api-key"))
        .layer(counting_inner(calls.clone()));

    for remaining in [2, 1, 0] {
        let response = service.clone().oneshot(with_key("k")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            header(&response, "ratelimit-policy").as_deref(),
            Some(
                "\"key-fast\";q=5;w=6;shardlimit-burst=3, \"key-1h\";q=1999;w=3600;shardlimit-burst=1000"
            )
        );
        // `RateLimit` names the limit closest to exhaustion only.
        let items = ratelimit(&response);
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].0.as_str(), items[0].1), ("key-fast", remaining));
    }
    let denied = service.clone().oneshot(with_key("k")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let items = ratelimit(&denied);
    let retry_after: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
    // The denying limit's `t` is the wait; the hourly one was not consumed.
    assert_eq!(items, [("key-fast".into(), 0, retry_after)]);
    assert!(
        denied
            .body()
            .ends_with("\"violated-policies\":[\"key-fast\"]}")
    );
    let peek = MultiLimiter::new([
        three_per_six(&cluster, "key-fast"),
        RateLimiter::builder(&cluster, "key-1h", Quota::per_hour(nz(1000)))
            .build()
            .unwrap(),
    ])
    .unwrap()
    .peek(cluster.subject_hasher().hash("k"))
    .await
    .unwrap();
    assert_eq!(peek.decisions[1].remaining, 997);
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_missing_key_follows_the_configured_policy() {
    let cluster = common::cluster("tower-missing").await;
    let calls = Arc::new(AtomicU32::new(0));
    let build = |name: &str, missing: MissingKey| {
        RateLimitLayer::builder(
            three_per_six(&cluster, name),
            HeaderKey::from_static("x-api-key"),
        )
        .missing_key(missing)
        .build()
        .unwrap()
        .layer(counting_inner(calls.clone()))
    };
    let keyless = || Request::new(String::new());

    // Reject (the default): 400, nothing checked, the inner service not called.
    let reject = build("reject", MissingKey::Reject);
    for request in [keyless(), with_key("")] {
        let response = reject.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(header(&response, "ratelimit"), None);
    }
    assert_eq!(calls.load(Ordering::Relaxed), 0);

    // Pass: through, unchecked, without headers.
    let pass = build("pass", MissingKey::Pass);
    for _ in 0..5 {
        let response = pass.clone().oneshot(keyless()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
    }
    assert_eq!(calls.load(Ordering::Relaxed), 5);

    // Fallback: every keyless request shares one limit.
    let fallback = build("fallback", MissingKey::fallback("anonymous"));
    for _ in 0..3 {
        let response = fallback.clone().oneshot(keyless()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let denied = fallback.clone().oneshot(with_key("")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let keyed = fallback.clone().oneshot(with_key("k")).await.unwrap();
    assert_eq!(keyed.status(), StatusCode::OK);

    let stats = cluster.stats();
    assert_eq!(stats.get("gcra", "reject").unwrap().allowed, 0);
    assert_eq!(stats.get("gcra", "pass").unwrap().allowed, 0);
    let f = stats.get("gcra", "fallback").unwrap();
    assert_eq!((f.allowed, f.denied), (4, 1));
    let anonymous = format!("{}:{{anonymous}}:gcra:fallback", cluster.namespace());
    assert!(common::pttl(anonymous.as_bytes()).await > 0);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn admitted_responses_can_go_without_headers_and_costs_apply() {
    let cluster = common::cluster("tower-options").await;
    let calls = Arc::new(AtomicU32::new(0));
    let service = RateLimitLayer::builder(
        three_per_six(&cluster, "quiet"),
        HeaderKey::from_static("x-api-key"),
    )
    .headers_on_allowed(false)
    .cost(2)
    .build()
    .unwrap()
    .layer(counting_inner(calls.clone()));
    let first = service.clone().oneshot(with_key("k")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "ratelimit"), None);
    assert_eq!(header(&first, "ratelimit-policy"), None);
    // 2 of 3 used: a second request costing 2 does not fit.
    let second = service.clone().oneshot(with_key("k")).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&second)[0].1, 1);
    assert!(header(&second, "retry-after").is_some());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn with_the_cluster_unreachable_fail_open_passes_and_counts_fail_closed_is_503() {
    let cluster = common::unreachable_cluster().await;
    let quota = Quota::per_second(nz(1));
    let (open, closed) = common::open_and_closed(&cluster, quota);
    let calls = Arc::new(AtomicU32::new(0));
    let open = RateLimitLayer::new(open, HeaderKey::from_static("x-api-key"))
        .layer(counting_inner(calls.clone()));
    let closed = RateLimitLayer::new(closed, HeaderKey::from_static("x-api-key"))
        .layer(counting_inner(calls.clone()));

    // More than the limit: without Redis nothing is limited, but counted.
    for _ in 0..3 {
        let response = open.clone().oneshot(with_key("k")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // A bypass knows nothing about the quota: no headers.
        assert_eq!(header(&response, "ratelimit"), None);
    }
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    for _ in 0..3 {
        let response = closed.clone().oneshot(with_key("k")).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.body(),
            "{\"type\":\"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity\",\
             \"title\":\"Temporary Reduced Capacity\",\"status\":503,\"violated-policies\":[\"closed\"]}"
        );
    }
    assert_eq!(calls.load(Ordering::Relaxed), 3);

    let stats = cluster.stats();
    let o = stats.get("gcra", "open").unwrap();
    assert_eq!((o.allowed, o.bypassed, o.errors), (0, 3, 0));
    let c = stats.get("gcra", "closed").unwrap();
    assert_eq!((c.allowed, c.bypassed, c.errors), (0, 0, 3));
}

#[tokio::test]
async fn the_builder_validates_cost_and_fallback_key() {
    let cluster = common::unreachable_cluster().await;
    let limiter = || {
        RateLimiter::builder(&cluster, "v", Quota::per_second(nz(5)))
            .build()
            .unwrap()
    };
    let key = HeaderKey::from_static("x-api-key");
    for cost in [0, 6] {
        let err = RateLimitLayer::builder(limiter(), key.clone())
            .cost(cost)
            .build()
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidCost { max: 5, .. }),
            "{cost}: {err}"
        );
    }
    for bad in [
        Vec::new(),
        vec![b'k'; shardlimit::keys::MAX_SUBJECT_LEN + 1],
    ] {
        let err = RateLimitLayer::builder(limiter(), key.clone())
            .missing_key(MissingKey::fallback(bad))
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Config {
                    field: "missing_key",
                    ..
                }
            ),
            "{err}"
        );
    }
    let _valid = RateLimitLayer::builder(limiter(), key)
        .cost(5)
        .missing_key(MissingKey::fallback("anonymous"))
        .build()
        .unwrap();
}

#[tokio::test]
async fn keys_over_the_subject_limit_are_limited_like_any_other() {
    let cluster = common::cluster("tower-long").await;
    let calls = Arc::new(AtomicU32::new(0));
    // A JWT-sized bearer token, and another differing only in its last byte.
    let token = format!("{}a", "eyJhbGciOiJSUzI1NiJ9.".repeat(60));
    let other = format!("{}b", &token[..token.len() - 1]);
    assert!(token.len() > shardlimit::keys::MAX_SUBJECT_LEN);
    for missing in [MissingKey::Pass, MissingKey::Reject] {
        let name = format!("{missing:?}").to_lowercase();
        let service = RateLimitLayer::builder(
            three_per_six(&cluster, &name),
            HeaderKey::from_static("x-api-key"),
        )
        .missing_key(missing)
        .build()
        .unwrap()
        .layer(counting_inner(calls.clone()));
        for remaining in [2u64, 1, 0] {
            let response = service.clone().oneshot(with_key(&token)).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{name}");
            assert_eq!(ratelimit(&response), [(name.clone(), remaining, 2)]);
        }
        let denied = service.clone().oneshot(with_key(&token)).await.unwrap();
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS, "{name}");
        // Its own limit, not one shared by every long key.
        let response = service.clone().oneshot(with_key(&other)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{name}");
    }
    assert_eq!(calls.load(Ordering::Relaxed), 8);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Issue 42, item 6: an API key is a credential, so the layer's default
/// keeps it out of Redis: no key name on any master holds it.
#[tokio::test]
async fn a_header_key_is_never_stored_raw_by_default() {
    let cluster = common::cluster("tower-cred").await;
    let calls = Arc::new(AtomicU32::new(0));
    let service = RateLimitLayer::new(
        three_per_six(&cluster, "api"),
        HeaderKey::from_static("x-api-key"),
    )
    .layer(counting_inner(calls.clone()));
    let secret = "sk-live-4eC39HqLyjWD";
    for _ in 0..3 {
        let response = service.clone().oneshot(with_key(secret)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let denied = service.clone().oneshot(with_key(secret)).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);

    // Every key under the namespace, scanned on every master (the
    // catalog's and the throttled reports' are no limits).
    let keys = common::all_keys_with_pttl(cluster.namespace()).await;
    let limited: Vec<String> = keys
        .iter()
        .map(|(key, _)| String::from_utf8_lossy(key).into_owned())
        .filter(|key| {
            !key.contains("{shardlimit.catalog}") && !key.contains("{shardlimit:throttled}")
        })
        .collect();
    assert_eq!(limited.len(), 1, "{limited:?}");
    for (key, _) in &keys {
        let key = String::from_utf8_lossy(key);
        assert!(!key.contains(secret), "the raw API key is in Redis: {key}");
    }
    // It is limited under the cluster's keyed digest: what an operator's
    // lookup by the raw key finds.
    let digest = cluster.subject_hasher().hash(secret);
    assert!(digest.as_str().starts_with("hmac:"), "{digest}");
    assert!(limited[0].contains(digest.as_str()), "{limited:?}");
    let peek = three_per_six(&cluster, "api").peek(digest).await.unwrap();
    assert_eq!(peek.remaining, 0);
    // The throttled report (on by default) names the subject as it was
    // limited: the digest, never the raw key.
    let started = std::time::Instant::now();
    let reported = loop {
        let view = shardlimit::admin::throttled(&cluster).await.unwrap();
        if let Some(api) = view.names.iter().find(|n| n.name == "api") {
            break api.subjects.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{view:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0].subject, digest.as_str().as_bytes());

    // A header that is no credential, said so, is kept as it is.
    let tenants = RateLimitLayer::new(
        three_per_six(&cluster, "tenant"),
        HeaderKey::from_static("x-tenant").credential(false),
    )
    .layer(counting_inner(calls.clone()));
    let request = Request::builder()
        .header("x-tenant", "acme")
        .body(String::new())
        .unwrap();
    assert_eq!(
        tenants.oneshot(request).await.unwrap().status(),
        StatusCode::OK
    );
    let peek = three_per_six(&cluster, "tenant")
        .peek("acme")
        .await
        .unwrap();
    assert_eq!(peek.remaining, 2);
}

/// With a subject secret, every process given it limits a key under the
/// same digest, which no process without it computes.
#[tokio::test]
async fn processes_with_one_subject_secret_share_a_credentials_limit() {
    let namespace = common::unique_namespace("tower-secret");
    let secret = "3f8a1c9e7b2d4f60a5c8e1b7d9f2a4c6";
    let process = || async {
        Cluster::builder(common::node_urls())
            .namespace(&namespace)
            .subject_secret(secret)
            .build()
            .await
            .unwrap()
    };
    let (one, two) = (process().await, process().await);
    assert!(one.subject_hasher().has_secret());
    let calls = Arc::new(AtomicU32::new(0));
    let service = |cluster: &Cluster| {
        RateLimitLayer::new(
            three_per_six(cluster, "api"),
            HeaderKey::from_static("x-api-key"),
        )
        .layer(counting_inner(calls.clone()))
    };
    let key = "k-42";
    for cluster in [&one, &two, &one] {
        let response = service(cluster).oneshot(with_key(key)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let denied = service(&two).oneshot(with_key(key)).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let digest = one.subject_hasher().hash(key);
    assert_eq!(digest, two.subject_hasher().hash(key));
    let unkeyed = shardlimit::keys::SubjectHasher::for_namespace(&namespace).hash(key);
    assert_ne!(digest, unkeyed);
    let keys = common::keys_with_pttl(&namespace).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let stored = String::from_utf8(keys[0].0.clone()).unwrap();
    assert!(stored.contains(digest.as_str()), "{stored}");
}

#[tokio::test]
async fn with_hash_keys_no_key_is_stored_verbatim() {
    let cluster = common::cluster("tower-hash").await;
    let calls = Arc::new(AtomicU32::new(0));
    let service = RateLimitLayer::builder(
        three_per_six(&cluster, "api"),
        HeaderKey::from_static("x-api-key"),
    )
    .hash_keys(true)
    .build()
    .unwrap()
    .layer(counting_inner(calls.clone()));
    let secret = "sk-live-51Hx9Q";
    for _ in 0..3 {
        let response = service.clone().oneshot(with_key(secret)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let denied = service.clone().oneshot(with_key(secret)).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);

    let keys = common::keys_with_pttl(cluster.namespace()).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = String::from_utf8(keys[0].0.clone()).unwrap();
    assert!(!key.contains(secret), "{key}");
    // The same digest a caller gets from the cluster's hasher.
    let digest = cluster.subject_hasher().hash(secret);
    assert!(key.contains(digest.as_str()), "{key}");
    let peek = three_per_six(&cluster, "api").peek(digest).await.unwrap();
    assert_eq!(peek.remaining, 0);
}

/// An axum router limited by `limiter` under the key `extractor` takes;
/// `from_peer` makes a request from `peer` (with or without a port) as axum
/// would: with `ConnectInfo`.
fn peer_app<X>(limiter: RateLimiter, extractor: X) -> Router
where
    X: shardlimit::tower::KeyExtractor<Body>,
{
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(limiter, extractor))
}

fn from_peer(peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::builder().uri("/");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let mut req = req.body(Body::empty()).unwrap();
    let addr: SocketAddr = peer
        .parse()
        .or_else(|_| format!("{peer}:40000").parse())
        .or_else(|_| format!("[{peer}]:40000").parse())
        .unwrap();
    req.extensions_mut().insert(ConnectInfo(addr));
    req
}

fn connect_info(info: &ConnectInfo<SocketAddr>) -> SocketAddr {
    info.0
}

#[tokio::test]
async fn ipv6_peers_in_one_64_share_a_limit_and_other_64s_do_not() {
    let cluster = common::cluster("tower-v6").await;
    let per_ip = RateLimiter::builder(&cluster, "ip", Quota::per_minute(nz(2)))
        .build()
        .unwrap();
    let app = peer_app(per_ip, PeerIp::from_extension(connect_info));
    let status = |peer: &'static str| {
        let app = app.clone();
        async move { app.oneshot(from_peer(peer, &[])).await.unwrap().status() }
    };

    // Two addresses of one /64 (a client rotating its interface id).
    assert_eq!(status("2001:db8:1:2::1").await, StatusCode::OK);
    assert_eq!(status("2001:db8:1:2:ffff:1:2:3").await, StatusCode::OK);
    assert_eq!(
        status("2001:db8:1:2::abcd").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The neighbouring /64 has its own limit.
    assert_eq!(status("2001:db8:1:3::1").await, StatusCode::OK);

    // The key is the network, readable.
    let stored = format!("{}:{{2001:db8:1:2::/64}}:gcra:ip", cluster.namespace());
    assert!(common::pttl(stored.as_bytes()).await > 0, "{stored}");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Behind load balancers in 10.0.0.0/8: the client from `X-Forwarded-For`
/// or `Forwarded`, only when the peer is one of them.
#[tokio::test]
async fn forwarded_headers_count_only_from_trusted_proxies() {
    let cluster = common::cluster("tower-proxy").await;
    let per_client = |name: &str| {
        RateLimiter::builder(&cluster, name, Quota::per_minute(nz(2)))
            .build()
            .unwrap()
    };
    let client_ip = |header| {
        ForwardedIp::builder(PeerIp::from_extension(connect_info), header)
            .trust("10.0.0.0/8")
            .build()
            .unwrap()
    };
    let xff_app = peer_app(per_client("xff"), client_ip(ProxyHeader::XForwardedFor));
    let status = |app: &Router, peer: &str, headers: &[(&str, &str)]| {
        let request = from_peer(peer, headers);
        let app = app.clone();
        async move { app.oneshot(request).await.unwrap().status() }
    };

    // An untrusted peer spoofing a new address each time: still its own key.
    let attacker = "198.51.100.66";
    for spoofed in ["192.0.2.1", "192.0.2.2"] {
        let xff = [("x-forwarded-for", spoofed)];
        assert_eq!(status(&xff_app, attacker, &xff).await, StatusCode::OK);
    }
    let xff = [("x-forwarded-for", "192.0.2.3")];
    assert_eq!(
        status(&xff_app, attacker, &xff).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // The same header from a trusted balancer names the client: two
    // clients behind one balancer have their own limits.
    for client in ["192.0.2.1", "192.0.2.1", "192.0.2.2"] {
        let xff = [("x-forwarded-for", client)];
        assert_eq!(status(&xff_app, "10.0.0.2", &xff).await, StatusCode::OK);
    }
    // The client prepending an address of its own changes nothing.
    let xff = [("x-forwarded-for", "203.0.113.99, 192.0.2.1")];
    assert_eq!(
        status(&xff_app, "10.0.0.2", &xff).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The balancer itself was never limited as a client.
    let ns = cluster.namespace();
    for (key, limited) in [
        ("198.51.100.66", true),
        ("192.0.2.1", true),
        ("192.0.2.2", true),
        ("192.0.2.3", false),
        ("10.0.0.2", false),
    ] {
        let stored = format!("{ns}:{{{key}}}:gcra:xff");
        assert_eq!(
            common::pttl(stored.as_bytes()).await > 0,
            limited,
            "{stored}"
        );
    }

    // `Forwarded` with a quoted IPv6 client: its /64 is the key.
    let fwd_app = peer_app(per_client("fwd"), client_ip(ProxyHeader::Forwarded));
    for (client, expected) in [
        ("for=\"[2001:db8:7:7::1]:4711\"", StatusCode::OK),
        ("for=\"[2001:db8:7:7::2]\";proto=https", StatusCode::OK),
        ("for=\"[2001:db8:7:7::3]\"", StatusCode::TOO_MANY_REQUESTS),
        ("for=\"[2001:db8:7:8::1]\"", StatusCode::OK),
    ] {
        let fwd = [("forwarded", client)];
        assert_eq!(
            status(&fwd_app, "10.0.0.2", &fwd).await,
            expected,
            "{client}"
        );
    }
    let stored = format!("{ns}:{{2001:db8:7:7::/64}}:gcra:fwd");
    assert!(common::pttl(stored.as_bytes()).await > 0, "{stored}");
    common::assert_every_key_has_ttl(ns).await;
}

#[tokio::test]
async fn extractor_builders_refuse_bad_prefixes_and_networks() {
    let peer = |v4, v6| {
        PeerIp::builder(connect_info)
            .ipv4_prefix(v4)
            .ipv6_prefix(v6)
            .build()
    };
    for (v4, v6, field) in [
        (32, 0, "ipv6_prefix"),
        (32, 129, "ipv6_prefix"),
        (33, 64, "ipv4_prefix"),
    ] {
        let err = peer(v4, v6).unwrap_err();
        assert!(
            matches!(err, Error::Config { field: f, .. } if f == field),
            "{err}"
        );
    }
    let valid = peer(24, 48).unwrap();
    for bad in ["10.0.0.0/0", "10.0.0.1/8", "lb.internal", "2001:db8::/129"] {
        let err = ForwardedIp::builder(valid, ProxyHeader::XForwardedFor)
            .trust(bad)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Config {
                    field: "trusted_proxies",
                    ..
                }
            ),
            "{bad}: {err}"
        );
    }
}

/// Shadow mode behind the layer: nothing gets a 429, every response still
/// carries the RateLimit headers (0 remaining once over the limit), and the
/// would-be denials are counted.
#[tokio::test]
async fn a_shadow_limiter_refuses_nothing_and_still_sends_the_headers() {
    let cluster = common::cluster("tower-shadow").await;
    let limiter = RateLimiter::builder(
        &cluster,
        "trial",
        Quota::with_period(nz(3), Duration::from_secs(6)),
    )
    .shadow(true)
    .build()
    .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let service = RateLimitLayer::new(limiter, HeaderKey::from_static("x-api-key"))
        .layer(counting_inner(calls.clone()));
    for (i, remaining) in [2u64, 1, 0, 0, 0].into_iter().enumerate() {
        let response = service.clone().oneshot(with_key("k")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        assert_eq!(header(&response, "retry-after"), None);
        let limits = ratelimit(&response);
        assert_eq!(limits.len(), 1, "request {i}: {limits:?}");
        assert_eq!((limits[0].0.as_str(), limits[0].1), ("trial", remaining));
    }
    assert_eq!(calls.load(Ordering::Relaxed), 5);
    let s = cluster.stats().get("gcra", "trial").cloned().unwrap();
    assert_eq!((s.allowed, s.would_deny, s.denied), (3, 2, 0));
}

/// Issue 28, item 1: an axum app served with connect info is limited per
/// peer by `PeerIp::connect_info()` and by `PeerIp::new()` (which read a
/// plain `SocketAddr` only, so every request was a 400); an extractor
/// whose extension is missing says which one, once, in the log.
/// `#[tokio::test]` runs the server on this thread, so the thread-local
/// subscriber sees its warnings.
#[tokio::test]
async fn peer_ip_finds_axum_connect_info_and_a_missing_key_names_the_extension() {
    let cluster = common::cluster("tower-peer").await;
    let one_per_minute = |name: &str| {
        RateLimiter::builder(&cluster, name, Quota::per_minute(1))
            .build()
            .unwrap()
    };
    let app = Router::new()
        .route("/connect-info", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(
            one_per_minute("by-connect-info"),
            PeerIp::connect_info(),
        ))
        .merge(
            Router::new()
                .route("/new", get(|| async { "hello" }))
                .layer(RateLimitLayer::new(one_per_minute("by-new"), PeerIp::new())),
        )
        .merge(
            Router::new()
                .route("/socket-addr", get(|| async { "hello" }))
                .layer(RateLimitLayer::new(
                    one_per_minute("by-socket-addr"),
                    PeerIp::from_extension(|addr: &SocketAddr| *addr),
                )),
        );
    let (logs, _guard) = common::LogLines::capture();
    let (addr, server) = serve_with_connect_info(app).await;

    for path in ["/connect-info", "/new"] {
        let first = http_get(addr, path).await;
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {first}");
        let second = http_get(addr, path).await;
        assert!(
            second.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{path}: {second}"
        );
    }
    for name in ["by-connect-info", "by-new"] {
        let stored = format!("{}:{{127.0.0.1}}:gcra:{name}", cluster.namespace());
        assert!(common::pttl(stored.as_bytes()).await > 0, "{stored}");
    }

    // No plain `SocketAddr` in an axum request: 400, and one warning that
    // says what was looked for (three requests, one line).
    for _ in 0..3 {
        let reply = http_get(addr, "/socket-addr").await;
        assert!(reply.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{reply}");
    }
    let text = logs.text();
    let warnings: Vec<_> = text
        .lines()
        .filter(|line| line.contains("no rate-limit key"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("WARN")
            && warnings[0].contains("looked_for=the request extension core::net::")
            && warnings[0].contains("SocketAddr (with axum")
            && warnings[0].contains("into_make_service_with_connect_info")
            && warnings[0].contains("by-socket-addr"),
        "{}",
        warnings[0]
    );
    server.abort();
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Issue 28, item 5: under a subject's override, `RateLimit-Policy` states
/// the override's quota (it stated the limiter's default), and after a
/// live `set_quota` the new one.
#[tokio::test]
async fn ratelimit_policy_follows_the_quota_the_check_applied() {
    let cluster = common::cluster("tower-override").await;
    let limiter = RateLimiter::builder(&cluster, "api", Quota::per_second(10))
        .build()
        .unwrap();
    // The API key is a credential: its override is set on its digest.
    limiter
        .set_override(
            cluster.subject_hasher().hash("vip"),
            Quota::per_second(50).allow_burst(100),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let service = RateLimitLayer::new(limiter.clone(), HeaderKey::from_static("x-api-key"))
        .layer(counting_inner(calls.clone()));

    let vip = service.clone().oneshot(with_key("vip")).await.unwrap();
    assert_eq!(vip.status(), StatusCode::OK);
    assert_eq!(
        header(&vip, "ratelimit-policy").as_deref(),
        Some("\"api\";q=149;w=1;shardlimit-burst=100")
    );
    assert_eq!(ratelimit(&vip)[0].1, 99);

    let plain = service.clone().oneshot(with_key("someone")).await.unwrap();
    assert_eq!(
        header(&plain, "ratelimit-policy").as_deref(),
        Some("\"api\";q=19;w=1;shardlimit-burst=10")
    );

    limiter.set_quota(Quota::per_second(20)).unwrap();
    let after = service.clone().oneshot(with_key("someone")).await.unwrap();
    assert_eq!(
        header(&after, "ratelimit-policy").as_deref(),
        Some("\"api\";q=39;w=1;shardlimit-burst=20")
    );
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Issue 28, item 9: a request a fail-open layer let through without a
/// decision says so — `RateLimitBypassed` in the request's extensions (the
/// handler sees it) and the response's, and `shardlimit-bypassed` when
/// asked for; a decided request has neither. The bypass is real: a lazily
/// connected handle before its topology is read.
#[tokio::test]
async fn a_bypassed_request_carries_the_signal_and_a_decided_one_does_not() {
    let cluster = common::builder("tower-bypass-signal")
        .lazy_connect(true)
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::builder(&cluster, "api", Quota::per_minute(100))
        .failure_policy(FailurePolicy::FailOpen)
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(limiter, HeaderKey::from_static("x-api-key"))
        .bypass_header(true)
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(
                |bypassed: Option<Extension<RateLimitBypassed>>| async move {
                    match bypassed {
                        Some(Extension(signal)) => format!("bypassed: {}", signal.reason),
                        None => "limited".to_owned(),
                    }
                },
            ),
        )
        .layer(layer);
    let request = || {
        Request::builder()
            .uri("/")
            .header("x-api-key", "k")
            .body(Body::empty())
            .unwrap()
    };

    let first = app.clone().oneshot(request()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        first
            .extensions()
            .get::<RateLimitBypassed>()
            .map(|b| b.reason),
        Some(BypassReason::Connection)
    );
    assert_eq!(
        header(&first, "shardlimit-bypassed").as_deref(),
        Some("connection")
    );
    assert_eq!(header(&first, "ratelimit"), None);
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"bypassed: connection");

    cluster.wait_ready(Duration::from_secs(10)).await.unwrap();
    let second = app.clone().oneshot(request()).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert!(second.extensions().get::<RateLimitBypassed>().is_none());
    assert_eq!(header(&second, "shardlimit-bypassed"), None);
    assert!(header(&second, "ratelimit").is_some());
    let body = second.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"limited");
    let stats = cluster.stats();
    let s = stats.get("gcra", "api").unwrap();
    assert_eq!((s.bypassed, s.allowed), (1, 1));
}

/// Issue 28, item 2: with a per-IP layer outside a per-key one, a request
/// the per-key layer refuses no longer spends the IP's quota (it did: 40
/// requests, 22 admitted, the IP charged 40): the outer layer gives its
/// units back. Turned off, the old charge.
#[tokio::test]
async fn stacked_layers_charge_the_outer_limit_only_for_what_both_admit() {
    let cluster = common::cluster("tower-stack").await;
    let per_ip = RateLimiter::builder(&cluster, "ip", Quota::per_hour(100))
        .build()
        .unwrap();
    let app = |refund: bool| {
        let per_key = RateLimiter::builder(&cluster, "key", Quota::per_minute(3))
            .build()
            .unwrap();
        let inner = RateLimitLayer::new(per_key, HeaderKey::from_static("x-api-key"))
            .layer(counting_inner(Arc::new(AtomicU32::new(0))));
        // The client's address, no credential: limited as it is.
        let client = HeaderKey::from_static("x-client").credential(false);
        RateLimitLayer::builder(per_ip.clone(), client)
            .refund_inner_denials(refund)
            .build()
            .unwrap()
            .layer(inner)
    };
    for (refund, client, charged) in [(true, "ip-a", 3), (false, "ip-b", 10)] {
        let service = app(refund);
        let mut admitted = 0;
        for _ in 0..10 {
            let request = Request::builder()
                .header("x-client", client)
                .header("x-api-key", format!("key-of-{client}"))
                .body(String::new())
                .unwrap();
            let response = service.clone().oneshot(request).await.unwrap();
            admitted += u32::from(response.status() == StatusCode::OK);
        }
        assert_eq!(admitted, 3);
        let left = per_ip.peek(client).await.unwrap().remaining;
        assert_eq!(100 - left, charged, "refund {refund}");
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
