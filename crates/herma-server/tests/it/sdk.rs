//! The official `openai` and `anthropic` Python SDKs as clients of Herma: direct answers and
//! forwarding, JSON and streams, tool calls and thinking, errors in each SDK's own terms.
//! `scripts/test` installs the SDKs into `.venv`; `HERMA_TEST_PYTHON` names the interpreter.

use std::path::PathBuf;
use std::process::Command;

use herma_test_support::mock_upstream::MockUpstream;
use herma_test_support::{Backend, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::req;

pub fn python() -> PathBuf {
    #[allow(clippy::disallowed_methods)] // the test command chooses the interpreter
    if let Ok(path) = std::env::var("HERMA_TEST_PYTHON") {
        return PathBuf::from(path);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// Runs `tests/sdk/<name>` with `env` and returns the JSON it prints last (`{"checks": N}`).
pub async fn run_script(name: &str, env: Vec<(&'static str, String)>) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sdk")
        .join(name);
    let interpreter = python();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&interpreter)
            .arg(&script)
            .envs(env)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "running {}: {e} (scripts/test installs the SDKs into .venv)",
                    interpreter.display()
                )
            })
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{name} failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{name} printed no report ({e}):\n{stdout}\n{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_talk_to_herma() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    for (path, body) in [
        (
            "/v1/provisions",
            json!({"id": "freeze", "action": "respond_directly", "triggers": {"keywords": ["freeze-check"]}, "response": {"text": "Deploys are frozen until Monday."}}),
        ),
        (
            "/v1/context",
            json!({"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations before the canary."}),
        ),
        (
            "/v1/provisions",
            json!({"id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist"]}),
        ),
    ] {
        assert_eq!(
            req(Method::POST, path)
                .key(&key)
                .harness("claude-code")
                .json(body)
                .send(&app)
                .await
                .0,
            StatusCode::CREATED
        );
    }
    let report = run_script(
        "sdk_clients.py",
        vec![
            ("HERMA_BASE", app.url("")),
            ("HERMA_KEY", key.clone()),
            ("MOCK_BASE", mock.url()),
        ],
    )
    .await;
    assert!(
        report["checks"].as_u64().unwrap() >= 33,
        "every check ran: {report}"
    );

    // What the SDKs' forwarded requests looked like at the upstream.
    let seen = mock.requests();
    assert!(!seen.is_empty());
    for r in &seen {
        assert!(
            r.headers.iter().all(|(_, v)| !v.contains("hmk_")),
            "the Herma key never reaches the upstream"
        );
        assert!(
            !r.json()["model"]
                .as_str()
                .unwrap_or_default()
                .contains("contributor")
        );
    }
    let shimmed_chat = seen
        .iter()
        .find(|r| r.path == "/v1/chat/completions" && r.body.windows(6).any(|w| w == b"deploy"))
        .unwrap();
    let messages = shimmed_chat.json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("Run the migrations")
    );
    let shimmed_messages = seen
        .iter()
        .find(|r| r.path == "/v1/messages" && r.body.windows(6).any(|w| w == b"deploy"))
        .unwrap();
    assert!(
        shimmed_messages.json()["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("[VERB CONTEXT]")
    );
    let shimmed_responses = seen
        .iter()
        .find(|r| r.path == "/v1/responses" && r.body.windows(6).any(|w| w == b"deploy"))
        .unwrap();
    assert_eq!(shimmed_responses.json()["input"][0]["role"], "developer");
    assert!(
        seen.iter()
            .all(|r| !r.body.windows(12).any(|w| w == b"freeze-check")),
        "direct answers never went upstream"
    );
}
