//! A local Tessera-shaped server (`docs/tessera.md`): `GET /v1/records?limit=&after=` pages
//! the records it holds (the cursor is the index of the next record), `GET /v1/blobs/<sha256>`
//! serves blob content. Requests must carry `Authorization: Bearer <token>`. Tests change what
//! it publishes between syncs, and can make it redirect or fail a page.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

pub const TOKEN: &str = "tessera-test-token-0123456789";

#[derive(Default)]
struct Published {
    records: Vec<Value>,
    blobs: HashMap<String, Vec<u8>>,
    /// Pages at or after this cursor fail with 503 (a stalled or broken Tessera).
    fail_from: Option<usize>,
    redirect: bool,
    /// Pages are answered only after this long (a stalled Tessera).
    stall: Option<std::time::Duration>,
    /// Pages hold every record, whatever `limit` says (an oversized page).
    ignore_limit: bool,
    pages_served: usize,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Published>>);

pub struct MockTessera {
    pub addr: SocketAddr,
    shared: Shared,
    _server: tokio::task::JoinHandle<()>,
}

impl MockTessera {
    pub async fn start() -> Self {
        let shared = Shared::default();
        let app = Router::new()
            .route("/v1/records", get(records))
            .route("/v1/blobs/{digest}", get(blob))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind mock tessera");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            shared,
            _server: server,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Publishes exactly these records from now on.
    pub fn publish(&self, records: Vec<Value>) {
        self.shared.0.lock().expect("lock").records = records;
    }

    /// Serves `content` at its SHA-256.
    pub fn put_blob(&self, digest: &str, content: &[u8]) {
        self.shared
            .0
            .lock()
            .expect("lock")
            .blobs
            .insert(digest.to_owned(), content.to_vec());
    }

    /// Pages starting at or after record `index` answer 503.
    pub fn fail_from(&self, index: Option<usize>) {
        self.shared.0.lock().expect("lock").fail_from = index;
    }

    pub fn redirect(&self, on: bool) {
        self.shared.0.lock().expect("lock").redirect = on;
    }

    pub fn stall(&self, for_: Option<std::time::Duration>) {
        self.shared.0.lock().expect("lock").stall = for_;
    }

    pub fn ignore_limit(&self, on: bool) {
        self.shared.0.lock().expect("lock").ignore_limit = on;
    }

    pub fn pages_served(&self) -> usize {
        self.shared.0.lock().expect("lock").pages_served
    }
}

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes())
}

async fn records(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if !authorized(&headers) {
        return (StatusCode::UNAUTHORIZED, "bad token").into_response();
    }
    let stall = shared.0.lock().expect("lock").stall;
    if let Some(stall) = stall {
        tokio::time::sleep(stall).await;
    }
    let mut published = shared.0.lock().expect("lock");
    if published.redirect {
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, "http://127.0.0.1:9/")],
        )
            .into_response();
    }
    let limit: usize = if published.ignore_limit {
        published.records.len().max(1)
    } else {
        query
            .get("limit")
            .and_then(|l| l.parse().ok())
            .unwrap_or(100)
            .clamp(1, 500)
    };
    let start: usize = query.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    if published.fail_from.is_some_and(|f| start >= f) {
        return (StatusCode::SERVICE_UNAVAILABLE, "try later").into_response();
    }
    published.pages_served += 1;
    let end = (start + limit).min(published.records.len());
    let page: Vec<Value> = published
        .records
        .get(start..end)
        .unwrap_or_default()
        .to_vec();
    let next = (end < published.records.len()).then(|| end.to_string());
    axum::Json(json!({"records": page, "next": next})).into_response()
}

async fn blob(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(digest): Path<String>,
) -> Response {
    if !authorized(&headers) {
        return (StatusCode::UNAUTHORIZED, "bad token").into_response();
    }
    match shared.0.lock().expect("lock").blobs.get(&digest) {
        Some(content) => content.clone().into_response(),
        None => (StatusCode::NOT_FOUND, "no such blob").into_response(),
    }
}
