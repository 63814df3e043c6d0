//! The journaled call, shared by the three runners.
//!
//! A run is two phases. Phase A (claim, result reservation, audit, the block-cap preflight,
//! loading and validating the request) is interruptible: the caller's cancellation, the
//! deadline or the runner's timeout drop it and the claim is fenced as `not_dispatched`
//! (`aborted`) in the background. Phase B takes the dispatch fence (the compare-and-set
//! `prepared → dispatching`; only its winner dispatches), sends the request once, drains the
//! stream to its end (usage is deposited in the inbox as soon as it arrives), settles, writes
//! the root receipt, stores the envelope and completes the journal. The run polls phase B in
//! place; only when the run returns early (interrupted) or its future is dropped does the rest
//! of phase B move into its own task, so no interruption can split it: before the dispatch
//! started, phase B then fences the claim as `aborted` without sending; after, the run has
//! returned while phase B goes on draining for late evidence.
//!
//! Recovery (`recover`, `reconcile_expired`, `reconcile_usage`) works from the stores alone
//! and never dispatches.
//!
//! One concern per file, each adding methods to `Engine`:
//!
//! - this module: the `Engine`, a run's `Plan`, identifier and bound checks, and the journal
//!   primitives all parts share (the compare-and-set, `prepared → not_dispatched`, audit,
//!   background reports);
//! - `run`: a run — phase A, phase B up to the drained stream, and the guards that fence an
//!   abandoned claim or move an unfinished phase B into its own task;
//! - `settle`: the drained stream's outcome — pricing, the charge, the root receipt, the caps
//!   after the call, the envelope and the journal completion — and the charge and receipt
//!   rows recovery writes too;
//! - `view`: what a journal row reads as (`read`, and the view every path returns);
//! - `recover`: accounting-only recovery, `reconcile_expired` and `reconcile_usage`.
//!
//! Siblings depend one way: `view` uses none of them, `settle` returns views, `run` hands the
//! drained stream to `settle`, and `recover` uses `settle`'s rows and the views.

mod recover;
mod run;
mod settle;
mod view;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use herma_core::call::ModelRequest;
use herma_core::time::Clock;
use herma_core::{CallerScope, Timestamp};
use herma_providers::single::ModelClient;
use herma_store::governed::{
    AuditEvent, ExecutionRecord, ExecutionStatus, GovernedPorts, NotDispatchedCause,
};
use herma_store::{Runtime, StoreError};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::types::{
    BackgroundError, BackgroundErrorHandler, CallMeta, CallView, Caps, GovernedError, JournalEntry,
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

/// What the runner expects back: text (with an optional JSON contract) or a step.
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
    /// The deadline on the runtime's monotonic clock.
    pub deadline: Duration,
    /// The runner's own timeout (step runner), if any, on the same clock.
    pub timeout: Option<Duration>,
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

/// A runner's engine: its ports, clock and runtime, the result retention, the
/// background-error callback and the drain limit, fixed at the runner's construction.
pub(crate) struct Engine {
    pub ports: GovernedPorts,
    pub clock: Arc<dyn Clock>,
    /// Where detached work runs and what bounds wait by (never tokio's directly, so the
    /// engine runs in a Worker too).
    pub runtime: Arc<dyn Runtime>,
    pub retention_ms: i64,
    pub on_background_error: BackgroundErrorHandler,
    /// How long phase B waits at most, from the dispatch to the stream's end.
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

/// Longest accepted identifiers (bytes).
pub(crate) const MAX_KEY: usize = 512;
pub(crate) const MAX_ID: usize = 256;

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
    check_id(field, value, MAX_KEY)?;
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

/// The journal row's metadata.
fn to_meta(meta: &CallMeta) -> Result<Value, GovernedError> {
    serde_json::to_value(meta)
        .map_err(|e| GovernedError::Store(StoreError::Backend(format!("encoding meta: {e}"))))
}

/// How a journal compare-and-set ended.
enum Swap {
    Won(ExecutionRecord),
    Lost(ExecutionRecord),
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

    /// Reports a failure no caller will see to the background-error callback.
    fn background(&self, key: &str, stage: &'static str, message: impl Into<String>) {
        (self.on_background_error)(&BackgroundError {
            operation_key: key.to_owned(),
            stage,
            message: message.into(),
        });
    }

    /// Records one audit event of the plan's call.
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

    /// To not_dispatched: from `prepared`, or from a dispatch fence given back unsent. A lost
    /// race (someone fenced first) reads what they wrote.
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
}
