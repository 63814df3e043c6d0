//! H14 (MCP): `POST /mcp` speaks JSON-RPC 2.0 as the MCP specification says; the official `mcp`
//! Python SDK connects (stateless and handshake revisions), lists and calls tools and reads
//! resources; malformed messages get the spec's error codes.

use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::req;
use crate::sdk::run_script;

const STATELESS: &str = "2026-07-28";

async fn rpc_raw(
    app: &TestApp,
    body: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String, Value) {
    let mut request = app
        .client
        .post(app.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, content_type, body)
}

async fn rpc(
    app: &TestApp,
    method: &str,
    params: Value,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (status, content_type, reply) = rpc_raw(app, &body.to_string(), headers).await;
    assert_eq!(content_type, "application/json", "{reply}");
    assert_eq!(reply["jsonrpc"], "2.0");
    assert_eq!(reply["id"], 7, "the request id is echoed");
    (status, reply)
}

fn stateless(params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": STATELESS});
    params
}

#[tokio::test]
async fn h14_mcp_malformed_json_rpc_gets_the_spec_error_codes() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let cases: [(&str, StatusCode, i64); 6] = [
        ("{not json", StatusCode::BAD_REQUEST, -32700),
        ("[]", StatusCode::BAD_REQUEST, -32600),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            r#"{"id":1,"method":"ping"}"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#,
            StatusCode::BAD_REQUEST,
            -32602,
        ),
    ];
    for (body, status, code) in cases {
        let (got, content_type, reply) = rpc_raw(&app, body, &[]).await;
        assert_eq!(got, status, "{body}: {reply}");
        assert_eq!(content_type, "application/json");
        assert_eq!(reply["error"]["code"], code, "{body}: {reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // An id that is valid is echoed even on errors.
    let (_, _, reply) = rpc_raw(
        &app,
        r#"{"jsonrpc":"2.0","id":"abc","method":"ping","params":3}"#,
        &[],
    )
    .await;
    assert_eq!(reply["id"], "abc");

    let (status, reply) = rpc(&app, "tools/frobnicate", json!({}), &[]).await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!(-32601))
    );

    let (status, reply) = rpc(
        &app,
        "tools/list",
        json!({}),
        &[("mcp-protocol-version", "1999-01-01")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(reply["error"]["code"], -32022);
    assert_eq!(reply["error"]["data"]["supported"][0], STATELESS);

    let (status, reply) = rpc(
        &app,
        "tools/list",
        stateless(json!({})),
        &[("mcp-protocol-version", "2025-06-18")],
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32020)),
        "header and _meta disagree"
    );

    let (status, reply) = rpc(
        &app,
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
        &[],
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32602)),
        "{reply}"
    );
    let (_, reply) = rpc(&app, "tools/call", json!({"arguments": {}}), &[]).await;
    assert_eq!(reply["error"]["code"], -32602);
    let (_, reply) = rpc(
        &app,
        "resources/read",
        json!({"uri": "herma://nothing"}),
        &[],
    )
    .await;
    assert_eq!(reply["error"]["code"], -32002);
    let (_, reply) = rpc(
        &app,
        "resources/read",
        json!({"uri": "herma://provisions"}),
        &[],
    )
    .await;
    assert_eq!(
        reply["error"]["code"], -32002,
        "key-only resources do not exist without a key"
    );

    // A bad key is refused; a key-only tool without a key too.
    let (status, reply) = rpc(
        &app,
        "tools/list",
        json!({}),
        &[("authorization", "Bearer hmk_0000000000000000_00")],
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::UNAUTHORIZED, json!(-32001))
    );
    let (status, reply) = rpc(
        &app,
        "tools/call",
        json!({"name": "herma_insights", "arguments": {}}),
        &[],
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].clone()),
        (StatusCode::UNAUTHORIZED, json!(-32001))
    );

    // Notifications are accepted without a body.
    let (status, _, reply) = rpc_raw(
        &app,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        &[],
    )
    .await;
    assert_eq!((status, reply), (StatusCode::ACCEPTED, Value::Null));

    // The server offers no GET stream.
    let get = app
        .client
        .get(app.url("/mcp"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn h14_mcp_negotiates_versions_and_keeps_tool_errors_apart_from_rpc_errors() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    // The handshake: a known version is echoed, an unknown one answered with the newest.
    let (status, reply) = rpc(&app, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reply["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(reply["result"]["serverInfo"]["name"], "herma");
    assert!(reply["result"]["capabilities"]["tools"].is_object());
    let (_, reply) = rpc(&app, "initialize", json!({"protocolVersion": "2031-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}), &[]).await;
    assert_eq!(reply["result"]["protocolVersion"], "2025-11-25");
    // The stateless revision: discovery, then every request carries its version.
    let (_, reply) = rpc(
        &app,
        "server/discover",
        stateless(json!({})),
        &[("mcp-protocol-version", STATELESS)],
    )
    .await;
    assert_eq!(reply["result"]["supportedVersions"][0], STATELESS);
    let (_, reply) = rpc(
        &app,
        "ping",
        json!({}),
        &[("mcp-protocol-version", "2025-11-25")],
    )
    .await;
    assert!(reply["result"].is_object() && reply.get("error").is_none());

    let (_, reply) = rpc(
        &app,
        "tools/list",
        stateless(json!({})),
        &[("mcp-protocol-version", STATELESS)],
    )
    .await;
    let tools = reply["result"]["tools"].as_array().unwrap();
    let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["herma_preview", "herma_discovery"],
        "only public tools without a key"
    );
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["outputSchema"]["type"], "object");
    }

    // A tool that fails is a result with isError, not a JSON-RPC error.
    let (status, reply) = rpc(
        &app,
        "tools/call",
        json!({"name": "herma_preview", "arguments": {"protocol": "smtp", "body": {}}}),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(reply.get("error").is_none(), "{reply}");
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(
        reply["result"]["structuredContent"]["code"],
        "validation_failed"
    );
    // One that works mirrors its structured content in text.
    let (_, reply) = rpc(&app, "tools/call", json!({"name": "herma_preview", "arguments": {"protocol": "messages", "body": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "/herma help"}]}}}), &[]).await;
    let result = &reply["result"];
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"]["decision"], "respond_directly");
    assert_eq!(result["structuredContent"]["persisted"], false);
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, &result["structuredContent"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h14_mcp_official_python_sdk_lists_and_calls_tools() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
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
        let created = req(Method::POST, path)
            .key(&key)
            .harness("claude-code")
            .json(body)
            .send(&app)
            .await;
        assert_eq!(created.0, StatusCode::CREATED, "{}", created.2);
    }
    let report = run_script(
        "mcp_client.py",
        vec![("HERMA_BASE", app.url("")), ("HERMA_KEY", key.clone())],
    )
    .await;
    assert!(
        report["checks"].as_u64().unwrap() >= 40,
        "every check ran: {report}"
    );
}

#[tokio::test]
async fn pages_of_other_origins_and_non_json_bodies_never_reach_the_public_tools() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let post = |origin: Option<&str>, content_type: Option<&str>| {
        let mut r = app.client.post(app.url("/mcp")).body(list.to_string());
        if let Some(origin) = origin {
            r = r.header("origin", origin);
        }
        if let Some(content_type) = content_type {
            r = r.header("content-type", content_type);
        }
        r.send()
    };
    // A DNS-rebinding or CSRF page: refused before the body is read.
    for origin in [
        "http://evil.example",
        "http://localhost.evil.example:7730",
        "null",
    ] {
        let response = post(Some(origin), Some("application/json")).await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{origin}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
    }
    // A simple cross-site form post carries text/plain; and no type at all is refused too.
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let response = post(None, content_type).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
    }
    // A loopback page and a client without Origin get the tools.
    for origin in [Some("http://127.0.0.1:7730"), None] {
        let response = post(origin, Some("application/json; charset=utf-8"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{origin:?}");
        let v: Value = response.json().await.unwrap();
        assert!(v["result"]["tools"].is_array(), "{v}");
    }
}
