//! HTTP rate limiting for tower services — axum, or hyper with tower — with
//! any shardlimit limiter (feature `tower`).
//!
//! The layer answers some requests itself (400, 429, 503), so the inner
//! service's response body must be buildable from a `String`
//! (`From<String>`): axum's `Body`, `http_body_util::Full<Bytes>` and
//! `String` are.
//!
//! * [`RateLimitLayer`] — the layer: [`new`](RateLimitLayer::new) with the
//!   defaults, or [`builder`](RateLimitLayer::builder).
//! * [`Limits`] — a [`RateLimiter`](crate::RateLimiter) or a
//!   [`MultiLimiter`](crate::MultiLimiter).
//! * [`KeyExtractor`] — what a request is limited by: any closure
//!   `Fn(&Request<B>) -> Option<K>`, or [`PeerIp`] (the client address;
//!   IPv6 by its /64; with axum, [`PeerIp::connect_info`], feature `axum`;
//!   with tonic, `PeerIp::tonic_connect_info`, feature `tonic`), [`ForwardedIp`] (the client address behind trusted
//!   proxies) or [`HeaderKey`] (a header value, e.g. an API key).
//! * [`HeaderStyle`], [`QuotaUnit`] — which rate-limit fields responses
//!   carry, and what the limits count.
//! * [`Http`] — how the layer refuses by default (400, 429, 503); with
//!   feature `tonic`, `RateLimitLayerBuilder::grpc` makes it
//!   refuse with gRPC statuses instead (see the `shardlimit::tonic` module).
//! * [`MissingKey`] — what happens to a request without a key: 400, pass,
//!   or a shared fallback key.
//!
//! ```no_run
//! # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
//! use std::num::NonZeroU32;
//! use axum::{Router, routing::get};
//! use shardlimit::{MultiLimiter, Quota, RateLimiter};
//! use shardlimit::tower::{HeaderKey, MissingKey, RateLimitLayer};
//! let nz = |n| NonZeroU32::new(n).unwrap();
//!
//! // Per API key: 10 per second and 1000 per hour, checked in one script.
//! let per_second = RateLimiter::builder(&cluster, "key-1s", Quota::per_second(nz(10))).build()?;
//! let per_hour = RateLimiter::builder(&cluster, "key-1h", Quota::per_hour(nz(1000))).build()?;
//! let per_key = RateLimitLayer::builder(
//!     MultiLimiter::new([per_second, per_hour])?,
//!     HeaderKey::from_static("x-api-key"),
//! )
//! .missing_key(MissingKey::Reject)
//! .build()?;
//!
//! let app: Router = Router::new().route("/api/items", get(|| async { "[]" })).layer(per_key);
//! # Ok(()) }
//! ```
//!
//! # Headers and bodies
//!
//! Following draft-ietf-httpapi-ratelimit-headers-11 (May 2026):
//! `RateLimit-Policy` lists every limit, `RateLimit` states the binding one,
//! both as structured-field lists named after the limiters; a 429 or 503
//! from the layer is problem details (RFC 9457) of the draft's problem
//! types:
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! content-type: application/problem+json
//! retry-after: 1
//! ratelimit-policy: "key-1s";q=10;w=1, "key-1h";q=1000;w=3600
//! ratelimit: "key-1s";r=0;t=1
//!
//! {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"violated-policies":["key-1s"]}
//! ```
//!
//! * `RateLimit-Policy`: `q` the limit per window `w` (seconds);
//!   `shardlimit-window-ms` instead of `w` for a period that is not whole
//!   seconds; `shardlimit-burst` for a GCRA burst above the limit; `qu`
//!   when the [unit](RateLimitLayerBuilder::quota_unit) is not requests;
//!   `pk` when the [key may be shown](RateLimitLayerBuilder::show_partition_key).
//!   It states the quota the check applied ([`Decision::quota`](crate::Decision::quota)):
//!   a subject's [override](crate::RateLimiter::set_override), or the
//!   limiter's quota after a [`set_quota`](crate::RateLimiter::set_quota).
//! * `RateLimit`: the binding limit — the one that denied with the longest
//!   wait, or the one with the fewest units left — with `r` the remaining
//!   quota (0 while it [blocks](crate::RateLimiter::block) the subject) and
//!   `t` the seconds (rounded up) until the request would be admitted, or
//!   until the limit is full again if it was admitted.
//! * `Retry-After` (429 only): seconds, rounded up, until every limit would
//!   admit the request; the binding limit's `t`.
//! * [`jitter`](RateLimitLayerBuilder::jitter) lengthens every wait of a
//!   response by one random delay, so throttled clients spread out.
//! * [`HeaderStyle::XRateLimit`] sends GitHub's `X-RateLimit-Limit`,
//!   `-Remaining` and `-Reset` (epoch seconds) instead, [`HeaderStyle::Both`]
//!   both sets.
//!
//! Several layers (per IP, then per API key) each append their items;
//! `X-RateLimit-*`, which hold one value, keep the tightest layer's. The
//! repository's [docs/http-headers.md](https://github.com/shardlimit/shardlimit/blob/main/docs/http-headers.md) has the exact bytes of every style
//! and which section of the draft each follows.
//!
//! # Stacking layers
//!
//! Limits on one key belong in one [`MultiLimiter`](crate::MultiLimiter)
//! behind one layer: one script, all consumed or none. Limits on
//! different keys (per IP and per API key) are different subjects in
//! different slots, so they are stacked layers — one round trip each — and
//! the outer layer has counted a request before the inner one refuses it;
//! it then gives the units back (one more round trip, not atomic with the
//! check; see
//! [`refund_inner_denials`](RateLimitLayerBuilder::refund_inner_denials)).
//! Put the layer that refuses most often outside: its refusals cost the
//! other layer nothing at all.
//!
//! # Cost per request
//!
//! Nothing is allocated per request except the key, if the extractor
//! allocates it ([`PeerIp`], [`ForwardedIp`] and [`HeaderKey`] do not), and for a checked
//! request: one box holding the check and the inner call (the limiter's
//! check is an `async fn`, and its future cannot be named on stable Rust),
//! and the `RateLimit` header value (built on the stack and copied once);
//! for a refused one, its body.
//! `RateLimit-Policy` is built once per layer and shared (a check under an
//! override or a changed quota, or with the partition key shown, builds
//! its own). Like any tower
//! middleware that awaits before calling the inner service, each call
//! clones the inner service (axum's routes are reference-counted or boxed).

mod authority;
mod buf;
mod bypass;
pub(crate) mod config;
mod extract;
mod forwarded;
mod future;
mod header_key;
pub(crate) mod headers;
mod ip;
mod layer;
pub(crate) mod limits;
mod problem;
pub(crate) mod respond;
mod service;
mod x_ratelimit;

pub use authority::{Authority, AuthorityKey};
pub use bypass::RateLimitBypassed;
pub use config::{HeaderStyle, MissingKey, QuotaUnit};
pub use extract::{KeyExtractor, PeerIp, PeerIpBuilder};
pub use forwarded::{ForwardedIp, ForwardedIpBuilder, ProxyHeader};
pub use future::ResponseFuture;
pub use header_key::HeaderKey;
pub use ip::IpKey;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use limits::Limits;
pub use respond::Http;
pub use service::RateLimitService;
