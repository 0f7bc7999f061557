//! The overview: the cluster, its masters and replicas, and how many
//! primitives of each kind and name there are.
//!
//! Cost: `CLUSTER SLOTS`, four `INFO`/`CLUSTER INFO` calls and a `DBSIZE`
//! per master — no `SCAN`. The counts come from a background walk (see
//! `jobs`), at most one at a time, shown with their age.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::Response;
use futures::future::join_all;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::http::{Base, Failure, Format, respond};
use super::jobs::Snapshot;
use super::params::{Refresh, percent};
use super::state::Shared;
use super::{layout, words};
use crate::Health;
use crate::admin::CountReport;
use crate::cluster::Topology;

/// Everything the overview shows.
struct Overview {
    namespace: String,
    writes: bool,
    health: Health,
    topology: Topology,
    /// `DBSIZE` per master (every namespace), or why it failed.
    dbsize: BTreeMap<String, Result<u64, String>>,
    counts: Snapshot<CountReport>,
}

pub(super) async fn page(
    state: State<Shared>,
    base: Base,
    refresh: Query<Refresh>,
) -> Result<Response, Failure> {
    serve(state, base, refresh, Format::Html).await
}

pub(super) async fn api(
    state: State<Shared>,
    base: Base,
    refresh: Query<Refresh>,
) -> Result<Response, Failure> {
    serve(state, base, refresh, Format::Json).await
}

async fn serve(
    State(state): State<Shared>,
    base: Base,
    Query(refresh): Query<Refresh>,
    format: Format,
) -> Result<Response, Failure> {
    let fail = |err: crate::Error| Failure::cluster(&err, format, &base);
    let counting = {
        let scanner = state.scanner.clone();
        state.count.get(
            state.options.count_refresh,
            refresh.forced(),
            state.options.first_wait,
            move || async move { scanner.count_limiters().await },
        )
    };
    let (health, topology, counts) =
        futures::join!(state.cluster.health(), state.cluster.topology(), counting);
    let (health, topology) = (health.map_err(fail)?, topology.map_err(fail)?);
    let dbsize = join_all(topology.shards.iter().map(|shard| {
        let cluster = &state.cluster;
        async move {
            let size = cluster
                .node_command::<u64>("dbsize", &shard.master, redis::cmd("DBSIZE"))
                .await
                .map_err(|e| e.to_string());
            (shard.master.to_string(), size)
        }
    }))
    .await
    .into_iter()
    .collect();
    let overview = Overview {
        namespace: state.cluster.namespace().to_owned(),
        writes: state.options.writes,
        health,
        topology,
        dbsize,
        counts,
    };
    Ok(respond(
        format,
        || html(&base, &overview),
        || json(&overview),
    ))
}

/// Primitives per (kind, name) over every master.
type PerKindName<'a> = BTreeMap<(&'a str, &'a str), u64>;

/// Primitives per (kind, name) over every master, and per master.
fn totals(report: &CountReport) -> (PerKindName<'_>, BTreeMap<&str, u64>) {
    let (mut by_kind, mut by_node) = (BTreeMap::new(), BTreeMap::new());
    for ((node, kind, name), n) in &report.counts {
        *by_kind.entry((kind.as_str(), name.as_str())).or_default() += n;
        *by_node.entry(node.as_str()).or_default() += n;
    }
    (by_kind, by_node)
}

fn html(base: &Base, o: &Overview) -> Markup {
    let problems = o.health.lock_problems();
    let served = o.health.served_slots();
    let banner = html! {
        @if served < 16384 {
            div.banner.warn role="alert" {
                strong { "The cluster is down for " (16384 - served) " slots." }
                " Only " (served) " of 16384 slots are served: checks, locks and leases on the \
                others fail now (fail-open limiters bypass, local ones decide locally) until a \
                replica takes them over or their master is back."
            }
        }
        @if problems.is_empty() {
            div.banner.ok { "Fit for locks: every master has AOF on and a connected replica, and every slot is served." }
        } @else {
            div.banner.warn role="alert" {
                strong { "This cluster is not fit for locks." }
                ul { @for p in &problems { li { (p) } } }
            }
        }
    };
    let report = o.counts.last.as_ref().and_then(|l| l.result.as_ref().ok());
    let (by_kind, by_node) = report.map(totals).unwrap_or_default();
    let body = html! {
        h1 { "Overview" }
        dl.facts {
            dt { "Namespace" } dd { code { (o.namespace) } }
            dt { "Slots served" } dd { (served) " of 16384" }
            dt { "Masters" } dd { (o.health.masters.len()) }
            dt { "Mode" } dd { @if o.writes { "writes enabled (reset)" } @else { "read-only" } }
        }
        p { "Who is denied most right now: " a #throttled-now href=(base.to("/throttled")) { "Throttled now" } "." }
        h2 { "Masters and replicas" }
        table #masters {
            thead { tr {
                th { "Master" } th { "Replicas" } th { "Role" } th { "AOF" }
                th { "Cluster state" } th.num { "Used memory" } th.num { "Keys (all namespaces)" }
                th.num { "Primitives here" }
            } }
            tbody {
                @for m in &o.health.masters {
                    @let addr = m.master.to_string();
                    @let replicas = o.topology.shards.iter().find(|s| s.master.id == m.master.id).map(|s| s.replicas.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")).unwrap_or_default();
                    tr {
                        td.mono { (addr) }
                        td.mono { @if replicas.is_empty() { span.error { "none" } } @else { (replicas) } }
                        @match &m.status {
                            Ok(s) => {
                                td { (s.role) " (" (s.connected_replicas) " connected)" }
                                td { @if s.aof_enabled { "on" } @else { span.error { "off" } } }
                                td { @if s.cluster_state_ok { "ok" } @else { span.error { "fail" } } }
                                td.num { (words::bytes(s.used_memory)) }
                            }
                            Err(err) => { td colspan="4" .error { "did not answer: " (err.to_string()) } }
                        }
                        td.num { @match o.dbsize.get(&addr) { Some(Ok(n)) => (n), Some(Err(e)) => span.error { (e) }, None => "?" } }
                        td.num { @if report.is_some() { (by_node.get(addr.as_str()).copied().unwrap_or(0)) } @else { "…" } }
                    }
                }
            }
        }
        h2 { "Primitives per kind and name" }
        p.muted { (count_status(&o.counts)) " " a href=(base.to("/?refresh=1")) { "Count again" } }
        @if let Some(report) = report {
            table #counts {
                thead { tr { th { "Kind" } th { "Name" } th.num { "Primitives" } } }
                tbody {
                    @for ((kind, name), n) in &by_kind {
                        tr {
                            td { (kind) }
                            td { a href=(base.to(&format!("/limiters?kind={}&name={}", percent(kind.as_bytes()), percent(name.as_bytes())))) { (name) } }
                            td.num { (n) }
                        }
                    }
                    tr { th colspan="2" { "Total" } th.num { (report.total()) } }
                }
            }
            @if report.unrecognized > 0 {
                p { (report.unrecognized) " keys under the namespace are not shardlimit's: see the " a href=(base.to("/audit")) { "audit" } "." }
            }
            @for node in &report.incomplete { p.error { (node) ": not fully walked; counts may be low." } }
        }
    };
    layout::page(base, "Overview", Some(banner), body)
}

/// `counted 12 s ago (the walk took 0.4 s)`, `counting… (3.1 s so far)`.
fn count_status<T>(s: &Snapshot<T>) -> String {
    let last = match &s.last {
        Some(l) => match &l.result {
            Ok(_) => format!(
                "Counted {} ago (the walk took {}).",
                words::duration(l.age()),
                words::duration(l.took)
            ),
            Err(e) => format!("The last count failed: {e}."),
        },
        None => "Not counted yet.".to_owned(),
    };
    match s.running_for {
        Some(t) => format!(
            "{last} Counting now ({} so far); reload to see it.",
            words::duration(t)
        ),
        None => last,
    }
}

fn json(o: &Overview) -> Value {
    let masters: Vec<Value> = o
        .health
        .masters
        .iter()
        .map(|m| {
            let addr = m.master.to_string();
            let replicas: Vec<String> = o
                .topology
                .shards
                .iter()
                .find(|s| s.master.id == m.master.id)
                .map(|s| s.replicas.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            let status = match &m.status {
                Ok(s) => json!({
                    "role": s.role, "aof_enabled": s.aof_enabled, "aof_last_write_ok": s.aof_last_write_ok,
                    "connected_replicas": s.connected_replicas, "cluster_state_ok": s.cluster_state_ok,
                    "used_memory": s.used_memory,
                }),
                Err(err) => json!({ "error": err.to_string() }),
            };
            let keys = match o.dbsize.get(&addr) {
                Some(Ok(n)) => json!(n),
                _ => Value::Null,
            };
            json!({ "master": addr, "id": m.master.id, "replicas": replicas, "status": status, "keys": keys })
        })
        .collect();
    let counts = match &o.counts.last {
        Some(last) => match &last.result {
            Ok(report) => {
                let rows: Vec<Value> = report
                    .counts
                    .iter()
                    .map(|((node, kind, name), n)| json!({ "node": node, "kind": kind, "name": name, "count": n }))
                    .collect();
                json!({
                    "per_node_kind_name": rows, "total": report.total(), "unrecognized": report.unrecognized,
                    "incomplete": report.incomplete, "age_ms": words::millis(last.age()), "took_ms": words::millis(last.took),
                })
            }
            Err(e) => json!({ "error": e, "age_ms": words::millis(last.age()) }),
        },
        None => Value::Null,
    };
    json!({
        "namespace": o.namespace,
        "writes": o.writes,
        "covered_slots": o.health.covered_slots,
        "served_slots": o.health.served_slots(),
        "fit_for_locks": o.health.fit_for_locks(),
        "lock_problems": o.health.lock_problems(),
        "masters": masters,
        "counts": counts,
        "counting_for_ms": o.counts.running_for.map(words::millis),
    })
}
