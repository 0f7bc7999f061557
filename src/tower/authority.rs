//! `Authority`: a request keyed by the host it was sent to.

use http::header::HOST;
use http::uri;
use http::{HeaderValue, Request};

use super::extract::KeyExtractor;

/// The request's authority — `host[:port]` as the client wrote it: the
/// URI's authority (HTTP/2's and gRPC's `:authority`, an absolute-form
/// HTTP/1.1 target), else the `Host` header — e.g. to give each tenant
/// domain of a multi-tenant service its own limit. Nothing is allocated:
/// the key shares the request's bytes.
///
/// ASCII letters are not case-folded (`API.example` and `api.example` are
/// two keys); a client choosing its own authority can only split its
/// requests over the hosts the server answers for.
///
/// ```
/// use http::Request;
/// use shardlimit::tower::{Authority, KeyExtractor};
///
/// let h2 = Request::get("http://api.example:50051/pkg.Svc/Call").body(()).unwrap();
/// assert_eq!(Authority.extract(&h2).unwrap().as_ref(), b"api.example:50051");
/// let h1 = Request::get("/items").header("host", "shop.example").body(()).unwrap();
/// assert_eq!(Authority.extract(&h1).unwrap().as_ref(), b"shop.example");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Authority;

/// The key [`Authority`] extracts.
#[derive(Clone, Debug)]
pub struct AuthorityKey(Source);

#[derive(Clone, Debug)]
enum Source {
    Uri(uri::Authority),
    Host(HeaderValue),
}

impl AsRef<[u8]> for AuthorityKey {
    fn as_ref(&self) -> &[u8] {
        match &self.0 {
            Source::Uri(authority) => authority.as_str().as_bytes(),
            Source::Host(host) => host.as_bytes(),
        }
    }
}

impl<B> KeyExtractor<B> for Authority {
    type Key = AuthorityKey;

    fn extract(&self, request: &Request<B>) -> Option<AuthorityKey> {
        let source = match request.uri().authority() {
            Some(authority) => Source::Uri(authority.clone()),
            None => Source::Host(request.headers().get(HOST)?.clone()),
        };
        Some(AuthorityKey(source))
    }

    fn looked_for(&self) -> String {
        String::from("the URI's authority (:authority) or the Host header")
    }
}
