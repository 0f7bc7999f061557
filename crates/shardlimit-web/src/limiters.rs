//! The limiters view: every primitive, a bounded page at a time, with the
//! scanner's filters and its per-master cursor.
//!
//! Cost: one page of
//! [`Scanner::page_within`](shardlimit::admin::Scanner::page_within) — rounds of
//! at most `PAGE_SCANS_PER_MASTER` `SCAN` calls and as many state pipelines
//! per master (each followed by a second when it found an override or a
//! block), until the page is full or the page budget is spent, at most
//! `MAX_PAGE_ROUNDS` rounds — whatever the namespace holds. The page says
//! how much of the namespace the walk has covered.
//!
//! A subject filter with no glob character names one subject: alone, it
//! leads to that subject's page (its slot only, not a walk); beside a kind
//! or name, the page offers the link.

use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde_json::{Value, json};

use super::actions::row_actions;
use super::http::{Base, Failure, Format, page_and_api, respond};
use super::params::{Filters, subject_display, subject_query};
use super::state::Shared;
use super::words::Quotas;
use super::{json as j, layout, words};
use shardlimit::admin::{Page, PageCursor};
use shardlimit::keys::Kind;

page_and_api!(Filters);

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
    if format == Format::Html
        && filters.cursor().is_none()
        && filters.kind().is_none()
        && filters.name().is_none()
        && let Some(subject) = filters.exact_subject()
    {
        let url = base.to(&format!("/subject?{}", subject_query(subject.as_bytes())));
        return Ok(Redirect::to(&url).into_response());
    }
    let mut scanner = state.scanner.clone();
    if let Some(kind) = filters.kind() {
        // An unknown kind matches nothing: say so at once rather than walk
        // the whole namespace to show an empty page.
        let kind: Kind = kind.parse().map_err(|err: shardlimit::keys::UnknownKind| {
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
        .page_within(
            &cursor,
            state.options.page_size.get(),
            state.options.page_budget,
        )
        .await
        .map_err(|err| Failure::cluster(&err, format, &base))?;
    let took = started.elapsed();
    let (quotas, catalog_error) = state.quotas().await;
    let view = View {
        filters: &filters,
        page: &page,
        took,
        quotas: &quotas,
        catalog_error: catalog_error.as_deref(),
        writes: state.options.writes,
    };
    Ok(respond(
        format,
        || html(&base, &view),
        || json(&page, took, &quotas, catalog_error.as_deref()),
    ))
}

/// What one limiters page shows.
struct View<'a> {
    filters: &'a Filters,
    page: &'a Page,
    took: Duration,
    quotas: &'a Quotas,
    catalog_error: Option<&'a str>,
    writes: bool,
}

fn html(base: &Base, view: &View<'_>) -> Markup {
    let View {
        filters,
        page,
        took,
        quotas,
        catalog_error,
        writes,
    } = *view;
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
        @if let Some(subject) = filters.exact_subject() {
            p #exact { "“" (subject) "” names one subject: " a href=(base.to(&format!("/subject?{}", subject_query(subject.as_bytes())))) { "everything it has, from its slot alone" } "." }
        }
        p #progress {
            "Page " (words::thousands(filters.page())) " · walked " (words::percent(page.walked)) " of the namespace"
        }
        p.muted #cost {
            (words::count(page.limiters.len(), "primitive")) " on this page; "
            (words::thousands(page.scan_calls)) " SCAN calls; " (words::duration(took)) "."
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
            p { (words::count(page.unrecognized.len(), "key")) " on this page " (if page.unrecognized.len() == 1 { "is" } else { "are" }) " not shardlimit's; see the " a href=(base.to("/audit")) { "audit" } "." }
        }
        table #limiters {
            thead { tr {
                th { "Kind" } th { "Name" } th { "Subject" } th.num { "Slot" } th { "Node" } th.num { "TTL" } th { "Remaining" } th { "State" }
                @if writes { th { "" } }
            } }
            tbody {
                @for info in &page.limiters {
                    tr.at-limit[words::at_limit(info, quotas)] {
                        td { (info.kind) }
                        td { (info.name) }
                        td.mono { a.subject href=(base.to(&format!("/subject?{}", subject_query(&info.subject)))) { (subject_display(&info.subject)) } }
                        td.num { (info.slot) }
                        td.mono { span.node { (info.node) } }
                        td.num { @match info.ttl { Some(t) => (words::duration(t)), None => span.nottl { "none" } } }
                        td.headroom { (words::headroom(info, quotas).unwrap_or_default()) }
                        td { (words::usage(info)) }
                        @if writes {
                            td { (row_actions(base, info)) }
                        }
                    }
                }
            }
        }
        @if page.limiters.is_empty() {
            p.muted { @if next.is_some() { "Nothing matched so far (the page's time budget ran out); the walk goes on." } @else { "Nothing matched." } }
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
        "rounds": page.rounds,
        "walked": page.walked,
        "took_ms": words::millis(took),
        "restarted": page.restarted,
        "failed": page.failed.iter().map(|(node, err)| json!({ "node": node, "error": err.to_string() })).collect::<Vec<_>>(),
        "unrecognized": page.unrecognized.iter().map(|(key, node)| json!({ "key": j::key(key), "node": node })).collect::<Vec<_>>(),
    })
}
