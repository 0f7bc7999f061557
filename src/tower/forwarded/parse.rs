//! Reading the client chain out of `X-Forwarded-For` and `Forwarded`
//! (RFC 7239) header lines, hop by hop, without allocating.
//!
//! Why not a crate: `forwarded-header-value` 0.1.1 (its parser unchanged
//! since its 2021 release) and `client-ip` 0.2.1, which reads `Forwarded`
//! through it, were run on this module's test cases. They differ where
//! it matters:
//!
//! * They split on every `,` and `;`, quoted or not: a valid quoted comma
//!   or escaped quote (`host="a,b"`) fails the whole line.
//! * One bad element fails the whole line, the proxies' own elements with
//!   it: a client that sends `for=example.com`, to which its proxy
//!   appends, would be keyed as the proxy. Here it is one malformed hop,
//!   left of where the walk stops.
//! * A `proto` other than `http` or `https` (`wss`; RFC 7239 allows any
//!   URI scheme) fails the line.
//! * They read IPv6 without brackets (`for="2001:db8::1"`; RFC 7239, 6 has
//!   it only in brackets) and unbalanced or single quotes (`for="192.0.2.1`,
//!   `for='192.0.2.1'`) as addresses, and let a second `for` in one element
//!   replace the first (RFC 7239, 4: at most once).
//! * They refuse an address with an obfuscated port (`192.0.2.1:_p`,
//!   RFC 7239, 6.3) or a port above 65535 (`1*5DIGIT` allows it; only the
//!   address is used).
//! * Their `X-Forwarded-For` takes bare addresses only: `v4:port`,
//!   `[v6]:port`, `[v6]`, `unknown` or one bad entry fail the line, and
//!   `client-ip`'s also fails on a trailing comma.
//! * `forwarded-header-value` allocates per line (a `Vec`, `String`s for
//!   obfuscated names), and `client-ip` copies the whole header value into
//!   each error: a cost per request whose size the client chooses. This
//!   allocates nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::HeaderValue;

use super::ProxyHeader;

/// One hop of the chain, as the header names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Node {
    /// An address (a port, if any, dropped).
    Ip(IpAddr),
    /// A hop without an address: `unknown`, an obfuscated `_identifier`,
    /// or a `Forwarded` element without `for=`.
    Hidden,
    /// Not parseable. For `Forwarded`, the rest of that header line is
    /// lost with it (its commas cannot be told from quoted ones).
    Malformed,
}

/// The hops of one header line, left to right.
pub(super) fn parse_line(
    header: ProxyHeader,
    line: &HeaderValue,
) -> impl Iterator<Item = Node> + '_ {
    // Only visible ASCII is readable; anything else is one malformed hop.
    match (line.to_str(), header) {
        (Err(_), _) => LineNodes::Opaque { done: false },
        (Ok(text), ProxyHeader::XForwardedFor) => LineNodes::Xff(text.split(',')),
        (Ok(text), ProxyHeader::Forwarded) => {
            LineNodes::Forwarded(ForwardedElements { rest: text })
        }
    }
}

/// An iterator over the hops of one line; an enum rather than a boxed
/// iterator so that reading a header allocates nothing.
enum LineNodes<'a> {
    Opaque { done: bool },
    Xff(std::str::Split<'a, char>),
    Forwarded(ForwardedElements<'a>),
}

impl Iterator for LineNodes<'_> {
    type Item = Node;

    fn next(&mut self) -> Option<Node> {
        match self {
            LineNodes::Opaque { done } => {
                (!std::mem::replace(done, true)).then_some(Node::Malformed)
            }
            LineNodes::Xff(entries) => loop {
                let entry = entries.next()?.trim_matches([' ', '\t']);
                // Empty list elements are ignored (RFC 9110, 5.6.1).
                if !entry.is_empty() {
                    return Some(xff_entry(entry));
                }
            },
            LineNodes::Forwarded(elements) => elements.next(),
        }
    }
}

fn xff_entry(entry: &str) -> Node {
    if entry.eq_ignore_ascii_case("unknown") {
        return Node::Hidden;
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Node::Ip(ip);
    }
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return Node::Ip(addr.ip());
    }
    match entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .map(str::parse::<Ipv6Addr>)
    {
        Some(Ok(ip)) => Node::Ip(IpAddr::V6(ip)),
        _ => Node::Malformed,
    }
}

/// The elements of a `Forwarded` line (RFC 7239, 4):
///
/// ```text
/// Forwarded         = 1#forwarded-element
/// forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
/// forwarded-pair    = token "=" value
/// value             = token / quoted-string
/// ```
///
/// Lenient where it is unambiguous: whitespace around pairs, and unquoted
/// values holding `:` or `[]` (`for=[2001:db8::1]`, `for=192.0.2.1:80`),
/// which some proxies send.
struct ForwardedElements<'a> {
    rest: &'a str,
}

impl Iterator for ForwardedElements<'_> {
    type Item = Node;

    fn next(&mut self) -> Option<Node> {
        loop {
            if trim_ows(self.rest).is_empty() {
                return None;
            }
            match forwarded_element(self.rest) {
                Some((node, rest)) => {
                    self.rest = rest;
                    if let Some(node) = node {
                        return Some(node);
                    }
                }
                None => {
                    self.rest = "";
                    return Some(Node::Malformed);
                }
            }
        }
    }
}

fn trim_ows(s: &str) -> &str {
    s.trim_start_matches([' ', '\t'])
}

/// One element and what follows its comma; `None` inside for an empty
/// element, `None` outside for a malformed one.
fn forwarded_element(mut s: &str) -> Option<(Option<Node>, &str)> {
    let mut for_node = None;
    let mut pairs = 0;
    loop {
        s = trim_ows(s);
        if s.is_empty() {
            break;
        }
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
            break;
        }
        if let Some(rest) = s.strip_prefix(';') {
            s = rest;
            continue;
        }
        let (name, rest) = s.split_once('=')?;
        let name = name.trim_end_matches([' ', '\t']);
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return None;
        }
        let (value, quoted_escape, rest) = forwarded_value(trim_ows(rest))?;
        if name.eq_ignore_ascii_case("for") {
            if for_node.is_some() {
                // Each parameter at most once per element (RFC 7239, 4).
                return None;
            }
            // A node never needs a quoted-pair; an escaped one is not
            // unescaped (which would allocate) but refused.
            for_node = Some(if quoted_escape {
                Node::Malformed
            } else {
                forwarded_node(value)
            });
        }
        pairs += 1;
        s = trim_ows(rest);
        if !(s.is_empty() || s.starts_with([';', ','])) {
            return None;
        }
    }
    let node = (pairs > 0).then(|| for_node.unwrap_or(Node::Hidden));
    Some((node, s))
}

/// A token or a quoted string: its text, whether it held a quoted-pair,
/// and the rest of the line.
fn forwarded_value(s: &str) -> Option<(&str, bool, &str)> {
    if let Some(quoted) = s.strip_prefix('"') {
        let mut escaped = false;
        let mut bytes = quoted.bytes().enumerate();
        while let Some((i, b)) = bytes.next() {
            match b {
                b'\\' => {
                    escaped = true;
                    bytes.next()?;
                }
                b'"' => return Some((&quoted[..i], escaped, &quoted[i + 1..])),
                _ => {}
            }
        }
        return None;
    }
    let end = s.find([';', ',', ' ', '\t', '"']).unwrap_or(s.len());
    let (value, rest) = s.split_at(end);
    (!value.is_empty()).then_some((value, false, rest))
}

/// `node = nodename [ ":" node-port ]` (RFC 7239, 6).
fn forwarded_node(node: &str) -> Node {
    let (name, port) = match node.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, port)) => match addr.parse::<Ipv6Addr>() {
                Ok(ip) => (Some(IpAddr::V6(ip)), port),
                Err(_) => return Node::Malformed,
            },
            None => return Node::Malformed,
        },
        None => {
            let (name, port) = node.find(':').map_or((node, ""), |i| node.split_at(i));
            if name.eq_ignore_ascii_case("unknown") || is_obfuscated(name) {
                (None, port)
            } else {
                match name.parse::<Ipv4Addr>() {
                    Ok(ip) => (Some(IpAddr::V4(ip)), port),
                    Err(_) => return Node::Malformed,
                }
            }
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()) || is_obfuscated(p)
        });
    match (name, port_ok) {
        (_, false) => Node::Malformed,
        (Some(ip), true) => Node::Ip(ip),
        (None, true) => Node::Hidden,
    }
}

/// `"_" 1*( ALPHA / DIGIT / "." / "_" / "-" )`
fn is_obfuscated(s: &str) -> bool {
    s.strip_prefix('_').is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    })
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Node {
        Node::Ip(text.parse().unwrap())
    }

    fn parse(header: ProxyHeader, line: &str) -> Vec<Node> {
        parse_line(header, &HeaderValue::from_str(line).unwrap()).collect()
    }

    fn forwarded(line: &str) -> Vec<Node> {
        parse(ProxyHeader::Forwarded, line)
    }

    fn xff(line: &str) -> Vec<Node> {
        parse(ProxyHeader::XForwardedFor, line)
    }

    #[test]
    fn forwarded_grammar() {
        use Node::Hidden;
        // RFC 7239's own examples.
        assert_eq!(forwarded(r#"for="_gazonk""#), [Hidden]);
        assert_eq!(
            forwarded(r#"For="[2001:db8:cafe::17]:4711""#),
            [ip("2001:db8:cafe::17")]
        );
        assert_eq!(
            forwarded("for=192.0.2.60;proto=http;by=203.0.113.43"),
            [ip("192.0.2.60")]
        );
        assert_eq!(
            forwarded("for=192.0.2.43, for=198.51.100.17"),
            [ip("192.0.2.43"), ip("198.51.100.17")]
        );
        assert_eq!(
            forwarded(r#"for=192.0.2.43,for="[2001:db8:cafe::17]",for=unknown"#),
            [ip("192.0.2.43"), ip("2001:db8:cafe::17"), Hidden]
        );
        // Ports, obfuscated ports, unknown with a port, case.
        assert_eq!(
            forwarded(r#"for="192.0.2.1:8080", for="_hidden:_port", for="UNKNOWN:80""#),
            [ip("192.0.2.1"), Hidden, Hidden]
        );
        // An element without `for`, empty elements and pairs, whitespace.
        assert_eq!(
            forwarded(" proto=https ; by=_lb ,, ; , for = 192.0.2.9 ;"),
            [Hidden, ip("192.0.2.9")]
        );
        // Quoted commas and semicolons belong to the value.
        assert_eq!(
            forwarded(r#"host="a,b;c", for=192.0.2.1"#),
            [Hidden, ip("192.0.2.1")]
        );
        // Leniency: unquoted brackets and ports.
        assert_eq!(
            forwarded("for=[2001:db8::1]:80, for=192.0.2.1:80"),
            [ip("2001:db8::1"), ip("192.0.2.1")]
        );
        // IPv4-mapped stays as written here; keys canonicalize it.
        assert_eq!(
            forwarded(r#"for="[::ffff:192.0.2.1]""#),
            [ip("::ffff:192.0.2.1")]
        );
    }

    #[test]
    fn malformed_forwarded_elements() {
        use Node::Malformed;
        for (line, nodes) in [
            // Not an address, or IPv6 without brackets (its colons are
            // ambiguous with a port).
            ("for=example.com", vec![Malformed]),
            (r#"for="2001:db8::1""#, vec![Malformed]),
            (r#"for="[2001:db8::1""#, vec![Malformed]),
            (r#"for="[not-v6]""#, vec![Malformed]),
            ("for=192.0.2.1:123456", vec![Malformed]),
            ("for=192.0.2.1:", vec![Malformed]),
            ("for=_", vec![Malformed]),
            ("for=_a/b", vec![Malformed]),
            (r#"for="192.0.2.\1""#, vec![Malformed]),
            // Broken syntax loses the rest of the line, not the earlier
            // elements.
            (
                "for=192.0.2.1, for=192.0.2.2;for=192.0.2.3",
                vec![ip("192.0.2.1"), Malformed],
            ),
            (
                r#"for=192.0.2.1, for="192.0.2.2, for=192.0.2.3"#,
                vec![ip("192.0.2.1"), Malformed],
            ),
            ("for=", vec![Malformed]),
            ("=192.0.2.1", vec![Malformed]),
            ("for 192.0.2.1", vec![Malformed]),
            ("f(r=192.0.2.1", vec![Malformed]),
            (r#"for=192.0.2.1"x""#, vec![Malformed]),
            (r#"for="192.0.2.1" x, for=192.0.2.2"#, vec![Malformed]),
            (r#"for="\"#, vec![Malformed]),
        ] {
            assert_eq!(forwarded(line), nodes, "{line}");
        }
        assert!(forwarded("").is_empty());
        assert!(forwarded(" , ").is_empty());
    }

    /// Quoting, ports and parameters as RFC 7239 has them, among them
    /// the cases the crates in the module docs read otherwise.
    #[test]
    fn quotes_ports_and_parameters_as_rfc_7239_has_them() {
        use Node::{Hidden, Malformed};
        for (line, nodes) in [
            // A quoted-pair does not end its quoted string, and the comma
            // after it belongs to the value.
            (
                r#"host="a\",b", for=192.0.2.1"#,
                vec![Hidden, ip("192.0.2.1")],
            ),
            // Any proto, and parameters of extensions, beside `for`.
            ("for=192.0.2.1;proto=wss;ext=x", vec![ip("192.0.2.1")]),
            // An address with an obfuscated port, or five digits of one.
            (
                r#"for=192.0.2.1:_p, for="[2001:db8::1]:_p", for="192.0.2.2:99999""#,
                vec![ip("192.0.2.1"), ip("2001:db8::1"), ip("192.0.2.2")],
            ),
            // A bad element is one hop: the elements after it are read.
            (
                "for=example.com, for=192.0.2.1",
                vec![Malformed, ip("192.0.2.1")],
            ),
            ("for=UNKNOWN, for=Unknown", vec![Hidden, Hidden]),
            // Not addresses: IPv6 without brackets, single quotes,
            // spaces inside the quotes, a quote left open (which takes
            // what a proxy appended to the line with it).
            ("for=2001:db8::1", vec![Malformed]),
            ("for='192.0.2.1'", vec![Malformed]),
            (r#"for=" 192.0.2.1""#, vec![Malformed]),
            (r#"for="192.0.2.1"#, vec![Malformed]),
            (r#"for=192.0.2.1;by=", for=192.0.2.2"#, vec![Malformed]),
        ] {
            assert_eq!(forwarded(line), nodes, "{line}");
        }
        // Bytes outside visible ASCII, even in a quoted string where RFC
        // 9110 allows them: one malformed hop for the line.
        let opaque = HeaderValue::from_bytes(b"host=\"\xc3\xa9\", for=192.0.2.1").unwrap();
        let nodes: Vec<_> = parse_line(ProxyHeader::Forwarded, &opaque).collect();
        assert_eq!(nodes, [Malformed]);
    }

    #[test]
    fn xff_lists() {
        use Node::{Hidden, Malformed};
        assert_eq!(
            xff("203.0.113.7, 10.0.0.1,2001:db8::1"),
            [ip("203.0.113.7"), ip("10.0.0.1"), ip("2001:db8::1")]
        );
        assert_eq!(
            xff("203.0.113.7:4711, [2001:db8::1]:80, [2001:db8::2], unknown"),
            [
                ip("203.0.113.7"),
                ip("2001:db8::1"),
                ip("2001:db8::2"),
                Hidden
            ]
        );
        assert_eq!(
            xff(" ,garbage, 192.0.2.1,, 2001:db8::1:80:x "),
            [Malformed, ip("192.0.2.1"), Malformed]
        );
        assert!(xff("").is_empty());
        // Bytes outside visible ASCII: one malformed hop.
        let opaque = HeaderValue::from_bytes(b"192.0.2.1, \xff").unwrap();
        let nodes: Vec<_> = parse_line(ProxyHeader::XForwardedFor, &opaque).collect();
        assert_eq!(nodes, [Malformed]);
    }
}
