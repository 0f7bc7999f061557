//! One subject: everything it has in its slot, the slot and the master
//! serving it.
//!
//! Cost: one `CLUSTER SLOTS`, `GETKEYSINSLOT` on the subject's slot (see
//! [`Scanner::subject`](shardlimit::admin::Scanner::subject) for a slot of over
//! 1,000 keys) and one state pipeline (two when the subject has a rate
//! limiter's override or block), and the catalog's slot read the same way:
//! 6 commands for a subject with one limiter, at any cluster size. A rate limiter's override and block for the subject
//! are shown with it (its `quota` and `block` part keys are listed among
//! its keys), also when the subject has no state yet.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::actions::row_actions;
use super::http::{Base, Failure, Format, page_and_api, respond};
use super::params::{SubjectQuery, reset_link, subject_display};
use super::state::Shared;
use super::words::Quotas;
use super::{json as j, layout, words};
use shardlimit::admin::LimiterInfo;
use shardlimit::keys::{HashedSubject, KeyId, slot};

struct SubjectView {
    subject: Vec<u8>,
    /// A hashed subject (`hmac:…`, `sha256:…`): a credential's digest.
    hashed: bool,
    /// What the page hashes a typed key with, in words.
    hashed_with: &'static str,
    slot: u16,
    node: String,
    primitives: Vec<LimiterInfo>,
    writes: bool,
}

page_and_api!(SubjectQuery);

async fn serve(
    State(state): State<Shared>,
    base: Base,
    Query(query): Query<SubjectQuery>,
    format: Format,
) -> Result<Response, Failure> {
    let subject = query
        .bytes()
        .map_err(|msg| Failure::bad_request(msg, format, &base))?;
    let fail = |err: shardlimit::Error| Failure::cluster(&err, format, &base);
    // The slot of any key of the subject: they share its hash tag.
    let probe = KeyId::new("probe", "probe")
        .and_then(|id| state.cluster.keys().key(&subject, &id))
        .map_err(|err| Failure::bad_request(err.to_string(), format, &base))?;
    let the_slot = slot(&probe);
    // One topology for the page: the subject's master, and the catalog's.
    let topology = state.cluster.topology().await.map_err(fail)?;
    let (primitives, (quotas, catalog_error)) = futures::join!(
        state.scanner.subject_at(&topology, &subject),
        state.quotas_at(&topology)
    );
    let primitives = primitives.map_err(fail)?;
    let node = topology.owner(the_slot).map_or_else(
        || "(no master serves it)".to_owned(),
        |s| s.master.to_string(),
    );
    let view = SubjectView {
        hashed: HashedSubject::is_hashed(&subject),
        hashed_with: state.cluster.subject_hasher().describe_key(),
        subject,
        slot: the_slot,
        node,
        primitives,
        writes: state.options.writes,
    };
    Ok(respond(
        format,
        || html(&base, &view, &quotas, catalog_error.as_deref()),
        || json(&view, &quotas),
    ))
}

fn html(base: &Base, v: &SubjectView, quotas: &Quotas, catalog_error: Option<&str>) -> Markup {
    let shown = subject_display(&v.subject);
    let body = html! {
        h1 {
            "Subject " code #subject { (shown) }
            @if v.hashed { " " span.badge #hashed title="a credential's keyed digest" { "hashed" } }
        }
        @if v.hashed && v.subject.starts_with(b"hmac:") {
            p.muted #hashed-note {
                "A hashed subject: the keyed digest of a credential (an API key, a bearer token), "
                "which is never stored as it is. Type the raw key in Find to come here; this page "
                "hashes it with " (v.hashed_with) "."
            }
        } @else if v.hashed {
            p.muted #hashed-note {
                "A hashed subject: the SHA-256 digest of a subject too long or too secret to be "
                "stored as it is (HashedSubject::of), which Find does not compute."
            }
        }
        dl.facts {
            dt { "Slot" } dd #slot { (v.slot) }
            dt { "Master" } dd.mono #node { (v.node) }
            dt { "Primitives" } dd { (words::thousands(v.primitives.len())) }
        }
        @if let Some(err) = catalog_error {
            div.banner.warn #catalog-error { "The catalog of limits could not be read (" (err) "): remaining is shown only for the quotas given." }
        }
        @if v.primitives.is_empty() {
            p.muted { "This subject has nothing in its slot (GCRA and window keys exist only while they count)." }
        } @else {
            table #primitives {
                thead { tr {
                    th { "Kind" } th { "Name" } th.num { "TTL" } th { "Remaining" } th { "State" } th { "Keys" }
                    @if v.writes { th { "" } }
                } }
                tbody {
                    @for info in &v.primitives {
                        tr.at-limit[words::at_limit(info, quotas)] {
                            td { (info.kind) }
                            td { (info.name) }
                            td.num { @match info.ttl { Some(t) => (words::duration(t)), None => span.nottl { "none" } } }
                            td.headroom { (words::headroom(info, quotas).unwrap_or_default()) }
                            td { (words::usage(info)) }
                            td.mono { @for key in &info.keys { (String::from_utf8_lossy(key)) br; } }
                            @if v.writes {
                                td { (row_actions(base, info)) }
                            }
                        }
                    }
                }
            }
            @if v.writes {
                p { a.reset-all href=(reset_link(base, &v.subject, None)) { "Reset everything of this subject…" } }
            } @else {
                p.muted { "Read-only: resets are disabled." }
            }
        }
    };
    layout::page(base, &format!("Subject {shown}"), None, body)
}

fn json(v: &SubjectView, quotas: &Quotas) -> Value {
    json!({
        "subject": j::subject(&v.subject),
        "hashed": v.hashed,
        "slot": v.slot,
        "node": v.node,
        "primitives": v.primitives.iter().map(|i| j::limiter(i, quotas)).collect::<Vec<_>>(),
    })
}
