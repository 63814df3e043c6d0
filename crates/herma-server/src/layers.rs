//! The layers around every route: request ids (a client's own only when it is a short plain
//! token), tracing without secrets, and one middleware that records metrics, checks the edge
//! secret (H08), applies the body guard of `crate::limits` and adds the security headers to
//! every response.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
#[cfg(not(target_arch = "wasm32"))]
use tower_http::trace::{DefaultOnResponse, TraceLayer};

use herma_app::metrics::{ProxyOutcome, RequestAction, method_label};

use crate::AppState;
use crate::error::ApiError;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Security headers on every response. Pages may set their own CSP; the API default refuses
/// everything (nothing it serves is meant to load resources).
const SECURITY_HEADERS: [(HeaderName, &str); 4] = [
    (
        header::STRICT_TRANSPORT_SECURITY,
        "max-age=63072000; includeSubDomains",
    ),
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
];

/// The one middleware around every route (one clone of the state and one boxed future per
/// request, where a layer per job took three): it records the request for `GET /metrics` —
/// its route template (not the raw path), method, status, action (proxied requests) and the
/// time to its response headers, for forwarded requests also Herma's own share of that time
/// —, checks the edge secret (H08), guards the body (`crate::limits`) and adds the security
/// headers to the response.
async fn edge(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = web_time::Instant::now();
    let route: std::sync::Arc<str> = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".into(), |p| p.as_str().into());
    let method = method_label(request.method().as_str());
    let presented = request
        .headers()
        .get("x-edge-auth")
        .and_then(|v| v.to_str().ok());
    let mut response = match state.app.gate.check_edge(presented) {
        Err(problem) => ApiError(problem).into_response(),
        Ok(()) => crate::limits::guard_body(&state.bodies, request, next).await,
    };
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        if !headers.contains_key(&name) {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    let outcome = response.extensions().get::<ProxyOutcome>().copied();
    let metrics = &state.app.metrics;
    let action = outcome.map_or(RequestAction::None, |o| o.action);
    metrics.record_request(route, method, response.status().as_u16(), action, micros);
    if let Some(ProxyOutcome {
        protocol,
        action,
        added_micros: Some(added),
    }) = outcome
    {
        metrics.record_added_latency(protocol, action, added);
    }
    response
}

/// The longest client-sent request id Herma keeps.
const MAX_REQUEST_ID_LEN: usize = 128;

/// Whether a client's `X-Request-Id` is kept: 1–128 characters of `[A-Za-z0-9._:-]`. An id
/// goes into every log line of its request, so it must be bounded and unable to forge a field
/// (no spaces, quotes, `=` or control characters).
fn acceptable_request_id(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    (1..=MAX_REQUEST_ID_LEN).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Drops a client's request id Herma does not keep (and every one when several are sent), so
/// the id layer generates a fresh one.
async fn screen_request_id(mut request: Request, next: Next) -> Response {
    let keep = {
        let mut given = request.headers().get_all(&REQUEST_ID).iter();
        match (given.next(), given.next()) {
            (Some(only), None) => acceptable_request_id(only),
            (None, _) => true,
            (Some(_), Some(_)) => false,
        }
    };
    if !keep {
        request.headers_mut().remove(&REQUEST_ID);
    }
    next.run(request).await
}

/// Request ids unique to this process and run: a random prefix drawn at start and a counter
/// (no system call per request, unlike a random UUID each time).
#[derive(Clone)]
struct SequentialIds {
    prefix: u32,
    next: std::sync::Arc<AtomicU64>,
}

impl MakeRequestId for SequentialIds {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}-{n:x}", self.prefix))
            .ok()
            .map(RequestId::new)
    }
}

/// Wraps `router` in every layer. Listed innermost first; the request id is set outermost so
/// every log line and every response carries it — after a client's own id has been screened.
pub fn apply(router: Router, state: AppState) -> Router {
    let mut seed = [0u8; 4];
    let _ = state.app.random.fill(&mut seed);
    let ids = SequentialIds {
        prefix: u32::from_le_bytes(seed),
        next: std::sync::Arc::new(AtomicU64::new(1)),
    };
    let router = router
        .layer(middleware::from_fn_with_state(state, edge))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID));
    // tower-http's trace layer times every request with std's `Instant`, which the Worker's
    // target does not have; there the platform logs each request.
    #[cfg(not(target_arch = "wasm32"))]
    let router = router.layer(
        TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    let id = request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
                    // Method and path only: never headers (keys) or bodies.
                    tracing::info_span!("request", id = %id, method = %request.method(), path = %request.uri().path())
                })
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
    );
    router
        .layer(SetRequestIdLayer::new(REQUEST_ID, ids))
        .layer(middleware::from_fn(screen_request_id))
}
