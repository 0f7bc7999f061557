//! What a rate-limited service is configured with: the missing-key policy
//! and the configuration every clone of the service shares.

use std::fmt;
use std::sync::Arc;

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

/// Everything a service needs besides the inner service and the extractor;
/// shared by every clone.
pub(crate) struct Config {
    pub(crate) limits: Limits,
    /// `RateLimit-Policy`, built once (its clones share the bytes) from
    /// `policy_quotas`; a check made under other quotas (an override, a
    /// `set_quota` since) gets its own.
    pub(crate) policy: HeaderValue,
    pub(crate) policy_quotas: Vec<(Quota, u32)>,
    pub(crate) missing: MissingKey,
    pub(crate) headers_on_allowed: bool,
    /// A bypassed response says so in `shardlimit-bypassed`.
    pub(crate) bypass_header: bool,
    /// Units admitted here are given back when an inner layer denies.
    pub(crate) refund_inner_denials: bool,
    pub(crate) cost: u32,
    /// Every key is limited under its digest, not only over-long ones.
    pub(crate) hash_keys: bool,
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
            .field("missing", &self.missing)
            .field("headers_on_allowed", &self.headers_on_allowed)
            .field("bypass_header", &self.bypass_header)
            .field("refund_inner_denials", &self.refund_inner_denials)
            .field("cost", &self.cost)
            .field("hash_keys", &self.hash_keys)
            .finish_non_exhaustive()
    }
}
