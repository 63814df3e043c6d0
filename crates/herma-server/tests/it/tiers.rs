//! Tiers 2 and 3 end to end: semantic rules on the real all-MiniLM-L6-v2 model (H05), the
//! engine's short-circuit (H06), the classifier against a local OpenAI-format server — typed,
//! malformed, timed out, rate limited — (H16) and contributor refusal (H03).

use herma_core::CallerScope;
use herma_core::time::Clock;
use herma_store::DocumentStoreExt;
use herma_test_support::mock_models::{MockModels, Reply};
use herma_test_support::mock_upstream::MockUpstream;
use herma_test_support::{Backend, TestApp, embed_model_dir, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{configure, dry_run, receipt, req};

fn chat(text: &str) -> Value {
    json!({"model": "gpt-5-mini", "messages": [{"role": "user", "content": text}]})
}

/// Proxies a Chat Completions request and returns the receipt's matched rules and action.
async fn proxy(app: &TestApp, mock: &MockUpstream, key: &str, text: &str) -> Value {
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("X-Upstream-Base-Url", mock.url())
        .json(&chat(text))
        .send()
        .await
        .unwrap();
    let receipt_id = response
        .headers()
        .get("x-herma-receipt")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .expect("a receipt id");
    let status = response.status();
    let body = response.text().await.unwrap();
    assert!(status.is_success(), "{status} {body}");
    receipt(app, key, &receipt_id).await
}

/// An app whose classifier is `models` (plus `extra` settings).
async fn classifier_app(models: &MockModels, backend: Backend, extra: &[(&str, &str)]) -> TestApp {
    let url = models.url();
    let mut settings = vec![
        ("HERMA_MICROMODEL_URL", url.as_str()),
        ("HERMA_MICROMODEL_MODEL", "qwen2.5:0.5b"),
        ("HERMA_MICROMODEL_API_KEY", "sk-mock"),
    ];
    settings.extend_from_slice(extra);
    spawn_app(backend, &settings).await
}

fn words(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
        .collect()
}

const DEPLOY_EXAMPLES: [&str; 3] = [
    "deploy to production",
    "push the new build live",
    "release the service to prod",
];
const DEPLOY_NEGATIVE: &str = "roll back the last production deployment";

#[tokio::test]
async fn h05_tier2_semantic_paraphrase_without_literal_id() {
    let dir = embed_model_dir();
    let app = spawn_app(Backend::Sqlite, &[("HERMA_EMBED_MODEL_DIR", &dir)]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(&app, &key, "/v1/context", json!({"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations before the canary."})).await;
    configure(
        &app,
        &key,
        "/v1/provisions",
        json!({
            "id": "deploy", "action": "shim_context", "context_refs": ["deploy.checklist"],
            "triggers": {"semantic": {"examples": DEPLOY_EXAMPLES, "negatives": [DEPLOY_NEGATIVE]}}
        }),
    )
    .await;
    // Writing the rule computed and stored its example vectors, off the proxy's path.
    let scope = CallerScope::parse(&format!("key:{}", TestApp::key_id(&key))).unwrap();
    let model = app
        .app
        .tiers
        .embedder
        .as_ref()
        .unwrap()
        .identity()
        .id
        .clone();
    let written = app
        .app
        .store
        .get_vectors(&scope, &model, &[("deploy".to_owned(), 1)])
        .await
        .unwrap();
    assert_eq!(written.len(), 1, "vectors exist before any request");

    let paraphrase = "publish this version for our customers";
    let example_words: std::collections::BTreeSet<String> =
        DEPLOY_EXAMPLES.iter().flat_map(|e| words(e)).collect();
    assert!(
        words(paraphrase).is_disjoint(&example_words),
        "the paraphrase shares no word with the examples"
    );
    let report = dry_run(&app, &key, paraphrase).await;
    assert_eq!(report["decision"], "shim_context", "{report:#}");
    let matched = &report["tiers"]["semantic"][0];
    assert_eq!(matched["provision_id"], "deploy");
    assert_eq!(matched["tier"], "semantic");
    let score = matched["score"].as_f64().unwrap();
    assert!(score >= 0.30, "score {score} clears the default threshold");
    assert!(
        matched["trigger"]
            .as_str()
            .unwrap()
            .starts_with("semantic:")
    );
    let view = &report["evaluation"]["semantic"][0];
    assert_eq!(view["matched"], true);
    assert!(view["score"].as_f64().unwrap() - view["negative_score"].as_f64().unwrap() >= 0.05);
    assert!(
        report["evaluation"]["embedding_model"]
            .as_str()
            .unwrap()
            .starts_with("local:")
    );

    // Unrelated text, and the listed negative's own paraphrase, do not fire it.
    for (text, why) in [
        ("what's the weather like in Lisbon tomorrow", "unrelated"),
        (
            "revert the most recent production deploy",
            "closer to the negative",
        ),
    ] {
        let report = dry_run(&app, &key, text).await;
        assert_eq!(report["decision"], "forward", "{why}: {report:#}");
        let view = &report["evaluation"]["semantic"][0];
        assert_eq!(view["matched"], false, "{why}: {view}");
        assert!(report["tiers"]["semantic"].as_array().unwrap().is_empty());
    }

    // The proxy shims it too, and the receipt records the tier and score.
    let receipt = proxy(&app, &mock, &key, paraphrase).await;
    assert_eq!(receipt["action"], "shimmed", "{receipt:#}");
    assert_eq!(receipt["matched"][0]["tier"], "semantic");
    assert!(receipt["matched"][0]["score"].as_f64().unwrap() >= 0.30);
    let sent = mock.requests().last().unwrap().json();
    assert!(
        sent.to_string()
            .contains("Run the migrations before the canary.")
    );

    // Example vectors were stored once for this provision version and model.
    let scope = CallerScope::parse(&format!("key:{}", TestApp::key_id(&key))).unwrap();
    let model = app
        .app
        .tiers
        .embedder
        .as_ref()
        .unwrap()
        .identity()
        .id
        .clone();
    let stored = app
        .app
        .store
        .get_vectors(&scope, &model, &[("deploy".to_owned(), 1)])
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].vectors.examples.len(), 3);
    assert_eq!(stored[0].vectors.negatives.len(), 1);
}

#[tokio::test]
async fn semantic_rules_without_a_model_say_so_and_never_fire() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/provisions",
        json!({
            "id": "deploy", "action": "respond_directly", "response": {"text": "no"},
            "triggers": {"semantic": {"examples": DEPLOY_EXAMPLES}}
        }),
    )
    .await;
    let report = dry_run(&app, &key, "deploy to production").await;
    assert_eq!(report["decision"], "forward");
    let skipped = &report["evaluation"]["skipped"][0];
    assert_eq!(skipped["provision_id"], "deploy");
    assert_eq!(skipped["tier"], "semantic");
    assert!(
        skipped["reason"]
            .as_str()
            .unwrap()
            .contains("HERMA_EMBED_MODEL_DIR")
    );
}

#[tokio::test]
async fn h06_engine_short_circuits_micromodel_when_keyword_matches() {
    let models = MockModels::start(Reply::decision(true, 0.9)).await;
    let app = classifier_app(&models, Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "prod", "kind": "noun", "schema_or_body": "Production runs in eu-west-1."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({
        "id": "prod", "action": "shim_context", "context_refs": ["prod"],
        "triggers": {"keywords": ["deploy"], "micromodel": {"question": "Is the user about to change production?", "min_confidence": 0.7}}
    }))
    .await;

    let receipt = proxy(&app, &mock, &key, "deploy the fix").await;
    assert_eq!(receipt["matched"][0]["tier"], "keyword");
    assert_eq!(receipt["matched"][0]["trigger"], "keyword:deploy");
    assert_eq!(
        models.chat_calls(),
        0,
        "a tier-1 hit means the classifier is not called"
    );

    let receipt = proxy(&app, &mock, &key, "push my branch to the live cluster").await;
    assert_eq!(models.chat_calls(), 1);
    assert_eq!(receipt["action"], "shimmed");
    assert_eq!(receipt["matched"][0]["tier"], "micromodel");
    assert_eq!(receipt["matched"][0]["confidence"], 0.9);
    let asked = models.last_chat().unwrap();
    assert_eq!(asked["model"], "qwen2.5:0.5b");
    assert_eq!(asked["response_format"]["type"], "json_object");
    let prompt = asked["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("Is the user about to change production?"));
    assert!(prompt.contains("push my branch to the live cluster"));

    // Below the rule's minimum confidence: no match.
    models.queue([Reply::decision(true, 0.5)]);
    let receipt = proxy(&app, &mock, &key, "push my branch to the live cluster").await;
    assert_eq!(receipt["action"], "forwarded");
    assert_eq!(models.chat_calls(), 2);

    let metrics = app.app.render_metrics();
    assert!(
        metrics.contains("herma_classifier_outcomes_total{outcome=\"decided\"} 2\n"),
        "{metrics}"
    );
    assert!(metrics.contains("herma_classifier_outcomes_total{outcome=\"failed\"} 0\n"));
    assert!(
        metrics.contains("herma_semantic_embed_seconds_count 0\n"),
        "no semantic rule, no embedding"
    );
}

#[tokio::test]
async fn h16_malformed_replies_timeouts_and_rate_limits_never_activate_a_direct_answer() {
    let models = MockModels::start(Reply::decision(true, 0.95)).await;
    // Long enough that a loaded machine still hears the prompt replies; the slow reply below
    // outlasts it fourfold.
    let app = classifier_app(
        &models,
        Backend::Memory,
        &[("HERMA_MICROMODEL_TIMEOUT_MS", "1500")],
    )
    .await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "care", "kind": "detail", "schema_or_body": "Be careful with secrets."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({
        "id": "block", "action": "respond_directly", "priority": 20, "response": {"text": "Refused."},
        "triggers": {"micromodel": {"question": "Is the user asking for a secret?", "on_failure": "skip"}}
    }))
    .await;
    configure(&app, &key, "/v1/provisions", json!({
        "id": "care", "action": "shim_context", "priority": 10, "context_refs": ["care"],
        "triggers": {"micromodel": {"question": "Does the request touch credentials?", "on_failure": "fallback"}}
    }))
    .await;

    // Typed and positive: the direct answer wins.
    let receipt = proxy_direct(&app, &key, "print the api token").await;
    assert_eq!(receipt, "Refused.");

    // Malformed replies (prose, a string boolean, out of range, not JSON at all) activate
    // nothing — not even the fallback shim.
    for bad in [
        Reply::Content("Yes, apply it.".into()),
        Reply::Content(r#"{"apply": "true", "confidence": 0.9}"#.into()),
        Reply::Content(r#"{"apply": true, "confidence": 1.5}"#.into()),
        Reply::Garbage,
    ] {
        models.queue([bad.clone(), bad.clone()]);
        let receipt = proxy(&app, &mock, &key, "print the api token").await;
        assert_eq!(receipt["action"], "forwarded", "{bad:?}: {receipt:#}");
        assert!(receipt["matched"].as_array().unwrap().is_empty());
    }

    // No answer at all (timeout, 429): the direct answer never fires; the shim with the
    // fallback policy does.
    for failed in [
        Reply::Slow(
            std::time::Duration::from_millis(6_000),
            r#"{"apply": true, "confidence": 1}"#.into(),
        ),
        Reply::RateLimited(7),
    ] {
        models.queue([failed.clone(), failed.clone()]);
        let receipt = proxy(&app, &mock, &key, "print the api token").await;
        assert_eq!(receipt["action"], "shimmed", "{failed:?}: {receipt:#}");
        let matched = receipt["matched"].as_array().unwrap();
        assert_eq!(matched.len(), 1, "{matched:?}");
        assert_eq!(matched[0]["provision_id"], "care");
        assert_eq!(matched[0]["trigger"], "micromodel:fallback");
    }
}

/// Proxies a request Herma should answer itself; returns the answer's text.
async fn proxy_direct(app: &TestApp, key: &str, text: &str) -> String {
    let got = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("X-Upstream-Base-Url", "http://127.0.0.1:9")
        .json(&chat(text))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), StatusCode::OK);
    let body: Value = got.json().await.unwrap();
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn h03_tier3_micromodel_classifier_and_contributor_refusal() {
    let models = MockModels::start(Reply::decision(true, 0.95)).await;
    let app = classifier_app(&models, Backend::Memory, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    for model in [
        "acme-contributor",
        "org/Contributor",
        "llama:CONTRIBUTOR-7b",
    ] {
        let got = req(Method::POST, "/v1/provisions")
            .key(&key)
            .harness("claude-code")
            .json(json!({"id": "c", "action": "shim_context", "context_refs": ["x"],
                "triggers": {"micromodel": {"question": "q?", "model": model, "on_failure": "fallback"}}}))
            .send(&app)
            .await;
        assert_eq!(got.0, StatusCode::FORBIDDEN, "{model}: {}", got.2);
        assert_eq!(got.2["code"], "contributor_tier_refused");
    }
    // A stored row naming one (written around the API) is refused before the call and before
    // the fallback.
    let mut spec: herma_core::model::ProvisionSpec = serde_json::from_value(json!({
        "id": "stored", "action": "shim_context", "context_refs": ["care"],
        "triggers": {"micromodel": {"question": "q?", "model": "x/contributor", "on_failure": "fallback"}}
    }))
    .unwrap();
    spec.priority = 1;
    let scope = CallerScope::parse(&format!("key:{}", TestApp::key_id(&key))).unwrap();
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "care", "kind": "detail", "schema_or_body": "x"}),
    )
    .await;
    app.app
        .store
        .provisions()
        .create(&scope, &spec, app.clock.now())
        .await
        .unwrap();
    app.app.rules.invalidate(&scope);
    let mock = MockUpstream::start().await;
    let receipt = proxy(&app, &mock, &key, "anything").await;
    assert_eq!(receipt["action"], "forwarded", "{receipt:#}");
    assert_eq!(models.chat_calls(), 0);
}

#[tokio::test]
async fn h16_preview_and_dry_run_never_call_configured_trigger_providers() {
    let models = MockModels::start(Reply::decision(true, 0.95)).await;
    let app = classifier_app(
        &models,
        Backend::Sqlite,
        &[
            ("HERMA_EMBED_URL", &models.url()),
            ("HERMA_EMBED_MODEL", "text-embedding-3-small"),
            ("HERMA_EMBED_API_KEY", "sk-mock"),
        ],
    )
    .await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let semantic = json!({"examples": ["deploy the service"], "threshold": 0.2});
    let micromodel = json!({"question": "Is this about deploying?", "on_failure": "fallback"});
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "d", "kind": "verb", "schema_or_body": "Deploy carefully."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({"id": "sem", "action": "shim_context", "context_refs": ["d"], "triggers": {"semantic": semantic}})).await;
    configure(&app, &key, "/v1/provisions", json!({"id": "micro", "action": "shim_context", "context_refs": ["d"], "triggers": {"micromodel": micromodel}})).await;
    // The same rules as built-ins, which the public preview evaluates.
    let builtin = CallerScope::system_builtin();
    for (id, triggers) in [
        ("starter.sem", json!({"semantic": semantic})),
        ("starter.micro", json!({"micromodel": micromodel})),
    ] {
        let spec = serde_json::from_value(json!({"id": id, "action": "respond_directly", "priority": -10, "response": {"text": "hi"}, "triggers": triggers, "fabric_governance": {"status": "verified", "producer": "herma", "visibility_scope": "public"}})).unwrap();
        app.app
            .store
            .provisions()
            .create(&builtin, &spec, app.clock.now())
            .await
            .unwrap();
    }
    app.app.rules.invalidate(&builtin);
    let (embeds, chats) = (models.embed_calls(), models.chat_calls());
    assert_eq!(
        embeds, 2,
        "one probe at start tells the remote model's size; writing the semantic rule computed its examples"
    );

    let report = dry_run(&app, &key, "deploy the service now").await;
    assert_eq!(report["decision"], "forward", "{report:#}");
    let reasons: Vec<&str> = report["evaluation"]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(&herma_core::evaluation::OFFLINE_EMBEDDER),
        "{reasons:?}"
    );
    let outcomes: Vec<&str> = report["evaluation"]["micromodel"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["outcome"].as_str().unwrap())
        .collect();
    assert!(
        outcomes
            .iter()
            .all(|o| o.contains(herma_core::evaluation::OFFLINE_CLASSIFIER)),
        "{outcomes:?}"
    );
    let preview = app
        .client
        .post(app.url("/api/preview"))
        .json(&json!({"protocol": "chat_completions", "body": chat("deploy the service now")}))
        .send()
        .await
        .unwrap();
    assert_eq!(preview.status(), StatusCode::OK);
    let preview: Value = preview.json().await.unwrap();
    assert_eq!(preview["decision"], "forward", "{preview:#}");
    let skipped: Vec<&str> = preview["evaluation"]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["provision_id"].as_str().unwrap())
        .collect();
    assert!(
        skipped.contains(&"starter.sem"),
        "the preview saw the semantic starter: {skipped:?}"
    );
    assert_eq!(preview["evaluation"]["micromodel"][0]["result"], "skipped");
    assert_eq!((models.embed_calls(), models.chat_calls()), (embeds, chats));

    // Online, the same rules use both providers.
    let mock = MockUpstream::start().await;
    let receipt = proxy(&app, &mock, &key, "deploy the service now").await;
    assert!(models.embed_calls() > embeds);
    assert!(models.chat_calls() > chats);
    assert_eq!(receipt["action"], "shimmed", "{receipt:#}");

    // And offline again after vectors exist: still no calls.
    let (embeds, chats) = (models.embed_calls(), models.chat_calls());
    dry_run(&app, &key, "deploy the service now").await;
    assert_eq!((models.embed_calls(), models.chat_calls()), (embeds, chats));
}

#[tokio::test]
async fn both_tiers_speak_ollama_too() {
    let models = MockModels::start(Reply::decision(true, 0.8)).await;
    let base = models.ollama_url();
    let app = spawn_app(
        Backend::Memory,
        &[
            ("HERMA_MICROMODEL_URL", &base),
            ("HERMA_MICROMODEL_PROTOCOL", "ollama"),
            ("HERMA_MICROMODEL_MODEL", "qwen2.5:0.5b"),
            ("HERMA_EMBED_URL", &base),
            ("HERMA_EMBED_PROTOCOL", "ollama"),
            ("HERMA_EMBED_MODEL", "all-minilm"),
        ],
    )
    .await;
    let identity = app.app.tiers.embedder.as_ref().unwrap().identity().clone();
    assert_eq!(identity.dimensions, 16);
    assert!(
        identity.id.starts_with("ollama:all-minilm@"),
        "{}",
        identity.id
    );
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    configure(
        &app,
        &key,
        "/v1/context",
        json!({"id": "d", "kind": "verb", "schema_or_body": "Deploy carefully."}),
    )
    .await;
    configure(&app, &key, "/v1/provisions", json!({"id": "sem", "action": "shim_context", "context_refs": ["d"], "triggers": {"semantic": {"examples": ["deploy the billing service"]}}})).await;
    configure(&app, &key, "/v1/provisions", json!({"id": "micro", "action": "shim_context", "context_refs": ["d"], "triggers": {"micromodel": {"question": "Is this about billing?"}}})).await;

    let receipt = proxy(&app, &mock, &key, "deploy the billing service now").await;
    let tiers: Vec<(&str, &str)> = receipt["matched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["provision_id"].as_str().unwrap(),
                m["tier"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tiers,
        [("micro", "micromodel"), ("sem", "semantic")],
        "{receipt:#}"
    );
    assert_eq!(models.last_chat().unwrap()["format"], "json");
}

#[tokio::test]
async fn connect_json_reports_the_configured_tiers() {
    async fn features(app: &TestApp) -> (Value, Value) {
        let body = req(Method::GET, "/connect.json").send(app).await.2;
        (
            body["features"]["semantic_triggers"].clone(),
            body["features"]["micromodel_triggers"].clone(),
        )
    }
    let plain = spawn_app(Backend::Memory, &[]).await;
    assert_eq!(features(&plain).await, (json!(false), json!(false)));

    let models = MockModels::start(Reply::decision(true, 0.9)).await;
    let classified = classifier_app(&models, Backend::Memory, &[]).await;
    assert_eq!(features(&classified).await, (json!(false), json!(true)));

    let dir = embed_model_dir();
    let semantic = spawn_app(Backend::Memory, &[("HERMA_EMBED_MODEL_DIR", &dir)]).await;
    assert_eq!(features(&semantic).await, (json!(true), json!(false)));
}
