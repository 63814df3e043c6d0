//! The proxied routes: the three wire protocols, plus `count_tokens` and `models` forwarded as
//! they are. Herma's own errors here use each protocol's error shape (and the same `code`).

use std::pin::Pin;

use web_time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use herma_app::metrics::{ProxyOutcome, RequestAction};
use herma_app::proxy::{ProxyReply, ProxyRequest, ProxyRoute};
use herma_core::gate::{Principal, Requirement};
use herma_core::wire::Protocol;
use herma_core::{Problem, ProblemCode};

use crate::AppState;
use crate::error::{limit_headers, status_of};
use crate::extract::{GateRead, read_limited};

/// A problem rendered in a protocol's own error shape.
pub struct ProtocolError(pub Protocol, pub Problem);

impl IntoResponse for ProtocolError {
    fn into_response(self) -> Response {
        let status = status_of(self.1.code);
        let mut response = (status, self.0.error_body(&self.1).to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.1.code == ProblemCode::Unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"herma\""),
            );
        }
        limit_headers(&self.1, response.headers_mut());
        response
    }
}

/// Every proxied route, its future boxed here once: the pipeline's future is kilobytes (sized
/// for its largest state), and the router's layers each box and move the future they are
/// given, which would copy it whole at every layer.
fn handle(
    state: AppState,
    route: ProxyRoute,
    request: Request,
) -> Pin<Box<impl Future<Output = Response> + Send>> {
    Box::pin(serve(state, route, request))
}

/// The request is taken whole and split (axum's `Method`, `Uri` and `HeaderMap` extractors
/// would each clone their part, the header map with every entry).
async fn serve(state: AppState, route: ProxyRoute, request: Request) -> Response {
    let protocol = match route {
        ProxyRoute::Protocol(p) | ProxyRoute::Passthrough(p) => p,
    };
    let (parts, body) = request.into_parts();
    let (mut response, action, added_micros) =
        relay(state, route, parts.method, parts.uri, parts.headers, body).await;
    // For `GET /metrics`: what happened, and Herma's own share of the latency.
    response.extensions_mut().insert(ProxyOutcome {
        protocol: protocol.as_str(),
        action,
        added_micros,
    });
    response
}

async fn relay(
    state: AppState,
    route: ProxyRoute,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> (Response, RequestAction, Option<u64>) {
    let received = Instant::now();
    let protocol = match route {
        ProxyRoute::Protocol(p) | ProxyRoute::Passthrough(p) => p,
    };
    let failed = |response: Response| (response, RequestAction::Failed, None);
    let read = GateRead::of(&headers);
    if let Err(problem) = read.repeated() {
        return failed(ProtocolError(protocol, problem).into_response());
    }
    let principal = match state
        .app
        .gate
        .admit(&read.request, Requirement::Route, None)
        .await
    {
        Ok(Principal::Key(key)) => key,
        Ok(Principal::Bootstrap) => {
            return failed(
                ProtocolError(
                    protocol,
                    Problem::new(
                        ProblemCode::InsufficientScope,
                        "the bootstrap token cannot route model traffic",
                    ),
                )
                .into_response(),
            );
        }
        Err(problem) => return failed(ProtocolError(protocol, problem).into_response()),
    };
    if method == Method::POST && !crate::extract::is_json(&headers) {
        return failed(
            ProtocolError(
                protocol,
                Problem::new(
                    ProblemCode::UnsupportedMediaType,
                    "model requests must be sent as Content-Type: application/json",
                ),
            )
            .into_response(),
        );
    }
    let limit = usize::try_from(state.app.settings.proxy_max_body_bytes).unwrap_or(usize::MAX);
    let body = match read_limited(body, limit).await {
        Ok(body) => body,
        Err(problem) => return failed(ProtocolError(protocol, problem).into_response()),
    };
    let request = ProxyRequest {
        principal,
        route,
        method: method.as_str().to_owned(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body,
        received,
    };
    match state.app.proxy(request).await {
        Ok(ProxyReply::Direct {
            receipt_id,
            streaming,
            body,
        }) => {
            let content_type = if streaming {
                "text/event-stream; charset=utf-8"
            } else {
                "application/json"
            };
            let mut response = (StatusCode::OK, body).into_response();
            let h = response.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            if streaming {
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            }
            if let Ok(v) = HeaderValue::from_str(&receipt_id) {
                h.insert("x-herma-receipt", v);
            }
            (response, RequestAction::RespondedDirectly, None)
        }
        Ok(ProxyReply::Upstream {
            status,
            headers,
            body,
            action,
            added_micros,
            ..
        }) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut response = Response::new(Body::from_stream(body));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            (response, action.into(), Some(added_micros))
        }
        Err(failure) => {
            let mut response = ProtocolError(protocol, failure.problem).into_response();
            if let Some(v) = failure
                .receipt_id
                .and_then(|id| HeaderValue::from_str(&id).ok())
            {
                response.headers_mut().insert("x-herma-receipt", v);
            }
            failed(response)
        }
    }
}

/// OpenAI Chat Completions through Herma.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "proxy",
    description = "Send exactly what you would send to the Chat Completions API, with your Herma key as the API key. Herma answers directly or shims context (a system message before the latest user message) and forwards to the upstream named by `X-Upstream-Base-Url` or the operator's configuration. Streaming (SSE) is relayed as it arrives. The response carries `x-herma-receipt`.",
    request_body(content = Object, description = "A Chat Completions request",
        example = json!({"model": "gpt-5-mini", "messages": [{"role": "user", "content": "/herma"}]})),
    responses((status = 200, description = "The completion, as JSON or an SSE stream"),
        (status = 401, description = "Invalid Herma key (OpenAI error shape)"),
        (status = 403, description = "Refused: contributor-tier model, upstream host not allowed, …")),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn chat_completions(State(state): State<AppState>, request: Request) -> Response {
    handle(
        state,
        ProxyRoute::Protocol(Protocol::ChatCompletions),
        request,
    )
    .await
}

/// OpenAI Responses through Herma.
#[utoipa::path(post, path = "/v1/responses", tag = "proxy",
    description = "Send exactly what you would send to the Responses API (Codex does). A shim becomes a developer item before the latest user item. Streaming events are relayed as they arrive.",
    request_body(content = Object, description = "A Responses request",
        example = json!({"model": "gpt-5-codex", "input": [{"type": "message", "role": "user", "content": "/herma"}]})),
    responses((status = 200, description = "The response, as JSON or an SSE stream"), (status = 401, description = "Invalid Herma key")),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn responses(State(state): State<AppState>, request: Request) -> Response {
    handle(state, ProxyRoute::Protocol(Protocol::Responses), request).await
}

/// Anthropic Messages through Herma.
#[utoipa::path(post, path = "/v1/messages", tag = "proxy",
    description = "Send exactly what you would send to the Messages API (Claude Code does, including `?beta=true`). A shim is appended as the last `system` block, after any cache-marked blocks. Streaming events are relayed as they arrive.",
    request_body(content = Object, description = "A Messages request",
        example = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "/herma"}]})),
    responses((status = 200, description = "The message, as JSON or an SSE stream"), (status = 401, description = "Invalid Herma key (Anthropic error shape)")),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn messages(State(state): State<AppState>, request: Request) -> Response {
    handle(state, ProxyRoute::Protocol(Protocol::Messages), request).await
}

/// Anthropic token counting, forwarded as it is.
#[utoipa::path(post, path = "/v1/messages/count_tokens", tag = "proxy",
    request_body(content = Object, description = "A count_tokens request",
        example = json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "How many tokens is this?"}]})),
    responses((status = 200, description = "The upstream's answer")),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn count_tokens(State(state): State<AppState>, request: Request) -> Response {
    handle(state, ProxyRoute::Passthrough(Protocol::Messages), request).await
}

/// The upstream's model list, forwarded as it is (Anthropic credential style when the client
/// sends `anthropic-version`, OpenAI's otherwise).
#[utoipa::path(get, path = "/v1/models", tag = "proxy",
    responses((status = 200, description = "The upstream's answer")),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn models(State(state): State<AppState>, request: Request) -> Response {
    let protocol = if request.headers().contains_key("anthropic-version") {
        Protocol::Messages
    } else {
        Protocol::ChatCompletions
    };
    handle(state, ProxyRoute::Passthrough(protocol), request).await
}
