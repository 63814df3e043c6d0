//! The harness setups of `docs/proxy.md`, as a newcomer pastes them: a default server plus the
//! one setting each names lets the harness's request through the gate and the upstream
//! allowlist toward the vendor it names (which a test machine normally cannot reach, so the
//! request ends as `upstream_unreachable`), and without that setting the same request is refused.

use herma_test_support::{Backend, spawn_app};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PROXY_DOC: &str = include_str!("../../../../docs/proxy.md");

/// The text of the setup marked `<!-- setup: NAME -->`, up to the next heading.
fn setup(name: &str) -> &'static str {
    let marker = format!("<!-- setup: {name} -->");
    let start = PROXY_DOC
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/proxy.md has no setup `{name}`"));
    let rest = &PROXY_DOC[start + marker.len()..];
    &rest[..rest.find("\n### ").unwrap_or(rest.len())]
}

/// The `NAME=value` the setup's Herma command sets (the only setting it names).
fn herma_setting(text: &str) -> (String, String) {
    let line = text
        .lines()
        .find(|l| l.starts_with("HERMA_"))
        .expect("the setup names a Herma setting");
    let (name, value) = line.split_once('=').unwrap();
    let value = value.split_whitespace().next().unwrap();
    (name.to_owned(), value.to_owned())
}

/// The upstream the harness names in `X-Upstream-Base-Url`.
fn upstream(text: &str) -> String {
    let at = text
        .find("X-Upstream-Base-Url")
        .expect("an upstream header");
    let rest = &text[at..];
    let start = rest.find("https://").expect("an https upstream");
    rest[start..]
        .split(|c: char| c == '"' || c == '\\' || c.is_whitespace())
        .next()
        .unwrap()
        .to_owned()
}

async fn send(
    settings: &[(&str, &str)],
    path: &str,
    base: &str,
    body: Value,
) -> (StatusCode, Value) {
    let mut all = vec![("HERMA_UPSTREAM_CONNECT_TIMEOUT_MS", "2000")];
    all.extend_from_slice(settings);
    let app = spawn_app(Backend::Memory, &all).await;
    let key = app.key("route", None).await;
    let reply = app
        .client
        .post(app.url(path))
        .bearer_auth(&key)
        .header("X-Upstream-Base-Url", base)
        .header("X-Upstream-Api-Key", "sk-vendor-key")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = reply.status();
    (status, reply.json().await.unwrap_or(Value::Null))
}

async fn check(name: &str, path: &str, body: Value) {
    let text = setup(name);
    let (setting, value) = herma_setting(text);
    assert_eq!(setting, "HERMA_ALLOWED_UPSTREAM_HOSTS", "{name}");
    let base = upstream(text);
    let host = base.trim_start_matches("https://");
    assert!(
        value.split(',').any(|h| h == host),
        "{name}: {value} must allow {host}"
    );

    let (status, error) = send(&[], path, &base, body.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{name} on defaults: {error}");
    assert_eq!(error["error"]["code"], "upstream_host_refused", "{name}");

    // Past the allowlist Herma connects to the vendor: unreachable from this machine, or, where
    // the vendor answers, the vendor's own refusal of the fake key. Either way not Herma's.
    let (status, error) = send(&[(&setting, &value)], path, &base, body).await;
    assert_ne!(error["error"]["code"], "upstream_host_refused", "{name}");
    assert!(
        error["error"]["code"] == "upstream_unreachable" || status == StatusCode::UNAUTHORIZED,
        "{name} with {setting}: {status} {error}"
    );
}

#[tokio::test]
async fn claude_code_setup_works_on_defaults_plus_its_setting() {
    let text = setup("claude-code");
    assert!(text.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:7730\n"));
    check(
        "claude-code",
        "/v1/messages?beta=true",
        json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
}

#[tokio::test]
async fn codex_setup_works_on_defaults_plus_its_setting() {
    let text = setup("codex");
    for line in [
        "model_provider = \"herma\"",
        "base_url = \"http://127.0.0.1:7730/v1\"",
        "wire_api = \"responses\"",
        "env_key = \"HERMA_KEY\"",
    ] {
        assert!(text.contains(line), "the Codex setup lacks `{line}`");
    }
    assert!(
        text.lines().any(|l| l.starts_with("model = \"")),
        "the Codex setup names no model"
    );
    check(
        "codex",
        "/v1/responses",
        json!({"model": "gpt-5-codex", "input": "hi", "stream": true, "store": false}),
    )
    .await;
}

#[tokio::test]
async fn opencode_setup_works_on_defaults_plus_its_setting() {
    let text = setup("opencode");
    let json_start = text.find("```json\n").expect("an opencode.json") + 8;
    let json_end = json_start + text[json_start..].find("```").unwrap();
    let config: Value = serde_json::from_str(&text[json_start..json_end]).unwrap();
    let provider = &config["provider"]["herma"];
    assert_eq!(provider["options"]["baseURL"], "http://127.0.0.1:7730/v1");
    let model = config["model"].as_str().unwrap();
    let model_id = model.strip_prefix("herma/").expect("a herma/ model");
    assert!(provider["models"].get(model_id).is_some());
    check(
        "opencode",
        "/v1/chat/completions",
        json!({"model": model_id, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
}
