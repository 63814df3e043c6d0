//! Bad input gets problem+json naming the field, and changes nothing.

use herma_test_support::fixtures::provision;
use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::{assert_problem, req};

async fn assert_nothing_written(app: &TestApp, key: &str) {
    let listed = req(Method::GET, "/v1/provisions").key(key).send(app).await;
    assert_eq!(listed.2["items"], json!([]), "nothing was written");
}

async fn raw_post(
    app: &TestApp,
    key: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, reqwest::header::HeaderMap, serde_json::Value) {
    let response = app
        .client
        .post(app.url(path))
        .bearer_auth(key)
        .header("X-Herma-Harness", "claude-code")
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    (
        status,
        headers,
        response.json().await.unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn unknown_fields_and_wrong_types_are_named_by_pointer() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let mut unknown = provision("p");
    unknown["triggers"]["keyword"] = json!(["typo"]);
    let mut wrong_type = provision("p");
    wrong_type["priority"] = json!("high");
    let mut bad_enum = provision("p");
    bad_enum["action"] = json!("shim");
    let mut missing = provision("p");
    missing.as_object_mut().unwrap().remove("action");
    let mut invalid = provision("bad id");
    invalid["triggers"]["regex"] = json!(["(unclosed"]);
    for (body, pointer) in [
        (unknown, "/triggers/keyword"),
        (wrong_type, "/priority"),
        (bad_enum, "/action"),
        (missing, "/action"),
        (invalid, "/id"),
        (json!([1, 2]), ""),
    ] {
        let got = req(Method::POST, "/v1/provisions")
            .key(&key)
            .harness("claude-code")
            .json(body.clone())
            .send(&app)
            .await;
        assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(got.2["errors"][0]["pointer"], pointer, "{body}: {}", got.2);
    }
    assert_nothing_written(&app, &key).await;
}

#[tokio::test]
async fn duplicate_keys_and_deep_nesting_are_invalid_json() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let duplicate = br#"{"id":"p","id":"q","action":"shim_context","triggers":{"keywords":["x"]},"context_refs":["a"]}"#.to_vec();
    let got = raw_post(&app, &key, "/v1/provisions", "application/json", duplicate).await;
    assert_problem(&got, StatusCode::BAD_REQUEST, "invalid_json");
    assert_eq!(got.2["errors"][0]["pointer"], "/id");
    let deep = format!(
        "{{\"id\":\"p\",\"x\":{}1{}}}",
        "[".repeat(40),
        "]".repeat(40)
    )
    .into_bytes();
    let got = raw_post(&app, &key, "/v1/provisions", "application/json", deep).await;
    assert_problem(&got, StatusCode::BAD_REQUEST, "invalid_json");
    let broken = raw_post(
        &app,
        &key,
        "/v1/provisions",
        "application/json",
        b"{\"id\":".to_vec(),
    )
    .await;
    assert_problem(&broken, StatusCode::BAD_REQUEST, "invalid_json");
    let form = raw_post(
        &app,
        &key,
        "/v1/provisions",
        "application/x-www-form-urlencoded",
        b"id=p".to_vec(),
    )
    .await;
    assert_problem(
        &form,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_nothing_written(&app, &key).await;
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let app = spawn_app(Backend::Memory, &[("HERMA_MAX_BODY_BYTES", "2048")]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let mut big = provision("p");
    big["description"] = json!("x".repeat(4096));
    let got = req(Method::POST, "/v1/provisions")
        .key(&key)
        .harness("claude-code")
        .json(big)
        .send(&app)
        .await;
    assert_problem(&got, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert_nothing_written(&app, &key).await;
}

#[tokio::test]
async fn updates_need_expected_version_and_a_matching_id() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    req(Method::POST, "/v1/provisions")
        .key(&key)
        .harness("claude-code")
        .json(provision("p"))
        .send(&app)
        .await;
    let missing = req(Method::PUT, "/v1/provisions/p")
        .key(&key)
        .harness("claude-code")
        .json(provision("p"))
        .send(&app)
        .await;
    assert_problem(
        &missing,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_eq!(missing.2["errors"][0]["pointer"], "/expected_version");
    let mut negative = provision("p");
    negative["expected_version"] = json!(-1);
    let got = req(Method::PUT, "/v1/provisions/p")
        .key(&key)
        .harness("claude-code")
        .json(negative)
        .send(&app)
        .await;
    assert_eq!(got.2["errors"][0]["pointer"], "/expected_version");
    let mut renamed = provision("q");
    renamed["expected_version"] = json!(1);
    let got = req(Method::PUT, "/v1/provisions/p")
        .key(&key)
        .harness("claude-code")
        .json(renamed)
        .send(&app)
        .await;
    assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(got.2["errors"][0]["pointer"], "/id");
    let unchanged = req(Method::GET, "/v1/provisions/p")
        .key(&key)
        .send(&app)
        .await;
    assert_eq!(unchanged.2["version"], 1);
}

#[test]
fn arbitrary_bodies_never_cause_a_server_error_or_a_write() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (app, key) = rt.block_on(async {
        let app = spawn_app(Backend::Memory, &[]).await;
        let key = app.key("route,configure", Some("claude-code")).await;
        (app, key)
    });
    let fragments = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("\"id\":".to_owned()),
        Just("\"action\":\"shim_context\"".to_owned()),
        Just(",".to_owned()),
        Just("\"triggers\":{\"keywords\":[\"x\"]}".to_owned()),
        Just("null".to_owned()),
        Just("1e999".to_owned()),
        Just("\"\\ud800\"".to_owned()),
        "[a-z\"\\\\]{0,4}".prop_map(|s| s),
    ];
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 200,
        failure_persistence: None,
        ..Default::default()
    });
    runner
        .run(&proptest::collection::vec(fragments, 0..24), |parts| {
            let body = parts.concat().into_bytes();
            let got = rt.block_on(raw_post(
                &app,
                &key,
                "/v1/provisions",
                "application/json",
                body.clone(),
            ));
            prop_assert!(
                got.0.is_client_error() || got.0 == StatusCode::CREATED,
                "{:?} for {:?}",
                got.0,
                String::from_utf8_lossy(&body)
            );
            if got.0 == StatusCode::CREATED {
                let id = got.2["id"].as_str().unwrap().to_owned();
                rt.block_on(
                    req(Method::DELETE, format!("/v1/provisions/{id}"))
                        .key(&key)
                        .harness("claude-code")
                        .send(&app),
                );
            }
            Ok(())
        })
        .unwrap();
    rt.block_on(assert_nothing_written(&app, &key));
}

/// Sends raw bytes on a fresh connection and returns the status and the parsed body of the
/// answer, asserting it is `application/problem+json` whose body parses strictly.
async fn raw_exchange(app: &TestApp, request: Vec<u8>) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    // The server may answer (and close) before it has read everything: a failed write is fine.
    let _ = tcp.write_all(&request).await;
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer).await;
    let text = String::from_utf8(answer).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete answer");
    let status: u16 = head[9..12].parse().unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/problem+json"),
        "{head}"
    );
    (
        status,
        herma_core::json::parse_strict(body.as_bytes()).unwrap(),
    )
}

#[tokio::test]
async fn errors_before_any_route_are_problems_too() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;

    // A path id that does not percent-decode to UTF-8.
    let got = req(Method::GET, "/v1/provisions/%FF")
        .key(&key)
        .send(&app)
        .await;
    assert_problem(&got, StatusCode::BAD_REQUEST, "invalid_path");

    // A URI longer than hyper's limit, too many headers, a head larger than the buffer and a
    // malformed request line: hyper answers these before any route runs.
    let long_uri = format!(
        "GET /v1/provisions?q={} HTTP/1.1\r\nhost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    let (status, problem) = raw_exchange(&app, long_uri.into_bytes()).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (414, Some("uri_too_long"))
    );

    let mut many = String::from("GET /healthz HTTP/1.1\r\nhost: x\r\n");
    for i in 0..200 {
        many.push_str(&format!("x-h-{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let (status, problem) = raw_exchange(&app, many.into_bytes()).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (431, Some("headers_too_large"))
    );

    let huge = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "b".repeat(600_000)
    );
    let (status, problem) = raw_exchange(&app, huge.into_bytes()).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (431, Some("headers_too_large"))
    );

    let (status, problem) = raw_exchange(&app, b"G\x01T / HTTP/1.1\r\n\r\n".to_vec()).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (400, Some("malformed_request"))
    );
    assert_eq!(problem["status"], 400);
}

#[tokio::test]
async fn an_oversized_mcp_body_is_413_problem_json() {
    let app = spawn_app(Backend::Memory, &[("HERMA_MAX_BODY_BYTES", "2048")]).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x".repeat(4096)}});
    let got = req(Method::POST, "/mcp").json(big).send(&app).await;
    assert_problem(&got, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

/// Issue 17, finding 10: a caller without a valid key learns that first — never which query
/// parameters or path ids a route takes.
#[tokio::test]
async fn an_anonymous_caller_is_refused_before_its_query_or_path_is_read() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;
    for path in [
        "/v1/provisions?bogus=1",
        "/v1/provisions?limit=x",
        "/v1/provisions/%FF",
        "/v1/receipts/%FF",
        "/v1/memory?nope=1",
    ] {
        let anonymous = req(Method::GET, path).send(&app).await;
        assert_problem(&anonymous, StatusCode::UNAUTHORIZED, "unauthorized");
        assert!(
            !anonymous.2.to_string().contains("bogus"),
            "{}",
            anonymous.2
        );
        let wrong = req(Method::GET, path)
            .key("hmk_0123456789abcdef_wrongwrongwrongwrongwrongwrongwr")
            .send(&app)
            .await;
        assert_eq!(wrong.0, StatusCode::UNAUTHORIZED, "{path}: {}", wrong.2);
        let known = req(Method::GET, path).key(&key).send(&app).await;
        assert!(
            [StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY].contains(&known.0),
            "{path}: {} {}",
            known.0,
            known.2
        );
    }
}
