//! Herma's HTTP API end to end: a real server on an ephemeral port, real stores.

// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admin;
mod api_fuzz;
mod bad_input;
mod conversation_plans;
mod conversations;
mod docs;
mod gate;
mod governance;
mod handshake;
#[cfg(unix)]
mod harness;
mod layout;
mod limits;
mod mcp;
mod memory;
mod metrics;

mod openapi;
mod pages;
mod proxy;
mod public;

mod records;
mod retired;
mod sdk;
mod tessera;
mod tiers;
mod worker;

use herma_test_support::TestApp;
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// One request: method, path, optional key, harness header and JSON body.
pub struct Req<'a> {
    method: Method,
    path: String,
    key: Option<&'a str>,
    harness: Option<&'a str>,
    body: Option<Value>,
    headers: Vec<(&'a str, String)>,
}

pub fn req<'a>(method: Method, path: impl Into<String>) -> Req<'a> {
    Req {
        method,
        path: path.into(),
        key: None,
        harness: None,
        body: None,
        headers: Vec::new(),
    }
}

impl<'a> Req<'a> {
    pub fn key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }
    pub fn harness(mut self, harness: &'a str) -> Self {
        self.harness = Some(harness);
        self
    }
    pub fn json(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }
    pub fn header(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Sends and returns the status, the headers and the body as JSON (Null when empty).
    pub async fn send(self, app: &TestApp) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut request = app.client.request(self.method, app.url(&self.path));
        if let Some(key) = self.key {
            request = request.bearer_auth(key);
        }
        if let Some(harness) = self.harness {
            request = request.header("X-Herma-Harness", harness);
        }
        for (name, value) in self.headers {
            request = request.header(name, value);
        }
        if let Some(body) = self.body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body");
        assert_strict_json(&headers, &bytes);
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        (status, headers, body)
    }
}

/// Every JSON body Herma serves must parse under Herma's own strict reader (no duplicate keys,
/// nesting within bounds), so clients as strict as Herma can read it.
pub fn assert_strict_json(headers: &reqwest::header::HeaderMap, bytes: &[u8]) {
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json") || t.contains("+json"));
    if json && let Err(problem) = herma_core::json::parse_strict(bytes) {
        panic!(
            "a JSON body Herma served does not parse strictly: {} in {}",
            problem.detail,
            String::from_utf8_lossy(bytes)
        );
    }
}

/// Asserts a problem+json response with `status` and `code`.
pub fn assert_problem(
    got: &(StatusCode, reqwest::header::HeaderMap, Value),
    status: StatusCode,
    code: &str,
) {
    let (s, headers, body) = got;
    assert_eq!(*s, status, "body: {body}");
    assert_eq!(body["code"], code, "body: {body}");
    assert_eq!(body["status"], status.as_u16());
    assert_eq!(body["type"], format!("https://herma.dev/problems/{code}"));
    assert_eq!(headers["content-type"], "application/problem+json");
}

/// What a connection failure must never tell a caller: the socket's own words map local ports.
pub fn assert_no_socket_details(body: &str, port: u16) {
    for leak in [
        "os error",
        "connection refused",
        "tcp connect",
        "dns error",
        "certificate",
        &port.to_string(),
    ] {
        assert!(
            !body.to_ascii_lowercase().contains(leak),
            "`{leak}` reached the client: {body}"
        );
    }
}

/// Creates a record through the configure API (harness `claude-code`), asserting 201.
pub async fn configure(app: &TestApp, key: &str, path: &str, body: Value) {
    let got = req(Method::POST, path)
        .key(key)
        .harness("claude-code")
        .json(body)
        .send(app)
        .await;
    assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
}

/// The dry-run report of a Chat Completions request whose latest user turn is `text`.
pub async fn dry_run(app: &TestApp, key: &str, text: &str) -> Value {
    let got = req(Method::POST, "/v1/dry-run")
        .key(key)
        .json(serde_json::json!({"protocol": "chat_completions", "body": {"model": "gpt-5-mini", "messages": [{"role": "user", "content": text}]}}))
        .send(app)
        .await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    got.2
}

/// A receipt as its caller reads it, after every queued receipt is written.
pub async fn receipt(app: &TestApp, key: &str, id: &str) -> Value {
    app.app.receipts.flush().await;
    let got = req(Method::GET, format!("/v1/receipts/{id}"))
        .key(key)
        .send(app)
        .await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    got.2
}
