//! `RateLimitBypassed`: the per-request signal that a fail-open layer let a
//! request through without a decision.

use http::HeaderValue;
use http::header::HeaderName;

use crate::policy::BypassReason;

/// The optional response header naming the bypass:
/// `shardlimit-bypassed: timeout` (see
/// [`bypass_header`](super::RateLimitLayerBuilder::bypass_header)).
pub(crate) static BYPASSED: HeaderName = HeaderName::from_static("shardlimit-bypassed");

/// Put in the request's extensions (before the inner service is called)
/// and in the response's when a [fail-open](crate::FailurePolicy::FailOpen)
/// limiter let the request through because Redis did not answer: the
/// request was not limited. Absent otherwise.
///
/// A handler can degrade (skip an expensive path) or a logging layer
/// record it per request; [`Cluster::stats`](crate::Cluster::stats) counts
/// bypasses per limiter and a rate-limited warning says why. With layers
/// stacked, the outermost one that bypassed is in the response.
///
/// ```
/// use http::Response;
/// use shardlimit::tower::RateLimitBypassed;
///
/// fn was_limited<B>(response: &Response<B>) -> bool {
///     response.extensions().get::<RateLimitBypassed>().is_none()
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimitBypassed {
    /// Why Redis was not asked, or did not answer.
    pub reason: BypassReason,
}

/// Put in a 429's extensions by the layer that denied it, so that an outer
/// layer that admitted the request gives its units back
/// ([`refund_inner_denials`](super::RateLimitLayerBuilder::refund_inner_denials)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeniedByLayer;

impl RateLimitBypassed {
    pub(crate) fn new(reason: BypassReason) -> Self {
        RateLimitBypassed { reason }
    }

    pub(crate) fn header_value(&self) -> HeaderValue {
        HeaderValue::from_static(self.reason.as_str())
    }
}
