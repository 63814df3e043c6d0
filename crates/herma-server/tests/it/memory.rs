//! H13: deterministic entity memory, retry-error attribution and candidate provisions, on
//! SQLite and PostgreSQL.

use herma_test_support::mock_upstream::MockUpstream;
use herma_test_support::{Backend, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::req;

/// Turn `n` of a Claude Code-like session: the user's request, then n-1 rounds of a tool call
/// and its result, each result reporting a type error.
fn turn(n: usize) -> Value {
    let mut messages = vec![
        json!({"role": "user", "content": "Please deploy the fix in src/deploy.rs using `Deployer::run`, see tessera://nouns/deploys"}),
    ];
    for i in 1..n {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("toolu_{i}"), "name": "Bash", "input": {"command": "cargo build"}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": "error[E0308]: mismatched types\n --> src/deploy.rs:7:9", "is_error": true}]}));
    }
    json!({"model": "claude-test", "max_tokens": 512, "messages": messages})
}

async fn h13(backend: Backend) {
    let app = spawn_app(backend, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    for (path, body) in [
        (
            "/v1/context",
            json!({"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations first."}),
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
    for n in 1..=4 {
        let response = app
            .client
            .post(app.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("X-Upstream-Base-Url", mock.url())
            .header("x-claude-code-session-id", "session-1")
            .header("X-Herma-Project", "billing")
            .json(&turn(n))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.bytes().await.unwrap();
    }
    app.app.receipts.flush().await;
    app.app.memory.as_ref().unwrap().flush().await;

    // Entities, per caller and project, counted per turn.
    let memory = req(Method::GET, "/v1/memory?project=billing")
        .key(&key)
        .send(&app)
        .await
        .2;
    let items = memory["items"].as_array().unwrap();
    let find = |kind: &str, value: &str| {
        items
            .iter()
            .find(|e| e["kind"] == kind && e["value"] == value)
            .map(|e| e["count"].as_u64().unwrap())
    };
    assert_eq!(find("file_path", "src/deploy.rs"), Some(4));
    assert_eq!(find("code_symbol", "Deployer::run"), Some(4));
    assert_eq!(find("tessera_uri", "tessera://nouns/deploys"), Some(4));
    assert_eq!(find("error_signature", "rust:E0308"), Some(3));
    assert!(items.iter().all(|e| e["project_tag"] == "billing"));
    assert_eq!(
        req(Method::GET, "/v1/memory?project=other")
            .key(&key)
            .send(&app)
            .await
            .2["items"],
        json!([])
    );

    // The error in turn N is charged to the rule fired in turn N-1.
    let outcomes = req(Method::GET, "/v1/outcomes")
        .key(&key)
        .send(&app)
        .await
        .2;
    let outcomes = outcomes["items"].as_array().unwrap();
    let retries: Vec<u64> = outcomes
        .iter()
        .filter(|o| o["outcome"] == "retry_error")
        .map(|o| o["turn"].as_u64().unwrap())
        .collect();
    let mut sorted = retries.clone();
    sorted.sort();
    assert_eq!(sorted, [1, 2, 3]);
    assert!(
        outcomes
            .iter()
            .filter(|o| o["outcome"] == "retry_error")
            .all(|o| o["provision_id"] == "deploy" && o["error_signature"] == "rust:E0308")
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| o["outcome"] == "injected")
            .count(),
        4
    );

    // Insights: counts, rates, never-matched rules and valid candidates that are not active.
    let insights = req(Method::GET, "/v1/insights")
        .key(&key)
        .send(&app)
        .await
        .2;
    let deploy = insights["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["provision_id"] == "deploy")
        .unwrap()
        .clone();
    assert_eq!(
        (deploy["injected"].clone(), deploy["retry_errors"].clone()),
        (json!(4), json!(3))
    );
    assert_eq!(deploy["retry_error_rate"], 0.75);
    assert!(
        insights["never_matched"]
            .as_array()
            .unwrap()
            .contains(&json!("git.force-push"))
    );
    let candidates = insights["candidate_provisions"].as_array().unwrap();
    let ids: Vec<&str> = candidates
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"candidate.error.rust-e0308") && ids.contains(&"candidate.path.src"),
        "{ids:?}"
    );
    let own = req(Method::GET, "/v1/provisions")
        .key(&key)
        .send(&app)
        .await
        .2;
    assert_eq!(
        own["items"].as_array().unwrap().len(),
        1,
        "candidates are never active by themselves"
    );

    // Approving one creates it through the ordinary path (configure scope, harness, version 1).
    let unattested = req(
        Method::POST,
        "/v1/insights/candidates/candidate.error.rust-e0308",
    )
    .key(&key)
    .send(&app)
    .await;
    assert_eq!(unattested.0, StatusCode::FORBIDDEN);
    let approved = req(
        Method::POST,
        "/v1/insights/candidates/candidate.error.rust-e0308",
    )
    .key(&key)
    .harness("claude-code")
    .send(&app)
    .await;
    assert_eq!(approved.0, StatusCode::CREATED, "{}", approved.2);
    assert_eq!(approved.2["version"], 1);
    assert_eq!(approved.2["triggers"]["regex"], json!(["E0308"]));
    let again = req(Method::GET, "/v1/insights")
        .key(&key)
        .send(&app)
        .await
        .2;
    assert!(
        again["candidate_provisions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["id"] != "candidate.error.rust-e0308")
    );
    let missing = req(Method::POST, "/v1/insights/candidates/candidate.nope")
        .key(&key)
        .harness("claude-code")
        .send(&app)
        .await;
    assert_eq!(missing.0, StatusCode::NOT_FOUND);

    // Another caller sees none of it.
    let other = app.key("route", None).await;
    assert_eq!(
        req(Method::GET, "/v1/memory")
            .key(&other)
            .send(&app)
            .await
            .2["items"],
        json!([])
    );
    assert_eq!(
        req(Method::GET, "/v1/outcomes")
            .key(&other)
            .send(&app)
            .await
            .2["items"],
        json!([])
    );
}

#[tokio::test]
async fn h13_deterministic_entity_memory_retry_outcomes_and_candidate_insights_on_sqlite() {
    h13(Backend::Sqlite).await;
}

#[tokio::test]
async fn h13_deterministic_entity_memory_retry_outcomes_and_candidate_insights_on_postgres() {
    h13(Backend::Postgres).await;
}

/// A direct answer's own text is read for entities (as a relayed answer's is), and its rule
/// outcome is `responded_directly`, whether the answer was JSON or a stream.
#[tokio::test]
async fn a_direct_answers_text_is_remembered_like_a_relayed_one() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let created = req(Method::POST, "/v1/provisions")
        .key(&key)
        .harness("claude-code")
        .json(json!({
            "id": "rollback.howto",
            "action": "respond_directly",
            "triggers": {"keywords": ["rollback"]},
            "response": {"text": "Run `Deployer::rollback` — see tessera://nouns/rollbacks.\nThen check `HealthProbe`."}
        }))
        .send(&app)
        .await;
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.2);
    for stream in [false, true] {
        let response = app
            .client
            .post(app.url("/v1/messages"))
            .header("x-api-key", &key)
            .json(&json!({"model": "m", "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": "how do I rollback?"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.bytes().await.unwrap();
    }
    app.app.receipts.flush().await;
    app.app.memory.as_ref().unwrap().flush().await;

    let memory = req(Method::GET, "/v1/memory").key(&key).send(&app).await.2;
    let count = |kind: &str, value: &str| {
        memory["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == kind && e["value"] == value)
            .map(|e| e["count"].as_u64().unwrap())
    };
    assert_eq!(
        count("code_symbol", "Deployer::rollback"),
        Some(2),
        "{memory}"
    );
    assert_eq!(
        count("tessera_uri", "tessera://nouns/rollbacks"),
        Some(2),
        "{memory}"
    );
    assert_eq!(count("code_symbol", "HealthProbe"), Some(2), "{memory}");
    let outcomes = req(Method::GET, "/v1/outcomes")
        .key(&key)
        .send(&app)
        .await
        .2;
    let kinds: Vec<&Value> = outcomes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["outcome"])
        .collect();
    assert_eq!(kinds, [&json!("responded_directly"); 2], "{outcomes}");
}

#[tokio::test]
async fn slash_commands_are_not_remembered_as_file_paths() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("X-Upstream-Base-Url", mock.url())
        .json(&json!({"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": "/review the change in src/main.rs"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes().await.unwrap();
    app.app.memory.as_ref().unwrap().flush().await;
    let memory = req(Method::GET, "/v1/memory").key(&key).send(&app).await.2;
    let paths: Vec<&str> = memory["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "file_path")
        .map(|e| e["value"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["src/main.rs"]);
}

/// A relayed stream's text is read for entities from the events that ended within its first
/// 256 KiB (what memory keeps of an answer), however the upstream cut it into chunks: an
/// entity split across chunks is found, one after the limit is not.
#[tokio::test]
async fn a_relayed_streams_text_is_remembered_up_to_the_limit_across_chunks() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route", Some("claude-code")).await;
    let delta = |text: &str| {
        let data = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}});
        format!("event: content_block_delta\ndata: {data}\n\n")
    };
    let mut stream = String::new();
    stream.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n");
    stream.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    stream.push_str(&delta("Edit tessera://nouns/early with "));
    stream.push_str(&delta("`Planner::split` first. "));
    // About 300 KiB of events without text, then an entity past the limit.
    let ping = format!(
        "event: ping\ndata: {{\"type\":\"ping\",\"pad\":\"{}\"}}\n\n",
        "x".repeat(1000)
    );
    stream.push_str(&ping.repeat(300));
    stream.push_str(&delta("Then `Late::thing`."));
    stream.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    );
    stream.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n");
    stream.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");

    // One answer, in HTTP chunks cut inside events, inside the entity and inside a line end.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let cut = stream.find("nouns/early").unwrap() + 3;
    let upstream = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
        }
        socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n").await.unwrap();
        let bytes = stream.as_bytes();
        let mut at = 0;
        for end in [7, cut, cut + 40]
            .into_iter()
            .chain((cut + 40..bytes.len()).step_by(8191).skip(1))
            .chain([bytes.len()])
        {
            let piece = &bytes[at..end];
            socket
                .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await
                .unwrap();
            socket.write_all(piece).await.unwrap();
            socket.write_all(b"\r\n").await.unwrap();
            socket.flush().await.unwrap();
            at = end;
        }
        socket.write_all(b"0\r\n\r\n").await.unwrap();
    });
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("X-Upstream-Base-Url", &base)
        .json(&json!({"model": "m", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "plan the split"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let relayed = response.bytes().await.unwrap();
    assert!(relayed.len() > 300_000);
    upstream.await.unwrap();
    app.app.receipts.flush().await;
    app.app.memory.as_ref().unwrap().flush().await;

    let memory = req(Method::GET, "/v1/memory").key(&key).send(&app).await.2;
    let values: Vec<&str> = memory["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["value"].as_str().unwrap())
        .collect();
    assert!(values.contains(&"tessera://nouns/early"), "{memory}");
    assert!(values.contains(&"Planner::split"), "{memory}");
    assert!(!values.contains(&"Late::thing"), "{memory}");
}
