//! The limiters view: every primitive, a bounded page at a time, with the
//! scanner's filters and its per-master cursor.
//!
//! Cost: one page of [`Scanner::page`](crate::admin::Scanner::page) — at
//! most `PAGE_SCANS_PER_MASTER` `SCAN` calls and as many state pipelines
//! per master (each followed by a second when it found an override or a
//! block) — whatever the namespace holds.

use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::http::{Base, Failure, Format, respond};
use super::params::{Filters, subject_display, subject_query};
use super::state::Shared;
use super::words::Quotas;
use super::{json as j, layout, words};
use crate::admin::{Page, PageCursor};
use crate::keys::Kind;

pub(super) async fn page(
    state: State<Shared>,
    base: Base,
    filters: Query<Filters>,
) -> Result<Response, Failure> {
    serve(state, base, filters, Format::Html).await
}

pub(super) async fn api(
    state: State<Shared>,
    base: Base,
    filters: Query<Filters>,
) -> Result<Response, Failure> {
    serve(state, base, filters, Format::Json).await
}

async fn serve(
    State(state): State<Shared>,
    base: Base,
    Query(filters): Query<Filters>,
    format: Format,
) -> Result<Response, Failure> {
    let cursor = match filters.cursor() {
        Some(text) => text
            .parse::<PageCursor>()
            .map_err(|err| Failure::bad_request(err.to_string(), format, &base))?,
        None => PageCursor::start(),
    };
    let mut scanner = state.scanner.clone();
    if let Some(kind) = filters.kind() {
        // An unknown kind matches nothing: say so at once rather than walk
        // the whole namespace to show an empty page.
        let kind: Kind = kind.parse().map_err(|err: crate::keys::UnknownKind| {
            Failure::bad_request(err.to_string(), format, &base)
        })?;
        scanner = scanner.kind(kind.as_str());
    }
    if let Some(name) = filters.name() {
        scanner = scanner.name(name);
    }
    if let Some(glob) = filters.subject() {
        scanner = scanner.subject_glob(glob);
    }
    let started = Instant::now();
    let page = scanner
        .page(&cursor, state.options.page_size.get())
        .await
        .map_err(|err| Failure::cluster(&err, format, &base))?;
    let took = started.elapsed();
    let (quotas, catalog_error) = state.quotas().await;
    Ok(respond(
        format,
        || {
            html(
                &base,
                &filters,
                &page,
                took,
                &quotas,
                catalog_error.as_deref(),
            )
        },
        || json(&page, took, &quotas, catalog_error.as_deref()),
    ))
}

fn html(
    base: &Base,
    filters: &Filters,
    page: &Page,
    took: Duration,
    quotas: &Quotas,
    catalog_error: Option<&str>,
) -> Markup {
    let next = page.next.as_ref().map(ToString::to_string);
    let body = html! {
        h1 { "Limiters" }
        form.filters method="get" action=(base.to("/limiters")) {
            label { "Kind"
                select name="kind" {
                    option value="" { "any" }
                    @for kind in Kind::ALL {
                        option value=(kind.as_str()) selected[filters.kind() == Some(kind.as_str())] { (kind.as_str()) }
                    }
                }
            }
            label { "Name" input type="text" name="name" value=(filters.name().unwrap_or("")) placeholder="any"; }
            label { "Subject (glob)" input type="text" name="subject" value=(filters.subject().unwrap_or("")) placeholder="e.g. user:*"; }
            button type="submit" { "Filter" }
            a href=(base.to("/limiters")) { "Clear" }
        }
        p.muted #cost {
            (page.limiters.len()) " primitives on this page; "
            (page.scan_calls) " SCAN calls; " (words::duration(took)) "."
        }
        @if let Some(err) = catalog_error {
            div.banner.warn #catalog-error { "The catalog of limits could not be read (" (err) "): remaining is shown only for the quotas given." }
        }
        @for node in &page.restarted {
            div.banner.warn { (node) " was walked again from its start (a failover or resharding since the last page): some primitives may repeat." }
        }
        @for (node, err) in &page.failed {
            div.banner.bad { (node) " failed on this page: " (err.to_string()) ". The next page tries it again from where it stopped." }
        }
        @if !page.unrecognized.is_empty() {
            p { (page.unrecognized.len()) " keys on this page are not shardlimit's; see the " a href=(base.to("/audit")) { "audit" } "." }
        }
        table #limiters {
            thead { tr {
                th { "Kind" } th { "Name" } th { "Subject" } th.num { "Slot" } th { "Node" } th.num { "TTL" } th { "Remaining" } th { "State" }
            } }
            tbody {
                @for info in &page.limiters {
                    tr.at-limit[words::at_limit(info, quotas)] {
                        td { (info.kind) }
                        td { (info.name) }
                        td.mono { a.subject href=(base.to(&format!("/subject?{}", subject_query(&info.subject)))) { (subject_display(&info.subject)) } }
                        td.num { (info.slot) }
                        td.mono { (info.node) }
                        td.num { @match info.ttl { Some(t) => (words::duration(t)), None => span.nottl { "none" } } }
                        td.headroom { (words::headroom(info, quotas).unwrap_or_default()) }
                        td { (words::usage(info)) }
                    }
                }
            }
        }
        @if page.limiters.is_empty() {
            p.muted { @if next.is_some() { "Nothing matched on this page; the walk goes on." } @else { "Nothing matched." } }
        }
        div.pager {
            @if filters.cursor().is_some() {
                a href=(base.to(&format!("/limiters?{}", filters.query_at(None)))) { "← First page" }
            }
            @match &next {
                Some(cursor) => { a.button #next href=(base.to(&format!("/limiters?{}", filters.query_at(Some(cursor))))) { "Next page →" } }
                None => { span.muted #end { "End of the walk: every master has been scanned." } }
            }
        }
    };
    layout::page(base, "Limiters", None, body)
}

fn json(page: &Page, took: Duration, quotas: &Quotas, catalog_error: Option<&str>) -> Value {
    json!({
        "catalog_error": catalog_error,
        "limiters": page.limiters.iter().map(|i| j::limiter(i, quotas)).collect::<Vec<_>>(),
        "next": page.next.as_ref().map(ToString::to_string),
        "scan_calls": page.scan_calls,
        "took_ms": words::millis(took),
        "restarted": page.restarted,
        "failed": page.failed.iter().map(|(node, err)| json!({ "node": node, "error": err.to_string() })).collect::<Vec<_>>(),
        "unrecognized": page.unrecognized.iter().map(|(key, node)| json!({ "key": j::key(key), "node": node })).collect::<Vec<_>>(),
    })
}
