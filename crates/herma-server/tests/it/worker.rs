//! The Worker (`crates/herma-worker`) under `wrangler dev --local` answers like the native
//! server: the same router and services run in both, so the same requests get the same bytes.
//! `scripts/test` builds the Worker (`worker-build --release`) and names its directory in
//! `HERMA_TEST_WORKER_DIR` (default `crates/herma-worker`); wrangler runs it on loopback with no
//! network of its own.
//!
//! The Worker keeps its records in D1 (`wrangler d1 migrations apply --local` first, then
//! `wrangler dev` on the same local state), the native server in SQLite: the same statements.
//!
//! What differs by design is left out of the comparison and said where it is: `/healthz` names
//! the store, a key's, a receipt's or a direct answer's message id is random, and a record's
//! times are each runtime's clock.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
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
    /// What `.wrangler/tmp` held before this one started.
    tmp_before: Vec<std::ffi::OsString>,
    stopped: bool,
}

/// Where `wrangler dev` writes each session's bundle (a copy of the wasm).
fn wrangler_tmp() -> PathBuf {
    worker_dir().join(".wrangler/tmp")
}

fn entries(dir: &Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
        .unwrap_or_default()
}

impl Drop for Wrangler {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Wrangler {
    /// Stops wrangler and the workerd it runs (again: a no-op, so the bundle of a wrangler
    /// started since is left alone).
    fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        // wrangler runs workerd as its child: stop the whole process group.
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A killed wrangler leaves its session's bundle behind (7 MB each): remove what this
        // one added (the Worker's tests run one at a time).
        let tmp = wrangler_tmp();
        for name in entries(&tmp) {
            if !self.tmp_before.contains(&name) {
                let _ = std::fs::remove_dir_all(tmp.join(name));
            }
        }
    }
}

/// A port for wrangler to listen on, below the kernel's ephemeral range (32768 and up here): a
/// port from `bind(…:0)`, closed and handed to wrangler, can be taken in between by any socket
/// the kernel numbers itself — workerd's own among them — and wrangler then exits with "Address
/// already in use". Ports here are numbered by this process only (no two alike, free when
/// picked); the Worker's tests run one at a time.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id() % SPAN;
    for _ in 0..SPAN {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(FIRST + offset).expect("below 65536");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {FIRST} and {}", FIRST + SPAN);
}

fn worker_dir() -> PathBuf {
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
    dir
}

/// A wrangler command in the Worker's directory, offline and on its own.
fn wrangler(dir: &Path) -> Command {
    let mut cmd = Command::new(dir.join("node_modules/.bin/wrangler"));
    cmd.current_dir(dir)
        // Its own dev registry: in the shared one (~/.config/.wrangler/registry) a Worker of
        // the same name starting or stopping — the previous test's — makes a running `wrangler
        // dev` reload, and a request in flight then never gets an answer.
        .env(
            "WRANGLER_REGISTRY_PATH",
            tempfile::tempdir().expect("tempdir").keep(),
        )
        .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
        .env("WRANGLER_SEND_METRICS", "false")
        .env("WRANGLER_HIDE_BANNER", "true")
        .stdin(Stdio::null());
    cmd
}

/// Local state for a Worker: its D1 database, migrated as a deploy is (`wrangler d1
/// migrations apply`), kept for the test's life.
fn migrated_state() -> PathBuf {
    let state = tempfile::tempdir().expect("tempdir").keep();
    migrate(&state);
    state
}

fn migrate(state: &Path) {
    let out = wrangler(&worker_dir())
        .args([
            "d1",
            "migrations",
            "apply",
            "herma",
            "--local",
            "--persist-to",
        ])
        .arg(state)
        .output()
        .expect("wrangler runs");
    assert!(
        out.status.success(),
        "wrangler d1 migrations apply failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wrangler dev --local` serving the built Worker on the local state `state`, once it answers
/// `/healthz` from D1.
async fn start_worker(vars: &[(&str, String)], state: &Path) -> Wrangler {
    start_workers(vars, state, &[]).await
}

/// [`start_worker`] with these wrangler configurations instead of the Worker's own (`wrangler
/// dev` runs every one it is given, the first answering).
async fn start_workers(vars: &[(&str, String)], state: &Path, configs: &[PathBuf]) -> Wrangler {
    let client = reqwest::Client::new();
    // A wrangler that exits before answering (its port taken after all) is started again on
    // new ports, at most twice.
    for _ in 0..3 {
        let mut worker = spawn_workers(vars, state, configs);
        let port = worker
            .base
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        // Ready when it answers; workerd's first start compiles the module (seconds).
        let mut exited = false;
        for _ in 0..240 {
            // The Worker's own answer (its store is D1), not another server's on that port.
            if let Ok(r) = client.get(format!("{}/healthz", worker.base)).send().await
                && r.status().is_success()
            {
                let health: Value = r.json().await.unwrap_or_default();
                assert_eq!(
                    health["database"], "d1",
                    "another server answers on the Worker's port {port}"
                );
                return worker;
            }
            if let Ok(Some(status)) = worker.child.try_wait() {
                eprintln!("wrangler dev exited ({status}) before answering on {port}: again");
                exited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if !exited {
            panic!("wrangler dev did not answer /healthz within 60 s");
        }
    }
    panic!("wrangler dev exited before answering /healthz three times");
}

/// `wrangler dev --local` starting the built Worker on the local state `state`.
fn spawn_worker(vars: &[(&str, String)], state: &Path) -> Wrangler {
    spawn_workers(vars, state, &[])
}

fn spawn_workers(vars: &[(&str, String)], state: &Path, configs: &[PathBuf]) -> Wrangler {
    let dir = worker_dir();
    let port = free_port();
    let mut cmd = wrangler(&dir);
    cmd.process_group(0).arg("dev");
    for config in configs {
        cmd.arg("--config").arg(config);
    }
    cmd.args(["--local", "--ip", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .arg("--inspector-port")
        .arg(free_port().to_string())
        .args([
            "--show-interactive-dev-session=false",
            // `/__scheduled` runs the Cron Trigger's handler.
            "--test-scheduled",
            "--log-level",
            "warn",
        ])
        .arg("--persist-to")
        .arg(state)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (name, value) in vars {
        cmd.arg("--var").arg(format!("{name}:{value}"));
    }
    let tmp_before = entries(&wrangler_tmp());
    let child = cmd.spawn().expect("wrangler starts");
    Wrangler {
        child,
        base: format!("http://127.0.0.1:{port}"),
        tmp_before,
        stopped: false,
    }
}

/// A mock upstream, and a native server and the Worker with the same settings, pointed at it.
async fn side_by_side() -> (MockUpstream, TestApp, Wrangler) {
    side_by_side_with(Vec::new(), &migrated_state()).await
}

/// [`side_by_side`] with `extra` settings for both, the Worker on the local state `state`.
async fn side_by_side_with(
    extra: Vec<(&'static str, String)>,
    state: &Path,
) -> (MockUpstream, TestApp, Wrangler) {
    let mock = MockUpstream::start().await;
    let mut vars = settings(&mock.url());
    vars.extend(extra);
    let overrides: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let native = spawn_app(Backend::Sqlite, &overrides).await;
    let worker = start_worker(&vars, state).await;
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
    call_as(base, method, path, key.map(|k| (k, None)), body).await
}

/// [`call`] with a key and, when its key names one, the harness it attests.
async fn call_as(
    base: &str,
    method: Method,
    path: &str,
    key: Option<(&str, Option<&str>)>,
    body: Option<&Value>,
) -> (Answer, reqwest::header::HeaderMap) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client");
    let mut request = client.request(method, format!("{base}{path}"));
    if let Some((key, harness)) = key {
        request = request.bearer_auth(key);
        if let Some(harness) = harness {
            request = request.header("X-Herma-Harness", harness);
        }
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

/// `answer` with what each runtime makes its own in a direct answer written as `…`: the random
/// ids of every protocol (`msg_`, `chatcmpl-`, `resp_`, and the items' `msg_`) and the clock's
/// `created` and `created_at` seconds, in JSON and in each SSE event alike.
fn without_answer_ids(answer: Answer) -> Answer {
    let mut answer = without_message_ids(answer);
    for prefix in ["chatcmpl-", "resp_", "\"created\":", "\"created_at\":"] {
        let mut out = String::with_capacity(answer.body.len());
        let mut rest = answer.body.as_str();
        while let Some(at) = rest.find(prefix) {
            out.push_str(&rest[..at + prefix.len()]);
            rest = rest[at + prefix.len()..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
            out.push('…');
        }
        out.push_str(rest);
        answer.body = out;
    }
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
async fn h14_the_worker_answers_discovery_preview_pages_mcp_and_refusals_byte_for_byte_like_the_native_server()
 {
    let (_mock, native, worker) = side_by_side().await;
    let native_base = native.url("");

    let preview = |text: &str| {
        json!({"protocol": "messages", "body": {"model": "claude-test", "max_tokens": 64,
            "messages": [{"role": "user", "content": text}]}})
    };
    let rpc = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let cases: Vec<(Method, &str, Option<Value>)> = vec![
        (Method::GET, "/connect.json", None),
        (Method::GET, "/llms.txt", None),
        (Method::GET, "/llms-full.txt", None),
        (Method::GET, "/.well-known/agent-card.json", None),
        (Method::GET, "/robots.txt", None),
        (Method::GET, "/", None),
        (Method::GET, "/docs", None),
        (Method::GET, "/preview", None),
        (Method::GET, "/assets/herma.css", None),
        (Method::GET, "/assets/playground.js", None),
        (
            Method::POST,
            "/mcp",
            Some(rpc(
                "initialize",
                json!({"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "parity", "version": "1"}}),
            )),
        ),
        (Method::POST, "/mcp", Some(rpc("tools/list", json!({})))),
        (
            Method::POST,
            "/mcp",
            Some(rpc(
                "tools/call",
                json!({"name": "herma_preview",
            "arguments": preview("how do I force push safely?")}),
            )),
        ),
        (
            Method::POST,
            "/mcp",
            Some(rpc("tools/frobnicate", json!({}))),
        ),
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
    // By design: the health answer names the store.
    let (health, _) = call(&worker.base, Method::GET, "/healthz", None, None).await;
    let health: Value = serde_json::from_str(&health.body).expect("json");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["database"], "d1");
}

async fn route_key(base: &str) -> String {
    issued_key(base, &["route"], None).await.0
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

/// A dry run of one Messages request whose user turn is `text`.
fn dry_run_of(text: &str) -> Value {
    json!({"protocol": "messages", "body": {"model": "m", "max_tokens": 8,
        "messages": [{"role": "user", "content": text}]}})
}

/// A key with `scopes` (for `harness`, when named), issued by `base`'s admin: the key and its
/// id.
async fn issued_key(base: &str, scopes: &[&str], harness: Option<&str>) -> (String, String) {
    let mut body = json!({"scopes": scopes, "label": "parity"});
    if let Some(harness) = harness {
        body["harness"] = json!(harness);
    }
    let (issued, _) = call(
        base,
        Method::POST,
        "/v1/admin/keys",
        Some(ADMIN),
        Some(&body),
    )
    .await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let issued: Value = serde_json::from_str(&issued.body).expect("json");
    let key = issued["key"].as_str().expect("a key").to_owned();
    let id = key[4..20].to_owned();
    (key, id)
}

/// `answer`'s body with `ids` written as their names, and each record's times (each runtime's
/// clock) and receipt ids (random) as `…`.
fn comparable(mut answer: Answer, ids: &[(&str, &str)]) -> Answer {
    fn without_times(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (name, v) in map.iter_mut() {
                    // Times, and receipt ids (random), differ by design.
                    let own = name.ends_with("_at")
                        || name.ends_with("_seen")
                        || name == "as_of"
                        || name == "receipt_id";
                    if own && (v.is_string() || v.is_number()) {
                        *v = json!("…");
                    } else {
                        without_times(v);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(without_times),
            _ => {}
        }
    }
    for (id, name) in ids {
        answer.body = answer.body.replace(id, name);
    }
    if let Ok(mut value) = serde_json::from_str::<Value>(&answer.body) {
        without_times(&mut value);
        answer.body = value.to_string();
    }
    answer
}

#[tokio::test]
async fn h11_the_worker_on_d1_keeps_callers_apart_locks_built_ins_and_compares_versions_like_the_native_server()
 {
    use herma_test_support::fixtures::{context_entry, provision};
    let state = migrated_state();
    let (mock, native, worker) = side_by_side_with(Vec::new(), &state).await;
    let native_base = native.url("");

    let scopes = ["route", "configure"];
    let (home_alice, home_alice_id) = issued_key(&native_base, &scopes, Some("claude-code")).await;
    let (home_bob, home_bob_id) = issued_key(&native_base, &scopes, Some("claude-code")).await;
    let (edge_alice, edge_alice_id) = issued_key(&worker.base, &scopes, Some("claude-code")).await;
    let (edge_bob, edge_bob_id) = issued_key(&worker.base, &scopes, Some("claude-code")).await;

    #[derive(Clone, Copy)]
    enum Who {
        Alice,
        Bob,
    }
    let versioned = |mut body: Value, version: u64| {
        body["expected_version"] = json!(version);
        body
    };
    let mut changed = provision("shared");
    changed["description"] = json!("changed");
    let steps: Vec<(u16, Who, Method, &str, Option<Value>)> = vec![
        (
            201,
            Who::Alice,
            Method::POST,
            "/v1/provisions",
            Some(provision("shared")),
        ),
        (
            409,
            Who::Alice,
            Method::POST,
            "/v1/provisions",
            Some(provision("shared")),
        ),
        (
            200,
            Who::Alice,
            Method::PUT,
            "/v1/provisions/shared",
            Some(versioned(changed.clone(), 1)),
        ),
        // A writer that read version 1 loses and learns the current version.
        (
            409,
            Who::Alice,
            Method::PUT,
            "/v1/provisions/shared",
            Some(versioned(provision("shared"), 1)),
        ),
        (200, Who::Alice, Method::GET, "/v1/provisions/shared", None),
        (404, Who::Bob, Method::GET, "/v1/provisions/shared", None),
        (
            404,
            Who::Bob,
            Method::PUT,
            "/v1/provisions/shared",
            Some(versioned(provision("shared"), 2)),
        ),
        (404, Who::Bob, Method::DELETE, "/v1/provisions/shared", None),
        (200, Who::Bob, Method::GET, "/v1/provisions", None),
        (
            201,
            Who::Alice,
            Method::POST,
            "/v1/context",
            Some(context_entry("deploy.checklist")),
        ),
        (200, Who::Alice, Method::GET, "/v1/context", None),
        (
            404,
            Who::Bob,
            Method::GET,
            "/v1/context/deploy.checklist",
            None,
        ),
        // The built-in lock.
        (
            403,
            Who::Alice,
            Method::PUT,
            "/v1/provisions/git.force-push",
            Some(versioned(provision("git.force-push"), 1)),
        ),
        (
            403,
            Who::Alice,
            Method::DELETE,
            "/v1/provisions/git.force-push",
            None,
        ),
        (
            200,
            Who::Alice,
            Method::GET,
            "/v1/provisions/git.force-push",
            None,
        ),
        (200, Who::Alice, Method::GET, "/v1/provisions", None),
        // Turns are off by default on both (and not served at the edge yet).
        (
            404,
            Who::Alice,
            Method::POST,
            "/v1/conversations/turn",
            Some(json!({
            "conversation_id": "c1", "request_id": "r1", "expected_version": 0,
            "message": "hello", "context_refs": ["deploy.checklist"], "provider": "meta"})),
        ),
        (
            200,
            Who::Alice,
            Method::GET,
            "/api/conversation-schema",
            None,
        ),
        // Stored rules fire for their own caller only.
        (
            200,
            Who::Alice,
            Method::POST,
            "/v1/dry-run",
            Some(dry_run_of("how do I deploy?")),
        ),
        (
            200,
            Who::Bob,
            Method::POST,
            "/v1/dry-run",
            Some(dry_run_of("how do I deploy?")),
        ),
    ];
    let ids = [
        (home_alice_id.as_str(), "ALICE"),
        (home_bob_id.as_str(), "BOB"),
        (edge_alice_id.as_str(), "ALICE"),
        (edge_bob_id.as_str(), "BOB"),
    ];
    let mut dry_runs = Vec::new();
    for (status, who, method, path, body) in steps {
        let (home_key, edge_key) = match who {
            Who::Alice => (&home_alice, &edge_alice),
            Who::Bob => (&home_bob, &edge_bob),
        };
        let what = format!("{method} {path}");
        let (home_key, edge_key) = (
            Some((home_key.as_str(), Some("claude-code"))),
            Some((edge_key.as_str(), Some("claude-code"))),
        );
        let (at_home, _) =
            call_as(&native_base, method.clone(), path, home_key, body.as_ref()).await;
        let (at_edge, _) = call_as(&worker.base, method, path, edge_key, body.as_ref()).await;
        assert_eq!(at_home.status, status, "{what}: {}", at_home.body);
        if path == "/v1/dry-run" {
            dry_runs.push(at_home.body.clone());
        }
        assert_same(
            &comparable(at_edge, &ids),
            &comparable(at_home, &ids),
            &what,
        );
    }
    // Alice's rule fires for Alice (her dry run names it) and not for Bob.
    assert!(dry_runs[0].contains("\"shared\""), "{}", dry_runs[0]);
    assert!(!dry_runs[1].contains("\"shared\""), "{}", dry_runs[1]);

    // D1 keeps what was written: a new Worker process on the same local state still knows
    // Alice's key and her record.
    drop(worker);
    let worker = start_worker(&settings(&mock.url()), &state).await;
    let (kept, _) = call(
        &worker.base,
        Method::GET,
        "/v1/provisions/shared",
        Some(&edge_alice),
        None,
    )
    .await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    let kept: Value = serde_json::from_str(&kept.body).expect("json");
    assert_eq!(
        (kept["version"].clone(), kept["description"].clone()),
        (json!(2), json!("changed"))
    );
}

/// Turn `n` of a Claude Code-like session: the request, then n-1 rounds of a tool call whose
/// result reports a type error.
fn session_turn(n: usize) -> Value {
    let mut messages = vec![json!({"role": "user",
        "content": "Please deploy the fix in src/deploy.rs using `Deployer::run`, see tessera://nouns/deploys"})];
    for i in 1..n {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use",
            "id": format!("toolu_{i}"), "name": "Bash", "input": {"command": "cargo build"}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": format!("toolu_{i}"), "is_error": true,
            "content": "error[E0308]: mismatched types\n --> src/deploy.rs:7:9"}]}));
    }
    json!({"model": "claude-test", "max_tokens": 512, "messages": messages})
}

#[tokio::test]
async fn h13_the_worker_on_d1_remembers_entities_and_charges_retries_like_the_native_server() {
    let (_mock, native, worker) = side_by_side().await;
    let native_base = native.url("");
    let scopes = ["route", "configure"];
    let (home_key, home_id) = issued_key(&native_base, &scopes, Some("claude-code")).await;
    let (edge_key, edge_id) = issued_key(&worker.base, &scopes, Some("claude-code")).await;
    let client = reqwest::Client::new();
    for (base, key) in [(&native_base, &home_key), (&worker.base, &edge_key)] {
        for (path, body) in [
            (
                "/v1/context",
                json!({"id": "deploy.checklist", "kind": "verb",
                "schema_or_body": "Run the migrations first."}),
            ),
            (
                "/v1/provisions",
                json!({"id": "deploy", "action": "shim_context",
                "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist"]}),
            ),
        ] {
            let (created, _) = call_as(
                base,
                Method::POST,
                path,
                Some((key, Some("claude-code"))),
                Some(&body),
            )
            .await;
            assert_eq!(created.status, 201, "{base}{path}: {}", created.body);
        }
        for n in 1..=4 {
            let response = client
                .post(format!("{base}/v1/messages"))
                .header("x-api-key", key.as_str())
                .header("x-claude-code-session-id", "session-1")
                .header("X-Herma-Project", "billing")
                .json(&session_turn(n))
                .send()
                .await
                .expect("an answer");
            assert_eq!(response.status(), 200, "{base}: turn {n}");
            response.bytes().await.expect("a body");
        }
    }
    native.app.receipts.flush().await;
    native.app.memory.as_ref().expect("memory on").flush().await;

    // The Worker processes each turn after its answer has ended (`waitUntil`): wait until it
    // has, then its memory, outcomes and insights are the native server's.
    let ids = [(home_id.as_str(), "KEY"), (edge_id.as_str(), "KEY")];
    for path in ["/v1/memory?project=billing", "/v1/outcomes", "/v1/insights"] {
        let (at_home, _) = call(&native_base, Method::GET, path, Some(&home_key), None).await;
        assert_eq!(at_home.status, 200, "{path}: {}", at_home.body);
        let at_home = comparable(at_home, &ids);
        let mut at_edge = None;
        for _ in 0..100 {
            let (got, _) = call(&worker.base, Method::GET, path, Some(&edge_key), None).await;
            let got = comparable(got, &ids);
            if got == at_home {
                at_edge = Some(got);
                break;
            }
            at_edge = Some(got);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_same(&at_edge.expect("an answer"), &at_home, path);
    }
    let (memory, _) = call(
        &worker.base,
        Method::GET,
        "/v1/memory?project=billing",
        Some(&edge_key),
        None,
    )
    .await;
    assert!(memory.body.contains("rust:E0308"), "{}", memory.body);
}

#[tokio::test]
async fn the_worker_refuses_to_serve_a_d1_database_that_is_behind_and_serves_it_once_migrated() {
    let state = tempfile::tempdir().expect("tempdir").keep();
    let worker = spawn_worker(&settings("http://127.0.0.1:9"), &state);
    let client = reqwest::Client::new();
    let mut refused = None;
    for _ in 0..240 {
        if let Ok(r) = client.get(format!("{}/healthz", worker.base)).send().await {
            let status = r.status();
            let content_type = r.headers().get("content-type").cloned();
            refused = Some((status, content_type, r.text().await.unwrap_or_default()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, content_type, body) = refused.expect("wrangler dev answers");
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        content_type.as_ref().and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    let problem: Value = serde_json::from_str(&body).expect("a problem");
    assert_eq!(problem["code"], "unavailable");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("at migration none") && detail.contains("wrangler d1 migrations apply"),
        "{detail}"
    );
    // Nothing was kept: once the migrations are applied, the next request is served.
    migrate(&state);
    let (health, _) = call(&worker.base, Method::GET, "/healthz", None, None).await;
    assert_eq!(health.status, 200, "{}", health.body);
    let health: Value = serde_json::from_str(&health.body).expect("json");
    assert_eq!(health["database"], "d1");
}

/// Runs `sql` on the local D1 database in `state` (as `wrangler d1 execute` does for an
/// operator) and returns the rows of its last statement.
fn d1_execute(state: &Path, sql: &str) -> Vec<Value> {
    let out = wrangler(&worker_dir())
        .args([
            "d1",
            "execute",
            "herma",
            "--local",
            "--json",
            "--persist-to",
        ])
        .arg(state)
        .arg("--command")
        .arg(sql)
        .output()
        .expect("wrangler runs");
    assert!(
        out.status.success(),
        "wrangler d1 execute failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Value = serde_json::from_slice(&out.stdout).expect("wrangler's JSON");
    results
        .as_array()
        .and_then(|all| all.last())
        .and_then(|last| last["results"].as_array())
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn the_workers_cron_trigger_prunes_receipts_and_outcomes_past_their_retention() {
    let state = migrated_state();
    #[allow(clippy::disallowed_methods)] // the rows are aged against the real clock
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let day = 86_400_000u128;
    let (old, recent) = (now - 40 * day, now - day);
    d1_execute(
        &state,
        &format!(
            "INSERT INTO injection_receipts (caller_scope, id, sha256, body, created_at) VALUES
               ('key:aaaaaaaaaaaaaaaa', 'rcpt_old', 'x', '{{}}', {old}),
               ('key:aaaaaaaaaaaaaaaa', 'rcpt_recent', 'x', '{{}}', {recent});
             INSERT INTO rule_outcomes (caller_scope, conversation_id, turn, provision_id,
               provision_version, outcome, error_signature, receipt_id, recorded_at) VALUES
               ('key:aaaaaaaaaaaaaaaa', 'c', 1, 'deploy', 1, 'injected', NULL, 'rcpt_old', {old}),
               ('key:aaaaaaaaaaaaaaaa', 'c', 2, 'deploy', 1, 'injected', NULL, 'rcpt_recent', {recent});"
        ),
    );
    let mut vars = settings("http://127.0.0.1:9");
    vars.push(("HERMA_RECEIPT_RETENTION_DAYS", "30".to_owned()));
    vars.push(("HERMA_OUTCOME_RETENTION_DAYS", "30".to_owned()));
    let worker = start_worker(&vars, &state).await;
    let ran = reqwest::get(format!("{}/__scheduled?cron=17+*+*+*+*", worker.base))
        .await
        .expect("the trigger runs");
    assert!(ran.status().is_success(), "{:?}", ran.text().await);
    let kept = |table: &str| {
        d1_execute(
            &state,
            &format!("SELECT receipt_id AS id FROM {table} ORDER BY id"),
        )
    };
    let mut left = (Vec::new(), Vec::new());
    for _ in 0..50 {
        left = (
            d1_execute(&state, "SELECT id FROM injection_receipts ORDER BY id"),
            kept("rule_outcomes"),
        );
        if left.0.len() == 1 && left.1.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(left.0, vec![json!({"id": "rcpt_recent"})], "receipts kept");
    assert_eq!(left.1, vec![json!({"id": "rcpt_recent"})], "outcomes kept");
}

#[tokio::test]
async fn h16_the_worker_runs_tiers_2_and_3_on_remote_models_and_never_calls_them_offline_like_the_native_server()
 {
    use herma_test_support::mock_models::{MockModels, Reply};
    let models = MockModels::start(Reply::decision(true, 0.95)).await;
    let models_settings = vec![
        ("HERMA_EMBED_URL", models.url()),
        ("HERMA_EMBED_MODEL", "text-embedding-3-small".to_owned()),
        ("HERMA_EMBED_API_KEY", "sk-mock".to_owned()),
        ("HERMA_MICROMODEL_URL", models.url()),
        ("HERMA_MICROMODEL_MODEL", "qwen2.5:0.5b".to_owned()),
        ("HERMA_MICROMODEL_API_KEY", "sk-mock".to_owned()),
        ("HERMA_MICROMODEL_TIMEOUT_MS", "5000".to_owned()),
    ];
    let (_mock, native, worker) = side_by_side_with(models_settings, &migrated_state()).await;
    let native_base = native.url("");
    let scopes = ["route", "configure"];
    let (home_key, home_id) = issued_key(&native_base, &scopes, Some("claude-code")).await;
    let (edge_key, edge_id) = issued_key(&worker.base, &scopes, Some("claude-code")).await;
    let ids = [(home_id.as_str(), "KEY"), (edge_id.as_str(), "KEY")];

    let semantic = json!({"examples": ["deploy the service"], "threshold": 0.2});
    let micromodel = json!({"question": "Is this about deploying?", "on_failure": "fallback"});
    let records = [
        (
            "/v1/context",
            json!({"id": "d", "kind": "verb", "schema_or_body": "Deploy carefully."}),
        ),
        (
            "/v1/provisions",
            json!({"id": "sem", "action": "shim_context", "context_refs": ["d"],
            "triggers": {"semantic": semantic}}),
        ),
        (
            "/v1/provisions",
            json!({"id": "micro", "action": "shim_context", "context_refs": ["d"],
            "triggers": {"micromodel": micromodel}}),
        ),
    ];
    let dry_run = dry_run_of("deploy the service now");
    let message = json!({"model": "claude-test", "max_tokens": 64,
        "messages": [{"role": "user", "content": "deploy the service now"}]});
    // Each runtime in turn, counting the model calls it makes: writing the semantic rule
    // embeds its examples; the dry run calls no model (H16); the proxied turn embeds the
    // request and asks the classifier.
    let mut answers = Vec::new();
    let mut calls = Vec::new();
    for (base, key) in [(&native_base, &home_key), (&worker.base, &edge_key)] {
        let as_claude = Some((key.as_str(), Some("claude-code")));
        let before = (models.embed_calls(), models.chat_calls());
        for (path, body) in &records {
            let (created, _) = call_as(base, Method::POST, path, as_claude, Some(body)).await;
            assert_eq!(created.status, 201, "{base}{path}: {}", created.body);
        }
        let written = (models.embed_calls(), models.chat_calls());
        let (report, _) =
            call_as(base, Method::POST, "/v1/dry-run", as_claude, Some(&dry_run)).await;
        assert_eq!(report.status, 200, "{base}: {}", report.body);
        let dry = (models.embed_calls(), models.chat_calls());
        let (forwarded, headers) = call_as(
            base,
            Method::POST,
            "/v1/messages",
            as_claude,
            Some(&message),
        )
        .await;
        assert_eq!(forwarded.status, 200, "{base}: {}", forwarded.body);
        let proxied = (models.embed_calls(), models.chat_calls());
        let receipt_id = headers["x-herma-receipt"]
            .to_str()
            .expect("text")
            .to_owned();
        let receipt = stored_receipt(base, key, &receipt_id).await;
        calls.push([
            (written.0 - before.0, written.1 - before.1),
            (dry.0 - written.0, dry.1 - written.1),
            (proxied.0 - dry.0, proxied.1 - dry.1),
        ]);
        answers.push((comparable(report, &ids), receipt));
    }
    assert_eq!(
        calls[0], calls[1],
        "model calls (embed, chat) per step, home and edge"
    );
    assert_eq!(calls[0][1], (0, 0), "a dry run calls no model");
    assert_eq!(
        calls[0][2],
        (1, 1),
        "a proxied turn embeds once and asks once"
    );
    let (home, edge) = (&answers[0], &answers[1]);
    assert_same(&edge.0, &home.0, "dry run");
    for field in ["action", "matched", "shimmed_context_refs"] {
        assert_eq!(edge.1[field], home.1[field], "receipt {field}");
    }
    let matched = home.1["matched"].to_string();
    assert!(
        matched.contains("sem") && matched.contains("micro"),
        "{matched}"
    );
}

#[tokio::test]
async fn h19_the_worker_syncs_tessera_starters_and_serves_them_only_with_their_governance_like_the_native_server()
 {
    use herma_core::governance::sha256_hex;
    use herma_test_support::mock_tessera::{MockTessera, TOKEN};
    const DOC: &[u8] = b"The deploy runbook, version 3.";
    let tessera = MockTessera::start().await;
    tessera.put_blob(&sha256_hex(DOC), DOC);
    let governance = |status: &str, producer: &str| json!({"status": status, "producer": producer, "visibility_scope": "public"});
    let starter = |id: &str, word: &str, governance: Value| {
        json!({"uri": format!("tessera://records/starters/{id}"), "kind": "starter",
            "version": 1, "governance": governance,
            "provision": {"id": id, "action": "shim_context", "triggers": {"keywords": [word]},
                "context_refs": ["noun.deploy"]}})
    };
    tessera.publish(vec![
        json!({"uri": "tessera://records/nouns/deploy", "kind": "noun", "version": 1,
            "governance": {"status": "verified", "producer": "tessera", "visibility_scope": "public",
                "blobs": [format!("tessera://blobs/{}", sha256_hex(DOC))]},
            "entry": {"id": "noun.deploy", "title": "Deploys",
                "schema_or_body": "Deploys go through the release train."}}),
        starter("t.verified", "alpha", governance("verified", "tessera")),
        starter("t.quarantined", "bravo", governance("quarantined", "tessera")),
        starter("t.untrusted", "charlie", governance("verified", "legacy-pack")),
        json!({"uri": "tessera://records/starters/broken", "kind": "starter", "version": 1,
            "governance": governance("verified", "tessera")}),
        json!({"uri": "tessera://records/starters/odd", "kind": "spell", "version": 1}),
    ]);
    let tessera_settings = vec![
        ("HERMA_TESSERA_URL", tessera.url()),
        ("HERMA_TESSERA_TOKEN", TOKEN.to_owned()),
    ];
    let (_mock, native, worker) = side_by_side_with(tessera_settings, &migrated_state()).await;
    let native_base = native.url("");

    // The sync, twice (the second changes nothing), then what a routed caller gets.
    for round in ["first", "again"] {
        let (at_home, _) = call(
            &native_base,
            Method::POST,
            "/v1/admin/tessera/sync",
            Some(ADMIN),
            None,
        )
        .await;
        let (at_edge, _) = call(
            &worker.base,
            Method::POST,
            "/v1/admin/tessera/sync",
            Some(ADMIN),
            None,
        )
        .await;
        assert_eq!(at_home.status, 200, "{round}: {}", at_home.body);
        assert_same(&at_edge, &at_home, &format!("{round} sync"));
    }
    let (home_key, home_id) = issued_key(&native_base, &["route"], Some("claude-code")).await;
    let (edge_key, edge_id) = issued_key(&worker.base, &["route"], Some("claude-code")).await;
    let ids = [(home_id.as_str(), "KEY"), (edge_id.as_str(), "KEY")];
    let mut decisions = Vec::new();
    for word in ["alpha", "bravo", "charlie"] {
        let body = dry_run_of(word);
        let home_key = Some((home_key.as_str(), Some("claude-code")));
        let edge_key = Some((edge_key.as_str(), Some("claude-code")));
        let (at_home, _) = call_as(
            &native_base,
            Method::POST,
            "/v1/dry-run",
            home_key,
            Some(&body),
        )
        .await;
        let (at_edge, _) = call_as(
            &worker.base,
            Method::POST,
            "/v1/dry-run",
            edge_key,
            Some(&body),
        )
        .await;
        assert_eq!(at_home.status, 200, "{word}: {}", at_home.body);
        let (at_home, at_edge) = (comparable(at_home, &ids), comparable(at_edge, &ids));
        assert_same(&at_edge, &at_home, word);
        let report: Value = serde_json::from_str(&at_home.body).expect("json");
        decisions.push(report["decision"].as_str().unwrap_or_default().to_owned());
    }
    // Only the verified starter from a trusted producer is served.
    assert_eq!(decisions, ["shim_context", "forward", "forward"]);
}

#[tokio::test]
async fn the_worker_reads_tessera_through_its_service_binding() {
    use herma_test_support::mock_tessera::{MockTessera, TOKEN};
    let tessera = MockTessera::start().await;
    tessera.publish(vec![
        json!({"uri": "tessera://records/starters/t.bound", "kind": "starter",
        "version": 1, "governance": {"status": "verified", "producer": "tessera",
            "visibility_scope": "public"},
        "provision": {"id": "t.bound", "action": "respond_directly", "priority": -10,
            "triggers": {"keywords": ["bound"]}, "response": {"text": "through the binding"}}}),
    ]);
    // The Tessera Worker: a one-line Worker passing each request on to the mock.
    let dir = worker_dir();
    let configs = tempfile::tempdir().expect("tempdir").keep();
    std::fs::write(
        configs.join("tessera.js"),
        "export default { fetch(request, env) { const url = new URL(request.url); \
         return fetch(env.MOCK + url.pathname + url.search, request); } };\n",
    )
    .expect("write");
    std::fs::write(
        configs.join("tessera.toml"),
        format!(
            "name = \"tessera\"\nmain = \"{}\"\ncompatibility_date = \"2025-09-01\"\n\
             [vars]\nMOCK = \"{}\"\n",
            configs.join("tessera.js").display(),
            tessera.url()
        ),
    )
    .expect("write");
    // Herma's configuration with the binding added (paths made absolute).
    let herma = std::fs::read_to_string(dir.join("wrangler.toml"))
        .expect("wrangler.toml")
        .replace(
            "\"build/index.js\"",
            &format!("\"{}\"", dir.join("build/index.js").display()),
        )
        .replace(
            "\"migrations\"",
            &format!("\"{}\"", dir.join("migrations").display()),
        );
    std::fs::write(
        configs.join("herma.toml"),
        format!("{herma}\n[[services]]\nbinding = \"TESSERA\"\nservice = \"tessera\"\n"),
    )
    .expect("write");

    // Herma's Tessera is a name nothing answers on: only the binding reaches it.
    let mut vars = settings("http://127.0.0.1:9");
    vars.push(("HERMA_TESSERA_URL", "https://tessera.invalid".to_owned()));
    vars.push(("HERMA_TESSERA_TOKEN", TOKEN.to_owned()));
    let worker = start_workers(
        &vars,
        &migrated_state(),
        &[configs.join("herma.toml"), configs.join("tessera.toml")],
    )
    .await;
    let (synced, _) = call(
        &worker.base,
        Method::POST,
        "/v1/admin/tessera/sync",
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!(synced.status, 200, "{}", synced.body);
    let report: Value = serde_json::from_str(&synced.body).expect("json");
    assert_eq!(report["created"], 1, "{report}");
    let (key, _) = issued_key(&worker.base, &["route"], Some("claude-code")).await;
    let body = dry_run_of("bound");
    let (report, _) = call_as(
        &worker.base,
        Method::POST,
        "/v1/dry-run",
        Some((key.as_str(), Some("claude-code"))),
        Some(&body),
    )
    .await;
    assert!(
        report.body.contains("through the binding"),
        "{}",
        report.body
    );
}

/// `answer`, comparable across runtimes (see [`comparable`]), with the attempt bound each
/// runtime records in a turn's `server_exception` checked and then written as `…`: 100 s
/// natively, the seed's 25-second dispatch at the edge.
fn comparable_turn(answer: Answer, ids: &[(&str, &str)], timeout_ms: u64) -> Answer {
    let mut answer = comparable(answer, ids);
    let marker = format!("\"timeout_ms\":{timeout_ms}");
    let other = if timeout_ms == 25_000 {
        100_000
    } else {
        25_000
    };
    assert!(
        !answer.body.contains(&format!("\"timeout_ms\":{other}")),
        "a turn records its own runtime's attempt bound: {}",
        answer.body
    );
    answer.body = answer.body.replace(&marker, "\"timeout_ms\":\"…\"");
    answer
}

/// A native server and the Worker with conversation turns on, each with a key granted the
/// meta provider (through `mock`) holding the contract, and a key without a grant.
struct TurnPair {
    mock: herma_test_support::mock_providers::MockProvider,
    native: TestApp,
    worker: Wrangler,
    /// The Worker's settings, to start it again.
    edge_vars: Vec<(&'static str, String)>,
    state: PathBuf,
    /// (native, edge) keys: the granted one and the other.
    granted: (String, String),
    other: (String, String),
    /// Each key id with the name the comparison writes for it.
    ids: Vec<(String, &'static str)>,
    /// Whether the other key is granted too.
    both: bool,
}

impl TurnPair {
    async fn start(extra: &[(&str, &str)]) -> Self {
        Self::start_with(extra, "5", false).await
    }

    /// With the meta provider's budget `budget` (dollars) and, when `both`, the second key
    /// like the first: granted, holding the contract.
    async fn start_with(extra: &[(&str, &str)], budget: &str, both: bool) -> Self {
        Self::start_for(
            herma_test_support::mock_providers::Kind::Meta,
            extra,
            budget,
            both,
        )
        .await
    }

    /// [`TurnPair::start_with`] for the provider `kind`.
    async fn start_for(
        kind: herma_test_support::mock_providers::Kind,
        extra: &[(&str, &str)],
        budget: &str,
        both: bool,
    ) -> Self {
        use crate::conversations::{contract, settings as turn_settings};
        use herma_test_support::mock_providers::MockProvider;
        use herma_test_support::{fresh_stores, spawn_app_with};

        let mock = MockProvider::start(kind).await;
        // Grants name key ids, which are random: each runtime issues its keys first, then
        // starts again with a grant for the first one (the second has none).
        let stores = fresh_stores(Backend::Sqlite).await;
        let admin = [("HERMA_ADMIN_TOKEN", ADMIN)];
        let first = spawn_app_with(stores.clone(), &admin).await;
        let scopes = ["route", "configure"];
        let (home, home_id) = issued_key(&first.url(""), &scopes, Some("claude-code")).await;
        let (other_scopes, other_harness): (&[&str], _) = if both {
            (&scopes, Some("claude-code"))
        } else {
            (&["route"], None)
        };
        let (home_other, home_other_id) =
            issued_key(&first.url(""), other_scopes, other_harness).await;
        first.stop().await;
        let state = migrated_state();
        let admin_var = vec![("HERMA_ADMIN_TOKEN", ADMIN.to_owned())];
        let first = start_worker(&admin_var, &state).await;
        let (edge, edge_id) = issued_key(&first.base, &scopes, Some("claude-code")).await;
        let (edge_other, edge_other_id) =
            issued_key(&first.base, other_scopes, other_harness).await;
        drop(first);

        let granted = |id: &str, other: &str| {
            let ids: Vec<&str> = if both { vec![id, other] } else { vec![id] };
            let mut vars = turn_settings(kind, &mock, &ids, budget);
            vars.push(("HERMA_ADMIN_TOKEN".to_owned(), ADMIN.to_owned()));
            vars.extend(
                extra
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            );
            vars
        };
        let home_vars = granted(&home_id, &home_other_id);
        let pairs: Vec<(&str, &str)> = home_vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let native = spawn_app_with(stores, &pairs).await;
        let edge_vars: Vec<(&'static str, String)> = granted(&edge_id, &edge_other_id)
            .into_iter()
            .map(|(k, v)| (&*k.leak(), v))
            .collect();
        let worker = start_worker(&edge_vars, &state).await;
        let mut holders = vec![(native.url(""), &home), (worker.base.clone(), &edge)];
        if both {
            holders.extend([
                (native.url(""), &home_other),
                (worker.base.clone(), &edge_other),
            ]);
        }
        for (base, key) in holders {
            let (stored, _) = call_as(
                &base,
                Method::POST,
                "/v1/context",
                Some((key, Some("claude-code"))),
                Some(&contract()),
            )
            .await;
            assert_eq!(stored.status, 201, "{}", stored.body);
        }
        Self {
            mock,
            native,
            worker,
            edge_vars,
            state,
            ids: vec![
                (home_id, "granted"),
                (edge_id, "granted"),
                (home_other_id, "other"),
                (edge_other_id, "other"),
            ],
            granted: (home, edge),
            other: (home_other, edge_other),
            both,
        }
    }

    fn ids(&self) -> Vec<(&str, &str)> {
        self.ids
            .iter()
            .map(|(id, name)| (id.as_str(), *name))
            .collect()
    }

    /// (base, key, harness, the attempt bound its turns record) of each runtime, native first:
    /// the granted key's, or the other's.
    fn sides(&self, granted: bool) -> [(String, String, Option<&'static str>, u64); 2] {
        let (home, edge) = if granted { &self.granted } else { &self.other };
        // A key for a harness attests it, as its callers do.
        let harness = (granted || self.both).then_some("claude-code");
        [
            (self.native.url(""), home.clone(), harness, 100_000),
            (self.worker.base.clone(), edge.clone(), harness, 25_000),
        ]
    }
}

/// Waits until `mock` has received `calls` requests (at most a minute).
async fn wait_for_calls(mock: &herma_test_support::mock_providers::MockProvider, calls: usize) {
    for _ in 0..3000 {
        if mock.calls() >= calls {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the provider received {} of {calls} requests", mock.calls());
}

/// `answer` with the time a held resource is eligible again, which a skip's message names
/// (each runtime's clock), written as `…`.
fn without_eligible_time(mut answer: Answer) -> Answer {
    const SAID: &str = "eligible again at ";
    let mut out = String::with_capacity(answer.body.len());
    let mut rest = answer.body.as_str();
    while let Some(at) = rest.find(SAID) {
        out.push_str(&rest[..at + SAID.len()]);
        rest = rest[at + SAID.len()..]
            .trim_start_matches(|c: char| c.is_ascii_digit() || "-:.TZ".contains(c));
        out.push('…');
    }
    out.push_str(rest);
    answer.body = out;
    answer
}

fn turn_of(conversation: &str, request: &str, version: u64, message: &str) -> Value {
    json!({"conversation_id": conversation, "request_id": request, "expected_version": version,
        "message": message, "context_refs": ["work.review"], "provider": "meta"})
}

#[tokio::test]
async fn h17_the_worker_answers_conversation_turns_from_its_durable_object_like_the_native_server()
{
    use crate::conversations::review_call;
    use herma_test_support::mock_providers::Answer as Said;

    let mut pair = TurnPair::start(&[]).await;
    let turn =
        |request: &str, version: u64, message: &str| turn_of("work-1", request, version, message);
    // (what, whether the granted key asks, method, path, body, what the model says first)
    type Step<'a> = (&'a str, bool, Method, String, Option<Value>, Option<Said>);
    let granted_turn = |n: &str, v: u64, m: &str| Some(turn(n, v, m));
    let steps: Vec<Step> = vec![
        (
            "a turn without the caller's own grant (H17)",
            false,
            Method::POST,
            "/v1/conversations/turn".into(),
            granted_turn("r-0", 0, "hello"),
            None,
        ),
        (
            "a clarification",
            true,
            Method::POST,
            "/v1/conversations/turn".into(),
            granted_turn("r-1", 0, "Hello. What work can I do today?"),
            Some(Said::Text("Which document should be reviewed?".into())),
        ),
        (
            "a proposal",
            true,
            Method::POST,
            "/v1/conversations/turn".into(),
            granted_turn("r-2", 1, "spec.md, within three days"),
            Some(review_call()),
        ),
        (
            "the replay",
            true,
            Method::POST,
            "/v1/conversations/turn".into(),
            granted_turn("r-2", 1, "spec.md, within three days"),
            None,
        ),
        (
            "a reused request id",
            true,
            Method::POST,
            "/v1/conversations/turn".into(),
            granted_turn("r-2", 1, "something else"),
            None,
        ),
        (
            "a stale version",
            true,
            Method::POST,
            "/v1/conversations/turn".into(),
            granted_turn("r-3", 1, "again"),
            None,
        ),
        (
            "the caller's own view",
            true,
            Method::GET,
            "/v1/conversations/work-1".into(),
            None,
            None,
        ),
        (
            "another caller's view",
            false,
            Method::GET,
            "/v1/conversations/work-1".into(),
            None,
            None,
        ),
    ];
    let ids = pair.ids();
    for (what, own, method, path, body, said) in &steps {
        let mut answers = Vec::new();
        for (base, key, harness, timeout_ms) in pair.sides(*own) {
            if let Some(said) = said {
                pair.mock.answer([said.clone()]);
            }
            let (answer, headers) = call_as(
                &base,
                method.clone(),
                path,
                Some((&key, harness)),
                body.as_ref(),
            )
            .await;
            let replayed = headers
                .get("x-herma-replayed")
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            answers.push((comparable_turn(answer, &ids, timeout_ms), replayed));
        }
        let (home_answer, edge_answer) = (&answers[0], &answers[1]);
        assert_same(&edge_answer.0, &home_answer.0, what);
        assert_eq!(edge_answer.1, home_answer.1, "{what}: x-herma-replayed");
    }
    // Two model calls on each side: the clarification and the proposal; none for the
    // refusals and the replay.
    assert_eq!(pair.mock.calls(), 4);

    // The operator's budget summary reads the same ledger.
    let (home_budget, _) = call(
        &pair.native.url(""),
        Method::GET,
        "/v1/admin/conversation-budget",
        Some(ADMIN),
        None,
    )
    .await;
    let (edge_budget, _) = call(
        &pair.worker.base,
        Method::GET,
        "/v1/admin/conversation-budget",
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!(home_budget.status, 200, "{}", home_budget.body);
    assert_same(
        &comparable(edge_budget, &ids),
        &comparable(home_budget, &ids),
        "the budget summary",
    );

    // The conversation lives in the object's storage: a restarted Worker serves it.
    pair.worker.stop();
    pair.worker = start_worker(&pair.edge_vars, &pair.state).await;
    let (view, _) = call_as(
        &pair.worker.base,
        Method::GET,
        "/v1/conversations/work-1",
        Some((&pair.granted.1, Some("claude-code"))),
        None,
    )
    .await;
    assert_eq!(view.status, 200, "{}", view.body);
    let view: Value = serde_json::from_str(&view.body).expect("json");
    assert_eq!(view["version"], 2);
    assert_eq!(view["recent_turns"][0]["status"], "sealed");
}

#[tokio::test]
async fn the_workers_turns_stop_at_two_active_per_caller_and_each_dispatch_at_25_seconds() {
    use herma_test_support::mock_providers::Answer as Said;

    let pair = TurnPair::start(&[]).await;
    let ids = pair.ids();
    let sides = pair.sides(true);
    let client = reqwest::Client::builder()
        // Longer than the edge's 25-second bound, shorter than the native 100 seconds.
        .timeout(Duration::from_secs(90))
        .build()
        .expect("a client");
    let mut refusals = Vec::new();
    let mut stalled = Vec::new();
    for (n, (base, key, harness, timeout_ms)) in sides.iter().enumerate() {
        // Two turns the model never answers.
        pair.mock.answer([
            Said::Stall(Duration::from_secs(3600)),
            Said::Stall(Duration::from_secs(3600)),
        ]);
        let mut pending = Vec::new();
        for conversation in ["a", "b"] {
            let request = client
                .post(format!("{base}/v1/conversations/turn"))
                .bearer_auth(key)
                .header("X-Herma-Harness", harness.unwrap_or_default())
                .json(&turn_of(conversation, "r", 0, "hello"));
            pending.push(tokio::spawn(request.send()));
        }
        wait_for_calls(&pair.mock, 2 * (n + 1)).await;
        // A third turn is refused before anything is kept (its new conversation included);
        // another turn of a conversation being answered, or the same request again, conflicts.
        let mut answers = Vec::new();
        for (path, method, body) in [
            (
                "/v1/conversations/turn",
                Method::POST,
                Some(turn_of("c", "r", 0, "hello")),
            ),
            ("/v1/conversations/c", Method::GET, None),
            (
                "/v1/conversations/turn",
                Method::POST,
                Some(turn_of("a", "r2", 0, "hello")),
            ),
            (
                "/v1/conversations/turn",
                Method::POST,
                Some(turn_of("a", "r", 0, "hello")),
            ),
        ] {
            let (answer, _) =
                call_as(base, method, path, Some((key, *harness)), body.as_ref()).await;
            answers.push(comparable_turn(answer, &ids, *timeout_ms));
        }
        refusals.push(answers);
        stalled.push(pending);
    }
    let what = [
        "the third active turn",
        "its conversation",
        "a busy conversation",
        "the same request",
    ];
    for (at, what) in what.iter().enumerate() {
        assert_same(&refusals[1][at], &refusals[0][at], what);
    }
    let third: Value = serde_json::from_str(&refusals[1][0].body).expect("json");
    assert_eq!(third["code"], "conversation_limit", "{third}");
    assert_eq!(third["reason"], "active_turns");
    assert_eq!(refusals[1][1].status, 404);

    // At the edge each stalled dispatch ends at 25 seconds: a blocked, uncertain answer, never
    // retried. (The native server's attempts would wait 100 seconds; they are abandoned.)
    for task in stalled.remove(0) {
        task.abort();
    }
    for task in stalled.remove(0) {
        let response = task
            .await
            .expect("the task")
            .expect("an answer within 90 seconds");
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.expect("json");
        assert_eq!(answer["status"], "blocked", "{answer}");
        assert_eq!(answer["reason"], "provider_outcome_uncertain", "{answer}");
        assert_eq!(
            answer["attempts"].as_array().map(Vec::len),
            Some(1),
            "{answer}"
        );
    }
    assert_eq!(
        pair.mock.calls(),
        4,
        "a stalled dispatch is never sent again"
    );
}

#[tokio::test]
async fn the_workers_alarm_seals_a_turn_its_object_left_unfinished_two_minutes_after_admission() {
    use herma_test_support::mock_providers::Answer as Said;

    let mut pair = TurnPair::start(&[]).await;
    let [_, (base, key, harness, _)] = pair.sides(true);
    let key = (key.as_str(), harness);
    pair.mock.answer([Said::Stall(Duration::from_secs(3600))]);
    let stuck = tokio::spawn({
        let (base, key) = (base.clone(), key.0.to_owned());
        async move {
            call_as(
                &base,
                Method::POST,
                "/v1/conversations/turn",
                Some((&key, harness)),
                Some(&turn_of("a", "r", 0, "hello")),
            )
            .await
        }
    });
    wait_for_calls(&pair.mock, 1).await;
    // The object stops mid-turn (its Worker is killed): nothing answers the turn, and nothing
    // in the object's memory survives.
    pair.worker.stop();
    stuck.abort();
    pair.worker = start_worker(&pair.edge_vars, &pair.state).await;
    let base = pair.worker.base.clone();
    let (view, _) = call_as(&base, Method::GET, "/v1/conversations/a", Some(key), None).await;
    let view: Value = serde_json::from_str(&view.body).expect("json");
    assert_eq!(view["active_request_id"], "r", "{view}");

    // The alarm set at admission seals it two minutes after: wait for it (at most four).
    let mut sealed = None;
    for _ in 0..120 {
        let (view, _) = call_as(&base, Method::GET, "/v1/conversations/a", Some(key), None).await;
        let view: Value = serde_json::from_str(&view.body).expect("json");
        if view["recent_turns"][0]["status"] == "sealed" {
            sealed = Some(view);
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let view = sealed.expect("the alarm sealed the turn within four minutes");
    assert_eq!(view["active_request_id"], Value::Null, "{view}");
    assert_eq!(
        view["recent_turns"][0]["answer"]["reason"], "provider_outcome_uncertain",
        "{view}"
    );
    // Its replay is the sealed answer; the model was called once, never again.
    let (replay, headers) = call_as(
        &base,
        Method::POST,
        "/v1/conversations/turn",
        Some(key),
        Some(&turn_of("a", "r", 0, "hello")),
    )
    .await;
    assert_eq!(replay.status, 200, "{}", replay.body);
    assert_eq!(headers["x-herma-replayed"], "true");
    let replay: Value = serde_json::from_str(&replay.body).expect("json");
    assert_eq!(replay, view["recent_turns"][0]["answer"]);
    assert_eq!(pair.mock.calls(), 1);
}

#[tokio::test]
async fn the_workers_callers_each_have_their_own_object_and_share_the_providers_budget() {
    use herma_test_support::mock_providers::Answer as Said;

    // One turn's reservation (2,830 µ$: its input and 256 output tokens at the meta prices)
    // fits a $0.004 budget, two do not.
    let pair = TurnPair::start_with(&[], "0.004", true).await;
    let ids = pair.ids();
    for (what, granted) in [
        ("the first caller's turn", true),
        ("the second caller's turn", false),
    ] {
        let mut answers = Vec::new();
        for (base, key, harness, timeout_ms) in pair.sides(granted) {
            pair.mock.answer([Said::Text("Which document?".into())]);
            let (answer, _) = call_as(
                &base,
                Method::POST,
                "/v1/conversations/turn",
                Some((&key, harness)),
                Some(&turn_of("work", "r", 0, "hello")),
            )
            .await;
            answers.push(comparable_turn(answer, &ids, timeout_ms));
        }
        assert_same(&answers[1], &answers[0], what);
        let edge: Value = serde_json::from_str(&answers[1].body).expect("json");
        if granted {
            assert_eq!(edge["status"], "clarify", "{edge}");
            assert_eq!(edge["attempts"][0]["reservation_status"], "reserved");
        } else {
            // The provider's budget is every caller's: the first caller's reservation holds it.
            assert_eq!(answers[1].status, 429, "{edge}");
            assert_eq!(edge["reason"], "provider_budget_denied", "{edge}");
            assert_eq!(edge["attempts"][0]["reservation_status"], "denied");
        }
    }
    assert_eq!(pair.mock.calls(), 2, "one model call per runtime");
    // Each caller sees its own conversation only, though both named it `work`.
    for (granted, status) in [(true, "clarify"), (false, "blocked")] {
        let [_, (base, key, harness, _)] = pair.sides(granted);
        let (view, _) = call_as(
            &base,
            Method::GET,
            "/v1/conversations/work",
            Some((&key, harness)),
            None,
        )
        .await;
        let view: Value = serde_json::from_str(&view.body).expect("json");
        assert_eq!(
            view["recent_turns"][0]["answer"]["status"], status,
            "{view}"
        );
    }
}

#[tokio::test]
async fn the_workers_fallback_upstream_key_is_upstream_llm_api_key_bound_to_its_origin() {
    let mock = MockUpstream::start().await;
    // The seed's Worker names the operator's fallback key UPSTREAM_LLM_API_KEY.
    let vars: Vec<(&str, String)> = settings(&mock.url())
        .into_iter()
        .map(|(name, value)| match name {
            "HERMA_UPSTREAM_API_KEY" => ("UPSTREAM_LLM_API_KEY", value),
            _ => (name, value),
        })
        .collect();
    let state = migrated_state();
    let worker = start_worker(&vars, &state).await;
    let key = route_key(&worker.base).await;
    let body = json!({"model": "claude-test", "max_tokens": 8,
        "messages": [{"role": "user", "content": "hello there"}]});
    let (answer, _) = call(
        &worker.base,
        Method::POST,
        "/v1/messages",
        Some(&key),
        Some(&body),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let sent = mock.requests();
    let sent = sent.last().expect("one forwarded request");
    let credential = [sent.header("x-api-key"), sent.header("authorization")];
    assert!(
        credential
            .iter()
            .flatten()
            .any(|v| v.contains("sk-operator")),
        "the operator's key reaches its own origin: {credential:?}"
    );
    assert!(
        !credential.iter().flatten().any(|v| v.contains(&key)),
        "the caller's hmk_ key never reaches the upstream"
    );
    // Toward another origin (a caller's X-Upstream-Base-Url) the operator's key is not sent.
    let other = MockUpstream::start().await;
    let client = reqwest::Client::new();
    let elsewhere = client
        .post(format!("{}/v1/messages", worker.base))
        .bearer_auth(&key)
        .header("X-Upstream-Base-Url", other.url())
        .json(&body)
        .send()
        .await
        .expect("an answer");
    let status = elsewhere.status().as_u16();
    let credential: Vec<String> = other
        .requests()
        .iter()
        .flat_map(|r| [r.header("x-api-key"), r.header("authorization")])
        .flatten()
        .map(str::to_owned)
        .collect();
    assert!(
        !credential.iter().any(|v| v.contains("sk-operator")),
        "status {status}: the operator's key never goes to another origin: {credential:?}"
    );
    drop(worker);

    // Both names at once is one setting set twice: refused, naming both.
    let mut both = vars.clone();
    both.push(("HERMA_UPSTREAM_API_KEY", "sk-other".to_owned()));
    let worker = spawn_worker(&both, &state);
    let mut refusal = None;
    for _ in 0..240 {
        if let Ok(r) = reqwest::get(format!("{}/healthz", worker.base)).await {
            refusal = Some((r.status().as_u16(), r.text().await.unwrap_or_default()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, body) = refusal.expect("the Worker answers");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("UPSTREAM_LLM_API_KEY") && body.contains("HERMA_UPSTREAM_API_KEY"),
        "{body}"
    );
}

#[tokio::test]
async fn h10_h08_the_worker_shims_and_answers_each_protocol_and_shims_once_per_conversation_like_the_native_server()
 {
    use crate::proxy::body;

    let (mock, native, worker) = side_by_side().await;
    let native_base = native.url("");
    let scopes = ["route", "configure"];
    let (home, home_id) = issued_key(&native_base, &scopes, Some("claude-code")).await;
    let (edge, edge_id) = issued_key(&worker.base, &scopes, Some("claude-code")).await;
    let ids = [(home_id.as_str(), "caller"), (edge_id.as_str(), "caller")];
    let records = [
        (
            "/v1/context",
            json!({"id": "deploy.checklist", "kind": "verb", "title": "Deploy checklist", "schema_or_body": "Run the migrations before the canary."}),
        ),
        (
            "/v1/context",
            json!({"id": "billing", "kind": "noun", "schema_or_body": "The billing service owns invoices."}),
        ),
        (
            "/v1/context",
            json!({"id": "once.note", "kind": "detail", "schema_or_body": "Once."}),
        ),
        (
            "/v1/provisions",
            json!({"id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist", "billing", "missing.ref"]}),
        ),
        (
            "/v1/provisions",
            json!({"id": "once", "action": "shim_context", "once_per_conversation": true, "triggers": {"keywords": ["release"]}, "context_refs": ["once.note"]}),
        ),
    ];
    for (base, key) in [(native_base.as_str(), &home), (worker.base.as_str(), &edge)] {
        for (path, record) in &records {
            let (stored, _) = call_as(
                base,
                Method::POST,
                path,
                Some((key, Some("claude-code"))),
                Some(record),
            )
            .await;
            assert_eq!(stored.status, 201, "{path}: {}", stored.body);
        }
    }
    let sides = [(native_base.as_str(), &home), (worker.base.as_str(), &edge)];
    for path in ["/v1/messages", "/v1/chat/completions", "/v1/responses"] {
        for (what, text, stream) in [
            ("a shimmed turn", "deploy the billing fix", false),
            ("a shimmed stream", "deploy the billing fix", true),
            ("a direct answer", "/herma help", false),
            ("a direct answer as a stream", "/herma help", true),
        ] {
            let what = format!("{path}: {what}");
            let sent = body(path, "m-1", text, stream);
            let before = mock.requests().len();
            let mut answers = Vec::new();
            for (base, key) in sides {
                let (answer, _) = call_as(
                    base,
                    Method::POST,
                    path,
                    Some((key, Some("claude-code"))),
                    Some(&sent),
                )
                .await;
                assert_eq!(answer.status, 200, "{what}: {}", answer.body);
                answers.push(comparable(without_answer_ids(answer), &ids));
            }
            assert_same(&answers[1], &answers[0], &what);
            // What went upstream, shim and all, is the same request from both.
            let upstream: Vec<Value> = mock.requests()[before..].iter().map(|r| r.json()).collect();
            let direct = text.starts_with("/herma");
            assert_eq!(
                upstream.len(),
                if direct { 0 } else { 2 },
                "{what}: upstream calls"
            );
            if !direct {
                assert_eq!(upstream[1], upstream[0], "{what}: the forwarded request");
                assert!(
                    upstream[0].to_string().contains("Run the migrations"),
                    "{what}: shimmed"
                );
            }
        }
    }
    // A once-per-conversation shim: the first turn of each session only, on both.
    let path = "/v1/messages";
    for (base, key) in sides {
        let before = mock.requests().len();
        for session in ["s-1", "s-1", "s-2"] {
            let client = reqwest::Client::new();
            let response = client
                .post(format!("{base}{path}"))
                .bearer_auth(key)
                .header("X-Herma-Harness", "claude-code")
                .header("x-claude-code-session-id", session)
                .json(&body(path, "m", "release it", false))
                .send()
                .await
                .expect("an answer");
            assert_eq!(response.status(), 200);
        }
        let seen: Vec<bool> = mock.requests()[before..]
            .iter()
            .map(|r| r.json().to_string().contains("Once."))
            .collect();
        assert_eq!(
            seen,
            [true, false, true],
            "{base}: once per conversation identity"
        );
    }
}

#[tokio::test]
async fn the_worker_refuses_without_the_edge_secret_and_stops_at_a_paused_provider_like_the_native_server()
 {
    let secret = "edge-secret-0123456789abcdef";
    let vars = vec![
        ("HERMA_ADMIN_TOKEN", ADMIN.to_owned()),
        (
            "HERMA_UPSTREAM_BASE_URL",
            "https://api.anthropic.com".to_owned(),
        ),
        ("HERMA_UPSTREAM_API_KEY", "sk-operator".to_owned()),
        (
            "HERMA_CONVERSATION_DISABLED_PROVIDERS",
            "[\"anthropic\"]".to_owned(),
        ),
        ("HERMA_EDGE_SECRET", secret.to_owned()),
    ];
    let overrides: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let native = spawn_app(Backend::Sqlite, &overrides).await;
    let state = migrated_state();
    // Its health check carries the secret too: start it and wait for the refusal instead.
    let worker = spawn_worker(&vars, &state);
    let client = reqwest::Client::new();
    let mut up = false;
    for _ in 0..240 {
        if client
            .get(format!("{}/healthz", worker.base))
            .send()
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(up, "wrangler dev did not answer within 60 s");
    let native_base = native.url("");
    let issue = |base: String| {
        let client = client.clone();
        async move {
            let r = client
                .post(format!("{base}/v1/admin/keys"))
                .bearer_auth(ADMIN)
                .header("x-edge-auth", secret)
                .json(&json!({"scopes": ["route"], "label": "parity"}))
                .send()
                .await
                .expect("an answer");
            assert_eq!(r.status(), 201);
            let v: Value = r.json().await.expect("json");
            v["key"].as_str().expect("a key").to_owned()
        }
    };
    let home = issue(native_base.clone()).await;
    let edge = issue(worker.base.clone()).await;
    let message = crate::proxy::body("/v1/messages", "m", "hi", false);
    for (what, with_secret) in [("no edge secret", false), ("a paused provider", true)] {
        let mut answers = Vec::new();
        for (base, key) in [(&native_base, &home), (&worker.base, &edge)] {
            let mut request = client
                .post(format!("{base}/v1/messages"))
                .header("x-api-key", key)
                .json(&message);
            if with_secret {
                request = request.header("x-edge-auth", secret);
            }
            let response = request.send().await.expect("an answer");
            answers.push(Answer {
                status: response.status().as_u16(),
                content_type: response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                body: response.text().await.expect("a body"),
            });
        }
        assert_same(&answers[1], &answers[0], what);
        let code = if with_secret {
            "provider_operator_disabled"
        } else {
            "edge_auth_required"
        };
        assert!(
            answers[1].body.contains(code),
            "{what}: {}",
            answers[1].body
        );
    }
}

#[tokio::test]
async fn h17_the_workers_coordinator_holds_a_rate_limited_route_for_every_caller_until_one_probe_recovers_it()
 {
    use herma_test_support::mock_providers::Answer as Said;

    let pair = TurnPair::start_with(&[], "5", true).await;
    let ids = pair.ids();
    // (what, whose turn, what the model says, if it is asked)
    let steps: [(&str, bool, &str, Option<Said>); 2] = [
        (
            "the first caller is rate limited",
            true,
            "r1",
            Some(Said::RateLimited { retry_after: 2 }),
        ),
        (
            "the other caller is held: nothing reserved or sent",
            false,
            "r2",
            None,
        ),
    ];
    let mut held = Vec::new();
    for (what, first, request, said) in steps {
        let mut answers = Vec::new();
        for (base, key, harness, _) in pair.sides(first) {
            if let Some(said) = &said {
                pair.mock.answer([said.clone()]);
            }
            let body = turn_of(&format!("c-{request}"), request, 0, "hello");
            let (answer, _) = call_as(
                &base,
                Method::POST,
                "/v1/conversations/turn",
                Some((&key, harness)),
                Some(&body),
            )
            .await;
            answers.push(without_eligible_time(answer));
        }
        held.push(serde_json::from_str::<Value>(&answers[1].body).expect("json"));
        let [home, edge]: [Answer; 2] = answers.try_into().expect("two answers");
        assert_same(
            &comparable_turn(edge, &ids, 25_000),
            &comparable_turn(home, &ids, 100_000),
            what,
        );
    }
    assert_eq!(held[0]["reason"], "provider_rate_limited", "{}", held[0]);
    let attempt = &held[1]["attempts"][0];
    assert_eq!(attempt["skip"], "cooldown", "{attempt}");
    assert_eq!(attempt["provider_health"]["scope"], "provider_route");
    assert_eq!(attempt["request_sent"], false);
    assert_eq!(pair.mock.calls(), 2, "the held turn sent nothing");

    // The operator's summary shows the hold on both.
    let summary = |base: String| async move {
        comparable(
            call(
                &base,
                Method::GET,
                "/v1/admin/conversation-budget",
                Some(ADMIN),
                None,
            )
            .await
            .0,
            &[],
        )
    };
    assert_same(
        &summary(pair.worker.base.clone()).await,
        &summary(pair.native.url("")).await,
        "the budget summary with a hold",
    );

    // Once eligible (the edge waits on its clock, the native server's clock is moved), the next
    // turn is the one recovery probe; its success clears the hold for every caller.
    let eligible =
        herma_core::Timestamp::parse_rfc3339(attempt["next_eligible_at"].as_str().expect("a time"))
            .expect("RFC 3339");
    pair.native.clock.advance_millis(2_000);
    loop {
        let wall = herma_core::time::Clock::now(&herma_store::SystemClock);
        if wall.as_millis() > eligible.as_millis() + 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (what, first, request, probe) in [
        ("the recovery probe", false, "r3", true),
        ("after the recovery", true, "r4", false),
    ] {
        let mut answers = Vec::new();
        for (base, key, harness, timeout_ms) in pair.sides(first) {
            pair.mock.answer([Said::Text("Which document?".into())]);
            let body = turn_of(&format!("c-{request}"), request, 0, "hello");
            let (answer, _) = call_as(
                &base,
                Method::POST,
                "/v1/conversations/turn",
                Some((&key, harness)),
                Some(&body),
            )
            .await;
            answers.push(comparable_turn(
                without_eligible_time(answer),
                &ids,
                timeout_ms,
            ));
        }
        assert_same(&answers[1], &answers[0], what);
        let edge: Value = serde_json::from_str(&answers[1].body).expect("json");
        assert_eq!(edge["status"], "clarify", "{what}: {edge}");
        assert_eq!(
            edge["attempts"][0].get("recovery_probe").is_some(),
            probe,
            "{what}: {edge}"
        );
    }
    assert_eq!(pair.mock.calls(), 6);
}

#[tokio::test]
async fn the_workers_ollama_calls_are_one_utc_day_cap_shared_by_every_caller() {
    use herma_test_support::mock_providers::{Answer as Said, Kind};

    let pair = TurnPair::start_for(
        Kind::Ollama,
        &[("HERMA_OLLAMA_CALLS_PER_DAY", "1")],
        "5",
        true,
    )
    .await;
    let ids = pair.ids();
    let mut statuses = Vec::new();
    for (what, first, request) in [
        ("the day's one call", true, "r1"),
        ("another caller's turn past the cap", false, "r2"),
    ] {
        let mut answers = Vec::new();
        for (base, key, harness, timeout_ms) in pair.sides(first) {
            pair.mock.answer([Said::Text("Which document?".into())]);
            let mut body = turn_of(&format!("c-{request}"), request, 0, "hello");
            body["provider"] = json!("ollama");
            let (answer, _) = call_as(
                &base,
                Method::POST,
                "/v1/conversations/turn",
                Some((&key, harness)),
                Some(&body),
            )
            .await;
            answers.push(comparable_turn(answer, &ids, timeout_ms));
        }
        assert_same(&answers[1], &answers[0], what);
        let edge: Value = serde_json::from_str(&answers[1].body).expect("json");
        statuses.push((
            answers[1].status,
            edge["status"].clone(),
            edge["reason"].clone(),
        ));
    }
    assert_eq!(statuses[0].1, "clarify", "{statuses:?}");
    assert_eq!(
        statuses[1],
        (429, json!("blocked"), json!("provider_budget_denied")),
        "the cap is every caller's"
    );
    assert_eq!(pair.mock.calls(), 2, "one call a day on each runtime");
}
