//! `RateLimitService`: the middleware itself.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::bypass::{BYPASSED, DeniedByLayer, RateLimitBypassed};
use super::config::{Config, MissingKey};
use super::extract::KeyExtractor;
use super::future::ResponseFuture;
use super::headers;
use super::respond::Http;
use super::respond::sealed::Respond;
use crate::keys::{HashedSubject, MAX_SUBJECT_LEN};

/// The service a [`RateLimitLayer`](super::RateLimitLayer) wraps around an
/// inner service. Cheap to clone (the configuration is shared); see the
/// layer for what it does with each request.
///
/// ```no_run
/// # fn demo(limiter: shardlimit::RateLimiter) {
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use shardlimit::tower::{HeaderKey, RateLimitLayer};
/// use tower::{Layer, service_fn};
///
/// let inner = service_fn(|_req: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// });
/// let service = RateLimitLayer::new(limiter, HeaderKey::from_static("x-api-key")).layer(inner);
/// # }
/// ```
///
/// `P` is how it answers what it refuses: [`Http`] statuses (the default)
/// or gRPC statuses (`shardlimit::tonic::Grpc`, feature `tonic`).
pub struct RateLimitService<S, X, P = Http> {
    inner: S,
    extractor: X,
    config: Arc<Config>,
    protocol: PhantomData<fn() -> P>,
}

impl<S, X, P> RateLimitService<S, X, P> {
    pub(crate) fn new(inner: S, extractor: X, config: Arc<Config>) -> Self {
        RateLimitService {
            inner,
            extractor,
            config,
            protocol: PhantomData,
        }
    }
}

impl<S: Clone, X: Clone, P> Clone for RateLimitService<S, X, P> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            extractor: self.extractor.clone(),
            config: Arc::clone(&self.config),
            protocol: PhantomData,
        }
    }
}

impl<S: fmt::Debug, X, P> fmt::Debug for RateLimitService<S, X, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("extractor", &std::any::type_name::<X>())
            .field("config", &self.config)
            .finish()
    }
}

impl<S, X, P, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, X, P>
where
    P: Respond<ResBody>,
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    X: KeyExtractor<ReqBody>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let credential = self.extractor.is_credential();
        let key = self
            .extractor
            .extract(&request)
            .filter(|k| !k.as_ref().is_empty())
            .map(|k| {
                // The keyed digest keeps a credential out of Redis, and is
                // a fixed-length stand-in for a key too long to be a
                // subject (one digest for both, so an operator's lookup
                // by the raw key finds either).
                if credential || self.config.hash_keys || k.as_ref().len() > MAX_SUBJECT_LEN {
                    if credential {
                        self.config.warn_no_subject_secret();
                    }
                    Subject::Hashed(self.config.limits.subject_hasher().hash(k))
                } else {
                    Subject::Key(k)
                }
            });
        if key.is_none() {
            self.warn_missing();
        }
        let subject = match (key, &self.config.missing) {
            (Some(subject), _) => subject,
            (None, MissingKey::Fallback(key)) => Subject::Fallback(Arc::clone(key)),
            (None, MissingKey::Pass) => return ResponseFuture::passed(self.inner.call(request)),
            (None, MissingKey::Reject) => {
                return ResponseFuture::refused(P::no_key());
            }
        };
        // `poll_ready` readied `self.inner`: take that one for this request
        // and leave a fresh clone for the next (the usual tower pattern for
        // middleware that awaits before calling the inner service).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        // The one allocation the layer adds per checked request: the
        // limiter's check is an `async fn`, whose future has no name a
        // hand-written future could hold on stable Rust, so the check and
        // the call that follows it live in one box.
        ResponseFuture::checked(Box::pin(check_then_call::<P, _, _, _, _>(
            config, subject, inner, request,
        )))
    }
}

impl<S, X, P> RateLimitService<S, X, P> {
    /// A request without a key: a policy when the key is optional, but
    /// also how a misconfigured extractor looks (every request of an axum
    /// app served without connect info), so say where the key was looked
    /// for — at most once per few seconds.
    fn warn_missing<B>(&self)
    where
        X: KeyExtractor<B>,
    {
        let Some(count) = self.config.warn_missing.should_warn() else {
            return;
        };
        let looked_for = self.extractor.looked_for();
        let limits = self.config.limits.limiters();
        let limiter = limits.first().map_or("", |l| l.name());
        if self.config.missing == MissingKey::Reject {
            tracing::warn!(looked_for = %looked_for, limiter, missing_since_last_warning = count,
                "shardlimit: a request has no rate-limit key; refusing it as a bad request \
                 (HTTP 400; INVALID_ARGUMENT in gRPC mode)");
        } else {
            tracing::debug!(looked_for = %looked_for, limiter, missing_since_last_warning = count,
                policy = ?self.config.missing, "shardlimit: a request has no rate-limit key");
        }
    }
}

/// The key to check: the request's own, its digest, or the shared fallback.
enum Subject<K> {
    Key(K),
    Hashed(HashedSubject),
    Fallback(Arc<[u8]>),
}

impl<K: AsRef<[u8]>> AsRef<[u8]> for Subject<K> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Subject::Key(key) => key.as_ref(),
            Subject::Hashed(digest) => digest.as_ref(),
            Subject::Fallback(key) => key,
        }
    }
}

async fn check_then_call<P, S, K, ReqBody, ResBody>(
    config: Arc<Config>,
    subject: Subject<K>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    K: AsRef<[u8]>,
    P: Respond<ResBody>,
{
    let verdict = match config.limits.check(subject.as_ref(), config.cost).await {
        Ok(verdict) => verdict,
        Err(err) => {
            // Counted as an error in the limiter's stats; a fail-closed
            // limiter without Redis would otherwise log on every request.
            if let Some(count) = config.warn.should_warn() {
                tracing::warn!(error = %err, failed_since_last_warning = count,
                    "shardlimit: rate-limit check failed; answering 503 (gRPC: UNAVAILABLE)");
            }
            return Ok(P::unavailable(&config));
        }
    };
    // One draw per response, added to every wait it states.
    let jitter = config.draw_jitter();
    if !verdict.allowed {
        let mut response = P::denied(&config, &verdict, subject.as_ref(), jitter);
        response.extensions_mut().insert(DeniedByLayer);
        return Ok(response);
    }
    let bypassed = verdict.bypassed().map(RateLimitBypassed::new);
    let mut request = request;
    if let Some(signal) = bypassed {
        request.extensions_mut().insert(signal);
    }
    let mut response = inner.call(request).await?;
    if config.refund_inner_denials
        && bypassed.is_none()
        && response.extensions().get::<DeniedByLayer>().is_some()
    {
        // An inner layer refused what this one admitted and counted: give
        // the units back, so stacked layers charge only what they all admit.
        config.limits.refund(subject.as_ref(), config.cost).await;
    }
    match bypassed {
        // A bypassed decision knows nothing about the quota: no headers.
        Some(signal) => {
            if config.bypass_header {
                response
                    .headers_mut()
                    .insert(BYPASSED.clone(), signal.header_value());
            }
            response.extensions_mut().insert(signal);
        }
        None if config.headers_on_allowed => {
            headers::add(
                response.headers_mut(),
                &config,
                &verdict,
                subject.as_ref(),
                jitter,
            );
        }
        None => {}
    }
    Ok(response)
}
