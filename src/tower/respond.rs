//! How a layer answers the requests it refuses itself: with HTTP statuses
//! ([`Http`], the default) or with gRPC statuses
//! (`shardlimit::tonic::Grpc`, feature `tonic`). Everything else — the
//! key, the check, the headers of admitted responses, refunds, bypasses —
//! is one pipeline for both.

use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};

use super::config::Config;
use super::headers;
use super::problem;
use crate::limit::MultiDecision;

/// The [`RateLimitLayer`](super::RateLimitLayer)'s default protocol: it
/// refuses with HTTP statuses — 400 (no key), 429 (denied), 503 (check
/// failed) — and their headers and bodies.
///
/// ```
/// use shardlimit::tower::{Http, HeaderKey, RateLimitLayer};
/// // `RateLimitLayer<X>` is `RateLimitLayer<X, Http>`.
/// fn layer(l: RateLimitLayer<HeaderKey, Http>) -> RateLimitLayer<HeaderKey> { l }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Http;

/// The answers a protocol gives; sealed (the module is private), so only
/// [`Http`] and `Grpc` implement it.
///
/// The trait must be `pub` to bound the public `Service` impl, which makes
/// rustc count its methods as public interface; but no one outside the
/// crate can name the trait, so its crate-private argument types
/// (`private_interfaces`) are not reachable in fact.
#[allow(private_interfaces)]
pub(crate) mod sealed {
    use super::{Config, Duration, MultiDecision, Response};

    /// How refusals of a layer are answered, with a response body `B`.
    pub trait Respond<B>: Send + Sync + 'static {
        /// A request without a key, under `MissingKey::Reject`.
        fn no_key() -> Response<B>;
        /// A check that failed (fail-closed, or a configuration fault).
        fn unavailable(config: &Config) -> Response<B>;
        /// A denial of `subject`, its waits lengthened by `jitter`.
        fn denied(
            config: &Config,
            verdict: &MultiDecision,
            subject: &[u8],
            jitter: Duration,
        ) -> Response<B>;
    }
}

#[allow(private_interfaces)] // See `sealed`.
impl<B: From<String>> sealed::Respond<B> for Http {
    fn no_key() -> Response<B> {
        plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: no rate-limit key in the request\n",
        )
    }

    fn unavailable(config: &Config) -> Response<B> {
        if config.problem_details {
            problem_details(StatusCode::SERVICE_UNAVAILABLE, config.unavailable.clone())
        } else {
            plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: the rate limiter cannot decide\n",
            )
        }
    }

    fn denied(
        config: &Config,
        verdict: &MultiDecision,
        subject: &[u8],
        jitter: Duration,
    ) -> Response<B> {
        let mut response = if config.problem_details {
            let body = problem::denied(config.limits.limiters(), &verdict.decisions);
            problem_details(StatusCode::TOO_MANY_REQUESTS, body)
        } else {
            plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n")
        };
        let h = response.headers_mut();
        h.insert(
            RETRY_AFTER,
            headers::retry_after(verdict.retry_after(), jitter),
        );
        headers::add(h, config, verdict, subject, jitter);
        response
    }
}

fn plain<B: From<String>>(status: StatusCode, body: &'static str) -> Response<B> {
    let mut response = Response::new(B::from(String::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn problem_details<B: From<String>>(status: StatusCode, body: String) -> Response<B> {
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, problem::CONTENT_TYPE.clone());
    response
}
