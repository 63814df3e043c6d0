//! Recovery after a crash between every pair of persisted steps: the process "dies" before
//! its n-th store write (every write from then on fails), a restarted runner fences and
//! recovers, and a replay follows. No key is dispatched twice, and durable usage evidence
//! always ends settled (with its root receipt).

use std::time::Duration;

use herma_core::CallerScope;
use herma_core::time::Clock;
use herma_core::wire::Protocol;
use herma_governed::ports::{ExecutionStatus, GovernedPorts};
use herma_governed::{GovernedStepRunner, SingleCallRunner, ViewState};

use crate::on_all_backends;
use crate::step::{StepHarness, step_config, tool_answer};
use crate::support::*;
use crate::text::{config, question, text_run};

/// What must hold for `key` once recovery ran.
async fn check_invariants(
    ports: &GovernedPorts,
    scope: &CallerScope,
    key: &str,
    root: Option<&str>,
    dispatches: usize,
    step: usize,
) {
    assert!(
        dispatches <= 1,
        "crash at write {step}: {dispatches} dispatches"
    );
    let record = ports.executions.execution(scope, key).await.unwrap();
    let charge = ports.settlement.charge(scope, key).await.unwrap();
    let evidence = ports.inbox.usage_for(scope, key).await.unwrap();
    if dispatches == 0 {
        assert!(
            charge.is_none(),
            "crash at write {step}: a charge without a dispatch"
        );
        assert!(
            record
                .as_ref()
                .is_none_or(|r| r.status == ExecutionStatus::NotDispatched),
            "crash at write {step}: {record:?}"
        );
        return;
    }
    let record = record.unwrap();
    if !evidence.is_empty() || charge.is_some() {
        assert_eq!(
            record.status,
            ExecutionStatus::Completed,
            "crash at write {step}: durable evidence must end settled"
        );
    }
    if record.status == ExecutionStatus::Completed {
        let charge =
            charge.unwrap_or_else(|| panic!("crash at write {step}: completed, no charge"));
        if let Some(root) = root {
            let receipt = ports
                .accounting
                .root_receipt(scope, root, key)
                .await
                .unwrap();
            assert_eq!(
                receipt.map(|r| r.amount_micros),
                Some(charge.amount_micros),
                "crash at write {step}: settlement without its root receipt"
            );
        }
    } else {
        assert_eq!(
            record.status,
            ExecutionStatus::ReconciliationRequired,
            "crash at write {step}"
        );
    }
}

async fn text_calls_recover_from_a_crash_before_every_write(backend: Backend) {
    let base = ports(backend).await;
    let clock = clock();
    let scope = scope();
    // How many writes a whole call makes.
    let probe = Flaky::new(base.clone(), FailWhen::Never);
    let client = ScriptedClient::anthropic(text_answer("hi", usage(100, 10)));
    let runner =
        SingleCallRunner::new(config(probe.ports(), client.clone(), clock.clone())).unwrap();
    runner
        .run(text_run(&scope, "probe", question()))
        .await
        .unwrap();
    let total = probe.writes();
    assert_eq!(
        total, 9,
        "claim, reserve, audit, dispatch fence, usage, settle, envelope, complete, audit"
    );

    for step in 1..=total {
        let key = format!("crash-{step}");
        let client = ScriptedClient::anthropic(text_answer("hi", usage(100, 10)));
        let crashing = Flaky::new(base.clone(), FailWhen::FromWrite(step));
        let runner =
            SingleCallRunner::new(config(crashing.ports(), client.clone(), clock.clone())).unwrap();
        let _ = runner.run(text_run(&scope, &key, question())).await;

        // The restarted process: same stores, no failures, after the deadline.
        clock.advance_millis(31_000);
        let healthy =
            SingleCallRunner::new(config(base.clone(), client.clone(), clock.clone())).unwrap();
        healthy.reconcile_expired(&scope, None).await.unwrap();
        healthy
            .recover(&scope, &key, Duration::from_secs(5))
            .await
            .unwrap();
        check_invariants(&base, &scope, &key, None, client.dispatches(), step).await;
        // A replay never dispatches a recorded call again.
        let replay = healthy
            .run(text_run(&scope, &key, question()))
            .await
            .unwrap();
        assert!(step == 1 || replay.replayed, "crash at write {step}");
        assert!(client.dispatches() <= 1, "crash at write {step}");
        if step == 1 {
            assert_eq!(
                replay.view.state,
                ViewState::Completed,
                "nothing had been claimed"
            );
        }
    }
}

async fn step_calls_recover_from_a_crash_before_every_write(backend: Backend) {
    let base = ports(backend).await;
    let probe = step_probe(base.clone()).await;
    let total = probe.flaky.writes();
    assert_eq!(
        total, 11,
        "root slot, claim, reserve, audit, dispatch fence, usage, settle, root receipt, envelope, complete, audit"
    );
    for step in 1..=total {
        let client = ScriptedClient::new(Protocol::Messages, tool_answer());
        let crashing = Flaky::new(base.clone(), FailWhen::FromWrite(step));
        let h = StepHarness {
            runner: GovernedStepRunner::new(step_config(
                crashing.ports(),
                client.clone(),
                probe.clock.clone(),
            ))
            .unwrap(),
            client: client.clone(),
            flaky: crashing,
            clock: probe.clock.clone(),
            scope: probe.scope.clone(),
        };
        let key = format!("crash-{step}");
        let _ = h.runner.run(h.run(&key, None)).await;

        probe.clock.advance_millis(31_000);
        let healthy = GovernedStepRunner::new(step_config(
            base.clone(),
            client.clone(),
            probe.clock.clone(),
        ))
        .unwrap();
        healthy.reconcile_expired(&probe.scope, None).await.unwrap();
        healthy
            .recover(&probe.scope, "root-1", &key, Duration::from_secs(5))
            .await
            .unwrap();
        check_invariants(
            &base,
            &probe.scope,
            &key,
            Some("root-1"),
            client.dispatches(),
            step,
        )
        .await;
        let healthy_h = StepHarness {
            runner: healthy,
            client: client.clone(),
            flaky: Flaky::new(base.clone(), FailWhen::Never),
            clock: probe.clock.clone(),
            scope: probe.scope.clone(),
        };
        let mut again = healthy_h.run(&key, None);
        // The root's original deadline has passed: only a replay answers.
        again.call.deadline_at = probe.clock.now().plus_millis(30_000);
        let _ = healthy_h.runner.run(again).await;
        assert!(client.dispatches() <= 1, "crash at write {step}");
    }
}

/// One successful step call on `base` through a counting wrapper (the root is opened
/// directly on the stores, uncounted).
async fn step_probe(base: GovernedPorts) -> StepHarness {
    let client = ScriptedClient::new(Protocol::Messages, tool_answer());
    let flaky = Flaky::new(base, FailWhen::Never);
    let clock = clock();
    let h = StepHarness {
        runner: GovernedStepRunner::new(step_config(flaky.ports(), client.clone(), clock.clone()))
            .unwrap(),
        client,
        flaky,
        clock,
        scope: scope(),
    };
    h.open_root("root-1").await;
    h.runner.run(h.run("probe", None)).await.unwrap();
    h
}

on_all_backends!(
    text_calls_recover_from_a_crash_before_every_write,
    step_calls_recover_from_a_crash_before_every_write,
);
