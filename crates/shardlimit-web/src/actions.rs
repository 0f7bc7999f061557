//! The write actions beyond a reset: lift a subject's block of a rate
//! limiter (`/unblock`), clear its override (`/clear-override`), give a key
//! without a TTL one (`/give-ttl`). Each is a confirmation page saying
//! exactly what will change, then a POST with a CSRF token bound to that
//! action (see `write`), through the [`Scanner`](shardlimit::admin::Scanner)'s
//! actions — the library's own unblock and clear-override.

use std::time::Duration;

use axum::extract::{Form, Query, State};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::csrf::Action;
use super::http::{Base, Failure, Format};
use super::params::{SubjectQuery, subject_display, subject_field, subject_query};
use super::state::Shared;
use super::write::{self, failed, writable};
use super::{json as j, layout, words};
use shardlimit::limit::SubjectSettings;

/// A subject's block or override of one rate limiter.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct SettingQuery {
    #[serde(flatten)]
    subject: SubjectQuery,
    kind: Option<String>,
    name: Option<String>,
    token: Option<String>,
}

/// A key to give a TTL, and the TTL in seconds.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct KeyQuery {
    key_hex: Option<String>,
    ttl: Option<String>,
    token: Option<String>,
}

/// Which setting an action removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Setting {
    Block,
    Override,
}

/// The TTL the confirmation proposes: a day.
const DEFAULT_TTL_SECS: u64 = 86_400;

impl Setting {
    fn op(self) -> &'static str {
        match self {
            Setting::Block => "unblock",
            Setting::Override => "clear-override",
        }
    }
}

/// The subject, kind and name a setting query names, or why not (writes
/// off, or something missing).
fn target(
    state: &Shared,
    q: &SettingQuery,
    format: Format,
    base: &Base,
) -> Result<(Vec<u8>, String, String), Failure> {
    writable(state, format, base)?;
    let subject = q
        .subject
        .bytes()
        .map_err(|m| Failure::bad_request(m, format, base))?;
    let field = |v: &Option<String>, what: &str| {
        v.clone().filter(|v| !v.is_empty()).ok_or_else(|| {
            Failure::bad_request(format!("no {what} given ({what}=…)"), format, base)
        })
    };
    Ok((subject, field(&q.kind, "kind")?, field(&q.name, "name")?))
}

fn setting_action<'a>(
    setting: Setting,
    subject: &'a [u8],
    kind: &'a str,
    name: &'a str,
) -> Action<'a> {
    Action {
        op: setting.op(),
        subject,
        kind: Some(kind),
        name: Some(name),
        arg: None,
        force: false,
    }
}

fn settings_json(s: &SubjectSettings) -> Value {
    json!({
        "blocked_for_ms": s.blocked_for.map(words::millis),
        "override": s.override_quota.map(|q| json!({
            "limit": q.limit(),
            "period_ms": words::millis(q.period()),
            "burst": q.burst(),
            "ttl_ms": s.override_ttl.map(words::millis),
        })),
    })
}

/// What `setting` of `settings` is now, in words; `None` when there is none.
fn present(setting: Setting, kind: &str, settings: &SubjectSettings) -> Option<String> {
    match setting {
        Setting::Block => settings.blocked_for.map(|left| {
            format!(
                "Blocked for {} more: every request is denied until then, whatever its usage.",
                words::duration(left)
            )
        }),
        Setting::Override => settings.override_quota.map(|quota| {
            format!(
                "Its own quota, {}{}, instead of the limiter's default.",
                words::per(kind, quota),
                settings.override_ttl.map_or(String::new(), |t| format!(
                    " for {} more",
                    words::duration(t)
                ))
            )
        }),
    }
}

/// `GET /unblock`, `/clear-override` and their `/api/` twins.
pub(super) async fn confirm_setting(
    setting: Setting,
    State(state): State<Shared>,
    base: Base,
    q: SettingQuery,
    format: Format,
) -> Result<Response, Failure> {
    let (subject, kind, name) = target(&state, &q, format, &base)?;
    let settings = state
        .scanner
        .subject_settings(&kind, &name, &subject)
        .await
        .map_err(|err| failed(&err, format, &base))?;
    let token = write::mint(&state, &setting_action(setting, &subject, &kind, &name));
    let now = present(setting, &kind, &settings);
    if format == Format::Json {
        return Ok(axum::Json(json!({
            "subject": j::subject(&subject), "kind": kind, "name": name,
            "settings": settings_json(&settings),
            "token": now.is_some().then_some(token),
        }))
        .into_response());
    }
    let (verb, noun) = match setting {
        Setting::Block => ("Lift", "block"),
        Setting::Override => ("Clear", "override"),
    };
    let who = subject_display(&subject);
    let (field, value) = subject_field(&subject);
    let hidden = [
        (field, value),
        ("kind", kind.clone()),
        ("name", name.clone()),
    ];
    let back = format!("/subject?{}", subject_query(&subject));
    let body = html! {
        h1 { (verb) " the " (noun) " of " (kind) " " (name) " for subject " (who) "?" }
        @match &now {
            None => { p #nothing { "Nothing to do: the subject has no " (noun) " of this limiter (it may have ended)." } }
            Some(text) => {
                p #what { (text) }
                p { @match setting {
                    Setting::Block => "Lifting it lets the subject's requests be checked against its quota again, in every process.",
                    Setting::Override => "Clearing it applies the limiter's default quota to the subject again, in every process; a block stays.",
                } }
                (write::form(&base, &format!("/{}", setting.op()), &hidden, &token, &format!("{verb} the {noun}"), &back))
            }
        }
    };
    Ok(layout::page(
        &base,
        &format!("Confirm: {} the {noun}", verb.to_lowercase()),
        None,
        body,
    )
    .into_response())
}

/// `POST /unblock`, `/clear-override` and their `/api/` twins.
pub(super) async fn execute_setting(
    setting: Setting,
    State(state): State<Shared>,
    base: Base,
    q: SettingQuery,
    format: Format,
) -> Result<Response, Failure> {
    let (subject, kind, name) = target(&state, &q, format, &base)?;
    let action = setting_action(setting, &subject, &kind, &name);
    write::spend(&state, q.token.as_deref(), &action, format, &base)?;
    let scanner = &state.scanner;
    let left = match setting {
        Setting::Block => scanner.unblock(&kind, &name, &subject).await,
        Setting::Override => scanner.clear_override(&kind, &name, &subject).await,
    }
    .map_err(|err| failed(&err, format, &base))?;
    if format == Format::Json {
        return Ok(
            axum::Json(json!({ "done": setting.op(), "settings": settings_json(&left) }))
                .into_response(),
        );
    }
    let done = match setting {
        Setting::Block => "Block lifted",
        Setting::Override => "Override cleared",
    };
    let body = html! {
        h1 { (done) }
        p #done { (done) ": " (kind) " " (name) " of subject " (subject_display(&subject)) "." }
        p { a href=(base.to(&format!("/subject?{}", subject_query(&subject)))) { "Back to the subject" } }
    };
    Ok(layout::page(&base, done, None, body).into_response())
}

/// The key and TTL a give-TTL query names, or why not (writes off, or
/// something missing).
fn key_and_ttl(
    state: &Shared,
    q: &KeyQuery,
    format: Format,
    base: &Base,
) -> Result<(Vec<u8>, u64), Failure> {
    writable(state, format, base)?;
    let bad = |m: String| Failure::bad_request(m, format, base);
    let key = q
        .key_hex
        .as_deref()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad("no key given (key_hex=…)".into()))?;
    let key = hex::decode(key).map_err(|_| {
        bad(format!(
            "key_hex {key:?} is not an even number of hex digits"
        ))
    })?;
    let ttl = match q.ttl.as_deref().filter(|t| !t.is_empty()) {
        None => DEFAULT_TTL_SECS,
        Some(t) => t
            .parse()
            .map_err(|_| bad(format!("ttl {t:?} is not a whole number of seconds")))?,
    };
    Ok((key, ttl))
}

fn ttl_action<'a>(key: &'a [u8], ttl: &'a str) -> Action<'a> {
    Action {
        op: "give-ttl",
        subject: key,
        kind: None,
        name: None,
        arg: Some(ttl),
        force: false,
    }
}

/// `GET /give-ttl` and `/api/give-ttl`.
pub(super) async fn confirm_ttl(
    State(state): State<Shared>,
    base: Base,
    q: KeyQuery,
    format: Format,
) -> Result<Response, Failure> {
    let (key, secs) = key_and_ttl(&state, &q, format, &base)?;
    let ttl = Duration::from_secs(secs);
    if !(shardlimit::admin::MIN_GIVEN_TTL..=shardlimit::admin::MAX_GIVEN_TTL).contains(&ttl) {
        return Err(Failure::bad_request(
            format!("a TTL given to a key is 1 s to 366 days, not {secs} s"),
            format,
            &base,
        ));
    }
    let found = state
        .scanner
        .key_state(&key)
        .await
        .map_err(|err| failed(&err, format, &base))?;
    let secs_text = secs.to_string();
    let token = write::mint(&state, &ttl_action(&key, &secs_text));
    let needed = found.exists() && found.ttl.is_none();
    if format == Format::Json {
        return Ok(axum::Json(json!({
            "key": j::key(&key), "type": found.redis_type,
            "ttl_ms": found.ttl.map(words::millis), "give_ttl_s": secs,
            "token": needed.then_some(token),
        }))
        .into_response());
    }
    let shown = String::from_utf8_lossy(&key);
    let hidden = [("key_hex", hex::encode(&key)), ("ttl", secs_text.clone())];
    let body = html! {
        h1 { "Give " span.mono { (shown) } " a TTL?" }
        @if !found.exists() {
            p #nothing { "Nothing to do: the key is gone." }
        } @else if let Some(left) = found.ttl {
            p #nothing { "Nothing to do: the key has a TTL already (" (words::duration(left)) " left); it is never changed here." }
        } @else {
            p #what { "A " (found.redis_type) " key without a TTL: it never goes away. It will expire in " (words::duration(ttl)) " unless it is written again with a TTL of its own." }
            form.filters method="get" action=(base.to("/give-ttl")) {
                input type="hidden" name="key_hex" value=(hex::encode(&key));
                label { "TTL (seconds, 1 to 31,622,400)" input type="number" name="ttl" min="1" max="31622400" value=(secs); }
                button type="submit" { "Change" }
            }
            (write::form(&base, "/give-ttl", &hidden, &token, &format!("Expire it in {}", words::duration(ttl)), "/audit"))
            p.muted { "One script on the key's slot: a TTL the key has by then is left as it is." }
        }
    };
    Ok(layout::page(&base, "Confirm: give a TTL", None, body).into_response())
}

/// `POST /give-ttl` and `/api/give-ttl`.
pub(super) async fn execute_ttl(
    State(state): State<Shared>,
    base: Base,
    q: KeyQuery,
    format: Format,
) -> Result<Response, Failure> {
    let (key, secs) = key_and_ttl(&state, &q, format, &base)?;
    let secs_text = secs.to_string();
    write::spend(
        &state,
        q.token.as_deref(),
        &ttl_action(&key, &secs_text),
        format,
        &base,
    )?;
    let given = state
        .scanner
        .give_ttl(&key, Duration::from_secs(secs))
        .await
        .map_err(|err| failed(&err, format, &base))?;
    if format == Format::Json {
        return Ok(axum::Json(json!({ "given": given })).into_response());
    }
    let shown = String::from_utf8_lossy(&key);
    let body = html! {
        h1 { @if given { "TTL given" } @else { "Nothing changed" } }
        p #done {
            @if given { span.mono { (shown) } " expires in " (words::duration(Duration::from_secs(secs))) "." }
            @else { span.mono { (shown) } " has a TTL by now, or is gone: left as it is." }
        }
        p { a href=(base.to("/audit?refresh=1")) { "Audit again" } }
    };
    Ok(layout::page(&base, "Give a TTL", None, body).into_response())
}

/// The handlers the router mounts: HTML and JSON, GET and POST.
pub(super) mod route {
    use super::*;

    use super::super::write::handlers;

    handlers! {
        unblock_page unblock_post: confirm_setting execute_setting (Setting::Block) SettingQuery, Format::Html;
        unblock_api unblock_api_post: confirm_setting execute_setting (Setting::Block) SettingQuery, Format::Json;
        clear_page clear_post: confirm_setting execute_setting (Setting::Override) SettingQuery, Format::Html;
        clear_api clear_api_post: confirm_setting execute_setting (Setting::Override) SettingQuery, Format::Json;
        ttl_page ttl_post: confirm_ttl execute_ttl () KeyQuery, Format::Html;
        ttl_api ttl_api_post: confirm_ttl execute_ttl () KeyQuery, Format::Json;
    }
}

/// The links to a primitive's actions, for the tables that list it: its
/// reset, and a rate limiter's unblock and clear-override when it has a
/// block or an override.
pub(super) fn row_actions(base: &Base, info: &shardlimit::admin::LimiterInfo) -> Markup {
    let link = |path: &str| {
        super::params::action_link(base, path, &info.subject, Some((&info.kind, &info.name)))
    };
    html! {
        a.reset href=(link("/reset")) { "Reset…" }
        @if info.settings.blocked_for.is_some() { " " a.unblock href=(link("/unblock")) { "Unblock…" } }
        @if info.settings.override_quota.is_some() { " " a.clear-override href=(link("/clear-override")) { "Clear override…" } }
    }
}
