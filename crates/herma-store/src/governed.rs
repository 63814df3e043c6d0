//! The governed single-call engine's ports (`herma-governed` runs on them).
//!
//! Eight traits, each one concern: the journal of executions ([`ExecutionStore`]), the reserved
//! result slots ([`ExecutionResultStore`]), usage evidence ([`UsageInbox`]), the one financial
//! writer ([`GovernedCostSettlementStore`]) and the counters it moves ([`SpendStore`], whose
//! `peek` reads exactly those counters), the awaited audit trail ([`AuditLog`]), operation roots
//! ([`OperationTreeStore`]) and the root receipts with their aggregation
//! ([`OperationAccountingStore`]).
//!
//! Every record is keyed by a [`CallerScope`] and an operation key. Bodies (`meta`, `detail`,
//! `envelope`) are the engine's JSON: stores keep them as written and never interpret them.
//!
//! Architecture invariant: every write that can race is one atomic step in every backend — an
//! insert-if-absent that reports the existing row, a compare-and-set on `version`, or (for the
//! settlement, root admission and root receipts) one transaction that writes the row and moves
//! its counters together, so a counter is never moved twice for one key.

use std::sync::Arc;

use async_trait::async_trait;
use herma_core::{CallerScope, Timestamp};
use serde_json::Value;

use crate::StoreResult;

/// Where an execution stands in the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecutionStatus {
    /// Claimed; the request has not been sent.
    Prepared,
    /// The dispatch fence was taken: the request may have reached the provider.
    Dispatching,
    /// Final: settled (or proven free) with a stored envelope.
    Completed,
    /// Final: never sent to the provider.
    NotDispatched,
    /// Final until an operator (or exact late evidence through recovery) resolves it: the call
    /// may have cost money and the cost is unknown.
    ReconciliationRequired,
}

impl ExecutionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prepared => "prepared",
            Self::Dispatching => "dispatching",
            Self::Completed => "completed",
            Self::NotDispatched => "not_dispatched",
            Self::ReconciliationRequired => "reconciliation_required",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "prepared" => Self::Prepared,
            "dispatching" => Self::Dispatching,
            "completed" => Self::Completed,
            "not_dispatched" => Self::NotDispatched,
            "reconciliation_required" => Self::ReconciliationRequired,
            _ => return None,
        })
    }

    /// No run will move it any more (recovery may still repair its accounting).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::NotDispatched)
    }
}

/// Why a claimed call was never sent, when that was observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotDispatchedCause {
    /// Refused as configured or as loaded (validation, caps): an unchanged retry is refused too.
    Invalid,
    /// The host's input loader failed.
    Input,
    /// The caller cancelled before the dispatch.
    Aborted,
    /// The awaited audit write failed.
    Audit,
    /// A store write before the dispatch failed.
    Store,
}

impl NotDispatchedCause {
    pub const ALL: [Self; 5] = [
        Self::Invalid,
        Self::Input,
        Self::Aborted,
        Self::Audit,
        Self::Store,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Input => "input",
            Self::Aborted => "aborted",
            Self::Audit => "audit",
            Self::Store => "store",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

/// One journal row: one operation key, one call.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionRecord {
    pub scope: CallerScope,
    pub operation_key: String,
    /// Bumped by every update; claims start at 1.
    pub version: u64,
    pub status: ExecutionStatus,
    pub cause: Option<NotDispatchedCause>,
    /// After this instant the run is overdue and `reconcile_expired` may fence it.
    pub deadline_at: Timestamp,
    /// An accounting-only recovery holds the record until then.
    pub lease_until: Option<Timestamp>,
    /// Incremented by every fence taken over the record (recovery, expiry).
    pub fence: u64,
    /// The engine's metadata: immutable call identity and controls, then the outcome.
    pub meta: Value,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// What a claim found.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// This call inserted the record (version 1).
    Claimed(ExecutionRecord),
    /// A record already existed for the key; nothing was written.
    Existing(ExecutionRecord),
}

/// The journal.
#[async_trait]
pub trait ExecutionStore: Send + Sync {
    /// Inserts `record` at version 1 unless the key exists.
    async fn claim_execution(&self, record: &ExecutionRecord) -> StoreResult<Claim>;
    async fn execution(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<ExecutionRecord>>;
    /// Writes status, cause, lease, fence, meta and `updated_at` when the stored version is
    /// `expected`; returns the record at `expected + 1`. A stale version writes nothing and is a
    /// [`StoreError::VersionConflict`](crate::StoreError::VersionConflict).
    async fn update_execution(
        &self,
        record: &ExecutionRecord,
        expected: u64,
    ) -> StoreResult<ExecutionRecord>;
    /// Prepared or dispatching executions whose deadline is at or before `now`, earliest
    /// deadline first, at most `limit`.
    async fn overdue_executions(
        &self,
        scope: &CallerScope,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ExecutionRecord>>;
}

/// A reserved result: reserved before any input is loaded, filled once.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultSlot {
    pub scope: CallerScope,
    pub operation_key: String,
    /// Stored content is unavailable from this instant.
    pub expires_at: Timestamp,
    /// The envelope, once stored; `None` while reserved and after erasure.
    pub envelope: Option<Value>,
    pub erased_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Reservation {
    Reserved(ResultSlot),
    Existing(ResultSlot),
}

#[async_trait]
pub trait ExecutionResultStore: Send + Sync {
    /// Inserts an empty slot unless the key has one.
    async fn reserve_result(&self, slot: &ResultSlot) -> StoreResult<Reservation>;
    async fn result(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<ResultSlot>>;
    /// Stores the envelope once. A slot that already holds one, or was erased, keeps what it
    /// has (erased content is never resurrected); the slot as it now is comes back.
    /// [`StoreError::NotFound`](crate::StoreError::NotFound) without a reservation.
    async fn store_envelope(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        envelope: &Value,
    ) -> StoreResult<ResultSlot>;
    /// Removes the content for good. `Ok(false)` when there was no slot.
    async fn erase_result(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        now: Timestamp,
    ) -> StoreResult<bool>;
}

/// One piece of usage evidence for one call.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageObservation {
    pub scope: CallerScope,
    pub operation_key: String,
    /// Unique per call (a provider response id, or the engine's call id).
    pub observation_id: String,
    /// Terminal usage reported by the provider, as opposed to an estimate or a partial count.
    pub exact: bool,
    pub usage: Value,
    pub observed_at: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InboxEntry {
    /// Increasing in deposit order; the reconciliation cursor.
    pub seq: u64,
    pub observation: UsageObservation,
    pub acknowledged_at: Option<Timestamp>,
}

#[async_trait]
pub trait UsageInbox: Send + Sync {
    /// Deposits evidence; the same (scope, key, observation id) again returns the first entry.
    async fn deposit_usage(&self, observation: &UsageObservation) -> StoreResult<InboxEntry>;
    /// Unacknowledged entries of the scope after `after`, in `seq` order, at most `limit`.
    async fn pending_usage(
        &self,
        scope: &CallerScope,
        after: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<InboxEntry>>;
    /// Every entry of one call, acknowledged or not, in `seq` order.
    async fn usage_for(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Vec<InboxEntry>>;
    /// `Ok(false)` when it was already acknowledged or does not exist.
    async fn acknowledge_usage(
        &self,
        scope: &CallerScope,
        seq: u64,
        now: Timestamp,
    ) -> StoreResult<bool>;
}

/// The financial row of one governed call.
#[derive(Clone, Debug, PartialEq)]
pub struct GovernedCharge {
    pub scope: CallerScope,
    pub operation_key: String,
    pub session_id: String,
    /// The UTC day (`YYYY-MM-DD`) the day counter is charged to: the call's original day.
    pub day: String,
    pub amount_micros: i64,
    /// Price version, model, usage: what the amount was computed from.
    pub detail: Value,
    pub settled_at: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Settlement {
    /// The stored charge: on a repeat, the first one.
    pub charge: GovernedCharge,
    /// This call wrote it (and moved the counters).
    pub created: bool,
}

/// The only writer of financial rows.
#[async_trait]
pub trait GovernedCostSettlementStore: Send + Sync {
    /// Writes the charge and adds its amount to the session and day counters, atomically and
    /// once per (scope, key); a repeat writes nothing and returns the first charge.
    async fn settle(&self, charge: &GovernedCharge) -> StoreResult<Settlement>;
    async fn charge(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<GovernedCharge>>;
}

/// Spend so far: the counters settlement moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpendTotals {
    pub session_micros: i64,
    pub day_micros: i64,
}

#[async_trait]
pub trait SpendStore: Send + Sync {
    async fn peek(
        &self,
        scope: &CallerScope,
        session_id: &str,
        day: &str,
    ) -> StoreResult<SpendTotals>;
    /// Moves the counters without a financial row: for legacy writers. The governed engine
    /// never calls it.
    async fn add(
        &self,
        scope: &CallerScope,
        session_id: &str,
        day: &str,
        micros: i64,
    ) -> StoreResult<()>;
}

/// One audit event: metadata only, never content.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditEvent {
    pub scope: CallerScope,
    pub operation_key: String,
    pub kind: String,
    pub detail: Value,
    pub at: Timestamp,
}

#[async_trait]
pub trait AuditLog: Send + Sync {
    async fn record(&self, event: &AuditEvent) -> StoreResult<()>;
    /// A cost event for legacy writers. The governed engine never calls it: settlement is the
    /// financial record.
    async fn cost(&self, event: &AuditEvent) -> StoreResult<()>;
    /// One call's events in the order recorded.
    async fn events(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Vec<AuditEvent>>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootStatus {
    Active,
    Closed,
    Expired,
}

impl RootStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Closed => "closed",
            Self::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "active" => Self::Active,
            "closed" => Self::Closed,
            "expired" => Self::Expired,
            _ => return None,
        })
    }
}

/// An operation root: the unit a turn (or a structured call) admits calls under.
#[derive(Clone, Debug, PartialEq)]
pub struct RootRecord {
    pub scope: CallerScope,
    pub root_key: String,
    /// What the root was opened for; replays compare it.
    pub binding: Value,
    pub status: RootStatus,
    pub deadline_at: Timestamp,
    /// Calls admitted under the root.
    pub reserved_calls: u64,
    /// Sum of the root receipts (the inclusive root cost).
    pub settled_micros: i64,
    pub receipts: u64,
    pub created_at: Timestamp,
    pub closed_at: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RootOpen {
    Opened(RootRecord),
    Existing(RootRecord),
}

#[derive(Clone, Debug, PartialEq)]
pub enum CallReservation {
    /// The call was admitted now.
    Reserved,
    /// It had been admitted before.
    AlreadyReserved,
    /// The root no longer admits calls.
    RootNotActive(RootStatus),
    MissingRoot,
}

#[async_trait]
pub trait OperationTreeStore: Send + Sync {
    async fn open_root(&self, root: &RootRecord) -> StoreResult<RootOpen>;
    async fn root(&self, scope: &CallerScope, root_key: &str) -> StoreResult<Option<RootRecord>>;
    /// Admits a call under the root's lock: only an active root admits, once per key.
    async fn reserve_call(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<CallReservation>;
    async fn has_call(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<bool>;
    /// Active → closed; returns the root as it now is (`None` when missing).
    async fn close_root(
        &self,
        scope: &CallerScope,
        root_key: &str,
        now: Timestamp,
    ) -> StoreResult<Option<RootRecord>>;
    /// Active roots whose deadline is at or before `now` become expired; returns them.
    async fn expire_roots(
        &self,
        scope: &CallerScope,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<RootRecord>>;
}

/// The receipt a root keeps for one of its calls.
#[derive(Clone, Debug, PartialEq)]
pub struct RootReceipt {
    pub scope: CallerScope,
    pub root_key: String,
    pub operation_key: String,
    pub amount_micros: i64,
    pub detail: Value,
    pub recorded_at: Timestamp,
}

#[async_trait]
pub trait OperationAccountingStore: Send + Sync {
    /// Writes the receipt and adds it to the root's aggregation in one step, once per call;
    /// returns the stored receipt and whether this call wrote it.
    /// [`StoreError::NotFound`](crate::StoreError::NotFound) when the root does not exist.
    async fn record_root_receipt(&self, receipt: &RootReceipt) -> StoreResult<(RootReceipt, bool)>;
    async fn root_receipt(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<Option<RootReceipt>>;
}

/// A backend implementing every governed port.
pub trait GovernedStore:
    ExecutionStore
    + ExecutionResultStore
    + UsageInbox
    + GovernedCostSettlementStore
    + SpendStore
    + AuditLog
    + OperationTreeStore
    + OperationAccountingStore
{
}

impl<T> GovernedStore for T where
    T: ExecutionStore
        + ExecutionResultStore
        + UsageInbox
        + GovernedCostSettlementStore
        + SpendStore
        + AuditLog
        + OperationTreeStore
        + OperationAccountingStore
{
}

/// The capabilities an engine is given, one per port (they may be different backends).
#[derive(Clone)]
pub struct GovernedPorts {
    pub executions: Arc<dyn ExecutionStore>,
    pub results: Arc<dyn ExecutionResultStore>,
    pub inbox: Arc<dyn UsageInbox>,
    pub settlement: Arc<dyn GovernedCostSettlementStore>,
    pub spend: Arc<dyn SpendStore>,
    pub audit: Arc<dyn AuditLog>,
    pub trees: Arc<dyn OperationTreeStore>,
    pub accounting: Arc<dyn OperationAccountingStore>,
}

impl std::fmt::Debug for GovernedPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GovernedPorts")
    }
}

impl GovernedPorts {
    /// Every port from one backend (so `peek` reads the counters its settlement writes).
    pub fn uniform<S: GovernedStore + 'static>(store: Arc<S>) -> Self {
        Self {
            executions: store.clone(),
            results: store.clone(),
            inbox: store.clone(),
            settlement: store.clone(),
            spend: store.clone(),
            audit: store.clone(),
            trees: store.clone(),
            accounting: store,
        }
    }
}
