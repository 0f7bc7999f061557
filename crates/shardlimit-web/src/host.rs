//! The host names the Limits page answers to: a defence against DNS
//! rebinding.
//!
//! A page on any web site the operator visits can rebind its own name to
//! `127.0.0.1` and then read, as same-origin, everything a local
//! `shardlimit web` serves — every subject, the topology. The browser still
//! sends the attacker's name in `Host`, so the router answers only to names
//! that cannot be rebound: `localhost`, loopback addresses, and the names
//! its options allow (an address given by number cannot be rebound either,
//! but only the listen address is known to be ours). Any port goes with
//! those names: a rebound page uses the real port too, only its name
//! differs.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The names a request's `Host` may carry besides the loopback ones, in the
/// form [`canonical`] gives. Shared: the middleware holds a copy per
/// request.
#[derive(Clone, Debug, Default)]
pub(super) struct AllowedHosts(Arc<BTreeSet<String>>);

impl AllowedHosts {
    /// Adds `name` (a host name or an IP address, without port); `Err`
    /// says why it is not one.
    pub(super) fn add(&mut self, name: &str) -> Result<(), String> {
        // An IPv6 address may come in brackets, as in a URL.
        let bare = name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .filter(|n| n.parse::<std::net::Ipv6Addr>().is_ok())
            .unwrap_or(name);
        match canonical(bare) {
            Some(host) => {
                Arc::make_mut(&mut self.0).insert(host);
                Ok(())
            }
            None => Err(format!(
                "{name:?} is not a host name or an IP address (give it without scheme, port or path)"
            )),
        }
    }

    /// Whether a request whose authority (`Host`, or HTTP/2's
    /// `:authority`) is `authority` is answered.
    pub(super) fn permits(&self, authority: &str) -> bool {
        host_of(authority).is_some_and(|host| {
            host == "localhost"
                || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
                || self.0.contains(&host)
        })
    }
}

/// The host of an authority — `host`, `host:port`, `[v6]` or `[v6]:port` —
/// in [`canonical`] form; `None` if it is not one.
fn host_of(authority: &str) -> Option<String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (v6, after) = rest.split_once(']')?;
            v6.parse::<std::net::Ipv6Addr>().ok()?;
            match after {
                "" => (v6, ""),
                _ => (v6, after.strip_prefix(':')?),
            }
        }
        None => authority.split_once(':').unwrap_or((authority, "")),
    };
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    canonical(host)
}

/// A host name lowercased without its trailing dot, or an IP address as
/// Rust prints it (IPv6 without brackets); `None` for anything else.
fn canonical(host: &str) -> Option<String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(ip.to_string());
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (name.len() <= 253 && name.split('.').all(label)).then(|| name.to_ascii_lowercase())
}

/// Every authority the request names: the URI's (HTTP/2, or an HTTP/1.1
/// absolute-form target) and each `Host` header. A request is answered only
/// if there is one and every one is allowed.
fn authorities(request: &Request) -> Vec<&str> {
    let uri: &Uri = request.uri();
    uri.authority()
        .map(|a| a.as_str())
        .into_iter()
        .chain(
            request
                .headers()
                .get_all(header::HOST)
                .iter()
                // Not text: matches no allowed name.
                .map(|v| v.to_str().unwrap_or("\u{fffd}")),
        )
        .collect()
}

/// Middleware: `403` for a write (any method but `GET` and `HEAD`) that a
/// browser says comes from another site — an `Origin` that is not this
/// page's own (`null` included), or `Sec-Fetch-Site: cross-site` — before
/// its CSRF token is even read. A request without either header (a script,
/// `curl`) is no cross-site request and goes on to the token.
pub(super) async fn same_origin(request: Request, next: Next) -> Response {
    let method = request.method();
    if method == axum::http::Method::GET || method == axum::http::Method::HEAD {
        return next.run(request).await;
    }
    let headers = request.headers();
    let own = authorities(&request);
    let origin_ok = headers.get(header::ORIGIN).is_none_or(|origin| {
        origin
            .to_str()
            .ok()
            .and_then(|o| {
                o.strip_prefix("http://")
                    .or_else(|| o.strip_prefix("https://"))
            })
            .is_some_and(|authority| {
                !own.is_empty() && own.iter().all(|a| a.eq_ignore_ascii_case(authority))
            })
    });
    let site_ok = headers
        .get("sec-fetch-site")
        .is_none_or(|site| site.as_bytes() != b"cross-site");
    if origin_ok && site_ok {
        return next.run(request).await;
    }
    (
        StatusCode::FORBIDDEN,
        "refused: a write from another site's page (its Origin is not this page's)\n",
    )
        .into_response()
}

/// Middleware: `421 Misdirected Request` for a request to a name this page
/// does not answer to.
pub(super) async fn check(
    State(hosts): State<AllowedHosts>,
    request: Request,
    next: Next,
) -> Response {
    let named = authorities(&request);
    if !named.is_empty() && named.iter().all(|a| hosts.permits(a)) {
        return next.run(request).await;
    }
    let asked = named
        .first()
        .map_or("none".to_owned(), |a| format!("{a:?}"));
    (
        StatusCode::MISDIRECTED_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "421 Misdirected Request: the shardlimit Limits page does not answer to the host {asked}.\n\
             It answers to localhost and loopback addresses, and to the names it is told to: \
             `shardlimit web --allow-host NAME`, or `WebOptionsBuilder::allow_host` for a router in your own app. \
             (A web page whose name is rebound to this machine must not read it: DNS rebinding.)\n"
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_any_port_and_allowed_names_pass() {
        let mut hosts = AllowedHosts::default();
        for name in ["Limits.Example.", "10.0.0.7", "[fd00::1]", "fd00::2"] {
            hosts.add(name).unwrap();
        }
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.:1",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:8080",
            "[0:0:0:0:0:0:0:1]:8080",
            "limits.example:443",
            "limits.example.",
            "10.0.0.7:8080",
            "[fd00::1]:8080",
            "[fd00::2]",
        ] {
            assert!(hosts.permits(ok), "{ok}");
        }
        for refused in [
            "",
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.8",
            "::1",
            "[::1",
            "[::1]x",
            "localhost:80x",
            "app@localhost",
            "localhost:8080:1",
            "limits.example..",
            "\u{fffd}",
        ] {
            assert!(!hosts.permits(refused), "{refused:?}");
        }
    }

    #[test]
    fn an_allowed_name_is_a_host_alone() {
        let mut hosts = AllowedHosts::default();
        for bad in [
            "",
            "limits.example:8080",
            "http://limits.example",
            "limits.example/x",
            "a b",
            "[limits.example]",
        ] {
            assert!(hosts.add(bad).is_err(), "{bad:?}");
        }
    }
}
