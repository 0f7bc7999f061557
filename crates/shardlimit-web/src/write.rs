//! What every write action shares — the reset, unblock, clear-override and
//! give-TTL pages: refused on a read-only page, a confirmation whose form
//! carries a CSRF token bound to that exact action, and the token spent
//! once by the POST.

use std::time::SystemTime;

use axum::http::StatusCode;
use maud::{Markup, html};

use super::csrf::Action;
use super::http::{Base, Failure, Format};
use super::state::Shared;
use shardlimit::Error;

/// `403` unless writes are on.
pub(super) fn writable(state: &Shared, format: Format, base: &Base) -> Result<(), Failure> {
    if state.options.writes {
        return Ok(());
    }
    Err(Failure::new(
        StatusCode::FORBIDDEN,
        "writes are disabled: this Limits page is read-only (enable writes with WebOptions::writes, or `shardlimit web --allow-writes`)",
        format,
        base,
    ))
}

/// A token for the confirmation of `action`.
pub(super) fn mint(state: &Shared, action: &Action<'_>) -> String {
    state.csrf.mint(action, SystemTime::now())
}

/// Spends the POST's `token` on `action`; `403` saying why when it does
/// not authorise it.
pub(super) fn spend(
    state: &Shared,
    token: Option<&str>,
    action: &Action<'_>,
    format: Format,
    base: &Base,
) -> Result<(), Failure> {
    state
        .csrf
        .spend(token.unwrap_or(""), action, SystemTime::now())
        .map_err(|why| Failure::new(StatusCode::FORBIDDEN, why.explain(), format, base))
}

/// An error of an action: `400` for what the request asked wrong (a kind
/// that has no blocks, a key of another namespace, a TTL out of bounds),
/// else the cluster's failure.
pub(super) fn failed(err: &Error, format: Format, base: &Base) -> Failure {
    match err {
        Error::Config { .. } => Failure::bad_request(err.to_string(), format, base),
        _ => Failure::cluster(err, format, base),
    }
}

/// The confirmation's form: a POST to `path` of the `hidden` fields and the
/// token, a danger button saying what it does, and a way back.
pub(super) fn form(
    base: &Base,
    path: &str,
    hidden: &[(&str, String)],
    token: &str,
    button: &str,
    cancel: &str,
) -> Markup {
    html! {
        form #confirm method="post" action=(base.to(path)) {
            @for (name, value) in hidden { input type="hidden" name=(name) value=(value); }
            input type="hidden" name="token" value=(token);
            button.danger type="submit" { (button) }
            " "
            a href=(base.to(cancel)) { "Cancel" }
        }
    }
}

/// The handlers the router mounts for one write action, HTML and JSON
/// alike: `$get` answers the confirmation (`$confirm`, from the query) and
/// `$post` the action (`$execute`, from the form), each with the action's
/// `$setting` (if any) and the `$format` the route answers in. The caller
/// has `State`, `Query`, `Form`, `Response`, `Shared`, `Base` and
/// `Failure` in scope.
macro_rules! handlers {
    ($($get:ident $post:ident: $confirm:ident $execute:ident ($($setting:expr)?) $q:ty, $format:expr;)*) => {$(
        pub(crate) async fn $get(state: State<Shared>, base: Base, Query(q): Query<$q>) -> Result<Response, Failure> {
            $confirm($($setting,)? state, base, q, $format).await
        }
        pub(crate) async fn $post(state: State<Shared>, base: Base, Form(q): Form<$q>) -> Result<Response, Failure> {
            $execute($($setting,)? state, base, q, $format).await
        }
    )*};
}
pub(super) use handlers;
