//! Key extractors: what a request is limited by.

use std::fmt;
use std::io::Write as _;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};

use http::Request;
use http::header::{HeaderName, HeaderValue};

/// Takes the rate-limit key (the limiter's subject) from a request: a
/// client IP, an API key, a user id put in the extensions by an
/// authentication layer. `None` means the request has no key; the layer's
/// [`MissingKey`](super::MissingKey) policy decides what happens to it.
///
/// Implemented for every `Fn(&Request<B>) -> Option<K>` closure that is
/// `Clone + Send + Sync + 'static`, and by the ready-made [`PeerIp`] and
/// [`HeaderKey`].
///
/// The key must be owned (`'static`): the request moves on to the inner
/// service while the check runs. Return something that does not allocate
/// where you can — a [`HeaderValue`] clone only bumps a reference count.
///
/// ```
/// use http::Request;
/// use shardlimit::tower::KeyExtractor;
///
/// /// The user id an authentication layer put in the extensions.
/// #[derive(Clone)]
/// struct UserId(u64);
///
/// let by_user = |req: &Request<()>| req.extensions().get::<UserId>().map(|u| u.0.to_string());
///
/// let mut req = Request::new(());
/// assert_eq!(by_user.extract(&req), None);
/// req.extensions_mut().insert(UserId(42));
/// assert_eq!(by_user.extract(&req).as_deref(), Some("42"));
/// ```
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key; any bytes (an empty key counts as missing; one longer than
    /// [`MAX_SUBJECT_LEN`](crate::keys::MAX_SUBJECT_LEN) is limited under
    /// its [digest](crate::keys::HashedSubject)).
    type Key: AsRef<[u8]> + Send + 'static;

    /// The key of `request`, or `None` if it has none.
    fn extract(&self, request: &Request<B>) -> Option<Self::Key>;
}

impl<B, K, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<K> + Clone + Send + Sync + 'static,
    K: AsRef<[u8]> + Send + 'static,
{
    type Key = K;

    fn extract(&self, request: &Request<B>) -> Option<K> {
        self(request)
    }
}

/// The peer's IP address, from a connection-info extension of type `T`.
///
/// [`PeerIp::new`] reads a [`SocketAddr`] extension (what hyper-based
/// servers usually insert). With axum, whose
/// `into_make_service_with_connect_info::<SocketAddr>()` inserts
/// `ConnectInfo<SocketAddr>`, say where the address is:
///
/// ```
/// # #[derive(Clone)] struct ConnectInfo<T>(T); // axum::extract::ConnectInfo
/// use std::net::SocketAddr;
/// use shardlimit::tower::PeerIp;
///
/// let peer_ip = PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0);
/// ```
///
/// The key is the address as text (`203.0.113.7`, `2001:db8::1`; an
/// IPv4-mapped IPv6 address is shown as IPv4), formatted on the stack.
///
/// Behind a proxy or load balancer the peer is the proxy: take the client
/// address from the header your proxy sets instead (a closure or
/// [`HeaderKey`]), and only if clients cannot set that header themselves.
pub struct PeerIp<T = SocketAddr> {
    addr: fn(&T) -> SocketAddr,
    _extension: PhantomData<fn(&T)>,
}

impl PeerIp<SocketAddr> {
    /// Reads a [`SocketAddr`] from the request extensions.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use http::Request;
    /// use shardlimit::tower::{KeyExtractor, PeerIp};
    ///
    /// let mut req = Request::new(());
    /// req.extensions_mut().insert("[::ffff:203.0.113.7]:4711".parse::<SocketAddr>().unwrap());
    /// let key = PeerIp::new().extract(&req).unwrap();
    /// assert_eq!(key.as_ref(), b"203.0.113.7");
    /// ```
    #[must_use]
    pub fn new() -> Self {
        PeerIp::from_extension(|addr: &SocketAddr| *addr)
    }
}

impl Default for PeerIp<SocketAddr> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + Sync + 'static> PeerIp<T> {
    /// Reads the extension of type `T` and takes the address from it with
    /// `addr` (a function or non-capturing closure).
    #[must_use]
    pub fn from_extension(addr: fn(&T) -> SocketAddr) -> Self {
        PeerIp {
            addr,
            _extension: PhantomData,
        }
    }
}

impl<T> Clone for PeerIp<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PeerIp<T> {}

impl<T> fmt::Debug for PeerIp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIp")
            .field("extension", &std::any::type_name::<T>())
            .finish()
    }
}

impl<B, T: Send + Sync + 'static> KeyExtractor<B> for PeerIp<T> {
    type Key = IpKey;

    fn extract(&self, request: &Request<B>) -> Option<IpKey> {
        let addr = (self.addr)(request.extensions().get::<T>()?);
        Some(IpKey::new(addr.ip()))
    }
}

/// An IP address as text, on the stack: the key [`PeerIp`] extracts.
///
/// ```
/// use shardlimit::tower::IpKey;
/// let key = IpKey::new("2001:db8::1".parse().unwrap());
/// assert_eq!(key.as_ref(), b"2001:db8::1");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpKey {
    // The longest text form of an IPv6 address is 45 bytes.
    buf: [u8; 48],
    len: u8,
}

impl IpKey {
    /// `ip` as text; IPv4-mapped IPv6 addresses become IPv4.
    #[must_use]
    pub fn new(ip: IpAddr) -> Self {
        let mut buf = [0u8; 48];
        let mut cursor = std::io::Cursor::new(&mut buf[..]);
        // 48 bytes always hold an address; on the impossible overflow the
        // key is just shorter.
        let _ = write!(cursor, "{}", ip.to_canonical());
        let len = u8::try_from(cursor.position()).unwrap_or(48);
        IpKey { buf, len }
    }
}

impl AsRef<[u8]> for IpKey {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl fmt::Debug for IpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpKey({})", String::from_utf8_lossy(self.as_ref()))
    }
}

/// The value of a request header, e.g. an API key. The key is the
/// [`HeaderValue`] itself (a reference-counted clone, no copy); an absent or
/// empty header is a missing key.
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
        HeaderKey { name }
    }

    /// Reads header `name`, a static lowercase header name; like
    /// [`HeaderName::from_static`], it panics if `name` is not one.
    #[must_use]
    pub fn from_static(name: &'static str) -> Self {
        HeaderKey {
            name: HeaderName::from_static(name),
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_keys() {
        for (ip, text) in [
            ("127.0.0.1", "127.0.0.1"),
            ("::ffff:10.1.2.3", "10.1.2.3"),
            (
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            ("::1", "::1"),
        ] {
            let key = IpKey::new(ip.parse().unwrap());
            assert_eq!(key.as_ref(), text.as_bytes());
        }
    }

    #[test]
    fn missing_extension_or_header_is_no_key() {
        let req = Request::new(());
        assert!(PeerIp::new().extract(&req).is_none());
        assert!(HeaderKey::from_static("x-api-key").extract(&req).is_none());
        let empty = Request::builder().header("x-api-key", "").body(()).unwrap();
        assert!(
            HeaderKey::from_static("x-api-key")
                .extract(&empty)
                .is_none()
        );
    }
}
