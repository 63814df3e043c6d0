//! The journaled call, shared by the three runners.
//!
//! A run is two phases. Phase A (claim, result reservation, audit, the block-cap preflight,
//! loading and validating the request) is interruptible: the caller's cancellation, the
//! deadline or the runner's timeout drop it and the claim is fenced as `not_dispatched`
//! (`aborted`) in the background. Phase B runs in its own task so no interruption can split
//! it: it takes the dispatch fence (the compare-and-set `prepared → dispatching`; only its
//! winner dispatches), sends the request once, drains the stream to its end (usage is
//! deposited in the inbox as soon as it arrives), settles, writes the root receipt, stores the
//! envelope and completes the journal. An interrupted run returns at once while phase B goes on
//! draining for late evidence.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use herma_core::call::{CallTag, ModelEvent, ModelRequest, StopReason, Usage};
use herma_core::time::Clock;
use herma_core::wire::Protocol;
use herma_core::{CallerScope, Timestamp};
use herma_providers::single::{ModelClient, ProviderError};
use herma_store::StoreError;
use herma_store::governed::{
    AuditEvent, Claim, ExecutionRecord, ExecutionStatus, GovernedCharge, GovernedPorts,
    NotDispatchedCause, ResultSlot, RootReceipt,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::collector::{Collected, Collector, CollectorLimits, InvalidReason, Next};
use crate::types::{
    BackgroundError, BackgroundErrorHandler, CallMeta, CallView, CapMode, CapWarning, Caps,
    DEFAULT_PAGE, Envelope, GovernedError, Interruption, JournalEntry, MAX_PAGE, Outcome, Output,
    ResultMeta, RunOutcome, UsageQuery, UsageReconciliation, ViewState,
};

/// What the host's loader produced.
pub(crate) enum LoadFailure {
    /// The host's loader itself failed.
    Input,
    /// The loaded request is refused as loaded.
    Invalid,
}

pub(crate) type RequestFuture =
    Pin<Box<dyn Future<Output = Result<ModelRequest, LoadFailure>> + Send>>;

/// A JSON output contract's synchronous validator.
pub type Validator = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

pub(crate) enum Mode {
    Text {
        validator: Option<Validator>,
    },
    Step {
        max_consecutive_reasoning: Option<u32>,
    },
}

/// Everything one run needs, fixed before phase A.
pub(crate) struct Plan {
    pub scope: CallerScope,
    pub operation_key: String,
    pub meta: CallMeta,
    pub deadline_at: Timestamp,
    /// The deadline on the runtime clock.
    pub deadline: Instant,
    /// The runner's own timeout (step runner), if any.
    pub timeout: Option<Instant>,
    pub caps: Caps,
    pub max_output_chars: usize,
    pub mode: Mode,
    /// The policy refused the call before the claim (`policy:<name>`).
    pub refusal: Option<String>,
    /// The client this call is validated against and dispatched through.
    pub client: Arc<dyn ModelClient>,
}

impl Plan {
    fn root_key(&self) -> Option<&str> {
        self.meta.identity.root_key.as_deref()
    }
}

pub(crate) struct Engine {
    pub ports: GovernedPorts,
    pub clock: Arc<dyn Clock>,
    pub retention_ms: i64,
    pub on_background_error: BackgroundErrorHandler,
    /// How long phase B drains a stream at most.
    pub drain_limit: Duration,
}

/// The UTC day of an instant, `YYYY-MM-DD`.
pub(crate) fn day_of(t: Timestamp) -> String {
    t.to_rfc3339().chars().take(10).collect()
}

/// A call id: stable per (scope, key), never embedding the key.
pub(crate) fn call_id(scope: &CallerScope, key: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"herma-governed-call\0");
    h.update((scope.as_str().len() as u64).to_be_bytes());
    h.update(scope.as_str());
    h.update(key.as_bytes());
    format!("call_{}", &hex::encode(h.finalize())[..24])
}

/// Checks a host-supplied identifier: non-empty, bounded, no control characters.
pub(crate) fn check_id(field: &str, value: &str, max: usize) -> Result<(), GovernedError> {
    if value.is_empty() {
        return Err(GovernedError::input(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(GovernedError::input(
            field,
            format!("must be at most {max} bytes"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(GovernedError::input(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// Host keys may not use the structured runner's reserved identifier prefix.
pub(crate) fn check_host_key(field: &str, value: &str) -> Result<(), GovernedError> {
    check_id(field, value, crate::text::MAX_KEY)?;
    if value.starts_with("alma-structured-v1:") {
        return Err(GovernedError::input(
            field,
            "the prefix `alma-structured-v1:` is reserved for the structured runner",
        ));
    }
    Ok(())
}

/// The longest deadline or drain limit a runner accepts.
pub(crate) const MAX_BOUND: Duration = Duration::from_secs(3600);

pub(crate) fn check_bound(field: &str, value: Duration) -> Result<(), GovernedError> {
    if value.is_zero() || value > MAX_BOUND {
        return Err(GovernedError::config(
            field,
            "must be positive and at most one hour",
        ));
    }
    Ok(())
}

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

fn to_meta(meta: &CallMeta) -> Result<Value, GovernedError> {
    serde_json::to_value(meta)
        .map_err(|e| GovernedError::Store(StoreError::Backend(format!("encoding meta: {e}"))))
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
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let engine = self.engine.clone();
        let key = std::mem::take(&mut self.operation_key);
        runtime.spawn(async move {
            if let Err(err) = phase_b.await
                && !matches!(err, GovernedError::Interrupted { .. })
            {
                engine.background(&key, "drain", err.to_string());
            }
        });
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
        let (Some(record), Ok(runtime)) = (claimed, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let engine = self.engine.clone();
        runtime.spawn(async move {
            let _ = engine
                .not_dispatched(&record, Some(NotDispatchedCause::Aborted), None)
                .await;
        });
    }
}

/// Who decided first: phase B starting the dispatch, or the run reporting an interruption.
const RUNNING: u8 = 0;
const DISPATCHING: u8 = 1;
const INTERRUPTED: u8 = 2;

/// What phase A and the interruption handling share.
struct RunState {
    /// The claim this run inserted (only that one may be fenced as aborted).
    claimed: std::sync::Mutex<Option<ExecutionRecord>>,
    phase: std::sync::atomic::AtomicU8,
}

/// How a journal compare-and-set ended.
enum Swap {
    Won(ExecutionRecord),
    Lost(ExecutionRecord),
}

enum PhaseA {
    Replay(CallView),
    Done(RunOutcome),
    Ready {
        record: ExecutionRecord,
        request: ModelRequest,
    },
}

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
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The journal row as it is now (it exists: the caller saw it).
    async fn current(
        &self,
        scope: &CallerScope,
        key: &str,
    ) -> Result<ExecutionRecord, GovernedError> {
        Ok(self
            .ports
            .executions
            .execution(scope, key)
            .await?
            .ok_or(StoreError::NotFound)?)
    }

    /// The journal's compare-and-set from `expected`: `Ok(Won(stored))`, or `Ok(Lost(current))`
    /// with the record as whoever moved it first left it.
    async fn swap(&self, next: &ExecutionRecord, expected: u64) -> Result<Swap, GovernedError> {
        match self.ports.executions.update_execution(next, expected).await {
            Ok(stored) => Ok(Swap::Won(stored)),
            Err(StoreError::VersionConflict { .. }) => Ok(Swap::Lost(
                self.current(&next.scope, &next.operation_key).await?,
            )),
            Err(err) => Err(err.into()),
        }
    }

    fn background(&self, key: &str, stage: &'static str, message: impl Into<String>) {
        (self.on_background_error)(&BackgroundError {
            operation_key: key.to_owned(),
            stage,
            message: message.into(),
        });
    }

    async fn audit(&self, plan: &Plan, kind: &str, detail: Value) -> Result<(), StoreError> {
        self.ports
            .audit
            .record(&AuditEvent {
                scope: plan.scope.clone(),
                operation_key: plan.operation_key.clone(),
                kind: kind.to_owned(),
                detail,
                at: self.now(),
            })
            .await
    }

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
            let deadline = plan.deadline;
            let timeout = plan.timeout;
            async move {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Interruption::Cancelled,
                    _ = tokio::time::sleep_until(deadline) => Interruption::Deadline,
                    _ = async {
                        match timeout {
                            Some(t) => tokio::time::sleep_until(t).await,
                            None => std::future::pending().await,
                        }
                    } => Interruption::Timeout,
                }
            }
        };
        tokio::pin!(bounds);

        if Instant::now() >= plan.deadline {
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

    /// Prepared → not_dispatched. A lost race (someone fenced first) reads what they wrote.
    async fn not_dispatched(
        &self,
        record: &ExecutionRecord,
        cause: Option<NotDispatchedCause>,
        refusal: Option<String>,
    ) -> Result<CallView, GovernedError> {
        let mut next = record.clone();
        next.status = ExecutionStatus::NotDispatched;
        next.cause = cause;
        next.updated_at = self.now();
        if let Some(refusal) = refusal
            && let Some(object) = next.meta.as_object_mut()
        {
            object.insert("refusal".into(), Value::String(refusal));
        }
        let root = JournalEntry::from_record(record)?.meta.identity.root_key;
        match self.swap(&next, record.version).await? {
            Swap::Won(stored) | Swap::Lost(stored) => self.view_of(&stored, root.as_deref()).await,
        }
    }

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
            let now = Instant::now();
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
        let drain_until = Instant::now() + self.drain_limit;
        let mut request = request;
        request.call = Some(CallTag {
            call_id: plan.meta.call_id.clone(),
            attempt: 1,
        });
        let dispatched = tokio::select! {
            dispatched = plan.client.dispatch(&request) => dispatched,
            _ = tokio::time::sleep_until(drain_until) => {
                Err(ProviderError::Transport("the drain limit passed before the stream began".into()))
            }
        };
        match dispatched {
            Err(err) => stream_error = Some(err),
            Ok(mut stream) => loop {
                let next = tokio::select! {
                    next = stream.next() => next,
                    _ = tokio::time::sleep_until(drain_until) => {
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

    async fn finalize(
        &self,
        plan: &Plan,
        record: ExecutionRecord,
        mut collected: Collected,
        stream_error: Option<ProviderError>,
    ) -> Result<RunOutcome, GovernedError> {
        let anthropic = plan.meta.provider == Protocol::Messages.provider_name();
        let context_proof = anthropic
            && collected.reference.is_some()
            && !collected.content
            && collected.stops == 1
            && collected.step.stop == Some(StopReason::ContextWindowExceeded)
            && stream_error.is_none()
            && !collected.loop_cut;
        let prestream_proof = collected.reference.is_some()
            && !collected.content
            && collected.stops == 0
            && collected.usage.is_none()
            && matches!(stream_error, Some(ProviderError::Rejected { .. }));

        // The text runner's JSON contract.
        let mut json_output = None;
        if let Mode::Text {
            validator: Some(validator),
        } = &plan.mode
            && collected.invalid.is_none()
            && stream_error.is_none()
            && collected.usage.is_some()
            && collected.step.stop != Some(StopReason::Refusal)
        {
            match serde_json::from_str::<Value>(&collected.step.text) {
                Ok(value) if validator(&value) => json_output = Some(value),
                _ => collected.invalid = Some(InvalidReason::TextMalformed),
            }
        }

        let priced = collected
            .usage
            .and_then(|usage| plan.meta.prices.cost_micros(&usage).map(|a| (usage, a)));
        let (outcome, amount, usage, refusal) = if context_proof {
            // The provider attested it read nothing it could answer: free by proof; the usage
            // it reported stays with the charge so the inbox evidence reconciles.
            (
                Outcome::Refused,
                0,
                collected.usage,
                Some("context_window_exceeded".to_owned()),
            )
        } else if prestream_proof {
            (Outcome::Unavailable, 0, None, None)
        } else if let Some((usage, amount)) = priced {
            let outcome = if collected.invalid.is_some() {
                Outcome::Invalid
            } else if stream_error.is_some() {
                Outcome::Unavailable
            } else if collected.step.stop == Some(StopReason::Refusal) {
                Outcome::Refused
            } else {
                Outcome::Success
            };
            let refusal = (outcome == Outcome::Refused).then(|| "model".to_owned());
            (outcome, amount, Some(usage), refusal)
        } else {
            // Dispatched, cost unknown (or unpriceable): an operator reconciles.
            let mut next = record.clone();
            next.status = ExecutionStatus::ReconciliationRequired;
            next.updated_at = self.now();
            let (Swap::Won(stored) | Swap::Lost(stored)) = self.swap(&next, record.version).await?;
            let _ = self
                .audit(
                    plan,
                    "governed.reconciliation_required",
                    json!({"call_id": plan.meta.call_id, "reference": collected.reference}),
                )
                .await;
            return Ok(RunOutcome {
                view: self.view_of(&stored, plan.root_key()).await?,
                replayed: false,
                invalid_reason: collected.invalid,
                reasoning_loop: collected.loop_cut,
                warnings: Vec::new(),
                refusal: None,
            });
        };

        let stop_reason = if prestream_proof {
            None
        } else {
            collected.step.stop.clone()
        };
        // Recovery may have fenced the call while it streamed: then it owns the accounting.
        let current = self.current(&plan.scope, &plan.operation_key).await?;
        if current.version != record.version {
            self.background(
                &plan.operation_key,
                "fenced",
                "recovery fenced the call while it streamed",
            );
            return Ok(RunOutcome {
                view: self.view_of(&current, plan.root_key()).await?,
                replayed: false,
                invalid_reason: collected.invalid,
                reasoning_loop: collected.loop_cut,
                warnings: Vec::new(),
                refusal: None,
            });
        }
        let charge = self
            .settle(plan, amount, usage, collected.reference.clone())
            .await?;
        // What stands is what was settled (recovery may have settled first).
        let amount = charge.amount_micros;
        let root_receipt = self.root_receipt(plan, amount).await?;

        // Caps after the call, inclusive of its settled cost.
        let mut warnings = Vec::new();
        let mut blocked = false;
        if outcome == Outcome::Success {
            for (name, cap, spent) in self.spent(plan).await? {
                if spent > cap.limit_micros {
                    match cap.mode {
                        CapMode::Block => blocked = true,
                        CapMode::Warn => warnings.push(CapWarning {
                            cap: name.to_owned(),
                            limit_micros: cap.limit_micros,
                            spent_micros: spent,
                        }),
                    }
                }
            }
        }
        let outcome = if blocked { Outcome::Blocked } else { outcome };
        let envelope = Envelope {
            outcome,
            stop_reason: stop_reason.clone(),
            text: (outcome == Outcome::Success && matches!(plan.mode, Mode::Text { .. }))
                .then(|| collected.step.text.clone()),
            json: if outcome == Outcome::Success {
                json_output
            } else {
                None
            },
            step: (outcome == Outcome::Success && matches!(plan.mode, Mode::Step { .. }))
                .then(|| collected.step.clone()),
            refusal: refusal.clone(),
        };
        let slot = self
            .ports
            .results
            .store_envelope(
                &plan.scope,
                &plan.operation_key,
                &serde_json::to_value(&envelope).map_err(|e| StoreError::Backend(e.to_string()))?,
            )
            .await?;

        let mut meta = plan.meta.clone();
        meta.refusal = refusal;
        let meta_refusal = meta.refusal.clone();
        meta.result = Some(ResultMeta {
            outcome,
            stop_reason,
            reference: collected.reference.clone(),
            amount_micros: amount,
            usage,
            warnings: warnings.clone(),
            recovered: false,
        });
        let mut next = record.clone();
        next.status = ExecutionStatus::Completed;
        next.meta = to_meta(&meta)?;
        next.updated_at = self.now();
        let completed = match self.swap(&next, record.version).await? {
            Swap::Won(stored) => stored,
            Swap::Lost(current) => {
                // Recovery fenced the call meanwhile; it owns the completion now.
                self.background(
                    &plan.operation_key,
                    "fenced",
                    "recovery fenced the call before it completed",
                );
                return Ok(RunOutcome {
                    view: self.view_of(&current, plan.root_key()).await?,
                    replayed: false,
                    invalid_reason: collected.invalid,
                    reasoning_loop: collected.loop_cut,
                    warnings,
                    refusal: None,
                });
            }
        };
        if let Err(err) = self
            .audit(
                plan,
                "governed.completed",
                json!({"call_id": plan.meta.call_id, "outcome": outcome, "amount_micros": amount}),
            )
            .await
        {
            self.background(&plan.operation_key, "audit", err.to_string());
        }
        // The view from what the writes returned; only the content is read again.
        let view = CallView {
            state: ViewState::Completed,
            record: Some(JournalEntry::from_record(&completed)?),
            output: self.output_of(Some(slot)),
            receipt: Some(charge),
            root_receipt,
        };
        Ok(RunOutcome {
            view,
            replayed: false,
            invalid_reason: collected.invalid,
            reasoning_loop: collected.loop_cut,
            warnings,
            refusal: meta_refusal,
        })
    }

    async fn spent(
        &self,
        plan: &Plan,
    ) -> Result<Vec<(&'static str, crate::types::Cap, i64)>, StoreError> {
        let mut out = Vec::new();
        let caps = plan.caps;
        if caps.session.is_some() || caps.day.is_some() {
            let spend = self
                .ports
                .spend
                .peek(&plan.scope, &plan.meta.identity.session_id, &plan.meta.day)
                .await?;
            if let Some(cap) = caps.session {
                out.push(("session", cap, spend.session_micros));
            }
            if let Some(cap) = caps.day {
                out.push(("day", cap, spend.day_micros));
            }
        }
        if let (Some(cap), Some(root_key)) = (caps.root, plan.root_key())
            && let Some(root) = self.ports.trees.root(&plan.scope, root_key).await?
        {
            out.push(("root", cap, root.settled_micros));
        }
        Ok(out)
    }

    async fn settle(
        &self,
        plan: &Plan,
        amount: i64,
        usage: Option<Usage>,
        reference: Option<String>,
    ) -> Result<GovernedCharge, GovernedError> {
        let charge = charge_for(
            &plan.scope,
            &plan.operation_key,
            &plan.meta,
            amount,
            usage,
            reference,
            self.now(),
        );
        Ok(self.ports.settlement.settle(&charge).await?.charge)
    }

    async fn root_receipt(
        &self,
        plan: &Plan,
        amount: i64,
    ) -> Result<Option<RootReceipt>, GovernedError> {
        let Some(root_key) = plan.root_key() else {
            return Ok(None);
        };
        let receipt = receipt_for(
            &plan.scope,
            root_key,
            &plan.operation_key,
            &plan.meta,
            amount,
            self.now(),
        );
        Ok(Some(
            self.ports.accounting.record_root_receipt(&receipt).await?.0,
        ))
    }

    fn output_of(&self, slot: Option<ResultSlot>) -> Output {
        let now = self.now();
        match slot {
            Some(ResultSlot {
                envelope: Some(envelope),
                erased_at: None,
                expires_at,
                ..
            }) if expires_at > now => match serde_json::from_value(envelope) {
                Ok(envelope) => Output::Available(Box::new(envelope)),
                Err(_) => Output::Unavailable,
            },
            _ => Output::Unavailable,
        }
    }

    /// The view of a journal row (reads the receipts and the content).
    pub(crate) async fn view_of(
        &self,
        record: &ExecutionRecord,
        root_key: Option<&str>,
    ) -> Result<CallView, GovernedError> {
        let entry = JournalEntry::from_record(record)?;
        let receipt = self
            .ports
            .settlement
            .charge(&record.scope, &record.operation_key)
            .await?;
        let root_receipt = match root_key {
            Some(root) => {
                self.ports
                    .accounting
                    .root_receipt(&record.scope, root, &record.operation_key)
                    .await?
            }
            None => None,
        };
        let (state, output) = match record.status {
            ExecutionStatus::Prepared | ExecutionStatus::Dispatching => {
                (ViewState::InProgress, Output::None)
            }
            ExecutionStatus::ReconciliationRequired => {
                (ViewState::ReconciliationRequired, Output::None)
            }
            ExecutionStatus::NotDispatched => (ViewState::NotDispatched, Output::None),
            ExecutionStatus::Completed => {
                // Both financial receipts are required for completed status.
                if receipt.is_none() || (root_key.is_some() && root_receipt.is_none()) {
                    (ViewState::ReconciliationRequired, Output::None)
                } else {
                    let slot = self
                        .ports
                        .results
                        .result(&record.scope, &record.operation_key)
                        .await?;
                    (ViewState::Completed, self.output_of(slot))
                }
            }
        };
        Ok(CallView {
            state,
            record: Some(entry),
            output,
            receipt,
            root_receipt,
        })
    }

    pub(crate) async fn read(
        &self,
        scope: &CallerScope,
        key: &str,
    ) -> Result<Option<CallView>, GovernedError> {
        let Some(record) = self.ports.executions.execution(scope, key).await? else {
            return Ok(None);
        };
        let root = JournalEntry::from_record(&record)?.meta.identity.root_key;
        Ok(Some(self.view_of(&record, root.as_deref()).await?))
    }

    /// Accounting-only recovery of one call: never loads input, never dispatches.
    pub(crate) async fn recover(
        &self,
        scope: &CallerScope,
        key: &str,
        lease: Duration,
    ) -> Result<Option<CallView>, GovernedError> {
        let Some(record) = self.ports.executions.execution(scope, key).await? else {
            return Ok(None);
        };
        let now = self.now();
        let entry = JournalEntry::from_record(&record)?;
        let root = entry.meta.identity.root_key.clone();
        match record.status {
            ExecutionStatus::NotDispatched | ExecutionStatus::ReconciliationRequired => {
                // Late evidence never rewrites an unresolved call by itself.
                if record.status == ExecutionStatus::ReconciliationRequired
                    && self.ports.settlement.charge(scope, key).await?.is_some()
                {
                    return self.complete_from_evidence(record, lease).await.map(Some);
                }
                Ok(Some(self.view_of(&record, root.as_deref()).await?))
            }
            ExecutionStatus::Completed => {
                self.repair(&record, &entry).await?;
                Ok(Some(self.view_of(&record, root.as_deref()).await?))
            }
            ExecutionStatus::Prepared => {
                if record.deadline_at > now {
                    return Ok(Some(self.view_of(&record, root.as_deref()).await?));
                }
                self.not_dispatched(&record, None, None).await.map(Some)
            }
            ExecutionStatus::Dispatching => {
                let leased = record.lease_until.is_some_and(|l| l > now);
                if record.deadline_at > now || leased {
                    return Ok(Some(self.view_of(&record, root.as_deref()).await?));
                }
                self.complete_from_evidence(record, lease).await.map(Some)
            }
        }
    }

    /// Completed journal, missing receipts: writes them again (both are idempotent).
    async fn repair(
        &self,
        record: &ExecutionRecord,
        entry: &JournalEntry,
    ) -> Result<(), GovernedError> {
        let Some(result) = &entry.meta.result else {
            return Ok(());
        };
        let now = self.now();
        if self
            .ports
            .settlement
            .charge(&record.scope, &record.operation_key)
            .await?
            .is_none()
        {
            let charge = charge_for(
                &record.scope,
                &record.operation_key,
                &entry.meta,
                result.amount_micros,
                result.usage,
                result.reference.clone(),
                now,
            );
            self.ports.settlement.settle(&charge).await?;
        }
        if let Some(root_key) = &entry.meta.identity.root_key {
            let receipt = receipt_for(
                &record.scope,
                root_key,
                &record.operation_key,
                &entry.meta,
                result.amount_micros,
                now,
            );
            self.ports.accounting.record_root_receipt(&receipt).await?;
        }
        Ok(())
    }

    /// Takes the accounting fence over a dispatched call and completes it from durable
    /// evidence (a settled charge, or exact, agreeing usage in the inbox priced with the
    /// original prices and day); without evidence the call needs an operator.
    async fn complete_from_evidence(
        &self,
        record: ExecutionRecord,
        lease: Duration,
    ) -> Result<CallView, GovernedError> {
        let now = self.now();
        let entry = JournalEntry::from_record(&record)?;
        let root = entry.meta.identity.root_key.clone();
        let mut fence = record.clone();
        fence.fence += 1;
        fence.lease_until =
            Some(now.plus_millis(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)));
        fence.updated_at = now;
        let record = match self.swap(&fence, record.version).await? {
            Swap::Won(record) => record,
            Swap::Lost(current) => return self.view_of(&current, root.as_deref()).await,
        };
        let (scope, key) = (&record.scope, record.operation_key.as_str());
        let charge = match self.ports.settlement.charge(scope, key).await? {
            Some(charge) => Some(charge),
            None => {
                let evidence = self.ports.inbox.usage_for(scope, key).await?;
                let exact: Vec<&Value> = evidence
                    .iter()
                    .filter(|e| e.observation.exact)
                    .map(|e| &e.observation.usage)
                    .collect();
                let agreed = exact
                    .first()
                    .filter(|first| exact.iter().all(|u| u == *first));
                let usage = agreed.and_then(|u| serde_json::from_value::<Usage>((*u).clone()).ok());
                let priced = usage.and_then(|u| entry.meta.prices.cost_micros(&u).map(|a| (u, a)));
                match priced {
                    None => None,
                    Some((usage, amount)) => {
                        let charge =
                            charge_for(scope, key, &entry.meta, amount, Some(usage), None, now);
                        Some(self.ports.settlement.settle(&charge).await?.charge)
                    }
                }
            }
        };
        let mut next = record.clone();
        next.lease_until = None;
        next.updated_at = self.now();
        let Some(charge) = charge else {
            next.status = ExecutionStatus::ReconciliationRequired;
            let stored = self
                .ports
                .executions
                .update_execution(&next, record.version)
                .await?;
            return self.view_of(&stored, root.as_deref()).await;
        };
        if let Some(root_key) = &root {
            let receipt = receipt_for(scope, root_key, key, &entry.meta, charge.amount_micros, now);
            self.ports.accounting.record_root_receipt(&receipt).await?;
        }
        let mut slot = self.ports.results.result(scope, key).await?;
        if slot
            .as_ref()
            .is_some_and(|s| s.envelope.is_none() && s.erased_at.is_none())
        {
            // The output was lost: record that, so a late writer cannot store a different
            // outcome than the one completed here (the first envelope wins).
            let lost = Envelope {
                outcome: Outcome::Unavailable,
                stop_reason: None,
                text: None,
                json: None,
                step: None,
                refusal: None,
            };
            let lost =
                serde_json::to_value(&lost).map_err(|e| StoreError::Backend(e.to_string()))?;
            slot = Some(self.ports.results.store_envelope(scope, key, &lost).await?);
        }
        let stored_outcome = slot
            .as_ref()
            .and_then(|s| s.envelope.clone())
            .and_then(|e| serde_json::from_value::<Envelope>(e).ok());
        let usage = charge
            .detail
            .get("usage")
            .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
        let mut meta = entry.meta.clone();
        meta.result = Some(ResultMeta {
            outcome: stored_outcome
                .as_ref()
                .map_or(Outcome::Unavailable, |e| e.outcome),
            stop_reason: stored_outcome.and_then(|e| e.stop_reason),
            reference: charge
                .detail
                .get("reference")
                .and_then(Value::as_str)
                .map(str::to_owned),
            amount_micros: charge.amount_micros,
            usage,
            warnings: Vec::new(),
            recovered: true,
        });
        next.status = ExecutionStatus::Completed;
        next.meta = to_meta(&meta)?;
        let stored = self
            .ports
            .executions
            .update_execution(&next, record.version)
            .await?;
        self.view_of(&stored, root.as_deref()).await
    }

    /// Fences overdue prepared/dispatching calls of the scope; returns their keys.
    pub(crate) async fn reconcile_expired(
        &self,
        scope: &CallerScope,
        limit: Option<u32>,
        lease: Duration,
    ) -> Result<Vec<String>, GovernedError> {
        let limit = limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
        let now = self.now();
        let overdue = self
            .ports
            .executions
            .overdue_executions(scope, now, limit)
            .await?;
        let mut fenced = Vec::new();
        for record in overdue {
            if record.lease_until.is_some_and(|l| l > now) {
                continue;
            }
            let key = record.operation_key.clone();
            let result = match record.status {
                ExecutionStatus::Prepared => self.not_dispatched(&record, None, None).await,
                _ => self.complete_from_evidence(record, lease).await,
            };
            // One bad record never stalls the pass: it is reported and the rest go on.
            match result {
                Ok(_) => fenced.push(key),
                Err(err) => self.background(&key, "reconcile", err.to_string()),
            }
        }
        Ok(fenced)
    }

    /// Acknowledges exact inbox observations whose accounting or not-dispatched proof is
    /// durable. `root` limits the pass to one root's calls (and requires its receipt).
    pub(crate) async fn reconcile_usage(
        &self,
        scope: &CallerScope,
        query: UsageQuery,
        root: Option<&str>,
        skip: Option<&(dyn Fn(&str) -> bool + Send + Sync)>,
    ) -> Result<UsageReconciliation, GovernedError> {
        let limit = query.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
        let page = self
            .ports
            .inbox
            .pending_usage(scope, query.after, limit)
            .await?;
        let mut result = UsageReconciliation {
            cursor: query.after,
            ..UsageReconciliation::default()
        };
        for entry in page {
            result.scanned += 1;
            result.cursor = Some(entry.seq);
            let key = entry.observation.operation_key.as_str();
            if skip.is_some_and(|skip| skip(key)) {
                continue;
            }
            let Some(record) = self.ports.executions.execution(scope, key).await? else {
                continue;
            };
            let meta = JournalEntry::from_record(&record)?.meta;
            if root.is_some() && meta.identity.root_key.as_deref() != root {
                continue;
            }
            let durable = match record.status {
                ExecutionStatus::NotDispatched => entry.observation.exact,
                ExecutionStatus::Completed if entry.observation.exact => {
                    let charge = self.ports.settlement.charge(scope, key).await?;
                    let agrees = charge
                        .as_ref()
                        .is_some_and(|c| c.detail.get("usage") == Some(&entry.observation.usage));
                    let receipted = match &meta.identity.root_key {
                        Some(root_key) => self
                            .ports
                            .accounting
                            .root_receipt(scope, root_key, key)
                            .await?
                            .is_some(),
                        None => true,
                    };
                    agrees && receipted
                }
                _ => false,
            };
            if durable
                && self
                    .ports
                    .inbox
                    .acknowledge_usage(scope, entry.seq, self.now())
                    .await?
            {
                result.acknowledged += 1;
            }
        }
        Ok(result)
    }
}

fn charge_for(
    scope: &CallerScope,
    key: &str,
    meta: &CallMeta,
    amount: i64,
    usage: Option<Usage>,
    reference: Option<String>,
    now: Timestamp,
) -> GovernedCharge {
    GovernedCharge {
        scope: scope.clone(),
        operation_key: key.to_owned(),
        session_id: meta.identity.session_id.clone(),
        day: meta.day.clone(),
        amount_micros: amount,
        detail: json!({
            "call_id": meta.call_id,
            "price_version": meta.identity.price_version,
            "model": meta.controls.model,
            "provider": meta.provider,
            "usage": usage,
            "reference": reference,
            "consumers": meta.consumers,
        }),
        settled_at: now,
    }
}

fn receipt_for(
    scope: &CallerScope,
    root_key: &str,
    key: &str,
    meta: &CallMeta,
    amount: i64,
    now: Timestamp,
) -> RootReceipt {
    RootReceipt {
        scope: scope.clone(),
        root_key: root_key.to_owned(),
        operation_key: key.to_owned(),
        amount_micros: amount,
        detail: json!({"call_id": meta.call_id, "price_version": meta.identity.price_version}),
        recorded_at: now,
    }
}
