//! The governed ports in memory: the reference behaviour of the governed conformance suite.
//! Volatile: its settlement and the counters `peek` reads live and die with the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use herma_core::{CallerScope, Timestamp};
use serde_json::Value;

use crate::governed::{
    AuditEvent, AuditLog, CallReservation, Claim, ExecutionRecord, ExecutionResultStore,
    ExecutionStatus, ExecutionStore, GovernedCharge, GovernedCostSettlementStore, InboxEntry,
    OperationAccountingStore, OperationTreeStore, Reservation, ResultSlot, RootOpen, RootReceipt,
    RootRecord, RootStatus, Settlement, SpendStore, SpendTotals, UsageInbox, UsageObservation,
};
use crate::{StoreError, StoreResult};

type Key = (CallerScope, String);

#[derive(Default)]
struct Inner {
    executions: HashMap<Key, ExecutionRecord>,
    results: HashMap<Key, ResultSlot>,
    inbox: BTreeMap<u64, InboxEntry>,
    /// (scope, key, observation id) → seq: deposits are idempotent without a scan.
    inbox_ids: HashMap<(CallerScope, String, String), u64>,
    next_seq: u64,
    charges: HashMap<Key, GovernedCharge>,
    counters: HashMap<(CallerScope, String), i64>,
    audit: Vec<AuditEvent>,
    roots: HashMap<Key, RootRecord>,
    root_calls: std::collections::HashSet<(CallerScope, String, String)>,
    receipts: HashMap<(CallerScope, String, String), RootReceipt>,
}

/// Every governed port in one mutex, never held across an await.
#[derive(Default)]
pub struct MemoryGovernedStore {
    inner: Mutex<Inner>,
}

impl MemoryGovernedStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| StoreError::Backend("the in-memory store is poisoned".to_owned()))
    }
}

fn key(scope: &CallerScope, operation_key: &str) -> Key {
    (scope.clone(), operation_key.to_owned())
}

/// The counter names settlement moves and `peek` reads.
pub(crate) fn session_counter(session_id: &str) -> String {
    format!("session:{session_id}")
}

pub(crate) fn day_counter(day: &str) -> String {
    format!("day:{day}")
}

#[async_trait]
impl ExecutionStore for MemoryGovernedStore {
    async fn claim_execution(&self, record: &ExecutionRecord) -> StoreResult<Claim> {
        let mut inner = self.lock()?;
        let k = key(&record.scope, &record.operation_key);
        if let Some(existing) = inner.executions.get(&k) {
            return Ok(Claim::Existing(existing.clone()));
        }
        let mut stored = record.clone();
        stored.version = 1;
        inner.executions.insert(k, stored.clone());
        Ok(Claim::Claimed(stored))
    }

    async fn execution(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<ExecutionRecord>> {
        Ok(self
            .lock()?
            .executions
            .get(&key(scope, operation_key))
            .cloned())
    }

    async fn update_execution(
        &self,
        record: &ExecutionRecord,
        expected: u64,
    ) -> StoreResult<ExecutionRecord> {
        let mut inner = self.lock()?;
        let Some(stored) = inner
            .executions
            .get_mut(&key(&record.scope, &record.operation_key))
        else {
            return Err(StoreError::VersionConflict { current: None });
        };
        if stored.version != expected {
            return Err(StoreError::VersionConflict {
                current: Some(stored.version),
            });
        }
        stored.version = expected + 1;
        stored.status = record.status;
        stored.cause = record.cause;
        stored.lease_until = record.lease_until;
        stored.fence = record.fence;
        stored.meta = record.meta.clone();
        stored.updated_at = record.updated_at;
        Ok(stored.clone())
    }

    async fn overdue_executions(
        &self,
        scope: &CallerScope,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        let inner = self.lock()?;
        let mut overdue: Vec<_> = inner
            .executions
            .values()
            .filter(|r| {
                &r.scope == scope
                    && matches!(
                        r.status,
                        ExecutionStatus::Prepared | ExecutionStatus::Dispatching
                    )
                    && r.deadline_at <= now
            })
            .cloned()
            .collect();
        overdue.sort_by(|a, b| {
            (a.deadline_at, &a.operation_key).cmp(&(b.deadline_at, &b.operation_key))
        });
        overdue.truncate(limit as usize);
        Ok(overdue)
    }
}

#[async_trait]
impl ExecutionResultStore for MemoryGovernedStore {
    async fn reserve_result(&self, slot: &ResultSlot) -> StoreResult<Reservation> {
        let mut inner = self.lock()?;
        let k = key(&slot.scope, &slot.operation_key);
        if let Some(existing) = inner.results.get(&k) {
            return Ok(Reservation::Existing(existing.clone()));
        }
        let mut stored = slot.clone();
        stored.envelope = None;
        stored.erased_at = None;
        inner.results.insert(k, stored.clone());
        Ok(Reservation::Reserved(stored))
    }

    async fn result(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<ResultSlot>> {
        Ok(self
            .lock()?
            .results
            .get(&key(scope, operation_key))
            .cloned())
    }

    async fn store_envelope(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        envelope: &Value,
    ) -> StoreResult<ResultSlot> {
        let mut inner = self.lock()?;
        let slot = inner
            .results
            .get_mut(&key(scope, operation_key))
            .ok_or(StoreError::NotFound)?;
        if slot.envelope.is_none() && slot.erased_at.is_none() {
            slot.envelope = Some(envelope.clone());
        }
        Ok(slot.clone())
    }

    async fn erase_result(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let mut inner = self.lock()?;
        let Some(slot) = inner.results.get_mut(&key(scope, operation_key)) else {
            return Ok(false);
        };
        slot.envelope = None;
        slot.erased_at.get_or_insert(now);
        Ok(true)
    }
}

#[async_trait]
impl UsageInbox for MemoryGovernedStore {
    async fn deposit_usage(&self, observation: &UsageObservation) -> StoreResult<InboxEntry> {
        let mut inner = self.lock()?;
        let id = (
            observation.scope.clone(),
            observation.operation_key.clone(),
            observation.observation_id.clone(),
        );
        if let Some(existing) = inner
            .inbox_ids
            .get(&id)
            .and_then(|seq| inner.inbox.get(seq))
        {
            return Ok(existing.clone());
        }
        inner.next_seq += 1;
        let seq = inner.next_seq;
        inner.inbox_ids.insert(id, seq);
        let entry = InboxEntry {
            seq: inner.next_seq,
            observation: observation.clone(),
            acknowledged_at: None,
        };
        inner.inbox.insert(entry.seq, entry.clone());
        Ok(entry)
    }

    async fn pending_usage(
        &self,
        scope: &CallerScope,
        after: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<InboxEntry>> {
        let inner = self.lock()?;
        let start = after.map_or(0, |a| a.saturating_add(1));
        Ok(inner
            .inbox
            .range(start..)
            .map(|(_, e)| e)
            .filter(|e| &e.observation.scope == scope && e.acknowledged_at.is_none())
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn usage_for(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Vec<InboxEntry>> {
        let inner = self.lock()?;
        Ok(inner
            .inbox
            .values()
            .filter(|e| {
                &e.observation.scope == scope && e.observation.operation_key == operation_key
            })
            .cloned()
            .collect())
    }

    async fn acknowledge_usage(
        &self,
        scope: &CallerScope,
        seq: u64,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let mut inner = self.lock()?;
        match inner.inbox.get_mut(&seq) {
            Some(entry) if &entry.observation.scope == scope && entry.acknowledged_at.is_none() => {
                entry.acknowledged_at = Some(now);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[async_trait]
impl GovernedCostSettlementStore for MemoryGovernedStore {
    async fn settle(&self, charge: &GovernedCharge) -> StoreResult<Settlement> {
        let mut inner = self.lock()?;
        let k = key(&charge.scope, &charge.operation_key);
        if let Some(existing) = inner.charges.get(&k) {
            return Ok(Settlement {
                charge: existing.clone(),
                created: false,
            });
        }
        inner.charges.insert(k, charge.clone());
        for counter in [
            session_counter(&charge.session_id),
            day_counter(&charge.day),
        ] {
            let value = inner
                .counters
                .entry((charge.scope.clone(), counter))
                .or_default();
            *value = value.saturating_add(charge.amount_micros);
        }
        Ok(Settlement {
            charge: charge.clone(),
            created: true,
        })
    }

    async fn charge(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<GovernedCharge>> {
        Ok(self
            .lock()?
            .charges
            .get(&key(scope, operation_key))
            .cloned())
    }
}

#[async_trait]
impl SpendStore for MemoryGovernedStore {
    async fn peek(
        &self,
        scope: &CallerScope,
        session_id: &str,
        day: &str,
    ) -> StoreResult<SpendTotals> {
        let inner = self.lock()?;
        let read = |counter: String| {
            inner
                .counters
                .get(&(scope.clone(), counter))
                .copied()
                .unwrap_or(0)
        };
        Ok(SpendTotals {
            session_micros: read(session_counter(session_id)),
            day_micros: read(day_counter(day)),
        })
    }

    async fn add(
        &self,
        scope: &CallerScope,
        session_id: &str,
        day: &str,
        micros: i64,
    ) -> StoreResult<()> {
        let mut inner = self.lock()?;
        for counter in [session_counter(session_id), day_counter(day)] {
            let value = inner.counters.entry((scope.clone(), counter)).or_default();
            *value = value.saturating_add(micros);
        }
        Ok(())
    }
}

#[async_trait]
impl AuditLog for MemoryGovernedStore {
    async fn record(&self, event: &AuditEvent) -> StoreResult<()> {
        self.lock()?.audit.push(event.clone());
        Ok(())
    }

    async fn cost(&self, event: &AuditEvent) -> StoreResult<()> {
        let mut event = event.clone();
        event.kind = format!("cost:{}", event.kind);
        self.lock()?.audit.push(event);
        Ok(())
    }

    async fn events(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Vec<AuditEvent>> {
        Ok(self
            .lock()?
            .audit
            .iter()
            .filter(|e| &e.scope == scope && e.operation_key == operation_key)
            .cloned()
            .collect())
    }
}

#[async_trait]
impl OperationTreeStore for MemoryGovernedStore {
    async fn open_root(&self, root: &RootRecord) -> StoreResult<RootOpen> {
        let mut inner = self.lock()?;
        let k = key(&root.scope, &root.root_key);
        if let Some(existing) = inner.roots.get(&k) {
            return Ok(RootOpen::Existing(existing.clone()));
        }
        let mut stored = root.clone();
        stored.status = RootStatus::Active;
        stored.reserved_calls = 0;
        stored.settled_micros = 0;
        stored.receipts = 0;
        stored.closed_at = None;
        inner.roots.insert(k, stored.clone());
        Ok(RootOpen::Opened(stored))
    }

    async fn root(&self, scope: &CallerScope, root_key: &str) -> StoreResult<Option<RootRecord>> {
        Ok(self.lock()?.roots.get(&key(scope, root_key)).cloned())
    }

    async fn reserve_call(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<CallReservation> {
        let mut inner = self.lock()?;
        let call = (scope.clone(), root_key.to_owned(), operation_key.to_owned());
        let Some(root) = inner.roots.get(&key(scope, root_key)) else {
            return Ok(CallReservation::MissingRoot);
        };
        if inner.root_calls.contains(&call) {
            return Ok(CallReservation::AlreadyReserved);
        }
        if root.status != RootStatus::Active {
            return Ok(CallReservation::RootNotActive(root.status));
        }
        inner.root_calls.insert(call);
        if let Some(root) = inner.roots.get_mut(&key(scope, root_key)) {
            root.reserved_calls += 1;
        }
        Ok(CallReservation::Reserved)
    }

    async fn has_call(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<bool> {
        Ok(self.lock()?.root_calls.contains(&(
            scope.clone(),
            root_key.to_owned(),
            operation_key.to_owned(),
        )))
    }

    async fn close_root(
        &self,
        scope: &CallerScope,
        root_key: &str,
        now: Timestamp,
    ) -> StoreResult<Option<RootRecord>> {
        let mut inner = self.lock()?;
        let Some(root) = inner.roots.get_mut(&key(scope, root_key)) else {
            return Ok(None);
        };
        if root.status == RootStatus::Active {
            root.status = RootStatus::Closed;
            root.closed_at = Some(now);
        }
        Ok(Some(root.clone()))
    }

    async fn expire_roots(
        &self,
        scope: &CallerScope,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<RootRecord>> {
        let mut inner = self.lock()?;
        let mut due: Vec<_> = inner
            .roots
            .values()
            .filter(|r| &r.scope == scope && r.status == RootStatus::Active && r.deadline_at <= now)
            .map(|r| (r.deadline_at, r.root_key.clone()))
            .collect();
        due.sort();
        due.truncate(limit as usize);
        let mut expired = Vec::new();
        for (_, root_key) in due {
            if let Some(root) = inner.roots.get_mut(&key(scope, &root_key)) {
                root.status = RootStatus::Expired;
                root.closed_at = Some(now);
                expired.push(root.clone());
            }
        }
        Ok(expired)
    }
}

#[async_trait]
impl OperationAccountingStore for MemoryGovernedStore {
    async fn record_root_receipt(&self, receipt: &RootReceipt) -> StoreResult<(RootReceipt, bool)> {
        let mut inner = self.lock()?;
        let k = (
            receipt.scope.clone(),
            receipt.root_key.clone(),
            receipt.operation_key.clone(),
        );
        if let Some(existing) = inner.receipts.get(&k) {
            return Ok((existing.clone(), false));
        }
        let root = inner
            .roots
            .get_mut(&key(&receipt.scope, &receipt.root_key))
            .ok_or(StoreError::NotFound)?;
        root.settled_micros = root.settled_micros.saturating_add(receipt.amount_micros);
        root.receipts += 1;
        inner.receipts.insert(k, receipt.clone());
        Ok((receipt.clone(), true))
    }

    async fn root_receipt(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<Option<RootReceipt>> {
        Ok(self
            .lock()?
            .receipts
            .get(&(scope.clone(), root_key.to_owned(), operation_key.to_owned()))
            .cloned())
    }
}
