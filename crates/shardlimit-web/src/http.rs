//! Plumbing shared by the pages: failures as responses, the security
//! headers every response carries.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

pub(super) use super::base::Base;
use super::layout;

/// Whether a response is for a person (HTML) or a program (JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    Html,
    Json,
}

/// A request that could not be served, with the status to say so.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) format: Format,
    pub(super) base: Base,
}

impl Failure {
    pub(super) fn new(
        status: StatusCode,
        message: impl Into<String>,
        format: Format,
        base: &Base,
    ) -> Self {
        Failure {
            status,
            message: message.into(),
            format,
            base: base.clone(),
        }
    }

    /// A cluster error: `503` when it may pass (a node down, a timeout),
    /// `502` otherwise — either way the cluster, not the request, failed.
    pub(super) fn cluster(err: &shardlimit::Error, format: Format, base: &Base) -> Self {
        let status = if err.is_transient() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::BAD_GATEWAY
        };
        Failure::new(
            status,
            format!("the cluster did not answer: {err}"),
            format,
            base,
        )
    }

    /// A `400` for a bad parameter.
    pub(super) fn bad_request(message: impl Into<String>, format: Format, base: &Base) -> Self {
        Failure::new(StatusCode::BAD_REQUEST, message, format, base)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self.format {
            Format::Json => (
                self.status,
                axum::Json(serde_json::json!({ "error": self.message })),
            )
                .into_response(),
            Format::Html => {
                let title = self.status.canonical_reason().unwrap_or("Error");
                let body = html! {
                    h1 { (title) }
                    p.error { (self.message) }
                };
                (self.status, layout::page(&self.base, title, None, body)).into_response()
            }
        }
    }
}

/// An HTML page or a JSON document.
pub(super) fn respond(
    format: Format,
    html: impl FnOnce() -> Markup,
    json: impl FnOnce() -> serde_json::Value,
) -> Response {
    match format {
        Format::Html => html().into_response(),
        Format::Json => axum::Json(json()).into_response(),
    }
}

/// Headers on every response: nothing cached (states change by the
/// second), no sniffing, no framing, no script at all — the pages need
/// none — and forms that post only back here.
pub(super) async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// A read page's two handlers, `page` (HTML) and `api` (its JSON twin
/// under `/api/`), from the module's `serve(state, base, query, format)`;
/// `$query` is what the query string parses into. The caller has `State`,
/// `Query`, `Response`, `Shared`, `Base`, `Failure` and `Format` in scope.
macro_rules! page_and_api {
    ($query:ty) => {
        /// The HTML page.
        pub(super) async fn page(
            state: State<Shared>,
            base: Base,
            query: Query<$query>,
        ) -> Result<Response, Failure> {
            serve(state, base, query, Format::Html).await
        }

        /// The same as JSON.
        pub(super) async fn api(
            state: State<Shared>,
            base: Base,
            query: Query<$query>,
        ) -> Result<Response, Failure> {
            serve(state, base, query, Format::Json).await
        }
    };
}
pub(super) use page_and_api;
