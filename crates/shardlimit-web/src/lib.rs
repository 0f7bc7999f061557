//! The Limits page of [shardlimit]: every limiter on every master, in a
//! browser.
//!
//! Hash tags buy scale and lose the global view; Sidekiq's "Limits" tab
//! stops working in cluster mode for that reason. [`router`] gives it back
//! as server-rendered pages over the [`Scanner`](shardlimit::admin::Scanner),
//! for your own axum app (under any path prefix) or served by
//! `shardlimit web`:
//!
//! | Page | HTML | JSON | Cost |
//! |---|---|---|---|
//! | Overview: cluster state and served slots from `CLUSTER INFO` (a "cluster down" banner with the unserved slots), masters and replicas, AOF, memory, keys per master, primitives per kind and name and per master (by node id), a banner when the cluster is not fit for locks | `/` | `/api/overview` | `CLUSTER SLOTS`, and per master `INFO`s, `CLUSTER INFO` and `DBSIZE` in one pipeline on a connection of its own, each within [`node_timeout`](WebOptionsBuilder::node_timeout); counts from a background walk, the last complete one shown |
//! | Limiters: a page of primitives, filtered by kind, name and subject glob, state in words, each rate limiter's remaining / limit (highlighted at the limit), the page's number and how much of the namespace the walk has covered; an exact subject alone leads to its subject page | `/limiters` | `/api/limiters` | rounds of at most [`PAGE_SCANS_PER_MASTER`](shardlimit::admin::PAGE_SCANS_PER_MASTER) `SCAN`s per master until the page is full or [`page_budget`](WebOptionsBuilder::page_budget) is spent, at most [`MAX_PAGE_ROUNDS`](shardlimit::admin::MAX_PAGE_ROUNDS) rounds; and the catalog's slot |
//! | Subject: everything one subject has, its slot and master, with remaining / limit; a hashed subject (`hmac:…`, a credential's keyed digest) is marked as one | `/subject?subject=…` | `/api/subject?subject=…` | its slot only, and the catalog's |
//! | Find (the box on every page): what the operator types — a subject, or a raw API key, hashed with the cluster's [subject secret](shardlimit::keys::SubjectHasher) — leads to the page of whichever has something (303), or a page saying neither does; posted, so a key is never in a URL | `POST /find` | — | the two subjects' slots ([`Scanner::lookup_at`](shardlimit::admin::Scanner::lookup_at)) |
//! | Throttled now: per limiter, the subjects denied most in the last minutes across every process, with denial counts and rates and a reset per row | `/throttled[?name=…]` | `/api/throttled` | two calls to one master ([`admin::throttled`](shardlimit::admin::throttled())) |
//! | Audit: keys without a TTL, keys that are not shardlimit's, per master | `/audit` | `/api/audit` | a background walk, the last complete one shown |
//! | Reset one limiter or one subject: confirmation, then POST; offered per row of the subject page, the limiters list, the audit and Throttled now | `/reset?subject=…[&kind=…&name=…]` | `/api/reset` | one MULTI/EXEC on the slot |
//! | Unblock: lift a subject's block of one rate limiter (offered on rows with a block); confirmation (the block's time left), then POST | `/unblock?subject=…&kind=…&name=…` | `/api/unblock` | one script on the subject's slot to show; to act, the library's [`RateLimiter::unblock`](shardlimit::RateLimiter::unblock) and a read |
//! | Clear override: a subject's own quota of one rate limiter (offered on rows with an override); confirmation (the quota, its time left), then POST | `/clear-override?subject=…&kind=…&name=…` | `/api/clear-override` | one script on the subject's slot each ([`RateLimiter::clear_override`](shardlimit::RateLimiter::clear_override)) |
//! | Give a TTL to a key the audit found without one (offered on its rows); confirmation (its type; a day, or the TTL chosen), then POST; a TTL the key has is never changed | `/give-ttl?key_hex=…[&ttl=<seconds>]` | `/api/give-ttl` | one script on the key's slot each ([`Scanner::give_ttl`](shardlimit::admin::Scanner::give_ttl)) |
//!
//! Subjects that are not UTF-8 travel as `subject_hex=…`.
//!
//! A rate limiter's limit comes from the [catalog](shardlimit::limit#the-catalog)
//! its processes publish (read per page from its one slot), or from
//! [`WebOptionsBuilder::quota`], which wins: each row then says
//! `0/60 remaining, at limit, full in 12.3 s` ("2 specs published" when
//! processes disagree; the strictest counts).
//!
//! # Safe by default
//!
//! * **Read-only** unless [`WebOptionsBuilder::writes`] is on; every
//!   write (reset, unblock, clear an override, give a TTL) is then a
//!   confirmation page and a POST carrying a CSRF token bound to that exact
//!   action (its operation and argument); a reset is refused for a held lock, held leases or a
//!   counter with a value unless forced (a separate confirmation) — the
//!   library's own check, the same as `shardlimit reset`.
//! * **Authentication**: basic auth on every page if the options say so
//!   ([`WebOptionsBuilder::basic_auth`]), or your own auth layer around
//!   the router (`.layer(…)`, or `route_layer` on the router you nest it
//!   in). `shardlimit web` binds to `127.0.0.1`, and with writes on or
//!   beyond loopback requires basic-auth credentials from the environment
//!   (or `--allow-anonymous`).
//! * **No cross-site writes**: a POST another site's page makes (its
//!   `Origin`) is refused before its token is read, and a CSRF token is
//!   good for one write.
//! * **Escaped**: every value is spliced by maud, which escapes it; a
//!   subject `<script>…` renders as text. The pages use no JavaScript, and
//!   the Content-Security-Policy forbids any.
//! * **Local names only**: `localhost` and loopback addresses, at any
//!   port, unless [`WebOptionsBuilder::allow_host`] adds names; any other
//!   `Host` gets `421 Misdirected Request`, so a web page the operator
//!   visits cannot rebind its name to this machine and read the page (DNS
//!   rebinding). Mounted in your app and reached by another name (the
//!   machine's address, a DNS name, a reverse proxy's `Host`), allow it.
//!   `shardlimit web` adds its `--listen` address and each `--allow-host`.
//! * **Gentle**: no page runs `KEYS` or a transaction (only the reset's
//!   POST runs one MULTI/EXEC on the subject's slot), and a page costs at
//!   most the same bounded number of `SCAN` calls at a thousand limiters
//!   or a billion.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use shardlimit_web::{WebOptions, router};
//!
//! let cluster = shardlimit::Cluster::builder_from_env().namespace("myapp").build().await?;
//! let app = axum::Router::new()
//!     .nest("/limits", router(&cluster, WebOptions::default()));
//!     // .layer(your_auth_layer) — before enabling writes
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! [`router`] is a `Router<()>`: in an app with state, call
//! `.with_state(state)` on your routes first and nest after. The overview
//! answers at the prefix itself (`/limits`); axum's nested root does not
//! answer `/limits/` (404).
//!
//! ```no_run
//! # async fn demo(cluster: shardlimit::Cluster) {
//! use axum::{Router, extract::State, routing::get};
//! use shardlimit_web::{WebOptions, router};
//!
//! #[derive(Clone)]
//! struct AppState {
//!     greeting: &'static str,
//! }
//! let app: Router = Router::new()
//!     .route("/", get(|State(s): State<AppState>| async move { s.greeting }))
//!     .with_state(AppState { greeting: "hello" })
//!     .nest("/limits", router(&cluster, WebOptions::default()));
//! # }
//! ```

mod actions;
mod audit;
mod auth;
mod base;
mod csrf;
mod find;
mod host;
mod http;
mod jobs;
mod json;
mod layout;
mod limiters;
mod options;
mod overview;
mod params;
mod reset;
mod state;
mod subject;
mod throttled;
mod words;
mod write;

use axum::Router;
use axum::http::header;
use axum::routing::get;

pub use options::{DEFAULT_PAGE_BUDGET, MAX_PAGE_SIZE, WebOptions, WebOptionsBuilder};

use shardlimit::Cluster;

/// The Limits page's routes for `cluster`'s namespace, to serve as is or
/// [`nest`](axum::Router::nest) under a prefix of your app; every link
/// follows the prefix.
///
/// Read-only unless `options` enable writes. No authentication unless
/// `options` ask for basic auth ([`WebOptionsBuilder::basic_auth`]); else
/// layer your own on it. It answers only to loopback names unless
/// `options` allow more ([`WebOptionsBuilder::allow_host`]). Every
/// response, a `401` or `421` included, carries the security headers
/// (nothing cached, sniffed or framed, no script); a write from another
/// site's page (its `Origin`) is refused before its CSRF token is read,
/// and a CSRF token authorises one write only.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use shardlimit_web::{WebOptions, router};
///
/// let options = WebOptions::builder().writes(true).build()?;
/// let admin: axum::Router = axum::Router::new().nest("/admin/limits", router(&cluster, options));
/// # Ok(()) }
/// ```
pub fn router(cluster: &Cluster, options: WebOptions) -> Router {
    let hosts = options.hosts.clone();
    let auth = options.auth.clone();
    let state = state::AppState::new(cluster, options);
    Router::new()
        .route("/", get(overview::page))
        .route("/api/overview", get(overview::api))
        .route("/limiters", get(limiters::page))
        .route("/api/limiters", get(limiters::api))
        .route("/subject", get(subject::page))
        .route("/api/subject", get(subject::api))
        .route("/find", axum::routing::post(find::find))
        .route("/throttled", get(throttled::page))
        .route("/api/throttled", get(throttled::api))
        .route("/audit", get(audit::page))
        .route("/api/audit", get(audit::api))
        .route("/reset", get(reset::confirm_page).post(reset::execute_page))
        .route(
            "/api/reset",
            get(reset::confirm_api).post(reset::execute_api),
        )
        .route(
            "/unblock",
            get(actions::route::unblock_page).post(actions::route::unblock_post),
        )
        .route(
            "/api/unblock",
            get(actions::route::unblock_api).post(actions::route::unblock_api_post),
        )
        .route(
            "/clear-override",
            get(actions::route::clear_page).post(actions::route::clear_post),
        )
        .route(
            "/api/clear-override",
            get(actions::route::clear_api).post(actions::route::clear_api_post),
        )
        .route(
            "/give-ttl",
            get(actions::route::ttl_page).post(actions::route::ttl_post),
        )
        .route(
            "/api/give-ttl",
            get(actions::route::ttl_api).post(actions::route::ttl_api_post),
        )
        .route(
            "/style.css",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
                    layout::STYLESHEET,
                )
            }),
        )
        .layer(axum::middleware::from_fn(host::same_origin))
        .layer(axum::middleware::from_fn_with_state(auth, auth::check))
        .layer(axum::middleware::from_fn_with_state(hosts, host::check))
        .layer(axum::middleware::map_response(http::security_headers))
        .with_state(state)
}
