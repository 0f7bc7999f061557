//! `RateLimitLayer` and its builder.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Once};
use std::time::Duration;

use tower::Layer;

use super::config::{Config, HeaderStyle, MissingKey, QuotaUnit};
use super::headers;
use super::limits::Limits;
use super::problem;
use super::respond::Http;
use super::service::RateLimitService;
use crate::error::{Error, Result};
use crate::keys::MAX_SUBJECT_LEN;
use crate::warn::WarnLimiter;

/// A [`tower::Layer`] that rate-limits HTTP requests with a shardlimit
/// [`RateLimiter`](crate::RateLimiter) or
/// [`MultiLimiter`](crate::MultiLimiter), keyed by what a
/// [`KeyExtractor`](super::KeyExtractor) takes from each request.
///
/// * **Admitted**: the request goes to the inner service; its response gets
///   the rate-limit headers of the [`HeaderStyle`](super::HeaderStyle)
///   (`RateLimit-Policy` and `RateLimit` by default; none if
///   [`headers_on_allowed`](RateLimitLayerBuilder::headers_on_allowed) is off).
/// * **Denied**: **429 Too Many Requests** with `Retry-After` (seconds,
///   rounded up) and the rate-limit headers, and an
///   `application/problem+json` body of type `quota-exceeded` naming the
///   limits that denied (see
///   [`problem_details`](RateLimitLayerBuilder::problem_details)); the
///   inner service is not called.
/// * **Bypassed** (a fail-open limiter that could not reach Redis): the
///   request goes through without `RateLimit` headers, with
///   [`RateLimitBypassed`](super::RateLimitBypassed) in its request's and
///   response's extensions (and `shardlimit-bypassed` if
///   [`bypass_header`](RateLimitLayerBuilder::bypass_header) is on); the
///   limiter counted the bypass in [`Cluster::stats`](crate::Cluster::stats)
///   and warned.
/// * **Check failed** (a fail-closed limiter that could not reach Redis, or a
///   configuration fault): **503 Service Unavailable** with a
///   `temporary-reduced-capacity` problem body naming every limit; a
///   rate-limited `warn` says why.
/// * **No key**: see [`MissingKey`].
///
/// Header syntax: see [the module docs](super#headers-and-bodies).
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::net::SocketAddr;
/// use std::num::NonZeroU32;
/// use axum::{Router, extract::ConnectInfo, routing::get};
/// use shardlimit::{FailurePolicy, Quota, RateLimiter};
/// use shardlimit::tower::{PeerIp, RateLimitLayer};
///
/// let per_ip = RateLimiter::builder(&cluster, "ip", Quota::per_second(NonZeroU32::new(20).unwrap()))
///     .failure_policy(FailurePolicy::FailOpen)
///     .build()?;
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(
///         per_ip,
///         PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0),
///     ));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await.unwrap();
/// axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
///     .await
///     .unwrap();
/// # Ok(()) }
/// ```
#[must_use]
pub struct RateLimitLayer<X, P = Http> {
    config: Arc<Config>,
    extractor: X,
    protocol: PhantomData<fn() -> P>,
}

impl<X> RateLimitLayer<X> {
    /// A layer checking `limits` under the key `extractor` takes from each
    /// request, with the defaults of [`RateLimitLayerBuilder`]; use
    /// [`builder`](Self::builder) to change them.
    ///
    /// ```no_run
    /// # fn demo(limiter: shardlimit::RateLimiter) {
    /// use shardlimit::tower::{HeaderKey, RateLimitLayer};
    /// let layer = RateLimitLayer::new(limiter, HeaderKey::from_static("x-api-key"));
    /// # }
    /// ```
    pub fn new(limits: impl Into<Limits>, extractor: X) -> Self {
        // The defaults need no validation: a cost of 1 fits every limit.
        Self::builder(limits, extractor).into_layer()
    }

    /// A builder for a layer checking `limits` under the key `extractor`
    /// takes from each request.
    ///
    /// ```no_run
    /// # fn demo(limiter: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// use http::Request;
    /// use shardlimit::tower::{MissingKey, RateLimitLayer};
    /// // By the user id an authentication layer put in the extensions;
    /// // anonymous requests share one limit.
    /// #[derive(Clone)]
    /// struct UserId(String);
    /// let layer = RateLimitLayer::builder(limiter, |req: &Request<axum::body::Body>| {
    ///     req.extensions().get::<UserId>().map(|u| u.0.clone())
    /// })
    /// .missing_key(MissingKey::fallback("anonymous"))
    /// .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(limits: impl Into<Limits>, extractor: X) -> RateLimitLayerBuilder<X> {
        RateLimitLayerBuilder {
            limits: limits.into(),
            extractor,
            settings: Settings {
                missing: MissingKey::default(),
                headers_on_allowed: true,
                bypass_header: false,
                refund_inner_denials: true,
                cost: 1,
                hash_keys: false,
                style: HeaderStyle::default(),
                unit: QuotaUnit::default(),
                show_partition_key: false,
                jitter: Duration::ZERO,
                problem_details: true,
            },
            protocol: PhantomData,
        }
    }
}

impl<X, P> RateLimitLayer<X, P> {
    /// The limits it checks.
    ///
    /// ```no_run
    /// # fn demo(layer: shardlimit::tower::RateLimitLayer<shardlimit::tower::PeerIp>) {
    /// for limiter in layer.limits().limiters() {
    ///     println!("{} {:?}", limiter.name(), limiter.quota());
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }
}

impl<X: Clone, P> Clone for RateLimitLayer<X, P> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
            extractor: self.extractor.clone(),
            protocol: PhantomData,
        }
    }
}

impl<X, P> fmt::Debug for RateLimitLayer<X, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("config", &self.config)
            .field("extractor", &std::any::type_name::<X>())
            .finish()
    }
}

impl<S, X: Clone, P> Layer<S> for RateLimitLayer<X, P> {
    type Service = RateLimitService<S, X, P>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, self.extractor.clone(), Arc::clone(&self.config))
    }
}

/// Configures a [`RateLimitLayer`]; every setter states its default and
/// [`build`](Self::build) validates.
///
/// **Who is throttled now.** The layer's 429s are its limiters' denials,
/// and a rate limiter reports the subjects it denies most to the
/// "throttled now" view (`shardlimit top`, the Limits page) by default:
/// no cost on an admitted request, under 1 µs per denial, and, while the
/// process denies, one script call every 5 s on one master. A key the
/// layer takes from a request is the subject, so a credential appears
/// there as its keyed digest and any other key (an address, a host) as
/// it is; to keep a limiter's subjects out entirely, build it with
/// [`report_throttled(false)`](crate::limit::RateLimiterBuilder::report_throttled),
/// where the cost is stated in full.
///
/// ```no_run
/// # fn demo(limiter: shardlimit::RateLimiter) -> shardlimit::Result<()> {
/// use std::time::Duration;
/// use shardlimit::tower::{HeaderKey, HeaderStyle, MissingKey, QuotaUnit, RateLimitLayer};
/// let layer = RateLimitLayer::builder(limiter, HeaderKey::from_static("x-api-key"))
///     .missing_key(MissingKey::Reject) // default
///     .headers_on_allowed(true)         // default
///     .bypass_header(false)             // default
///     .refund_inner_denials(true)       // default
///     .cost(1)                          // default
///     .hash_keys(false)                 // default
///     .header_style(HeaderStyle::Ietf)  // default
///     .quota_unit(QuotaUnit::Requests)  // default
///     .show_partition_key(false)        // default
///     .jitter(Duration::ZERO)           // default
///     .problem_details(true)            // default
///     .build()?;
/// # Ok(()) }
/// ```
#[must_use]
pub struct RateLimitLayerBuilder<X, P = Http> {
    limits: Limits,
    extractor: X,
    settings: Settings,
    protocol: PhantomData<fn() -> P>,
}

/// A builder's settings but the limits and the extractor.
#[derive(Debug)]
struct Settings {
    missing: MissingKey,
    headers_on_allowed: bool,
    bypass_header: bool,
    refund_inner_denials: bool,
    cost: u32,
    hash_keys: bool,
    style: HeaderStyle,
    unit: QuotaUnit,
    show_partition_key: bool,
    jitter: Duration,
    problem_details: bool,
}

/// The longest [`jitter`](RateLimitLayerBuilder::jitter): a minute.
const MAX_JITTER: Duration = Duration::from_secs(60);

impl<X, P> RateLimitLayerBuilder<X, P> {
    /// What happens to a request without a usable key. Default
    /// [`MissingKey::Reject`] (400).
    pub fn missing_key(mut self, missing: MissingKey) -> Self {
        self.settings.missing = missing;
        self
    }

    /// Whether admitted responses carry `RateLimit-Policy` and `RateLimit`.
    /// Default `true`. Denied (429) responses always do.
    pub fn headers_on_allowed(mut self, on: bool) -> Self {
        self.settings.headers_on_allowed = on;
        self
    }

    /// Whether a response the layer let through without a decision (a
    /// fail-open limiter, Redis not answering) carries
    /// `shardlimit-bypassed: <reason>` (`timeout`, `connection`,
    /// `node_down`, `cluster_unavailable`). Default `false`: it tells
    /// clients about your Redis. Every such request and response carries
    /// [`RateLimitBypassed`](super::RateLimitBypassed) in its extensions
    /// either way.
    pub fn bypass_header(mut self, on: bool) -> Self {
        self.settings.bypass_header = on;
        self
    }

    /// Whether units this layer admitted are given back
    /// ([`reward`](crate::RateLimiter::reward)) when a shardlimit layer
    /// inside it answers the request 429. Default `true`: with a per-IP
    /// layer outside a per-key one, the IP is charged only for what both
    /// admitted. It costs one more round trip per such request, is not
    /// atomic with the check (a concurrent request may be refused by this
    /// layer in between), and the outer layer's `RateLimit` header was
    /// written before the refund. The application's own 429s are not
    /// refunded.
    pub fn refund_inner_denials(mut self, on: bool) -> Self {
        self.settings.refund_inner_denials = on;
        self
    }

    /// What each request costs (e.g. more for an expensive endpoint's
    /// layer). Default 1. Must be 1 to the smallest capacity of the limits.
    pub fn cost(mut self, cost: u32) -> Self {
        self.settings.cost = cost;
        self
    }

    /// Whether every key is limited under its keyed digest (`hmac:…`, by
    /// [`Cluster::subject_hasher`](crate::Cluster::subject_hasher)), not only
    /// credentials. Default `false`: a key the extractor says is a
    /// [credential](super::KeyExtractor::is_credential) ([`HeaderKey`](super::HeaderKey),
    /// unless built with `credential(false)`) is hashed, and so is any key
    /// longer than [`MAX_SUBJECT_LEN`] (a JWT must be limited like any other
    /// key); other keys — IP addresses, hosts, what a closure returns — are
    /// used as they are, readable in the admin view.
    ///
    /// Turn it on when a closure's keys are secrets (a session token read
    /// from a cookie), so they are not stored in Redis key names either. An
    /// operator still finds a hashed key's limits by the raw key:
    /// `shardlimit show <key>` and the Limits page's find box hash what
    /// they are given the same way (with the same subject secret). Each
    /// hashed request computes one HMAC-SHA-256 of its key, on the stack.
    ///
    /// ```no_run
    /// # fn demo(limiter: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// use http::Request;
    /// use shardlimit::tower::RateLimitLayer;
    /// let per_session = RateLimitLayer::builder(limiter, |req: &Request<()>| {
    ///     req.headers().get("cookie").cloned()
    /// })
    /// .hash_keys(true)
    /// .build()?;
    /// # Ok(()) }
    /// ```
    pub fn hash_keys(mut self, on: bool) -> Self {
        self.settings.hash_keys = on;
        self
    }

    /// Which rate-limit fields responses carry. Default
    /// [`HeaderStyle::Ietf`]: `RateLimit-Policy` and `RateLimit` (draft-11);
    /// [`HeaderStyle::XRateLimit`] for clients that read GitHub's
    /// `X-RateLimit-*`; [`HeaderStyle::Both`]. `Retry-After` goes on every
    /// 429 whatever the style. The exact bytes of each style are in
    /// [docs/http-headers.md](https://github.com/shardlimit/shardlimit/blob/main/docs/http-headers.md).
    ///
    /// ```no_run
    /// # fn demo(limiter: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// use shardlimit::tower::{HeaderKey, HeaderStyle, RateLimitLayer};
    /// // X-RateLimit-Limit: 60, X-RateLimit-Remaining: 59, X-RateLimit-Reset: 1796218967
    /// let layer = RateLimitLayer::builder(limiter, HeaderKey::from_static("x-api-key"))
    ///     .header_style(HeaderStyle::XRateLimit)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn header_style(mut self, style: HeaderStyle) -> Self {
        self.settings.style = style;
        self
    }

    /// What the limits count, stated as `qu` in `RateLimit-Policy`. Default
    /// [`QuotaUnit::Requests`], which the draft makes the default, so no
    /// `qu` is sent.
    pub fn quota_unit(mut self, unit: QuotaUnit) -> Self {
        self.settings.unit = unit;
        self
    }

    /// Whether the IETF fields carry the partition key, `pk=:<base64>:`:
    /// the key the request was limited under (its keyed digest, `hmac:…`,
    /// for a credential, an over-long key or with
    /// [`hash_keys`](Self::hash_keys); the fallback key for a keyless
    /// request). Default `false`: the key is the
    /// client's identity — an IP address, an API key — and a response may
    /// be logged, cached or shown where the key should not be. Turn it on
    /// when the client knows the key anyway and acts for several (draft-11
    /// §7.1), e.g. a gateway sending requests for many tenants.
    ///
    /// It also makes every response build its own `RateLimit-Policy`.
    pub fn show_partition_key(mut self, on: bool) -> Self {
        self.settings.show_partition_key = on;
        self
    }

    /// The most a response's waits are lengthened by at random, so that
    /// clients throttled together do not all retry in the same second
    /// (draft-11 §8.5). Default zero (off); at most a minute. One random
    /// delay in `0..=jitter` per response is added to every wait it
    /// states — `t`, `Retry-After`, `X-RateLimit-Reset` — before rounding
    /// up: a client is told to wait longer, never shorter, than the limit
    /// requires.
    pub fn jitter(mut self, max: Duration) -> Self {
        self.settings.jitter = max;
        self
    }

    /// Whether the layer's 429 and 503 bodies are problem details
    /// (`application/problem+json`, RFC 9457) of draft-11's problem types:
    /// `quota-exceeded` naming the limits that denied in
    /// `violated-policies` (`abnormal-usage-detected` when one of them has
    /// [blocked](crate::RateLimiter::block) the subject), and
    /// `temporary-reduced-capacity` naming every limit when the check
    /// could not be made. Default `true`; `false` sends short
    /// `text/plain` bodies.
    pub fn problem_details(mut self, on: bool) -> Self {
        self.settings.problem_details = on;
        self
    }

    /// Validates the cost, the fallback key and the jitter; contacts
    /// nothing.
    ///
    /// Errors with [`Error::InvalidCost`] or [`Error::Config`] (field
    /// `missing_key` or `jitter`).
    pub fn build(self) -> Result<RateLimitLayer<X, P>> {
        let capacity = self.limits.capacity();
        if self.settings.cost == 0 || self.settings.cost > capacity {
            return Err(Error::InvalidCost {
                cost: u64::from(self.settings.cost),
                max: u64::from(capacity),
            });
        }
        if let MissingKey::Fallback(key) = &self.settings.missing
            && (key.is_empty() || key.len() > MAX_SUBJECT_LEN)
        {
            return Err(Error::Config {
                field: "missing_key",
                reason: format!(
                    "a fallback key must be 1 to {MAX_SUBJECT_LEN} bytes, not {}",
                    key.len()
                ),
            });
        }
        if self.settings.jitter > MAX_JITTER {
            return Err(Error::Config {
                field: "jitter",
                reason: format!(
                    "at most {MAX_JITTER:?} (a wait lengthened by more tells clients nothing), not {:?}",
                    self.settings.jitter
                ),
            });
        }
        Ok(self.into_layer())
    }

    /// The layer, unvalidated.
    fn into_layer(self) -> RateLimitLayer<X, P> {
        let limiters = self.limits.limiters();
        let policy = headers::policy(
            limiters
                .iter()
                .map(|l| (l.name(), l.algorithm(), l.quota(), l.capacity())),
            self.settings.unit,
            None,
        );
        RateLimitLayer {
            config: Arc::new(Config {
                policy,
                policy_quotas: headers::quotas(limiters),
                unavailable: problem::unavailable(limiters),
                style: self.settings.style,
                unit: self.settings.unit,
                show_partition_key: self.settings.show_partition_key,
                jitter: self.settings.jitter,
                problem_details: self.settings.problem_details,
                limits: self.limits,
                missing: self.settings.missing,
                headers_on_allowed: self.settings.headers_on_allowed,
                bypass_header: self.settings.bypass_header,
                refund_inner_denials: self.settings.refund_inner_denials,
                cost: self.settings.cost,
                hash_keys: self.settings.hash_keys,
                no_secret_warned: Once::new(),
                warn: WarnLimiter::new(),
                warn_missing: WarnLimiter::new(),
            }),
            extractor: self.extractor,
            protocol: PhantomData,
        }
    }

    /// The same settings, answering refusals in protocol `Q`.
    #[cfg(feature = "tonic")]
    pub(crate) fn with_protocol<Q>(self) -> RateLimitLayerBuilder<X, Q> {
        RateLimitLayerBuilder {
            limits: self.limits,
            extractor: self.extractor,
            settings: self.settings,
            protocol: PhantomData,
        }
    }
}

impl<X, P> fmt::Debug for RateLimitLayerBuilder<X, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("limits", &self.limits)
            .field("extractor", &std::any::type_name::<X>())
            .field("settings", &self.settings)
            .finish()
    }
}
