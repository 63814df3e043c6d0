//! H11 (admin part): `/v1/admin/keys` needs the bootstrap token or an admin key.

use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::{assert_problem, req};

const BOOTSTRAP: &str = "bootstrap-token-0123456789abcdef";

#[tokio::test]
async fn h11_admin_keys_route_needs_bootstrap_or_admin_credentials() {
    let app = spawn_app(Backend::Sqlite, &[("HERMA_ADMIN_TOKEN", BOOTSTRAP)]).await;
    let ordinary = app.key("route,configure", Some("claude-code")).await;
    let body = json!({"scopes": ["route"], "label": "ci"});

    let anonymous = req(Method::POST, "/v1/admin/keys")
        .json(body.clone())
        .send(&app)
        .await;
    assert_problem(&anonymous, StatusCode::UNAUTHORIZED, "unauthorized");
    let not_admin = req(Method::POST, "/v1/admin/keys")
        .key(&ordinary)
        .harness("claude-code")
        .json(body.clone())
        .send(&app)
        .await;
    assert_problem(&not_admin, StatusCode::FORBIDDEN, "admin_required");
    let wrong_token = req(Method::GET, "/v1/admin/keys")
        .key("bootstrap-token-but-wrong-value")
        .send(&app)
        .await;
    assert_problem(&wrong_token, StatusCode::UNAUTHORIZED, "unauthorized");

    // The bootstrap token issues an admin key; the admin key manages keys from then on.
    let created = req(Method::POST, "/v1/admin/keys")
        .key(BOOTSTRAP)
        .json(json!({"scopes": ["admin"], "label": "ops"}))
        .send(&app)
        .await;
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.2);
    let admin_key = created.2["key"].as_str().unwrap().to_owned();
    assert_eq!(
        created.2["caller_scope"],
        format!("key:{}", created.2["key_id"].as_str().unwrap())
    );
    assert_eq!(created.2["scopes"], json!(["admin"]));

    let issued = req(Method::POST, "/v1/admin/keys")
        .key(&admin_key)
        .json(body)
        .send(&app)
        .await;
    assert_eq!(issued.0, StatusCode::CREATED);
    let issued_key = issued.2["key"].as_str().unwrap().to_owned();

    let listed = req(Method::GET, "/v1/admin/keys")
        .key(&admin_key)
        .send(&app)
        .await;
    assert_eq!(listed.0, StatusCode::OK);
    let items = listed.2["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert!(
        items
            .iter()
            .all(|k| k.get("digest").is_none() && k.get("key").is_none()),
        "no secrets listed"
    );

    let revoked = req(
        Method::DELETE,
        format!("/v1/admin/keys/{}", TestApp::key_id(&issued_key)),
    )
    .key(&admin_key)
    .send(&app)
    .await;
    assert_eq!(revoked.0, StatusCode::OK);
    assert!(revoked.2["revoked_at"].is_string());
    assert_eq!(
        req(Method::GET, "/v1/whoami")
            .key(&issued_key)
            .send(&app)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    let missing = req(Method::DELETE, "/v1/admin/keys/0000000000000000")
        .key(&admin_key)
        .send(&app)
        .await;
    assert_problem(&missing, StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn without_a_bootstrap_token_no_bearer_token_is_an_admin() {
    let app = spawn_app(Backend::Memory, &[]).await;
    for token in ["", "anything-at-all-of-sufficient-size"] {
        let got = req(Method::GET, "/v1/admin/keys")
            .key(token)
            .send(&app)
            .await;
        assert_problem(&got, StatusCode::UNAUTHORIZED, "unauthorized");
    }
}

#[tokio::test]
async fn bad_key_requests_are_named_and_issue_nothing() {
    let app = spawn_app(Backend::Memory, &[("HERMA_ADMIN_TOKEN", BOOTSTRAP)]).await;
    for (body, pointer) in [
        (json!({"scopes": ["route", "root"]}), "/scopes/1"),
        (json!({"scopes": []}), "/scopes"),
        (json!({"scopes": ["configure"]}), "/harness"),
        (
            json!({"scopes": ["route"], "harness": "Claude Code"}),
            "/harness",
        ),
        (json!({"scopes": ["route"], "extra": true}), "/extra"),
        // Labels that would drive a terminal or reorder what is shown.
        (
            json!({"scopes": ["route"], "label": "\u{1b}[31mred"}),
            "/label",
        ),
        (
            json!({"scopes": ["route"], "label": "line\r\nbreak"}),
            "/label",
        ),
        (json!({"scopes": ["route"], "label": "nul\u{0}"}), "/label"),
        (
            json!({"scopes": ["route"], "label": "evil\u{202e}txt.exe"}),
            "/label",
        ),
    ] {
        let got = req(Method::POST, "/v1/admin/keys")
            .key(BOOTSTRAP)
            .json(body.clone())
            .send(&app)
            .await;
        assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(got.2["errors"][0]["pointer"], pointer, "{body}: {}", got.2);
    }
    let listed = req(Method::GET, "/v1/admin/keys")
        .key(BOOTSTRAP)
        .send(&app)
        .await;
    assert_eq!(listed.2["items"], json!([]));
}
