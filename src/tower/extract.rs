//! Key extractors: what a request is limited by.

use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};

use http::Request;

use super::ip::{DEFAULT_IPV4_PREFIX, DEFAULT_IPV6_PREFIX, IpKey, Prefixes};
use crate::error::Result;

/// Takes the rate-limit key (the limiter's subject) from a request: a
/// client IP, an API key, a user id put in the extensions by an
/// authentication layer. `None` means the request has no key; the layer's
/// [`MissingKey`](super::MissingKey) policy decides what happens to it.
///
/// Implemented for every `Fn(&Request<B>) -> Option<K>` closure that is
/// `Clone + Send + Sync + 'static`, and by the ready-made [`PeerIp`] and
/// [`HeaderKey`](super::HeaderKey).
///
/// The key must be owned (`'static`): the request moves on to the inner
/// service while the check runs. Return something that does not allocate
/// where you can — a [`HeaderValue`](http::HeaderValue) clone only bumps a reference count.
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

    /// Whether the key is a credential — an API key, a bearer token — that
    /// must not be stored in Redis as it is: the layer then limits it under
    /// its keyed digest, `hmac:…`
    /// ([`Cluster::subject_hasher`](crate::Cluster::subject_hasher)), and
    /// the admin view shows that digest; an operator finds it by the raw
    /// key (`shardlimit show`, the Limits page's find box). The default is
    /// `false`, for keys that are no secret and are best read as they are
    /// (an IP address, a host, a user id); [`HeaderKey`](super::HeaderKey)
    /// says `true` unless told otherwise
    /// ([`HeaderKey::credential`](super::HeaderKey::credential)).
    ///
    /// ```
    /// use http::Request;
    /// use shardlimit::tower::{HeaderKey, KeyExtractor, PeerIp};
    /// assert!(KeyExtractor::<()>::is_credential(&HeaderKey::from_static("x-api-key")));
    /// assert!(!KeyExtractor::<()>::is_credential(&PeerIp::new()));
    /// ```
    fn is_credential(&self) -> bool {
        false
    }

    /// Where the key is looked for, for the warning the layer logs (at
    /// most every few seconds) when requests have none: `the request
    /// extension core::net::SocketAddr`, `header x-api-key`. The default
    /// names the extractor's type.
    fn looked_for(&self) -> String {
        format!("the key returned by {}", std::any::type_name::<Self>())
    }
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

/// The peer's IP address, from a connection-info extension of type `T`;
/// an IPv6 peer is keyed by its /64 network.
///
/// With axum (feature `axum`), serve the app with
/// `into_make_service_with_connect_info::<SocketAddr>()` — axum then puts
/// a `ConnectInfo<SocketAddr>` in every request — and use
/// [`PeerIp::connect_info`] (or [`PeerIp::new`], which finds either):
///
/// ```no_run
/// # #[cfg(feature = "axum")]
/// # async fn demo(limiter: shardlimit::RateLimiter) {
/// use std::net::SocketAddr;
/// use axum::{Router, routing::get};
/// use shardlimit::tower::{PeerIp, RateLimitLayer};
///
/// let app = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(limiter, PeerIp::connect_info()));
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await.unwrap();
/// axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
///     .await
///     .unwrap();
/// # }
/// ```
///
/// [`PeerIp::new`] reads a plain [`SocketAddr`] extension (what
/// hyper-based servers usually insert) and, with feature `axum`, axum's
/// `ConnectInfo<SocketAddr>`. Any other extension:
/// [`PeerIp::from_extension`]. A request without the extension has no key
/// (see [`MissingKey`](super::MissingKey)), and the layer's warning names
/// the extension it looked for.
///
/// The key ([`IpKey`]) is formatted on the stack: an IPv4 address as itself
/// (`203.0.113.7`; an IPv4-mapped IPv6 address counts as IPv4), an IPv6
/// address as its /64 network (`2001:db8:1:2::/64`), because any IPv6
/// client owns a /64 and could otherwise take a fresh address, and a fresh
/// limit, for every request. [`PeerIp::builder`] sets other prefix lengths.
///
/// Behind a proxy or load balancer the peer is the proxy: use
/// [`ForwardedIp`](super::ForwardedIp), which believes the proxy's
/// `Forwarded` or `X-Forwarded-For` header only when the peer is a proxy
/// you trust.
pub struct PeerIp<T = SocketAddr> {
    addr: fn(&T) -> SocketAddr,
    /// A second extension to read when `T` is absent: axum's connect info,
    /// for [`PeerIp::new`].
    fallback: Option<Fallback>,
    prefixes: Prefixes,
    _extension: PhantomData<fn(&T)>,
}

/// Reads the peer's address from another extension, and names it.
#[derive(Clone, Copy)]
struct Fallback {
    read: fn(&http::Extensions) -> Option<SocketAddr>,
    name: &'static str,
}

#[cfg(feature = "axum")]
fn axum_connect_info(extensions: &http::Extensions) -> Option<SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0)
}

#[cfg(feature = "axum")]
const AXUM_CONNECT_INFO: Option<Fallback> = Some(Fallback {
    read: axum_connect_info,
    name: "axum::extract::ConnectInfo<core::net::SocketAddr>",
});

#[cfg(not(feature = "axum"))]
const AXUM_CONNECT_INFO: Option<Fallback> = None;

impl PeerIp<SocketAddr> {
    /// Reads a [`SocketAddr`] from the request extensions or, with feature
    /// `axum`, axum's `ConnectInfo<SocketAddr>`: either server's way of
    /// telling the peer.
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
        PeerIp {
            fallback: AXUM_CONNECT_INFO,
            ..PeerIp::from_extension(|addr: &SocketAddr| *addr)
        }
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl PeerIp<axum::extract::ConnectInfo<SocketAddr>> {
    /// Reads axum's `ConnectInfo<SocketAddr>`, which axum inserts when the
    /// app is served with `into_make_service_with_connect_info::<SocketAddr>()`
    /// (feature `axum`). Other prefix lengths:
    /// `PeerIp::builder(|info: &ConnectInfo<SocketAddr>| info.0)`.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use http::Request;
    /// use shardlimit::tower::{KeyExtractor, PeerIp};
    ///
    /// let mut req = Request::new(());
    /// req.extensions_mut().insert(ConnectInfo("203.0.113.7:4711".parse::<SocketAddr>().unwrap()));
    /// assert_eq!(PeerIp::connect_info().extract(&req).unwrap().as_ref(), b"203.0.113.7");
    /// ```
    #[must_use]
    pub fn connect_info() -> Self {
        PeerIp::from_extension(|info: &axum::extract::ConnectInfo<SocketAddr>| info.0)
    }
}

impl Default for PeerIp<SocketAddr> {
    fn default() -> Self {
        Self::new()
    }
}

impl PeerIp<SocketAddr> {
    /// Reads the peer's address with `read` from the request's extensions,
    /// for a server whose connection info is neither a plain [`SocketAddr`]
    /// (read first all the same) nor a type holding one for sure — tonic's
    /// `TcpConnectInfo`, whose address is optional. `name` says what `read`
    /// looks for, in the warning about requests without a key.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use http::Request;
    /// use shardlimit::tower::{KeyExtractor, PeerIp};
    ///
    /// #[derive(Clone)]
    /// struct ConnInfo { remote: Option<SocketAddr> }
    /// let peer_ip = PeerIp::from_extensions("ConnInfo", |ext| ext.get::<ConnInfo>()?.remote);
    /// let mut req = Request::new(());
    /// req.extensions_mut().insert(ConnInfo { remote: "192.0.2.1:50051".parse().ok() });
    /// assert_eq!(peer_ip.extract(&req).unwrap().as_ref(), b"192.0.2.1");
    /// ```
    #[must_use]
    pub fn from_extensions(
        name: &'static str,
        read: fn(&http::Extensions) -> Option<SocketAddr>,
    ) -> Self {
        PeerIp {
            fallback: Some(Fallback { read, name }),
            ..PeerIp::from_extension(|addr: &SocketAddr| *addr)
        }
    }
}

impl<T: Send + Sync + 'static> PeerIp<T> {
    /// Reads the extension of type `T` and takes the address from it with
    /// `addr` (a function or non-capturing closure); IPv6 by /64, IPv4 by
    /// address.
    #[must_use]
    pub fn from_extension(addr: fn(&T) -> SocketAddr) -> Self {
        PeerIp {
            addr,
            fallback: None,
            prefixes: Prefixes::default(),
            _extension: PhantomData,
        }
    }

    /// A builder for other prefix lengths, reading the extension of type
    /// `T` like [`from_extension`](Self::from_extension).
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use http::Request;
    /// use shardlimit::tower::{KeyExtractor, PeerIp};
    ///
    /// // A /56 per IPv6 client (what many ISPs delegate), a /24 per IPv4 one.
    /// let peer_ip = PeerIp::builder(|addr: &SocketAddr| *addr)
    ///     .ipv6_prefix(56)
    ///     .ipv4_prefix(24)
    ///     .build()?;
    /// let mut req = Request::new(());
    /// req.extensions_mut().insert("[2001:db8:0:12ff::1]:443".parse::<SocketAddr>().unwrap());
    /// assert_eq!(peer_ip.extract(&req).unwrap().as_ref(), b"2001:db8:0:1200::/56");
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn builder(addr: fn(&T) -> SocketAddr) -> PeerIpBuilder<T> {
        PeerIpBuilder {
            addr,
            ipv4_prefix: DEFAULT_IPV4_PREFIX,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// The peer's address, unmasked, if the request has the extension.
    pub(crate) fn peer(&self, extensions: &http::Extensions) -> Option<IpAddr> {
        match extensions.get::<T>() {
            Some(ext) => Some((self.addr)(ext).ip()),
            None => self
                .fallback
                .and_then(|fallback| (fallback.read)(extensions))
                .map(|addr| addr.ip()),
        }
    }

    /// The extensions it reads, for a warning about requests without one.
    pub(crate) fn extensions_read(&self) -> String {
        let mut text = format!("the request extension {}", std::any::type_name::<T>());
        match self.fallback {
            Some(fallback) => {
                text.push_str(" or ");
                text.push_str(fallback.name);
            }
            None if std::any::type_name::<T>() == std::any::type_name::<SocketAddr>() => {
                text.push_str(
                    " (with axum: serve with into_make_service_with_connect_info::<SocketAddr>() \
                     and enable shardlimit's feature `axum`, or use \
                     PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0))",
                );
            }
            None => {}
        }
        text
    }

    /// The key of `ip` under this extractor's prefix lengths.
    pub(crate) fn key(&self, ip: IpAddr) -> IpKey {
        self.prefixes.key(ip)
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
            .field("or", &self.fallback.map(|f| f.name))
            .field("prefixes", &self.prefixes)
            .finish()
    }
}

impl<B, T: Send + Sync + 'static> KeyExtractor<B> for PeerIp<T> {
    type Key = IpKey;

    fn extract(&self, request: &Request<B>) -> Option<IpKey> {
        self.peer(request.extensions()).map(|ip| self.key(ip))
    }

    fn looked_for(&self) -> String {
        self.extensions_read()
    }
}

/// Configures a [`PeerIp`]'s prefix lengths: how many leading bits of an
/// address are its key. [`build`](Self::build) validates them.
///
/// ```
/// use std::net::SocketAddr;
/// use shardlimit::tower::PeerIp;
/// let peer_ip = PeerIp::builder(|addr: &SocketAddr| *addr)
///     .ipv6_prefix(64) // default
///     .ipv4_prefix(32) // default
///     .build()?;
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[must_use]
pub struct PeerIpBuilder<T> {
    addr: fn(&T) -> SocketAddr,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

impl<T: Send + Sync + 'static> PeerIpBuilder<T> {
    /// The prefix length an IPv6 address is keyed by, 1 to 128. Default
    /// 64: one subscriber or host. 128 keys every address separately, which
    /// a client escapes by rotating addresses within its /64.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits;
        self
    }

    /// The prefix length an IPv4 address (or an IPv4-mapped IPv6 one) is
    /// keyed by, 1 to 32. Default 32: every address separately.
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.ipv4_prefix = bits;
        self
    }

    /// Validates the prefix lengths.
    ///
    /// Errors with [`Error::Config`](crate::Error::Config), field
    /// `ipv6_prefix` or `ipv4_prefix`, for a length outside its range.
    pub fn build(self) -> Result<PeerIp<T>> {
        Ok(PeerIp {
            addr: self.addr,
            fallback: None,
            prefixes: Prefixes::new(self.ipv4_prefix, self.ipv6_prefix)?,
            _extension: PhantomData,
        })
    }
}

impl<T> fmt::Debug for PeerIpBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIpBuilder")
            .field("extension", &std::any::type_name::<T>())
            .field("ipv4_prefix", &self.ipv4_prefix)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_ip_keys_by_prefix() {
        let mut req = Request::new(());
        let v6: SocketAddr = "[2001:db8:1:2:3:4:5:6]:80".parse().unwrap();
        req.extensions_mut().insert(v6);
        let key = PeerIp::new().extract(&req).unwrap();
        assert_eq!(key.as_ref(), b"2001:db8:1:2::/64");
        let whole = PeerIp::builder(|a: &SocketAddr| *a)
            .ipv6_prefix(128)
            .build()
            .unwrap();
        assert_eq!(
            whole.extract(&req).unwrap().as_ref(),
            b"2001:db8:1:2:3:4:5:6"
        );
        let err = PeerIp::builder(|a: &SocketAddr| *a)
            .ipv4_prefix(0)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("ipv4_prefix"), "{err}");
    }

    #[test]
    fn missing_extension_is_no_key() {
        let req = Request::new(());
        assert!(PeerIp::new().extract(&req).is_none());
    }
}
