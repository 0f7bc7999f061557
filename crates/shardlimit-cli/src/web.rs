//! `shardlimit web`: the Limits page (`shardlimit_web::router`) on a
//! local port.
//!
//! Binds to `127.0.0.1:8080` unless `--listen` says otherwise. Read-only
//! unless `--allow-writes`, which needs basic-auth credentials from the
//! environment — `SHARDLIMIT_WEB_USER` and `SHARDLIMIT_WEB_PASSWORD` —
//! which are then required for every page. Never flags: they would show in
//! `ps`. Listening beyond loopback needs them too, unless
//! `--allow-anonymous` says every one who can reach the port may read every
//! subject.
//!
//! Answers only to `localhost`, loopback addresses, the `--listen` address
//! and the names given with `--allow-host`: any other `Host` gets `421`, so
//! a web page the operator visits cannot rebind its name to this machine
//! and read the page (DNS rebinding).

use shardlimit::Cluster;
use shardlimit_web::{WebOptions, router};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::time::Duration;

use crate::output::AnyResult;

/// The bearer token earlier versions took: refused with an explanation.
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
    /// Enable the write actions — reset, unblock, clear an override, give
    /// a key a TTL — each a confirmation page and a single-use CSRF token
    /// (a reset is refused for held locks, held leases and non-zero
    /// counters unless forced). Requires SHARDLIMIT_WEB_USER and
    /// SHARDLIMIT_WEB_PASSWORD (basic auth) in the environment.
    #[arg(long)]
    allow_writes: bool,
    /// Serve a --listen address beyond loopback without credentials:
    /// everyone who can reach the port reads every subject. Without this
    /// flag, listening beyond loopback requires SHARDLIMIT_WEB_USER and
    /// SHARDLIMIT_WEB_PASSWORD.
    #[arg(long)]
    allow_anonymous: bool,
    /// Rows per limiters page.
    #[arg(long, default_value_t = NonZeroUsize::MIN.saturating_add(49))]
    page_size: NonZeroUsize,
    /// How long a limiters page keeps walking to fill itself when its
    /// filter is sparse, in milliseconds (at most 16 rounds of 8 SCANs per
    /// master whatever the budget; 0: one round; at most 10000).
    #[arg(long, default_value_t = 250)]
    page_budget_ms: u64,
    /// Also answer to this host name or IP address (repeatable), e.g. the
    /// machine's DNS name. Default: only localhost, loopback addresses and
    /// the --listen address; any other Host gets 421, so a web page whose
    /// name is rebound to this machine cannot read the page (DNS
    /// rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// How long the overview waits for each master's health before showing
    /// it as not answering: a hung master costs the page at most this.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    node_timeout_ms: u64,
    #[command(flatten)]
    quotas: crate::quotas::QuotaArgs,
}

impl WebArgs {
    /// The router's options: the flags, the credentials, and the listen
    /// address among the names answered to.
    fn options(
        &self,
        scan_count: u32,
        credentials: Option<(String, String)>,
    ) -> shardlimit::Result<WebOptions> {
        let mut options = WebOptions::builder()
            .writes(self.allow_writes)
            .page_size(self.page_size)
            .page_budget(Duration::from_millis(self.page_budget_ms))
            .scan_count(scan_count)
            .node_timeout(Duration::from_millis(self.node_timeout_ms));
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
        if let Some((user, password)) = credentials {
            options = options.basic_auth(user, password);
        }
        options.build()
    }
}

/// The basic-auth user and password from the environment, if set.
fn credentials() -> AnyResult<Option<(String, String)>> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    if var(TOKEN_ENV).is_some() {
        return Err(format!(
            "{TOKEN_ENV} is no longer read: a browser cannot send a bearer token on the links and forms it follows; set {USER_ENV} and {PASSWORD_ENV} (basic auth, which a browser prompts for) instead"
        )
        .into());
    }
    match (var(USER_ENV), var(PASSWORD_ENV)) {
        (Some(user), Some(password)) => Ok(Some((user, password))),
        (None, None) => Ok(None),
        _ => Err(format!("basic auth needs both {USER_ENV} and {PASSWORD_ENV}").into()),
    }
}

/// Serves the Limits page until the process is stopped.
pub(crate) async fn run(cluster: &Cluster, scan_count: u32, args: WebArgs) -> AnyResult<ExitCode> {
    let credentials = credentials()?;
    if args.allow_writes && credentials.is_none() {
        return Err(format!(
            "--allow-writes needs credentials: set {USER_ENV} and {PASSWORD_ENV} (basic auth)"
        )
        .into());
    }
    if credentials.is_none() && !args.listen.ip().is_loopback() && !args.allow_anonymous {
        return Err(format!(
            "{} is reachable from other machines and no credentials are set, so anyone who can reach it would read every subject: set {USER_ENV} and {PASSWORD_ENV} (basic auth), or pass --allow-anonymous",
            args.listen
        )
        .into());
    }
    if args.listen.ip().is_unspecified() && args.allow_hosts.is_empty() {
        eprintln!(
            "shardlimit web: note: {} answers only to localhost and loopback addresses: add the names and addresses the page is reached by with --allow-host",
            args.listen
        );
    }
    let options = args.options(scan_count, credentials)?;
    let app = router(cluster, options);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listen_address_and_the_allowed_hosts_are_answered() {
        let args = |listen: &str, hosts: &[&str]| WebArgs {
            listen: listen.parse().unwrap(),
            allow_writes: false,
            allow_anonymous: false,
            page_size: NonZeroUsize::MIN,
            page_budget_ms: 250,
            allow_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            node_timeout_ms: 500,
            quotas: crate::quotas::QuotaArgs::default(),
        };
        let options = args("10.1.2.3:8080", &["limits.internal"])
            .options(100, None)
            .unwrap();
        for ok in ["10.1.2.3:8080", "limits.internal:8080", "localhost:8080"] {
            assert!(options.allows_host(ok), "{ok}");
        }
        assert!(!options.allows_host("10.1.2.4:8080"));
        let options = args("[::]:8080", &[]).options(100, None).unwrap();
        assert!(!options.allows_host("[::]:8080"));
        assert!(options.allows_host("[::1]:8080"));
        let err = args("127.0.0.1:8080", &["http://x"])
            .options(100, None)
            .unwrap_err();
        assert!(err.to_string().contains("allow_host"), "{err}");
    }
}
