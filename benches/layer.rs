//! The HTTP layer's own cost per request, without the network: a fail-open
//! GCRA limiter on a cluster that is never reachable (every check is a
//! bypass decided in-process), called directly and through
//! `RateLimitLayer` around a trivial service. The difference is what the
//! layer adds: key extraction, the boxed future, header handling.
//!
//! ```text
//! cargo bench --features tower --bench layer
//! ```
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use shardlimit::tower::{HeaderKey, RateLimitLayer};
use shardlimit::{Cluster, FailurePolicy, Quota, RateLimiter};
use tower::{Layer, ServiceExt, service_fn};

/// A request carrying the bench's API key.
fn keyed_request() -> http::Request<String> {
    http::Request::builder()
        .header("x-key", "api-key:7f3a")
        .body(String::new())
        .unwrap()
}

fn layer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = runtime.block_on(async {
        // Port 1: nothing listens; the lazily built handle never connects,
        // so each check fails fast and is bypassed (fail-open).
        let cluster = Cluster::builder(["redis://127.0.0.1:1"])
            .lazy_connect(true)
            .refresh_interval(Duration::from_secs(3600))
            .reconnect_backoff(Duration::from_secs(3600), Duration::from_secs(3600))
            .build()
            .await
            .unwrap();
        RateLimiter::builder(
            &cluster,
            "bench",
            Quota::per_second(NonZeroU32::new(100).unwrap()),
        )
        .failure_policy(FailurePolicy::FailOpen)
        .build()
        .unwrap()
    });
    let service = RateLimitLayer::new(limiter.clone(), HeaderKey::from_static("x-key")).layer(
        service_fn(|_req: http::Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }),
    );
    let bare = service_fn(|_req: http::Request<String>| async {
        Ok::<_, Infallible>(http::Response::new(String::new()))
    });

    let mut group = c.benchmark_group("layer (bypass path, no network)");
    group.bench_function("limiter.check directly", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(limiter.check("api-key:7f3a").await.unwrap()) })
        })
    });
    group.bench_function("request through RateLimitLayer", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let request = keyed_request();
                black_box(service.clone().oneshot(request).await.unwrap())
            })
        })
    });
    group.bench_function("request to the bare service (request building only)", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let request = keyed_request();
                black_box(bare.oneshot(request).await.unwrap())
            })
        })
    });
    group.finish();
}

criterion_group!(benches, layer);
criterion_main!(benches);
