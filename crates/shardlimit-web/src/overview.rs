//! The overview: the cluster, its masters and replicas, and how many
//! primitives of each kind and name there are.
//!
//! Cost: `CLUSTER SLOTS` (within the node timeout), and per master one connection of its own for a
//! pipeline of three `INFO`s, `CLUSTER INFO` and `DBSIZE`, bounded by
//! `WebOptions::node_timeout` — no `SCAN`. Each view asks every master
//! afresh (`Cluster::health_within`): a hung master costs the page the
//! node timeout, and one back from an outage reads healthy at once. Served
//! slots and the "cluster down" banner come from the masters' `CLUSTER
//! INFO`, not from the topology, which keeps listing a dead master's slots.
//!
//! The counts come from a background walk (see `jobs`), at most one at a
//! time, shown with their age: the last complete one, with why the newest
//! fell short when it did. Counts are per master by node id, so a promoted
//! replica's are its own.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::http::{Base, Failure, Format, page_and_api, respond};
use super::jobs::Snapshot;
use super::params::{Refresh, percent};
use super::state::Shared;
use super::{layout, words};
use shardlimit::admin::CountReport;
use shardlimit::cluster::Topology;
use shardlimit::health::Health;

/// Everything the overview shows.
struct Overview {
    namespace: String,
    writes: bool,
    health: Health,
    topology: Topology,
    counts: Snapshot<CountReport>,
}

page_and_api!(Refresh);

async fn serve(
    State(state): State<Shared>,
    base: Base,
    Query(refresh): Query<Refresh>,
    format: Format,
) -> Result<Response, Failure> {
    let fail = |err: shardlimit::Error| Failure::cluster(&err, format, &base);
    let counting = {
        let scanner = state.scanner.clone();
        state.count.get(
            state.options.count_refresh,
            refresh.forced(),
            state.options.first_wait,
            move || async move { scanner.count_limiters().await },
        )
    };
    let looking = async {
        let per_node = state.options.node_timeout;
        let topology = state.cluster.topology_within(per_node).await?;
        let health = state.cluster.health_at(&topology, per_node).await;
        Ok::<_, shardlimit::Error>((health, topology))
    };
    let (looked, counts) = futures::join!(looking, counting);
    let (health, topology) = looked.map_err(fail)?;
    let overview = Overview {
        namespace: state.cluster.namespace().to_owned(),
        writes: state.options.writes,
        health,
        topology,
        counts,
    };
    Ok(respond(
        format,
        || html(&base, &overview),
        || json(&overview),
    ))
}

/// The replicas of master `m` as the topology lists them, each with its
/// link as the master reports it (`online, lag 0 s`, or `not connected`),
/// then those connected that the topology does not list.
fn replicas_of(o: &Overview, m: &shardlimit::health::MasterHealth) -> Vec<String> {
    let listed: Vec<String> = o
        .topology
        .shards
        .iter()
        .find(|s| s.master.id == m.master.id)
        .map(|s| s.replicas.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let Ok(status) = &m.status else {
        return listed;
    };
    let link = |addr: &str| status.replicas.iter().find(|r| r.addr == addr);
    let describe = |r: &shardlimit::health::ReplicaLink| match r.lag {
        Some(lag) => format!("{} ({}, lag {lag} s)", r.addr, r.state),
        None => format!("{} ({})", r.addr, r.state),
    };
    let mut shown: Vec<String> = listed
        .iter()
        .map(|addr| link(addr).map_or_else(|| format!("{addr} (not connected)"), describe))
        .collect();
    shown.extend(
        status
            .replicas
            .iter()
            .filter(|r| !listed.contains(&r.addr))
            .map(describe),
    );
    shown
}

/// Primitives per (kind, name) over every master.
fn by_kind(report: &CountReport) -> BTreeMap<(&str, &str), u64> {
    let mut by_kind = BTreeMap::new();
    for ((_, kind, name), n) in &report.counts {
        *by_kind.entry((kind.as_str(), name.as_str())).or_default() += n;
    }
    by_kind
}

/// What the "Primitives here" cell of master `id` says.
fn counted_here(report: Option<&CountReport>, per: &BTreeMap<&str, u64>, id: &str) -> String {
    match (report, per.get(id)) {
        (None, _) => "…".to_owned(),
        (Some(_), Some(n)) => words::thousands(*n),
        // Promoted after the count: its slots were counted on the master
        // it replaced (listed under the counts).
        (Some(_), None) => "not a master at the last count".to_owned(),
    }
}

fn html(base: &Base, o: &Overview) -> Markup {
    let problems = o.health.lock_problems();
    let served = o.health.served_slots();
    let banner = html! {
        @if o.health.cluster_down() {
            div.banner.bad #cluster-down role="alert" {
                strong { "Cluster down: " (16384 - served) " of 16384 slots are not served." }
                " A master reports cluster_state:fail, so checks, locks and leases fail now \
                (fail-open limiters bypass, local ones decide locally) until a replica takes \
                the slots over or their master is back."
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
    let report = o.counts.shown().map(|(_, r)| r);
    let by_kind = report.map(by_kind).unwrap_or_default();
    let per_master = report.map(CountReport::per_master).unwrap_or_default();
    let masters: Vec<&str> = o
        .health
        .masters
        .iter()
        .map(|m| m.master.id.as_str())
        .collect();
    let body = html! {
        h1 { "Overview" }
        dl.facts {
            dt { "Namespace" } dd { code { (o.namespace) } }
            dt { "Slots served" } dd #slots-served { (served) " of 16384" @if o.health.cluster_down() { " " span.error { "(cluster down)" } } }
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
                    @let replicas = replicas_of(o, m).join(", ");
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
                        td.num { @match &m.status { Ok(s) => (words::thousands(s.keys)), Err(_) => "?" } }
                        td.num { (counted_here(report, &per_master, &m.master.id)) }
                    }
                }
            }
        }
        h2 { "Primitives per kind and name" }
        p.muted #counts-status { (count_status(&o.counts)) " " a href=(base.to("/?refresh=1")) { "Count again" } }
        @if let Some(report) = report {
            table #counts {
                thead { tr { th { "Kind" } th { "Name" } th.num { "Primitives" } } }
                tbody {
                    @for ((kind, name), n) in &by_kind {
                        tr {
                            td { (kind) }
                            td { a href=(base.to(&format!("/limiters?kind={}&name={}", percent(kind.as_bytes()), percent(name.as_bytes())))) { (name) } }
                            td.num { (words::thousands(*n)) }
                        }
                    }
                    tr { th colspan="2" { "Total" } th.num { (words::thousands(report.total())) } }
                }
            }
            @if report.unrecognized > 0 {
                p { (words::count(report.unrecognized, "key")) " under the namespace are not shardlimit's: see the " a href=(base.to("/audit")) { "audit" } "." }
            }
            @for why in &report.approximate { p.error.approximate { "Approximate: " (why) "." } }
            @let former: Vec<_> = report.masters.iter().filter(|(id, _)| !masters.contains(&id.as_str())).collect();
            @if !former.is_empty() {
                table #former-masters {
                    thead { tr { th { "Counted on (no longer a master)" } th { "Node id" } th.num { "Primitives" } } }
                    tbody { @for (id, addr) in &former { tr { td.mono { (addr) } td.mono { (id) } td.num { (per_master.get(id.as_str()).copied().unwrap_or(0)) } } } }
                }
            }
        }
    };
    layout::page(base, "Overview", Some(banner), body)
}

/// `counted 12 s ago (the walk took 0.4 s)`, `counting… (3.1 s so far)`,
/// and why the newest count fell short when it did.
fn count_status(s: &Snapshot<CountReport>) -> String {
    let mut last = match s.shown() {
        Some((l, _)) => format!(
            "Counted {} ago (the walk took {}).",
            words::duration(l.age()),
            words::duration(l.took)
        ),
        None => "No complete count yet.".to_owned(),
    };
    if let Some((newest, why)) = s.newest_failed() {
        last.push_str(&format!(
            " The newest count, {} ago, fell short ({why}){}.",
            words::duration(newest.age()),
            if s.shown().is_some() {
                "; the last complete one is shown"
            } else {
                ""
            }
        ));
    }
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
            let replicas = replicas_of(o, m);
            let status = match &m.status {
                Ok(s) => json!({
                    "role": s.role, "aof_enabled": s.aof_enabled, "aof_last_write_ok": s.aof_last_write_ok,
                    "connected_replicas": s.connected_replicas, "cluster_state_ok": s.cluster_state_ok,
                    "slots_assigned": s.slots_assigned, "slots_ok": s.slots_ok, "slots_pfail": s.slots_pfail,
                    "slots_fail": s.slots_fail, "used_memory": s.used_memory,
                    "replica_links": s.replicas.iter().map(|r| json!({ "replica": r.addr, "state": r.state, "lag_s": r.lag })).collect::<Vec<_>>(),
                }),
                Err(err) => json!({ "error": err.to_string() }),
            };
            let keys = m.status.as_ref().ok().map(|s| s.keys);
            json!({ "master": addr, "id": m.master.id, "replicas": replicas, "status": status, "keys": keys })
        })
        .collect();
    let counts = o.counts.shown().map(|(last, report)| {
        let rows: Vec<Value> = report
            .counts
            .iter()
            .map(|((id, kind, name), n)| json!({ "node_id": id, "node": report.masters.get(id), "kind": kind, "name": name, "count": n }))
            .collect();
        let incomplete: Vec<Value> = report.incomplete.iter().map(|(node, error)| json!({ "node": node, "error": error })).collect();
        json!({
            "per_node_kind_name": rows, "per_master": report.per_master(), "total": report.total(),
            "unrecognized": report.unrecognized, "incomplete": incomplete, "approximate": report.approximate,
            "age_ms": words::millis(last.age()), "took_ms": words::millis(last.took),
        })
    });
    let newest_failed = o
        .counts
        .newest_failed()
        .map(|(newest, why)| json!({ "why": why, "age_ms": words::millis(newest.age()) }));
    json!({
        "namespace": o.namespace,
        "writes": o.writes,
        "covered_slots": o.health.covered_slots,
        "served_slots": o.health.served_slots(),
        "cluster_down": o.health.cluster_down(),
        "fit_for_locks": o.health.fit_for_locks(),
        "lock_problems": o.health.lock_problems(),
        "masters": masters,
        "counts": counts,
        "newest_count_failed": newest_failed,
        "counting_for_ms": o.counts.running_for.map(words::millis),
    })
}
