//! HTTP rate limiting for tower services — axum, or hyper with tower — with
//! any shardlimit limiter (feature `tower`).
//!
//! The layer answers some requests itself (400, 429, 503), so the inner
//! service's response body must be buildable from a `&'static str`
//! (`From<&'static str>`): axum's `Body`, `http_body_util::Full<Bytes>` and
//! `String` are.
//!
//! * [`RateLimitLayer`] — the layer: [`new`](RateLimitLayer::new) with the
//!   defaults, or [`builder`](RateLimitLayer::builder).
//! * [`Limits`] — a [`RateLimiter`](crate::RateLimiter) or a
//!   [`MultiLimiter`](crate::MultiLimiter).
//! * [`KeyExtractor`] — what a request is limited by: any closure
//!   `Fn(&Request<B>) -> Option<K>`, or [`PeerIp`] (the client address;
//!   IPv6 by its /64; with axum, [`PeerIp::connect_info`], feature `axum`), [`ForwardedIp`] (the client address behind trusted
//!   proxies) or [`HeaderKey`] (a header value, e.g. an API key).
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
//! # Headers
//!
//! Following draft-ietf-httpapi-ratelimit-headers-11 (May 2026), as
//! structured-field lists with one item per limit, named after the limiter:
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! retry-after: 1
//! ratelimit-policy: "key-1s";q=10;w=1, "key-1h";q=1000;w=3600
//! ratelimit: "key-1s";r=0;t=1, "key-1h";r=990;t=3600
//! ```
//!
//! * `RateLimit-Policy`: `q` the limit per window `w` (seconds);
//!   `shardlimit-window-ms` instead of `w` for a period that is not whole
//!   seconds; `shardlimit-burst` for a GCRA burst above the limit. It
//!   states the quota the check applied ([`Decision::quota`](crate::Decision::quota)):
//!   a subject's [override](crate::RateLimiter::set_override), or the
//!   limiter's quota after a [`set_quota`](crate::RateLimiter::set_quota).
//! * `RateLimit`: `r` the remaining quota; `t` the seconds (rounded up)
//!   until the request would be admitted, for a limit that denied it, or
//!   until the limit is full again, for one that admitted it.
//! * `Retry-After` (429 only): seconds, rounded up, until every limit would
//!   admit the request.
//!
//! Several layers (per IP, then per API key) each append their items.
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
//! and the `RateLimit` header value (built on the stack and copied once).
//! `RateLimit-Policy` is built once per layer and shared (a check under an
//! override or a changed quota builds its own). Like any tower
//! middleware that awaits before calling the inner service, each call
//! clones the inner service (axum's routes are reference-counted or boxed).

mod bypass;
mod config;
mod extract;
mod forwarded;
mod future;
mod headers;
mod ip;
mod layer;
mod limits;
mod service;

pub use bypass::RateLimitBypassed;
pub use config::MissingKey;
pub use extract::{HeaderKey, KeyExtractor, PeerIp, PeerIpBuilder};
pub use forwarded::{ForwardedIp, ForwardedIpBuilder, ProxyHeader};
pub use future::ResponseFuture;
pub use ip::IpKey;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use limits::Limits;
pub use service::RateLimitService;
