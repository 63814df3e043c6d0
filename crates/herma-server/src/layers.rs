//! The one layer around every route: request ids (a client's own only when it is a short plain
//! token), a tracing span without secrets and the response line, metrics, the edge secret (H08),
//! the body guard of `crate::limits` and the security headers. One middleware does all of it:
//! each layer of its own cost a boxed clone of the route and a future per request.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use herma_app::metrics::{ProxyOutcome, RequestAction, method_label};

use crate::AppState;
use crate::error::ApiError;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// H08's edge secret, as a name (a lookup by `&str` parses the name on every request).
const EDGE_AUTH: HeaderName = HeaderName::from_static("x-edge-auth");

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

/// What the middleware needs besides the request: the state and the request-id source.
#[derive(Clone)]
struct Edge {
    state: AppState,
    ids: SequentialIds,
}

/// The middleware around every route, in this order: the request id (the client's own when
/// Herma keeps it, else a fresh one; on the request, so handlers and logs see it, and on the
/// response), the request's span (id, method, path: never headers or bodies), then the edge
/// secret (H08) and the body guard (`crate::limits`) before the route; after it the security
/// headers, the request for `GET /metrics` — its route template (not the raw path), method,
/// status, action (proxied requests) and the time to its response headers, for forwarded
/// requests also Herma's own share of that time — and the response line in the log.
async fn edge(State(edge): State<Edge>, mut request: Request, next: Next) -> Response {
    let started = web_time::Instant::now();
    let id = request_id(request.headers_mut(), &edge.ids);
    let route: std::sync::Arc<str> = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".into(), |p| p.as_str().into());
    let method = method_label(request.method().as_str());
    // The Worker's platform logs each request itself.
    #[cfg(not(target_arch = "wasm32"))]
    let span = tracing::info_span!(
        "request",
        id = %id.to_str().unwrap_or("-"),
        method = %request.method(),
        path = %request.uri().path()
    );
    let state = &edge.state;
    let presented = request
        .headers()
        .get(&EDGE_AUTH)
        .and_then(|v| v.to_str().ok());
    let admitted = state.app.gate.check_edge(presented);
    let inner = async {
        match admitted {
            Err(problem) => ApiError(problem).into_response(),
            Ok(()) => crate::limits::guard_body(&state.bodies, request, next).await,
        }
    };
    #[cfg(not(target_arch = "wasm32"))]
    let mut response = tracing::Instrument::instrument(inner, span.clone()).await;
    #[cfg(target_arch = "wasm32")]
    let mut response = inner.await;
    // Each added unless the route set it: one lookup a header (the entry), not two.
    let headers = response.headers_mut();
    headers.entry(REQUEST_ID).or_insert(id);
    for (name, value) in SECURITY_HEADERS {
        headers
            .entry(name)
            .or_insert_with(|| HeaderValue::from_static(value));
    }
    let elapsed = started.elapsed();
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let outcome = response.extensions().get::<ProxyOutcome>().copied();
    let metrics = &state.app.metrics;
    let action = outcome.map_or(RequestAction::None, |o| o.action);
    let status = response.status();
    metrics.record_request(route, method, status.as_u16(), action, micros);
    if let Some(ProxyOutcome {
        protocol,
        action,
        added_micros: Some(added),
    }) = outcome
    {
        metrics.record_added_latency(protocol, action, added);
    }
    #[cfg(not(target_arch = "wasm32"))]
    span.in_scope(|| log_response(status, elapsed));
    response
}

/// The response's line, as tower-http's trace layer wrote it before this middleware replaced
/// it (same targets, messages and fields, so a filter such as `tower_http=warn` still silences
/// it): `finished processing request` at info, and `response failed` at error for a 5xx.
#[cfg(not(target_arch = "wasm32"))]
fn log_response(status: axum::http::StatusCode, latency: std::time::Duration) {
    struct Millis(u128);
    impl std::fmt::Display for Millis {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{} ms", self.0)
        }
    }
    let latency = Millis(latency.as_millis());
    if status.is_server_error() {
        tracing::error!(
            target: "tower_http::trace::on_failure",
            classification = %format_args!("Status code: {status}"),
            latency = %latency,
            "response failed"
        );
    }
    tracing::info!(
        target: "tower_http::trace::on_response",
        latency = %latency,
        status = status.as_u16(),
        "finished processing request"
    );
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

/// The request's id: the client's own `X-Request-Id` when Herma keeps it (exactly one, and
/// [`acceptable_request_id`]), else a fresh one, which replaces whatever the client sent.
fn request_id(headers: &mut HeaderMap, ids: &SequentialIds) -> HeaderValue {
    let mut given = headers.get_all(&REQUEST_ID).iter();
    if let (Some(only), None) = (given.next(), given.next())
        && acceptable_request_id(only)
    {
        return only.clone();
    }
    let fresh = ids.next();
    headers.insert(REQUEST_ID, fresh.clone());
    fresh
}

/// Request ids unique to this process and run: a random prefix drawn at start and a counter
/// (no system call per request, unlike a random UUID each time).
#[derive(Clone)]
struct SequentialIds {
    prefix: u32,
    next: std::sync::Arc<AtomicU64>,
}

impl SequentialIds {
    /// `{prefix:08x}-{n:x}`, written straight into the header's bytes (no formatter).
    fn next(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // 8 hex digits, a dash and at most 16 more.
        let mut id = [0u8; 25];
        let mut len = push_hex(&mut id, 0, u64::from(self.prefix), 8);
        if let Some(dash) = id.get_mut(len) {
            *dash = b'-';
            len += 1;
        }
        let len = push_hex(&mut id, len, n, 1);
        HeaderValue::from_bytes(id.get(..len).unwrap_or_default())
            .unwrap_or_else(|_| HeaderValue::from_static("-"))
    }
}

/// Writes `value` in lowercase hex, at least `width` (at most 16) digits, zero-padded, into
/// `out` from `at`; returns the end. Digits that would not fit are left out.
fn push_hex(out: &mut [u8], at: usize, value: u64, width: usize) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = (64 - value.leading_zeros() as usize)
        .div_ceil(4)
        .max(width)
        .min(16);
    let mut end = at;
    for i in (0..digits).rev() {
        let nibble = ((value >> (4 * i)) & 0xf) as usize;
        if let Some(slot) = out.get_mut(end) {
            *slot = DIGITS[nibble];
            end += 1;
        }
    }
    end
}

/// Wraps `router` in the one middleware around every route.
pub fn apply(router: Router, state: AppState) -> Router {
    let mut seed = [0u8; 4];
    let _ = state.app.random.fill(&mut seed);
    let ids = SequentialIds {
        prefix: u32::from_le_bytes(seed),
        next: std::sync::Arc::new(AtomicU64::new(1)),
    };
    router.layer(middleware::from_fn_with_state(Edge { state, ids }, edge))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_request_ids_are_the_prefix_and_the_counter_in_hex() {
        for (prefix, n) in [
            (0u32, 1u64),
            (0x1a2b, 0xff),
            (u32::MAX, 0x10),
            (0xdead_beef, u64::MAX),
            (7, 0x0123_4567_89ab_cdef),
        ] {
            let ids = SequentialIds {
                prefix,
                next: std::sync::Arc::new(AtomicU64::new(n)),
            };
            let id = ids.next();
            assert_eq!(
                id.to_str().ok(),
                Some(format!("{prefix:08x}-{n:x}").as_str())
            );
            assert!(acceptable_request_id(&id), "{id:?}");
        }
    }
}
