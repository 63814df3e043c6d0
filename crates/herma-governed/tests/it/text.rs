//! The text/JSON single-call runner on every backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use herma_core::CallerScope;
use herma_core::call::{ModelEvent, Msg, StopReason, ToolChoice};
use herma_core::time::Clock;
use herma_core::wire::Protocol;
use herma_governed::ports::{ExecutionStatus, NotDispatchedCause};
use herma_governed::{
    Cap, CapMode, Caps, GovernedError, InputLoader, Interruption, LoadError, Outcome, Output,
    OutputContract, SingleCallConfig, SingleCallRunner, TextRun, UsageQuery, ViewState,
    is_step_interruption,
};
use serde_json::json;

use crate::on_all_backends;
use crate::support::*;

pub struct Harness {
    pub runner: SingleCallRunner,
    pub client: Arc<ScriptedClient>,
    pub flaky: Arc<Flaky>,
    pub clock: Arc<herma_core::time::ManualClock>,
    pub scope: CallerScope,
    pub loads: Arc<AtomicUsize>,
}

pub fn config(
    ports: herma_governed::ports::GovernedPorts,
    client: Arc<ScriptedClient>,
    clock: Arc<herma_core::time::ManualClock>,
) -> SingleCallConfig {
    let mut config = SingleCallConfig::new(
        ports,
        client,
        "claude-test",
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    config.prices = prices();
    config.clock = clock;
    config.system = Some("Answer briefly.".into());
    config.deadline = Duration::from_secs(30);
    config
}

pub async fn harness_with(
    backend: Backend,
    when: FailWhen,
    adjust: impl FnOnce(&mut SingleCallConfig),
) -> Harness {
    harness_on(backend, Protocol::Messages, when, adjust).await
}

pub async fn harness_on(
    backend: Backend,
    kind: Protocol,
    when: FailWhen,
    adjust: impl FnOnce(&mut SingleCallConfig),
) -> Harness {
    let client = ScriptedClient::new(kind, text_answer("hello", usage(1_000, 200)));
    let flaky = Flaky::new(ports(backend).await, when);
    let clock = clock();
    let mut config = config(flaky.ports(), client.clone(), clock.clone());
    adjust(&mut config);
    Harness {
        runner: SingleCallRunner::new(config).unwrap(),
        client,
        flaky,
        clock,
        scope: scope(),
        loads: Arc::new(AtomicUsize::new(0)),
    }
}

pub async fn harness(backend: Backend) -> Harness {
    harness_with(backend, FailWhen::Never, |_| {}).await
}

impl Harness {
    pub fn loader(&self, messages: Vec<Msg>) -> InputLoader {
        let loads = self.loads.clone();
        Box::new(move || {
            Box::pin(async move {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(messages)
            })
        })
    }

    pub fn run(&self, key: &str) -> TextRun {
        text_run(
            &self.scope,
            key,
            self.loader(vec![Msg::user("What is Herma?")]),
        )
    }
}

/// The run every text test sends: session-1, rev-1, intent `answer`.
pub fn text_run(scope: &CallerScope, key: &str, load_input: InputLoader) -> TextRun {
    TextRun {
        scope: scope.clone(),
        session_id: "session-1".into(),
        operation_key: key.into(),
        input_revision: "rev-1".into(),
        intent: "answer".into(),
        cancel: None,
        tool_choice: None,
        load_input,
    }
}

/// A loader answering `What is Herma?`.
pub fn question() -> InputLoader {
    Box::new(|| Box::pin(async { Ok(vec![Msg::user("What is Herma?")]) }))
}

/// 1,000 input tokens at 3 per million micros-units and 200 output at 15: 3,000 + 3,000.
const ANSWER_COST: i64 = 6_000;

async fn a_call_completes_settles_once_and_replays_without_redispatch(backend: Backend) {
    let h = harness(backend).await;
    let first = h.runner.run(h.run("op-1")).await.unwrap();
    assert!(!first.replayed);
    assert_eq!(first.view.state, ViewState::Completed);
    let envelope = first.view.envelope().unwrap().clone();
    assert_eq!(envelope.outcome, Outcome::Success);
    assert_eq!(envelope.text.as_deref(), Some("hello"));
    assert_eq!(envelope.stop_reason, Some(StopReason::EndTurn));
    let receipt = first.view.receipt.clone().unwrap();
    assert_eq!(receipt.amount_micros, ANSWER_COST);
    let spend = h
        .flaky
        .ports()
        .spend
        .peek(&h.scope, "session-1", "2026-11-30")
        .await
        .unwrap();
    assert_eq!(spend.session_micros, ANSWER_COST);
    assert_eq!(spend.day_micros, ANSWER_COST);
    let sent = h.client.last_request().unwrap();
    assert_eq!(sent.system.as_deref(), Some("Answer briefly."));
    assert_eq!(sent.messages, vec![Msg::user("What is Herma?")]);

    let again = h.runner.run(h.run("op-1")).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.view.envelope(), Some(&envelope));
    assert_eq!(again.view.receipt, Some(receipt));
    assert_eq!(h.client.dispatches(), 1, "a replay never dispatches");
    assert_eq!(
        h.loads.load(Ordering::SeqCst),
        1,
        "a replay never loads input"
    );
    assert_eq!(h.flaky.cost_calls.load(Ordering::SeqCst), 0);
    assert_eq!(h.flaky.add_calls.load(Ordering::SeqCst), 0);
    let read = h.runner.read(&h.scope, "op-1").await.unwrap().unwrap();
    assert_eq!(read.envelope(), Some(&envelope));
    let meta = read.record.unwrap().meta;
    assert_eq!(meta.result.unwrap().amount_micros, ANSWER_COST);
    assert_eq!(meta.controls.model, "claude-test");
}

async fn concurrent_runs_of_one_key_dispatch_once(backend: Backend) {
    let h = Arc::new(harness(backend).await);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let h = h.clone();
        tasks.push(tokio::spawn(
            async move { h.runner.run(h.run("same")).await },
        ));
    }
    for task in tasks {
        let outcome = task.await.unwrap().unwrap();
        assert!(matches!(
            outcome.view.state,
            ViewState::Completed | ViewState::InProgress
        ));
    }
    assert_eq!(h.client.dispatches(), 1);
    let spend = h
        .flaky
        .ports()
        .spend
        .peek(&h.scope, "session-1", "2026-11-30")
        .await
        .unwrap();
    assert_eq!(spend.session_micros, ANSWER_COST, "settled exactly once");
}

async fn a_changed_session_intent_revision_or_version_conflicts(backend: Backend) {
    let h = harness(backend).await;
    h.runner.run(h.run("op")).await.unwrap();
    type Change = Box<dyn Fn(&mut TextRun)>;
    let variants: Vec<(&str, Change)> = vec![
        ("session_id", Box::new(|r| r.session_id = "other".into())),
        ("intent", Box::new(|r| r.intent = "other".into())),
        (
            "input_revision",
            Box::new(|r| r.input_revision = "rev-2".into()),
        ),
    ];
    for (field, change) in variants {
        let mut run = h.run("op");
        change(&mut run);
        assert_eq!(
            h.runner.run(run).await.unwrap_err(),
            GovernedError::Conflict {
                field: field.into()
            }
        );
    }
    for (field, change) in [
        ("policy_version", 0usize),
        ("price_version", 1),
        ("output_contract_version", 2),
    ] {
        let mut config = config(h.flaky.ports(), h.client.clone(), h.clock.clone());
        match change {
            0 => config.policy_version = "policy-2".into(),
            1 => config.price_version = "prices-2".into(),
            _ => config.output_contract_version = "output-2".into(),
        }
        let runner = SingleCallRunner::new(config).unwrap();
        assert_eq!(
            runner.run(h.run("op")).await.unwrap_err(),
            GovernedError::Conflict {
                field: field.into()
            }
        );
    }
    assert_eq!(h.client.dispatches(), 1);
    assert_eq!(h.loads.load(Ordering::SeqCst), 1);
}

async fn warn_caps_keep_the_result(backend: Backend) {
    let h = harness_with(backend, FailWhen::Never, |c| {
        c.caps = Caps {
            session: Some(Cap {
                limit_micros: 1_000,
                mode: CapMode::Warn,
            }),
            ..Caps::default()
        }
    })
    .await;
    let outcome = h.runner.run(h.run("op")).await.unwrap();
    assert_eq!(outcome.view.envelope().unwrap().outcome, Outcome::Success);
    assert_eq!(outcome.warnings.len(), 1);
    assert_eq!(outcome.warnings[0].cap, "session");
    assert_eq!(outcome.warnings[0].spent_micros, ANSWER_COST);
    // Warned calls keep going.
    let next = h.runner.run(h.run("op-2")).await.unwrap();
    assert_eq!(next.view.envelope().unwrap().outcome, Outcome::Success);
}

async fn block_caps_block_after_the_call_with_cost_settled_and_before_the_next(backend: Backend) {
    let h = harness_with(backend, FailWhen::Never, |c| {
        c.caps = Caps {
            day: Some(Cap {
                limit_micros: 5_000,
                mode: CapMode::Block,
            }),
            ..Caps::default()
        }
    })
    .await;
    let outcome = h.runner.run(h.run("op")).await.unwrap();
    let envelope = outcome.view.envelope().unwrap();
    assert_eq!(envelope.outcome, Outcome::Blocked);
    assert_eq!(envelope.text, None, "the suppressed output is not stored");
    assert_eq!(
        outcome.view.receipt.as_ref().unwrap().amount_micros,
        ANSWER_COST
    );

    let next = h.runner.run(h.run("op-2")).await.unwrap();
    assert_eq!(next.view.state, ViewState::NotDispatched);
    assert_eq!(
        next.view.not_dispatched_cause(),
        Some(NotDispatchedCause::Invalid)
    );
    assert_eq!(
        next.view.record.unwrap().meta.refusal.as_deref(),
        Some("cap:day")
    );
    assert_eq!(h.client.dispatches(), 1);
    assert_eq!(
        h.loads.load(Ordering::SeqCst),
        1,
        "a blocked call loads nothing"
    );
}

async fn each_not_dispatched_cause_is_recorded(backend: Backend) {
    // invalid: loaded input over the budget.
    let h = harness_with(backend, FailWhen::Never, |c| c.max_input_chars = 5).await;
    let v = h.runner.run(h.run("too-long")).await.unwrap().view;
    assert_eq!(v.not_dispatched_cause(), Some(NotDispatchedCause::Invalid));

    // input: the host's loader failed.
    let mut run = h.run("loader-fails");
    run.load_input = Box::new(|| Box::pin(async { Err(LoadError("db down".into())) }));
    let v = h.runner.run(run).await.unwrap().view;
    assert_eq!(v.state, ViewState::NotDispatched);
    assert_eq!(v.not_dispatched_cause(), Some(NotDispatchedCause::Input));

    // aborted: the caller cancelled while input was loading.
    let cancel = herma_governed::CancellationToken::new();
    let mut run = h.run("cancelled");
    let inner = cancel.clone();
    run.cancel = Some(cancel);
    run.load_input = Box::new(move || {
        Box::pin(async move {
            inner.cancel();
            std::future::pending::<()>().await;
            Ok(vec![])
        })
    });
    let err = h.runner.run(run).await.unwrap_err();
    assert!(matches!(
        err,
        GovernedError::Interrupted {
            kind: Interruption::Cancelled,
            store_failed: false
        }
    ));
    assert!(is_step_interruption(&err));
    wait_for_view(&h.runner, &h.scope, "cancelled", |v| {
        v.not_dispatched_cause() == Some(NotDispatchedCause::Aborted)
    })
    .await;

    // audit: the awaited audit write failed.
    let h2 = harness_with(backend, FailWhen::Audit, |_| {}).await;
    let v = h2.runner.run(h2.run("audit")).await.unwrap().view;
    assert_eq!(v.not_dispatched_cause(), Some(NotDispatchedCause::Audit));

    // store: reserving the result failed; the run rejects and the claim says why.
    let h3 = harness_with(backend, FailWhen::Reserve, |_| {}).await;
    assert!(matches!(
        h3.runner.run(h3.run("store")).await,
        Err(GovernedError::Store(_))
    ));
    let v = h3.runner.read(&h3.scope, "store").await.unwrap().unwrap();
    assert_eq!(v.not_dispatched_cause(), Some(NotDispatchedCause::Store));

    // absent (unknown): a claim left prepared, fenced after its deadline.
    let h4 = harness_with(backend, FailWhen::FromWrite(2), |_| {}).await;
    assert!(h4.runner.run(h4.run("crashed")).await.is_err());
    h4.clock.advance_millis(31_000);
    let base = unflaky(&h4);
    assert_eq!(
        base.reconcile_expired(&h4.scope, None).await.unwrap(),
        vec!["crashed".to_owned()]
    );
    let v = base.read(&h4.scope, "crashed").await.unwrap().unwrap();
    assert_eq!(v.state, ViewState::NotDispatched);
    assert_eq!(v.not_dispatched_cause(), None);

    for h in [&h, &h2, &h3, &h4] {
        assert_eq!(
            h.client.dispatches(),
            0,
            "none of these reached the provider"
        );
    }
}

/// Waits (bounded) until the key's view satisfies `check`: for what a run leaves in the
/// background.
async fn wait_for_view(
    runner: &SingleCallRunner,
    scope: &CallerScope,
    key: &str,
    check: impl Fn(&herma_governed::CallView) -> bool,
) {
    for _ in 0..500 {
        if runner
            .read(scope, key)
            .await
            .unwrap()
            .is_some_and(|v| check(&v))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the view of `{key}` never reached the expected state");
}

/// A runner over the same stores without the injected failures (a restarted process).
pub fn unflaky(h: &Harness) -> SingleCallRunner {
    SingleCallRunner::new(config(
        h.flaky.inner_ports(),
        h.client.clone(),
        h.clock.clone(),
    ))
    .unwrap()
}

async fn tool_choice_is_refused_by_the_text_runner(backend: Backend) {
    let h = harness(backend).await;
    let mut config = config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    config.tool_choice = Some(ToolChoice::Auto);
    assert!(matches!(
        SingleCallRunner::new(config),
        Err(GovernedError::Config { field, .. }) if field == "tool_choice"
    ));
    let mut run = h.run("op");
    run.tool_choice = Some(ToolChoice::Tool {
        name: "extract".into(),
    });
    assert!(matches!(
        h.runner.run(run).await,
        Err(GovernedError::InvalidInput { field, .. }) if field == "tool_choice"
    ));
    assert!(
        h.runner.read(&h.scope, "op").await.unwrap().is_none(),
        "nothing written"
    );
}

async fn json_output_is_validated_and_invalid_output_is_settled_but_not_stored(backend: Backend) {
    let contract = |valid: bool| OutputContract {
        name: "answer".into(),
        schema: json!({"type": "object"}),
        validate: Arc::new(move |v| valid && v.get("ok").is_some()),
    };
    let h = harness_on(backend, Protocol::Responses, FailWhen::Never, |c| {
        c.output = Some(contract(true));
    })
    .await;
    h.client.queue(text_answer("{\"ok\": true}", usage(10, 10)));
    let good = h.runner.run(h.run("good")).await.unwrap();
    assert_eq!(
        good.view.envelope().unwrap().json,
        Some(json!({"ok": true}))
    );
    h.client.queue(text_answer("not json", usage(10, 10)));
    let bad = h.runner.run(h.run("bad")).await.unwrap();
    assert_eq!(
        bad.invalid_reason,
        Some(herma_governed::InvalidReason::TextMalformed)
    );
    let envelope = bad.view.envelope().unwrap();
    assert_eq!(envelope.outcome, Outcome::Invalid);
    assert_eq!(envelope.text, None);
    assert!(
        bad.view.receipt.unwrap().amount_micros > 0,
        "known cost is settled"
    );
    let read = h.runner.read(&h.scope, "bad").await.unwrap().unwrap();
    assert_eq!(read.outcome(), Some(Outcome::Invalid));
    // Provider blocks are not the text runner's: event_type.
    h.client.queue(vec![
        ev(ModelEvent::ProviderBlock(
            json!({"type": "web_search_tool_result"}),
        )),
        ev(ModelEvent::Stop(StopReason::EndTurn)),
        ev(ModelEvent::Usage(usage(1, 1))),
    ]);
    let blocked = h.runner.run(h.run("block")).await.unwrap();
    assert_eq!(
        blocked.invalid_reason,
        Some(herma_governed::InvalidReason::EventType)
    );
}

async fn a_hung_provider_ends_at_the_deadline_and_needs_reconciliation(backend: Backend) {
    let h = harness_with(backend, FailWhen::Never, |c| {
        c.deadline = Duration::from_millis(300);
    })
    .await;
    h.client
        .queue(vec![ev(ModelEvent::Reference("r".into())), Item::Hang]);
    let err = h.runner.run(h.run("hung")).await.unwrap_err();
    assert_eq!(
        err,
        GovernedError::Interrupted {
            kind: Interruption::Deadline,
            store_failed: false
        }
    );
    assert!(is_step_interruption(&err));
    let v = h.runner.read(&h.scope, "hung").await.unwrap().unwrap();
    assert_eq!(v.state, ViewState::InProgress);
    h.clock.advance_millis(1_000);
    assert_eq!(
        h.runner.reconcile_expired(&h.scope, None).await.unwrap(),
        vec!["hung".to_owned()]
    );
    let v = h.runner.read(&h.scope, "hung").await.unwrap().unwrap();
    assert_eq!(v.state, ViewState::ReconciliationRequired);
    assert_eq!(h.client.dispatches(), 1);
    // A replay after the deadline reads, never dispatches.
    let replay = h.runner.run(h.run("hung")).await;
    assert!(
        matches!(replay, Ok(o) if o.replayed && o.view.state == ViewState::ReconciliationRequired)
    );
    assert_eq!(h.client.dispatches(), 1);
}

async fn erased_or_expired_output_is_unavailable_but_the_history_stays(backend: Backend) {
    let h = harness_with(backend, FailWhen::Never, |c| {
        c.result_retention = Duration::from_secs(60);
    })
    .await;
    h.runner.run(h.run("erased")).await.unwrap();
    h.runner.run(h.run("expires")).await.unwrap();
    h.flaky
        .ports()
        .results
        .erase_result(&h.scope, "erased", h.clock.now())
        .await
        .unwrap();
    let erased = h.runner.read(&h.scope, "erased").await.unwrap().unwrap();
    assert_eq!(erased.state, ViewState::Completed);
    assert_eq!(erased.output, Output::Unavailable);
    assert_eq!(erased.outcome(), Some(Outcome::Success));
    assert!(erased.receipt.is_some());
    let live = h.runner.read(&h.scope, "expires").await.unwrap().unwrap();
    assert!(matches!(live.output, Output::Available(_)));
    h.clock.advance_millis(61_000);
    let expired = h.runner.read(&h.scope, "expires").await.unwrap().unwrap();
    assert_eq!(expired.output, Output::Unavailable);
    // Replays of erased content cannot regenerate it.
    let replay = h.runner.run(h.run("erased")).await.unwrap();
    assert_eq!(replay.view.output, Output::Unavailable);
    assert_eq!(h.client.dispatches(), 2);
}

async fn temperature_is_persisted_with_the_controls_and_kept_on_replay(backend: Backend) {
    let h = harness_with(backend, FailWhen::Never, |c| c.temperature = Some(0.3)).await;
    h.runner.run(h.run("t")).await.unwrap();
    assert_eq!(
        h.client.last_request().unwrap().controls.temperature,
        Some(0.3)
    );
    let mut warmer = config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    warmer.temperature = Some(0.9);
    let changed = SingleCallRunner::new(warmer).unwrap();
    assert_eq!(
        changed.run(h.run("t")).await.unwrap_err(),
        GovernedError::Conflict {
            field: "controls".into()
        },
        "changing immutable configuration needs a policy version bump"
    );
    let read = h.runner.read(&h.scope, "t").await.unwrap().unwrap();
    assert_eq!(read.record.unwrap().meta.controls.temperature, Some(0.3));
    // Out of the provider's matrix: refused at construction, before any claim.
    let mut hot = config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    hot.temperature = Some(1.5);
    assert!(matches!(
        SingleCallRunner::new(hot),
        Err(GovernedError::Config { field, .. }) if field == "controls.temperature"
    ));
}

async fn usage_reconciliation_pages_and_acknowledges_only_durable_accounting(backend: Backend) {
    let h = harness(backend).await;
    for i in 0..120 {
        h.runner.run(h.run(&format!("op-{i:03}"))).await.unwrap();
    }
    // One call dispatched whose end is unknown: its evidence stays pending.
    h.client.queue(vec![
        ev(ModelEvent::Reference("r".into())),
        ev(ModelEvent::Usage(usage(5, 5))),
        Item::Fail(herma_providers::single::ProviderError::Transport(
            "reset".into(),
        )),
    ]);
    let partial = h.runner.run(h.run("partial")).await.unwrap();
    assert_eq!(partial.view.outcome(), Some(Outcome::Unavailable));

    let first = h
        .runner
        .reconcile_usage(&h.scope, UsageQuery::default(), None)
        .await
        .unwrap();
    assert_eq!(first.scanned, 50, "the default page is 50");
    assert_eq!(first.acknowledged, 50);
    let skip_odd = |key: &str| key.ends_with('1');
    let second = h
        .runner
        .reconcile_usage(
            &h.scope,
            UsageQuery {
                limit: Some(1_000),
                after: first.cursor,
            },
            Some(&skip_odd),
        )
        .await
        .unwrap();
    assert_eq!(
        second.scanned, 71,
        "at most 100 per page; 70 calls and the partial one left"
    );
    assert_eq!(second.acknowledged, 64, "skipped keys stay pending");
    let third = h
        .runner
        .reconcile_usage(&h.scope, UsageQuery::default(), None)
        .await
        .unwrap();
    assert_eq!(third.scanned, 7);
    assert_eq!(
        third.acknowledged, 7,
        "restarting from the beginning sees what was skipped"
    );
    let pending = h
        .flaky
        .ports()
        .inbox
        .pending_usage(&h.scope, None, 100)
        .await
        .unwrap();
    assert!(
        pending.is_empty(),
        "the partial call's exact usage was settled and acknowledged"
    );
    let status = h
        .flaky
        .ports()
        .executions
        .execution(&h.scope, "partial")
        .await
        .unwrap()
        .unwrap()
        .status;
    assert_eq!(status, ExecutionStatus::Completed);
}

async fn clients_that_retry_are_refused(backend: Backend) {
    let ports = ports(backend).await;
    let client = ScriptedClient::with_attempts(Protocol::Responses, 3);
    let config = SingleCallConfig::new(
        ports,
        client,
        "gpt-test",
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    assert!(matches!(
        SingleCallRunner::new(config),
        Err(GovernedError::Config { field, .. }) if field == "client"
    ));
}

async fn a_cancelled_replay_never_aborts_the_original_run(backend: Backend) {
    let h = Arc::new(harness(backend).await);
    let release = Arc::new(tokio::sync::Notify::new());
    let mut original = h.run("shared");
    let gate = release.clone();
    original.load_input = Box::new(move || {
        Box::pin(async move {
            gate.notified().await;
            Ok(vec![Msg::user("What is Herma?")])
        })
    });
    let first = tokio::spawn({
        let h = h.clone();
        async move { h.runner.run(original).await }
    });
    wait_for_view(&h.runner, &h.scope, "shared", |_| true).await;
    // A replay whose caller already gave up.
    let cancel = herma_governed::CancellationToken::new();
    cancel.cancel();
    let mut replay = h.run("shared");
    replay.cancel = Some(cancel);
    let err = h.runner.run(replay).await.unwrap_err();
    assert!(is_step_interruption(&err));
    tokio::time::sleep(Duration::from_millis(50)).await;
    release.notify_one();
    let done = first.await.unwrap().unwrap();
    assert_eq!(
        done.view.state,
        ViewState::Completed,
        "the original run was not fenced"
    );
    assert_eq!(h.client.dispatches(), 1);
}

async fn an_interruption_after_a_failed_store_write_is_not_a_step_interruption(backend: Backend) {
    let h = harness_with(backend, FailWhen::Deposit, |c| {
        c.deadline = Duration::from_millis(300);
    })
    .await;
    h.client.queue(vec![
        ev(ModelEvent::Reference("r".into())),
        ev(ModelEvent::Usage(usage(10, 10))),
        Item::Hang,
    ]);
    let err = h.runner.run(h.run("x")).await.unwrap_err();
    assert_eq!(
        err,
        GovernedError::Interrupted {
            kind: Interruption::Deadline,
            store_failed: true
        }
    );
    assert!(!is_step_interruption(&err));
}

async fn a_pre_stream_rejection_settles_the_text_call_at_zero(backend: Backend) {
    let h = harness(backend).await;
    h.client.queue(vec![
        ev(ModelEvent::Reference("req_1".into())),
        Item::Fail(herma_providers::single::ProviderError::Rejected { status: 400 }),
    ]);
    let outcome = h.runner.run(h.run("rejected")).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    assert_eq!(
        outcome.view.envelope().unwrap().outcome,
        Outcome::Unavailable
    );
    assert_eq!(outcome.view.envelope().unwrap().stop_reason, None);
    assert_eq!(outcome.view.receipt.unwrap().amount_micros, 0);
}

async fn reserved_keys_and_unpriceable_usage_are_refused(backend: Backend) {
    let h = harness(backend).await;
    assert!(matches!(
        h.runner.run(h.run("alma-structured-v1:root:abc")).await,
        Err(GovernedError::InvalidInput { field, .. }) if field == "operation_key"
    ));
    h.client.queue(text_answer("x", usage(u64::MAX, u64::MAX)));
    let outcome = h.runner.run(h.run("absurd")).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::ReconciliationRequired);
    assert!(
        outcome.view.receipt.is_none(),
        "implausible evidence is left to an operator"
    );
}

/// Chooses by intent: `summarize` on a small model with caching, `forbidden` refused.
struct ByIntent;

impl herma_governed::CallPolicy for ByIntent {
    fn resolve(&self, intent: &str) -> Result<herma_governed::PolicyChoice, String> {
        match intent {
            "forbidden" => Err("intent_not_allowed".into()),
            "summarize" => Ok(herma_governed::PolicyChoice {
                client: None,
                model: "claude-small".into(),
                cache: Some(true),
            }),
            "research" => Ok(herma_governed::PolicyChoice {
                client: Some("openai".into()),
                model: "gpt-large".into(),
                cache: None,
            }),
            "elsewhere" => Ok(herma_governed::PolicyChoice {
                client: Some("missing".into()),
                model: "m".into(),
                cache: None,
            }),
            _ => Ok(herma_governed::PolicyChoice {
                client: None,
                model: "claude-large".into(),
                cache: None,
            }),
        }
    }
}

async fn the_policy_chooses_model_and_cache_and_the_override_wins(backend: Backend) {
    let h = harness_with(backend, FailWhen::Never, |c| {
        c.policy = Some(Arc::new(ByIntent))
    })
    .await;
    let mut run = h.run("sum");
    run.intent = "summarize".into();
    h.runner.run(run).await.unwrap();
    let sent = h.client.last_request().unwrap().controls;
    assert_eq!(
        (sent.model.as_str(), sent.cache),
        ("claude-small", Some(true))
    );
    h.runner.run(h.run("other")).await.unwrap();
    let sent = h.client.last_request().unwrap().controls;
    assert_eq!((sent.model.as_str(), sent.cache), ("claude-large", None));

    let mut forbidden = h.run("forbidden");
    forbidden.intent = "forbidden".into();
    let refused = h.runner.run(forbidden).await.unwrap();
    assert_eq!(refused.view.state, ViewState::NotDispatched);
    assert_eq!(
        refused.view.not_dispatched_cause(),
        Some(NotDispatchedCause::Invalid)
    );
    assert_eq!(
        refused.refusal.as_deref(),
        Some("policy:intent_not_allowed")
    );
    assert_eq!(
        h.loads.load(Ordering::SeqCst),
        2,
        "a refused call loads nothing"
    );

    // An explicit override, `false` included, beats the policy's choice.
    let mut off = config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    off.policy = Some(Arc::new(ByIntent));
    off.cache = Some(false);
    off.policy_version = "policy-2".into();
    let off = SingleCallRunner::new(off).unwrap();
    let mut run = h.run("sum-off");
    run.intent = "summarize".into();
    off.run(run).await.unwrap();
    assert_eq!(h.client.last_request().unwrap().controls.cache, Some(false));
    assert_eq!(h.client.dispatches(), 3);
}

async fn a_dropped_run_fences_its_claim_or_drains_its_dispatch(backend: Backend) {
    let h = harness(backend).await;
    // Dropped while loading input: never dispatched, the claim is fenced as aborted.
    let mut stuck = h.run("dropped-early");
    stuck.load_input = Box::new(|| {
        Box::pin(async {
            std::future::pending::<()>().await;
            Ok(vec![])
        })
    });
    let early = tokio::time::timeout(Duration::from_millis(100), h.runner.run(stuck)).await;
    assert!(early.is_err(), "the host gave up and dropped the run");
    wait_for_view(&h.runner, &h.scope, "dropped-early", |v| {
        v.not_dispatched_cause() == Some(NotDispatchedCause::Aborted)
    })
    .await;
    assert_eq!(h.client.dispatches(), 0);

    // Dropped after the dispatch: the stream is drained and settled in the background.
    h.client.queue(vec![
        ev(ModelEvent::Reference("r".into())),
        ev(ModelEvent::TextDelta("late".into())),
        Item::Pause(Duration::from_millis(300)),
        ev(ModelEvent::Stop(StopReason::EndTurn)),
        ev(ModelEvent::Usage(usage(1_000, 200))),
    ]);
    let late = tokio::time::timeout(
        Duration::from_millis(150),
        h.runner.run(h.run("dropped-late")),
    )
    .await;
    assert!(late.is_err());
    wait_for_view(&h.runner, &h.scope, "dropped-late", |v| {
        v.state == ViewState::Completed
    })
    .await;
    let view = h
        .runner
        .read(&h.scope, "dropped-late")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.envelope().unwrap().text.as_deref(), Some("late"));
    assert_eq!(view.receipt.unwrap().amount_micros, ANSWER_COST);
    assert_eq!(h.client.dispatches(), 1);
}

async fn the_policy_routes_to_a_named_client(backend: Backend) {
    let openai = ScriptedClient::new(Protocol::Responses, text_answer("hi", usage(10, 1)));
    let retrying = ScriptedClient::with_attempts(Protocol::ChatCompletions, 2);
    let h = harness_with(backend, FailWhen::Never, |c| {
        c.policy = Some(Arc::new(ByIntent));
        c.clients.insert("openai".into(), openai.clone());
    })
    .await;
    let mut run = h.run("research");
    run.intent = "research".into();
    let outcome = h.runner.run(run).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    assert_eq!((openai.dispatches(), h.client.dispatches()), (1, 0));
    let meta = outcome.view.record.unwrap().meta;
    assert_eq!(meta.provider, "openai_responses");
    assert_eq!(meta.identity.client.as_deref(), Some("openai"));
    assert_eq!(meta.controls.model, "gpt-large");

    let mut run = h.run("elsewhere");
    run.intent = "elsewhere".into();
    let refused = h.runner.run(run).await.unwrap();
    assert_eq!(refused.refusal.as_deref(), Some("policy:unknown_client"));
    assert_eq!(refused.view.state, ViewState::NotDispatched);

    let mut config = config(h.flaky.ports(), h.client.clone(), h.clock.clone());
    config.clients.insert("backup".into(), retrying);
    assert!(matches!(
        SingleCallRunner::new(config),
        Err(GovernedError::Config { field, .. }) if field == "clients.backup"
    ));
}

on_all_backends!(
    the_policy_routes_to_a_named_client,
    a_dropped_run_fences_its_claim_or_drains_its_dispatch,
    the_policy_chooses_model_and_cache_and_the_override_wins,
    a_cancelled_replay_never_aborts_the_original_run,
    an_interruption_after_a_failed_store_write_is_not_a_step_interruption,
    a_pre_stream_rejection_settles_the_text_call_at_zero,
    reserved_keys_and_unpriceable_usage_are_refused,
    a_call_completes_settles_once_and_replays_without_redispatch,
    concurrent_runs_of_one_key_dispatch_once,
    a_changed_session_intent_revision_or_version_conflicts,
    warn_caps_keep_the_result,
    block_caps_block_after_the_call_with_cost_settled_and_before_the_next,
    each_not_dispatched_cause_is_recorded,
    tool_choice_is_refused_by_the_text_runner,
    json_output_is_validated_and_invalid_output_is_settled_but_not_stored,
    a_hung_provider_ends_at_the_deadline_and_needs_reconciliation,
    erased_or_expired_output_is_unavailable_but_the_history_stays,
    temperature_is_persisted_with_the_controls_and_kept_on_replay,
    usage_reconciliation_pages_and_acknowledges_only_durable_accounting,
    clients_that_retry_are_refused,
);
