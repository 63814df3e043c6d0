//! Typed work conversations end to end: a real server, real stores, a local server per provider
//! speaking its exact wire format.

use herma_core::time::Clock;
use herma_test_support::mock_providers::{Answer, KEY, Kind, MockProvider};
use herma_test_support::{Backend, Stores, TestApp, fresh_stores, spawn_app_with};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{assert_problem, configure, req};

/// One test per SQL backend: `name::sqlite` and `name::postgres`.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            use herma_test_support::Backend;

            #[tokio::test]
            async fn sqlite() {
                super::$name(Backend::Sqlite).await;
            }

            #[tokio::test]
            async fn postgres() {
                super::$name(Backend::Postgres).await;
            }
        }
    };
}
pub(crate) use both;

/// The contract every test names.
pub(crate) fn contract() -> Value {
    json!({
        "id": "work.review",
        "kind": "verb",
        "title": "Schedule a review",
        "schema_or_body": {"work_contract": {
            "operation_id": "schedule_review",
            "category_id": "review",
            "description": "Schedule a review of one document.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "document": {"type": "string", "minLength": 1, "maxLength": 80},
                    "days": {"type": "integer", "minimum": 1, "maximum": 30}
                },
                "required": ["document", "days"],
                "additionalProperties": false
            }
        }}
    })
}

pub(crate) fn provider_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Meta => "meta",
        Kind::Ollama => "ollama",
        Kind::Openai => "openai",
        Kind::Anthropic => "anthropic",
        Kind::Openrouter => "openrouter",
    }
}

/// The operator settings that make `kind` usable through `mock`, granted to `key_ids`.
pub(crate) fn settings(
    kind: Kind,
    mock: &MockProvider,
    key_ids: &[&str],
    budget: &str,
) -> Vec<(String, String)> {
    let name = provider_name(kind);
    let upper = name.to_ascii_uppercase();
    let (model, routing) = match kind {
        Kind::Meta => ("muse-spark-1.3", None),
        Kind::Ollama => ("muse-spark-open", None),
        Kind::Openai => ("gpt-test", None),
        Kind::Anthropic => ("claude-test", None),
        Kind::Openrouter => ("vendor/model", Some("host-slug")),
    };
    let grants: Vec<Value> = key_ids
        .iter()
        .map(|id| {
            let mut choice = json!({"provider": name, "model": model});
            if let Some(slug) = routing {
                choice["routing_provider"] = json!(slug);
            }
            json!({"caller_scope": format!("key:{id}"), "providers": [choice]})
        })
        .collect();
    let mut out = vec![
        ("HERMA_CONVERSATION_ENABLED".to_owned(), "true".to_owned()),
        (
            "HERMA_CONVERSATION_PROVIDER_GRANTS".to_owned(),
            Value::Array(grants).to_string(),
        ),
        (
            format!("HERMA_CONVERSATION_{upper}_MAX_OUTPUT"),
            "256".to_owned(),
        ),
        (
            format!("HERMA_CONVERSATION_{upper}_BASE_URL"),
            mock.origin(),
        ),
        (format!("{upper}_API_KEY"), KEY.to_owned()),
    ];
    match kind {
        Kind::Meta => {}
        Kind::Ollama => {}
        Kind::Openai | Kind::Anthropic | Kind::Openrouter => {
            out.push((
                format!("HERMA_CONVERSATION_{upper}_MODEL"),
                model.to_owned(),
            ));
            out.push((
                format!("HERMA_CONVERSATION_{upper}_INPUT_USD_PER_MILLION"),
                "1".to_owned(),
            ));
            out.push((
                format!("HERMA_CONVERSATION_{upper}_OUTPUT_USD_PER_MILLION"),
                "2".to_owned(),
            ));
        }
    }
    if kind != Kind::Ollama {
        out.push((format!("HERMA_{upper}_BUDGET_USD"), budget.to_owned()));
    }
    if let Some(slug) = routing {
        out.push((
            "HERMA_CONVERSATION_OPENROUTER_PROVIDER".to_owned(),
            slug.to_owned(),
        ));
    }
    out
}

/// A server with one key (route, configure) holding the contract, and the provider mock.
struct Setup {
    app: TestApp,
    key: String,
    mock: MockProvider,
    stores: Stores,
}

/// Issues a key on a first app, then starts the server with a grant for it (grants name key
/// ids, which are random).
async fn setup(backend: Backend, kind: Kind, extra: &[(&str, &str)]) -> Setup {
    setup_with(backend, kind, "5", extra, true).await
}

async fn setup_with(
    backend: Backend,
    kind: Kind,
    budget: &str,
    extra: &[(&str, &str)],
    granted: bool,
) -> Setup {
    let stores = fresh_stores(backend).await;
    let mock = MockProvider::start(kind).await;
    let first = spawn_app_with(stores.clone(), &[]).await;
    let key = first.key("route,configure", Some("claude-code")).await;
    first.stop().await;
    let id = TestApp::key_id(&key).to_owned();
    let ids: Vec<&str> = if granted { vec![id.as_str()] } else { vec![] };
    let owned = settings(kind, &mock, &ids, budget);
    let mut pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.extend_from_slice(extra);
    let app = spawn_app_with(stores.clone(), &pairs).await;
    configure(&app, &key, "/v1/context", contract()).await;
    Setup {
        app,
        key,
        mock,
        stores,
    }
}

fn turn_body(kind: Kind, conversation: &str, request: &str, version: u64, message: &str) -> Value {
    json!({
        "conversation_id": conversation,
        "request_id": request,
        "expected_version": version,
        "message": message,
        "context_refs": ["work.review"],
        "provider": provider_name(kind),
    })
}

async fn turn(s: &Setup, body: Value) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    req(Method::POST, "/v1/conversations/turn")
        .key(&s.key)
        .json(body)
        .send(&s.app)
        .await
}

pub(crate) fn review_call() -> Answer {
    Answer::ToolCall {
        name: "schedule_review".into(),
        arguments: json!({"document": "spec.md", "days": 3}),
    }
}

#[tokio::test]
async fn turns_are_refused_unless_the_operator_enables_them() {
    let app = herma_test_support::spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route", None).await;
    let got = req(Method::POST, "/v1/conversations/turn")
        .key(&key)
        .json(turn_body(Kind::Meta, "c1", "r1", 0, "hello"))
        .send(&app)
        .await;
    assert_problem(&got, StatusCode::NOT_FOUND, "conversation_disabled");
    let connect = req(Method::GET, "/connect.json").send(&app).await;
    assert_eq!(connect.2["features"]["conversations"], false);
    assert_eq!(
        connect.2["api"]["conversation_turn"],
        "/v1/conversations/turn"
    );
    // The schemas need no key.
    let schema = req(Method::GET, "/api/conversation-schema")
        .send(&app)
        .await;
    assert_eq!(schema.0, StatusCode::OK);
    assert_eq!(schema.2["turn"]["required"][0], "conversation_id");
    assert_eq!(
        schema.2["work_contract"]["properties"]["category_id"]["enum"][0],
        "planning"
    );
}

async fn clarify_ready_replay(backend: Backend, kind: Kind) {
    let s = setup(backend, kind, &[]).await;
    let connect = req(Method::GET, "/connect.json").send(&s.app).await;
    assert_eq!(connect.2["features"]["conversations"], true);

    // 1. Plain text: a clarification.
    s.mock
        .answer([Answer::Text("Which document should be reviewed?".into())]);
    let first = turn(
        &s,
        turn_body(kind, "work-1", "r-1", 0, "Hello. What work can I do today?"),
    )
    .await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.2);
    assert_eq!(first.2["status"], "clarify");
    assert_eq!(first.2["executed"], false);
    assert_eq!(first.2["version"], 1);
    assert_eq!(first.2["attempts"][0]["outcome"], "completed");
    assert_eq!(first.2["attempts"][0]["reservation_status"], "reserved");

    // 2. A valid call: ready, with the validated arguments.
    s.mock.answer([review_call()]);
    let second = turn(
        &s,
        turn_body(kind, "work-1", "r-2", 1, "spec.md, within three days"),
    )
    .await;
    assert_eq!(second.0, StatusCode::OK, "{}", second.2);
    assert_eq!(second.2["status"], "ready", "{}", second.2);
    assert_eq!(second.2["executed"], false);
    assert_eq!(second.2["version"], 2);
    assert_eq!(second.2["proposal"]["operation_id"], "schedule_review");
    assert_eq!(
        second.2["proposal"]["arguments"],
        json!({"document": "spec.md", "days": 3})
    );
    assert_eq!(s.mock.calls(), 2);

    // 3. The same request again: the stored answer, no model call.
    let replay = turn(
        &s,
        turn_body(kind, "work-1", "r-2", 1, "spec.md, within three days"),
    )
    .await;
    assert_eq!(replay.0, StatusCode::OK);
    assert_eq!(replay.2, second.2);
    assert_eq!(replay.1["x-herma-replayed"], "true");
    assert_eq!(s.mock.calls(), 2, "a replay never calls the model");

    // The second request carried the transcript of the first turn.
    let sent = s.mock.received()[1].json().to_string();
    assert!(
        sent.contains("Which document should be reviewed?"),
        "{sent}"
    );

    // Conflicts: the same id with another input, a stale version.
    let reused = turn(&s, turn_body(kind, "work-1", "r-2", 1, "something else")).await;
    assert_problem(&reused, StatusCode::CONFLICT, "conversation_conflict");
    assert_eq!(reused.2["reason"], "request_id_reused");
    let stale = turn(&s, turn_body(kind, "work-1", "r-3", 1, "again")).await;
    assert_problem(&stale, StatusCode::CONFLICT, "conversation_conflict");
    assert_eq!(stale.2["current_version"], 2);
    assert_eq!(s.mock.calls(), 2);

    // The caller's own view.
    let view = req(Method::GET, "/v1/conversations/work-1")
        .key(&s.key)
        .send(&s.app)
        .await;
    assert_eq!(view.0, StatusCode::OK, "{}", view.2);
    assert_eq!(view.2["version"], 2);
    assert_eq!(view.2["transcript"].as_array().unwrap().len(), 4);
    assert_eq!(view.2["recent_turns"][0]["request_id"], "r-2");
    assert_eq!(
        view.2["recent_turns"][0]["server_exception"]["payer"],
        "operator"
    );
    assert_eq!(
        view.2["recent_turns"][0]["server_exception"]["effect"],
        "proposal_only"
    );
    let other = s.app.key("route", None).await;
    let hidden = req(Method::GET, "/v1/conversations/work-1")
        .key(&other)
        .send(&s.app)
        .await;
    assert_problem(&hidden, StatusCode::NOT_FOUND, "not_found");
    let _ = &s.stores;
}

#[tokio::test]
async fn clarify_ready_and_replay_through_meta_on_sqlite() {
    clarify_ready_replay(Backend::Sqlite, Kind::Meta).await;
}

#[tokio::test]
async fn clarify_ready_and_replay_through_meta_on_postgres() {
    clarify_ready_replay(Backend::Postgres, Kind::Meta).await;
}

#[tokio::test]
async fn clarify_ready_and_replay_through_ollama() {
    clarify_ready_replay(Backend::Sqlite, Kind::Ollama).await;
}

#[tokio::test]
async fn clarify_ready_and_replay_through_openai() {
    clarify_ready_replay(Backend::Sqlite, Kind::Openai).await;
}

#[tokio::test]
async fn clarify_ready_and_replay_through_anthropic() {
    clarify_ready_replay(Backend::Postgres, Kind::Anthropic).await;
}

#[tokio::test]
async fn clarify_ready_and_replay_through_openrouter() {
    clarify_ready_replay(Backend::Sqlite, Kind::Openrouter).await;
}

async fn each_provider_receives_its_own_exact_request_shape(backend: Backend) {
    for kind in [
        Kind::Meta,
        Kind::Ollama,
        Kind::Openai,
        Kind::Anthropic,
        Kind::Openrouter,
    ] {
        let s = setup(backend, kind, &[]).await;
        s.mock.answer([review_call()]);
        let got = turn(&s, turn_body(kind, "c", "r", 0, "spec.md in 3 days")).await;
        assert_eq!(got.2["status"], "ready", "{kind:?}: {}", got.2);
        let sent = s.mock.received()[0].json();
        match kind {
            Kind::Meta => {
                assert_eq!(sent["max_tokens"], 256);
                assert_eq!(sent["tools"][0]["function"]["name"], "schedule_review");
            }
            Kind::Ollama => {
                assert_eq!(sent["options"]["num_predict"], 256);
                assert_eq!(sent["stream"], false);
            }
            Kind::Openai => {
                assert_eq!(sent["max_output_tokens"], 256);
                assert_eq!(sent["store"], false);
                assert_eq!(sent["service_tier"], "default");
                assert_eq!(sent["tools"][0]["strict"], false);
            }
            Kind::Anthropic => {
                assert_eq!(sent["max_tokens"], 256);
                assert_eq!(sent["service_tier"], "standard_only");
                assert!(sent["system"].is_string());
                assert_eq!(
                    s.mock.received()[0].headers["anthropic-version"],
                    "2026-10-21"
                );
            }
            Kind::Openrouter => {
                assert_eq!(sent["provider"]["only"], json!(["host-slug"]));
                assert_eq!(sent["provider"]["allow_fallbacks"], false);
                assert_eq!(sent["provider"]["data_collection"], "deny");
                assert_eq!(got.2["attempts"][0]["reported_provider"], "host-slug");
            }
        }
    }
}

both!(each_provider_receives_its_own_exact_request_shape);

async fn wrong_argument_types_are_a_clarification_naming_every_field(backend: Backend) {
    let s = setup(backend, Kind::Meta, &[]).await;
    s.mock.answer([Answer::ToolCall {
        name: "schedule_review".into(),
        arguments: json!({"document": 7, "days": "3", "urgent": true}),
    }]);
    let got = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "review it")).await;
    assert_eq!(got.0, StatusCode::OK);
    assert_eq!(got.2["status"], "clarify");
    let pointers: Vec<&str> = got.2["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["/document", "/days", "/urgent"]);
    // A function no contract names is never a proposal.
    s.mock.answer([Answer::ToolCall {
        name: "run_shell".into(),
        arguments: json!({"cmd": "rm -rf /"}),
    }]);
    let got = turn(&s, turn_body(Kind::Meta, "c", "r2", 1, "do it")).await;
    assert_eq!(got.2["status"], "blocked", "{}", got.2);
    assert_eq!(got.2["executed"], false);
}

both!(wrong_argument_types_are_a_clarification_naming_every_field);

#[tokio::test]
async fn h17_direct_turns_need_the_callers_own_exact_grant() {
    let s = setup_with(Backend::Sqlite, Kind::Meta, "5", &[], false).await;
    let got = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
    assert_problem(&got, StatusCode::FORBIDDEN, "provider_grant_required");
    assert_eq!(s.mock.calls(), 0);
    // No turn record was written.
    let view = req(Method::GET, "/v1/conversations/c")
        .key(&s.key)
        .send(&s.app)
        .await;
    assert_problem(&view, StatusCode::NOT_FOUND, "not_found");
}

async fn configuration_outcomes_come_in_order_before_any_record(backend: Backend) {
    for (extra, status, code) in [
        (
            vec![
                (
                    "HERMA_CONVERSATION_META_MODEL",
                    "muse-spark-1.3-contributor",
                ),
                ("HERMA_CONVERSATION_META_MAX_OUTPUT", ""),
            ],
            StatusCode::FORBIDDEN,
            "contributor_tier_refused",
        ),
        (
            vec![
                ("HERMA_CONVERSATION_META_MAX_OUTPUT", " "),
                ("HERMA_CONVERSATION_PROVIDER_PLAN_ALLOWLIST", "x"),
            ],
            StatusCode::SERVICE_UNAVAILABLE,
            "output_allowance_required",
        ),
        (
            vec![
                ("HERMA_CONVERSATION_ALLOW_UNCERTAIN_FAILOVER", "true"),
                ("HERMA_CONVERSATION_META_GENERATION", r#"{"n":2}"#),
            ],
            StatusCode::SERVICE_UNAVAILABLE,
            "invalid_provider_configuration",
        ),
        (
            vec![("HERMA_CONVERSATION_META_GENERATION", r#"{"n":2}"#)],
            StatusCode::SERVICE_UNAVAILABLE,
            "unsupported_generation_configuration",
        ),
    ] {
        let s = setup(backend, Kind::Meta, &extra).await;
        let got = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
        assert_problem(&got, status, code);
        assert_eq!(s.mock.calls(), 0);
        let view = req(Method::GET, "/v1/conversations/c")
            .key(&s.key)
            .send(&s.app)
            .await;
        assert_eq!(view.0, StatusCode::NOT_FOUND, "{code}");
    }
}

both!(configuration_outcomes_come_in_order_before_any_record);

async fn a_missing_operator_key_is_a_recorded_attempt_that_sends_nothing(backend: Backend) {
    let s = setup(backend, Kind::Meta, &[("META_API_KEY", "")]).await;
    let got = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(got.2["status"], "blocked");
    assert_eq!(got.2["reason"], "provider_not_configured");
    assert_eq!(got.2["attempts"][0]["reservation_status"], "not_reserved");
    assert_eq!(got.2["attempts"][0]["request_sent"], false);
    assert_eq!(s.mock.calls(), 0);
}

both!(a_missing_operator_key_is_a_recorded_attempt_that_sends_nothing);

#[tokio::test]
async fn a_denied_provider_budget_is_a_stored_429_and_its_replay_too() {
    // 256 output tokens at $4.25 per million are already 1,088 µ$: a $0.001 budget denies.
    let s = setup_with(Backend::Sqlite, Kind::Meta, "0.001", &[], true).await;
    let got = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
    assert_eq!(got.0, StatusCode::TOO_MANY_REQUESTS, "{}", got.2);
    assert_eq!(got.2["status"], "blocked");
    assert_eq!(got.2["reason"], "provider_budget_denied");
    assert_eq!(got.2["attempts"][0]["reservation_status"], "denied");
    let replay = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
    assert_eq!(replay.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(replay.2, got.2);
    assert_eq!(s.mock.calls(), 0);
}

async fn provider_failures_are_blocked_with_their_outcome_and_never_retried(backend: Backend) {
    for (answer, reason) in [
        (Answer::Accepted, "provider_outcome_uncertain"),
        (Answer::Malformed, "provider_invalid_response"),
        (Answer::DuplicateField, "provider_invalid_response"),
        (
            Answer::RateLimited { retry_after: 30 },
            "provider_rate_limited",
        ),
        (Answer::PaymentRequired, "provider_payment_required"),
    ] {
        let s = setup(backend, Kind::Meta, &[]).await;
        s.mock.answer([answer.clone()]);
        let got = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
        assert_eq!(got.0, StatusCode::OK, "{answer:?}: {}", got.2);
        assert_eq!(got.2["status"], "blocked", "{answer:?}");
        assert_eq!(got.2["reason"], reason, "{answer:?}: {}", got.2);
        assert_eq!(s.mock.calls(), 1, "{answer:?}: one request, never retried");
        let text = got.2.to_string();
        assert!(
            !text.contains("SECRET-PROMPT") && !text.contains("sk-live"),
            "{text}"
        );
    }
    // A queued Responses body is uncertain too.
    let s = setup(backend, Kind::Openai, &[]).await;
    s.mock.answer([Answer::Queued]);
    let got = turn(&s, turn_body(Kind::Openai, "c", "r", 0, "hello")).await;
    assert_eq!(got.2["reason"], "provider_outcome_uncertain", "{}", got.2);
}

both!(provider_failures_are_blocked_with_their_outcome_and_never_retried);

async fn an_oversized_model_request_is_413_before_anything_is_recorded(backend: Backend) {
    let s = setup(backend, Kind::Meta, &[]).await;
    let message = "x".repeat(16 * 1024);
    let first = turn(&s, turn_body(Kind::Meta, "c", "r1", 0, &message)).await;
    assert_eq!(
        first.0,
        StatusCode::OK,
        "one 16 KiB message fits: {}",
        first.2
    );
    // The transcript now holds it: the next turn's request passes 32 KiB.
    let second = turn(&s, turn_body(Kind::Meta, "c", "r2", 1, &message)).await;
    assert_problem(&second, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert_eq!(s.mock.calls(), 1);
}

both!(an_oversized_model_request_is_413_before_anything_is_recorded);

async fn duplicate_fields_and_coerced_types_in_the_body_are_refused(backend: Backend) {
    let s = setup(backend, Kind::Meta, &[]).await;
    let raw = r#"{"conversation_id":"c","conversation_id":"d","request_id":"r","expected_version":0,"message":"m","context_refs":[],"provider":"meta"}"#;
    let response = s
        .app
        .client
        .post(s.app.url("/v1/conversations/turn"))
        .bearer_auth(&s.key)
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "invalid_json");
    let mut coerced = turn_body(Kind::Meta, "c", "r", 0, "m");
    coerced["expected_version"] = json!("0");
    let got = turn(&s, coerced).await;
    assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(got.2["errors"][0]["pointer"], "/expected_version");
    let mut unknown_ref = turn_body(Kind::Meta, "c", "r", 0, "m");
    unknown_ref["context_refs"] = json!(["work.review", "nope"]);
    let got = turn(&s, unknown_ref).await;
    assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(got.2["errors"][0]["pointer"], "/context_refs/1");
    assert_eq!(s.mock.calls(), 0);
}

both!(duplicate_fields_and_coerced_types_in_the_body_are_refused);

async fn a_changed_contract_is_a_conflict(backend: Backend) {
    let s = setup(backend, Kind::Meta, &[]).await;
    let first = turn(&s, turn_body(Kind::Meta, "c", "r1", 0, "hello")).await;
    assert_eq!(first.0, StatusCode::OK);
    let mut changed = contract();
    changed["schema_or_body"]["work_contract"]["description"] = json!("Another description.");
    changed["expected_version"] = json!(1);
    let updated = req(Method::PUT, "/v1/context/work.review")
        .key(&s.key)
        .harness("claude-code")
        .json(changed)
        .send(&s.app)
        .await;
    assert_eq!(updated.0, StatusCode::OK, "{}", updated.2);
    let got = turn(&s, turn_body(Kind::Meta, "c", "r2", 1, "again")).await;
    assert_problem(&got, StatusCode::CONFLICT, "conversation_conflict");
    assert_eq!(got.2["reason"], "contract_changed");
}

both!(a_changed_contract_is_a_conflict);

async fn sealing(backend: Backend) {
    let s = setup(backend, Kind::Meta, &[]).await;
    // A turn admitted by a process that then died: active, with a pending attempt.
    s.mock
        .answer([Answer::Stall(std::time::Duration::from_secs(3600))]);
    let app = s.app.app.clone();
    let key = s.key.clone();
    let url = s.app.url("/v1/conversations/turn");
    let client = s.app.client.clone();
    let stuck = tokio::spawn(async move {
        client
            .post(url)
            .bearer_auth(key)
            .json(&turn_body(Kind::Meta, "c", "r", 0, "hello"))
            .send()
            .await
    });
    // Wait until the attempt was dispatched.
    for _ in 0..200 {
        if s.mock.calls() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(s.mock.calls(), 1);
    // Before two minutes nothing is sealed.
    s.app.clock.advance_millis(119_000);
    assert_eq!(app.sweep_conversations().await.unwrap(), 0);
    stuck.abort();
    // A new process on the same database (a restart) seals it at start-up, once.
    s.app.clock.advance_millis(1_000);
    let restarted = spawn_app_with(s.stores.clone(), &[]).await;
    restarted
        .clock
        .advance_millis(s.app.clock.now().as_millis() - restarted.clock.now().as_millis());
    assert_eq!(restarted.app.sweep_conversations().await.unwrap(), 1);
    assert_eq!(restarted.app.sweep_conversations().await.unwrap(), 0);
    // Its replay is the sealed uncertain answer, with no second model call.
    let replay = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
    assert_eq!(replay.0, StatusCode::OK, "{}", replay.2);
    assert_eq!(replay.2["status"], "blocked");
    assert_eq!(replay.2["reason"], "provider_outcome_uncertain");
    assert_eq!(replay.2["attempts"][0]["reservation_status"], "reserved");
    assert_eq!(s.mock.calls(), 1);
    // The conversation moved on: the next turn is admitted at version 1.
    let next = turn(&s, turn_body(Kind::Meta, "c", "r2", 1, "hello again")).await;
    assert_eq!(next.0, StatusCode::OK, "{}", next.2);
}

#[tokio::test]
async fn unfinished_turns_are_sealed_after_two_minutes_and_after_a_restart_on_sqlite() {
    sealing(Backend::Sqlite).await;
}

#[tokio::test]
async fn unfinished_turns_are_sealed_after_two_minutes_and_after_a_restart_on_postgres() {
    sealing(Backend::Postgres).await;
}

#[tokio::test]
async fn conversations_expire_after_a_day_and_their_ids_are_never_reused() {
    let s = setup(Backend::Sqlite, Kind::Meta, &[]).await;
    let first = turn(&s, turn_body(Kind::Meta, "c", "r1", 0, "hello")).await;
    assert_eq!(first.0, StatusCode::OK);
    s.app.clock.advance_millis(24 * 3600 * 1000);
    let late = turn(&s, turn_body(Kind::Meta, "c", "r2", 1, "hello")).await;
    assert_problem(&late, StatusCode::GONE, "conversation_expired");
    s.app.app.sweep_conversations().await.unwrap();
    let view = req(Method::GET, "/v1/conversations/c")
        .key(&s.key)
        .send(&s.app)
        .await;
    assert_eq!(view.0, StatusCode::OK);
    assert_eq!(view.2["expired"], true);
    assert_eq!(view.2["version"], 1);
    assert_eq!(view.2["transcript"], Value::Null);
    assert_eq!(view.2["recent_turns"][0]["answer"], Value::Null);
    // A new turn with version 0 under the expired id is still refused.
    let reuse = turn(&s, turn_body(Kind::Meta, "c", "r3", 0, "hello")).await;
    assert_problem(&reuse, StatusCode::GONE, "conversation_expired");
}

async fn a_caller_has_at_most_two_active_turns(backend: Backend) {
    let s = setup(backend, Kind::Meta, &[]).await;
    s.mock.answer([
        Answer::Stall(std::time::Duration::from_secs(3600)),
        Answer::Stall(std::time::Duration::from_secs(3600)),
    ]);
    let mut stuck = Vec::new();
    for c in ["a", "b"] {
        let client = s.app.client.clone();
        let url = s.app.url("/v1/conversations/turn");
        let key = s.key.clone();
        stuck.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .json(&turn_body(Kind::Meta, c, "r", 0, "hello"))
                .send()
                .await
        }));
    }
    for _ in 0..200 {
        if s.mock.calls() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let third = turn(&s, turn_body(Kind::Meta, "c", "r", 0, "hello")).await;
    assert_problem(&third, StatusCode::TOO_MANY_REQUESTS, "conversation_limit");
    assert_eq!(third.2["reason"], "active_turns");
    // Another turn of a conversation being answered, and the same request again, are 409s.
    let busy = turn(&s, turn_body(Kind::Meta, "a", "r2", 0, "hello")).await;
    assert_problem(&busy, StatusCode::CONFLICT, "conversation_conflict");
    assert_eq!(busy.2["reason"], "turn_active");
    let again = turn(&s, turn_body(Kind::Meta, "a", "r", 0, "hello")).await;
    assert_problem(&again, StatusCode::CONFLICT, "conversation_conflict");
    assert_eq!(again.2["reason"], "turn_active");
    assert_eq!(s.mock.calls(), 2);
    for task in stuck {
        task.abort();
    }
}

both!(a_caller_has_at_most_two_active_turns);

const WALKTHROUGH: &str = include_str!("../../../../docs/conversations.md");

/// The fenced block after `<!-- walkthrough: NAME -->`.
fn block(name: &str) -> &'static str {
    let marker = format!("<!-- walkthrough: {name} -->");
    let start = WALKTHROUGH
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/conversations.md has no block `{name}`"));
    let rest = &WALKTHROUGH[start + marker.len()..];
    let open = rest.find("```").unwrap();
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    &body[..body.find("```").unwrap()]
}

/// The mock's scripted answers, as the walkthrough's command gives them.
fn walkthrough_answers(command: &str) -> Vec<Answer> {
    let mut answers = Vec::new();
    let joined = command.replace("\\\n", " ");
    let mut rest = joined.as_str();
    while let Some(at) = rest.find("--") {
        rest = &rest[at + 2..];
        let (flag, after) = rest.split_once(' ').unwrap();
        let after = after.trim_start();
        let quote = after.chars().next().unwrap();
        if quote != '"' && quote != '\'' {
            continue;
        }
        let end = after[1..].find(quote).unwrap() + 1;
        let value = &after[1..end];
        match flag {
            "text" => answers.push(Answer::Text(value.to_owned())),
            "call" => {
                let (name, arguments) = value.split_once('=').unwrap();
                answers.push(Answer::ToolCall {
                    name: name.to_owned(),
                    arguments: serde_json::from_str(arguments).unwrap(),
                });
            }
            _ => {}
        }
        rest = &after[end..];
    }
    answers
}

#[tokio::test]
async fn the_walkthrough_of_docs_conversations_works_as_written() {
    let command = block("mock");
    assert!(command.contains("--example mock_provider -- meta --port 9700"));
    let stores = fresh_stores(Backend::Sqlite).await;
    let mock = MockProvider::start(Kind::Meta).await;
    mock.answer(walkthrough_answers(command));
    let first = spawn_app_with(stores.clone(), &[]).await;
    let key = first.key("route,configure", Some("claude-code")).await;
    first.stop().await;
    let key_id = TestApp::key_id(&key).to_owned();
    let settings: Vec<(String, String)> = block("settings")
        .lines()
        .filter_map(|line| line.strip_prefix("export "))
        .map(|line| {
            let (name, value) = line.split_once('=').unwrap();
            let value = value.trim_matches('\'').replace("<KEY_ID>", &key_id);
            let value = value.replace("http://127.0.0.1:9700", &mock.origin());
            (name.to_owned(), value)
        })
        .collect();
    assert_eq!(settings.len(), 6);
    let pairs: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let app = spawn_app_with(stores, &pairs).await;
    let contract: Value = serde_json::from_str(block("contract")).unwrap();
    configure(&app, &key, "/v1/context", contract).await;
    let post = |body: &str| {
        req(Method::POST, "/v1/conversations/turn")
            .key(&key)
            .json(serde_json::from_str(body).unwrap())
            .send(&app)
    };
    let clarify = post(block("turn 1 clarify")).await;
    assert_eq!(clarify.0, StatusCode::OK, "{}", clarify.2);
    assert_eq!(clarify.2["status"], "clarify");
    assert_eq!(clarify.2["version"], 1);
    let ready = post(block("turn 2 ready")).await;
    assert_eq!(ready.2["status"], "ready", "{}", ready.2);
    assert_eq!(ready.2["version"], 2);
    assert_eq!(
        ready.2["proposal"]["arguments"],
        json!({"document": "spec.md", "days": 3})
    );
    let replay = post(block("turn 3 replay")).await;
    assert_eq!(replay.2, ready.2);
    assert_eq!(replay.1["x-herma-replayed"], "true");
    assert_eq!(mock.calls(), 2);
}

/// Posts the OpenAPI document's turn example to a server set up for it (Meta through a local
/// stand-in, the example's context entry in place) and expects success.
pub async fn accepts_example(example: Value) {
    let s = setup(Backend::Memory, Kind::Meta, &[]).await;
    let got = turn(&s, example.clone()).await;
    assert!(
        got.0.is_success(),
        "the turn example was refused: {example} {} {}",
        got.0,
        got.2
    );
}

async fn budget_under_concurrency(backend: Backend) {
    // The reservation of one turn, read from a probe turn.
    let probe = setup(Backend::Memory, Kind::Meta, &[]).await;
    let got = turn(&probe, turn_body(Kind::Meta, "probe", "r", 0, "hello")).await;
    let per_turn = herma_core::money::parse_usd_micros(
        got.2["attempts"][0]["reservation_ceiling_usd"]
            .as_str()
            .unwrap(),
    )
    .unwrap();

    // 32 callers, two turns each at once; the budget covers exactly 20 turns.
    let stores = fresh_stores(backend).await;
    let mock = MockProvider::start(Kind::Meta).await;
    let first = spawn_app_with(stores.clone(), &[]).await;
    let mut keys = Vec::new();
    for _ in 0..32 {
        keys.push(first.key("route,configure", Some("claude-code")).await);
    }
    first.stop().await;
    let ids: Vec<&str> = keys.iter().map(|k| TestApp::key_id(k)).collect();
    let budget = herma_core::money::format_micros(per_turn * 20);
    let owned = settings(Kind::Meta, &mock, &ids, &budget);
    let pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let app = std::sync::Arc::new(spawn_app_with(stores.clone(), &pairs).await);
    for key in &keys {
        configure(&app, key, "/v1/context", contract()).await;
    }
    let mut tasks = Vec::new();
    for key in &keys {
        for conversation in ["one", "two"] {
            let (client, url, key) = (
                app.client.clone(),
                app.url("/v1/conversations/turn"),
                key.clone(),
            );
            tasks.push(tokio::spawn(async move {
                client
                    .post(url)
                    .bearer_auth(key)
                    .json(&turn_body(Kind::Meta, conversation, "r", 0, "hello"))
                    .send()
                    .await
                    .unwrap()
                    .status()
            }));
        }
    }
    let mut ok = 0;
    let mut denied = 0;
    for task in tasks {
        match task.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => denied += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((ok, denied), (20, 44));
    assert_eq!(mock.calls(), 20);
    let reserved = stores
        .store
        .ledger(&["provider:meta".to_owned()])
        .await
        .unwrap();
    assert_eq!(
        reserved,
        [per_turn * 20],
        "exactly at the ceiling, 0 µ$ over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_turns_stop_exactly_at_the_budget_on_sqlite() {
    budget_under_concurrency(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_turns_stop_exactly_at_the_budget_on_postgres() {
    budget_under_concurrency(Backend::Postgres).await;
}

async fn ollama_turns_are_capped_per_utc_day(backend: Backend) {
    let s = setup(
        backend,
        Kind::Ollama,
        &[("HERMA_OLLAMA_CALLS_PER_DAY", "1")],
    )
    .await;
    let first = turn(&s, turn_body(Kind::Ollama, "c", "r1", 0, "hello")).await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.2);
    // Usage is recorded as reported; cost stays null with its reason.
    let attempt = &first.2["attempts"][0];
    assert!(
        attempt["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "{attempt}"
    );
    assert_eq!(attempt["cost_usd"], Value::Null);
    assert!(
        attempt["cost_reason"]
            .as_str()
            .unwrap()
            .contains("not invoices")
    );
    let second = turn(&s, turn_body(Kind::Ollama, "d", "r1", 0, "hello")).await;
    assert_eq!(second.0, StatusCode::TOO_MANY_REQUESTS, "{}", second.2);
    assert_eq!(second.2["reason"], "provider_budget_denied");
    // The next UTC day has its own calls.
    s.app.clock.advance_millis(24 * 3600 * 1000);
    let third = turn(&s, turn_body(Kind::Ollama, "e", "r1", 0, "hello")).await;
    assert_eq!(third.0, StatusCode::OK, "{}", third.2);
    assert_eq!(s.mock.calls(), 2);
}

both!(ollama_turns_are_capped_per_utc_day);

async fn a_callers_hourly_tokens_are_a_ceiling_and_a_new_conversation_does_not_reset_them(
    backend: Backend,
) {
    // Each first turn reserves the same tokens (its input bytes plus the 256-token allowance);
    // the allowance covers exactly two.
    let probe = setup(backend, Kind::Meta, &[]).await;
    let got = turn(&probe, turn_body(Kind::Meta, "probe", "r", 0, "hello")).await;
    let per_turn = got.2["attempts"][0]["reservation_ceiling_tokens"]
        .as_u64()
        .unwrap();
    let ceiling = (per_turn * 2).to_string();
    let s = setup(
        backend,
        Kind::Meta,
        &[("HERMA_CONVERSATION_CALLER_TOKENS_PER_HOUR", &ceiling)],
    )
    .await;
    let mut statuses = Vec::new();
    for (conversation, request) in [("a", "r1"), ("b", "r1"), ("c", "r1")] {
        let got = turn(&s, turn_body(Kind::Meta, conversation, request, 0, "hello")).await;
        statuses.push((got.0, got.2["reason"].clone()));
    }
    assert_eq!(statuses[0].0, StatusCode::OK);
    assert_eq!(statuses[1].0, StatusCode::OK);
    assert_eq!(
        statuses[2],
        (StatusCode::TOO_MANY_REQUESTS, json!("caller_budget_denied"))
    );
    assert_eq!(s.mock.calls(), 2);
}

both!(a_callers_hourly_tokens_are_a_ceiling_and_a_new_conversation_does_not_reset_them);
