//! A run: phase A (claim, result slot, audit, the policy's refusal, the block-cap preflight,
//! the lazy loader, the provider's matrix) and phase B up to the drained stream (the dispatch
//! fence, the one dispatch, the drain with its usage deposits), with the guards that fence
//! the claim of an abandoned phase A and move an unfinished phase B into its own task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use herma_core::call::{CallTag, ModelEvent, ModelRequest, Usage};
use herma_providers::single::ProviderError;
use herma_store::StoreError;
use herma_store::governed::{
    Claim, ExecutionRecord, ExecutionStatus, NotDispatchedCause, ResultSlot,
};
use herma_store::runtime::sleep_until;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Engine, LoadFailure, Mode, Plan, RequestFuture, Swap, to_meta};
use crate::collector::{Collector, CollectorLimits, Next};
use crate::types::{
    CallMeta, CallView, CapMode, GovernedError, Interruption, JournalEntry, RunOutcome,
};

/// The first identity field that differs between a stored call and a new one.
fn identity_conflict(stored: &CallMeta, new: &CallMeta) -> Option<&'static str> {
    let (a, b) = (&stored.identity, &new.identity);
    [
        ("session_id", a.session_id != b.session_id),
        ("intent", a.intent != b.intent),
        ("input_revision", a.input_revision != b.input_revision),
        ("policy_version", a.policy_version != b.policy_version),
        ("price_version", a.price_version != b.price_version),
        (
            "output_contract_version",
            a.output_contract_version != b.output_contract_version,
        ),
        ("root_key", a.root_key != b.root_key),
        ("client", a.client != b.client),
        ("tool_choice", a.tool_choice != b.tool_choice),
        ("controls", stored.controls != new.controls),
    ]
    .into_iter()
    .find_map(|(field, differs)| differs.then_some(field))
}

type PhaseB = Pin<Box<dyn Future<Output = Result<RunOutcome, GovernedError>> + Send>>;

/// Holds an unfinished phase B; dropping it moves the rest into its own task.
struct Detach {
    phase_b: Option<PhaseB>,
    engine: Arc<Engine>,
    state: Arc<RunState>,
    operation_key: String,
}

impl Drop for Detach {
    fn drop(&mut self) {
        let Some(phase_b) = self.phase_b.take() else {
            return;
        };
        // A run dropped before its dispatch started must not dispatch afterwards.
        let _ = self.state.phase.compare_exchange(
            RUNNING,
            INTERRUPTED,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        let engine = self.engine.clone();
        let key = std::mem::take(&mut self.operation_key);
        let runtime = engine.runtime.clone();
        runtime.spawn(Box::pin(async move {
            if let Err(err) = phase_b.await
                && !matches!(err, GovernedError::Interrupted { .. })
            {
                engine.background(&key, "drain", err.to_string());
            }
        }));
    }
}

/// Fences the claim a run inserted when its phase A did not finish (interrupted, or the run's
/// future dropped), in the background: the run has already returned. A compare-and-set from
/// the claimed version: another run's claim, or one that moved on, is never touched.
struct AbandonOnDrop {
    engine: Arc<Engine>,
    state: Arc<RunState>,
    armed: bool,
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.state.phase.store(INTERRUPTED, Ordering::SeqCst);
        let claimed = self.state.claimed.lock().ok().and_then(|c| c.clone());
        let Some(record) = claimed else {
            return;
        };
        let engine = self.engine.clone();
        let runtime = engine.runtime.clone();
        runtime.spawn(Box::pin(async move {
            let _ = engine
                .not_dispatched(&record, Some(NotDispatchedCause::Aborted), None)
                .await;
        }));
    }
}

/// Who decided first: phase B starting the dispatch, or the run reporting an interruption.
const RUNNING: u8 = 0;
const DISPATCHING: u8 = 1;
const INTERRUPTED: u8 = 2;

/// What a run, its two phases and its drop guards share.
struct RunState {
    /// The claim this run inserted (only that one may be fenced as aborted).
    claimed: std::sync::Mutex<Option<ExecutionRecord>>,
    phase: std::sync::atomic::AtomicU8,
}

/// How phase A ended: a replay of the key, a call finished without dispatch, or a request
/// ready for phase B.
enum PhaseA {
    Replay(CallView),
    Done(RunOutcome),
    Ready {
        record: ExecutionRecord,
        request: ModelRequest,
    },
}

/// A run's outcome that is its view alone (the refusal, if any, read from the journal).
fn finished(view: CallView) -> RunOutcome {
    let refusal = view.record.as_ref().and_then(|r| r.meta.refusal.clone());
    RunOutcome {
        view,
        replayed: false,
        invalid_reason: None,
        reasoning_loop: false,
        warnings: Vec::new(),
        refusal,
    }
}

impl Engine {
    /// Runs one call to a known state, or reports the bound that interrupted it.
    pub(crate) async fn execute(
        self: &Arc<Self>,
        plan: Plan,
        load: RequestFuture,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, GovernedError> {
        let plan = Arc::new(plan);
        let store_failed = Arc::new(AtomicBool::new(false));
        let state = Arc::new(RunState {
            claimed: std::sync::Mutex::new(None),
            phase: std::sync::atomic::AtomicU8::new(RUNNING),
        });
        let bounds = {
            let cancel = cancel.clone();
            let deadline = sleep_until(&*self.runtime, plan.deadline);
            let timeout = plan.timeout.map(|t| sleep_until(&*self.runtime, t));
            async move {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Interruption::Cancelled,
                    _ = deadline => Interruption::Deadline,
                    _ = async {
                        match timeout {
                            Some(t) => t.await,
                            None => std::future::pending().await,
                        }
                    } => Interruption::Timeout,
                }
            }
        };
        tokio::pin!(bounds);

        if self.runtime.monotonic() >= plan.deadline {
            // Past its deadline a new call is refused; a replay still answers.
            if let Some(existing) = self
                .ports
                .executions
                .execution(&plan.scope, &plan.operation_key)
                .await?
            {
                let stored = JournalEntry::from_record(&existing)?;
                if let Some(field) = identity_conflict(&stored.meta, &plan.meta) {
                    return Err(GovernedError::Conflict {
                        field: field.to_owned(),
                    });
                }
                return Ok(RunOutcome {
                    replayed: true,
                    ..finished(self.view_of(&existing, plan.root_key()).await?)
                });
            }
            return Err(GovernedError::Interrupted {
                kind: Interruption::Deadline,
                store_failed: false,
            });
        }
        // Interrupted or dropped before phase A finished: the claim it made is fenced.
        let mut guard = AbandonOnDrop {
            engine: self.clone(),
            state: state.clone(),
            armed: true,
        };
        let phase_a = self.phase_a(&plan, load, &state);
        let ready = tokio::select! {
            // A run already cancelled (or past a bound) never starts.
            biased;
            kind = &mut bounds => {
                return Err(GovernedError::Interrupted { kind, store_failed: false });
            }
            result = phase_a => {
                guard.armed = false;
                result?
            }
        };
        let (record, request) = match ready {
            PhaseA::Replay(view) => {
                return Ok(RunOutcome {
                    replayed: true,
                    ..finished(view)
                });
            }
            PhaseA::Done(outcome) => return Ok(outcome),
            PhaseA::Ready { record, request } => (record, request),
        };

        // Phase B is polled here (no task hand-off on the common path); if the run returns
        // early — interrupted, or its future dropped by the host — the `Detach` guard moves
        // the rest of phase B into its own task, so a dispatched stream is always drained.
        let engine = self.clone();
        let task_plan = plan.clone();
        let flag = store_failed.clone();
        let task_cancel = cancel.clone();
        let task_state = state.clone();
        let mut detach = Detach {
            phase_b: Some(Box::pin(async move {
                engine
                    .phase_b(&task_plan, record, request, task_cancel, &flag, &task_state)
                    .await
            })),
            engine: self.clone(),
            state: state.clone(),
            operation_key: plan.operation_key.clone(),
        };
        let finished = tokio::select! {
            result = std::future::poll_fn(|cx| match detach.phase_b.as_mut() {
                Some(phase_b) => phase_b.as_mut().poll(cx),
                None => std::task::Poll::Pending,
            }) => Ok(result),
            kind = &mut bounds => Err(kind),
        };
        match finished {
            Ok(result) => {
                detach.phase_b = None;
                result
            }
            Err(kind) => {
                // Before the dispatch started, this stops it (phase B fences the claim as
                // aborted); after, the call is in flight and phase B drains it.
                let _ = state.phase.compare_exchange(
                    RUNNING,
                    INTERRUPTED,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                Err(GovernedError::Interrupted {
                    kind,
                    store_failed: store_failed.load(Ordering::SeqCst),
                })
            }
        }
    }

    /// Phase A: the claim (or the replay of an existing one), the result slot, the audit, the
    /// policy's refusal, the block caps, the loader and the provider's matrix.
    async fn phase_a(
        &self,
        plan: &Plan,
        load: RequestFuture,
        state: &RunState,
    ) -> Result<PhaseA, GovernedError> {
        let now = self.now();
        let record = ExecutionRecord {
            scope: plan.scope.clone(),
            operation_key: plan.operation_key.clone(),
            version: 0,
            status: ExecutionStatus::Prepared,
            cause: None,
            deadline_at: plan.deadline_at,
            lease_until: None,
            fence: 0,
            meta: to_meta(&plan.meta)?,
            created_at: now,
            updated_at: now,
        };
        let record = match self.ports.executions.claim_execution(&record).await? {
            Claim::Claimed(record) => {
                if let Ok(mut claimed) = state.claimed.lock() {
                    *claimed = Some(record.clone());
                }
                record
            }
            Claim::Existing(existing) => {
                let stored = JournalEntry::from_record(&existing)?;
                if let Some(field) = identity_conflict(&stored.meta, &plan.meta) {
                    return Err(GovernedError::Conflict {
                        field: field.to_owned(),
                    });
                }
                let view = self.view_of(&existing, plan.root_key()).await?;
                return Ok(PhaseA::Replay(view));
            }
        };

        // The result slot, before any input exists.
        let slot = ResultSlot {
            scope: plan.scope.clone(),
            operation_key: plan.operation_key.clone(),
            expires_at: now.plus_millis(self.retention_ms),
            envelope: None,
            erased_at: None,
            created_at: now,
        };
        if let Err(err) = self.ports.results.reserve_result(&slot).await {
            let _ = self
                .not_dispatched(&record, Some(NotDispatchedCause::Store), None)
                .await;
            return Err(err.into());
        }
        let audit = self
            .audit(
                plan,
                "governed.claimed",
                json!({
                    "call_id": plan.meta.call_id,
                    "root_key": plan.meta.identity.root_key,
                    "intent": plan.meta.identity.intent,
                    "rationale": plan.meta.rationale,
                    "policy_version": plan.meta.identity.policy_version,
                }),
            )
            .await;
        if audit.is_err() {
            let view = self
                .not_dispatched(&record, Some(NotDispatchedCause::Audit), None)
                .await?;
            return Ok(PhaseA::Done(finished(view)));
        }

        if let Some(refusal) = plan.refusal.clone() {
            let view = self
                .not_dispatched(&record, Some(NotDispatchedCause::Invalid), Some(refusal))
                .await?;
            return Ok(PhaseA::Done(finished(view)));
        }
        let preflight = match self.preflight(plan).await {
            Ok(preflight) => preflight,
            Err(err) => {
                let _ = self
                    .not_dispatched(&record, Some(NotDispatchedCause::Store), None)
                    .await;
                return Err(err.into());
            }
        };
        if let Some(refusal) = preflight {
            let view = self
                .not_dispatched(&record, Some(NotDispatchedCause::Invalid), Some(refusal))
                .await?;
            return Ok(PhaseA::Done(finished(view)));
        }

        let request = match load.await {
            Ok(request) => request,
            Err(failure) => {
                let cause = match failure {
                    LoadFailure::Input => NotDispatchedCause::Input,
                    LoadFailure::Invalid => NotDispatchedCause::Invalid,
                };
                let view = self.not_dispatched(&record, Some(cause), None).await?;
                return Ok(PhaseA::Done(finished(view)));
            }
        };
        // The provider's matrix; a tool choice against the actual tools was checked when the
        // step runner's loader produced the request.
        if let Some(field) = plan.client.validate(&request).err().map(|u| u.field) {
            let view = self
                .not_dispatched(
                    &record,
                    Some(NotDispatchedCause::Invalid),
                    Some(format!("unsupported:{field}")),
                )
                .await?;
            return Ok(PhaseA::Done(finished(view)));
        }
        Ok(PhaseA::Ready { record, request })
    }

    /// Block caps before the call: `Some(refusal)` when a cap is reached.
    async fn preflight(&self, plan: &Plan) -> Result<Option<String>, StoreError> {
        let caps = plan.caps;
        if caps.session.is_some_and(|c| c.mode == CapMode::Block)
            || caps.day.is_some_and(|c| c.mode == CapMode::Block)
        {
            let spend = self
                .ports
                .spend
                .peek(&plan.scope, &plan.meta.identity.session_id, &plan.meta.day)
                .await?;
            for (name, cap, spent) in [
                ("session", caps.session, spend.session_micros),
                ("day", caps.day, spend.day_micros),
            ] {
                if let Some(cap) = cap
                    && cap.mode == CapMode::Block
                    && spent >= cap.limit_micros
                {
                    return Ok(Some(format!("cap:{name}")));
                }
            }
        }
        if let (Some(cap), Some(root_key)) = (caps.root, plan.root_key())
            && cap.mode == CapMode::Block
        {
            let root = self.ports.trees.root(&plan.scope, root_key).await?;
            if root.is_some_and(|r| r.settled_micros >= cap.limit_micros) {
                return Ok(Some("cap:root".to_owned()));
            }
        }
        Ok(None)
    }

    /// Phase B up to the drained stream: the dispatch fence, the one dispatch and the drain
    /// (usage deposited as it arrives); `finalize` settles and completes what was collected.
    async fn phase_b(
        &self,
        plan: &Plan,
        record: ExecutionRecord,
        request: ModelRequest,
        cancel: CancellationToken,
        store_failed: &AtomicBool,
        state: &RunState,
    ) -> Result<RunOutcome, GovernedError> {
        let bound_passed = || {
            let now = self.runtime.monotonic();
            if cancel.is_cancelled() {
                Some(Interruption::Cancelled)
            } else if plan.timeout.is_some_and(|t| now >= t) {
                Some(Interruption::Timeout)
            } else if now >= plan.deadline {
                Some(Interruption::Deadline)
            } else {
                None
            }
        };
        if state.phase.load(Ordering::SeqCst) == INTERRUPTED || bound_passed().is_some() {
            self.not_dispatched(&record, Some(NotDispatchedCause::Aborted), None)
                .await?;
            return Err(GovernedError::Interrupted {
                kind: bound_passed().unwrap_or(Interruption::Cancelled),
                store_failed: false,
            });
        }
        // The dispatch fence: only the writer of `dispatching` sends the request.
        let mut fenced = record.clone();
        fenced.status = ExecutionStatus::Dispatching;
        fenced.updated_at = self.now();
        let record = match self.swap(&fenced, record.version).await {
            Ok(Swap::Won(record)) => record,
            Ok(Swap::Lost(current)) => {
                return Ok(finished(self.view_of(&current, plan.root_key()).await?));
            }
            Err(err) => {
                store_failed.store(true, Ordering::SeqCst);
                let _ = self
                    .not_dispatched(&record, Some(NotDispatchedCause::Store), None)
                    .await;
                return Err(err);
            }
        };
        // The decision, against the run's report of an interruption: whoever swaps first wins.
        // Losing here (or a bound passing during the write) gives the fence back unsent.
        let interrupted = state
            .phase
            .compare_exchange(RUNNING, DISPATCHING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err();
        if interrupted || bound_passed().is_some() {
            self.not_dispatched(&record, Some(NotDispatchedCause::Aborted), None)
                .await?;
            return Err(GovernedError::Interrupted {
                kind: bound_passed().unwrap_or(Interruption::Cancelled),
                store_failed: false,
            });
        }

        let tools = match plan.mode {
            Mode::Text { .. } => None,
            Mode::Step { .. } => Some(request.tools.iter().map(|t| t.name.clone()).collect()),
        };
        let mut collector = Collector::new(CollectorLimits {
            tools,
            provider_blocks: matches!(plan.mode, Mode::Step { .. }),
            max_output_chars: plan.max_output_chars,
            max_consecutive_reasoning: match plan.mode {
                Mode::Step {
                    max_consecutive_reasoning,
                } => max_consecutive_reasoning,
                Mode::Text { .. } => None,
            },
        });
        let mut stream_error: Option<ProviderError> = None;
        let mut usage_reports = 0u32;
        let drain_until = self.runtime.monotonic() + self.drain_limit;
        let mut request = request;
        request.call = Some(CallTag {
            call_id: plan.meta.call_id.clone(),
            attempt: 1,
        });
        let dispatched = tokio::select! {
            dispatched = plan.client.dispatch(&request) => dispatched,
            _ = sleep_until(&*self.runtime, drain_until) => {
                Err(ProviderError::Transport("the drain limit passed before the stream began".into()))
            }
        };
        match dispatched {
            Err(err) => stream_error = Some(err),
            Ok(mut stream) => loop {
                let next = tokio::select! {
                    next = stream.next() => next,
                    _ = sleep_until(&*self.runtime, drain_until) => {
                        stream_error = Some(ProviderError::Transport("the drain limit passed".into()));
                        break;
                    }
                };
                match next {
                    None => break,
                    Some(Err(err)) => {
                        stream_error = Some(err);
                        break;
                    }
                    Some(Ok(event)) => {
                        if let ModelEvent::Usage(usage) = &event
                            && let Err(err) = {
                                usage_reports += 1;
                                self.deposit(plan, usage, usage_reports).await
                            }
                        {
                            store_failed.store(true, Ordering::SeqCst);
                            self.background(&plan.operation_key, "inbox", err.to_string());
                        }
                        if collector.feed(event) == Next::Cut {
                            break;
                        }
                    }
                }
            },
        }
        let collected = collector.finish();
        let result = self.finalize(plan, record, collected, stream_error).await;
        if result.is_err() {
            store_failed.store(true, Ordering::SeqCst);
        }
        result
    }

    /// Deposits one usage report. Each report is its own observation (a second, different
    /// report makes the evidence conflicting, which recovery and reconciliation refuse).
    async fn deposit(&self, plan: &Plan, usage: &Usage, n: u32) -> Result<(), StoreError> {
        self.ports
            .inbox
            .deposit_usage(&herma_store::governed::UsageObservation {
                scope: plan.scope.clone(),
                operation_key: plan.operation_key.clone(),
                observation_id: if n == 1 {
                    plan.meta.call_id.clone()
                } else {
                    format!("{}#{n}", plan.meta.call_id)
                },
                exact: true,
                usage: json!(usage),
                observed_at: self.now(),
            })
            .await
            .map(|_| ())
    }
}
