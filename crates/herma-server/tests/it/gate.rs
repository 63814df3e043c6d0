//! The gate over HTTP: H01, H02, H08 (edge), key verification and revocation.

use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::{assert_problem, req};

#[tokio::test]
async fn h01_personal_assistant_keys_are_accepted_and_browser_navigation_is_refused() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;
    // A personal assistant calling with a scoped key (fetch-style or no fetch metadata at all).
    for (ua, mode) in [
        ("Claude-User/1.0", None),
        ("ChatGPT-User/1.0", Some("cors")),
        ("curl/8", None),
    ] {
        let mut r = req(Method::GET, "/v1/provisions")
            .key(&key)
            .header("user-agent", ua);
        if let Some(mode) = mode {
            r = r.header("sec-fetch-mode", mode);
        }
        assert_eq!(r.send(&app).await.0, StatusCode::OK, "{ua}");
    }
    // A browser navigating to an API route is refused even with a valid key.
    let navigation = req(Method::GET, "/v1/provisions")
        .key(&key)
        .header("sec-fetch-mode", "navigate")
        .header("sec-fetch-dest", "document")
        .send(&app)
        .await;
    assert_problem(
        &navigation,
        StatusCode::FORBIDDEN,
        "browser_navigation_refused",
    );
    let document = req(Method::GET, "/v1/whoami")
        .key(&key)
        .header("sec-fetch-dest", "document")
        .send(&app)
        .await;
    assert_problem(
        &document,
        StatusCode::FORBIDDEN,
        "browser_navigation_refused",
    );
}

#[tokio::test]
async fn h01_cookie_authentication_is_refused() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;
    let got = req(Method::GET, "/v1/provisions")
        .header("cookie", format!("herma_key={key}"))
        .send(&app)
        .await;
    assert_problem(&got, StatusCode::FORBIDDEN, "browser_navigation_refused");
}

#[tokio::test]
async fn h02_route_only_key_cannot_configure() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route", Some("claude-code")).await;
    let got = req(Method::POST, "/v1/provisions")
        .key(&key)
        .harness("claude-code")
        .json(herma_test_support::fixtures::provision("p"))
        .send(&app)
        .await;
    assert_problem(&got, StatusCode::FORBIDDEN, "insufficient_scope");
    let listed = req(Method::GET, "/v1/provisions")
        .key(&key)
        .send(&app)
        .await;
    assert_eq!(listed.2["items"], json!([]), "nothing was written");
}

#[tokio::test]
async fn h02_configure_needs_the_matching_harness_attestation() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let body = herma_test_support::fixtures::provision("p");
    let missing = req(Method::POST, "/v1/provisions")
        .key(&key)
        .json(body.clone())
        .send(&app)
        .await;
    assert_problem(&missing, StatusCode::FORBIDDEN, "harness_required");
    let wrong = req(Method::POST, "/v1/provisions")
        .key(&key)
        .harness("codex")
        .json(body.clone())
        .send(&app)
        .await;
    assert_problem(&wrong, StatusCode::FORBIDDEN, "harness_required");
    let right = req(Method::POST, "/v1/provisions")
        .key(&key)
        .harness("claude-code")
        .json(body)
        .send(&app)
        .await;
    assert_eq!(right.0, StatusCode::CREATED, "{}", right.2);
    // Deleting and updating are configure operations too.
    let delete = req(Method::DELETE, "/v1/provisions/p")
        .key(&key)
        .send(&app)
        .await;
    assert_problem(&delete, StatusCode::FORBIDDEN, "harness_required");
}

#[tokio::test]
async fn unknown_keys_wrong_secrets_and_malformed_keys_look_the_same() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route", None).await;
    let mut wrong_secret = key.clone();
    wrong_secret.replace_range(key.len() - 4.., "0000");
    let unknown_id = format!("hmk_ffffffffffffffff_{}", &key[21..]);
    let mut bodies = Vec::new();
    for bad in [
        wrong_secret.as_str(),
        unknown_id.as_str(),
        "hmk_short",
        "not-a-key",
        "Bearer",
    ] {
        let got = req(Method::GET, "/v1/provisions").key(bad).send(&app).await;
        assert_problem(&got, StatusCode::UNAUTHORIZED, "unauthorized");
        assert_eq!(got.1["www-authenticate"], "Bearer realm=\"herma\"");
        bodies.push(got.2["detail"].clone());
    }
    assert!(bodies[..3].iter().all(|d| *d == bodies[0]), "{bodies:?}");
    let none = req(Method::GET, "/v1/provisions").send(&app).await;
    assert_problem(&none, StatusCode::UNAUTHORIZED, "unauthorized");
    let via_header = req(Method::GET, "/v1/whoami")
        .header("x-api-key", key.clone())
        .send(&app)
        .await;
    assert_eq!(via_header.0, StatusCode::OK);
    assert_eq!(
        via_header.2["caller_scope"],
        format!("key:{}", TestApp::key_id(&key))
    );
}

#[tokio::test]
async fn revocation_takes_effect_at_once_here_and_within_one_second_elsewhere() {
    let store = herma_test_support::fresh_store(Backend::Sqlite).await;
    let here = herma_test_support::spawn_app_on(store.clone(), &[]).await;
    let elsewhere = herma_test_support::spawn_app_on(store, &[]).await;
    let key = here.key("route", None).await;
    for app in [&here, &elsewhere] {
        assert_eq!(
            req(Method::GET, "/v1/whoami").key(&key).send(app).await.0,
            StatusCode::OK
        );
    }
    here.app.revoke_key(TestApp::key_id(&key)).await.unwrap();
    assert_eq!(
        req(Method::GET, "/v1/whoami").key(&key).send(&here).await.0,
        StatusCode::UNAUTHORIZED
    );
    // The other instance still trusts its cached verification for less than a second…
    elsewhere.clock.advance_millis(999);
    assert_eq!(
        req(Method::GET, "/v1/whoami")
            .key(&key)
            .send(&elsewhere)
            .await
            .0,
        StatusCode::OK
    );
    // …and refuses the key once a second has passed since it last read it.
    elsewhere.clock.advance_millis(1);
    assert_eq!(
        req(Method::GET, "/v1/whoami")
            .key(&key)
            .send(&elsewhere)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn h08_edge_secret_refuses_requests_without_matching_x_edge_auth() {
    let secret = "edge-secret-0123456789abcdef";
    let app = spawn_app(Backend::Memory, &[("HERMA_EDGE_SECRET", secret)]).await;
    let key = app.key("route", None).await;
    for path in ["/healthz", "/v1/whoami", "/openapi.json", "/nowhere"] {
        let missing = req(Method::GET, path).key(&key).send(&app).await;
        assert_problem(&missing, StatusCode::FORBIDDEN, "edge_auth_required");
        let wrong = req(Method::GET, path)
            .key(&key)
            .header("x-edge-auth", "edge-secret")
            .send(&app)
            .await;
        assert_problem(&wrong, StatusCode::FORBIDDEN, "edge_auth_required");
    }
    let through_edge = req(Method::GET, "/v1/whoami")
        .key(&key)
        .header("x-edge-auth", secret)
        .send(&app)
        .await;
    assert_eq!(through_edge.0, StatusCode::OK);
}

#[tokio::test]
async fn every_response_carries_the_security_headers_and_a_request_id() {
    let app = spawn_app(Backend::Memory, &[]).await;
    for (method, path) in [
        (Method::GET, "/healthz"),
        (Method::GET, "/v1/whoami"),
        (Method::GET, "/missing"),
        (Method::PATCH, "/healthz"),
    ] {
        let (_, headers, _) = req(method, path).send(&app).await;
        assert_eq!(
            headers["strict-transport-security"], "max-age=63072000; includeSubDomains",
            "{path}"
        );
        assert!(
            headers["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("default-src 'none'")
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["referrer-policy"], "no-referrer");
        assert!(!headers["x-request-id"].is_empty());
    }
    let (_, headers, _) = req(Method::GET, "/healthz")
        .header("x-request-id", "given-id")
        .send(&app)
        .await;
    assert_eq!(headers["x-request-id"], "given-id");
}

#[tokio::test]
async fn credentials_and_the_harness_header_are_sent_once() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let entry = json!({"id": "twice", "kind": "noun", "schema_or_body": "x"});
    // Two harness headers on a configure write: which one the gate would check is ambiguous.
    let response = app
        .client
        .post(app.url("/v1/context"))
        .bearer_auth(&key)
        .header("X-Herma-Harness", "claude-code")
        .header("X-Herma-Harness", "codex")
        .json(&entry)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["code"], "malformed_request", "{body}");
    // Two credentials on the proxy: refused in the protocol's own error shape.
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .header("authorization", format!("Bearer {key}"))
        .header("authorization", "Bearer hmk_other")
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "malformed_request", "{body}");
    // Once each, the write goes through.
    let got = req(Method::POST, "/v1/context")
        .key(&key)
        .harness("claude-code")
        .json(entry)
        .send(&app)
        .await;
    assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
}

#[tokio::test]
async fn a_request_id_outside_the_token_charset_or_length_is_replaced() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let valid = "req-01.A_b:c";
    let (_, headers, _) = req(Method::GET, "/healthz")
        .header("x-request-id", valid)
        .send(&app)
        .await;
    assert_eq!(headers["x-request-id"], valid, "a valid id is echoed");
    let longest = "a".repeat(128);
    let (_, headers, _) = req(Method::GET, "/healthz")
        .header("x-request-id", longest.clone())
        .send(&app)
        .await;
    assert_eq!(headers["x-request-id"], longest.as_str());
    for bad in [
        "a".repeat(129),
        "x".repeat(60 * 1024),
        "two words".to_owned(),
        "quote\"d".to_owned(),
        "id=\"1\" level=error".to_owned(),
        "tab\there".to_owned(),
        // CR and LF cannot arrive inside a value (HTTP/1.1 ends the header there and hyper
        // refuses folded lines; HTTP/2 forbids them), so the spaces, quotes and `=` a forged
        // log field needs are what is left to refuse.
        "ünïcode".to_owned(),
    ] {
        let (status, headers, _) = req(Method::GET, "/healthz")
            .header("x-request-id", bad.clone())
            .send(&app)
            .await;
        assert_eq!(status, StatusCode::OK);
        let given = headers["x-request-id"].to_str().unwrap();
        assert_ne!(given, bad, "`{}` was echoed", &bad[..bad.len().min(40)]);
        assert!(
            !given.is_empty()
                && given.len() <= 128
                && given
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')),
            "{given}"
        );
    }
}

#[tokio::test]
async fn a_credential_or_harness_header_sent_twice_is_refused_by_name() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;
    let twice = [
        ("authorization", format!("Bearer {key}")),
        ("x-api-key", key.clone()),
        ("x-herma-harness", "claude-code".to_owned()),
    ];
    // `/v1/whoami` authenticates without a requirement to meet; it refuses the same.
    for path in ["/v1/provisions", "/v1/whoami"] {
        for (name, value) in &twice {
            let got = req(Method::GET, path)
                .key(&key)
                .header(name, value.clone())
                .header(name, value.clone())
                .send(&app)
                .await;
            assert_problem(&got, StatusCode::BAD_REQUEST, "malformed_request");
            let detail = got.2["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains(&format!("the {name} header is sent more than once")),
                "{path} {name}: {detail}"
            );
        }
        // Once each, the same key is admitted.
        let once = req(Method::GET, path)
            .key(&key)
            .header("x-herma-harness", "claude-code")
            .send(&app)
            .await;
        assert_eq!(once.0, StatusCode::OK, "{path}: {}", once.2);
    }
}
