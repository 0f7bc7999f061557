//! A gRPC service (tonic) rate-limited on the cluster with the tower layer
//! in gRPC mode — the standard health service stands in for yours:
//!
//! * every call, per peer address (`PeerIp::tonic_connect_info()`): GCRA, 100 per
//!   second, fail-open (an unreachable Redis must not take the service down);
//! * per API key (`x-api-key` metadata): 5 per 10 seconds, fail-closed, as a
//!   sliding log — exactly 5 in any 10 s (the default GCRA with that quota
//!   admits a burst of 5 and then one every 2 s: 9 in some 10 s); a call
//!   without a key is `INVALID_ARGUMENT`.
//!
//! A denied call is `RESOURCE_EXHAUSTED` with `google.rpc.RetryInfo` and
//! `google.rpc.QuotaFailure` in `grpc-status-details-bin`; without Redis, the
//! per-key layer answers `UNAVAILABLE` and the per-peer one lets calls by.
//! It starts with Redis down too (`lazy_connect`): the limits' failure
//! policies answer, no exit at start-up.
//!
//! ```sh
//! cluster-compose/up.sh
//! cargo run --example grpc_service --features tonic            # serves 127.0.0.1:50051
//! cargo run --example grpc_service --features tonic -- --demo  # serves, calls itself 7 times, exits
//! ```
//!
//! `SHARDLIMIT_NODES` picks the cluster, `DEMO_ADDR` the listening address.

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use shardlimit::tower::{HeaderKey, MissingKey, PeerIp, RateLimitLayer};
use shardlimit::{Algorithm, Cluster, FailurePolicy, Quota, RateLimiter};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt as _;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .init();
    let demo = std::env::args().any(|arg| arg == "--demo");
    // Lazily: an unreachable Redis must not keep the service from
    // starting; give it two seconds to be ready before serving.
    let cluster = Cluster::builder_from_env()
        .namespace("grpc-demo")
        .lazy_connect(true)
        .build()
        .await?;
    if let Err(err) = cluster.wait_ready(Duration::from_secs(2)).await {
        tracing::warn!("serving without Redis for now: {err}");
    }

    let per_peer = RateLimiter::builder(&cluster, "rpc-peer", Quota::per_second(100))
        .failure_policy(FailurePolicy::FailOpen)
        .build()?;
    let per_key = RateLimiter::builder(
        &cluster,
        "rpc-key",
        Quota::with_period(5, Duration::from_secs(10)),
    )
    .algorithm(Algorithm::SlidingLog)
    .build()?;
    // The address tonic's server tells, over TCP or TLS.
    let by_peer = RateLimitLayer::builder(per_peer, PeerIp::tonic_connect_info())
        .grpc()
        .build()?;
    let by_key = RateLimitLayer::builder(per_key, HeaderKey::from_static("x-api-key"))
        .missing_key(MissingKey::Reject)
        .grpc()
        .build()?;

    let addr: SocketAddr = match (demo, std::env::var("DEMO_ADDR")) {
        (true, _) => "127.0.0.1:0".parse()?,
        (false, Ok(addr)) => addr.parse()?,
        (false, Err(_)) => "127.0.0.1:50051".parse()?,
    };
    let incoming = TcpIncoming::bind(addr)?;
    let addr = incoming.local_addr()?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    // The per-peer layer outside (added first): its refusals cost the
    // per-key limit nothing, and it is refunded for what the per-key layer
    // refuses (why this order: docs/http.md, "Stacking limits").
    let server = Server::builder()
        .layer(by_peer)
        .layer(by_key)
        .add_service(health)
        .serve_with_incoming(incoming);
    println!("grpc.health.v1.Health on {addr}");
    if !demo {
        server.await?;
        return Ok(());
    }
    tokio::spawn(server);
    call_seven_times(addr).await
}

/// The demo client: 7 checks with one API key against a limit of 5 per
/// 10 s, printing what a gRPC client sees.
async fn call_seven_times(addr: SocketAddr) -> Result<(), Box<dyn Error>> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    for i in 1..=7 {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request
            .metadata_mut()
            .insert("x-api-key", "demo-key".parse()?);
        match client.check(request).await {
            Ok(response) => {
                let ratelimit = response.metadata().get("ratelimit");
                println!("call {i}: OK, ratelimit: {ratelimit:?}");
            }
            Err(status) => {
                let retry = status.get_details_retry_info();
                let quota = status.get_details_quota_failure();
                println!(
                    "call {i}: {:?} {:?}\n  RetryInfo: {:?}\n  QuotaFailure: {:?}",
                    status.code(),
                    status.message(),
                    retry.and_then(|r| r.retry_delay),
                    quota.map(|q| q.violations),
                );
            }
        }
    }
    Ok(())
}
