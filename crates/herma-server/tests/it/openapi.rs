//! `/openapi.json` describes every route, and every route it describes exists.

use herma_test_support::{Backend, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::req;

#[tokio::test]
async fn every_documented_operation_is_served() {
    let app = spawn_app(
        Backend::Memory,
        &[("HERMA_ADMIN_TOKEN", "bootstrap-token-0123456789abcdef")],
    )
    .await;
    let key = app.key("route,configure,admin", Some("claude-code")).await;
    let doc = req(Method::GET, "/openapi.json").send(&app).await.2;
    assert_eq!(
        doc["openapi"].as_str().unwrap().split('.').next(),
        Some("3")
    );
    let paths = doc["paths"].as_object().unwrap();
    let mut operations = 0;
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let concrete = path
                .replace("{id}", "no-such-id")
                .replace("{key_id}", "0000000000000000");
            let got = req(method.clone(), concrete)
                .key(&key)
                .harness("claude-code")
                .send(&app)
                .await;
            let fallback = got.2["detail"] == "no route matches this path";
            assert!(
                !fallback && got.0 != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is documented but not routed"
            );
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{method} {path} documents no response"
            );
            operations += 1;
        }
    }
    assert!(operations >= 17, "{operations} operations documented");
}

#[tokio::test]
async fn record_fields_are_documented_with_examples() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let doc = req(Method::GET, "/openapi.json").send(&app).await.2;
    let schemas = &doc["components"]["schemas"];
    for name in [
        "ProvisionSpec",
        "ContextEntrySpec",
        "Triggers",
        "DirectResponse",
    ] {
        let properties = schemas[name]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{name} missing"));
        for (field, schema) in properties {
            let documented = schema.get("example").is_some()
                || schema.get("examples").is_some()
                || schema.get("$ref").is_some()
                || schema.get("allOf").is_some()
                || schema.get("oneOf").is_some();
            assert!(documented, "{name}.{field} has no example: {schema}");
            let described = schema.get("description").is_some()
                || schema.get("$ref").is_some()
                || schema.get("oneOf").is_some();
            assert!(described, "{name}.{field} has no description: {schema}");
        }
    }
    let codes: Vec<Value> = schemas["ProblemCode"]["enum"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        codes.contains(&Value::from("version_conflict"))
            && codes.contains(&Value::from("builtin_protected"))
    );
}

/// Every JSON request body the document describes has an example, and a server with the default
/// settings (plus an operator upstream for the one route that always forwards) accepts each one.
/// The handshake's example names another Herma: the test points it at a second real server.
#[tokio::test]
async fn every_request_example_is_accepted_and_every_json_body_parses_strictly() {
    let upstream = herma_test_support::mock_upstream::MockUpstream::start().await;
    let upstream_url = upstream.url();
    let token = "bootstrap-token-0123456789abcdef";
    let app = spawn_app(
        Backend::Sqlite,
        &[
            ("HERMA_ADMIN_TOKEN", token),
            ("HERMA_UPSTREAM_BASE_URL", &upstream_url),
        ],
    )
    .await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let doc = req(Method::GET, "/openapi.json").send(&app).await.2;

    let mut examples = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(content) = op["requestBody"]["content"].as_object() else {
                continue;
            };
            let Some(media) = content.get("application/json") else {
                continue;
            };
            let example = media
                .get("example")
                .cloned()
                .unwrap_or_else(|| panic!("{method} {path}: the JSON request body has no example"));
            examples.push((method.to_uppercase(), path.clone(), example));
        }
    }
    // Creations before the updates and the handshake that need them.
    const ORDER: [&str; 14] = [
        "/v1/admin/keys",
        "/v1/context",
        "/v1/provisions",
        "/v1/context/{id}",
        "/v1/provisions/{id}",
        "/v1/dry-run",
        "/api/preview",
        "/mcp",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/handshake",
        "/v1/conversations/turn",
    ];
    for (_, path, _) in &examples {
        assert!(
            ORDER.contains(&path.as_str()),
            "{path} has a request example this test does not post yet"
        );
    }
    examples.sort_by_key(|(_, path, _)| ORDER.iter().position(|p| p == path));

    let remote = spawn_app(Backend::Memory, &[]).await;
    let remote_key = remote.key("route,configure", Some("claude-code")).await;
    for (method, path, mut example) in examples {
        let concrete = match example["id"].as_str() {
            Some(id) => path.replace("{id}", id),
            None => path.clone(),
        };
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        if path == "/v1/handshake" {
            let entry = doc["paths"]["/v1/context"]["post"]["requestBody"]["content"]
                ["application/json"]["example"]
                .clone();
            let made = req(Method::POST, "/v1/context")
                .key(&remote_key)
                .harness("claude-code")
                .json(entry)
                .send(&remote)
                .await;
            assert_eq!(made.0, StatusCode::CREATED, "{}", made.2);
            example["remote"] = Value::String(remote.url(""));
            example["remote_key"] = Value::String(remote_key.clone());
        }
        if path == "/v1/conversations/turn" {
            // Turns need an operator's grant for the key and a provider: a server set up so.
            crate::conversations::accepts_example(example).await;
            continue;
        }
        let credential = if path.starts_with("/v1/admin/") {
            token
        } else {
            key.as_str()
        };
        let got = req(method.clone(), concrete)
            .key(credential)
            .harness("claude-code")
            .json(example.clone())
            .send(&app)
            .await;
        assert!(
            got.0.is_success(),
            "{method} {path} refused its own example {example}: {} {}",
            got.0,
            got.2
        );
    }

    // With records, receipts, memory and outcomes in place, every documented read is fetched;
    // `send` checks that each JSON body parses under Herma's strict reader.
    app.app.receipts.flush().await;
    if let Some(memory) = &app.app.memory {
        memory.flush().await;
    }
    let receipt_id = {
        let reply = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(&key)
            .json(&serde_json::json!({"model": "gpt-5-mini", "messages": [{"role": "user", "content": "deploy src/main.rs"}]}))
            .send()
            .await
            .unwrap();
        assert!(reply.status().is_success());
        reply.headers()["x-herma-receipt"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    app.app.receipts.flush().await;
    let mut reads = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        if item.get("get").is_none() {
            continue;
        }
        let concrete = path
            .replace(
                "{id}",
                if path.contains("receipts") {
                    &receipt_id
                } else {
                    "deploy"
                },
            )
            .replace("{key_id}", "0000000000000000");
        let got = req(Method::GET, concrete.clone())
            .key(&key)
            .harness("claude-code")
            .send(&app)
            .await;
        assert!(got.0.as_u16() < 500, "GET {concrete}: {} {}", got.0, got.2);
        reads += 1;
    }
    assert!(reads >= 10, "{reads} documented reads");
}

/// Problems are documented as what they are (`application/problem+json`, one of the listed
/// `type` URIs), every keyed operation documents the gate's 401, and a stored record's schema
/// accepts the stored fields (found by the API fuzz, `api_fuzz.rs`).
#[tokio::test]
async fn problems_statuses_and_stored_records_are_documented_as_served() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let doc = req(Method::GET, "/openapi.json").send(&app).await.2;
    let text = doc.to_string();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                assert!(
                    response["content"]["application/json"]["schema"]["$ref"]
                        != "#/components/schemas/ProblemBody",
                    "{method} {path} {status}: a problem documented as application/json"
                );
            }
            if op.get("security").is_some() {
                assert!(
                    op["responses"].get("401").is_some(),
                    "{method} {path} does not document 401"
                );
            }
        }
    }
    let types = doc["components"]["schemas"]["ProblemBody"]["properties"]["type"]["enum"]
        .as_array()
        .unwrap();
    assert!(types.contains(&Value::from("https://herma.dev/problems/version_conflict")));
    assert!(
        !text.contains("#/components/schemas/ScopeParam")
            || doc["components"]["schemas"].get("ScopeParam").is_some()
    );
    let provision = &doc["components"]["schemas"]["Provision"];
    assert_eq!(provision["additionalProperties"], false, "{provision}");
    for member in ["id", "triggers", "caller_scope", "version", "created_at"] {
        assert!(
            provision["properties"].get(member).is_some(),
            "Provision lacks {member}: {provision}"
        );
    }
    let sync = &doc["paths"]["/v1/admin/tessera/sync"]["post"]["parameters"][0];
    assert_eq!(sync["in"], "query", "{sync}");
}
