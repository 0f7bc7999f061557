//! `shardlimit web`: the Limits page (`shardlimit::web::router`) on a
//! local port.
//!
//! Binds to `127.0.0.1:8080` unless `--listen` says otherwise. Read-only
//! unless `--allow-writes`, which needs credentials from the environment —
//! `SHARDLIMIT_WEB_TOKEN` (an `Authorization: Bearer` token) or
//! `SHARDLIMIT_WEB_USER` and `SHARDLIMIT_WEB_PASSWORD` (basic auth) — and
//! whichever is set is then required for every page. Never flags: they
//! would show in `ps`.
//!
//! Answers only to `localhost`, loopback addresses, the `--listen` address
//! and the names given with `--allow-host`: any other `Host` gets `421`, so
//! a web page the operator visits cannot rebind its name to this machine
//! and read the page (DNS rebinding).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shardlimit::Cluster;
use shardlimit::web::{WebOptions, router};

use crate::output::AnyResult;

/// The bearer token, from the environment.
const TOKEN_ENV: &str = "SHARDLIMIT_WEB_TOKEN";
/// The basic-auth user, from the environment.
const USER_ENV: &str = "SHARDLIMIT_WEB_USER";
/// The basic-auth password, from the environment.
const PASSWORD_ENV: &str = "SHARDLIMIT_WEB_PASSWORD";

/// `shardlimit web` options.
#[derive(clap::Args, Debug)]
pub(crate) struct WebArgs {
    /// Address to listen on (default: this machine only).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Enable the reset action (confirmation page, CSRF token, refused for
    /// held locks, leases with permits and non-zero counters unless forced).
    /// Requires SHARDLIMIT_WEB_TOKEN, or SHARDLIMIT_WEB_USER and
    /// SHARDLIMIT_WEB_PASSWORD, in the environment.
    #[arg(long)]
    allow_writes: bool,
    /// Rows per limiters page.
    #[arg(long, default_value_t = NonZeroUsize::MIN.saturating_add(49))]
    page_size: NonZeroUsize,
    /// Also answer to this host name or IP address (repeatable), e.g. the
    /// machine's DNS name. Default: only localhost, loopback addresses and
    /// the --listen address; any other Host gets 421, so a web page whose
    /// name is rebound to this machine cannot read the page (DNS
    /// rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    #[command(flatten)]
    quotas: crate::quotas::QuotaArgs,
}

impl WebArgs {
    /// The router's options: the flags, and the listen address among the
    /// names answered to.
    fn options(&self, scan_count: u32) -> shardlimit::Result<WebOptions> {
        let mut options = WebOptions::builder()
            .writes(self.allow_writes)
            .page_size(self.page_size)
            .scan_count(scan_count);
        // `0.0.0.0` or `::` is no name a request carries.
        if !self.listen.ip().is_unspecified() {
            options = options.allow_host(self.listen.ip().to_string());
        }
        for name in &self.allow_hosts {
            options = options.allow_host(name);
        }
        for (name, quota) in &self.quotas.given {
            options = options.quota(name, *quota);
        }
        options.build()
    }
}

/// What a request must carry.
#[derive(Debug)]
enum Credentials {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic <base64(user:password)>`, kept encoded.
    Basic(String),
}

impl Credentials {
    fn from_env() -> AnyResult<Option<Credentials>> {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        match (var(TOKEN_ENV), var(USER_ENV), var(PASSWORD_ENV)) {
            (Some(token), None, None) => Ok(Some(Credentials::Bearer(token))),
            (None, Some(user), Some(password)) => Ok(Some(Credentials::Basic(base64(
                format!("{user}:{password}").as_bytes(),
            )))),
            (None, None, None) => Ok(None),
            (Some(_), _, _) => Err(format!(
                "set either {TOKEN_ENV} or {USER_ENV} and {PASSWORD_ENV}, not both"
            )
            .into()),
            _ => Err(format!("basic auth needs both {USER_ENV} and {PASSWORD_ENV}").into()),
        }
    }

    fn accepts(&self, header: Option<&HeaderValue>) -> bool {
        let Some(given) = header.and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let (scheme, expected) = match self {
            Credentials::Bearer(t) => ("Bearer ", t),
            Credentials::Basic(b) => ("Basic ", b),
        };
        given
            .strip_prefix(scheme)
            .is_some_and(|v| constant_time_eq(v.trim().as_bytes(), expected.as_bytes()))
    }

    fn challenge(&self) -> &'static str {
        match self {
            Credentials::Bearer(_) => "Bearer realm=\"shardlimit\"",
            Credentials::Basic(_) => "Basic realm=\"shardlimit\", charset=\"UTF-8\"",
        }
    }
}

async fn require(
    State(credentials): State<Arc<Credentials>>,
    request: Request,
    next: Next,
) -> Response {
    if credentials.accepts(request.headers().get(header::AUTHORIZATION)) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, credentials.challenge())],
        "authentication required\n",
    )
        .into_response()
}

/// Serves the Limits page until the process is stopped.
pub(crate) async fn run(cluster: &Cluster, scan_count: u32, args: WebArgs) -> AnyResult<ExitCode> {
    let credentials = Credentials::from_env()?;
    if args.allow_writes && credentials.is_none() {
        return Err(format!(
            "--allow-writes needs credentials: set {TOKEN_ENV} (a bearer token), or {USER_ENV} and {PASSWORD_ENV} (basic auth)"
        )
        .into());
    }
    if credentials.is_none() && !args.listen.ip().is_loopback() {
        eprintln!(
            "shardlimit web: warning: {} is reachable from other machines and no credentials are set: anyone who can reach it sees every subject",
            args.listen
        );
    }
    if args.listen.ip().is_unspecified() && args.allow_hosts.is_empty() {
        eprintln!(
            "shardlimit web: note: {} answers only to localhost and loopback addresses: add the names and addresses the page is reached by with --allow-host",
            args.listen
        );
    }
    let options = args.options(scan_count)?;
    let mut app = router(cluster, options);
    if let Some(credentials) = credentials {
        app = app.layer(axum::middleware::from_fn_with_state(
            Arc::new(credentials),
            require,
        ));
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    eprintln!(
        "shardlimit web: the Limits page of namespace {:?} on http://{} ({})",
        cluster.namespace(),
        listener.local_addr()?,
        if args.allow_writes {
            "writes enabled"
        } else {
            "read-only"
        }
    );
    axum::serve(listener, app).await?;
    Ok(ExitCode::SUCCESS)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 with padding (RFC 4648), for the expected basic-auth
/// value.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(
                    ALPHABET[usize::try_from(n >> (18 - 6 * i) & 63).unwrap_or(0)],
                ));
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
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn the_listen_address_and_the_allowed_hosts_are_answered() {
        let args = |listen: &str, hosts: &[&str]| WebArgs {
            listen: listen.parse().unwrap(),
            allow_writes: false,
            page_size: NonZeroUsize::MIN,
            allow_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            quotas: crate::quotas::QuotaArgs::default(),
        };
        let options = args("10.1.2.3:8080", &["limits.internal"])
            .options(100)
            .unwrap();
        for ok in ["10.1.2.3:8080", "limits.internal:8080", "localhost:8080"] {
            assert!(options.allows_host(ok), "{ok}");
        }
        assert!(!options.allows_host("10.1.2.4:8080"));
        let options = args("[::]:8080", &[]).options(100).unwrap();
        assert!(!options.allows_host("[::]:8080"));
        assert!(options.allows_host("[::1]:8080"));
        let err = args("127.0.0.1:8080", &["http://x"])
            .options(100)
            .unwrap_err();
        assert!(err.to_string().contains("allow_host"), "{err}");
    }

    #[test]
    fn only_the_configured_credentials_pass() {
        let basic = Credentials::Basic(base64(b"ops:s3cret"));
        let ok = HeaderValue::from_static("Basic b3BzOnMzY3JldA==");
        assert!(basic.accepts(Some(&ok)));
        assert!(!basic.accepts(Some(&HeaderValue::from_static("Basic b3BzOndyb25n"))));
        assert!(!basic.accepts(Some(&HeaderValue::from_static("Bearer b3BzOnMzY3JldA=="))));
        assert!(!basic.accepts(None));
        let bearer = Credentials::Bearer("t0ken".into());
        assert!(bearer.accepts(Some(&HeaderValue::from_static("Bearer t0ken"))));
        assert!(!bearer.accepts(Some(&HeaderValue::from_static("Bearer t0ke"))));
    }
}
