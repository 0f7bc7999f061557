//! Client addresses as keys: prefix masking, the on-stack key text, and
//! the networks of trusted proxies.
//!
//! Why a prefix: an IPv6 client is usually given a whole /64 (or more), so
//! it can pick a fresh address for every request; a limit per /128 is no
//! limit. Keying by the network closes that, at the price of sharing a
//! limit with the rest of the network (fine for one home or host, which is
//! what a /64 is).

use std::fmt;
use std::io::Write as _;
use std::net::IpAddr;

use crate::error::{Error, Result};

/// The default IPv4 prefix: every address is its own key.
pub(crate) const DEFAULT_IPV4_PREFIX: u8 = 32;
/// The default IPv6 prefix: the network one subscriber or host owns.
pub(crate) const DEFAULT_IPV6_PREFIX: u8 = 64;

/// How many leading bits of an address make its key, per family;
/// validated when built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prefixes {
    v4: u8,
    v6: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes {
            v4: DEFAULT_IPV4_PREFIX,
            v6: DEFAULT_IPV6_PREFIX,
        }
    }
}

impl Prefixes {
    /// Checks `v4` is 1 to 32 and `v6` is 1 to 128. Zero is refused: it
    /// would give every client one shared key.
    pub(crate) fn new(v4: u8, v6: u8) -> Result<Self> {
        if !(1..=32).contains(&v4) {
            return Err(Error::Config {
                field: "ipv4_prefix",
                reason: format!("an IPv4 prefix length must be 1 to 32, not {v4}"),
            });
        }
        if !(1..=128).contains(&v6) {
            return Err(Error::Config {
                field: "ipv6_prefix",
                reason: format!("an IPv6 prefix length must be 1 to 128, not {v6}"),
            });
        }
        Ok(Prefixes { v4, v6 })
    }

    /// The key of `ip`: its network under this prefix (an IPv4-mapped IPv6
    /// address counts as IPv4).
    pub(crate) fn key(&self, ip: IpAddr) -> IpKey {
        let ip = ip.to_canonical();
        let prefix = match ip {
            IpAddr::V4(_) => self.v4,
            IpAddr::V6(_) => self.v6,
        };
        // `new` refuses only a prefix past the address length, which
        // `Prefixes::new` has refused already; the whole address then.
        let net = ipnet::IpNet::new(ip, prefix).map_or(ip, |net| net.network());
        IpKey::network(net, prefix)
    }
}

fn family_bits(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// A client address or network as text, on the stack: the key [`PeerIp`]
/// and [`ForwardedIp`] extract. A whole address is written as itself
/// (`203.0.113.7`), a network with its prefix (`2001:db8:1:2::/64`).
///
/// [`PeerIp`]: super::PeerIp
/// [`ForwardedIp`]: super::ForwardedIp
///
/// ```
/// use shardlimit::tower::IpKey;
/// let key = IpKey::new("2001:db8::1".parse().unwrap());
/// assert_eq!(key.as_ref(), b"2001:db8::1");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpKey {
    // The longest text form of an IPv6 address is 45 bytes, and "/127" 4.
    buf: [u8; 56],
    len: u8,
}

impl IpKey {
    /// `ip` as text, the whole address; IPv4-mapped IPv6 addresses become
    /// IPv4.
    #[must_use]
    pub fn new(ip: IpAddr) -> Self {
        let ip = ip.to_canonical();
        IpKey::network(ip, family_bits(ip))
    }

    /// `net/prefix`, or just `net` for a whole address.
    fn network(net: IpAddr, prefix: u8) -> Self {
        let mut buf = [0u8; 56];
        let mut cursor = std::io::Cursor::new(&mut buf[..]);
        // 56 bytes always hold a network; on the impossible overflow the
        // key is just shorter.
        let _ = if prefix >= family_bits(net) {
            write!(cursor, "{net}")
        } else {
            write!(cursor, "{net}/{prefix}")
        };
        let len = u8::try_from(cursor.position()).unwrap_or(56);
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

/// A network of trusted proxies, `10.0.0.0/8` or a single address: the
/// ecosystem's `ipnet::IpNet`, parsed more strictly than its `FromStr`
/// (which takes host bits after the prefix and a /0, and wants a prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IpNet(ipnet::IpNet);

impl IpNet {
    /// Parses `addr` or `addr/prefix`. Refused: host bits set after the
    /// prefix (a typo more often than not), a /0 (trusting every address
    /// lets every client pick its own key), and IPv4-mapped IPv6 (addresses
    /// are matched as IPv4, so such a network would never match).
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let fail = |reason: String| Error::Config {
            field: "trusted_proxies",
            reason: format!("{text:?}: {reason}"),
        };
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text.trim(), None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| fail("not an IP address or CIDR network".into()))?;
        if addr.to_canonical() != addr {
            return Err(fail(format!(
                "write an IPv4-mapped network as IPv4 ({})",
                addr.to_canonical()
            )));
        }
        let bits = family_bits(addr);
        let range = || fail(format!("the prefix length must be 1 to {bits}"));
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| (1..=bits).contains(p))
                .ok_or_else(range)?,
        };
        let net = ipnet::IpNet::new(addr, prefix).map_err(|_| range())?;
        if net.trunc() != net {
            return Err(fail(format!(
                "host bits are set after /{prefix}; did you mean {}?",
                net.trunc()
            )));
        }
        Ok(IpNet(net))
    }

    /// Whether `ip` (an IPv4-mapped one as IPv4) is in the network.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn key(prefixes: Prefixes, addr: &str) -> String {
        String::from_utf8(prefixes.key(ip(addr)).as_ref().to_vec()).unwrap()
    }

    #[test]
    fn whole_addresses() {
        for (addr, text) in [
            ("127.0.0.1", "127.0.0.1"),
            ("::ffff:10.1.2.3", "10.1.2.3"),
            (
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            ("::1", "::1"),
        ] {
            assert_eq!(IpKey::new(ip(addr)).as_ref(), text.as_bytes());
        }
    }

    #[test]
    fn default_prefixes_key_ipv6_by_64_and_ipv4_whole() {
        let d = Prefixes::default();
        assert_eq!(
            key(d, "2001:db8:1:2:aaaa:bbbb:cccc:dddd"),
            "2001:db8:1:2::/64"
        );
        assert_eq!(key(d, "2001:db8:1:2::1"), "2001:db8:1:2::/64");
        assert_eq!(key(d, "2001:db8:1:3::1"), "2001:db8:1:3::/64");
        assert_eq!(key(d, "203.0.113.7"), "203.0.113.7");
        // IPv4-mapped: the IPv4 rule, not the IPv6 /64 (which would put
        // every IPv4 client in ::/64).
        assert_eq!(key(d, "::ffff:203.0.113.7"), "203.0.113.7");
    }

    #[test]
    fn other_prefixes_mask_inside_a_group() {
        let p = Prefixes::new(24, 56).unwrap();
        assert_eq!(key(p, "2001:db8:1:2ff::1"), "2001:db8:1:200::/56");
        assert_eq!(key(p, "203.0.113.7"), "203.0.113.0/24");
        let p = Prefixes::new(1, 1).unwrap();
        assert_eq!(key(p, "255.1.1.1"), "128.0.0.0/1");
        assert_eq!(key(p, "ffff::1"), "8000::/1");
        let p = Prefixes::new(31, 127).unwrap();
        assert_eq!(key(p, "10.0.0.3"), "10.0.0.2/31");
        assert_eq!(
            key(p, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"
        );
        let whole = Prefixes::new(32, 128).unwrap();
        assert_eq!(key(whole, "2001:db8::1"), "2001:db8::1");
    }

    #[test]
    fn prefix_lengths_are_validated() {
        for (v4, v6, field) in [
            (0, 64, "ipv4_prefix"),
            (33, 64, "ipv4_prefix"),
            (32, 0, "ipv6_prefix"),
            (32, 129, "ipv6_prefix"),
        ] {
            let err = Prefixes::new(v4, v6).unwrap_err();
            assert!(
                matches!(err, Error::Config { field: f, .. } if f == field),
                "{v4} {v6}: {err}"
            );
        }
        assert_eq!(
            Prefixes::new(32, 129).unwrap_err().to_string(),
            "invalid configuration: ipv6_prefix: an IPv6 prefix length must be 1 to 128, not 129"
        );
    }

    #[test]
    fn networks_match_their_addresses_only() {
        let net = IpNet::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.255.0.1")));
        assert!(net.contains(ip("::ffff:10.1.2.3")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(!net.contains(ip("::a00:1"))); // IPv4-compatible is not mapped
        let one = IpNet::parse(" 192.0.2.1 ").unwrap();
        assert!(one.contains(ip("192.0.2.1")));
        assert!(!one.contains(ip("192.0.2.2")));
        let v6 = IpNet::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let host = IpNet::parse("2001:db8::1/128").unwrap();
        assert!(host.contains(ip("2001:db8::1")));
    }

    #[test]
    fn bad_networks_are_refused_with_the_reason() {
        for (text, reason) in [
            ("10.0.0.1/8", "did you mean 10.0.0.0/8?"),
            ("0.0.0.0/0", "1 to 32"),
            ("::/0", "1 to 128"),
            ("10.0.0.0/33", "1 to 32"),
            ("10.0.0.0/x", "1 to 32"),
            ("10.0.0.0/", "1 to 32"),
            ("::ffff:10.0.0.0/104", "as IPv4 (10.0.0.0)"),
            ("proxy.internal", "not an IP address"),
            ("", "not an IP address"),
        ] {
            let err = IpNet::parse(text).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Config {
                        field: "trusted_proxies",
                        ..
                    }
                ),
                "{text}: {err}"
            );
            assert!(err.to_string().contains(reason), "{text}: {err}");
        }
    }
}
