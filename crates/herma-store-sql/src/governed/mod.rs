//! The governed ports in SQL (migration 0006's tables).
//!
//! Every write that can race is one statement (`INSERT … ON CONFLICT DO NOTHING RETURNING`,
//! which reports the existing row when it inserts nothing, or a compare-and-set `UPDATE …
//! WHERE version = ? RETURNING`) or one transaction that writes a row and moves its counters.
//!
//! Locking: a write that must see a root's current state starts with a no-op `UPDATE` of the
//! root row (`SET status = status … RETURNING status`). In PostgreSQL that takes the row lock; in
//! SQLite the first write takes the database's write lock. Either way admission, closure and
//! receipts of one root are serialized, and the check and the write are one transaction.

mod rows;

use async_trait::async_trait;
use herma_core::{CallerScope, Timestamp};
use herma_store::governed::{
    AuditEvent, AuditLog, CallReservation, Claim, ExecutionRecord, ExecutionResultStore,
    ExecutionStore, GovernedCharge, GovernedCostSettlementStore, InboxEntry,
    OperationAccountingStore, OperationTreeStore, Reservation, ResultSlot, RootOpen, RootReceipt,
    RootRecord, RootStatus, Settlement, SpendStore, SpendTotals, UsageInbox, UsageObservation,
};
use herma_store::{StoreError, StoreResult};
use serde_json::Value;

use self::rows::{
    audit_from_row, charge_from_row, execution_from_row, inbox_from_row, root_from_row,
    root_receipt_from_row, slot_from_row,
};
use crate::{Backend, SqlRow, SqlStore, to_i64, to_json};

const EXECUTION_COLUMNS: &str = "caller_scope, operation_key, version, status, cause, \
    deadline_at, lease_until, fence, meta, created_at, updated_at";
const SLOT_COLUMNS: &str =
    "caller_scope, operation_key, expires_at, envelope, erased_at, created_at";
const INBOX_COLUMNS: &str = "seq, caller_scope, operation_key, observation_id, exact, usage, \
    observed_at, acknowledged_at";
const CHARGE_COLUMNS: &str =
    "caller_scope, operation_key, session_id, day, amount_micros, detail, settled_at";
const ROOT_COLUMNS: &str = "caller_scope, root_key, binding, status, deadline_at, \
    reserved_calls, settled_micros, receipts, created_at, closed_at";
const RECEIPT_COLUMNS: &str =
    "caller_scope, root_key, operation_key, amount_micros, detail, recorded_at";

fn session_counter(session_id: &str) -> String {
    format!("session:{session_id}")
}

fn day_counter(day: &str) -> String {
    format!("day:{day}")
}

/// Adds `micros` to the session and day counters, inside the caller's transaction.
async fn add_to_counters<B: Backend>(
    tx: &mut B::Tx,
    scope: &CallerScope,
    session_id: &str,
    day: &str,
    micros: i64,
) -> StoreResult<()> {
    let add = B::statement(
        "INSERT INTO governed_spend (caller_scope, counter, micros) VALUES (?, ?, ?)
         ON CONFLICT (caller_scope, counter)
         DO UPDATE SET micros = governed_spend.micros + excluded.micros",
    );
    for name in [session_counter(session_id), day_counter(day)] {
        let query = add.query().bind(scope.as_str()).bind(name).bind(micros);
        B::execute_in(tx, query).await?;
    }
    Ok(())
}

/// Takes the root's lock (a no-op write of its row) and returns its status, `None` when the
/// root does not exist. Nothing else admits, closes or expires it until the transaction ends.
async fn lock_root<B: Backend>(
    tx: &mut B::Tx,
    scope: &CallerScope,
    root_key: &str,
) -> StoreResult<Option<String>> {
    let lock = B::query(
        "UPDATE governed_roots SET status = status
         WHERE caller_scope = ? AND root_key = ? RETURNING status",
    )
    .bind(scope.as_str())
    .bind(root_key);
    B::fetch_in(tx, lock)
        .await?
        .first()
        .map(|row| row.text("status"))
        .transpose()
}

impl<B: Backend> SqlStore<B> {
    async fn select_inbox_entry(
        &self,
        observation: &UsageObservation,
    ) -> StoreResult<Option<InboxEntry>> {
        let sql = format!(
            "SELECT {INBOX_COLUMNS} FROM governed_usage_inbox
             WHERE caller_scope = ? AND operation_key = ? AND observation_id = ?"
        );
        let query = B::query(&sql)
            .bind(observation.scope.as_str())
            .bind(&observation.operation_key)
            .bind(&observation.observation_id);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| inbox_from_row(&row))
            .transpose()
    }

    async fn append_audit(&self, event: &AuditEvent, kind: &str) -> StoreResult<()> {
        let query = B::query(
            "INSERT INTO governed_audit (caller_scope, operation_key, kind, detail, at)
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(event.scope.as_str())
        .bind(&event.operation_key)
        .bind(kind)
        .bind(to_json(&event.detail)?)
        .bind(event.at.as_millis());
        self.db.execute(query).await?;
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> ExecutionStore for SqlStore<B> {
    async fn claim_execution(&self, record: &ExecutionRecord) -> StoreResult<Claim> {
        let sql = format!(
            "INSERT INTO governed_executions ({EXECUTION_COLUMNS})
             VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (caller_scope, operation_key) DO NOTHING
             RETURNING {EXECUTION_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(record.scope.as_str())
            .bind(&record.operation_key)
            .bind(record.status.as_str())
            .bind(record.cause.map(|c| c.as_str()))
            .bind(record.deadline_at.as_millis())
            .bind(record.lease_until.map(Timestamp::as_millis))
            .bind(to_i64(record.fence)?)
            .bind(to_json(&record.meta)?)
            .bind(record.created_at.as_millis())
            .bind(record.updated_at.as_millis());
        if let Some(row) = self.db.fetch_optional(query).await? {
            return Ok(Claim::Claimed(execution_from_row(&row)?));
        }
        self.execution(&record.scope, &record.operation_key)
            .await?
            .map(Claim::Existing)
            .ok_or_else(|| StoreError::Backend("a conflicting claim vanished".into()))
    }

    async fn execution(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<ExecutionRecord>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM governed_executions
             WHERE caller_scope = ? AND operation_key = ?"
        );
        let query = B::query(&sql).bind(scope.as_str()).bind(operation_key);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| execution_from_row(&row))
            .transpose()
    }

    async fn update_execution(
        &self,
        record: &ExecutionRecord,
        expected: u64,
    ) -> StoreResult<ExecutionRecord> {
        let sql = format!(
            "UPDATE governed_executions
             SET version = version + 1, status = ?, cause = ?, lease_until = ?,
                 fence = ?, meta = ?, updated_at = ?
             WHERE caller_scope = ? AND operation_key = ? AND version = ?
             RETURNING {EXECUTION_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(record.status.as_str())
            .bind(record.cause.map(|c| c.as_str()))
            .bind(record.lease_until.map(Timestamp::as_millis))
            .bind(to_i64(record.fence)?)
            .bind(to_json(&record.meta)?)
            .bind(record.updated_at.as_millis())
            .bind(record.scope.as_str())
            .bind(&record.operation_key)
            .bind(to_i64(expected)?);
        match self.db.fetch_optional(query).await? {
            Some(row) => execution_from_row(&row),
            None => Err(StoreError::VersionConflict {
                current: self
                    .execution(&record.scope, &record.operation_key)
                    .await?
                    .map(|r| r.version),
            }),
        }
    }

    async fn overdue_executions(
        &self,
        scope: &CallerScope,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM governed_executions
             WHERE caller_scope = ? AND status IN ('prepared', 'dispatching')
               AND deadline_at <= ?
             ORDER BY deadline_at, operation_key LIMIT ?"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(now.as_millis())
            .bind(i64::from(limit));
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(execution_from_row)
            .collect()
    }
}

#[async_trait]
impl<B: Backend> ExecutionResultStore for SqlStore<B> {
    async fn reserve_result(&self, slot: &ResultSlot) -> StoreResult<Reservation> {
        let sql = format!(
            "INSERT INTO governed_results ({SLOT_COLUMNS})
             VALUES (?, ?, ?, NULL, NULL, ?)
             ON CONFLICT (caller_scope, operation_key) DO NOTHING
             RETURNING {SLOT_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(slot.scope.as_str())
            .bind(&slot.operation_key)
            .bind(slot.expires_at.as_millis())
            .bind(slot.created_at.as_millis());
        if let Some(row) = self.db.fetch_optional(query).await? {
            return Ok(Reservation::Reserved(slot_from_row(&row)?));
        }
        self.result(&slot.scope, &slot.operation_key)
            .await?
            .map(Reservation::Existing)
            .ok_or_else(|| StoreError::Backend("a conflicting slot vanished".into()))
    }

    async fn result(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<ResultSlot>> {
        let sql = format!(
            "SELECT {SLOT_COLUMNS} FROM governed_results WHERE caller_scope = ? AND operation_key = ?"
        );
        let query = B::query(&sql).bind(scope.as_str()).bind(operation_key);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| slot_from_row(&row))
            .transpose()
    }

    async fn store_envelope(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        envelope: &Value,
    ) -> StoreResult<ResultSlot> {
        let query = B::query(
            "UPDATE governed_results SET envelope = ?
             WHERE caller_scope = ? AND operation_key = ?
               AND envelope IS NULL AND erased_at IS NULL",
        )
        .bind(to_json(envelope)?)
        .bind(scope.as_str())
        .bind(operation_key);
        self.db.execute(query).await?;
        self.result(scope, operation_key)
            .await?
            .ok_or(StoreError::NotFound)
    }

    async fn erase_result(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let query = B::query(
            "UPDATE governed_results
             SET envelope = NULL, erased_at = COALESCE(erased_at, ?)
             WHERE caller_scope = ? AND operation_key = ?",
        )
        .bind(now.as_millis())
        .bind(scope.as_str())
        .bind(operation_key);
        Ok(self.db.execute(query).await? > 0)
    }
}

#[async_trait]
impl<B: Backend> UsageInbox for SqlStore<B> {
    async fn deposit_usage(&self, observation: &UsageObservation) -> StoreResult<InboxEntry> {
        let sql = format!(
            "INSERT INTO governed_usage_inbox
               (caller_scope, operation_key, observation_id, exact, usage, observed_at)
             VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (caller_scope, operation_key, observation_id) DO NOTHING
             RETURNING {INBOX_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(observation.scope.as_str())
            .bind(&observation.operation_key)
            .bind(&observation.observation_id)
            .bind(i64::from(observation.exact))
            .bind(to_json(&observation.usage)?)
            .bind(observation.observed_at.as_millis());
        if let Some(row) = self.db.fetch_optional(query).await? {
            return inbox_from_row(&row);
        }
        self.select_inbox_entry(observation)
            .await?
            .ok_or_else(|| StoreError::Backend("a conflicting entry vanished".into()))
    }

    async fn pending_usage(
        &self,
        scope: &CallerScope,
        after: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<InboxEntry>> {
        let sql = format!(
            "SELECT {INBOX_COLUMNS} FROM governed_usage_inbox
             WHERE caller_scope = ? AND acknowledged_at IS NULL AND seq > ?
             ORDER BY seq LIMIT ?"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(after.map(to_i64).transpose()?.unwrap_or(0))
            .bind(i64::from(limit));
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(inbox_from_row)
            .collect()
    }

    async fn usage_for(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Vec<InboxEntry>> {
        let sql = format!(
            "SELECT {INBOX_COLUMNS} FROM governed_usage_inbox
             WHERE caller_scope = ? AND operation_key = ? ORDER BY seq"
        );
        let query = B::query(&sql).bind(scope.as_str()).bind(operation_key);
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(inbox_from_row)
            .collect()
    }

    async fn acknowledge_usage(
        &self,
        scope: &CallerScope,
        seq: u64,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let query = B::query(
            "UPDATE governed_usage_inbox SET acknowledged_at = ?
             WHERE caller_scope = ? AND seq = ? AND acknowledged_at IS NULL",
        )
        .bind(now.as_millis())
        .bind(scope.as_str())
        .bind(to_i64(seq)?);
        Ok(self.db.execute(query).await? > 0)
    }
}

#[async_trait]
impl<B: Backend> GovernedCostSettlementStore for SqlStore<B> {
    async fn settle(&self, charge: &GovernedCharge) -> StoreResult<Settlement> {
        let mut tx = self.db.begin().await?;
        let sql = format!(
            "INSERT INTO governed_charges ({CHARGE_COLUMNS})
             VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (caller_scope, operation_key) DO NOTHING
             RETURNING {CHARGE_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(charge.scope.as_str())
            .bind(&charge.operation_key)
            .bind(&charge.session_id)
            .bind(&charge.day)
            .bind(charge.amount_micros)
            .bind(to_json(&charge.detail)?)
            .bind(charge.settled_at.as_millis());
        let Some(row) = B::fetch_in(&mut tx, query).await?.into_iter().next() else {
            B::rollback(tx).await?;
            let existing = self
                .charge(&charge.scope, &charge.operation_key)
                .await?
                .ok_or_else(|| StoreError::Backend("a conflicting charge vanished".into()))?;
            return Ok(Settlement {
                charge: existing,
                created: false,
            });
        };
        add_to_counters::<B>(
            &mut tx,
            &charge.scope,
            &charge.session_id,
            &charge.day,
            charge.amount_micros,
        )
        .await?;
        let stored = charge_from_row(&row)?;
        B::commit(tx).await?;
        Ok(Settlement {
            charge: stored,
            created: true,
        })
    }

    async fn charge(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Option<GovernedCharge>> {
        let sql = format!(
            "SELECT {CHARGE_COLUMNS} FROM governed_charges
             WHERE caller_scope = ? AND operation_key = ?"
        );
        let query = B::query(&sql).bind(scope.as_str()).bind(operation_key);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| charge_from_row(&row))
            .transpose()
    }
}

#[async_trait]
impl<B: Backend> SpendStore for SqlStore<B> {
    async fn peek(
        &self,
        scope: &CallerScope,
        session_id: &str,
        day: &str,
    ) -> StoreResult<SpendTotals> {
        let session = session_counter(session_id);
        let day = day_counter(day);
        let query = B::query(
            "SELECT counter, micros FROM governed_spend
             WHERE caller_scope = ? AND counter IN (?, ?)",
        )
        .bind(scope.as_str())
        .bind(&session)
        .bind(&day);
        let mut totals = SpendTotals::default();
        for row in self.db.fetch(query).await? {
            let name = row.text("counter")?;
            let micros = row.int("micros")?;
            if name == session {
                totals.session_micros = micros;
            }
            if name == day {
                totals.day_micros = micros;
            }
        }
        Ok(totals)
    }

    async fn add(
        &self,
        scope: &CallerScope,
        session_id: &str,
        day: &str,
        micros: i64,
    ) -> StoreResult<()> {
        let mut tx = self.db.begin().await?;
        add_to_counters::<B>(&mut tx, scope, session_id, day, micros).await?;
        B::commit(tx).await
    }
}

#[async_trait]
impl<B: Backend> AuditLog for SqlStore<B> {
    async fn record(&self, event: &AuditEvent) -> StoreResult<()> {
        self.append_audit(event, &event.kind).await
    }

    async fn cost(&self, event: &AuditEvent) -> StoreResult<()> {
        self.append_audit(event, &format!("cost:{}", event.kind))
            .await
    }

    async fn events(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> StoreResult<Vec<AuditEvent>> {
        let query = B::query(
            "SELECT caller_scope, operation_key, kind, detail, at FROM governed_audit
             WHERE caller_scope = ? AND operation_key = ? ORDER BY seq",
        )
        .bind(scope.as_str())
        .bind(operation_key);
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(audit_from_row)
            .collect()
    }
}

/// Whether `operation_key` is a reserved call of the root.
const HAS_CALL: &str = "SELECT 1 FROM governed_root_calls
     WHERE caller_scope = ? AND root_key = ? AND operation_key = ?";

#[async_trait]
impl<B: Backend> OperationTreeStore for SqlStore<B> {
    async fn open_root(&self, root: &RootRecord) -> StoreResult<RootOpen> {
        let sql = format!(
            "INSERT INTO governed_roots ({ROOT_COLUMNS})
             VALUES (?, ?, ?, 'active', ?, 0, 0, 0, ?, NULL)
             ON CONFLICT (caller_scope, root_key) DO NOTHING
             RETURNING {ROOT_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(root.scope.as_str())
            .bind(&root.root_key)
            .bind(to_json(&root.binding)?)
            .bind(root.deadline_at.as_millis())
            .bind(root.created_at.as_millis());
        if let Some(row) = self.db.fetch_optional(query).await? {
            return Ok(RootOpen::Opened(root_from_row(&row)?));
        }
        self.root(&root.scope, &root.root_key)
            .await?
            .map(RootOpen::Existing)
            .ok_or_else(|| StoreError::Backend("a conflicting root vanished".into()))
    }

    async fn root(&self, scope: &CallerScope, root_key: &str) -> StoreResult<Option<RootRecord>> {
        let sql = format!(
            "SELECT {ROOT_COLUMNS} FROM governed_roots WHERE caller_scope = ? AND root_key = ?"
        );
        let query = B::query(&sql).bind(scope.as_str()).bind(root_key);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| root_from_row(&row))
            .transpose()
    }

    async fn reserve_call(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<CallReservation> {
        let mut tx = self.db.begin().await?;
        let Some(status) = lock_root::<B>(&mut tx, scope, root_key).await? else {
            return Ok(CallReservation::MissingRoot);
        };
        let exists = B::query(HAS_CALL)
            .bind(scope.as_str())
            .bind(root_key)
            .bind(operation_key);
        if !B::fetch_in(&mut tx, exists).await?.is_empty() {
            return Ok(CallReservation::AlreadyReserved);
        }
        let status =
            RootStatus::parse(&status).ok_or_else(|| StoreError::Corrupt("root status".into()))?;
        if status != RootStatus::Active {
            return Ok(CallReservation::RootNotActive(status));
        }
        let insert = B::query(
            "INSERT INTO governed_root_calls (caller_scope, root_key, operation_key)
             VALUES (?, ?, ?)",
        )
        .bind(scope.as_str())
        .bind(root_key)
        .bind(operation_key);
        B::execute_in(&mut tx, insert).await?;
        let count = B::query(
            "UPDATE governed_roots SET reserved_calls = reserved_calls + 1
             WHERE caller_scope = ? AND root_key = ?",
        )
        .bind(scope.as_str())
        .bind(root_key);
        B::execute_in(&mut tx, count).await?;
        B::commit(tx).await?;
        Ok(CallReservation::Reserved)
    }

    async fn has_call(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<bool> {
        let query = B::query(HAS_CALL)
            .bind(scope.as_str())
            .bind(root_key)
            .bind(operation_key);
        Ok(!self.db.fetch(query).await?.is_empty())
    }

    async fn close_root(
        &self,
        scope: &CallerScope,
        root_key: &str,
        now: Timestamp,
    ) -> StoreResult<Option<RootRecord>> {
        let query = B::query(
            "UPDATE governed_roots SET status = 'closed', closed_at = ?
             WHERE caller_scope = ? AND root_key = ? AND status = 'active'",
        )
        .bind(now.as_millis())
        .bind(scope.as_str())
        .bind(root_key);
        self.db.execute(query).await?;
        self.root(scope, root_key).await
    }

    async fn expire_roots(
        &self,
        scope: &CallerScope,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<RootRecord>> {
        let sql = format!(
            "UPDATE governed_roots SET status = 'expired', closed_at = ?
             WHERE caller_scope = ? AND status = 'active' AND root_key IN (
               SELECT root_key FROM governed_roots
               WHERE caller_scope = ? AND status = 'active' AND deadline_at <= ?
               ORDER BY deadline_at, root_key LIMIT ?)
             RETURNING {ROOT_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(now.as_millis())
            .bind(scope.as_str())
            .bind(scope.as_str())
            .bind(now.as_millis())
            .bind(i64::from(limit));
        let mut roots = self
            .db
            .fetch(query)
            .await?
            .iter()
            .map(root_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        roots.sort_by(|a, b| (a.deadline_at, &a.root_key).cmp(&(b.deadline_at, &b.root_key)));
        Ok(roots)
    }
}

#[async_trait]
impl<B: Backend> OperationAccountingStore for SqlStore<B> {
    async fn record_root_receipt(&self, receipt: &RootReceipt) -> StoreResult<(RootReceipt, bool)> {
        let mut tx = self.db.begin().await?;
        if lock_root::<B>(&mut tx, &receipt.scope, &receipt.root_key)
            .await?
            .is_none()
        {
            return Err(StoreError::NotFound);
        }
        let sql = format!(
            "INSERT INTO governed_root_receipts ({RECEIPT_COLUMNS})
             VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (caller_scope, root_key, operation_key) DO NOTHING
             RETURNING {RECEIPT_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(receipt.scope.as_str())
            .bind(&receipt.root_key)
            .bind(&receipt.operation_key)
            .bind(receipt.amount_micros)
            .bind(to_json(&receipt.detail)?)
            .bind(receipt.recorded_at.as_millis());
        let Some(row) = B::fetch_in(&mut tx, query).await?.into_iter().next() else {
            B::rollback(tx).await?;
            let existing = self
                .root_receipt(&receipt.scope, &receipt.root_key, &receipt.operation_key)
                .await?
                .ok_or_else(|| StoreError::Backend("a conflicting receipt vanished".into()))?;
            return Ok((existing, false));
        };
        let add = B::query(
            "UPDATE governed_roots
             SET settled_micros = settled_micros + ?, receipts = receipts + 1
             WHERE caller_scope = ? AND root_key = ?",
        )
        .bind(receipt.amount_micros)
        .bind(receipt.scope.as_str())
        .bind(&receipt.root_key);
        B::execute_in(&mut tx, add).await?;
        let stored = root_receipt_from_row(&row)?;
        B::commit(tx).await?;
        Ok((stored, true))
    }

    async fn root_receipt(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> StoreResult<Option<RootReceipt>> {
        let sql = format!(
            "SELECT {RECEIPT_COLUMNS} FROM governed_root_receipts
             WHERE caller_scope = ? AND root_key = ? AND operation_key = ?"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(root_key)
            .bind(operation_key);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| root_receipt_from_row(&row))
            .transpose()
    }
}
