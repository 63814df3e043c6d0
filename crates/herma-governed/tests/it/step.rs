//! The governed step runner on every backend.

use std::sync::Arc;
use std::time::Duration;

use herma_core::CallerScope;
use herma_core::call::{Controls, ModelEvent, Msg, StopReason, ToolChoice, ToolSpec};
use herma_core::time::Clock;
use herma_core::wire::Protocol;
use herma_governed::ports::{GovernedPorts, RootRecord, RootStatus};
use herma_governed::{
    GovernedError, GovernedStepRunner, Interruption, InvalidReason, LoadedRequest,
    OperationCallInput, OrderEntry, Outcome, StepConfig, StepRun, UsageQuery, ViewState,
    is_step_interruption,
};
use herma_providers::single::ProviderError;
use serde_json::json;

use crate::on_all_backends;
use crate::support::*;

pub struct StepHarness {
    pub runner: GovernedStepRunner,
    pub client: Arc<ScriptedClient>,
    pub flaky: Arc<Flaky>,
    pub clock: Arc<herma_core::time::ManualClock>,
    pub scope: CallerScope,
}

pub fn step_config(
    ports: GovernedPorts,
    client: Arc<ScriptedClient>,
    clock: Arc<herma_core::time::ManualClock>,
) -> StepConfig {
    let mut config = StepConfig::new(
        ports,
        client,
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    config.clock = clock;
    config.run_timeout = Duration::from_secs(30);
    config.max_consecutive_reasoning = Some(3);
    config
}

pub async fn step_harness(
    backend: Backend,
    kind: Protocol,
    when: FailWhen,
    adjust: impl FnOnce(&mut StepConfig),
) -> StepHarness {
    let client = ScriptedClient::new(kind, tool_answer());
    let flaky = Flaky::new(ports(backend).await, when);
    let clock = clock();
    let mut config = step_config(flaky.ports(), client.clone(), clock.clone());
    adjust(&mut config);
    let h = StepHarness {
        runner: GovernedStepRunner::new(config).unwrap(),
        client,
        flaky,
        clock,
        scope: scope(),
    };
    h.open_root("root-1").await;
    h
}

pub fn extract_tool() -> ToolSpec {
    ToolSpec {
        name: "extract_record".into(),
        description: "Extract the record".into(),
        input_schema: json!({"type": "object", "properties": {"name": {"type": "string"}}}),
    }
}

pub fn tool_answer() -> Vec<Item> {
    vec![
        ev(ModelEvent::Reference("msg_1".into())),
        ev(ModelEvent::Reasoning(
            json!({"type": "thinking", "thinking": "plan"}),
        )),
        ev(ModelEvent::TextDelta("Let me ".into())),
        ev(ModelEvent::TextDelta("extract 😀".into())),
        ev(ModelEvent::ToolCall {
            id: "toolu_1".into(),
            name: "extract_record".into(),
            arguments: "{\"name\":\"Ada\"}".into(),
        }),
        ev(ModelEvent::Stop(StopReason::ToolUse)),
        ev(ModelEvent::Usage(usage(2_000, 100))),
    ]
}

impl StepHarness {
    pub async fn open_root(&self, key: &str) {
        let now = self.clock.now();
        self.flaky
            .inner_ports()
            .trees
            .open_root(&RootRecord {
                scope: self.scope.clone(),
                root_key: key.into(),
                binding: json!({"turn": key}),
                status: RootStatus::Active,
                deadline_at: now.plus_millis(60_000),
                reserved_calls: 0,
                settled_micros: 0,
                receipts: 0,
                created_at: now,
                closed_at: None,
            })
            .await
            .unwrap();
    }

    pub fn call(&self, key: &str, tool_choice: Option<ToolChoice>) -> OperationCallInput {
        OperationCallInput {
            scope: self.scope.clone(),
            root_key: "root-1".into(),
            operation_key: key.into(),
            session_id: "session-1".into(),
            intent: "extract".into(),
            input_revision: "rev-1".into(),
            policy_version: "policy-1".into(),
            price_version: "prices-1".into(),
            output_contract_version: "output-1".into(),
            prices: prices(),
            controls: Controls {
                model: "claude-test".into(),
                max_tokens: 512,
                temperature: None,
                tool_choice,
                cache: None,
            },
            deadline_at: self.clock.now().plus_millis(30_000),
            client: None,
        }
    }

    pub fn run(&self, key: &str, tool_choice: Option<ToolChoice>) -> StepRun {
        self.run_with(key, tool_choice.clone(), vec![extract_tool()], tool_choice)
    }

    pub fn run_with(
        &self,
        key: &str,
        planned: Option<ToolChoice>,
        tools: Vec<ToolSpec>,
        loaded_choice: Option<ToolChoice>,
    ) -> StepRun {
        StepRun {
            call: self.call(key, planned),
            rationale: "the extraction route".into(),
            cancel: None,
            load_request: Box::new(move || {
                Box::pin(async move {
                    Ok(LoadedRequest {
                        system: Some("Extract.".into()),
                        messages: vec![Msg::user("Ada Lovelace wrote the first program.")],
                        tools,
                        tool_choice: loaded_choice,
                    })
                })
            }),
        }
    }
}

fn forced() -> Option<ToolChoice> {
    Some(ToolChoice::Tool {
        name: "extract_record".into(),
    })
}

async fn a_step_keeps_its_blocks_in_order_with_one_charge_and_one_root_receipt(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    let outcome = h.runner.run(h.run("call-1", forced())).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    let step = outcome.view.envelope().unwrap().step.clone().unwrap();
    assert_eq!(step.text, "Let me extract 😀");
    assert_eq!(
        step.order,
        vec![
            OrderEntry::Reasoning { index: 0 },
            OrderEntry::Text { start: 0, end: 17 },
            OrderEntry::ToolCall { index: 0 },
        ],
        "adjacent deltas coalesce; the emoji is two UTF-16 units"
    );
    assert_eq!(step.tool_calls[0].name, "extract_record");
    assert_eq!(step.tool_calls[0].input, json!({"name": "Ada"}));
    assert!(!step.tool_calls[0].malformed);
    assert_eq!(step.stop, Some(StopReason::ToolUse));
    let charge = outcome.view.receipt.clone().unwrap();
    let receipt = outcome.view.root_receipt.clone().unwrap();
    assert_eq!(charge.amount_micros, 7_500);
    assert_eq!(receipt.amount_micros, 7_500);
    let root = h
        .flaky
        .ports()
        .trees
        .root(&h.scope, "root-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (root.settled_micros, root.receipts, root.reserved_calls),
        (7_500, 1, 1)
    );
    let sent = h.client.last_request().unwrap();
    assert_eq!(sent.controls.tool_choice, forced());
    assert_eq!(sent.tools, vec![extract_tool()]);

    let replay = h.runner.run(h.run("call-1", forced())).await.unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.view.receipt, Some(charge));
    assert_eq!(replay.view.root_receipt, Some(receipt));
    assert_eq!(h.client.dispatches(), 1);
    let events = h
        .flaky
        .ports()
        .audit
        .events(&h.scope, "call-1")
        .await
        .unwrap();
    assert_eq!(events[0].kind, "governed.claimed");
    assert_eq!(events[0].detail["rationale"], json!("the extraction route"));
    assert!(
        !events.iter().any(|e| e.detail.to_string().contains("Ada")),
        "audit is metadata only"
    );
    // Bound to its registered root.
    assert!(
        h.runner
            .read(&h.scope, "another-root", "call-1")
            .await
            .unwrap()
            .is_none()
    );
}

async fn each_invalid_reason_is_reported_by_the_run_and_never_stored(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |c| {
        c.max_output_chars = Some(200);
    })
    .await;
    let end = || {
        vec![
            ev(ModelEvent::Stop(StopReason::EndTurn)),
            ev(ModelEvent::Usage(usage(10, 10))),
        ]
    };
    let cases: Vec<(InvalidReason, Vec<Item>)> = vec![
        (
            InvalidReason::OutputChars,
            vec![ev(ModelEvent::TextDelta("x".repeat(201)))],
        ),
        (
            InvalidReason::ReasoningChars,
            vec![ev(ModelEvent::Reasoning(
                json!({"type": "reasoning", "encrypted_content": "e".repeat(300)}),
            ))],
        ),
        (
            InvalidReason::TextMalformed,
            vec![ev(ModelEvent::TextDelta("a\0".into()))],
        ),
        (
            InvalidReason::ToolCall,
            vec![ev(ModelEvent::ToolCall {
                id: "t".into(),
                name: "delete_everything".into(),
                arguments: "{}".into(),
            })],
        ),
        (
            InvalidReason::BlockMalformed,
            vec![ev(ModelEvent::ProviderBlock(json!("not a block")))],
        ),
        (
            InvalidReason::StopConflict,
            vec![ev(ModelEvent::Stop(StopReason::MaxTokens))],
        ),
    ];
    for (i, (reason, mut items)) in cases.into_iter().enumerate() {
        items.extend(end());
        h.client.queue(items);
        let key = format!("invalid-{i}");
        let outcome = h.runner.run(h.run(&key, None)).await.unwrap();
        assert_eq!(outcome.invalid_reason, Some(reason), "case {i}");
        let envelope = outcome.view.envelope().unwrap();
        assert_eq!(envelope.outcome, Outcome::Invalid);
        assert_eq!(envelope.step, None, "invalid output is not stored");
        assert!(outcome.view.receipt.is_some() && outcome.view.root_receipt.is_some());
        let replay = h.runner.run(h.run(&key, None)).await.unwrap();
        assert_eq!(replay.invalid_reason, None, "nothing stores the reason");
        assert_eq!(replay.view.outcome(), Some(Outcome::Invalid));
    }
    assert_eq!(
        InvalidReason::ALL.len(),
        7,
        "event_type is the text runner's (text tests)"
    );
}

async fn a_reasoning_loop_is_cut_and_left_for_reconciliation(backend: Backend) {
    let h = step_harness(backend, Protocol::Responses, FailWhen::Never, |_| {}).await;
    let thought = || {
        ev(ModelEvent::Reasoning(
            json!({"type": "reasoning", "summary": []}),
        ))
    };
    h.client.queue(vec![
        ev(ModelEvent::Reference("resp".into())),
        thought(),
        thought(),
        thought(),
        thought(),
        thought(),
        ev(ModelEvent::Stop(StopReason::EndTurn)),
        ev(ModelEvent::Usage(usage(10, 10))),
    ]);
    let outcome = h.runner.run(h.run("loop", None)).await.unwrap();
    assert!(outcome.reasoning_loop);
    assert_eq!(outcome.invalid_reason, Some(InvalidReason::ReasoningChars));
    assert_eq!(outcome.view.state, ViewState::ReconciliationRequired);
    assert!(outcome.view.receipt.is_none() && outcome.view.root_receipt.is_none());
    assert!(
        h.client.dropped_early(),
        "the runner stopped reading at the cut"
    );

    // Usage before the cut: the call settles invalid with its cost.
    h.client.queue(vec![
        ev(ModelEvent::Reference("resp".into())),
        ev(ModelEvent::Usage(usage(10, 10))),
        thought(),
        thought(),
        thought(),
        thought(),
    ]);
    let settled = h.runner.run(h.run("loop-2", None)).await.unwrap();
    assert_eq!(settled.view.state, ViewState::Completed);
    assert_eq!(settled.view.outcome(), Some(Outcome::Invalid));
    assert_eq!(settled.view.receipt.unwrap().amount_micros, 180);
}

async fn malformed_tool_arguments_keep_an_empty_input_and_a_marker(backend: Backend) {
    let h = step_harness(backend, Protocol::ChatCompletions, FailWhen::Never, |_| {}).await;
    h.client.queue(vec![
        ev(ModelEvent::Reference("chatcmpl".into())),
        ev(ModelEvent::ToolCall {
            id: "call_1".into(),
            name: "extract_record".into(),
            arguments: "{\"name\": \"Ad".into(),
        }),
        ev(ModelEvent::Stop(StopReason::ToolUse)),
        ev(ModelEvent::Usage(usage(1, 1))),
    ]);
    let outcome = h.runner.run(h.run("bad-args", forced())).await.unwrap();
    let step = outcome.view.envelope().unwrap().step.clone().unwrap();
    assert!(step.tool_calls[0].malformed);
    assert_eq!(step.tool_calls[0].input, json!({}));
    let stored = h
        .runner
        .read(&h.scope, "root-1", "bad-args")
        .await
        .unwrap()
        .unwrap();
    assert!(
        !format!("{stored:?}").contains("\\\"Ad"),
        "raw arguments are never kept"
    );
}

async fn the_run_timeout_and_cancellation_are_step_interruptions(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |c| {
        c.run_timeout = Duration::from_millis(300);
    })
    .await;
    h.client
        .queue(vec![ev(ModelEvent::Reference("m".into())), Item::Hang]);
    let err = h.runner.run(h.run("slow", None)).await.unwrap_err();
    assert_eq!(
        err,
        GovernedError::Interrupted {
            kind: Interruption::Timeout,
            store_failed: false
        }
    );
    assert!(is_step_interruption(&err));

    let cancel = herma_governed::CancellationToken::new();
    let mut run = h.run("cancelled", None);
    run.cancel = Some(cancel.clone());
    h.client
        .queue(vec![ev(ModelEvent::Reference("m".into())), Item::Hang]);
    let task = tokio::spawn({
        let runner = h.runner.clone();
        async move { runner.run(run).await }
    });
    let client = h.client.clone();
    eventually(|| {
        let client = client.clone();
        async move { client.dispatches() == 2 }
    })
    .await;
    cancel.cancel();
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(
        err,
        GovernedError::Interrupted {
            kind: Interruption::Cancelled,
            ..
        }
    ));
    assert!(is_step_interruption(&err));

    // A store failure is never an interruption.
    let broken = step_harness(backend, Protocol::Messages, FailWhen::FromWrite(4), |_| {}).await;
    let err = broken.runner.run(broken.run("x", None)).await.unwrap_err();
    assert!(matches!(err, GovernedError::Store(_)));
    assert!(!is_step_interruption(&err));
}

async fn a_clean_anthropic_context_rejection_settles_at_zero_with_a_refusal(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    h.client.queue(vec![
        ev(ModelEvent::Reference("msg_ctx".into())),
        ev(ModelEvent::Stop(StopReason::ContextWindowExceeded)),
        ev(ModelEvent::Usage(usage(190_000, 0))),
    ]);
    let outcome = h.runner.run(h.run("ctx", None)).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    let envelope = outcome.view.envelope().unwrap();
    assert_eq!(envelope.outcome, Outcome::Refused);
    assert_eq!(envelope.refusal.as_deref(), Some("context_window_exceeded"));
    assert_eq!(envelope.step, None, "metadata only");
    assert_eq!(outcome.view.receipt.as_ref().unwrap().amount_micros, 0);
    assert_eq!(outcome.view.root_receipt.as_ref().unwrap().amount_micros, 0);

    // Content invalidates the proof: the usage is charged.
    h.client.queue(vec![
        ev(ModelEvent::Reference("msg_ctx2".into())),
        ev(ModelEvent::TextDelta("partial".into())),
        ev(ModelEvent::Stop(StopReason::ContextWindowExceeded)),
        ev(ModelEvent::Usage(usage(1_000, 0))),
    ]);
    let charged = h.runner.run(h.run("ctx-content", None)).await.unwrap();
    assert_eq!(charged.view.receipt.unwrap().amount_micros, 3_000);
    // A missing reference with a failed stream invalidates it too: the cost is unknown.
    h.client.queue(vec![
        ev(ModelEvent::Stop(StopReason::ContextWindowExceeded)),
        Item::Fail(ProviderError::Transport("reset".into())),
    ]);
    let unknown = h.runner.run(h.run("ctx-broken", None)).await.unwrap();
    assert_eq!(unknown.view.state, ViewState::ReconciliationRequired);
}

async fn a_pre_stream_rejection_completes_unavailable_at_zero(backend: Backend) {
    let h = step_harness(backend, Protocol::Responses, FailWhen::Never, |_| {}).await;
    h.client.queue(vec![
        ev(ModelEvent::Reference("req_123".into())),
        Item::Fail(ProviderError::Rejected { status: 400 }),
    ]);
    let outcome = h.runner.run(h.run("rejected", None)).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    let envelope = outcome.view.envelope().unwrap();
    assert_eq!(envelope.outcome, Outcome::Unavailable);
    assert_eq!(envelope.stop_reason, None);
    assert_eq!(outcome.view.receipt.as_ref().unwrap().amount_micros, 0);
    assert!(outcome.view.root_receipt.is_some());
    // Without the reference there is no proof.
    h.client
        .queue(vec![Item::Fail(ProviderError::Rejected { status: 400 })]);
    let unknown = h.runner.run(h.run("no-ref", None)).await.unwrap();
    assert_eq!(unknown.view.state, ViewState::ReconciliationRequired);
}

async fn an_explicit_tool_choice_is_checked_against_the_actual_tools(backend: Backend) {
    // A client whose own validator checks nothing: the runner still checks.
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    let lax = ScriptedClient::without_validation(Protocol::Messages, tool_answer());
    let mut config = step_config(h.flaky.ports(), lax.clone(), h.clock.clone());
    config.max_output_chars = Some(10_000);
    let runner = GovernedStepRunner::new(config).unwrap();
    let other = ToolSpec {
        name: "other_tool".into(),
        ..extract_tool()
    };
    let outcome = runner
        .run(h.run_with("wrong-tools", forced(), vec![other], forced()))
        .await
        .unwrap();
    assert_eq!(outcome.view.state, ViewState::NotDispatched);
    assert_eq!(
        outcome.view.not_dispatched_cause(),
        Some(herma_governed::ports::NotDispatchedCause::Invalid)
    );
    // The request's choice must be the planned one.
    let mismatch = runner
        .run(h.run_with(
            "mismatch",
            forced(),
            vec![extract_tool()],
            Some(ToolChoice::Auto),
        ))
        .await
        .unwrap();
    assert_eq!(mismatch.view.state, ViewState::NotDispatched);
    assert_eq!(lax.dispatches(), 0);

    // Choices are immutable: absent versus an explicit `auto` conflicts.
    h.runner.run(h.run("choice", None)).await.unwrap();
    assert_eq!(
        h.runner
            .run(h.run("choice", Some(ToolChoice::Auto)))
            .await
            .unwrap_err(),
        GovernedError::Conflict {
            field: "tool_choice".into()
        }
    );
    let replay = h.runner.run(h.run("choice", None)).await.unwrap();
    assert!(replay.replayed);
    assert_eq!(h.client.dispatches(), 1);
}

async fn a_closed_root_admits_no_new_call(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    h.runner.run(h.run("before", None)).await.unwrap();
    h.flaky
        .ports()
        .trees
        .close_root(&h.scope, "root-1", h.clock.now())
        .await
        .unwrap();
    assert_eq!(
        h.runner.run(h.run("after", None)).await.unwrap_err(),
        GovernedError::Root {
            root_key: "root-1".into(),
            state: "closed".into()
        }
    );
    // A call admitted before the closure still replays.
    assert!(h.runner.run(h.run("before", None)).await.unwrap().replayed);
    assert_eq!(h.client.dispatches(), 1);
}

async fn usage_reconciliation_is_scoped_to_the_root(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    h.open_root("root-2").await;
    h.runner.run(h.run("a", None)).await.unwrap();
    let mut other = h.run("b", None);
    other.call.root_key = "root-2".into();
    h.runner.run(other).await.unwrap();
    let pass = h
        .runner
        .reconcile_usage(&h.scope, "root-1", UsageQuery::default(), None)
        .await
        .unwrap();
    assert_eq!((pass.scanned, pass.acknowledged), (2, 1));
    let pending = h
        .flaky
        .ports()
        .inbox
        .pending_usage(&h.scope, None, 10)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].observation.operation_key, "b");
}

async fn a_root_block_cap_counts_the_inclusive_root_cost(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |c| {
        c.caps.root = Some(herma_governed::Cap {
            limit_micros: 5_000,
            mode: herma_governed::CapMode::Block,
        });
    })
    .await;
    let first = h.runner.run(h.run("a", None)).await.unwrap();
    assert_eq!(first.view.envelope().unwrap().outcome, Outcome::Blocked);
    assert_eq!(first.view.root_receipt.unwrap().amount_micros, 7_500);
    let second = h.runner.run(h.run("b", None)).await.unwrap();
    assert_eq!(second.view.state, ViewState::NotDispatched);
    assert_eq!(second.refusal.as_deref(), Some("cap:root"));
    assert_eq!(h.client.dispatches(), 1);
}

async fn a_changed_identity_conflicts_and_another_root_is_left_untouched(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    h.open_root("root-2").await;
    h.runner.run(h.run("k", None)).await.unwrap();
    type Change = Box<dyn Fn(&mut OperationCallInput)>;
    let changes: Vec<(&str, Change)> = vec![
        ("session_id", Box::new(|c| c.session_id = "s2".into())),
        ("intent", Box::new(|c| c.intent = "other".into())),
        (
            "input_revision",
            Box::new(|c| c.input_revision = "rev-2".into()),
        ),
        (
            "policy_version",
            Box::new(|c| c.policy_version = "policy-2".into()),
        ),
        (
            "price_version",
            Box::new(|c| c.price_version = "prices-2".into()),
        ),
        (
            "output_contract_version",
            Box::new(|c| c.output_contract_version = "output-2".into()),
        ),
        ("root_key", Box::new(|c| c.root_key = "root-2".into())),
    ];
    for (field, change) in changes {
        let mut run = h.run("k", None);
        change(&mut run.call);
        assert_eq!(
            h.runner.run(run).await.unwrap_err(),
            GovernedError::Conflict {
                field: field.into()
            }
        );
    }
    let other = h
        .flaky
        .ports()
        .trees
        .root(&h.scope, "root-2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.reserved_calls, 0, "the other root admitted nothing");
    assert!(
        h.runner
            .read(&h.scope, "root-2", "k")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(h.client.dispatches(), 1);
}

async fn a_new_call_past_its_deadline_is_refused_before_any_write(backend: Backend) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    let mut run = h.run("late", None);
    run.call.deadline_at = h.clock.now();
    assert_eq!(
        h.runner.run(run).await.unwrap_err(),
        GovernedError::Interrupted {
            kind: Interruption::Deadline,
            store_failed: false
        }
    );
    assert!(
        !h.flaky
            .ports()
            .trees
            .has_call(&h.scope, "root-1", "late")
            .await
            .unwrap()
    );
    // Controls outside the provider's matrix are refused before any write too.
    let mut hot = h.run("hot", None);
    hot.call.controls.temperature = Some(3.0);
    assert!(matches!(
        h.runner.run(hot).await,
        Err(GovernedError::InvalidInput { field, .. }) if field == "controls.temperature"
    ));
    assert!(
        !h.flaky
            .ports()
            .trees
            .has_call(&h.scope, "root-1", "hot")
            .await
            .unwrap()
    );
    assert_eq!(h.client.dispatches(), 0);
}

async fn recover_repairs_the_receipts_of_a_completed_call(backend: Backend) {
    use herma_governed::ports::{Claim, ExecutionRecord, ExecutionStatus};
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |_| {}).await;
    // A completed call whose financial receipts never landed (an older writer crashed).
    h.runner.run(h.run("donor", None)).await.unwrap();
    let ports = h.flaky.ports();
    let donor = ports
        .executions
        .execution(&h.scope, "donor")
        .await
        .unwrap()
        .unwrap();
    ports
        .trees
        .reserve_call(&h.scope, "root-1", "orphan")
        .await
        .unwrap();
    let record = ExecutionRecord {
        operation_key: "orphan".into(),
        version: 0,
        ..donor
    };
    assert!(matches!(
        ports.executions.claim_execution(&record).await.unwrap(),
        Claim::Claimed(r) if r.status == ExecutionStatus::Completed
    ));
    let before = h
        .runner
        .read(&h.scope, "root-1", "orphan")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        before.state,
        ViewState::ReconciliationRequired,
        "both receipts are required"
    );
    let after = h
        .runner
        .recover(&h.scope, "root-1", "orphan", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.state, ViewState::Completed);
    assert_eq!(after.receipt.unwrap().amount_micros, 7_500);
    assert_eq!(after.root_receipt.unwrap().amount_micros, 7_500);
    assert_eq!(h.client.dispatches(), 1, "recovery never dispatches");
}

async fn a_planned_call_names_its_client(backend: Backend) {
    let other = ScriptedClient::new(Protocol::Responses, tool_answer());
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |c| {
        c.clients.insert("openai".into(), other.clone());
    })
    .await;
    let mut run = h.run("routed", None);
    run.call.client = Some("openai".into());
    let outcome = h.runner.run(run).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    assert_eq!((other.dispatches(), h.client.dispatches()), (1, 0));
    // The same key through another client conflicts; an unknown client writes nothing.
    assert_eq!(
        h.runner.run(h.run("routed", None)).await.unwrap_err(),
        GovernedError::Conflict {
            field: "client".into()
        }
    );
    let mut unknown = h.run("unknown", None);
    unknown.call.client = Some("nope".into());
    assert!(matches!(
        h.runner.run(unknown).await,
        Err(GovernedError::InvalidInput { field, .. }) if field == "client"
    ));
    assert!(
        !h.flaky
            .ports()
            .trees
            .has_call(&h.scope, "root-1", "unknown")
            .await
            .unwrap()
    );
}

on_all_backends!(
    a_planned_call_names_its_client,
    a_root_block_cap_counts_the_inclusive_root_cost,
    a_changed_identity_conflicts_and_another_root_is_left_untouched,
    a_new_call_past_its_deadline_is_refused_before_any_write,
    recover_repairs_the_receipts_of_a_completed_call,
    a_step_keeps_its_blocks_in_order_with_one_charge_and_one_root_receipt,
    each_invalid_reason_is_reported_by_the_run_and_never_stored,
    a_reasoning_loop_is_cut_and_left_for_reconciliation,
    malformed_tool_arguments_keep_an_empty_input_and_a_marker,
    the_run_timeout_and_cancellation_are_step_interruptions,
    a_clean_anthropic_context_rejection_settles_at_zero_with_a_refusal,
    a_pre_stream_rejection_completes_unavailable_at_zero,
    an_explicit_tool_choice_is_checked_against_the_actual_tools,
    a_closed_root_admits_no_new_call,
    usage_reconciliation_is_scoped_to_the_root,
);
