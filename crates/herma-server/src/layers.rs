//! The layers around every route: request ids, tracing without secrets, security headers and
//! the edge check (H08).

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};

use crate::AppState;
use crate::error::ApiError;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Security headers on every response. Pages may set their own CSP; the API default refuses
/// everything (nothing it serves is meant to load resources).
fn security_headers() -> [(HeaderName, HeaderValue); 4] {
    [
        (
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=63072000; includeSubDomains"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
            ),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
    ]
}

async fn edge_check(
    state: axum::extract::State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get("x-edge-auth")
        .and_then(|v| v.to_str().ok());
    if let Err(problem) = state.app.gate.check_edge(presented) {
        return ApiError(problem).into_response();
    }
    next.run(request).await
}

/// Wraps `router` in every layer. Listed innermost first; the request id is set outermost so
/// every log line and every response carries it.
pub fn apply(router: Router, state: AppState) -> Router {
    let mut router = router.layer(middleware::from_fn_with_state(state, edge_check));
    for (name, value) in security_headers() {
        router = router.layer(SetResponseHeaderLayer::if_not_present(name, value));
    }
    router
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    let id = request
                        .headers()
                        .get(REQUEST_ID)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-");
                    // Method and path only: never headers (keys) or bodies.
                    tracing::info_span!("request", id = %id, method = %request.method(), path = %request.uri().path())
                })
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
        )
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}
