//! The proxy end to end against a local upstream that speaks each real wire format:
//! H03, H08, H09, H10, streaming without buffering, upstream and credential rules.

use futures_util::StreamExt;
use herma_test_support::mock_upstream::{MockUpstream, TEXT};
use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{assert_no_socket_details, configure, receipt, req};

const PROTOCOLS: [(&str, &str); 3] = [
    ("/v1/chat/completions", "chat"),
    ("/v1/responses", "responses"),
    ("/v1/messages", "messages"),
];

/// A minimal request of each protocol with `text` as the user's prompt.
pub(crate) fn body(path: &str, model: &str, text: &str, stream: bool) -> Value {
    match path {
        "/v1/messages" => {
            json!({"model": model, "max_tokens": 256, "stream": stream, "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": text}]})
        }
        "/v1/responses" => {
            json!({"model": model, "stream": stream, "instructions": "You are terse.", "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}]})
        }
        _ => {
            json!({"model": model, "stream": stream, "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]})
        }
    }
}

/// Sends a proxied request: the Herma key as the API key, the mock as the upstream.
async fn send(
    app: &TestApp,
    mock: &MockUpstream,
    key: &str,
    path: &str,
    body: Value,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut r = app
        .client
        .post(app.url(path))
        .json(&body)
        .header("X-Upstream-Base-Url", mock.url());
    r = if path == "/v1/messages" {
        r.header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
    } else {
        r.bearer_auth(key)
    };
    for (name, value) in extra {
        r = r.header(*name, *value);
    }
    r.send().await.unwrap()
}

fn sse_events(text: &str) -> Vec<(Option<String>, String)> {
    let mut reader = herma_core::wire::sse::Reader::default();
    let mut out = Vec::new();
    reader.feed(text.as_bytes(), &mut |e| {
        out.push((e.event.clone(), e.data.clone()))
    });
    out
}

#[tokio::test]
async fn h10_direct_response_short_circuits_upstream_across_all_protocols() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(&app, &key, "/v1/provisions", json!({"id": "freeze", "action": "respond_directly", "triggers": {"keywords": ["deploy"]}, "response": {"text": "Deploys are frozen until Monday."}})).await;
    for (path, _) in PROTOCOLS {
        for stream in [false, true] {
            let response = send(
                &app,
                &mock,
                &key,
                path,
                body(path, "m-1", "please deploy now", stream),
                &[],
            )
            .await;
            assert_eq!(response.status(), StatusCode::OK);
            let receipt_id = response.headers()["x-herma-receipt"]
                .to_str()
                .unwrap()
                .to_owned();
            let content_type = response.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_owned();
            let text = response.text().await.unwrap();
            if stream {
                assert!(
                    content_type.starts_with("text/event-stream"),
                    "{content_type}"
                );
                let events = sse_events(&text);
                let joined: String = events.iter().map(|(_, d)| d.as_str()).collect();
                assert!(
                    joined.contains("Deploys are frozen until Monday."),
                    "{path}: {text}"
                );
                match path {
                    "/v1/chat/completions" => assert_eq!(events.last().unwrap().1, "[DONE]"),
                    "/v1/responses" => assert_eq!(
                        events.last().unwrap().0.as_deref(),
                        Some("response.completed")
                    ),
                    _ => assert_eq!(events.last().unwrap().0.as_deref(), Some("message_stop")),
                }
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                let answer = match path {
                    "/v1/chat/completions" => v["choices"][0]["message"]["content"].clone(),
                    "/v1/responses" => v["output"][0]["content"][0]["text"].clone(),
                    _ => v["content"][0]["text"].clone(),
                };
                assert_eq!(answer, "Deploys are frozen until Monday.", "{path}");
                assert_eq!(v["model"], "m-1");
            }
            let r = receipt(&app, &key, &receipt_id).await;
            assert_eq!(r["action"], "responded_directly");
            assert_eq!(r["matched"][0]["provision_id"], "freeze");
            assert_eq!(r["matched"][0]["trigger"], "keyword:deploy");
            assert_eq!(r["sha256"].as_str().unwrap().len(), 64);
            assert!(r.get("upstream_status").is_none());
        }
    }
    assert!(mock.requests().is_empty(), "no upstream connection at all");
}

#[tokio::test]
async fn h09_shims_reach_the_upstream_where_each_protocol_expects_system_context() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(&app, &key, "/v1/context", json!({"id": "deploy.checklist", "kind": "verb", "title": "Deploy checklist", "schema_or_body": "Run the migrations before the canary."})).await;
    configure(&app, &key, "/v1/context", json!({"id": "billing", "kind": "noun", "schema_or_body": "The billing service owns invoices."})).await;
    configure(&app, &key, "/v1/provisions", json!({"id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist", "billing", "missing.ref"]})).await;
    for (i, (path, _)) in PROTOCOLS.iter().enumerate() {
        let sent = body(path, "m-1", "deploy the billing fix", false);
        let response = send(&app, &mock, &key, path, sent.clone(), &[]).await;
        assert_eq!(response.status(), StatusCode::OK);
        let receipt_id = response.headers()["x-herma-receipt"]
            .to_str()
            .unwrap()
            .to_owned();
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["model"], "m-1", "the upstream's answer is relayed");
        let upstream = mock.requests()[i].json();
        let shim = match *path {
            "/v1/messages" => {
                let system = upstream["system"].as_array().unwrap();
                assert_eq!(
                    system[0], sent["system"][0],
                    "the cache-marked block is untouched"
                );
                assert_eq!(upstream["messages"], sent["messages"]);
                system.last().unwrap()["text"].as_str().unwrap().to_owned()
            }
            "/v1/responses" => {
                let input = upstream["input"].as_array().unwrap();
                assert_eq!(input[0]["role"], "developer", "before the latest user item");
                assert_eq!(input[1], sent["input"][0]);
                assert_eq!(upstream["instructions"], sent["instructions"]);
                input[0]["content"][0]["text"].as_str().unwrap().to_owned()
            }
            _ => {
                let messages = upstream["messages"].as_array().unwrap();
                assert_eq!(messages[0], sent["messages"][0]);
                assert_eq!(messages[1]["role"], "system");
                assert_eq!(
                    messages[2], sent["messages"][1],
                    "never after the user's prompt"
                );
                messages[1]["content"].as_str().unwrap().to_owned()
            }
        };
        assert_eq!(
            shim,
            "[NOUN CONTEXT]\n## billing (billing, v1)\nThe billing service owns invoices.\n\n[VERB CONTEXT]\n## Deploy checklist (deploy.checklist, v1)\nRun the migrations before the canary."
        );
        let r = receipt(&app, &key, &receipt_id).await;
        assert_eq!(r["action"], "shimmed");
        assert_eq!(r["upstream_status"], 200);
        let refs: Vec<_> = r["shimmed_context_refs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].clone(), s["version"].clone()))
            .collect();
        assert_eq!(
            refs,
            [
                (json!("billing"), json!(1)),
                (json!("deploy.checklist"), json!(1))
            ]
        );
        assert_eq!(r["unresolved_context_refs"], json!(["missing.ref"]));
        assert_eq!(
            r["usage"]["output_tokens"]
                .as_u64()
                .or(r["usage"]["completion_tokens"].as_u64()),
            Some(7)
        );
    }
}

#[tokio::test]
async fn h08_once_per_conversation_provisions_shim_once_per_conversation() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "c", "kind": "detail", "schema_or_body": "Once."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({"id": "once", "action": "shim_context", "once_per_conversation": true, "triggers": {"keywords": ["deploy"]}, "context_refs": ["c"]})).await;
    let shimmed = |r: &herma_test_support::mock_upstream::Recorded| {
        r.json()["system"].as_array().is_some_and(|s| s.len() == 2)
    };
    let path = "/v1/messages";
    for session in ["s-1", "s-1", "s-2"] {
        send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "deploy", false),
            &[("x-claude-code-session-id", session)],
        )
        .await;
    }
    let seen: Vec<bool> = mock.requests().iter().map(shimmed).collect();
    assert_eq!(seen, [true, false, true], "once per conversation identity");

    // Two concurrent requests of one session (opencode sends a title and an answer request).
    let (a, b) = tokio::join!(
        send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "deploy", false),
            &[("x-herma-conversation-id", "race")]
        ),
        send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "deploy", false),
            &[("x-herma-conversation-id", "race")]
        ),
    );
    assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
    let race: usize = mock.requests()[3..].iter().filter(|r| shimmed(r)).count();
    assert_eq!(race, 1, "exactly one of the two carries the shim");
}

#[tokio::test]
async fn h03_contributor_tier_models_are_refused_before_forwarding() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        for model in [
            "vendor/model-contributor",
            "Model:CONTRIBUTOR",
            "x-contributor-7b",
        ] {
            let response = send(
                &app,
                &mock,
                &key,
                path,
                body(path, model, "hello", false),
                &[],
            )
            .await;
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
            let v: Value = response.json().await.unwrap();
            // Both shapes carry Herma's code in `error.code`.
            assert_eq!(
                v["error"]["code"], "contributor_tier_refused",
                "{path}: {v}"
            );

            if path == "/v1/messages" {
                assert_eq!(v["type"], "error");
                assert_eq!(v["error"]["type"], "permission_error");
            }
        }
    }
    let count = app
        .client
        .post(app.url("/v1/messages/count_tokens"))
        .header("x-api-key", &key)
        .header("X-Upstream-Base-Url", mock.url())
        .json(&json!({"model": "a-contributor", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(count.status(), StatusCode::FORBIDDEN);
    assert!(mock.requests().is_empty(), "nothing reached the upstream");
}

#[tokio::test]
async fn sse_is_relayed_before_the_upstream_finishes() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        let response = send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "hi", true),
            &[("x-mock-scenario", "hold")],
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut stream = response.bytes_stream();
        // The upstream has sent only its first event and is holding the rest back; the client
        // already has that event.
        let first = stream.next().await.unwrap().unwrap();
        let first = String::from_utf8_lossy(&first).into_owned();
        assert!(
            first.starts_with("event: message_start")
                || first.starts_with("event: response.created")
                || first.starts_with("data: {"),
            "{first}"
        );
        assert!(
            !first.contains("upstream."),
            "only the first event so far: {first}"
        );
        mock.release();
        let mut rest = String::new();
        while let Some(chunk) = stream.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        let all = format!("{first}{rest}");
        let deltas: String = sse_events(&all)
            .iter()
            .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| {
                v["delta"]["text"]
                    .as_str()
                    .or(v["delta"].as_str())
                    .or(v["choices"][0]["delta"]["content"].as_str())
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(deltas, TEXT, "{path}");
    }
}

#[tokio::test]
async fn a_client_disconnect_cancels_the_upstream_request() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let path = "/v1/messages";
    // A long, paced stream: the upstream is still producing when the client leaves.
    let pacing = [
        ("x-mock-scenario", "hold"),
        ("x-mock-chunks", "2000"),
        ("x-mock-gap-ms", "2"),
    ];
    let response = send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "hi", true),
        &pacing,
    )
    .await;
    let mut stream = response.bytes_stream();
    stream.next().await.unwrap().unwrap();
    drop(stream);

    // Herma drops its upstream stream when the client goes; the mock's next write then fails.
    let mut cancelled = false;
    for _ in 0..200 {
        mock.release();
        if mock.cancelled_streams() > 0 {
            cancelled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(cancelled, "the upstream stream was closed");
    app.app.receipts.flush().await;
}

#[tokio::test]
async fn upstream_errors_keep_their_status_body_and_headers() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        let response = send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "hi", false),
            &[("x-mock-scenario", "rate_limit")],
        )
        .await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers().clone();
        let v: Value = response.json().await.unwrap();
        if path == "/v1/messages" {
            assert_eq!(headers["retry-after"], "7");
            assert_eq!(v["error"]["type"], "rate_limit_error");
        } else {
            assert_eq!(headers["retry-after-ms"], "7000");
            assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        }
        assert!(headers.contains_key("x-herma-receipt"));
    }
    // A stream that fails midway is relayed as the upstream sent it.
    let response = send(
        &app,
        &mock,
        &key,
        "/v1/messages",
        body("/v1/messages", "m", "hi", true),
        &[("x-mock-scenario", "error_event")],
    )
    .await;
    let text = response.text().await.unwrap();
    assert!(
        text.contains("event: error") && text.contains("overloaded_error"),
        "{text}"
    );
}

#[tokio::test]
async fn a_receipt_is_readable_as_soon_as_its_response_has_ended() {
    // Receipts are written in batches, a moment after their responses; a read of one still
    // queued finds it.
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        for stream in [false, true] {
            let response = send(&app, &mock, &key, path, body(path, "m", "hi", stream), &[]).await;
            let id = response.headers()["x-herma-receipt"]
                .to_str()
                .unwrap()
                .to_owned();
            response.bytes().await.unwrap();
            let got = req(Method::GET, format!("/v1/receipts/{id}"))
                .key(&key)
                .send(&app)
                .await;
            assert_eq!(got.0, StatusCode::OK, "{path} stream={stream}: {}", got.2);
            assert_eq!(got.2["id"], id.as_str());
        }
    }
    let missing = req(
        Method::GET,
        "/v1/receipts/rcpt_000000000000ffffffffffffffffffff",
    )
    .key(&key)
    .send(&app)
    .await;
    assert_eq!(missing.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_forwarded_chat_stream_with_include_usage_keeps_its_usage_in_the_receipt() {
    // OpenAI puts `"usage": null` in every chunk and the usage in the last one, which has no
    // choices: the chunks are relayed untouched and the receipt keeps the last one's usage.
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let path = "/v1/chat/completions";
    let mut sent = body(path, "m", "hi", true);
    sent["stream_options"] = json!({"include_usage": true});
    let response = send(&app, &mock, &key, path, sent, &[]).await;
    let id = response.headers()["x-herma-receipt"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = sse_events(&response.text().await.unwrap());
    let (done, chunks) = events.split_last().unwrap();
    assert_eq!(done.1, "[DONE]");
    let (last, before) = chunks.split_last().unwrap();
    assert!(before.len() > 1);
    for (_, data) in before {
        let chunk: Value = serde_json::from_str(data).unwrap();
        assert_eq!(chunk.get("usage"), Some(&Value::Null), "{data}");
    }
    let last: Value = serde_json::from_str(&last.1).unwrap();
    assert_eq!(last["choices"], json!([]));
    let r = receipt(&app, &key, &id).await;
    assert_eq!(r["usage"], last["usage"]);
    assert_eq!(r["usage"]["total_tokens"], 18);
    assert_eq!(r["stream_end"], "completed");
}

#[tokio::test]
async fn redirects_are_refused_and_never_followed() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let response = send(
        &app,
        &mock,
        &key,
        "/v1/chat/completions",
        body("/v1/chat/completions", "m", "hi", false),
        &[("x-mock-scenario", "redirect")],
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_redirect_refused");
    assert_eq!(
        mock.requests().len(),
        1,
        "one request, no second one to the redirect target"
    );
}

#[tokio::test]
async fn disallowed_hosts_are_refused_before_any_byte_is_sent() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;
    // 127.0.0.2 is loopback too, but not on the allowlist (localhost, 127.0.0.1).
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    for base in [
        format!("http://127.0.0.2:{port}"),
        "https://evil.example".to_owned(),
    ] {
        let response = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(&key)
            .header("X-Upstream-Base-Url", &base)
            .header("X-Upstream-Api-Key", "sk-caller")
            .json(&body("/v1/chat/completions", "m", "hi", false))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["error"]["code"], "upstream_host_refused");
    }
    let accepted =
        tokio::time::timeout(std::time::Duration::from_millis(50), listener.accept()).await;
    assert!(
        accepted.is_err(),
        "no connection was ever made to the refused host"
    );
}

#[tokio::test]
async fn the_operator_key_is_bound_to_its_origin_and_herma_keys_never_leave() {
    let operator = MockUpstream::start().await;
    let other = MockUpstream::start().await;
    let operator_url = operator.url();
    let app = spawn_app(
        Backend::Memory,
        &[
            ("HERMA_UPSTREAM_BASE_URL", &operator_url),
            ("HERMA_UPSTREAM_API_KEY", "sk-operator"),
        ],
    )
    .await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        // No base header: the operator's upstream, with the operator's key.
        let mut r = app
            .client
            .post(app.url(path))
            .json(&body(path, "m", "hi", false));
        r = if path == "/v1/messages" {
            r.header("x-api-key", &key)
        } else {
            r.bearer_auth(&key)
        };
        assert_eq!(r.send().await.unwrap().status(), StatusCode::OK);
        // Another upstream: without the operator's key.
        assert_eq!(
            send(&app, &other, &key, path, body(path, "m", "hi", false), &[])
                .await
                .status(),
            StatusCode::OK
        );
        // Another upstream with the caller's own key.
        assert_eq!(
            send(
                &app,
                &other,
                &key,
                path,
                body(path, "m", "hi", false),
                &[("X-Upstream-Api-Key", "sk-caller")]
            )
            .await
            .status(),
            StatusCode::OK
        );
    }
    for r in operator.requests() {
        let credential = r.header("x-api-key").or(r.header("authorization")).unwrap();
        assert!(
            credential == "sk-operator" || credential == "Bearer sk-operator",
            "{credential}"
        );
    }
    let others = other.requests();
    assert_eq!(others.len(), 6);
    for (i, r) in others.iter().enumerate() {
        let credential = r.header("x-api-key").or(r.header("authorization"));
        if i % 2 == 0 {
            assert_eq!(
                credential, None,
                "the operator key never goes to another origin"
            );
        } else {
            assert!(credential.is_some_and(|c| c.ends_with("sk-caller")));
        }
    }
    for r in operator.requests().iter().chain(&others) {
        for (name, value) in &r.headers {
            assert!(!value.contains("hmk_"), "the Herma key leaked in {name}");
            assert!(
                !name.starts_with("x-herma-") && !name.starts_with("x-upstream-"),
                "{name} was forwarded"
            );
        }
    }
}

#[tokio::test]
async fn a_paused_provider_stops_operator_funded_forwarding() {
    let app = spawn_app(
        Backend::Memory,
        &[
            ("HERMA_UPSTREAM_BASE_URL", "https://api.anthropic.com"),
            ("HERMA_UPSTREAM_API_KEY", "sk-operator"),
            ("HERMA_CONVERSATION_DISABLED_PROVIDERS", "[\"anthropic\"]"),
        ],
    )
    .await;
    let key = app.key("route", None).await;
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .json(&body("/v1/messages", "m", "hi", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["code"], "provider_operator_disabled");
}

#[tokio::test]
async fn query_strings_protocol_headers_and_unchanged_bodies_pass_byte_for_byte() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let raw = include_str!("../../../herma-core/fixtures/requests/claude_code_messages.json")
        .replace("\"stream\": true", "\"stream\": false");
    let response = app
        .client
        .post(app.url("/v1/messages?beta=true"))
        .header("x-api-key", &key)
        .header("X-Upstream-Base-Url", mock.url())
        .header("anthropic-version", "2023-06-01")
        .header(
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14",
        )
        .header("content-type", "application/json")
        .header("x-claude-code-session-id", "s")
        .body(raw.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let r = &mock.requests()[0];
    assert_eq!(
        (r.path.as_str(), r.query.as_deref()),
        ("/v1/messages", Some("beta=true"))
    );
    assert_eq!(
        r.header("anthropic-beta"),
        Some("claude-code-20250219,interleaved-thinking-2025-05-14")
    );
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("x-claude-code-session-id"), Some("s"));
    assert_eq!(
        r.body,
        raw.as_bytes(),
        "no rule fired: the body is forwarded byte for byte"
    );
    let models = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(&key)
        .header("X-Upstream-Base-Url", mock.url())
        .send()
        .await
        .unwrap();
    assert_eq!(
        models.json::<Value>().await.unwrap()["data"][0]["id"],
        "mock-model"
    );
}

#[tokio::test]
async fn proxied_routes_refuse_bad_keys_in_each_protocols_error_shape() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let configure_only = app.key("configure", Some("codex")).await;
    for (path, _) in PROTOCOLS {
        let response = send(
            &app,
            &mock,
            "hmk_0000000000000000_0000000000000000000000000000000000000000000000000000000000000000",
            path,
            body(path, "m", "hi", false),
            &[],
        )
        .await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");
        let scoped = send(
            &app,
            &mock,
            &configure_only,
            path,
            body(path, "m", "hi", false),
            &[],
        )
        .await;
        assert_eq!(
            scoped.status(),
            StatusCode::FORBIDDEN,
            "a key without the route scope"
        );
    }
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", "nope")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::UNAUTHORIZED,
        "authentication comes before parsing"
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn dry_run_shows_matches_and_the_shim_and_persists_nothing() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "tf", "kind": "verb", "schema_or_body": "Run terraform fmt."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({"id": "terraform", "action": "shim_context", "once_per_conversation": true, "triggers": {"paths": ["**/*.tf"]}, "context_refs": ["tf"]})).await;
    let request = json!({"protocol": "chat_completions", "body": body("/v1/chat/completions", "m", "edit infra/main.tf", false), "headers": {"x-herma-conversation-id": "dry"}});
    for _ in 0..2 {
        let got = req(Method::POST, "/v1/dry-run")
            .key(&key)
            .json(request.clone())
            .send(&app)
            .await;
        assert_eq!(got.0, StatusCode::OK, "{}", got.2);
        let report = got.2;
        assert_eq!(report["persisted"], false);
        assert_eq!(
            report["decision"], "shim_context",
            "dry runs never spend a once-per-conversation claim"
        );
        assert_eq!(report["tiers"]["keyword"][0]["trigger"], "path:**/*.tf");
        assert_eq!(report["envelope"]["paths"], json!(["infra/main.tf"]));
        assert!(
            report["shim"]["text"]
                .as_str()
                .unwrap()
                .contains("Run terraform fmt.")
        );
        assert_eq!(
            report["shim"]["placement"],
            "as a system message just before the latest user message"
        );
    }
    let direct = req(Method::POST, "/v1/dry-run")
        .key(&key)
        .json(json!({"protocol": "messages", "body": body("/v1/messages", "m", "/herma", true)}))
        .send(&app)
        .await;
    assert_eq!(direct.2["decision"], "respond_directly");
    assert_eq!(direct.2["provision_id"], "herma.help");
    assert!(
        direct.2["direct_response"]
            .as_str()
            .unwrap()
            .contains("message_stop")
    );
    let bad = req(Method::POST, "/v1/dry-run")
        .key(&key)
        .json(json!({"protocol": "carrier_pigeon", "body": {}}))
        .send(&app)
        .await;
    assert_eq!(bad.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bad.2["errors"][0]["pointer"], "/protocol");
}

#[tokio::test]
async fn the_rule_index_is_rebuilt_only_when_a_provision_changes() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let path = "/v1/chat/completions";
    send(&app, &mock, &key, path, body(path, "m", "hi", false), &[]).await;
    let after_first = app.app.rules.rebuilds();
    for _ in 0..3 {
        app.clock.advance_millis(5_000);
        send(&app, &mock, &key, path, body(path, "m", "hi", false), &[]).await;
    }
    assert_eq!(
        app.app.rules.rebuilds(),
        after_first,
        "revisions unchanged: no rebuild"
    );
    configure(&app, &key, "/v1/provisions", json!({"id": "x", "action": "respond_directly", "triggers": {"keywords": ["hi"]}, "response": {"text": "hello"}})).await;
    let response = send(&app, &mock, &key, path, body(path, "m", "hi", false), &[]).await;
    assert_eq!(
        response.json::<Value>().await.unwrap()["choices"][0]["message"]["content"],
        "hello",
        "the change applies at once"
    );
    assert_eq!(app.app.rules.rebuilds(), after_first + 1);
    // A change made by another instance sharing the store shows up once the cache expires.
    let other_scope =
        herma_core::CallerScope::parse(&format!("key:{}", TestApp::key_id(&key))).unwrap();
    let mut spec: herma_core::model::ProvisionSpec = serde_json::from_value(json!({"id": "x", "action": "respond_directly", "triggers": {"keywords": ["hi"]}, "response": {"text": "changed elsewhere"}})).unwrap();
    spec.priority = 1;
    use herma_store::DocumentStoreExt;
    app.app
        .store
        .provisions()
        .update(&other_scope, &spec, 1, app.app.clock.now())
        .await
        .unwrap();
    app.clock.advance_millis(1_000);
    let response = send(&app, &mock, &key, path, body(path, "m", "hi", false), &[]).await;
    assert_eq!(
        response.json::<Value>().await.unwrap()["choices"][0]["message"]["content"],
        "changed elsewhere"
    );
}

#[tokio::test]
async fn a_failed_forward_keeps_its_receipt_and_gives_once_only_claims_back() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "c", "kind": "detail", "schema_or_body": "Once."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({"id": "once", "action": "shim_context", "once_per_conversation": true, "triggers": {"keywords": ["deploy"]}, "context_refs": ["c"]})).await;
    let path = "/v1/messages";
    // A port nothing listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let response = app
        .client
        .post(app.url(path))
        .header("x-api-key", &key)
        .header("X-Upstream-Base-Url", format!("http://127.0.0.1:{closed}"))
        .header("x-herma-conversation-id", "conv")
        .json(&body(path, "m", "deploy", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let receipt_id = response.headers()["x-herma-receipt"]
        .to_str()
        .unwrap()
        .to_owned();
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_unreachable");
    let r = receipt(&app, &key, &receipt_id).await;
    assert_eq!(r["error"], "upstream_unreachable");
    // The shim never reached a model, so the retry still gets it; an upstream error gives it back too.
    send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "deploy", false),
        &[
            ("x-herma-conversation-id", "conv"),
            ("x-mock-scenario", "rate_limit"),
        ],
    )
    .await;
    send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "deploy", false),
        &[("x-herma-conversation-id", "conv")],
    )
    .await;
    send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "deploy", false),
        &[("x-herma-conversation-id", "conv")],
    )
    .await;
    let shimmed: Vec<bool> = mock
        .requests()
        .iter()
        .map(|r| r.json()["system"].as_array().is_some_and(|s| s.len() == 2))
        .collect();
    assert_eq!(shimmed, [true, true, false]);
    // A refused host spends nothing either.
    let refused = app
        .client
        .post(app.url(path))
        .header("x-api-key", &key)
        .header("X-Upstream-Base-Url", "https://elsewhere.example")
        .header("x-herma-conversation-id", "fresh")
        .json(&body(path, "m", "deploy", false))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "deploy", false),
        &[("x-herma-conversation-id", "fresh")],
    )
    .await;
    assert!(
        mock.requests().last().unwrap().json()["system"]
            .as_array()
            .is_some_and(|s| s.len() == 2)
    );
}

#[tokio::test]
async fn a_once_only_shim_is_not_spent_when_a_direct_answer_decides() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "c", "kind": "detail", "schema_or_body": "Context."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({"id": "s1", "priority": 30, "action": "shim_context", "once_per_conversation": true, "triggers": {"keywords": ["alpha", "both"]}, "context_refs": ["c"]})).await;
    configure(&app, &key, "/v1/provisions", json!({"id": "r", "priority": 20, "action": "respond_directly", "triggers": {"keywords": ["both"]}, "response": {"text": "answered"}})).await;
    configure(&app, &key, "/v1/provisions", json!({"id": "s2", "priority": 10, "action": "shim_context", "once_per_conversation": true, "triggers": {"keywords": ["beta", "both"]}, "context_refs": ["c"]})).await;
    let path = "/v1/chat/completions";
    let conv = [("x-herma-conversation-id", "conv")];
    send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "alpha", false),
        &conv,
    )
    .await; // s1 applies, once
    let answered: Value = send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "both", false),
        &conv,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(
        answered["choices"][0]["message"]["content"], "answered",
        "s1 is spent, so r decides"
    );
    send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "beta", false),
        &conv,
    )
    .await; // s2 was never used
    let shims: Vec<usize> = mock
        .requests()
        .iter()
        .map(|r| {
            r.json()["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "system")
                .count()
                - 1
        })
        .collect();
    assert_eq!(shims, [1, 1], "both upstream requests carried their shim");
}

#[tokio::test]
async fn herma_keys_are_refused_as_upstream_keys_and_upstream_herma_headers_are_dropped() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let path = "/v1/chat/completions";
    let response = send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "hi", false),
        &[("X-Upstream-Api-Key", "hmk_0123456789abcdef_leaked")],
    )
    .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(mock.requests().is_empty());
    let ok = send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "hi", false),
        &[("x-mock-scenario", "spoof")],
    )
    .await;
    let receipts: Vec<_> = ok
        .headers()
        .get_all("x-herma-receipt")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        receipts.len(),
        1,
        "only Herma's own receipt header: {receipts:?}"
    );
    assert!(receipts[0].starts_with("rcpt_"));
}

#[tokio::test]
async fn shimmed_entries_name_their_uri_in_the_proxy_and_in_dry_runs() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(&app, &key, "/v1/context", json!({"id": "billing", "kind": "noun", "uri": "https://wiki.example.com/billing", "schema_or_body": "The billing service owns invoices."})).await;
    configure(&app, &key, "/v1/provisions", json!({"id": "billing", "action": "shim_context", "triggers": {"keywords": ["invoice"]}, "context_refs": ["billing"]})).await;
    let expected = "[NOUN CONTEXT]\n## billing (billing, v1)\nURI: https://wiki.example.com/billing\nThe billing service owns invoices.";

    let report = crate::dry_run(&app, &key, "where is the invoice code").await;
    assert_eq!(report["shim"]["text"], expected, "{report:#}");

    let sent = body(
        "/v1/chat/completions",
        "m-1",
        "where is the invoice code",
        false,
    );
    let response = send(&app, &mock, &key, "/v1/chat/completions", sent, &[]).await;
    assert_eq!(response.status(), StatusCode::OK);
    let upstream = mock.requests()[0].json();
    let system = upstream["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "system")
        .cloned()
        .unwrap();
    assert_eq!(system["content"], expected);
}

#[tokio::test]
async fn a_repeated_model_cannot_smuggle_a_contributor_model_past_the_check() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        // `{"model":"x-contributor-1", …, "model":"m"}`: Herma would read `m`, an upstream
        // reading the first value would run the contributor model.
        let text = body(path, "m", "hello", false).to_string();
        let smuggled = text.replacen('{', "{\"model\":\"x-contributor-1\",", 1);
        let mut r = app
            .client
            .post(app.url(path))
            .header("content-type", "application/json")
            .header("X-Upstream-Base-Url", mock.url())
            .body(smuggled);
        r = if path == "/v1/messages" {
            r.header("x-api-key", &key)
                .header("anthropic-version", "2023-06-01")
        } else {
            r.bearer_auth(&key)
        };
        let response = r.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_json", "{path}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("`model`"),
            "{path}: {v}"
        );
    }
    assert!(mock.requests().is_empty(), "nothing was forwarded");
}

/// A local port nothing listens on.
async fn closed_port() -> u16 {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn connection_errors_reach_the_client_as_a_fixed_sentence_without_socket_details() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;
    let port = closed_port().await;
    let base = format!("http://127.0.0.1:{port}");
    let mut sentences = Vec::new();
    for (method, path) in [
        (Method::POST, "/v1/chat/completions"),
        (Method::POST, "/v1/responses"),
        (Method::POST, "/v1/messages"),
        (Method::GET, "/v1/models"),
    ] {
        let mut request = app
            .client
            .request(method.clone(), app.url(path))
            .header("X-Upstream-Base-Url", &base);
        request = if path == "/v1/messages" {
            request
                .header("x-api-key", &key)
                .header("anthropic-version", "2023-06-01")
        } else {
            request.bearer_auth(&key)
        };
        if method == Method::POST {
            request = request.json(&body(path, "m", "hi", false));
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{path}");
        let text = response.text().await.unwrap();
        assert_no_socket_details(&text, port);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], "upstream_unreachable", "{path}: {text}");
        sentences.push(v["error"]["message"].as_str().unwrap().to_owned());
    }
    sentences.dedup();
    assert_eq!(
        sentences,
        ["the upstream 127.0.0.1 could not be reached"],
        "one fixed sentence in every protocol's shape"
    );
}

#[tokio::test]
async fn upstream_host_names_are_normalized_before_the_allowlist_and_the_request() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let port = mock.addr.port();
    let path = "/v1/chat/completions";
    // The fully qualified and the upper-case spellings are `localhost` itself: they reach the
    // same mock, sent as `localhost` (never handed to an outside resolver with the dot).
    for base in [
        format!("http://localhost.:{port}"),
        format!("http://LOCALHOST:{port}"),
        format!("http://LocalHost.:{port}/v1"),
    ] {
        let response = app
            .client
            .post(app.url(path))
            .bearer_auth(&key)
            .header("X-Upstream-Base-Url", &base)
            .json(&body(path, "m", "hi", false))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{base}");
        let seen = mock.requests().last().unwrap().clone();
        assert_eq!(
            seen.header("host"),
            Some(format!("localhost:{port}").as_str()),
            "{base}"
        );
    }
    assert_eq!(mock.requests().len(), 3);
    // Only one trailing dot is the DNS root: `localhost..` is not an allowlisted name.
    let response = app
        .client
        .post(app.url(path))
        .bearer_auth(&key)
        .header("X-Upstream-Base-Url", format!("http://localhost..:{port}"))
        .json(&body(path, "m", "hi", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_host_refused");
    assert_eq!(mock.requests().len(), 3, "nothing was sent");
}

/// How each forwarded body ended is in its receipt and counted in `/metrics` (issue 17, 5).
#[tokio::test]
async fn how_a_forwarded_body_ended_is_in_its_receipt_and_metrics() {
    let app = spawn_app(
        Backend::Sqlite,
        &[("HERMA_UPSTREAM_IDLE_TIMEOUT_MS", "300")],
    )
    .await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let id_of = |response: &reqwest::Response| {
        response.headers()["x-herma-receipt"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let mut expected = Vec::new();
    // Whole bodies: JSON and each protocol's stream through its last event.
    for (path, _) in PROTOCOLS {
        for stream in [false, true] {
            let response = send(&app, &mock, &key, path, body(path, "m", "hi", stream), &[]).await;
            let id = id_of(&response);
            response.bytes().await.unwrap();
            expected.push((id, "completed"));
        }
    }
    // A stream whose connection closes halfway, cleanly.
    for (path, _) in PROTOCOLS {
        let response = send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "hi", true),
            &[("x-mock-scenario", "cut")],
        )
        .await;
        let id = id_of(&response);
        let text = response.text().await.unwrap();
        assert!(
            !text.contains("[DONE]") && !text.contains("message_stop"),
            "{text}"
        );
        expected.push((id, "upstream_closed_early"));
    }
    // A stream that goes silent past the idle timeout.
    let path = "/v1/messages";
    let response = send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "hi", true),
        &[("x-mock-scenario", "hold")],
    )
    .await;
    let id = id_of(&response);
    let _ = response.bytes().await;
    expected.push((id, "idle_timeout"));
    // A client that goes away mid-stream.
    let response = send(
        &app,
        &mock,
        &key,
        path,
        body(path, "m", "hi", true),
        &[("x-mock-scenario", "hold")],
    )
    .await;
    let id = id_of(&response);
    let mut stream = response.bytes_stream();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    mock.release();
    expected.push((id, "client_gone"));

    for (id, end) in &expected {
        // The receipt is written when the body is dropped: wait for it, not for a time.
        let mut seen = Value::Null;
        for _ in 0..500 {
            app.app.receipts.flush().await;
            let got = req(Method::GET, format!("/v1/receipts/{id}"))
                .key(&key)
                .send(&app)
                .await;
            if got.0 == StatusCode::OK {
                seen = got.2;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(seen["stream_end"], *end, "{seen}");
        assert_eq!(seen["upstream_status"], 200);
    }
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    for (line, count) in [
        ("protocol=\"messages\",end=\"completed\"", 2),
        (
            "protocol=\"chat_completions\",end=\"upstream_closed_early\"",
            1,
        ),
        ("protocol=\"messages\",end=\"idle_timeout\"", 1),
        ("protocol=\"messages\",end=\"client_gone\"", 1),
    ] {
        let wanted = format!("herma_proxy_response_ends_total{{{line}}} {count}");
        assert!(text.contains(&wanted), "{wanted} in:\n{text}");
    }
}

/// Issue 17, finding 10: two upstream headers naming different upstreams (or two keys) are
/// refused in the protocol's shape before anything is sent; the same one twice is that one.
#[tokio::test]
async fn conflicting_upstream_headers_are_refused_and_a_repeated_one_is_one() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        let response = send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "hi", false),
            &[("X-Herma-Upstream-Url", "http://127.0.0.1:9")],
        )
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let text = response.text().await.unwrap();
        assert!(
            text.contains("X-Upstream-Base-Url and X-Herma-Upstream-Url"),
            "{path}: {text}"
        );
        let keys = send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "hi", false),
            &[
                ("X-Upstream-Api-Key", "sk-one"),
                ("X-Upstream-Api-Key", "sk-two"),
            ],
        )
        .await;
        assert_eq!(keys.status(), StatusCode::BAD_REQUEST, "{path}");
        let text = keys.text().await.unwrap();
        assert!(
            text.contains("X-Upstream-Api-Key") && !text.contains("sk-"),
            "{text}"
        );
        let same = send(
            &app,
            &mock,
            &key,
            path,
            body(path, "m", "hi", false),
            &[("X-Herma-Upstream-Url", &mock.url())],
        )
        .await;
        assert_eq!(same.status(), StatusCode::OK, "{path}");
    }
    assert_eq!(mock.requests().len(), PROTOCOLS.len());
}

/// Issue 17, finding 10: a model request must say it is JSON.
#[tokio::test]
async fn a_proxied_body_that_is_not_declared_json_is_415_in_the_protocols_shape() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    for (path, _) in PROTOCOLS {
        let response = app
            .client
            .post(app.url(path))
            .header("X-Upstream-Base-Url", mock.url())
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "text/plain")
            .body(body(path, "m", "hi", false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{path}"
        );
        let v: Value = response.json().await.unwrap();
        if path == "/v1/messages" {
            assert_eq!(v["type"], "error", "{v}");
        } else {
            assert!(v["error"]["message"].is_string(), "{v}");
        }
        // With the parameter clients add, it is JSON.
        let ok = app
            .client
            .post(app.url(path))
            .header("X-Upstream-Base-Url", mock.url())
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json; charset=utf-8")
            .body(body(path, "m", "hi", false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), StatusCode::OK, "{path}");
    }
    assert_eq!(mock.requests().len(), PROTOCOLS.len());
}

/// Issue 17, finding 11: receipts past their retention are pruned; newer ones stay.
#[tokio::test]
async fn receipts_past_their_retention_are_pruned_and_newer_ones_kept() {
    let app = spawn_app(Backend::Sqlite, &[("HERMA_RECEIPT_RETENTION_DAYS", "30")]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let path = "/v1/chat/completions";
    let mut old = Vec::new();
    for _ in 0..3 {
        let response = send(&app, &mock, &key, path, body(path, "m", "hi", false), &[]).await;
        old.push(
            response.headers()["x-herma-receipt"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
        response.bytes().await.unwrap();
    }
    app.app.receipts.flush().await;
    app.clock.advance_millis(31 * 86_400_000);
    let response = send(&app, &mock, &key, path, body(path, "m", "hi", false), &[]).await;
    let new = response.headers()["x-herma-receipt"]
        .to_str()
        .unwrap()
        .to_owned();
    response.bytes().await.unwrap();
    app.app.receipts.flush().await;

    let report = app.app.prune().await.unwrap();
    assert_eq!(report.receipts, 3);
    for id in &old {
        let got = req(Method::GET, format!("/v1/receipts/{id}"))
            .key(&key)
            .send(&app)
            .await;
        assert_eq!(got.0, StatusCode::NOT_FOUND, "{id}");
    }
    assert_eq!(receipt(&app, &key, &new).await["stream_end"], "completed");
    assert_eq!(app.app.prune().await.unwrap().receipts, 0);
}
