//! The state machine under random interleavings of run, read, recover and the reconcilers,
//! with a provider that succeeds, fails before or after usage, or is slow: no key is ever
//! dispatched twice, and no settlement is left without its root receipt and completion.

use std::time::Duration;

use herma_core::call::{ModelEvent, Msg, StopReason};
use herma_core::wire::Protocol;
use herma_governed::ports::ExecutionStatus;
use herma_governed::{LoadedRequest, UsageQuery};
use herma_providers::single::ProviderError;
use proptest::prelude::*;

use crate::step::{StepHarness, extract_tool, step_harness};
use crate::support::*;

const KEYS: u8 = 3;

#[derive(Clone, Debug)]
enum Op {
    Run(u8),
    Read(u8),
    Recover(u8),
    ReconcileExpired,
    ReconcileUsage,
    Advance(u32),
    Yield,
}

#[derive(Clone, Copy, Debug)]
enum Script {
    Answer,
    FailBeforeUsage,
    FailAfterUsage,
    Slow,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..KEYS).prop_map(Op::Run),
        1 => (0..KEYS).prop_map(Op::Read),
        2 => (0..KEYS).prop_map(Op::Recover),
        1 => Just(Op::ReconcileExpired),
        1 => Just(Op::ReconcileUsage),
        1 => (1u32..40_000).prop_map(Op::Advance),
        2 => Just(Op::Yield),
    ]
}

fn script() -> impl Strategy<Value = Script> {
    prop_oneof![
        Just(Script::Answer),
        Just(Script::FailBeforeUsage),
        Just(Script::FailAfterUsage),
        Just(Script::Slow),
    ]
}

fn items(script: Script) -> Vec<Item> {
    let answer = vec![
        ev(ModelEvent::Reference("msg".into())),
        ev(ModelEvent::TextDelta("ok".into())),
        ev(ModelEvent::Stop(StopReason::EndTurn)),
    ];
    let fail = || Item::Fail(ProviderError::Transport("reset".into()));
    match script {
        Script::Answer => [answer, vec![ev(ModelEvent::Usage(usage(50, 5)))]].concat(),
        Script::FailBeforeUsage => [answer, vec![fail()]].concat(),
        Script::FailAfterUsage => vec![
            ev(ModelEvent::Reference("msg".into())),
            ev(ModelEvent::Usage(usage(50, 5))),
            fail(),
        ],
        Script::Slow => [
            vec![Item::Pause(Duration::from_millis(15))],
            answer,
            vec![
                Item::Pause(Duration::from_millis(15)),
                ev(ModelEvent::Usage(usage(50, 5))),
            ],
        ]
        .concat(),
    }
}

fn key(k: u8) -> String {
    format!("key-{k}")
}

fn run_of(h: &StepHarness, k: u8) -> herma_governed::StepRun {
    let mut run = h.run(&key(k), None);
    let text = key(k);
    run.load_request = Box::new(move || {
        Box::pin(async move {
            Ok(LoadedRequest {
                system: None,
                messages: vec![Msg::user(text)],
                tools: vec![extract_tool()],
                tool_choice: None,
            })
        })
    });
    run
}

async fn check(backend: Backend, ops: Vec<Op>, scripts: Vec<Script>) {
    let h = step_harness(backend, Protocol::Messages, FailWhen::Never, |c| {
        c.run_timeout = Duration::from_secs(5);
    })
    .await;
    for s in scripts {
        h.client.queue(items(s));
    }
    let ports = h.flaky.ports();
    let lease = Duration::from_secs(1);
    let mut runs = Vec::new();
    for op in ops {
        match op {
            Op::Run(k) => {
                let runner = h.runner.clone();
                let run = run_of(&h, k);
                runs.push(tokio::spawn(async move { runner.run(run).await }));
            }
            Op::Read(k) => {
                h.runner.read(&h.scope, "root-1", &key(k)).await.unwrap();
            }
            Op::Recover(k) => {
                h.runner
                    .recover(&h.scope, "root-1", &key(k), lease)
                    .await
                    .unwrap();
            }
            Op::ReconcileExpired => {
                h.runner.reconcile_expired(&h.scope, None).await.unwrap();
            }
            Op::ReconcileUsage => {
                h.runner
                    .reconcile_usage(&h.scope, "root-1", UsageQuery::default(), None)
                    .await
                    .unwrap();
            }
            Op::Advance(ms) => h.clock.advance_millis(i64::from(ms)),
            Op::Yield => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
    for run in runs {
        // Every run ends (a known state, a conflict-free replay, or a deadline refusal).
        let _ = run.await.unwrap();
    }
    h.clock.advance_millis(3_600_000);
    h.runner.reconcile_expired(&h.scope, None).await.unwrap();
    for k in 0..KEYS {
        h.runner
            .recover(&h.scope, "root-1", &key(k), lease)
            .await
            .unwrap();
    }
    for k in 0..KEYS {
        let key = key(k);
        assert!(h.client.dispatches_of(&key) <= 1, "{key} dispatched twice");
        let charge = ports.settlement.charge(&h.scope, &key).await.unwrap();
        let record = ports.executions.execution(&h.scope, &key).await.unwrap();
        if let Some(charge) = charge {
            let receipt = ports
                .accounting
                .root_receipt(&h.scope, "root-1", &key)
                .await
                .unwrap();
            assert_eq!(
                receipt.map(|r| r.amount_micros),
                Some(charge.amount_micros),
                "{key}: a settlement without its root receipt"
            );
            assert_eq!(record.unwrap().status, ExecutionStatus::Completed, "{key}");
        } else if h.client.dispatches_of(&key) == 0 {
            assert!(
                record.is_none_or(|r| r.status == ExecutionStatus::NotDispatched),
                "{key}: never dispatched"
            );
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn interleavings_never_dispatch_twice_or_settle_without_a_receipt_in_memory(
        ops in prop::collection::vec(op(), 1..30),
        scripts in prop::collection::vec(script(), 12),
    ) {
        runtime().block_on(check(Backend::Memory, ops, scripts));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn interleavings_never_dispatch_twice_or_settle_without_a_receipt_on_sqlite(
        ops in prop::collection::vec(op(), 1..30),
        scripts in prop::collection::vec(script(), 12),
    ) {
        runtime().block_on(check(Backend::Sqlite, ops, scripts));
    }

    #[test]
    fn interleavings_never_dispatch_twice_or_settle_without_a_receipt_on_postgres(
        ops in prop::collection::vec(op(), 1..30),
        scripts in prop::collection::vec(script(), 12),
    ) {
        runtime().block_on(check(Backend::Postgres, ops, scripts));
    }
}
