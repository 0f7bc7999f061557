//! What a rate-limited service is configured with: the missing-key policy,
//! the header style, the quota unit, and the configuration every clone of
//! the service shares.

use std::fmt;
use std::sync::{Arc, Once};
use std::time::Duration;

use http::HeaderValue;

use super::limits::Limits;
use crate::limit::Quota;
use crate::warn::WarnLimiter;

/// What to do with a request whose key cannot be extracted (the extractor
/// returned `None`, or an empty key). A key longer than [`MAX_SUBJECT_LEN`](crate::keys::MAX_SUBJECT_LEN)
/// is not missing: it is limited under its digest (see
/// [`hash_keys`](super::RateLimitLayerBuilder::hash_keys)).
///
/// ```
/// use shardlimit::tower::MissingKey;
/// assert_eq!(MissingKey::default(), MissingKey::Reject);
/// // Every keyless request shares one bucket.
/// let shared = MissingKey::fallback("anonymous");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer **400 Bad Request**. The default: a limit that a client escapes
    /// by leaving out a header is no limit.
    #[default]
    Reject,
    /// Let the request through unchecked (e.g. an API-key limit on routes
    /// where the key is optional; no `RateLimit` headers are added).
    Pass,
    /// Check it under this key instead (1 to
    /// [`MAX_SUBJECT_LEN`](crate::keys::MAX_SUBJECT_LEN) bytes), so all keyless requests share one limit.
    Fallback(Arc<[u8]>),
}

impl MissingKey {
    /// [`MissingKey::Fallback`] with `key`.
    pub fn fallback(key: impl AsRef<[u8]>) -> Self {
        MissingKey::Fallback(Arc::from(key.as_ref()))
    }
}

/// Which rate-limit header fields a response carries (see
/// [`header_style`](super::RateLimitLayerBuilder::header_style) and
/// [docs/http-headers.md](https://github.com/shardlimit/shardlimit/blob/main/docs/http-headers.md) for the exact bytes of
/// each).
///
/// ```
/// use shardlimit::tower::HeaderStyle;
/// assert_eq!(HeaderStyle::default(), HeaderStyle::Ietf);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit-Policy` (every limit) and `RateLimit` (the binding limit),
    /// as draft-ietf-httpapi-ratelimit-headers-11 defines them. The default.
    #[default]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
    /// (UTC epoch seconds) of the binding limit, as GitHub sends them, for
    /// clients written against those.
    XRateLimit,
    /// Both sets: for a population of clients some of which read draft-11's
    /// fields and some only `X-RateLimit-*`. Not for clients whose parser
    /// prefers any `RateLimit*` field it sees and knows only older drafts'
    /// shapes: they find draft-11's unreadable and then ignore the
    /// `X-RateLimit-*` sent beside it (two such parsers were seen to) —
    /// send them [`XRateLimit`](Self::XRateLimit) alone. See
    /// [which style serves which client](https://github.com/shardlimit/shardlimit/blob/main/docs/http-headers.md#which-style-serves-which-client).
    Both,
}

impl HeaderStyle {
    pub(crate) fn ietf(self) -> bool {
        matches!(self, HeaderStyle::Ietf | HeaderStyle::Both)
    }

    pub(crate) fn x_ratelimit(self) -> bool {
        matches!(self, HeaderStyle::XRateLimit | HeaderStyle::Both)
    }
}

/// What a layer's limits count, as `RateLimit-Policy` states it in `qu`
/// (draft-11 §3.1.2; the values of its quota-unit registry). The layer
/// charges [`cost`](super::RateLimitLayerBuilder::cost) units per request
/// whatever the unit: declare another unit only when that is what the
/// limits count (e.g. a layer in front of an upload route whose quota is
/// sized in bytes and charged by an inner layer or handler).
///
/// ```
/// use shardlimit::tower::QuotaUnit;
/// assert_eq!(QuotaUnit::default(), QuotaUnit::Requests);
/// assert_eq!(QuotaUnit::ContentBytes.as_str(), "content-bytes");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaUnit {
    /// `requests`: the draft's default, so no `qu` is sent. The default.
    #[default]
    Requests,
    /// `content-bytes`.
    ContentBytes,
    /// `concurrent-requests`.
    ConcurrentRequests,
}

impl QuotaUnit {
    /// The registered name (`requests`, `content-bytes`,
    /// `concurrent-requests`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ContentBytes => "content-bytes",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
        }
    }
}

/// Everything a service needs besides the inner service and the extractor;
/// shared by every clone.
pub(crate) struct Config {
    pub(crate) limits: Limits,
    /// `RateLimit-Policy`, built once (its clones share the bytes) from
    /// `policy_quotas`; a check made under other quotas (an override, a
    /// `set_quota` since) gets its own.
    pub(crate) policy: HeaderValue,
    pub(crate) policy_quotas: Vec<(Quota, u32)>,
    /// The 503 problem+json body, built once (it names every limit).
    pub(crate) unavailable: String,
    pub(crate) style: HeaderStyle,
    pub(crate) unit: QuotaUnit,
    /// The key goes in `pk`.
    pub(crate) show_partition_key: bool,
    /// Each response's waits are lengthened by a random `0..=jitter`.
    pub(crate) jitter: Duration,
    /// 429 and 503 bodies are `application/problem+json`.
    pub(crate) problem_details: bool,
    pub(crate) missing: MissingKey,
    pub(crate) headers_on_allowed: bool,
    /// A bypassed response says so in `shardlimit-bypassed`.
    pub(crate) bypass_header: bool,
    /// Units admitted here are given back when an inner layer denies.
    pub(crate) refund_inner_denials: bool,
    pub(crate) cost: u32,
    /// Every key is limited under its digest, not only credentials and
    /// over-long ones.
    pub(crate) hash_keys: bool,
    /// The one warning that credentials are hashed without a subject
    /// secret.
    pub(crate) no_secret_warned: Once,
    /// At most one warning per few seconds about checks that failed (503).
    pub(crate) warn: WarnLimiter,
    /// At most one warning per few seconds about requests without a key.
    pub(crate) warn_missing: WarnLimiter,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("limits", &self.limits)
            .field("policy", &self.policy)
            .field("style", &self.style)
            .field("unit", &self.unit)
            .field("show_partition_key", &self.show_partition_key)
            .field("jitter", &self.jitter)
            .field("problem_details", &self.problem_details)
            .field("missing", &self.missing)
            .field("headers_on_allowed", &self.headers_on_allowed)
            .field("bypass_header", &self.bypass_header)
            .field("refund_inner_denials", &self.refund_inner_denials)
            .field("cost", &self.cost)
            .field("hash_keys", &self.hash_keys)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Warns, once per layer, when credentials are hashed under the
    /// namespace's default key: it keeps them out of Redis, but is no
    /// secret, so a short or guessable key can be found from its digest.
    /// Once, not per request: it is configuration, known at the first
    /// credential.
    pub(crate) fn warn_no_subject_secret(&self) {
        if self.limits.subject_hasher().has_secret() {
            return;
        }
        self.no_secret_warned.call_once(|| {
            let limits = self.limits.limiters();
            let limiter = limits.first().map_or("", |l| l.name());
            tracing::warn!(
                limiter,
                "shardlimit: credential keys are limited under digests keyed by the namespace's \
                 default key, which is not secret: raw keys stay out of Redis, but a short or \
                 guessable key can be found again from its digest. Give every process the same \
                 subject secret (SHARDLIMIT_SUBJECT_SECRET, or ClusterBuilder::subject_secret)"
            );
        });
    }

    /// This response's jitter: uniformly random in `0..=jitter`, zero when
    /// jitter is off.
    pub(crate) fn draw_jitter(&self) -> Duration {
        crate::backoff::jitter(Duration::ZERO, self.jitter)
    }
}
