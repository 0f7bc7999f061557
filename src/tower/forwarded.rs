//! `ForwardedIp`: the client address behind trusted proxies, from
//! `Forwarded` (RFC 7239) or `X-Forwarded-For`.
//!
//! Why trust is decided per hop: anyone can send these headers. A proxy
//! *appends* the address it got the request from, so the rightmost entries
//! are the only ones written by machines you run; everything to their left
//! came from the client. Reading the header is only safe when the TCP peer
//! is one of your proxies, and then only from the right, up to the first
//! entry that is not one of them: that is the address your outermost proxy
//! saw. Whatever cannot be read as an address there (`unknown`, an
//! obfuscated `_id`, a malformed entry) gives no address to limit, so the
//! request is limited by the peer, the proxy itself: a shared limit, never
//! a free pass.
//!
//! Why the walk is not a crate's: `client-ip` 0.2.1, the extractor under
//! `axum-client-ip`, has no trusted proxies and no hop count. Its
//! `rightmost_forwarded` and `rightmost_x_forwarded_for` read the last
//! entry of the last header line, one hop, without looking at the peer:
//! our `hops(1)` with the peer check left to the caller, and its parsing
//! (`parse.rs` says how that differs).

mod parse;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;

use http::Request;
use http::header::{FORWARDED, HeaderMap, HeaderName};

use self::parse::{Node, parse_line};
use super::extract::{KeyExtractor, PeerIp};
use super::ip::{IpKey, IpNet};
use crate::error::{Error, Result};

/// The header your proxies put the client address in.
///
/// Read only the one your proxies set (and, ideally, strip on the way in):
/// a header they do not touch is entirely the client's to write.
///
/// ```
/// use shardlimit::tower::ProxyHeader;
/// let header = ProxyHeader::XForwardedFor; // nginx, AWS ALB, most balancers
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `Forwarded` (RFC 7239): the `for=` parameter of each element, e.g.
    /// `for=192.0.2.60;proto=https, for="[2001:db8::1]:4711"`.
    Forwarded,
    /// `X-Forwarded-For`: addresses separated by commas, e.g.
    /// `203.0.113.7, 10.0.0.2`; `[v6]:port` and `v4:port` are accepted.
    XForwardedFor,
}

impl ProxyHeader {
    fn name(self) -> HeaderName {
        match self {
            ProxyHeader::Forwarded => FORWARDED,
            ProxyHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
        }
    }
}

/// The client's IP address behind trusted proxies: the address your
/// outermost proxy saw, taken from [`ProxyHeader`] **only** when the TCP
/// peer is one of the trusted proxies; keyed like [`PeerIp`] (IPv6 by /64).
///
/// * Peer not trusted: the key is the peer, whatever the headers say (a
///   client cannot pick its key by sending `X-Forwarded-For`).
/// * Peer trusted: the header's entries are read from the right, skipping
///   trusted proxies; the first other entry is the client. With
///   [`hops`](ForwardedIpBuilder::hops), the entry that many hops from
///   the right is, instead.
/// * No address to be found there (`unknown`, an obfuscated identifier, a
///   malformed entry, a chain of only trusted proxies, no header): the key
///   is the peer.
///
/// ```
/// use std::net::SocketAddr;
/// use http::Request;
/// use shardlimit::tower::{ForwardedIp, KeyExtractor, PeerIp, ProxyHeader};
///
/// // Behind load balancers in 10.0.0.0/8 that append to X-Forwarded-For.
/// let client_ip = ForwardedIp::builder(PeerIp::new(), ProxyHeader::XForwardedFor)
///     .trust("10.0.0.0/8")
///     .build()?;
///
/// let from = |peer: &str, xff: &str| {
///     let mut req = Request::builder().header("x-forwarded-for", xff).body(()).unwrap();
///     req.extensions_mut().insert(peer.parse::<SocketAddr>().unwrap());
///     client_ip.extract(&req).unwrap()
/// };
/// // Through the balancer: the address it saw (the client's own entry,
/// // 192.0.2.1, is its to invent and is not believed).
/// assert_eq!(from("10.0.0.2:50000", "192.0.2.1, 203.0.113.7").as_ref(), b"203.0.113.7");
/// // Straight from the internet: the peer, the header is ignored.
/// assert_eq!(from("198.51.100.9:50000", "203.0.113.7").as_ref(), b"198.51.100.9");
/// # Ok::<(), shardlimit::Error>(())
/// ```
pub struct ForwardedIp<T = SocketAddr> {
    peer: PeerIp<T>,
    header: ProxyHeader,
    name: HeaderName,
    trusted: Arc<[IpNet]>,
    hops: Option<NonZeroU32>,
}

impl<T: Send + Sync + 'static> ForwardedIp<T> {
    /// A builder reading the TCP peer with `peer` (which also sets the
    /// prefix lengths of the key, see [`PeerIp::builder`]) and the client
    /// address from `header`.
    ///
    /// ```
    /// # #[derive(Clone)] struct ConnectInfo<T>(T); // axum::extract::ConnectInfo
    /// use std::net::SocketAddr;
    /// use shardlimit::tower::{ForwardedIp, PeerIp, ProxyHeader};
    ///
    /// let client_ip = ForwardedIp::builder(
    ///     PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0),
    ///     ProxyHeader::Forwarded,
    /// )
    /// .trust("192.0.2.10")
    /// .trust("2001:db8:ffff::/48")
    /// .build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn builder(peer: PeerIp<T>, header: ProxyHeader) -> ForwardedIpBuilder<T> {
        ForwardedIpBuilder {
            peer,
            header,
            trusted: Vec::new(),
            hops: None,
        }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }

    /// The address to limit: the client's if trusted proxies name it,
    /// otherwise the peer's.
    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let nodes = || {
            headers
                .get_all(&self.name)
                .iter()
                .flat_map(move |line| parse_line(self.header, line))
        };
        let pick = match self.hops {
            // The last entry in reading order that is not a trusted proxy
            // is the first from the right.
            None => nodes()
                .filter(|node| !matches!(node, Node::Ip(ip) if self.is_trusted(*ip)))
                .last(),
            // Counting first and picking by index walks the header twice
            // but allocates nothing.
            Some(hops) => usize::try_from(hops.get())
                .ok()
                .and_then(|hops| nodes().count().checked_sub(hops))
                .and_then(|index| nodes().nth(index)),
        };
        match pick {
            Some(Node::Ip(ip)) => ip,
            _ => peer,
        }
    }
}

impl<T> Clone for ForwardedIp<T> {
    fn clone(&self) -> Self {
        ForwardedIp {
            peer: self.peer,
            header: self.header,
            name: self.name.clone(),
            trusted: Arc::clone(&self.trusted),
            hops: self.hops,
        }
    }
}

impl<T> fmt::Debug for ForwardedIp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardedIp")
            .field("peer", &self.peer)
            .field("header", &self.header)
            .field("trusted", &self.trusted)
            .field("hops", &self.hops)
            .finish()
    }
}

impl<B, T: Send + Sync + 'static> KeyExtractor<B> for ForwardedIp<T> {
    type Key = IpKey;

    fn extract(&self, request: &Request<B>) -> Option<IpKey> {
        let peer = self.peer.peer(request.extensions())?;
        Some(self.peer.key(self.client(peer, request.headers())))
    }

    fn looked_for(&self) -> String {
        self.peer.extensions_read()
    }
}

/// Configures a [`ForwardedIp`]: which proxies are trusted and how the
/// client is found among the header's entries. [`build`](Self::build)
/// validates.
///
/// ```
/// use std::num::NonZeroU32;
/// use shardlimit::tower::{ForwardedIp, PeerIp, ProxyHeader};
/// let client_ip = ForwardedIp::builder(PeerIp::new(), ProxyHeader::XForwardedFor)
///     .trust("10.0.0.0/8")          // required, at least one
///     .hops(NonZeroU32::new(2).unwrap()) // default: walk the trusted proxies
///     .build()?;
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[must_use]
pub struct ForwardedIpBuilder<T> {
    peer: PeerIp<T>,
    header: ProxyHeader,
    trusted: Vec<String>,
    hops: Option<NonZeroU32>,
}

impl<T: Send + Sync + 'static> ForwardedIpBuilder<T> {
    /// Trusts a proxy address (`192.0.2.10`, `2001:db8::10`) or network
    /// (`10.0.0.0/8`, `2001:db8:ffff::/48`); call once per address or
    /// network. No default: at least one is required. Only your own
    /// proxies belong here — a trusted address can name any client it
    /// likes. IPv4-mapped IPv6 peers and entries match IPv4 networks.
    pub fn trust(mut self, net: impl AsRef<str>) -> Self {
        self.trusted.push(net.as_ref().to_owned());
        self
    }

    /// Takes the entry `hops` places from the right of the chain (the
    /// header's entries followed by the peer), for a fixed number of
    /// proxies in front of the service: with one balancer, `1` is the last
    /// entry, the address the balancer saw. Only the peer must be trusted;
    /// a chain shorter than that gives the peer.
    ///
    /// Default: none — the entries are walked from the right, skipping
    /// every trusted proxy, which needs all of them listed in
    /// [`trust`](Self::trust) but tolerates a varying number of hops.
    pub fn hops(mut self, hops: NonZeroU32) -> Self {
        self.hops = Some(hops);
        self
    }

    /// Parses the trusted networks; contacts nothing.
    ///
    /// Errors with [`Error::Config`], field `trusted_proxies`: none given,
    /// or one that is not an address or `address/prefix` with the prefix
    /// in range and no host bits set after it (`10.0.0.1/8`), or `/0`
    /// (every client would be trusted), or written IPv4-mapped.
    pub fn build(self) -> Result<ForwardedIp<T>> {
        if self.trusted.is_empty() {
            return Err(Error::Config {
                field: "trusted_proxies",
                reason: "no trusted proxy: trust at least one address or network \
                         (without proxies, PeerIp is the extractor)"
                    .into(),
            });
        }
        let trusted = self
            .trusted
            .iter()
            .map(|net| IpNet::parse(net))
            .collect::<Result<Arc<[IpNet]>>>()?;
        Ok(ForwardedIp {
            peer: self.peer,
            header: self.header,
            name: self.header.name(),
            trusted,
            hops: self.hops,
        })
    }
}

impl<T> fmt::Debug for ForwardedIpBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardedIpBuilder")
            .field("peer", &self.peer)
            .field("header", &self.header)
            .field("trusted", &self.trusted)
            .field("hops", &self.hops)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extractor(header: ProxyHeader, hops: Option<u32>) -> ForwardedIp {
        let mut builder = ForwardedIp::builder(PeerIp::new(), header)
            .trust("10.0.0.0/8")
            .trust("2001:db8:ffff::/48");
        if let Some(hops) = hops {
            builder = builder.hops(NonZeroU32::new(hops).unwrap());
        }
        builder.build().unwrap()
    }

    fn key(x: &ForwardedIp, peer: &str, lines: &[(&str, &str)]) -> String {
        let mut req = Request::builder();
        for (name, value) in lines {
            req = req.header(*name, *value);
        }
        let mut req = req.body(()).unwrap();
        req.extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        String::from_utf8(x.extract(&req).unwrap().as_ref().to_vec()).unwrap()
    }

    #[test]
    fn the_chain_is_walked_from_the_right_past_trusted_proxies() {
        let x = extractor(ProxyHeader::XForwardedFor, None);
        let h = "x-forwarded-for";
        // Spoofed entries left of the client's are never reached.
        let chain = [(h, "1.1.1.1, 203.0.113.7, 10.1.1.1")];
        assert_eq!(key(&x, "10.0.0.2:1", &chain), "203.0.113.7");
        // Several header lines are one list, in order.
        let lines = [(h, "1.1.1.1"), (h, "203.0.113.7, 10.1.1.1")];
        assert_eq!(key(&x, "10.0.0.2:1", &lines), "203.0.113.7");
        // An untrusted peer: its header is ignored.
        assert_eq!(key(&x, "198.51.100.1:1", &chain), "198.51.100.1");
        // A trusted IPv4-mapped peer; an IPv6 client keyed by its /64.
        let v6 = [(h, "2001:db8:1:2::99, 2001:db8:ffff::1")];
        assert_eq!(key(&x, "[::ffff:10.0.0.2]:1", &v6), "2001:db8:1:2::/64");
        // Nothing usable: the peer (the proxy) is the key.
        for line in [
            "",
            "10.1.1.1, 10.2.2.2",
            "unknown",
            "garbage",
            "1.1.1.1, junk",
        ] {
            assert_eq!(key(&x, "10.0.0.2:1", &[(h, line)]), "10.0.0.2", "{line}");
        }
        assert_eq!(key(&x, "10.0.0.2:1", &[]), "10.0.0.2");
        // Another header is not read.
        assert_eq!(
            key(&x, "10.0.0.2:1", &[("forwarded", "for=203.0.113.7")]),
            "10.0.0.2"
        );
    }

    #[test]
    fn forwarded_from_a_trusted_proxy() {
        let x = extractor(ProxyHeader::Forwarded, None);
        let h = "forwarded";
        let line = r#"for=1.1.1.1, for="[2001:db8:1:2::5]:4711";proto=https, for=10.9.9.9"#;
        assert_eq!(key(&x, "10.0.0.2:1", &[(h, line)]), "2001:db8:1:2::/64");
        let obfuscated = r#"for=203.0.113.7, for="_client1""#;
        assert_eq!(key(&x, "10.0.0.2:1", &[(h, obfuscated)]), "10.0.0.2");
        // A client's broken line does not hide the proxy's own line.
        let lines = [(h, r#"for="1.1.1.1"#), (h, "for=203.0.113.7")];
        assert_eq!(key(&x, "10.0.0.2:1", &lines), "203.0.113.7");
        assert_eq!(key(&x, "203.0.113.50:1", &[(h, line)]), "203.0.113.50");
    }

    #[test]
    fn a_fixed_hop_count_picks_by_position() {
        let h = "x-forwarded-for";
        let chain = [(h, "1.1.1.1, 203.0.113.7, 198.51.100.4")];
        let one = extractor(ProxyHeader::XForwardedFor, Some(1));
        assert_eq!(key(&one, "10.0.0.2:1", &chain), "198.51.100.4");
        let two = extractor(ProxyHeader::XForwardedFor, Some(2));
        assert_eq!(key(&two, "10.0.0.2:1", &chain), "203.0.113.7");
        // Too short a chain, or an untrusted peer: the peer.
        let four = extractor(ProxyHeader::XForwardedFor, Some(4));
        assert_eq!(key(&four, "10.0.0.2:1", &chain), "10.0.0.2");
        assert_eq!(key(&one, "198.51.100.1:1", &chain), "198.51.100.1");
        assert_eq!(key(&one, "10.0.0.2:1", &[(h, "1.1.1.1, junk")]), "10.0.0.2");
    }

    /// Entries a client writes left of its proxy's, and line shapes
    /// proxies send (`client-ip` 0.2.1 gives no address for the garbage,
    /// `wss`, trailing comma and empty last line cases).
    #[test]
    fn a_client_cannot_move_its_key_with_entries_it_writes() {
        let fwd = extractor(ProxyHeader::Forwarded, None);
        let h = "forwarded";
        // The proxy appends to the client's line: the client's garbage is
        // a hop the walk never reaches.
        let garbage = [(h, "for=example.com, for=203.0.113.7")];
        assert_eq!(key(&fwd, "10.0.0.2:1", &garbage), "203.0.113.7");
        // A quote left open takes the proxy's element into it: no address
        // there, so the peer, never the spoofed 1.1.1.1.
        let open_quote = [(h, r#"for=1.1.1.1;by=", for=203.0.113.7"#)];
        assert_eq!(key(&fwd, "10.0.0.2:1", &open_quote), "10.0.0.2");
        let websocket = [(h, "for=203.0.113.7;proto=wss")];
        assert_eq!(key(&fwd, "10.0.0.2:1", &websocket), "203.0.113.7");

        let xff = extractor(ProxyHeader::XForwardedFor, None);
        let h = "x-forwarded-for";
        let trailing_comma = [(h, "1.1.1.1, 203.0.113.7, ")];
        assert_eq!(key(&xff, "10.0.0.2:1", &trailing_comma), "203.0.113.7");
        // Hops count over every line, an empty one adding none.
        let lines = [(h, "1.1.1.1, 203.0.113.7"), (h, "198.51.100.4"), (h, "")];
        let two = extractor(ProxyHeader::XForwardedFor, Some(2));
        assert_eq!(key(&two, "10.0.0.2:1", &lines), "203.0.113.7");
        let one = extractor(ProxyHeader::XForwardedFor, Some(1));
        assert_eq!(key(&one, "10.0.0.2:1", &lines), "198.51.100.4");
    }

    #[test]
    fn the_builder_needs_a_trusted_proxy() {
        let err = ForwardedIp::builder(PeerIp::new(), ProxyHeader::Forwarded)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("no trusted proxy"), "{err}");
    }
}
