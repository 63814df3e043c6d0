//! H14 (preview and discovery): public routes answer without a key, evaluate only the built-in
//! rules, persist nothing and contact no provider.

use herma_test_support::mock_upstream::MockUpstream;
use herma_test_support::{Backend, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{assert_problem, req};

fn preview_body(text: &str) -> Value {
    json!({"protocol": "messages", "body": {"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}})
}

#[tokio::test]
async fn h14_public_preview_evaluates_system_builtins_only_with_persisted_false() {
    let mock = MockUpstream::start().await;
    let mock_url = mock.url();
    let app = spawn_app(
        Backend::Sqlite,
        &[
            ("HERMA_UPSTREAM_BASE_URL", &mock_url),
            ("HERMA_UPSTREAM_API_KEY", "sk-operator"),
        ],
    )
    .await;
    // A caller's own rule never shows in the preview.
    let key = app.key("route,configure", Some("claude-code")).await;
    let own = req(Method::POST, "/v1/provisions").key(&key).harness("claude-code")
        .json(json!({"id": "mine", "action": "respond_directly", "triggers": {"keywords": ["force push"]}, "response": {"text": "mine"}})).send(&app).await;
    assert_eq!(own.0, StatusCode::CREATED);

    let shim = req(Method::POST, "/api/preview")
        .json(preview_body("how do I force push safely?"))
        .send(&app)
        .await;
    assert_eq!(shim.0, StatusCode::OK, "{}", shim.2);
    assert_eq!(shim.2["persisted"], false);
    assert_eq!(shim.2["upstream_contacted"], false);
    assert_eq!(shim.2["decision"], "shim_context");
    let matched: Vec<_> = shim.2["tiers"]["keyword"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["provision_id"].clone(), m["builtin"].clone()))
        .collect();
    assert_eq!(matched, [(json!("git.force-push"), json!(true))]);
    assert!(
        shim.2["shim"]["text"]
            .as_str()
            .unwrap()
            .contains("--force-with-lease")
    );

    let direct = req(Method::POST, "/api/preview")
        .json(preview_body("/herma help"))
        .send(&app)
        .await;
    assert_eq!(direct.2["decision"], "respond_directly");
    assert_eq!(direct.2["provision_id"], "herma.help");

    // Nothing was stored, claimed or sent.
    assert!(
        mock.requests().is_empty(),
        "no configured provider was contacted"
    );
    let outcomes = req(Method::GET, "/v1/outcomes")
        .key(&key)
        .send(&app)
        .await
        .2;
    assert_eq!(outcomes["items"], json!([]));
    let bad = req(Method::POST, "/api/preview")
        .json(json!({"protocol": "messages"}))
        .send(&app)
        .await;
    assert_problem(&bad, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(bad.2["errors"][0]["pointer"], "/body");
}

#[tokio::test]
async fn the_preview_is_rate_limited_per_client_address() {
    let app = spawn_app(Backend::Memory, &[("HERMA_PREVIEW_RATE_PER_MINUTE", "3")]).await;
    for _ in 0..3 {
        assert_eq!(
            req(Method::POST, "/api/preview")
                .json(preview_body("hi"))
                .send(&app)
                .await
                .0,
            StatusCode::OK
        );
    }
    let limited = req(Method::POST, "/api/preview")
        .json(preview_body("hi"))
        .send(&app)
        .await;
    assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(limited.1["retry-after"], "20");
    assert_eq!(limited.2["retry_after_seconds"], 20);
    app.clock.advance_millis(20_000);
    assert_eq!(
        req(Method::POST, "/api/preview")
            .json(preview_body("hi"))
            .send(&app)
            .await
            .0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn h14_discovery_routes_describe_this_herma() {
    let app = spawn_app(
        Backend::Memory,
        &[("HERMA_PUBLIC_URL", "https://herma.example.com")],
    )
    .await;
    let connect = req(Method::GET, "/connect.json").send(&app).await;
    assert_eq!(connect.0, StatusCode::OK);
    assert_eq!(connect.2["base_url"], "https://herma.example.com");
    assert_eq!(connect.2["features"]["conversations"], false);
    assert_eq!(connect.2["features"]["preview"], true);
    let paths: Vec<_> = connect.2["proxy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        paths,
        ["/v1/chat/completions", "/v1/responses", "/v1/messages"]
    );
    assert_eq!(connect.2["public"]["mcp"], "/mcp");

    let llms = app.client.get(app.url("/llms.txt")).send().await.unwrap();
    assert!(
        llms.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/markdown")
    );
    let llms = llms.text().await.unwrap();
    assert!(
        llms.starts_with("# Herma\n\n> "),
        "llmstxt.org layout: {llms}"
    );
    assert!(llms.contains("https://herma.example.com/openapi.json"));
    let full = app
        .client
        .get(app.url("/llms-full.txt"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        full.contains("# The proxy") && full.contains("# Entity memory"),
        "the docs are inlined"
    );

    let card = req(Method::GET, "/.well-known/agent-card.json")
        .send(&app)
        .await
        .2;
    assert_eq!(card["name"], "Herma");
    assert_eq!(card["url"], "https://herma.example.com/mcp");
    assert!(card["skills"].as_array().unwrap().len() >= 2);

    let robots = app
        .client
        .get(app.url("/robots.txt"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(robots.contains("Disallow: /v1/"));
    let icon = app
        .client
        .get(app.url("/favicon.svg"))
        .send()
        .await
        .unwrap();
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
    assert!(icon.text().await.unwrap().starts_with("<svg"));
    let health = req(Method::GET, "/healthz").send(&app).await.2;
    assert_eq!(health["status"], "ok");
}

#[tokio::test]
async fn without_a_public_url_discovery_names_the_listening_address_never_the_host_header() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let connect = req(Method::GET, "/connect.json").send(&app).await;
    assert_eq!(connect.2["base_url"], format!("http://{}", app.addr));
    assert_eq!(connect.1["cache-control"], "no-cache");
    // A forged Host (a shared cache or a rebinding resolver in front) changes nothing that
    // tells clients where to send their keys.
    for path in [
        "/connect.json",
        "/llms.txt",
        "/.well-known/agent-card.json",
        "/",
    ] {
        for host in ["evil.example", "evil\"host", "attacker.example:443"] {
            let response = app
                .client
                .get(app.url(path))
                .header("host", host)
                .send()
                .await
                .unwrap();
            let text = response.text().await.unwrap();
            assert!(
                !text.contains("evil") && !text.contains("attacker"),
                "{path} {host}: {text}"
            );
            if path != "/" {
                assert!(text.contains(&app.addr.to_string()), "{path}: {text}");
            }
        }
    }
}
