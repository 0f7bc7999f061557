//! gRPC services (feature `tonic`): the [tower layer](crate::tower) answering
//! in gRPC statuses, as the gRPC error model specifies, for a tonic server
//! (or any gRPC server built on `http` and tower).
//!
//! A tonic service is a tower service of HTTP/2 requests, so the layer is
//! the same [`RateLimitLayer`](crate::tower::RateLimitLayer) — the same
//! limits, keys, missing-key policy, refunds and bypass signal — built with
//! [`grpc`](crate::tower::RateLimitLayerBuilder::grpc): only what it answers
//! itself changes. A gRPC client reads a status, not an HTTP status code:
//!
//! | outcome | gRPC status | details (`grpc-status-details-bin`) |
//! |---|---|---|
//! | denied | `RESOURCE_EXHAUSTED` | `google.rpc.RetryInfo { retry_delay }` (when every limit would admit the request) and `google.rpc.QuotaFailure`, one violation per limit that denied |
//! | check failed (fail-closed, Redis unreachable; or a configuration fault) | `UNAVAILABLE` | none |
//! | no key, [`MissingKey::Reject`](crate::tower::MissingKey::Reject) | `INVALID_ARGUMENT` | none |
//! | admitted | the service's own | — |
//!
//! Clients that retry `RESOURCE_EXHAUSTED` only when `RetryInfo` is present
//! (OpenTelemetry's exporters, Google's client libraries) then wait
//! `retry_delay` and try again. The rate-limit headers of the
//! [`HeaderStyle`](crate::tower::HeaderStyle) go in the response metadata,
//! denied or admitted (`headers_on_allowed`).
//!
//! Each [`tonic_types::QuotaViolation`] names the limit:
//! `subject` and `quota_id` are the limiter's name, `quota_value` what it
//! admits per period as it advertises it
//! ([`Algorithm::policy_limit`](crate::Algorithm::policy_limit), as HTTP's
//! `RateLimit-Policy`: for GCRA the limit plus the burst less one, which
//! holds in any window of one period), `description` says it in words
//! (`3 per 6s` for a sliding log, `5 per 6s, burst 3` for GCRA's 3 per 6 s,
//! and `blocked` when the subject is [blocked](crate::RateLimiter::block)). The key is
//! not in it: it is the client's identity (an API key) and the client
//! knows it.
//!
//! Keys come from request metadata like HTTP headers — they are HTTP/2
//! headers when the layer sees them: an API key with
//! [`HeaderKey`](crate::tower::HeaderKey) (`x-api-key`), the authority
//! (`:authority`) with [`Authority`](crate::tower::Authority), the peer's
//! address with [`PeerIp::tonic_connect_info`](crate::tower::PeerIp::tonic_connect_info)
//! (tonic's `TcpConnectInfo`). The per-peer layer
//! goes outside, as for HTTP ([why](https://github.com/shardlimit/shardlimit/blob/main/docs/http.md#stacking-limits-one-check-or-one-layer-per-key)):
//!
//! ```no_run
//! # async fn demo(cluster: shardlimit::Cluster) -> Result<(), Box<dyn std::error::Error>> {
//! use shardlimit::{Quota, RateLimiter};
//! use shardlimit::tower::{HeaderKey, PeerIp, RateLimitLayer};
//!
//! let per_key = RateLimiter::builder(&cluster, "rpc-key", Quota::per_second(10)).build()?;
//! let per_peer = RateLimiter::builder(&cluster, "rpc-peer", Quota::per_second(100)).build()?;
//! let by_key = RateLimitLayer::builder(per_key, HeaderKey::from_static("x-api-key"))
//!     .grpc()
//!     .build()?;
//! let by_peer = RateLimitLayer::builder(per_peer, PeerIp::tonic_connect_info())
//!     .grpc()
//!     .build()?;
//! let (_, health) = tonic_health::server::health_reporter();
//! tonic::transport::Server::builder()
//!     .layer(by_peer)
//!     .layer(by_key)
//!     .add_service(health)
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use ::tonic::transport::server::TcpConnectInfo;
use ::tonic::{Code, Status};
use http::Response;
use tonic_types::{ErrorDetails, QuotaViolation, StatusExt as _};

use crate::limit::MultiDecision;
use crate::limit::{Algorithm, Decision, RateLimiter};
use crate::tower::config::Config;
use crate::tower::headers;
use crate::tower::respond::sealed::Respond;
use crate::tower::{PeerIp, RateLimitLayerBuilder};

/// The protocol of a layer built with
/// [`grpc`](RateLimitLayerBuilder::grpc): it refuses with gRPC statuses
/// (see [the module docs](self)). The response body only has to be
/// `Default` (tonic's `Body` is): a refusal is a trailers-only response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grpc;

#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl<X> RateLimitLayerBuilder<X> {
    /// Answer refusals with gRPC statuses — `RESOURCE_EXHAUSTED` with
    /// `RetryInfo` and `QuotaFailure`, `UNAVAILABLE`, `INVALID_ARGUMENT` —
    /// instead of HTTP statuses, for a tonic server (feature `tonic`).
    /// Every other setting stays as set, and the `RESOURCE_EXHAUSTED`
    /// subjects reach "throttled now" as an HTTP layer's 429s do (on by
    /// default: see [`RateLimitLayerBuilder`]).
    ///
    /// ```no_run
    /// # fn demo(limiter: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// use shardlimit::tonic::Grpc;
    /// use shardlimit::tower::{HeaderKey, RateLimitLayer};
    /// let layer: RateLimitLayer<HeaderKey, Grpc> =
    ///     RateLimitLayer::builder(limiter, HeaderKey::from_static("x-api-key"))
    ///         .grpc()
    ///         .build()?;
    /// # Ok(()) }
    /// ```
    pub fn grpc(self) -> RateLimitLayerBuilder<X, Grpc> {
        self.with_protocol()
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl PeerIp<SocketAddr> {
    /// Reads tonic's `TcpConnectInfo`, which tonic's `Server` puts in every
    /// request, over TLS too (feature `tonic`; axum's counterpart is
    /// [`PeerIp::connect_info`](crate::tower::PeerIp)). IPv6 by /64, IPv4
    /// by address. A request without it has no key: another server's, or
    /// one served from your own TLS acceptor's streams
    /// (`serve_with_incoming`), where tonic inserts only
    /// `TlsConnectInfo<TcpConnectInfo>` — read that with
    /// [`PeerIp::from_extensions`](crate::tower::PeerIp::from_extensions)
    /// (`|ext| ext.get::<TlsConnectInfo<TcpConnectInfo>>()?.get_ref().remote_addr()`).
    ///
    /// ```
    /// use http::Request;
    /// use shardlimit::tower::{KeyExtractor, PeerIp};
    /// use tonic::transport::server::TcpConnectInfo;
    ///
    /// let mut req = Request::new(());
    /// req.extensions_mut().insert(TcpConnectInfo {
    ///     local_addr: None,
    ///     remote_addr: "198.51.100.4:50051".parse().ok(),
    /// });
    /// let key = PeerIp::tonic_connect_info().extract(&req).unwrap();
    /// assert_eq!(key.as_ref(), b"198.51.100.4");
    /// ```
    #[must_use]
    pub fn tonic_connect_info() -> Self {
        PeerIp::from_extensions("tonic::transport::server::TcpConnectInfo", |extensions| {
            extensions.get::<TcpConnectInfo>()?.remote_addr()
        })
    }
}

#[allow(private_interfaces)] // See `tower::respond::sealed`.
impl<B: Default> Respond<B> for Grpc {
    fn no_key() -> Response<B> {
        Status::invalid_argument("no rate-limit key in the request").into_http()
    }

    fn unavailable(_config: &Config) -> Response<B> {
        Status::unavailable("the rate limiter cannot decide").into_http()
    }

    fn denied(
        config: &Config,
        verdict: &MultiDecision,
        subject: &[u8],
        jitter: Duration,
    ) -> Response<B> {
        let status = denial(
            config.limits.limiters(),
            &verdict.decisions,
            verdict.retry_after().map(|wait| wait + jitter),
        );
        let mut response = status.into_http();
        headers::add(response.headers_mut(), config, verdict, subject, jitter);
        response
    }
}

/// `RESOURCE_EXHAUSTED` for a denial by the limits among `limiters` whose
/// decisions did not admit the request, with `RetryInfo` when there is a
/// wait.
fn denial(limiters: &[RateLimiter], decisions: &[Decision], wait: Option<Duration>) -> Status {
    let mut message = String::from("rate limit exceeded:");
    let mut violations = Vec::new();
    for (limiter, decision) in limiters.iter().zip(decisions).filter(|(_, d)| !d.allowed) {
        let name = limiter.name();
        // Writing to a String cannot fail.
        let _ = write!(message, " {name}");
        violations.push(violation(name, limiter.algorithm(), decision));
    }
    let mut details = ErrorDetails::with_quota_failure(violations);
    if wait.is_some() {
        details.set_retry_info(wait);
    }
    Status::with_error_details(Code::ResourceExhausted, message, details)
}

/// The `QuotaFailure` violation of one limit that denied: its quota as the
/// algorithm advertises it ([`Algorithm::policy_limit`], as the HTTP
/// `RateLimit-Policy`), and a GCRA's burst.
fn violation(name: &str, algorithm: Algorithm, decision: &Decision) -> QuotaViolation {
    let quota = decision.quota;
    let most = algorithm.policy_limit(&quota);
    let mut description = format!("{most} per {:?}", quota.period());
    if algorithm == Algorithm::Gcra {
        let _ = write!(description, ", burst {}", decision.limit);
    }
    if decision.blocked {
        description.push_str(", blocked");
    }
    QuotaViolation {
        quota_id: name.to_owned(),
        quota_metric: name.to_owned(),
        quota_value: i64::try_from(most).unwrap_or(i64::MAX),
        ..QuotaViolation::new(name, description)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Quota;

    #[test]
    fn a_violation_names_the_limit_and_says_its_quota() {
        let mut decision = Decision::bypass(
            Quota::with_period(3, Duration::from_secs(6)),
            3,
            crate::policy::BypassReason::Timeout,
        );
        let v = violation("api", Algorithm::SlidingLog, &decision);
        assert_eq!((v.subject.as_str(), v.quota_id.as_str()), ("api", "api"));
        assert_eq!((v.description.as_str(), v.quota_value), ("3 per 6s", 3));
        // GCRA, 3 per 6 s with a burst of 3: 5 in some window of 6 s.
        let v = violation("api", Algorithm::Gcra, &decision);
        assert_eq!(
            (v.description.as_str(), v.quota_value),
            ("5 per 6s, burst 3", 5)
        );
        decision.blocked = true;
        assert_eq!(
            violation("api", Algorithm::SlidingLog, &decision).description,
            "3 per 6s, blocked"
        );
    }
}
