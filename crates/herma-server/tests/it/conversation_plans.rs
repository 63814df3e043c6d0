//! Provider plans end to end (H17): a caller's own ordered choices, governed failover between
//! them, recorded skips, and the two halves of the uncertainty grant.

use herma_core::time::Clock;
use herma_test_support::mock_providers::{Answer, Kind, MockProvider};
use herma_test_support::{Backend, TestApp, fresh_stores, spawn_app_with};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::conversations::{both, contract, review_call, settings};
use crate::{assert_problem, configure, req};

const GRANTS: &str = "HERMA_CONVERSATION_PROVIDER_GRANTS";

/// A server with one key holding the contract and a plan of Meta then OpenAI, each with its
/// own mock.
struct Plans {
    app: TestApp,
    key: String,
    meta: MockProvider,
    openai: MockProvider,
}

fn meta_choice() -> Value {
    json!({"provider": "meta", "model": "muse-spark-1.3"})
}

fn openai_choice() -> Value {
    json!({"provider": "openai", "model": "gpt-test"})
}

fn plan(extra: Value) -> Value {
    let mut plan = json!({
        "context_refs": ["work.review"],
        "providers": [meta_choice(), openai_choice()],
    });
    if let (Some(plan), Value::Object(extra)) = (plan.as_object_mut(), extra) {
        plan.extend(extra);
    }
    json!({
        "id": "plan.main",
        "kind": "noun",
        "title": "Provider plan",
        "schema_or_body": {"provider_plan": plan},
    })
}

/// `grant` adds members to the caller's grant (e.g. `allow_uncertain_failover`); `budgets`
/// are Meta's and OpenAI's dollar ceilings.
async fn plans(
    backend: Backend,
    grant: Value,
    plan_extra: Value,
    budgets: (&str, &str),
    extra: &[(&str, &str)],
) -> Plans {
    plans_on(
        fresh_stores(backend).await,
        grant,
        plan_extra,
        budgets,
        extra,
    )
    .await
}

async fn plans_on(
    stores: herma_test_support::Stores,
    grant: Value,
    plan_extra: Value,
    budgets: (&str, &str),
    extra: &[(&str, &str)],
) -> Plans {
    let meta = MockProvider::start(Kind::Meta).await;
    let openai = MockProvider::start(Kind::Openai).await;
    let first = spawn_app_with(stores.clone(), &[]).await;
    let key = first.key("route,configure", Some("claude-code")).await;
    first.stop().await;
    let id = TestApp::key_id(&key);
    let mut owned: Vec<(String, String)> = settings(Kind::Meta, &meta, &[id], budgets.0)
        .into_iter()
        .chain(settings(Kind::Openai, &openai, &[id], budgets.1))
        .filter(|(name, _)| name != GRANTS)
        .collect();
    let mut caller = json!({
        "caller_scope": format!("key:{id}"),
        "providers": [meta_choice(), openai_choice()],
    });
    if let (Some(caller), Value::Object(grant)) = (caller.as_object_mut(), grant) {
        caller.extend(grant);
    }
    owned.push((GRANTS.to_owned(), json!([caller]).to_string()));
    let mut pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.extend_from_slice(extra);
    let app = spawn_app_with(stores, &pairs).await;
    configure(&app, &key, "/v1/context", contract()).await;
    configure(&app, &key, "/v1/context", plan(plan_extra)).await;
    Plans {
        app,
        key,
        meta,
        openai,
    }
}

fn planned(request: &str, version: u64) -> Value {
    json!({
        "conversation_id": "c",
        "request_id": request,
        "expected_version": version,
        "message": "schedule a review of spec.md in three days",
        "context_refs": ["work.review", "plan.main"],
        "provider": "meta",
        "provider_plan_ref": "plan.main",
    })
}

async fn turn(p: &Plans, body: Value) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    req(Method::POST, "/v1/conversations/turn")
        .key(&p.key)
        .json(body)
        .send(&p.app)
        .await
}

async fn view(p: &Plans) -> Value {
    let got = req(Method::GET, "/v1/conversations/c")
        .key(&p.key)
        .send(&p.app)
        .await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    got.2
}

fn outcomes(answer: &Value) -> Vec<&str> {
    answer["attempts"]
        .as_array()
        .map(|a| a.iter().filter_map(|a| a["outcome"].as_str()).collect())
        .unwrap_or_default()
}

async fn a_plan_advances_past_a_known_rejection_and_never_sends_the_plan(backend: Backend) {
    let p = plans(backend, json!({}), json!({}), ("5", "5"), &[]).await;
    p.meta.answer([Answer::RateLimited { retry_after: 30 }]);
    p.openai.answer([review_call()]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(got.2["status"], "ready", "{}", got.2);
    assert_eq!(
        outcomes(&got.2),
        ["provider_rate_limited", "completed"],
        "{}",
        got.2
    );
    assert_eq!(got.2["attempts"][1]["attempt"], 2);
    assert!(got.2["attempts"][1]["follows_uncertain_attempt_id"].is_null());
    assert_eq!((p.meta.calls(), p.openai.calls()), (1, 1));
    for received in p.meta.received().iter().chain(&p.openai.received()) {
        let text = String::from_utf8_lossy(&received.body);
        assert!(text.contains("schedule_review"), "{text}");
        assert!(
            !text.contains("provider_plan") && !text.contains("plan.main"),
            "{text}"
        );
    }
    // Replayed, nothing is called again.
    let replay = turn(&p, planned("r1", 0)).await;
    assert_eq!(replay.2, got.2);
    assert_eq!((p.meta.calls(), p.openai.calls()), (1, 1));
    let seen = view(&p).await;
    let exception = &seen["recent_turns"][0]["server_exception"];
    assert_eq!(exception["provider_plan"]["ref"], "plan.main");
    assert_eq!(exception["choices"][1]["provider"], "openai");
    assert!(exception.get("uncertain_failover").is_none());
}

both!(a_plan_advances_past_a_known_rejection_and_never_sends_the_plan);

async fn h17_the_uncertainty_grant_defaults_off_and_a_plan_cannot_supply_it(backend: Backend) {
    // The plan's half alone: an unknown outcome stops the turn.
    let p = plans(
        backend,
        json!({}),
        json!({"allow_uncertain_outcome": true}),
        ("5", "5"),
        &[],
    )
    .await;
    p.meta.answer([Answer::Accepted]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(got.2["reason"], "provider_outcome_uncertain", "{}", got.2);
    assert_eq!(outcomes(&got.2), ["provider_outcome_uncertain"]);
    assert_eq!((p.meta.calls(), p.openai.calls()), (1, 0));
    let seen = view(&p).await;
    let record = &seen["recent_turns"][0]["server_exception"]["uncertain_failover"];
    assert_eq!(record["result"], "stopped", "{seen}");
    assert_eq!(record["plan_allow_uncertain_outcome"], true);
    assert_eq!(record["grant_allow_uncertain_failover"], false);

    // A plan cannot state the operator's half.
    let mut lending = plan(json!({"allow_uncertain_failover": true}));
    lending["id"] = json!("plan.lending");
    let refused = req(Method::POST, "/v1/context")
        .key(&p.key)
        .harness("claude-code")
        .json(lending)
        .send(&p.app)
        .await;
    assert_problem(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert!(refused.2.to_string().contains("allow_uncertain_failover"));

    // Both halves: the turn advances, and the next attempt says what it follows.
    let p = plans(
        backend,
        json!({"allow_uncertain_failover": true}),
        json!({"allow_uncertain_outcome": true}),
        ("5", "5"),
        &[],
    )
    .await;
    p.meta.answer([Answer::Accepted]);
    p.openai.answer([review_call()]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.2["status"], "ready", "{}", got.2);
    assert_eq!(
        outcomes(&got.2),
        ["provider_outcome_uncertain", "completed"]
    );
    assert_eq!(
        got.2["attempts"][1]["follows_uncertain_attempt_id"],
        got.2["attempts"][0]["attempt_id"]
    );
    // The uncertain attempt keeps its reservation.
    assert_eq!(got.2["attempts"][0]["reservation_status"], "reserved");
    let seen = view(&p).await;
    let record = &seen["recent_turns"][0]["server_exception"]["uncertain_failover"];
    assert_eq!(record["result"], "advanced", "{seen}");
    assert_eq!(
        record["after_attempt_id"],
        got.2["attempts"][0]["attempt_id"]
    );
}

both!(h17_the_uncertainty_grant_defaults_off_and_a_plan_cannot_supply_it);

#[tokio::test]
async fn h17_a_plan_refuses_a_second_credential_for_the_same_upstream_model() {
    let p = plans(Backend::Sqlite, json!({}), json!({}), ("5", "5"), &[]).await;
    let mut twice = plan(json!({}));
    twice["id"] = json!("plan.twice");
    twice["schema_or_body"]["provider_plan"]["providers"] = json!([
        {"provider": "openai", "model": "gpt-x"},
        {"provider": "openrouter", "model": "openai/GPT-X:free", "routing_provider": "openai"}
    ]);
    let refused = req(Method::POST, "/v1/context")
        .key(&p.key)
        .harness("claude-code")
        .json(twice)
        .send(&p.app)
        .await;
    assert_problem(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_eq!(
        refused.2["errors"][0]["pointer"], "/schema_or_body/provider_plan/providers/1/model",
        "{}",
        refused.2
    );
    assert!(
        refused.2.to_string().contains("openai/gpt-x"),
        "{}",
        refused.2
    );
}

async fn paused_and_unconfigured_choices_are_recorded_skips(backend: Backend) {
    let paused = [("HERMA_CONVERSATION_DISABLED_PROVIDERS", "[\"meta\"]")];
    let p = plans(backend, json!({}), json!({}), ("5", "5"), &paused).await;
    p.openai.answer([review_call()]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.2["status"], "ready", "{}", got.2);
    assert_eq!(
        outcomes(&got.2),
        ["provider_operator_disabled", "completed"]
    );
    assert_eq!(got.2["attempts"][0]["request_sent"], false);
    assert_eq!(got.2["attempts"][0]["reservation_status"], "not_reserved");
    assert_eq!((p.meta.calls(), p.openai.calls()), (0, 1));

    // A direct turn to a paused provider: a recorded skip, nothing sent.
    let direct = json!({
        "conversation_id": "d", "request_id": "r1", "expected_version": 0,
        "message": "hello", "context_refs": ["work.review"], "provider": "meta",
    });
    let got = turn(&p, direct).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(got.2["reason"], "provider_operator_disabled");
    assert_eq!(p.meta.calls(), 0);

    // The operator's OpenAI model is another one than the plan's: that choice is not
    // configured, a recorded skip, and the plan is exhausted.
    let other = [("HERMA_CONVERSATION_OPENAI_MODEL", "gpt-other")];
    let p = plans(backend, json!({}), json!({}), ("5", "5"), &other).await;
    p.meta.answer([Answer::PaymentRequired]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(
        outcomes(&got.2),
        ["provider_payment_required", "provider_not_configured"]
    );
    assert_eq!(got.2["reason"], "provider_not_configured");
    assert_eq!(p.openai.calls(), 0);
}

both!(paused_and_unconfigured_choices_are_recorded_skips);

async fn a_provider_budget_denial_advances_only_under_a_plan_that_allows_failover(
    backend: Backend,
) {
    // 256 output tokens at $4.25 per million are 1,088 µ$: a $0.001 Meta budget denies.
    let p = plans(backend, json!({}), json!({}), ("0.001", "5"), &[]).await;
    p.openai.answer([review_call()]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(outcomes(&got.2), ["provider_budget_denied", "completed"]);
    assert_eq!(got.2["attempts"][0]["reservation_status"], "denied");
    assert_eq!(got.2["attempts"][0]["reserved_tokens"], 0);

    let p = plans(
        backend,
        json!({}),
        json!({"allow_failover": false}),
        ("0.001", "5"),
        &[],
    )
    .await;
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.0, StatusCode::TOO_MANY_REQUESTS, "{}", got.2);
    assert_eq!(outcomes(&got.2), ["provider_budget_denied"]);
    let replay = turn(&p, planned("r1", 0)).await;
    assert_eq!(replay.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!((p.meta.calls(), p.openai.calls()), (0, 0));
}

both!(a_provider_budget_denial_advances_only_under_a_plan_that_allows_failover);

#[tokio::test]
async fn a_planned_turn_must_match_its_plan_and_a_plan_is_never_context() {
    let p = plans(Backend::Sqlite, json!({}), json!({}), ("5", "5"), &[]).await;
    let mut second = planned("r1", 0);
    second["provider"] = json!("openai");
    let got = turn(&p, second).await;
    assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(got.2["errors"][0]["pointer"], "/provider");

    let mut unlisted = planned("r1", 0);
    unlisted["context_refs"] = json!(["work.review"]);
    let got = turn(&p, unlisted).await;
    assert_eq!(
        got.2["errors"][0]["pointer"], "/provider_plan_ref",
        "{}",
        got.2
    );

    let mut missing = planned("r1", 0);
    missing["provider_plan_ref"] = json!("plan.none");
    missing["context_refs"] = json!(["work.review", "plan.none"]);
    let got = turn(&p, missing).await;
    assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(got.2["errors"][0]["pointer"], "/provider_plan_ref");

    let direct = json!({
        "conversation_id": "d", "request_id": "r1", "expected_version": 0,
        "message": "hello", "context_refs": ["work.review", "plan.main"], "provider": "meta",
    });
    let got = turn(&p, direct).await;
    assert_problem(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(got.2["errors"][0]["pointer"], "/context_refs/1");
    assert_eq!((p.meta.calls(), p.openai.calls()), (0, 0));
}

#[tokio::test]
async fn a_changed_plan_is_a_changed_conversation() {
    let p = plans(Backend::Sqlite, json!({}), json!({}), ("5", "5"), &[]).await;
    let first = turn(&p, planned("r1", 0)).await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.2);
    let mut changed = plan(json!({"allow_failover": false}));
    changed["expected_version"] = json!(1);
    let updated = req(Method::PUT, "/v1/context/plan.main")
        .key(&p.key)
        .harness("claude-code")
        .json(changed)
        .send(&p.app)
        .await;
    assert_eq!(updated.0, StatusCode::OK, "{}", updated.2);
    let got = turn(&p, planned("r2", 1)).await;
    assert_problem(&got, StatusCode::CONFLICT, "conversation_conflict");
    assert_eq!(got.2["reason"], "contract_changed");
}

/// Two keys granted Meta on one server.
struct Shared {
    app: TestApp,
    keys: [String; 2],
    mock: MockProvider,
    stores: herma_test_support::Stores,
    settings: Vec<(String, String)>,
}

async fn shared(backend: Backend) -> Shared {
    let stores = fresh_stores(backend).await;
    let mock = MockProvider::start(Kind::Meta).await;
    let first = spawn_app_with(stores.clone(), &[]).await;
    let a = first.key("route,configure", Some("claude-code")).await;
    let b = first.key("route,configure", Some("claude-code")).await;
    first.stop().await;
    let settings = settings(
        Kind::Meta,
        &mock,
        &[TestApp::key_id(&a), TestApp::key_id(&b)],
        "5",
    );
    let pairs: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let app = spawn_app_with(stores.clone(), &pairs).await;
    for key in [&a, &b] {
        configure(&app, key, "/v1/context", contract()).await;
    }
    Shared {
        app,
        keys: [a, b],
        mock,
        stores,
        settings,
    }
}

fn direct(provider: &str, request: &str) -> Value {
    json!({
        "conversation_id": format!("c-{request}"), "request_id": request, "expected_version": 0,
        "message": "hello", "context_refs": ["work.review"], "provider": provider,
    })
}

async fn turn_as(app: &TestApp, key: &str, body: Value) -> Value {
    let got = req(Method::POST, "/v1/conversations/turn")
        .key(key)
        .json(body)
        .send(app)
        .await;
    assert!(
        got.0 == StatusCode::OK || got.0 == StatusCode::TOO_MANY_REQUESTS,
        "{}",
        got.2
    );
    got.2
}

async fn a_limit_is_shared_by_every_caller_until_one_probe_recovers_it(backend: Backend) {
    let s = shared(backend).await;
    let [a, b] = &s.keys;
    s.mock.answer([Answer::RateLimited { retry_after: 30 }]);
    let limited = turn_as(&s.app, a, direct("meta", "r1")).await;
    assert_eq!(limited["reason"], "provider_rate_limited", "{limited}");
    assert_eq!(s.mock.calls(), 1);

    // Another caller is skipped while the resource cools: nothing reserved or sent.
    let skipped = turn_as(&s.app, b, direct("meta", "r2")).await;
    let attempt = &skipped["attempts"][0];
    assert_eq!(attempt["outcome"], "provider_rate_limited", "{skipped}");
    assert_eq!(attempt["skip"], "cooldown");
    assert_eq!(attempt["provider_health"]["scope"], "provider_route");
    assert_eq!(attempt["provider_health"]["condition"], "rate_limited");
    assert_eq!(attempt["reservation_status"], "not_reserved");
    assert_eq!(attempt["request_sent"], false);
    let eligible = s.app.clock.now().as_millis() + 30_000;
    assert_eq!(
        attempt["next_eligible_at"],
        json!(herma_core::Timestamp::from_millis(eligible))
    );
    assert!(
        !skipped.to_string().contains(TestApp::key_id(a)),
        "{skipped}"
    );
    assert_eq!(s.mock.calls(), 1);

    // Another account alias is another resource: its health is its own.
    let mut pairs: Vec<(&str, &str)> = s
        .settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.push(("HERMA_CONVERSATION_META_ACCOUNT_SCOPE", "team-b"));
    let other = spawn_app_with(s.stores.clone(), &pairs).await;
    other
        .clock
        .advance_millis(s.app.clock.now().as_millis() - other.clock.now().as_millis());
    s.mock.answer([Answer::Text("which document?".into())]);
    let separate = turn_as(&other, b, direct("meta", "r3")).await;
    assert_eq!(separate["status"], "clarify", "{separate}");
    assert_eq!(s.mock.calls(), 2);
    other.stop().await;

    // After the delay, the next request is the one recovery probe; its success clears it.
    s.app.clock.advance_millis(30_000);
    s.mock.answer([Answer::Text("which document?".into())]);
    let probe = turn_as(&s.app, b, direct("meta", "r4")).await;
    assert_eq!(probe["status"], "clarify", "{probe}");
    assert_eq!(probe["attempts"][0]["recovery_probe"], true);
    let after = turn_as(&s.app, a, direct("meta", "r5")).await;
    assert_eq!(after["status"], "clarify", "{after}");
    assert!(after["attempts"][0].get("recovery_probe").is_none());
    assert_eq!(s.mock.calls(), 4);
}

both!(a_limit_is_shared_by_every_caller_until_one_probe_recovers_it);

async fn h17_a_rate_limit_holds_the_upstream_model_for_other_routes(backend: Backend) {
    let stores = fresh_stores(backend).await;
    let openai = MockProvider::start(Kind::Openai).await;
    let openrouter = MockProvider::start(Kind::Openrouter).await;
    let first = spawn_app_with(stores.clone(), &[]).await;
    let key = first.key("route,configure", Some("claude-code")).await;
    first.stop().await;
    let id = TestApp::key_id(&key);
    let mut owned: Vec<(String, String)> = settings(Kind::Openai, &openai, &[id], "5")
        .into_iter()
        .chain(settings(Kind::Openrouter, &openrouter, &[id], "5"))
        .filter(|(name, _)| name != GRANTS && name != "HERMA_CONVERSATION_OPENROUTER_MODEL")
        .collect();
    owned.push((
        "HERMA_CONVERSATION_OPENROUTER_MODEL".into(),
        "openai/GPT-Test:free".into(),
    ));
    owned.push((
        GRANTS.into(),
        json!([{"caller_scope": format!("key:{id}"), "providers": [
            openai_choice_of("gpt-test"),
            {"provider": "openrouter", "model": "openai/GPT-Test:free", "routing_provider": "host-slug"}
        ]}])
        .to_string(),
    ));
    let pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let app = spawn_app_with(stores, &pairs).await;
    configure(&app, &key, "/v1/context", contract()).await;

    openai.answer([Answer::RateLimited { retry_after: 30 }]);
    let limited = turn_as(&app, &key, direct("openai", "r1")).await;
    assert_eq!(limited["reason"], "provider_rate_limited", "{limited}");
    let held = turn_as(&app, &key, direct("openrouter", "r2")).await;
    let attempt = &held["attempts"][0];
    assert_eq!(attempt["outcome"], "provider_identity_cooldown", "{held}");
    assert_eq!(
        attempt["provider_health"]["scope"],
        "upstream_model_identity"
    );
    assert_eq!(attempt["request_sent"], false);
    assert_eq!(openrouter.calls(), 0);
    // When the hold ends, the other route is tried.
    app.clock.advance_millis(30_000);
    openrouter.answer([Answer::Text("which document?".into())]);
    let later = turn_as(&app, &key, direct("openrouter", "r3")).await;
    assert_eq!(later["status"], "clarify", "{later}");
    assert_eq!(openrouter.calls(), 1);
}

both!(h17_a_rate_limit_holds_the_upstream_model_for_other_routes);

fn openai_choice_of(model: &str) -> Value {
    json!({"provider": "openai", "model": model})
}

#[tokio::test]
async fn an_invalid_account_alias_is_an_invalid_configuration() {
    let p = plans(
        Backend::Memory,
        json!({}),
        json!({}),
        ("5", "5"),
        &[("HERMA_CONVERSATION_META_ACCOUNT_SCOPE", "Team B")],
    )
    .await;
    let direct = json!({
        "conversation_id": "d", "request_id": "r1", "expected_version": 0,
        "message": "hello", "context_refs": ["work.review"], "provider": "meta",
    });
    let got = turn(&p, direct).await;
    assert_problem(
        &got,
        StatusCode::SERVICE_UNAVAILABLE,
        "invalid_provider_configuration",
    );
    assert!(
        got.2["detail"]
            .as_str()
            .unwrap()
            .contains("HERMA_CONVERSATION_META_ACCOUNT_SCOPE")
    );
}

#[tokio::test]
async fn the_admin_budget_summary_shows_aggregates_health_and_holds_only() {
    const ADMIN: &str = "bootstrap-token-0123456789abcdef";
    let s = shared(Backend::Sqlite).await;
    let mut pairs: Vec<(&str, &str)> = s
        .settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.push(("HERMA_ADMIN_TOKEN", ADMIN));
    pairs.push(("HERMA_CONVERSATION_DISABLED_PROVIDERS", "[\"anthropic\"]"));
    let app = spawn_app_with(s.stores.clone(), &pairs).await;
    let [a, _] = &s.keys;
    s.mock.answer([Answer::PaymentRequired]);
    let paid = turn_as(&app, a, direct("meta", "secret-request-id")).await;
    assert_eq!(paid["reason"], "provider_payment_required", "{paid}");

    let refused = req(Method::GET, "/v1/admin/conversation-budget")
        .key(a)
        .send(&app)
        .await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "admin_required");
    let anonymous = req(Method::GET, "/v1/admin/conversation-budget")
        .send(&app)
        .await;
    assert_eq!(anonymous.0, StatusCode::UNAUTHORIZED);

    let got = req(Method::GET, "/v1/admin/conversation-budget")
        .key(ADMIN)
        .send(&app)
        .await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    let meta = got.2["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider"] == "meta")
        .unwrap()
        .clone();
    assert_eq!(meta["configured"], true);
    assert_eq!(meta["budget_usd"], "5");
    assert_eq!(meta["account_scope"], "operator");
    // The 402 attempt was reserved and is never refunded on a guess.
    assert_ne!(meta["reserved_usd"], "0", "{meta}");
    let ollama = got.2["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider"] == "ollama")
        .unwrap()
        .clone();
    assert_eq!(ollama["calls_today"], 0);
    assert_eq!(got.2["operator_disabled"], json!(["anthropic"]));
    let scopes: Vec<&str> = got.2["resource_health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["scope"].as_str().unwrap())
        .collect();
    assert_eq!(scopes, ["provider_account", "provider_route"], "{}", got.2);
    assert_eq!(got.2["resource_health"][0]["condition"], "credit_exhausted");
    assert_eq!(
        got.2["identity_cooldowns"][0]["resource"],
        "identity:meta/muse-spark-1-3"
    );
    let text = got.2.to_string();
    for private in [TestApp::key_id(a), "secret-request-id", "hello"] {
        assert!(!text.contains(private), "{private} in {text}");
    }
}

/// A plan turn with both halves of the uncertainty grant over a SQLite file that `fault` (SQL)
/// breaks once the server has started.
async fn faulty(fault: &str) -> (Plans, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herma.db");
    let path = path.to_str().unwrap().to_owned();
    let stores = herma_test_support::sqlite_stores_at(&path).await;
    let p = plans_on(
        stores,
        json!({"allow_uncertain_failover": true}),
        json!({"allow_uncertain_outcome": true}),
        ("5", "5"),
        &[],
    )
    .await;
    herma_test_support::sqlite_execute(&path, fault).await;
    (p, dir)
}

#[tokio::test]
async fn a_failed_reservation_is_unknown_and_stops_even_under_an_uncertainty_grant() {
    let (p, _dir) = faulty(
        "CREATE TRIGGER injected BEFORE UPDATE ON conversation_ledger
         WHEN NEW.counter = 'provider:meta' BEGIN SELECT RAISE(ABORT, 'injected'); END;",
    )
    .await;
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(outcomes(&got.2), ["storage_or_coordination_unavailable"]);
    assert_eq!(got.2["attempts"][0]["reservation_status"], "unknown");
    assert_eq!(got.2["attempts"][0]["request_sent"], false);
    assert_eq!((p.meta.calls(), p.openai.calls()), (0, 0));
}

#[tokio::test]
async fn a_failed_health_read_stops_the_turn_before_anything_is_reserved() {
    let (p, _dir) = faulty("DROP TABLE conversation_health;").await;
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(outcomes(&got.2), ["storage_or_coordination_unavailable"]);
    assert_eq!(got.2["attempts"][0]["reservation_status"], "not_reserved");
    assert_eq!((p.meta.calls(), p.openai.calls()), (0, 0));
}

#[tokio::test]
async fn a_failed_health_write_after_a_call_keeps_its_result() {
    let (p, _dir) = faulty(
        "CREATE TRIGGER injected BEFORE INSERT ON conversation_health
         BEGIN SELECT RAISE(ABORT, 'injected'); END;",
    )
    .await;
    p.meta.answer([Answer::RateLimited { retry_after: 30 }]);
    p.openai.answer([review_call()]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_eq!(got.2["status"], "ready", "{}", got.2);
    assert_eq!(outcomes(&got.2), ["provider_rate_limited", "completed"]);
    assert_eq!(got.2["attempts"][0]["health_settlement"], "failed");
    assert!(got.2["attempts"][1].get("health_settlement").is_none());
}

#[tokio::test]
async fn a_failed_final_commit_is_503_and_the_turn_stays_active() {
    let (p, _dir) = faulty(
        "CREATE TRIGGER injected BEFORE UPDATE ON conversation_turns
         WHEN NEW.status = 'sealed' BEGIN SELECT RAISE(ABORT, 'injected'); END;",
    )
    .await;
    p.meta.answer([review_call()]);
    let got = turn(&p, planned("r1", 0)).await;
    assert_problem(&got, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    let seen = view(&p).await;
    assert_eq!(seen["active_request_id"], "r1", "{seen}");
    assert_eq!(seen["recent_turns"][0]["status"], "active");
    assert_eq!(
        seen["recent_turns"][0]["attempts"][0]["outcome"],
        "completed"
    );
    assert_eq!(p.meta.calls(), 1);
}
