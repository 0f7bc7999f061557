//! `HeaderKey`: a request header's value as the key — most often a
//! credential.

use http::Request;
use http::header::{HeaderName, HeaderValue};

use super::extract::KeyExtractor;

/// The value of a request header, e.g. an API key. The key is the
/// [`HeaderValue`] itself (a reference-counted clone, no copy); an absent or
/// empty header is a missing key.
///
/// A header key is a **credential** by default
/// ([`is_credential`](KeyExtractor::is_credential)): an API key or a bearer
/// token, which the layer limits under its keyed digest (`hmac:…`, see
/// [`SubjectHasher`](crate::keys::SubjectHasher)) so that Redis, the
/// throttled reports and the Limits page never hold it. For a header that
/// is no secret (a tenant id, a client name) and is better read as it is
/// in the admin view, say so with [`credential(false)`](Self::credential).
///
/// ```
/// use http::Request;
/// use shardlimit::tower::{HeaderKey, KeyExtractor};
///
/// let api_key = HeaderKey::from_static("x-api-key");
/// let req = Request::builder().header("x-api-key", "k-7f3a").body(()).unwrap();
/// assert_eq!(api_key.extract(&req).unwrap(), "k-7f3a");
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    credential: bool,
}

impl HeaderKey {
    /// Reads header `name`.
    ///
    /// ```
    /// use http::header::AUTHORIZATION;
    /// use shardlimit::tower::HeaderKey;
    /// let by_token = HeaderKey::new(AUTHORIZATION);
    /// ```
    #[must_use]
    pub fn new(name: HeaderName) -> Self {
        HeaderKey {
            name,
            credential: true,
        }
    }

    /// Reads header `name`, a static lowercase header name; like
    /// [`HeaderName::from_static`], it panics if `name` is not one.
    #[must_use]
    pub fn from_static(name: &'static str) -> Self {
        HeaderKey::new(HeaderName::from_static(name))
    }

    /// Whether the header's value is a credential, limited under its keyed
    /// digest rather than as it is. Default `true`: a header key is most
    /// often an API key or a bearer token. `false` for a header that is no
    /// secret, such as a tenant id, so the admin view shows its value (a
    /// layer with [`hash_keys(true)`](super::RateLimitLayerBuilder::hash_keys)
    /// hashes it all the same).
    ///
    /// ```
    /// use shardlimit::tower::{HeaderKey, KeyExtractor};
    /// let tenant = HeaderKey::from_static("x-tenant-id").credential(false);
    /// assert!(!KeyExtractor::<()>::is_credential(&tenant));
    /// ```
    #[must_use]
    pub fn credential(mut self, on: bool) -> Self {
        self.credential = on;
        self
    }
}

impl<B> KeyExtractor<B> for HeaderKey {
    type Key = HeaderValue;

    fn extract(&self, request: &Request<B>) -> Option<HeaderValue> {
        request
            .headers()
            .get(&self.name)
            .filter(|v| !v.is_empty())
            .cloned()
    }

    fn is_credential(&self) -> bool {
        self.credential
    }

    fn looked_for(&self) -> String {
        format!("header {}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_empty_header_is_no_key() {
        let req = Request::new(());
        assert!(HeaderKey::from_static("x-api-key").extract(&req).is_none());
        let empty = Request::builder().header("x-api-key", "").body(()).unwrap();
        assert!(
            HeaderKey::from_static("x-api-key")
                .extract(&empty)
                .is_none()
        );
    }
}
