//! "Throttled now": per limiter, the subjects denied most in the last
//! minutes across every process, with their denials and rates, each linked
//! to its subject page and (with writes on) to its reset.
//!
//! Cost: [`admin::throttled`](shardlimit::admin::throttled()) — two calls to one
//! master, no `SCAN`. A reset is the existing reset (confirmation, CSRF
//! token, POST). The reset does not clear the reports: a subject leaves
//! the view once its denials are older than its limiter's window — at
//! once, in effect, if the reset ends them, since the sketch only counts
//! denials.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{Base, Failure, Format, page_and_api, respond};
use super::params::{percent, reset_link, subject_display, subject_query};
use super::state::Shared;
use super::{layout, words};
use shardlimit::admin::{self, Scanner, Throttled, ThrottledName, json as j};

/// `?name=api` (only limiters of that name), `?watch=1` (the page reloads
/// itself every 5 s, when the reports are published).
#[derive(Debug, Default, Deserialize)]
pub(super) struct ThrottledQuery {
    name: Option<String>,
    watch: Option<String>,
}

page_and_api!(ThrottledQuery);

async fn serve(
    State(state): State<Shared>,
    base: Base,
    Query(query): Query<ThrottledQuery>,
    format: Format,
) -> Result<Response, Failure> {
    let mut view = admin::throttled(&state.cluster)
        .await
        .map_err(|err| Failure::cluster(&err, format, &base))?;
    let name = query.name.as_deref().filter(|n| !n.is_empty());
    if let Some(name) = name {
        view.names.retain(|n| n.name == name);
    }
    let watch = query.watch.as_deref().is_some_and(|w| !w.is_empty());
    let writes = state.options.writes;
    // Nothing under this namespace: which namespaces have reports (one
    // slot's keys; a hint, so an error is said, not fatal).
    let elsewhere = if view.processes == 0 && format == Format::Html {
        Scanner::new(&state.cluster)
            .throttled_namespaces()
            .await
            .map_err(|err| err.to_string())
    } else {
        Ok(Vec::new())
    };
    let here = Here {
        namespace: state.cluster.namespace(),
        elsewhere: &elsewhere,
        name,
        watch,
        writes,
    };
    Ok(respond(
        format,
        || html(&base, &view, &here),
        || json(&view),
    ))
}

/// What the page says about where it reads, and its settings.
struct Here<'a> {
    namespace: &'a str,
    /// The namespaces with reports, when this one has none (or why they
    /// could not be read).
    elsewhere: &'a Result<Vec<String>, String>,
    name: Option<&'a str>,
    watch: bool,
    writes: bool,
}

fn html(base: &Base, view: &Throttled, here: &Here<'_>) -> Markup {
    let Here {
        namespace,
        elsewhere,
        name,
        watch,
        writes,
    } = *here;
    let here = match name {
        Some(name) => format!("/throttled?name={}", percent(name.as_bytes())),
        None => "/throttled".to_owned(),
    };
    let toggle = if watch {
        base.to(&here)
    } else {
        base.to(&format!(
            "{here}{}watch=1",
            if name.is_some() { "&" } else { "?" }
        ))
    };
    let body = html! {
        @if watch { meta http-equiv="refresh" content="5"; }
        h1 { "Throttled now" }
        p.muted {
            "The subjects each limiter denied most in its last window, from every process of \
            namespace " code { (namespace) } " that denied anything lately (rate limiters report \
            by default; " code { "report_throttled(false)" } " turns it off), published every 5 s. \
            Denials never under-count; ± is how much they may over-count. Per second: over each \
            process's last 5 s, not the window. Reporting: "
            (processes(view.processes)) ". "
            a #watch href=(toggle) { @if watch { "Stop reloading" } @else { "Reload every 5 s" } }
        }
        @if view.names.is_empty() {
            p #none { "No process of namespace " code { (namespace) } " denied anything"
                @if let Some(name) = name { " with a limiter named " code { (name) } }
                " in the last minutes." }
            p #elsewhere {
                @match elsewhere {
                    Ok(all) if all.iter().any(|n| n != namespace) => {
                        "Reports now under: "
                        @for (i, n) in all.iter().filter(|n| *n != namespace).enumerate() {
                            @if i > 0 { ", " } code.namespace { (n) }
                        }
                        ". "
                    }
                    Ok(_) => { "No other namespace has reports now. " }
                    Err(err) => { "Which namespaces have reports could not be read (" (err) "). " }
                }
                "A page reads the namespace of its cluster handle: "
                code { "shardlimit web --namespace NS" } ", or a router mounted with that namespace's handle."
            }
        }
        @for n in &view.names { (name_section(base, n, writes)) }
        @if !writes { p.muted { "Read-only: resets are disabled." } }
    };
    layout::page(base, "Throttled now", None, body)
}

fn name_section(base: &Base, n: &ThrottledName, writes: bool) -> Markup {
    html! {
        section.throttled data-kind=(n.kind) data-name=(n.name) {
            h2 { (n.kind) " " (n.name) }
            p {
                "Allowed " (rate(n.allowed_per_sec)) "/s, denied " (rate(n.denied_per_sec))
                "/s, from the deny cache " (rate(n.cached_per_sec)) "/s, bypassed "
                (rate(n.bypassed_per_sec)) "/s over the last " (words::duration(n.interval)) " · " (n.denials) " denials in the last "
                (words::duration(n.covered)) " (window " (words::duration(n.window)) ") · "
                (processes(n.processes))
            }
            @if n.subjects.is_empty() {
                p.muted { "No denials in the window." }
            } @else {
                table {
                    thead { tr {
                        th { "Subject" } th.num { "Denials" } th.num { "±" } th.num.rate { "Per second, last " (words::duration(n.interval)) }
                        @if writes { th { "" } }
                    } }
                    tbody {
                        @for s in &n.subjects {
                            tr.subject {
                                td { a.subject href=(base.to(&format!("/subject?{}", subject_query(&s.subject)))) { (subject_display(&s.subject)) } }
                                td.num.denials { (s.denials) }
                                td.num { (s.error) }
                                td.num.rate { (rate(s.denials_per_sec)) }
                                @if writes {
                                    td { a.reset href=(reset_link(base, &s.subject, Some((&n.kind, &n.name)))) { "Reset…" } }
                                }
                            }
                        }
                    }
                }
                @if n.floor > 0 {
                    p.muted { "A subject not listed was denied at most " (n.floor) " times." }
                }
            }
        }
    }
}

fn processes(n: usize) -> String {
    format!("{n} process{}", if n == 1 { "" } else { "es" })
}

fn rate(per_sec: f64) -> String {
    format!("{per_sec:.2}")
}

fn json(view: &Throttled) -> Value {
    json!({
        "processes": view.processes,
        "names": view.names.iter().map(j::throttled).collect::<Vec<_>>(),
    })
}
