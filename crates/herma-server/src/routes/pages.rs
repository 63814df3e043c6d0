//! The HTML pages and their two assets. Public; each page sets its own Content-Security-Policy.

use axum::Form;
use axum::extract::rejection::{FormRejection, QueryRejection};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use herma_app::dry_run::DryRunRequest;

use crate::AppState;
use crate::error::status_of;
use crate::pages::{self, Outcome, PlaygroundInput};
use crate::routes::public::{PeerAddr, base_url, client_address};

/// The longest prompt the playground form takes, in characters.
const MAX_PROMPT_CHARS: usize = 8000;

fn html(status: StatusCode, csp: &'static str, page: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, csp),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        page,
    )
        .into_response()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The landing page: what Herma is and how to start.
#[utoipa::path(get, path = "/", tag = "pages",
    responses((status = 200, description = "The landing page", content_type = "text/html")))]
pub async fn landing(State(state): State<AppState>, headers: HeaderMap) -> Response {
    html(
        StatusCode::OK,
        pages::STATIC_CSP,
        pages::landing(&base_url(&state, &headers)),
    )
}

/// The documentation page.
#[utoipa::path(get, path = "/docs", tag = "pages",
    responses((status = 200, description = "The docs page", content_type = "text/html")))]
pub async fn docs(State(state): State<AppState>, headers: HeaderMap) -> Response {
    html(
        StatusCode::OK,
        pages::STATIC_CSP,
        pages::docs(&base_url(&state, &headers)),
    )
}

/// The preview playground; `?prompt=` and `?protocol=` fill the form in.
#[utoipa::path(get, path = "/preview", tag = "pages",
    params(("prompt" = Option<String>, Query, description = "Text to put in the prompt box"),
        ("protocol" = Option<String>, Query, description = "messages, responses or chat_completions")),
    responses((status = 200, description = "The playground", content_type = "text/html")))]
pub async fn playground(input: Result<Query<PlaygroundInput>, QueryRejection>) -> Response {
    let input = input.map(|Query(q)| q).unwrap_or_default();
    html(
        StatusCode::OK,
        pages::PLAYGROUND_CSP,
        pages::playground(&input, Outcome::Empty),
    )
}

/// The playground's form without JavaScript: runs the preview and renders the result.
#[utoipa::path(post, path = "/preview", tag = "pages",
    request_body(content = String, description = "protocol=…&prompt=…", content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, description = "The playground with the result", content_type = "text/html"),
        (status = 422, description = "The form is incomplete", content_type = "text/html"),
        (status = 429, description = "Too many previews from this address", content_type = "text/html")))]
pub async fn playground_run(
    State(state): State<AppState>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    form: Result<Form<PlaygroundInput>, FormRejection>,
) -> Response {
    let input = form.map(|Form(f)| f).unwrap_or_default();
    let page = |status, outcome| {
        html(
            status,
            pages::PLAYGROUND_CSP,
            pages::playground(&input, outcome),
        )
    };
    let protocol = input.protocol.as_deref().unwrap_or("messages");
    let prompt = input.prompt.as_deref().unwrap_or("").trim();
    let problem = if !pages::PROTOCOLS.iter().any(|(p, _)| *p == protocol) {
        Some("protocol: choose messages, responses or chat_completions")
    } else if prompt.is_empty() {
        Some("prompt: write a prompt to preview")
    } else if prompt.chars().count() > MAX_PROMPT_CHARS {
        Some("prompt: at most 8000 characters")
    } else {
        None
    };
    if let Some(message) = problem {
        return page(StatusCode::UNPROCESSABLE_ENTITY, Outcome::Error(message));
    }
    let address = client_address(&state, &headers, peer);
    if let Err(problem) = state.app.preview_limit.check(&address) {
        return page(status_of(problem.code), Outcome::Error(&problem.detail));
    }
    let request =
        serde_json::json!({"protocol": protocol, "body": pages::preview_body(protocol, prompt)});
    let outcome = match herma_core::json::decode::<DryRunRequest>(request) {
        Ok(request) => state.app.preview(request).await,
        Err(problem) => Err(problem),
    };
    match outcome {
        Ok(report) => page(StatusCode::OK, Outcome::Report(&report)),
        Err(problem) => page(status_of(problem.code), Outcome::Error(&problem.detail)),
    }
}

/// Herma's stylesheet.
#[utoipa::path(get, path = "/assets/herma.css", tag = "pages",
    responses((status = 200, description = "CSS", content_type = "text/css")))]
pub async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", pages::STYLESHEET)
}

/// The playground's script.
#[utoipa::path(get, path = "/assets/playground.js", tag = "pages",
    responses((status = 200, description = "JavaScript", content_type = "text/javascript")))]
pub async fn playground_script() -> Response {
    asset("text/javascript; charset=utf-8", pages::PLAYGROUND_SCRIPT)
}
