//! The reset action: a confirmation page showing exactly what would be
//! deleted, then a POST carrying a CSRF token bound to that action.
//!
//! The refusal is the library's ([`ResetPlan::execute`]): a held lock,
//! held leases or a counter with a value is deleted only when
//! forced, as `shardlimit reset --force` does. A forced reset has its own
//! confirmation (and token): a token for a plain reset never forces.

use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde_json::json;

use super::csrf::Action;
use super::http::{Base, Failure, Format};
use super::params::{ResetQuery, percent, subject_display, subject_field, subject_query};
use super::state::Shared;
use super::words::Quotas;
use super::write::{self, handlers, writable};
use super::{json as j, layout, words};
use shardlimit::Error;
use shardlimit::admin::ResetPlan;

// `GET /reset` (the confirmation page), `POST /reset` (the reset itself),
// and their JSON twins under `/api/` (the plan and, with writes on, its
// token; the same form fields).
handlers! {
    confirm_page execute_page: confirm execute () ResetQuery, Format::Html;
    confirm_api execute_api: confirm execute () ResetQuery, Format::Json;
}

async fn plan(
    state: &Shared,
    q: &ResetQuery,
    format: Format,
    base: &Base,
) -> Result<(Vec<u8>, ResetPlan), Failure> {
    let subject = q
        .subject
        .bytes()
        .map_err(|m| Failure::bad_request(m, format, base))?;
    let plan = state
        .scanner
        .plan_reset(&subject, q.kind(), q.name())
        .await
        .map_err(|err| Failure::cluster(&err, format, base))?;
    Ok((subject, plan))
}

fn action<'a>(subject: &'a [u8], q: &'a ResetQuery) -> Action<'a> {
    Action {
        op: "reset",
        subject,
        kind: q.kind(),
        name: q.name(),
        arg: None,
        force: q.force(),
    }
}

/// `gcra api of user:42`, `everything of user:42`.
fn what(subject: &[u8], q: &ResetQuery) -> String {
    let who = subject_display(subject);
    match (q.kind(), q.name()) {
        (None, None) => format!("everything of subject {who}"),
        (kind, name) => format!(
            "{} {} of subject {who}",
            kind.unwrap_or("every kind"),
            name.unwrap_or("(every name)")
        ),
    }
}

async fn confirm(
    State(state): State<Shared>,
    base: Base,
    q: ResetQuery,
    format: Format,
) -> Result<Response, Failure> {
    writable(&state, format, &base)?;
    let (subject, plan) = plan(&state, &q, format, &base).await?;
    let token = write::mint(&state, &action(&subject, &q));
    let (quotas, _) = state.quotas().await;
    if format == Format::Json {
        return Ok(axum::Json(json!({
            "subject": j::subject(&subject),
            "keys": plan.keys().iter().map(|k| j::key(k)).collect::<Vec<_>>(),
            "primitives": plan.primitives().iter().map(|i| j::limiter(i, &quotas)).collect::<Vec<_>>(),
            "in_use": plan.in_use().iter().map(ToString::to_string).collect::<Vec<_>>(),
            "force": q.force(),
            "token": token,
        }))
        .into_response());
    }
    Ok(confirm_html(&base, &subject, &q, &plan, &token, &quotas).into_response())
}

fn confirm_html(
    base: &Base,
    subject: &[u8],
    q: &ResetQuery,
    plan: &ResetPlan,
    token: &str,
    quotas: &Quotas,
) -> Markup {
    let blocked = !plan.in_use().is_empty() && !q.force();
    let (field, value) = subject_field(subject);
    let mut hidden = vec![(field, value)];
    for (key, v) in [("kind", q.kind()), ("name", q.name())] {
        if let Some(v) = v {
            hidden.push((key, v.to_owned()));
        }
    }
    if q.force() {
        hidden.push(("force", "1".to_owned()));
    }
    let mut forced_url = format!("/reset?{}&force=1", subject_query(subject));
    for (key, v) in [("kind", q.kind()), ("name", q.name())] {
        if let Some(v) = v {
            forced_url.push_str(&format!("&{key}={}", percent(v.as_bytes())));
        }
    }
    let body = html! {
        h1 { "Reset " (what(subject, q)) "?" }
        @if plan.keys().is_empty() {
            p #nothing { "Nothing to delete: the subject has no such keys (they may have expired)." }
        } @else {
            h2 { "Would delete " (words::count(plan.keys().len(), "key")) }
            ul.mono #keys { @for key in plan.keys() { li { (String::from_utf8_lossy(key)) } } }
            h2 { "Their state now" }
            ul { @for info in plan.primitives() { li { (info.kind) " " (info.name) ": " (words::state(info, quotas)) } } }
            @if !plan.in_use().is_empty() {
                div.banner.warn #in-use {
                    strong { "In use:" }
                    ul { @for reason in plan.in_use() { li { (reason.to_string()) } } }
                    @if blocked {
                        "Deleting them could let a second lock holder in, free leases in use or lose counted units, so this is refused unless forced. "
                        a #force href=(base.to(&forced_url)) { "Review a forced reset…" }
                    } @else {
                        "Forced: they will be deleted anyway."
                    }
                }
            }
            @if !blocked {
                (write::form(base, "/reset", &hidden, token, &format!("Delete {}", words::count(plan.keys().len(), "key")), &format!("/subject?{}", subject_query(subject))))
                p.muted { "One MULTI/EXEC on the subject's slot. The check and the deletion are not one atomic step: a lock taken after this page was shown is deleted too." }
            }
        }
    };
    layout::page(base, "Confirm reset", None, body)
}

async fn execute(
    State(state): State<Shared>,
    base: Base,
    q: ResetQuery,
    format: Format,
) -> Result<Response, Failure> {
    writable(&state, format, &base)?;
    let subject = q
        .subject
        .bytes()
        .map_err(|m| Failure::bad_request(m, format, &base))?;
    write::spend(
        &state,
        q.token.as_deref(),
        &action(&subject, &q),
        format,
        &base,
    )?;
    let (_, plan) = plan(&state, &q, format, &base).await?;
    let deleted = match plan.execute(&state.scanner, q.force()).await {
        Ok(n) => n,
        Err(Error::ResetRefused { in_use }) => {
            let message = format!(
                "refused, nothing deleted: {}; confirm a forced reset to delete them anyway",
                in_use.join(", ")
            );
            return Err(Failure::new(StatusCode::CONFLICT, message, format, &base));
        }
        Err(err) => return Err(Failure::cluster(&err, format, &base)),
    };
    if format == Format::Json {
        return Ok(axum::Json(json!({ "deleted": deleted })).into_response());
    }
    let body = html! {
        h1 { "Reset done" }
        p #deleted { "Deleted " (words::count(deleted, "key")) ": " (what(&subject, &q)) "." }
        p {
            a href=(base.to(&format!("/subject?{}", subject_query(&subject)))) { "Back to the subject" }
            " · "
            a href=(base.to("/limiters")) { "All limiters" }
        }
    };
    Ok(layout::page(&base, "Reset done", None, body).into_response())
}
