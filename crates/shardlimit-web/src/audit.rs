//! The audit: keys without a TTL (they never go away) and keys that are
//! not shardlimit's, counted per master.
//!
//! The audit walks the whole namespace, so it runs in the background like
//! the overview's count (see `jobs`): the page shows the last complete
//! audit and its age — with why the newest fell short when it could not
//! walk every master — and starts a new one when that is stale.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::http::{Base, Failure, Format, page_and_api, respond};
use super::jobs::Snapshot;
use super::params::{Refresh, reset_link, subject_query};
use super::state::Shared;
use super::{json as j, layout, words};
use shardlimit::admin::AuditReport;
use shardlimit::keys::ParsedKey;

page_and_api!(Refresh);

async fn serve(
    State(state): State<Shared>,
    base: Base,
    Query(refresh): Query<Refresh>,
    format: Format,
) -> Result<Response, Failure> {
    let scanner = state.scanner.clone();
    let snapshot = state
        .audit
        .get(
            state.options.count_refresh,
            refresh.forced(),
            state.options.first_wait,
            move || async move { scanner.audit().await },
        )
        .await;
    let limit = state.options.audit_list_limit;
    let writes = state.options.writes;
    Ok(respond(
        format,
        || html(&base, &snapshot, limit, writes),
        || json(&snapshot, limit),
    ))
}

/// (without TTL, not shardlimit's) per master.
fn per_master(report: &AuditReport) -> BTreeMap<&str, (u64, u64)> {
    let mut per = BTreeMap::new();
    for (_, node) in &report.immortal {
        per.entry(node.as_str()).or_insert((0, 0)).0 += 1;
    }
    for (_, node) in &report.unrecognized {
        per.entry(node.as_str()).or_insert((0, 0)).1 += 1;
    }
    per
}

fn html(base: &Base, s: &Snapshot<AuditReport>, limit: usize, writes: bool) -> Markup {
    let status = match (s.shown().map(|(l, _)| l), s.running_for) {
        (Some(l), running) => format!(
            "Audited {} ago (the walk took {}).{}",
            words::duration(l.age()),
            words::duration(l.took),
            running.map_or(String::new(), |t| format!(
                " Auditing again now ({} so far).",
                words::duration(t)
            ))
        ),
        (None, Some(t)) => format!(
            "Auditing now ({} so far); reload to see the result.",
            words::duration(t)
        ),
        (None, None) => "No complete audit yet.".to_owned(),
    };
    let newest_failed = s.newest_failed();
    let body = html! {
        h1 { "Audit" }
        p.muted { (status) " " a href=(base.to("/audit?refresh=1")) { "Audit again" } }
        @if let Some((newest, why)) = &newest_failed {
            p.error #newest-failed { "The newest audit, " (words::duration(newest.age())) " ago, fell short: " (why) "." @if s.shown().is_some() { " The last complete one is shown." } }
        }
        @if let Some((_, report)) = s.shown() {
            {
                {
                    @if report.is_clean() {
                        div.banner.ok #clean { "Clean: all " (words::count(report.scanned, "key")) " have a TTL and are shardlimit's." }
                    } @else {
                        div.banner.warn { (words::count(report.immortal.len(), "key")) " without a TTL, " (words::count(report.unrecognized.len(), "key")) " that are not shardlimit's, of " (words::thousands(report.scanned)) " scanned." }
                    }
                    @for why in &report.approximate { p.error { "Approximate: " (why) "." } }
                    @let per = per_master(report);
                    @if !per.is_empty() {
                        table #per-master {
                            thead { tr { th { "Master" } th.num { "Without TTL" } th.num { "Not shardlimit's" } } }
                            tbody { @for (node, (immortal, unknown)) in &per { tr { td.mono { span.node { (node) } } td.num { (words::thousands(*immortal)) } td.num { (words::thousands(*unknown)) } } } }
                        }
                    }
                    (key_list(base, "Keys without a TTL", "immortal", &report.immortal, limit, writes))
                    (key_list(base, "Keys that are not shardlimit's", "unrecognized", &report.unrecognized, limit, false))
                }
            }
        }
    };
    layout::page(base, "Audit", None, body)
}

/// Keys and their masters; a key of shardlimit's layout (the audit walks
/// this namespace's keys only) links to its subject's page (its state, and
/// a reset). With `actions` (writes on, keys without a TTL), each row also
/// offers its primitive's reset and a TTL for the key.
fn key_list(
    base: &Base,
    title: &str,
    id: &str,
    keys: &[(Vec<u8>, String)],
    limit: usize,
    actions: bool,
) -> Markup {
    let subject = |key: &[u8]| {
        ParsedKey::parse(key)
            .ok()
            .map(|p| base.to(&format!("/subject?{}", subject_query(&p.subject))))
    };
    let reset = |key: &[u8]| {
        ParsedKey::parse(key)
            .ok()
            .map(|p| reset_link(base, &p.subject, Some((p.kind, p.name))))
    };
    html! {
        @if !keys.is_empty() {
            h2 { (title) " (" (words::thousands(keys.len())) ")" }
            table id=(id) {
                thead { tr { th { "Key" } th { "Master" } @if actions { th { "" } } } }
                tbody { @for (key, node) in keys.iter().take(limit) { tr {
                    td.mono { @match subject(key) {
                        Some(href) => { a.subject href=(href) { (String::from_utf8_lossy(key)) } }
                        None => { (String::from_utf8_lossy(key)) }
                    } }
                    td.mono { span.node { (node) } }
                    @if actions { td {
                        a.give-ttl href=(base.to(&format!("/give-ttl?key_hex={}", hex::encode(key)))) { "Give a TTL…" }
                        @if let Some(href) = reset(key) { " " a.reset href=(href) { "Reset…" } }
                    } }
                } } }
            }
            @if keys.len() > limit { p.muted { "… and " (keys.len() - limit) " more (the JSON lists " (limit) " too; `shardlimit audit --json` lists all)." } }
        }
    }
}

fn json(s: &Snapshot<AuditReport>, limit: usize) -> Value {
    let keys = |list: &[(Vec<u8>, String)]| {
        list.iter()
            .take(limit)
            .map(|(key, node)| json!({ "key": j::key(key), "node": node }))
            .collect::<Vec<_>>()
    };
    let audit = s.shown().map(|(last, report)| json!({
            "scanned": report.scanned,
            "clean": report.is_clean(),
            "without_ttl": report.immortal.len(),
            "unrecognized": report.unrecognized.len(),
            "per_master": per_master(report).into_iter().map(|(node, (i, u))| json!({ "node": node, "without_ttl": i, "unrecognized": u })).collect::<Vec<_>>(),
            "without_ttl_keys": keys(&report.immortal),
            "unrecognized_keys": keys(&report.unrecognized),
            "approximate": report.approximate,
            "age_ms": words::millis(last.age()),
            "took_ms": words::millis(last.took),
    }));
    let newest_failed = s
        .newest_failed()
        .map(|(newest, why)| json!({ "why": why, "age_ms": words::millis(newest.age()) }));
    json!({ "audit": audit, "newest_audit_failed": newest_failed, "auditing_for_ms": s.running_for.map(words::millis) })
}
