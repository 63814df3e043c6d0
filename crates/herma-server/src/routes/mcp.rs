//! `POST /mcp`: Herma as an MCP server (stateless JSON-RPC 2.0, H14).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use herma_app::mcp::{McpReply, McpRequestFacts, codes};
use herma_core::{Problem, ProblemCode};

use crate::AppState;
use crate::error::{ApiError, rpc_status_of};
use crate::extract::{GateRead, read_body};
use crate::routes::public::{PeerAddr, base_url, client_address};

/// One MCP message (JSON-RPC 2.0). Without a key: `herma_preview` and `herma_discovery`; with a
/// key: also the caller's dry run and read-only provisions, context entries and insights.
/// Notifications are accepted with 202 and no body; tool failures are results with `isError`.
#[utoipa::path(post, path = "/mcp", tag = "public",
    request_body(content = serde_json::Value, description = "A JSON-RPC 2.0 request or notification", content_type = "application/json",
        example = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
    params(("MCP-Protocol-Version" = Option<String>, Header, description = "The negotiated MCP revision")),
    responses(
        (status = 200, description = "A JSON-RPC response (result or error)", content_type = "application/json"),
        (status = 202, description = "A notification, accepted"),
        (status = 400, description = "Malformed JSON-RPC, an unsupported protocol version or mismatched headers", content_type = "application/json"),
        (status = 413, description = "The body is larger than HERMA_MAX_BODY_BYTES", body = crate::openapi::ProblemBody, content_type = "application/problem+json"),
        (status = 401, description = "The key given is not valid", content_type = "application/json"),
        (status = 404, description = "Unknown method", content_type = "application/json")))]
pub async fn mcp(
    State(state): State<AppState>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // A browser page of another origin (a CSRF form, a DNS-rebinding page) never reaches the
    // public tools; a body must say it is JSON; credentials and the harness are sent once.
    if let Some(origin) = headers.get(header::ORIGIN)
        && !origin_allowed(
            origin.to_str().unwrap_or(""),
            state.app.settings.public_url.as_deref(),
        )
    {
        return ApiError(Problem::new(
            ProblemCode::BrowserNavigationRefused,
            "MCP refuses requests from another origin's page; set HERMA_PUBLIC_URL to Herma's own origin",
        ))
        .into_response();
    }
    if !crate::extract::is_json(&headers) {
        return ApiError(Problem::new(
            ProblemCode::UnsupportedMediaType,
            "MCP messages must be sent as Content-Type: application/json",
        ))
        .into_response();
    }
    let gate = GateRead::of(&headers);
    if let Err(problem) = gate.repeated() {
        return ApiError(problem).into_response();
    }
    // A body over a limit (size, read time, memory budget) is refused at the HTTP layer like on
    // every other route (problem+json); one that breaks off is a malformed JSON-RPC message.
    let bytes = match read_body(body, state.body_limit()).await {
        Ok(bytes) => bytes,
        Err(ApiError(problem)) if problem.code != ProblemCode::InvalidJson => {
            return ApiError(problem).into_response();
        }
        Err(_) => {
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": codes::INVALID_REQUEST, "message": "the body could not be read"}});
            return json_reply(rpc_status_of(Some(codes::INVALID_REQUEST)), &reply);
        }
    };
    let address = client_address(&state, &headers, peer);
    let base = base_url(&state, &headers);
    let facts = McpRequestFacts {
        gate: gate.request,
        protocol_version: headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok()),
        address: &address,
        base_url: &base,
    };
    let message = match state.app.mcp(&bytes, &facts).await {
        McpReply::Accepted => return StatusCode::ACCEPTED.into_response(),
        McpReply::Message(message) => message,
    };
    let code = message
        .pointer("/error/code")
        .and_then(serde_json::Value::as_i64);
    json_reply(rpc_status_of(code), &message)
}

/// Whether a page of `origin` may call MCP: Herma's own public origin, or a loopback origin
/// (the playground and local tools). A DNS-rebinding page has neither: its name is not loopback.
fn origin_allowed(origin: &str, public_url: Option<&str>) -> bool {
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    if let Some(public) = public_url {
        let public = public.to_ascii_lowercase();
        let own = public
            .find("://")
            .map(|at| at + 3)
            .and_then(|start| public[start..].find('/').map(|end| &public[..start + end]))
            .unwrap_or(&public);
        if origin == own {
            return true;
        }
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if rest.starts_with('[') {
        rest.split_inclusive(']').next().unwrap_or(rest)
    } else {
        rest.split(':').next().unwrap_or(rest)
    };
    let port_ok = rest[host.len()..].is_empty()
        || rest[host.len()..]
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok && matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

fn json_reply(status: StatusCode, message: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(message).unwrap_or_default(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::origin_allowed;

    #[test]
    fn only_loopback_and_the_public_origin_may_call_mcp_from_a_page() {
        for (origin, public) in [
            ("http://localhost:7730", None),
            ("http://127.0.0.1:7730", None),
            ("http://[::1]:7730", None),
            ("http://LOCALHOST", None),
            (
                "https://herma.example.com",
                Some("https://herma.example.com"),
            ),
            (
                "https://herma.example.com",
                Some("https://herma.example.com/base"),
            ),
        ] {
            assert!(origin_allowed(origin, public), "{origin} {public:?}");
        }
        for (origin, public) in [
            ("http://evil.example", None),
            ("http://localhost.evil.example:7730", None),
            ("http://127.0.0.1.nip.io:7730", None),
            ("null", None),
            ("http://localhost:x", None),
            (
                "https://other.example.com",
                Some("https://herma.example.com"),
            ),
            (
                "http://herma.example.com",
                Some("https://herma.example.com"),
            ),
        ] {
            assert!(!origin_allowed(origin, public), "{origin} {public:?}");
        }
    }
}
