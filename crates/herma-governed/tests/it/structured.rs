//! The structured call runner on every backend.

use std::sync::Arc;
use std::time::Duration;

use herma_core::CallerScope;
use herma_core::call::{Msg, ToolChoice, ToolSpec};
use herma_core::time::Clock;
use herma_core::wire::Protocol;
use herma_governed::ports::{RootRecord, RootStatus};
use herma_governed::{
    GovernedError, InputLoader, Outcome, StructuredCallRunner, StructuredConfig, StructuredRun,
    UsageQuery, ViewState, structured_id,
};
use serde_json::json;

use crate::on_all_backends;
use crate::step::{extract_tool, tool_answer};
use crate::support::*;

struct Harness {
    runner: StructuredCallRunner,
    client: Arc<ScriptedClient>,
    flaky: Arc<Flaky>,
    clock: Arc<herma_core::time::ManualClock>,
    scope: CallerScope,
}

fn structured_config(
    h_ports: herma_governed::ports::GovernedPorts,
    client: Arc<ScriptedClient>,
    clock: Arc<herma_core::time::ManualClock>,
) -> StructuredConfig {
    let mut config = StructuredConfig::new(
        h_ports,
        client,
        "claude-test",
        vec![extract_tool(), extract_tool()],
        Some(ToolChoice::Tool {
            name: "extract_record".into(),
        }),
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    config.prices = prices();
    config.clock = clock;
    config.deadline = Duration::from_secs(30);
    config
}

async fn harness(backend: Backend) -> Harness {
    let client = ScriptedClient::new(Protocol::Messages, tool_answer());
    let flaky = Flaky::new(ports(backend).await, FailWhen::Never);
    let clock = clock();
    Harness {
        runner: StructuredCallRunner::new(structured_config(
            flaky.ports(),
            client.clone(),
            clock.clone(),
        ))
        .unwrap(),
        client,
        flaky,
        clock,
        scope: scope(),
    }
}

fn loader() -> InputLoader {
    Box::new(|| Box::pin(async { Ok(vec![Msg::user("Ada Lovelace, 1815.")]) }))
}

impl Harness {
    fn run(&self, key: &str) -> StructuredRun {
        StructuredRun {
            scope: self.scope.clone(),
            session_id: "session-1".into(),
            operation_key: key.into(),
            input_revision: "rev-1".into(),
            intent: "extract".into(),
            load_input: loader(),
            cancel: None,
        }
    }
}

#[test]
fn identifiers_are_bounded_domain_separated_and_never_embed_the_key() {
    let a = scope();
    let b = scope();
    let key = "customer-42/invoice:2026";
    let root = structured_id("root", &a, key);
    let call = structured_id("call", &a, key);
    assert!(root.starts_with("alma-structured-v1:root:"));
    assert_eq!(root.len(), "alma-structured-v1:root:".len() + 64);
    assert!(!root.contains("customer"));
    assert_ne!(root[25..], call[25..], "kinds are domain-separated");
    assert_ne!(root, structured_id("root", &b, key), "scopes are separated");
    let long = "k".repeat(10_000);
    assert_eq!(structured_id("root", &a, &long).len(), root.len());
}

async fn a_forced_tool_extraction_completes_and_replays(backend: Backend) {
    let h = harness(backend).await;
    let outcome = h.runner.run(h.run("invoice-1")).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    let envelope = outcome.view.envelope().unwrap();
    assert_eq!(envelope.outcome, Outcome::Success);
    let step = envelope.step.as_ref().unwrap();
    assert_eq!(step.tool_calls[0].name, "extract_record");
    assert_eq!(step.tool_calls[0].input, json!({"name": "Ada"}));
    let sent = h.client.last_request().unwrap();
    assert_eq!(
        sent.tools,
        vec![extract_tool()],
        "tools are deduplicated at construction"
    );
    let root_key = structured_id("root", &h.scope, "invoice-1");
    let flaky = h.flaky.clone();
    let scope = h.scope.clone();
    eventually(|| {
        let flaky = flaky.clone();
        let scope = scope.clone();
        let root_key = root_key.clone();
        async move {
            flaky
                .ports()
                .trees
                .root(&scope, &root_key)
                .await
                .unwrap()
                .unwrap()
                .status
                == RootStatus::Closed
        }
    })
    .await;
    let replay = h.runner.run(h.run("invoice-1")).await.unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.view.envelope(), outcome.view.envelope());
    assert_eq!(h.client.dispatches(), 1);
    let read = h.runner.read(&h.scope, "invoice-1").await.unwrap().unwrap();
    assert_eq!(read.receipt, outcome.view.receipt);
}

async fn a_changed_binding_conflicts(backend: Backend) {
    let h = harness(backend).await;
    h.runner.run(h.run("k")).await.unwrap();
    let mut run = h.run("k");
    run.intent = "other".into();
    assert_eq!(
        h.runner.run(run).await.unwrap_err(),
        GovernedError::Conflict {
            field: "intent".into()
        }
    );
    let mut config = structured_config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    config.prices.output_per_mtok += 1;
    let repriced = StructuredCallRunner::new(config).unwrap();
    assert_eq!(
        repriced.run(h.run("k")).await.unwrap_err(),
        GovernedError::Conflict {
            field: "config".into()
        }
    );
    assert_eq!(h.client.dispatches(), 1);
}

async fn root_only_views_follow_the_root(backend: Backend) {
    let h = harness(backend).await;
    let ports = h.flaky.ports();
    let now = h.clock.now();
    let open = |key: &str| RootRecord {
        scope: h.scope.clone(),
        root_key: structured_id("root", &h.scope, key),
        binding: json!({}),
        status: RootStatus::Active,
        deadline_at: now.plus_millis(1_000),
        reserved_calls: 0,
        settled_micros: 0,
        receipts: 0,
        created_at: now,
        closed_at: None,
    };
    for key in ["active", "never-called", "reserved"] {
        ports.trees.open_root(&open(key)).await.unwrap();
    }
    ports
        .trees
        .reserve_call(
            &h.scope,
            &structured_id("root", &h.scope, "reserved"),
            &structured_id("call", &h.scope, "reserved"),
        )
        .await
        .unwrap();
    for key in ["never-called", "reserved"] {
        ports
            .trees
            .close_root(&h.scope, &structured_id("root", &h.scope, key), now)
            .await
            .unwrap();
    }
    let state = |key: &'static str| {
        let runner = h.runner.clone();
        let scope = h.scope.clone();
        async move { runner.read(&scope, key).await.unwrap().unwrap() }
    };
    assert_eq!(state("active").await.state, ViewState::InProgress);
    let never = state("never-called").await;
    assert_eq!(never.state, ViewState::NotDispatched);
    assert!(never.record.is_none() && never.not_dispatched_cause().is_none());
    assert_eq!(
        state("reserved").await.state,
        ViewState::ReconciliationRequired
    );
    assert!(h.runner.read(&h.scope, "unknown").await.unwrap().is_none());

    // Scope-wide expiry reports roots and executions.
    h.clock.advance_millis(2_000);
    let report = h.runner.reconcile_expired(&h.scope, None).await.unwrap();
    assert_eq!(
        report.roots,
        vec![structured_id("root", &h.scope, "active")]
    );
    assert!(report.executions.is_empty());
    assert_eq!(state("active").await.state, ViewState::NotDispatched);
}

async fn recover_and_reconcile_usage_take_the_host_key(backend: Backend) {
    let h = harness(backend).await;
    h.runner.run(h.run("k")).await.unwrap();
    let recovered = h
        .runner
        .recover(&h.scope, "k", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recovered.state, ViewState::Completed);
    let pass = h
        .runner
        .reconcile_usage(&h.scope, "k", UsageQuery::default())
        .await
        .unwrap();
    assert_eq!((pass.scanned, pass.acknowledged), (1, 1));
    assert!(
        h.runner
            .recover(&h.scope, "missing", Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(h.client.dispatches(), 1);
}

async fn the_session_block_preflight_runs_before_any_root_exists(backend: Backend) {
    let h = harness(backend).await;
    let mut config = structured_config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    config.caps.session = Some(herma_governed::Cap {
        limit_micros: 100,
        mode: herma_governed::CapMode::Block,
    });
    let capped = StructuredCallRunner::new(config).unwrap();
    h.runner.run(h.run("spends")).await.unwrap();
    let blocked = capped.run(h.run("blocked")).await.unwrap();
    assert_eq!(blocked.view.state, ViewState::NotDispatched);
    assert_eq!(blocked.refusal.as_deref(), Some("cap:session"));
    assert!(
        capped.read(&h.scope, "blocked").await.unwrap().is_none(),
        "no root was opened"
    );
    assert_eq!(h.client.dispatches(), 1);
}

struct Refuse;

impl herma_governed::CallPolicy for Refuse {
    fn resolve(&self, _: &str) -> Result<herma_governed::PolicyChoice, String> {
        Err("extraction_paused".into())
    }
}

async fn a_policy_refusal_opens_no_root(backend: Backend) {
    let h = harness(backend).await;
    let mut config = structured_config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    config.policy = Some(Arc::new(Refuse));
    let paused = StructuredCallRunner::new(config).unwrap();
    let outcome = paused.run(h.run("k")).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::NotDispatched);
    assert_eq!(outcome.refusal.as_deref(), Some("policy:extraction_paused"));
    assert!(paused.read(&h.scope, "k").await.unwrap().is_none());
    assert_eq!(h.client.dispatches(), 0);
}

on_all_backends!(
    a_policy_refusal_opens_no_root,
    the_session_block_preflight_runs_before_any_root_exists,
    a_forced_tool_extraction_completes_and_replays,
    a_changed_binding_conflicts,
    root_only_views_follow_the_root,
    recover_and_reconcile_usage_take_the_host_key,
);

#[tokio::test]
async fn tools_are_validated_at_construction() {
    let ports = ports(Backend::Memory).await;
    let client = ScriptedClient::anthropic(vec![]);
    let bad_name = ToolSpec {
        name: "bad name".into(),
        ..extract_tool()
    };
    let config = StructuredConfig::new(
        ports.clone(),
        client.clone(),
        "m",
        vec![bad_name],
        None,
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    assert!(matches!(
        StructuredCallRunner::new(config),
        Err(GovernedError::Config { field, .. }) if field == "tools[0].name"
    ));
    let twin = ToolSpec {
        description: "different".into(),
        ..extract_tool()
    };
    let config = StructuredConfig::new(
        ports.clone(),
        client.clone(),
        "m",
        vec![extract_tool(), twin],
        None,
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    assert!(matches!(
        StructuredCallRunner::new(config),
        Err(GovernedError::Config { field, .. }) if field == "tools[1]"
    ));
    let config = StructuredConfig::new(
        ports,
        client,
        "m",
        vec![extract_tool()],
        Some(ToolChoice::Tool {
            name: "missing".into(),
        }),
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    assert!(matches!(
        StructuredCallRunner::new(config),
        Err(GovernedError::Config { field, .. }) if field == "tool_choice"
    ));
}
