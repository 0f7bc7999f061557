//! The find box: an operator types a subject — or a raw API key — and is
//! taken to its page.
//!
//! Credentials are limited under their keyed digest (`hmac:…`), never
//! stored as they are, so what was typed is looked up both as it is and by
//! its digest ([`Scanner::lookup_at`](shardlimit::admin::Scanner::lookup_at),
//! hashed with the router's cluster's subject secret, which must be the
//! services'). The form is a POST, so a raw key never lands in a URL, the
//! browser's history or an access log: the answer is a redirect (303) to
//! the page of the subject that has something — the digest's when the key
//! is a credential — or, when neither has anything, a page saying so.
//!
//! Cost: one `CLUSTER SLOTS`, and the two subjects' slots read as the
//! subject page reads one; the page it leads to reads its slot again.

use axum::extract::{Form, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::http::{Base, Failure, Format};
use super::layout;
use super::params::subject_query;
use super::state::Shared;

/// The find box's one field.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct FindForm {
    subject: Option<String>,
}

/// `POST /find`.
pub(super) async fn find(
    State(state): State<Shared>,
    base: Base,
    Form(form): Form<FindForm>,
) -> Result<Response, Failure> {
    let format = Format::Html;
    let typed = form
        .subject
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Failure::bad_request("no subject given", format, &base))?;
    let fail = |err: shardlimit::Error| Failure::cluster(&err, format, &base);
    let topology = state.cluster.topology().await.map_err(fail)?;
    let found = state
        .scanner
        .lookup_at(&topology, typed.as_bytes())
        .await
        .map_err(fail)?;
    let page = |subject: &[u8]| {
        Redirect::to(&base.to(&format!("/subject?{}", subject_query(subject)))).into_response()
    };
    let digest = match found.digest {
        // A credential: its digest's page.
        Some(digest) if !found.hashed.is_empty() => return Ok(page(digest.as_ref())),
        Some(digest) if found.typed.is_empty() => digest,
        // The subject as typed has something, or was a digest itself.
        _ => return Ok(page(typed.as_bytes())),
    };
    // Nothing under either: say so here, without the typed text in a URL.
    let digest_link = base.to(&format!("/subject?{}", subject_query(digest.as_ref())));
    let body = html! {
        h1 { "Nothing found" }
        p #nothing {
            "Nothing is stored under what you typed, nor under its keyed digest "
            a.subject href=(digest_link) { code #digest { (digest.as_str()) } }
            ", hashed with " (found.describe_key()) "."
        }
        p.muted {
            "A window's or a GCRA limiter's keys exist only while they count. Credentials "
            "(API keys, bearer tokens) are limited under their keyed digest, never as typed."
        }
        @if !found.with_secret {
            div.banner.warn #no-secret {
                "This page has no subject secret. If the services hash credentials with one, "
                "give this page the same (SHARDLIMIT_SUBJECT_SECRET or --subject-secret-file "
                "for shardlimit web; ClusterBuilder::subject_secret for a router in your app)."
            }
        }
    };
    Ok(layout::page(&base, "Nothing found", None, body).into_response())
}
