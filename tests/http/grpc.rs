//! The layer in gRPC mode (feature `tonic`) in front of a real tonic server
//! (the standard health service), called by a real tonic client over a
//! loopback socket, against the six-node cluster: the client sees the
//! statuses and decodes `RetryInfo` and `QuotaFailure` from
//! `grpc-status-details-bin`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use shardlimit::tonic::Grpc;
use shardlimit::tower::{Authority, HeaderKey, KeyExtractor, PeerIp, RateLimitLayer};
use shardlimit::{Cluster, MultiLimiter, Quota, RateLimiter};
use tonic::body::Body;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt as _;

/// GCRA, 3 per 6 s: a burst of 3, then one more every 2 s.
fn three_per_six(cluster: &Cluster, name: &str) -> RateLimiter {
    RateLimiter::builder(cluster, name, Quota::with_period(3, Duration::from_secs(6)))
        .build()
        .unwrap()
}

/// The health service behind `layer` on a loopback port.
async fn serve<X>(layer: RateLimitLayer<X, Grpc>) -> SocketAddr
where
    X: KeyExtractor<Body> + Clone,
{
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let router = Server::builder().layer(layer).add_service(health);
    tokio::spawn(router.serve_with_incoming(incoming));
    addr
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

/// One health check with `x-api-key: key` (none if empty): the status on
/// failure, and the response's metadata either way.
async fn check(
    client: &mut HealthClient<Channel>,
    key: &str,
) -> Result<tonic::metadata::MetadataMap, Status> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if !key.is_empty() {
        request
            .metadata_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    client
        .check(request)
        .await
        .map(|response| response.metadata().clone())
}

fn text(metadata: &tonic::metadata::MetadataMap, name: &str) -> String {
    metadata.get(name).unwrap().to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_denied_call_is_resource_exhausted_with_retry_info_and_quota_failure() {
    let cluster = common::cluster("grpc-deny").await;
    let per_hour = RateLimiter::builder(&cluster, "key-1h", Quota::per_hour(1000))
        .build()
        .unwrap();
    let multi = MultiLimiter::new([three_per_six(&cluster, "key-fast"), per_hour]).unwrap();
    let layer = RateLimitLayer::builder(multi, HeaderKey::from_static("x-api-key"))
        .grpc()
        .build()
        .unwrap();
    let mut client = client(serve(layer).await).await;

    for remaining in [2, 1, 0] {
        let metadata = check(&mut client, "k-1").await.unwrap();
        // The rate-limit headers travel as response metadata.
        assert_eq!(
            text(&metadata, "ratelimit-policy"),
            "\"key-fast\";q=5;w=6;shardlimit-burst=3, \"key-1h\";q=1999;w=3600;shardlimit-burst=1000"
        );
        assert_eq!(
            text(&metadata, "ratelimit"),
            format!("\"key-fast\";r={remaining};t=2"),
            "the next unit frees in 2 s: {metadata:?}"
        );
    }
    let status = check(&mut client, "k-1").await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "rate limit exceeded: key-fast");
    // The next unit frees 2 s after the first call.
    let retry = status.get_details_retry_info().expect("RetryInfo");
    let delay = retry.retry_delay.expect("retry_delay");
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(2),
        "{delay:?}"
    );
    let failure = status.get_details_quota_failure().expect("QuotaFailure");
    assert_eq!(failure.violations.len(), 1, "{failure:?}");
    let violation = &failure.violations[0];
    assert_eq!(violation.subject, "key-fast");
    assert_eq!(violation.quota_id, "key-fast");
    assert_eq!(violation.quota_value, 5);
    assert_eq!(violation.description, "5 per 6s, burst 3");
    // The denial's metadata states the wait too, rounded up.
    let t = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    assert_eq!(
        text(status.metadata(), "ratelimit"),
        format!("\"key-fast\";r=0;t={t}")
    );

    // Another key is unaffected; after the delay, the first is admitted.
    check(&mut client, "k-2").await.unwrap();
    tokio::time::sleep(delay + Duration::from_millis(20)).await;
    check(&mut client, "k-1").await.unwrap();

    let stats = cluster.stats();
    let fast = stats.get("gcra", "key-fast").unwrap();
    assert_eq!((fast.allowed, fast.denied), (5, 1));
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Fail-closed without Redis: `UNAVAILABLE` (clients retry it with
/// backoff); fail-open: served. No key: `INVALID_ARGUMENT`.
#[tokio::test]
async fn without_redis_fail_closed_is_unavailable_and_a_missing_key_is_invalid_argument() {
    let cluster = common::unreachable_cluster().await;
    let quota = Quota::per_second(1);
    let (open, closed) = common::open_and_closed(&cluster, quota);
    let layer = |limiter| {
        RateLimitLayer::builder(limiter, HeaderKey::from_static("x-api-key"))
            .grpc()
            .build()
            .unwrap()
    };
    let mut closed = client(serve(layer(closed)).await).await;
    let mut open = client(serve(layer(open)).await).await;

    for _ in 0..3 {
        let status = check(&mut closed, "k").await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert_eq!(status.message(), "the rate limiter cannot decide");
        check(&mut open, "k").await.unwrap();
    }
    let status = check(&mut closed, "").await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let stats = cluster.stats();
    assert_eq!(stats.get("gcra", "closed").unwrap().errors, 3);
    assert_eq!(stats.get("gcra", "open").unwrap().bypassed, 3);
}

/// Keys from the connection and the `:authority`: the peer's address
/// (tonic's `TcpConnectInfo`) and the host the client called.
#[tokio::test]
async fn calls_are_keyed_by_peer_address_and_by_authority() {
    let cluster = common::cluster("grpc-keys").await;
    let one_a_minute = |name: &str| {
        RateLimiter::builder(&cluster, name, Quota::per_minute(1))
            .build()
            .unwrap()
    };
    let by_peer = RateLimitLayer::builder(one_a_minute("peer"), PeerIp::tonic_connect_info())
        .grpc()
        .build()
        .unwrap();
    let by_authority = RateLimitLayer::builder(one_a_minute("authority"), Authority)
        .grpc()
        .build()
        .unwrap();

    let peer_addr = serve(by_peer).await;
    let authority_addr = serve(by_authority).await;
    for addr in [peer_addr, authority_addr] {
        let mut client = client(addr).await;
        check(&mut client, "").await.unwrap();
        let status = check(&mut client, "").await.unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{addr}: {status:?}");
        assert!(status.get_details_retry_info().is_some());
    }
    let ns = cluster.namespace();
    let peer_key = format!("{ns}:{{127.0.0.1}}:gcra:peer");
    assert!(common::pttl(peer_key.as_bytes()).await > 0, "{peer_key}");
    let authority_key = format!("{ns}:{{{authority_addr}}}:gcra:authority");
    assert!(
        common::pttl(authority_key.as_bytes()).await > 0,
        "{authority_key}"
    );
    common::assert_every_key_has_ttl(ns).await;
}
