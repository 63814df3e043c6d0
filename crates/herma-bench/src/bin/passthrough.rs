//! A bare pass-through proxy on Herma's own HTTP stack (axum server, herma-providers client):
//! no gate, no rules, no receipts. The load harness's baseline for "what any proxy costs".
//!
//! `herma-passthrough --bind 127.0.0.1:0 --upstream http://127.0.0.1:PORT`

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use herma_providers::{HttpUpstream, Upstream, UpstreamRequest};

/// The allocator the `herma` binary uses, so the baseline is the same stack.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone)]
struct Proxy {
    upstream: HttpUpstream,
    base: String,
}

async fn forward(
    State(proxy): State<Proxy>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let url = format!(
        "{}{}",
        proxy.base,
        uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let mut headers = headers;
    for name in ["host", "content-length", "connection", "transfer-encoding"] {
        headers.remove(name);
    }
    match proxy
        .upstream
        .send(UpstreamRequest {
            method: method.to_string(),
            url,
            headers,
            body,
        })
        .await
    {
        Ok(up) => {
            let mut response = Response::new(Body::from_stream(up.body));
            *response.status_mut() =
                StatusCode::from_u16(up.status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut headers = up.headers;
            for name in ["content-length", "transfer-encoding", "connection"] {
                headers.remove(name);
            }
            *response.headers_mut() = headers;
            response
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let bind = arg("--bind").unwrap_or_else(|| "127.0.0.1:0".into());
    let base = arg("--upstream").ok_or("--upstream URL is required")?;
    let upstream = HttpUpstream::new(
        Duration::from_secs(10),
        Duration::from_secs(600),
        Duration::from_secs(300),
    )
    .map_err(|e| e.to_string())?;
    let app = Router::new()
        .fallback(forward)
        .with_state(Proxy { upstream, base });
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });

    eprintln!("passthrough listening on http://{addr}");
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}
