//! Public routes, no key needed: the preview (H14), discovery documents, robots and the icon.

use std::net::SocketAddr;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use herma_app::dry_run::{DryRunReport, DryRunRequest};
use herma_core::json;

use crate::AppState;
use crate::conn::Peer;
use crate::error::ApiResult;
use crate::extract::read_json;

/// The connection's peer address, when the server was started with connect info.
pub struct PeerAddr(pub Option<SocketAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for PeerAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self(parts.extensions.get::<Peer>().map(|Peer(addr)| *addr)))
    }
}

/// The address a public request comes from: behind a configured edge (HERMA_EDGE_SECRET), the
/// client address the edge reports; otherwise the connection's peer.
pub fn client_address(state: &AppState, headers: &HeaderMap, peer: Option<SocketAddr>) -> String {
    if state.app.settings.edge_secret.is_some() {
        let forwarded = headers
            .get("cf-connecting-ip")
            .or_else(|| headers.get("x-forwarded-for"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty());
        if let Some(address) = forwarded {
            return address.to_owned();
        }
    }
    peer.map(|p| p.ip().to_string())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The URL clients reach this Herma at: HERMA_PUBLIC_URL, else `http://<Host>`.
pub fn base_url(state: &AppState, _headers: &HeaderMap) -> String {
    if let Some(url) = &state.app.settings.public_url {
        return url.clone();
    }
    // The request's Host is the client's word: echoing it into documents that say where to send
    // keys would let a shared cache or a hostile resolver point agents elsewhere. Without
    // HERMA_PUBLIC_URL the documents name the address Herma listens on (loopback for a
    // wildcard bind: reach Herma from elsewhere through HERMA_PUBLIC_URL).
    let local = state.local.unwrap_or(state.app.settings.bind);
    let ip = match local.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => std::net::IpAddr::from([127, 0, 0, 1]),
        ip if ip.is_unspecified() => std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", std::net::SocketAddr::new(ip, local.port()))
}

/// Evaluate a request against Herma's built-in starter rules only: matches, the exact shim or
/// direct answer, `persisted: false`. No key, no upstream; limited per client address.
#[utoipa::path(post, path = "/api/preview", tag = "public",
    request_body(content = DryRunRequest,
        example = json!({"protocol": "chat_completions", "body": {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "/herma"}]}})),
    responses((status = 200, body = DryRunReport), (status = 422, body = crate::openapi::ProblemBody),
        (status = 429, description = "Too many previews from this address", body = crate::openapi::ProblemBody)))]
pub async fn preview(
    State(state): State<AppState>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<DryRunReport>> {
    let address = client_address(&state, &headers, peer);
    state.app.preview_limit.check(&address)?;
    let request: DryRunRequest =
        json::decode(read_json(&headers, body, state.body_limit()).await?)?;
    Ok(Json(state.app.preview(request).await?))
}

/// Routes, protocol versions and enabled features (e.g. whether conversations are on).
#[utoipa::path(get, path = "/connect.json", tag = "public", responses((status = 200, description = "The connect document", content_type = "application/json")))]
pub async fn connect(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    (
        [DISCOVERY_CACHING],
        Json(state.app.connect_document(&base_url(&state, &headers))),
    )
}

/// Discovery documents are the same for every request and may change with the configuration:
/// caches keep them but revalidate each use.
const DISCOVERY_CACHING: (header::HeaderName, &str) = (header::CACHE_CONTROL, "no-cache");

/// What Herma is and where to read more, for language models (llmstxt.org).
#[utoipa::path(get, path = "/llms.txt", tag = "public", responses((status = 200, description = "Markdown", content_type = "text/markdown")))]
pub async fn llms(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/markdown; charset=utf-8"),
            DISCOVERY_CACHING,
        ],
        state.app.llms_txt(&base_url(&state, &headers)),
    )
}

/// The same with the full documentation inlined.
#[utoipa::path(get, path = "/llms-full.txt", tag = "public", responses((status = 200, description = "Markdown", content_type = "text/markdown")))]
pub async fn llms_full(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/markdown; charset=utf-8"),
            DISCOVERY_CACHING,
        ],
        state.app.llms_full_txt(&base_url(&state, &headers)),
    )
}

/// Herma described for agents that discover services by card; its agent interface is MCP.
#[utoipa::path(get, path = "/.well-known/agent-card.json", tag = "public", responses((status = 200, description = "The agent card", content_type = "application/json")))]
pub async fn agent_card(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    (
        [DISCOVERY_CACHING],
        Json(state.app.agent_card(&base_url(&state, &headers))),
    )
}

/// Crawlers may read the pages and discovery documents, not the API.
#[utoipa::path(get, path = "/robots.txt", tag = "public", responses((status = 200, description = "robots.txt", content_type = "text/plain")))]
pub async fn robots(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let body = format!(
        "User-agent: *\nAllow: /\nDisallow: /v1/\nDisallow: /api/\nDisallow: /mcp\n\nSitemap: {}/llms.txt\n",
        base_url(&state, &headers)
    );
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body)
}

/// Herma's mark.
#[utoipa::path(get, path = "/favicon.svg", tag = "public", responses((status = 200, description = "SVG", content_type = "image/svg+xml")))]
pub async fn favicon() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        include_str!("../../assets/favicon.svg"),
    )
}
