//! The engine's vocabulary: prices and caps, outcomes and envelopes, views, errors.

use std::sync::Arc;

use herma_core::Timestamp;
use herma_core::call::{Controls, StopReason, ToolChoice, Usage};
use herma_store::StoreError;
use herma_store::governed::{
    ExecutionRecord, ExecutionStatus, GovernedCharge, NotDispatchedCause, RootReceipt,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::collector::{InvalidReason, Step};

/// The largest charge one call can settle (a billion currency units): beyond it the usage
/// is treated as unpriceable evidence and left to an operator.
pub const MAX_CHARGE_MICROS: i64 = 1_000_000_000_000_000;

/// Prices in micro-units of the operator's currency per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prices {
    pub input_per_mtok: i64,
    pub output_per_mtok: i64,
    #[serde(default)]
    pub cache_read_per_mtok: i64,
    #[serde(default)]
    pub cache_write_per_mtok: i64,
}

impl Prices {
    /// The cost of `usage` in micros, rounded up (a fraction of a micro is charged as one);
    /// `None` when it passes [`MAX_CHARGE_MICROS`] (implausible evidence: unpriceable).
    pub fn cost_micros(&self, usage: &Usage) -> Option<i64> {
        let total = i128::from(usage.input_tokens) * i128::from(self.input_per_mtok)
            + i128::from(usage.output_tokens) * i128::from(self.output_per_mtok)
            + i128::from(usage.cache_read_tokens) * i128::from(self.cache_read_per_mtok)
            + i128::from(usage.cache_write_tokens) * i128::from(self.cache_write_per_mtok);
        let micros = (total + 999_999).div_euclid(1_000_000);
        i64::try_from(micros)
            .ok()
            .filter(|m| *m <= MAX_CHARGE_MICROS)
    }

    pub(crate) fn check(&self) -> Result<(), GovernedError> {
        for (field, value) in [
            ("prices.input_per_mtok", self.input_per_mtok),
            ("prices.output_per_mtok", self.output_per_mtok),
            ("prices.cache_read_per_mtok", self.cache_read_per_mtok),
            ("prices.cache_write_per_mtok", self.cache_write_per_mtok),
        ] {
            if value < 0 {
                return Err(GovernedError::config(field, "must not be negative"));
            }
        }
        Ok(())
    }
}

/// What the trusted policy chose for a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyChoice {
    /// One of the runner's named `clients`; `None` is its default `client`.
    pub client: Option<String>,
    pub model: String,
    /// The policy's caching choice; a runner's `cache` overrides it (`Some(false)` included).
    pub cache: Option<bool>,
}

/// A trusted capability: resolves a call's model and caching from its intent, or refuses it
/// with a closed name (recorded as `policy:<name>`). Its behaviour is not digested: bump the
/// runner's `policy_version` whenever it changes.
pub trait CallPolicy: Send + Sync {
    fn resolve(&self, intent: &str) -> Result<PolicyChoice, String>;
}

pub type PolicyHandle = Arc<dyn CallPolicy>;

/// The controls a policy (if any) leads to, and its refusal.
pub(crate) struct Resolved {
    pub controls: Controls,
    pub refusal: Option<String>,
    /// The named client chosen (`None`: the default client).
    pub client: Option<String>,
}

/// The runner's clients: a default and named alternatives a policy may choose.
#[derive(Clone)]
pub(crate) struct Clients {
    pub default: Arc<dyn herma_providers::single::ModelClient>,
    pub named: std::collections::BTreeMap<String, Arc<dyn herma_providers::single::ModelClient>>,
}

impl Clients {
    pub fn get(&self, name: Option<&str>) -> Option<Arc<dyn herma_providers::single::ModelClient>> {
        match name {
            None => Some(self.default.clone()),
            Some(name) => self.named.get(name).cloned(),
        }
    }
}

pub(crate) fn apply_policy(
    policy: Option<&PolicyHandle>,
    intent: &str,
    base: Controls,
    cache_override: Option<bool>,
) -> Resolved {
    let mut controls = base;
    let mut refusal = None;
    let mut client = None;
    if let Some(policy) = policy {
        match policy.resolve(intent) {
            Ok(choice) => {
                controls.model = choice.model;
                controls.cache = choice.cache;
                client = choice.client;
            }
            Err(name) => {
                // A closed name: bounded, no content.
                let name: String = name
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                    .take(64)
                    .collect();
                refusal = Some(format!("policy:{name}"));
            }
        }
    }
    if cache_override.is_some() {
        controls.cache = cache_override;
    }
    Resolved {
        controls,
        refusal,
        client,
    }
}

/// What a cap does when spend passes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CapMode {
    /// The result is kept; the run reports a warning.
    Warn,
    /// No call starts at or past the limit; a result that passes it is suppressed (its known
    /// cost settled first).
    Block,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cap {
    pub limit_micros: i64,
    pub mode: CapMode,
}

/// Monetary caps. `root` applies to the step runner's inclusive root cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    pub session: Option<Cap>,
    pub day: Option<Cap>,
    #[serde(default)]
    pub root: Option<Cap>,
}

impl Caps {
    pub(crate) fn check(&self) -> Result<(), GovernedError> {
        for (field, cap) in [
            ("caps.session", self.session),
            ("caps.day", self.day),
            ("caps.root", self.root),
        ] {
            if let Some(cap) = cap
                && cap.limit_micros < 0
            {
                return Err(GovernedError::config(
                    field,
                    "limit_micros must not be negative",
                ));
            }
        }
        Ok(())
    }
}

/// A cap a completed call passed in warn mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapWarning {
    /// `session`, `day` or `root`.
    pub cap: String,
    pub limit_micros: i64,
    pub spent_micros: i64,
}

/// How a dispatched call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    /// A block cap was passed by this call: the output is suppressed, its cost settled.
    Blocked,
    /// The collector (or the output contract) refused the output: nothing is stored.
    Invalid,
    /// The model refused (or the provider proved a context rejection): metadata only.
    Refused,
    /// The call settled but no output exists (a stream failure, a pre-stream rejection,
    /// output lost before it was stored).
    Unavailable,
}

/// The stored result of a completed call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub outcome: Outcome,
    pub stop_reason: Option<StopReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The text runner's native JSON output, validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<Value>,
    /// The step runner's step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
    /// Why the model or provider refused, as a closed name (never content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

/// The immutable identity of a call: a replay must present the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    pub session_id: String,
    pub intent: String,
    pub input_revision: String,
    pub policy_version: String,
    pub price_version: String,
    pub output_contract_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_key: Option<String>,
    /// The named client the call went to (`None`: the runner's default client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Absent and an explicit `auto` differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

/// What the journal keeps about a call: identity and controls at claim, the outcome at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallMeta {
    pub identity: Identity,
    pub controls: Controls,
    pub prices: Prices,
    /// The UTC day the call is charged to.
    pub day: String,
    pub call_id: String,
    pub provider: String,
    #[serde(default)]
    pub consumers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultMeta>,
}

/// The outcome part of the journal's metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultMeta {
    pub outcome: Outcome,
    pub stop_reason: Option<StopReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    pub amount_micros: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub warnings: Vec<CapWarning>,
    /// Completed by accounting-only recovery.
    #[serde(default)]
    pub recovered: bool,
}

/// A journal row as views show it.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalEntry {
    pub operation_key: String,
    pub status: ExecutionStatus,
    pub not_dispatched_cause: Option<NotDispatchedCause>,
    pub deadline_at: Timestamp,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub fence: u64,
    pub meta: CallMeta,
}

impl JournalEntry {
    pub(crate) fn from_record(record: &ExecutionRecord) -> Result<Self, GovernedError> {
        Ok(Self {
            operation_key: record.operation_key.clone(),
            status: record.status,
            not_dispatched_cause: record.cause,
            deadline_at: record.deadline_at,
            created_at: record.created_at,
            updated_at: record.updated_at,
            fence: record.fence,
            meta: serde_json::from_value(record.meta.clone()).map_err(|e| {
                GovernedError::Store(StoreError::Corrupt(format!("execution meta: {e}")))
            })?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewState {
    InProgress,
    ReconciliationRequired,
    NotDispatched,
    Completed,
}

impl ViewState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "in_progress",
            Self::ReconciliationRequired => "reconciliation_required",
            Self::NotDispatched => "not_dispatched",
            Self::Completed => "completed",
        }
    }
}

/// The output of a completed call, as far as it still exists.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// The call is not completed.
    None,
    Available(Box<Envelope>),
    /// Erased, expired or lost: the historical outcome stays in the journal metadata.
    Unavailable,
}

/// What `read` says about one call.
#[derive(Clone, Debug, PartialEq)]
pub struct CallView {
    pub state: ViewState,
    /// The journal row; the structured runner's root-only views have none.
    pub record: Option<JournalEntry>,
    pub output: Output,
    /// The original governed charge.
    pub receipt: Option<GovernedCharge>,
    /// The root's receipt (step runner).
    pub root_receipt: Option<RootReceipt>,
}

impl CallView {
    pub fn not_dispatched_cause(&self) -> Option<NotDispatchedCause> {
        self.record.as_ref().and_then(|r| r.not_dispatched_cause)
    }

    pub fn envelope(&self) -> Option<&Envelope> {
        match &self.output {
            Output::Available(e) => Some(e),
            _ => None,
        }
    }

    /// The journal's historical outcome (kept even when the output is gone).
    pub fn outcome(&self) -> Option<Outcome> {
        self.record
            .as_ref()
            .and_then(|r| r.meta.result.as_ref())
            .map(|r| r.outcome)
    }
}

/// What a run returns when it reached a known state.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutcome {
    pub view: CallView,
    /// The key had been run before: nothing was loaded or dispatched now.
    pub replayed: bool,
    /// Why the output was invalid (this run only; never stored).
    pub invalid_reason: Option<InvalidReason>,
    /// A reasoning loop was cut (`invalid_reason` is `reasoning_chars`).
    pub reasoning_loop: bool,
    pub warnings: Vec<CapWarning>,
    /// Why a call was refused before or after dispatch, as a closed name (`cap:session`,
    /// `cap:day`, `cap:root`, `unsupported:<field>`, `model`, `context_window_exceeded`).
    pub refusal: Option<String>,
}

/// Which bound interrupted a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// The runner's own `run_timeout`.
    Timeout,
    /// The call's deadline.
    Deadline,
    /// The caller's cancellation.
    Cancelled,
}

#[derive(Clone, Debug, Error, PartialEq)]
pub enum GovernedError {
    #[error("configuration `{field}`: {reason}")]
    Config { field: String, reason: String },
    #[error("`{field}`: {reason}")]
    InvalidInput { field: String, reason: String },
    /// The key exists with a different identity: `field` is the first that differs.
    #[error("operation key reused with a different `{field}`")]
    Conflict { field: String },
    /// The call's root does not admit it.
    #[error("the operation root `{root_key}` is {state}")]
    Root { root_key: String, state: String },
    #[error("the run was interrupted ({kind:?})")]
    Interrupted {
        kind: Interruption,
        /// A store write of the stream failed before the interruption.
        store_failed: bool,
    },
    #[error("a store failed: {0}")]
    Store(#[from] StoreError),
}

impl GovernedError {
    pub(crate) fn config(field: &str, reason: impl Into<String>) -> Self {
        Self::Config {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }

    pub(crate) fn input(field: &str, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// True only of a rejection the runner raised itself — its timeout, its deadline or its
/// caller's cancellation — while no store write of the stream had failed. A store's own
/// failure (even one that looks like an abort) is not one.
pub fn is_step_interruption(error: &GovernedError) -> bool {
    matches!(
        error,
        GovernedError::Interrupted {
            store_failed: false,
            ..
        }
    )
}

/// A failure after the run returned (the background drain), metadata only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackgroundError {
    pub operation_key: String,
    /// `drain`, `settle`, `store`, `audit`, `fenced`, `close_root`.
    pub stage: &'static str,
    pub message: String,
}

pub type BackgroundErrorHandler = Arc<dyn Fn(&BackgroundError) + Send + Sync>;

/// The default handler: a `tracing` warning with the metadata (there is no content to log).
pub fn log_background_errors() -> BackgroundErrorHandler {
    Arc::new(|e| {
        tracing::warn!(
            operation_key = %e.operation_key,
            stage = e.stage,
            "governed background error: {}",
            e.message
        )
    })
}

/// The reconciliation query: `limit` defaults to 50 and is at most 100.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageQuery {
    pub limit: Option<u32>,
    pub after: Option<u64>,
}

pub const DEFAULT_PAGE: u32 = 50;
pub const MAX_PAGE: u32 = 100;

/// One reconciliation pass over one page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageReconciliation {
    pub scanned: u32,
    pub acknowledged: u32,
    /// The last inspected entry; pass it as `after` to read the next page.
    pub cursor: Option<u64>,
}
