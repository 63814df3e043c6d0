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
