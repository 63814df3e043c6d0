//! The Worker (`crates/herma-worker`) under `wrangler dev --local` answers like the native
//! server: the same router and services run in both, so the same requests get the same bytes.
//! `scripts/test` builds the Worker (`worker-build --release`) and names its directory in
//! `HERMA_TEST_WORKER_DIR` (default `crates/herma-worker`); wrangler runs it on loopback with no
//! network of its own.
//!
//! What differs by design is left out of the comparison and said where it is: `/healthz` names
//! the store, and a key's, a receipt's or a direct answer's message id is random.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use herma_test_support::mock_upstream::MockUpstream;
use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::Method;
use serde_json::{Value, json};

const ADMIN: &str = "bootstrap-token-0123456789abcdef";

/// The settings both runtimes get.
fn settings(mock: &str) -> Vec<(&'static str, String)> {
    vec![
        ("HERMA_PUBLIC_URL", "http://herma.test".to_owned()),
        ("HERMA_ADMIN_TOKEN", ADMIN.to_owned()),
        ("HERMA_UPSTREAM_BASE_URL", mock.to_owned()),
        ("HERMA_UPSTREAM_API_KEY", "sk-operator".to_owned()),
    ]
}

/// `wrangler dev --local` serving the built Worker, stopped when dropped.
struct Wrangler {
    child: Child,
    base: String,
}

impl Drop for Wrangler {
    fn drop(&mut self) {
        // wrangler runs workerd as its child: stop the whole process group.
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn start_worker(vars: &[(&str, String)]) -> Wrangler {
    #[allow(clippy::disallowed_methods)] // the test command names the built Worker
    let dir = std::env::var("HERMA_TEST_WORKER_DIR").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../herma-worker"),
        PathBuf::from,
    );
    assert!(
        dir.join("build/index.js").exists(),
        "the Worker is not built: run scripts/test, or `worker-build --release` in {}",
        dir.display()
    );
    let port = free_port();
    let mut cmd = Command::new(dir.join("node_modules/.bin/wrangler"));
    cmd.current_dir(&dir)
        .process_group(0)
        .args(["dev", "--local", "--ip", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .arg("--inspector-port")
        .arg(free_port().to_string())
        .args([
            "--show-interactive-dev-session=false",
            "--log-level",
            "warn",
        ])
        .arg("--persist-to")
        .arg(tempfile::tempdir().expect("tempdir").keep())
        .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
        .env("WRANGLER_SEND_METRICS", "false")
        .env("WRANGLER_HIDE_BANNER", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (name, value) in vars {
        cmd.arg("--var").arg(format!("{name}:{value}"));
    }
    let child = cmd.spawn().expect("wrangler starts");
    let worker = Wrangler {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    // Ready when it answers; workerd's first start compiles the module (seconds).
    let client = reqwest::Client::new();
    for _ in 0..240 {
        // The Worker's own answer (its store is `memory`), not another server's on that port.
        if let Ok(r) = client.get(format!("{}/healthz", worker.base)).send().await
            && r.status().is_success()
        {
            let health: Value = r.json().await.unwrap_or_default();
            assert_eq!(
                health["database"], "memory",
                "another server answers on the Worker's port {port}"
            );
            return worker;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("wrangler dev did not answer /healthz within 60 s");
}

/// A mock upstream, and a native server and the Worker with the same settings, pointed at it.
async fn side_by_side() -> (MockUpstream, TestApp, Wrangler) {
    let mock = MockUpstream::start().await;
    let vars = settings(&mock.url());
    let overrides: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let native = spawn_app(Backend::Sqlite, &overrides).await;
    let worker = start_worker(&vars).await;
    eprintln!(
        "native at {}, the Worker at {}",
        native.url(""),
        worker.base
    );
    (mock, native, worker)
}

/// One answer, as the comparison sees it.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: String,
}

async fn call(
    base: &str,
    method: Method,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> (Answer, reqwest::header::HeaderMap) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client");
    let mut request = client.request(method, format!("{base}{path}"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("an answer");
    let headers = response.headers().clone();
    let answer = Answer {
        status: response.status().as_u16(),
        content_type: headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: response.text().await.expect("a body"),
    };
    (answer, headers)
}

/// `answer` with each message id (`msg_` and its hex digits) written as `msg_…`.
fn without_message_ids(mut answer: Answer) -> Answer {
    let mut out = String::with_capacity(answer.body.len());
    let mut rest = answer.body.as_str();
    while let Some(at) = rest.find("msg_") {
        out.push_str(&rest[..at + 4]);
        rest = rest[at + 4..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push('…');
    }
    out.push_str(rest);
    answer.body = out;
    answer
}

/// `edge` is `home`, or the first place they differ is shown.
fn assert_same(edge: &Answer, home: &Answer, what: &str) {
    assert_eq!(edge.status, home.status, "{what}: status ({})", edge.body);
    assert_eq!(edge.content_type, home.content_type, "{what}: content type");
    if edge.body != home.body {
        let at = edge
            .body
            .bytes()
            .zip(home.body.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(edge.body.len().min(home.body.len()));
        let around = |s: &str| {
            let start = s.floor_char_boundary(at.saturating_sub(120));
            let end = s.ceil_char_boundary((at + 120).min(s.len()));
            s[start..end].to_owned()
        };
        panic!(
            "{what}: the bodies differ at byte {at}\n  edge: …{}…\n  home: …{}…",
            around(&edge.body),
            around(&home.body)
        );
    }
}

/// The security headers every answer carries, on both runtimes.
const SECURITY_HEADERS: [&str; 4] = [
    "strict-transport-security",
    "content-security-policy",
    "referrer-policy",
    "x-content-type-options",
];

#[tokio::test]
async fn h14_the_worker_answers_discovery_preview_and_refusals_byte_for_byte_like_the_native_server()
 {
    let (_mock, native, worker) = side_by_side().await;
    let native_base = native.url("");

    let preview = |text: &str| {
        json!({"protocol": "messages", "body": {"model": "claude-test", "max_tokens": 64,
            "messages": [{"role": "user", "content": text}]}})
    };
    let cases: Vec<(Method, &str, Option<Value>)> = vec![
        (Method::GET, "/connect.json", None),
        (Method::GET, "/llms.txt", None),
        (Method::GET, "/llms-full.txt", None),
        (Method::GET, "/.well-known/agent-card.json", None),
        (Method::GET, "/robots.txt", None),
        (Method::GET, "/openapi.json", None),
        (Method::GET, "/no/such/route", None),
        (Method::DELETE, "/connect.json", None),
        (Method::GET, "/v1/whoami", None),
        (Method::GET, "/v1/admin/keys", None),
        (Method::POST, "/api/preview", Some(preview("/herma help"))),
        (
            Method::POST,
            "/api/preview",
            Some(preview("how do I force push safely?")),
        ),
        (
            Method::POST,
            "/api/preview",
            Some(json!({"protocol": "messages"})),
        ),
        (
            Method::POST,
            "/v1/messages",
            Some(json!({"model": "m", "messages": []})),
        ),
    ];
    for (method, path, body) in cases {
        let (at_home, home_headers) =
            call(&native_base, method.clone(), path, None, body.as_ref()).await;
        let (at_edge, edge_headers) =
            call(&worker.base, method.clone(), path, None, body.as_ref()).await;
        assert_same(&at_edge, &at_home, &format!("{method} {path}"));
        for name in SECURITY_HEADERS {
            assert_eq!(
                edge_headers.get(name),
                home_headers.get(name),
                "{method} {path}: {name}"
            );
        }
    }
    // By design: the health answer names the store (the Worker's first increment keeps
    // records in the isolate's memory).
    let (health, _) = call(&worker.base, Method::GET, "/healthz", None, None).await;
    let health: Value = serde_json::from_str(&health.body).expect("json");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["database"], "memory");
}

async fn route_key(base: &str) -> String {
    let (issued, _) = call(
        base,
        Method::POST,
        "/v1/admin/keys",
        Some(ADMIN),
        Some(&json!({"scopes": ["route"], "label": "parity"})),
    )
    .await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let issued: Value = serde_json::from_str(&issued.body).expect("json");
    issued["key"].as_str().expect("a key").to_owned()
}

/// The receipt of `id`, once the writer has stored it.
async fn stored_receipt(base: &str, key: &str, id: &str) -> Value {
    let mut last = None;
    for _ in 0..100 {
        let (got, _) = call(
            base,
            Method::GET,
            &format!("/v1/receipts/{id}"),
            Some(key),
            None,
        )
        .await;
        if got.status == 200 {
            return serde_json::from_str(&got.body).expect("json");
        }
        last = Some(got);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the receipt {id} was not stored at {base}: {last:?}");
}

#[tokio::test]
async fn h10_the_worker_forwards_json_and_sse_and_answers_directly_like_the_native_server() {
    let (mock, native, worker) = side_by_side().await;
    let native_base = native.url("");
    let home_key = route_key(&native_base).await;
    let edge_key = route_key(&worker.base).await;

    let message = |text: &str, stream: bool| {
        json!({"model": "claude-test", "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": text}]})
    };
    let cases = [
        ("forwarded JSON", message("hello there", false)),
        ("forwarded SSE", message("hello there", true)),
        ("direct answer, JSON", message("/herma help", false)),
        ("direct answer, SSE", message("/herma help", true)),
    ];
    for (what, body) in cases {
        let before = mock.requests().len();
        let (at_home, home_headers) = call(
            &native_base,
            Method::POST,
            "/v1/messages",
            Some(&home_key),
            Some(&body),
        )
        .await;
        let home_calls = mock.requests().len() - before;
        let (at_edge, edge_headers) = call(
            &worker.base,
            Method::POST,
            "/v1/messages",
            Some(&edge_key),
            Some(&body),
        )
        .await;
        let edge_calls = mock.requests().len() - before - home_calls;
        assert_eq!(at_home.status, 200, "{what}: {}", at_home.body);
        // A direct answer's message id is random on each runtime.
        let (at_home, at_edge) = (without_message_ids(at_home), without_message_ids(at_edge));
        assert_same(&at_edge, &at_home, what);
        assert_eq!(edge_calls, home_calls, "{what}: upstream calls");
        // Each runtime keeps its own receipt of the exchange, with the same decision.
        let receipt_of = |headers: &reqwest::header::HeaderMap| {
            headers["x-herma-receipt"]
                .to_str()
                .expect("text")
                .to_owned()
        };
        let home = stored_receipt(&native_base, &home_key, &receipt_of(&home_headers)).await;
        let edge = stored_receipt(&worker.base, &edge_key, &receipt_of(&edge_headers)).await;
        for field in [
            "action",
            "protocol",
            "model",
            "matched",
            "upstream_status",
            "usage",
            "stream_end",
        ] {
            assert_eq!(edge[field], home[field], "{what}: receipt {field}");
        }
    }
    // The operator's key went upstream from both; the caller's hmk_ key from neither.
    for recorded in mock.requests() {
        let sent = format!("{:?}", recorded.headers);
        assert!(!sent.contains("hmk_"), "a caller key reached the upstream");
    }
}
