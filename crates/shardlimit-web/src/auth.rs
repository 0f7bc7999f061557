//! Basic authentication for every page, when the options ask for it
//! ([`WebOptionsBuilder::basic_auth`](super::WebOptionsBuilder::basic_auth)).
//!
//! Inside the security headers, so a `401` carries them too. Basic, not a
//! bearer token: a browser asks for basic credentials itself and sends
//! them on every request, forms included; it cannot send a bearer token on
//! a link it follows. Compared in constant time.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The one user and password a request must carry.
#[derive(Clone)]
pub(super) struct BasicAuth {
    user: String,
    /// `base64(user:password)`, as the header carries it.
    encoded: String,
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl BasicAuth {
    /// Refuses what a browser could not send: an empty user or password, a
    /// `:` in the user, a control character.
    pub(super) fn new(user: &str, password: &str) -> Result<Self, String> {
        if user.is_empty() || password.is_empty() {
            return Err("user and password must not be empty".into());
        }
        if user.contains(':') {
            return Err("the user must not contain ':'".into());
        }
        if user.chars().chain(password.chars()).any(char::is_control) {
            return Err("user and password must not contain control characters".into());
        }
        Ok(BasicAuth {
            user: user.to_owned(),
            encoded: base64(format!("{user}:{password}").as_bytes()),
        })
    }

    fn accepts(&self, header: Option<&HeaderValue>) -> bool {
        header
            .and_then(|h| h.to_str().ok())
            .and_then(|given| given.strip_prefix("Basic "))
            .is_some_and(|v| constant_time_eq(v.trim().as_bytes(), self.encoded.as_bytes()))
    }
}

/// Lets a request through if no credentials are configured or it carries
/// them; else `401` with the challenge a browser answers with its prompt.
pub(super) async fn check(
    State(auth): State<Option<Arc<BasicAuth>>>,
    request: Request,
    next: Next,
) -> Response {
    match auth {
        Some(auth) if !auth.accepts(request.headers().get(header::AUTHORIZATION)) => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"shardlimit\", charset=\"UTF-8\"",
            )],
            "authentication required\n",
        )
            .into_response(),
        _ => next.run(request).await,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 with padding (RFC 4648).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("ops:s3cret", "b3BzOnMzY3JldA=="),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn only_the_exact_credentials_pass_and_the_password_never_prints() {
        let auth = BasicAuth::new("ops", "s3cret").unwrap();
        assert!(auth.accepts(Some(&HeaderValue::from_static("Basic b3BzOnMzY3JldA=="))));
        for wrong in [
            "Basic b3BzOnMzY3JldA",
            "Bearer b3BzOnMzY3JldA==",
            "b3BzOnMzY3JldA==",
        ] {
            assert!(
                !auth.accepts(Some(&HeaderValue::from_static(wrong))),
                "{wrong}"
            );
        }
        assert!(!auth.accepts(None));
        let shown = format!("{auth:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("b3Bz"),
            "{shown}"
        );
        for (user, password) in [("", "p"), ("u", ""), ("a:b", "p"), ("u", "p\n")] {
            assert!(
                BasicAuth::new(user, password).is_err(),
                "{user:?} {password:?}"
            );
        }
    }
}
