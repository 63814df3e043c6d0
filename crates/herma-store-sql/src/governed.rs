//! The governed ports in SQL, once for both backends.
//!
//! SQLite and PostgreSQL accept the same statements here (`ON CONFLICT … DO NOTHING RETURNING`,
//! `UPDATE … RETURNING`, `LIMIT`); only the placeholders differ, so [`governed_sql_impl!`]
//! expands one body per backend with a function that rewrites `?` into `$n` for PostgreSQL.
//!
//! Locking: a write that must see a root's current state starts with a no-op `UPDATE` of the
//! root row (`SET status = status … RETURNING status`). In PostgreSQL that takes the row lock; in
//! SQLite the first write takes the database's write lock. Either way admission, closure and
//! receipts of one root are serialized, and the check and the write are one transaction.

use herma_core::Timestamp;
use herma_store::StoreResult;
use herma_store::governed::{
    AuditEvent, ExecutionRecord, ExecutionStatus, GovernedCharge, InboxEntry, NotDispatchedCause,
    ResultSlot, RootReceipt, RootRecord, RootStatus, UsageObservation,
};
use serde_json::Value;

use crate::{SqlRow, corrupt, scope, time, to_u64};

/// `?` placeholders as PostgreSQL's `$1, $2, …` (no statement here has a literal `?`).
pub fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// `?` placeholders as they are (SQLite).
pub fn plain(sql: &str) -> String {
    sql.to_owned()
}

fn json(row: &impl SqlRow, column: &str) -> StoreResult<Value> {
    serde_json::from_str(&row.text(column)?).map_err(|e| corrupt(&format!("{column}: {e}")))
}

fn opt_time(row: &impl SqlRow, column: &str) -> StoreResult<Option<Timestamp>> {
    Ok(row.opt_int(column)?.map(Timestamp::from_millis))
}

pub fn execution_from_row(row: &impl SqlRow) -> StoreResult<ExecutionRecord> {
    let cause = row
        .opt_text("cause")?
        .map(|c| NotDispatchedCause::parse(&c).ok_or_else(|| corrupt("cause")))
        .transpose()?;
    Ok(ExecutionRecord {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        version: to_u64(row.int("version")?)?,
        status: ExecutionStatus::parse(&row.text("status")?).ok_or_else(|| corrupt("status"))?,
        cause,
        deadline_at: time(row, "deadline_at")?,
        lease_until: opt_time(row, "lease_until")?,
        fence: to_u64(row.int("fence")?)?,
        meta: json(row, "meta")?,
        created_at: time(row, "created_at")?,
        updated_at: time(row, "updated_at")?,
    })
}

pub fn slot_from_row(row: &impl SqlRow) -> StoreResult<ResultSlot> {
    Ok(ResultSlot {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        expires_at: time(row, "expires_at")?,
        envelope: row
            .opt_text("envelope")?
            .map(|e| serde_json::from_str(&e).map_err(|e| corrupt(&format!("envelope: {e}"))))
            .transpose()?,
        erased_at: opt_time(row, "erased_at")?,
        created_at: time(row, "created_at")?,
    })
}

pub fn inbox_from_row(row: &impl SqlRow) -> StoreResult<InboxEntry> {
    Ok(InboxEntry {
        seq: to_u64(row.int("seq")?)?,
        observation: UsageObservation {
            scope: scope(row)?,
            operation_key: row.text("operation_key")?,
            observation_id: row.text("observation_id")?,
            exact: row.int("exact")? != 0,
            usage: json(row, "usage")?,
            observed_at: time(row, "observed_at")?,
        },
        acknowledged_at: opt_time(row, "acknowledged_at")?,
    })
}

pub fn charge_from_row(row: &impl SqlRow) -> StoreResult<GovernedCharge> {
    Ok(GovernedCharge {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        session_id: row.text("session_id")?,
        day: row.text("day")?,
        amount_micros: row.int("amount_micros")?,
        detail: json(row, "detail")?,
        settled_at: time(row, "settled_at")?,
    })
}

pub fn audit_from_row(row: &impl SqlRow) -> StoreResult<AuditEvent> {
    Ok(AuditEvent {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        kind: row.text("kind")?,
        detail: json(row, "detail")?,
        at: time(row, "at")?,
    })
}

pub fn root_from_row(row: &impl SqlRow) -> StoreResult<RootRecord> {
    Ok(RootRecord {
        scope: scope(row)?,
        root_key: row.text("root_key")?,
        binding: json(row, "binding")?,
        status: RootStatus::parse(&row.text("status")?).ok_or_else(|| corrupt("root status"))?,
        deadline_at: time(row, "deadline_at")?,
        reserved_calls: to_u64(row.int("reserved_calls")?)?,
        settled_micros: row.int("settled_micros")?,
        receipts: to_u64(row.int("receipts")?)?,
        created_at: time(row, "created_at")?,
        closed_at: opt_time(row, "closed_at")?,
    })
}

pub fn root_receipt_from_row(row: &impl SqlRow) -> StoreResult<RootReceipt> {
    Ok(RootReceipt {
        scope: scope(row)?,
        root_key: row.text("root_key")?,
        operation_key: row.text("operation_key")?,
        amount_micros: row.int("amount_micros")?,
        detail: json(row, "detail")?,
        recorded_at: time(row, "recorded_at")?,
    })
}

/// Implements every governed port for `$store` (a struct with a `pool` field of database
/// `$db`), turning each statement's `?` placeholders with `$sql` ([`plain`] or [`numbered`]).
#[macro_export]
macro_rules! governed_sql_impl {
    ($store:ty, $db:ty, $sql:path) => {
        mod governed_impl {
            use async_trait::async_trait;
            use herma_core::{CallerScope, Timestamp};
            use herma_store::governed::{
                AuditEvent, AuditLog, CallReservation, Claim, ExecutionRecord,
                ExecutionResultStore, ExecutionStore, GovernedCharge, GovernedCostSettlementStore,
                InboxEntry, OperationAccountingStore, OperationTreeStore, Reservation,
                ResultSlot, RootOpen, RootReceipt, RootRecord, RootStatus, Settlement,
                SpendStore, SpendTotals, UsageInbox, UsageObservation,
            };
            use herma_store::{StoreError, StoreResult};
            use herma_store_sql::governed::{
                audit_from_row, charge_from_row, execution_from_row, inbox_from_row,
                root_from_row, root_receipt_from_row, slot_from_row,
            };
            use herma_store_sql::{backend, to_i64, to_json};
            use serde_json::Value;
            use sqlx::Row;

            use super::*;

            fn q(sql: &str) -> String {
                $sql(sql)
            }

            const EXECUTION_COLUMNS: &str = "caller_scope, operation_key, version, status, cause, deadline_at, lease_until, fence, meta, created_at, updated_at";
            const SLOT_COLUMNS: &str =
                "caller_scope, operation_key, expires_at, envelope, erased_at, created_at";
            const INBOX_COLUMNS: &str = "seq, caller_scope, operation_key, observation_id, exact, usage, observed_at, acknowledged_at";
            const CHARGE_COLUMNS: &str = "caller_scope, operation_key, session_id, day, amount_micros, detail, settled_at";
            const ROOT_COLUMNS: &str = "caller_scope, root_key, binding, status, deadline_at, reserved_calls, settled_micros, receipts, created_at, closed_at";
            const RECEIPT_COLUMNS: &str =
                "caller_scope, root_key, operation_key, amount_micros, detail, recorded_at";

            fn session_counter(session_id: &str) -> String {
                format!("session:{session_id}")
            }

            fn day_counter(day: &str) -> String {
                format!("day:{day}")
            }

            /// Adds `micros` to the session and day counters, inside the caller's transaction.
            async fn add_to_counters(
                tx: &mut sqlx::Transaction<'_, $db>,
                scope: &CallerScope,
                session_id: &str,
                day: &str,
                micros: i64,
            ) -> StoreResult<()> {
                let counter = q(
                    "INSERT INTO governed_spend (caller_scope, counter, micros) VALUES (?, ?, ?)
                     ON CONFLICT (caller_scope, counter)
                     DO UPDATE SET micros = governed_spend.micros + excluded.micros",
                );
                for name in [session_counter(session_id), day_counter(day)] {
                    sqlx::query(&counter)
                        .bind(scope.as_str())
                        .bind(name)
                        .bind(micros)
                        .execute(&mut **tx)
                        .await
                        .map_err(backend)?;
                }
                Ok(())
            }

            /// Takes the root's lock (a no-op write of its row) and returns its status, `None`
            /// when the root does not exist. Nothing else admits, closes or expires it until
            /// the transaction ends.
            async fn lock_root(
                tx: &mut sqlx::Transaction<'_, $db>,
                scope: &CallerScope,
                root_key: &str,
            ) -> StoreResult<Option<String>> {
                let lock = q(
                    "UPDATE governed_roots SET status = status
                     WHERE caller_scope = ? AND root_key = ? RETURNING status",
                );
                sqlx::query_scalar(&lock)
                    .bind(scope.as_str())
                    .bind(root_key)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(backend)
            }

            impl $store {
                async fn select_execution(
                    &self,
                    scope: &CallerScope,
                    key: &str,
                ) -> StoreResult<Option<ExecutionRecord>> {
                    let sql = q(&format!(
                        "SELECT {EXECUTION_COLUMNS} FROM governed_executions WHERE caller_scope = ? AND operation_key = ?"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(key)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?
                        .map(|row| execution_from_row(&row))
                        .transpose()
                }

                async fn select_slot(
                    &self,
                    scope: &CallerScope,
                    key: &str,
                ) -> StoreResult<Option<ResultSlot>> {
                    let sql = q(&format!(
                        "SELECT {SLOT_COLUMNS} FROM governed_results WHERE caller_scope = ? AND operation_key = ?"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(key)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?
                        .map(|row| slot_from_row(&row))
                        .transpose()
                }

                async fn select_inbox_entry(
                    &self,
                    observation: &UsageObservation,
                ) -> StoreResult<Option<InboxEntry>> {
                    let sql = q(&format!(
                        "SELECT {INBOX_COLUMNS} FROM governed_usage_inbox
                         WHERE caller_scope = ? AND operation_key = ? AND observation_id = ?"
                    ));
                    sqlx::query(&sql)
                        .bind(observation.scope.as_str())
                        .bind(&observation.operation_key)
                        .bind(&observation.observation_id)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?
                        .map(|row| inbox_from_row(&row))
                        .transpose()
                }

                async fn select_root(
                    &self,
                    scope: &CallerScope,
                    root_key: &str,
                ) -> StoreResult<Option<RootRecord>> {
                    let sql = q(&format!(
                        "SELECT {ROOT_COLUMNS} FROM governed_roots WHERE caller_scope = ? AND root_key = ?"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(root_key)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?
                        .map(|row| root_from_row(&row))
                        .transpose()
                }
            }

            #[async_trait]
            impl ExecutionStore for $store {
                async fn claim_execution(&self, record: &ExecutionRecord) -> StoreResult<Claim> {
                    let sql = q(&format!(
                        "INSERT INTO governed_executions ({EXECUTION_COLUMNS})
                         VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
                         ON CONFLICT (caller_scope, operation_key) DO NOTHING
                         RETURNING {EXECUTION_COLUMNS}"
                    ));
                    let inserted = sqlx::query(&sql)
                        .bind(record.scope.as_str())
                        .bind(&record.operation_key)
                        .bind(record.status.as_str())
                        .bind(record.cause.map(|c| c.as_str()))
                        .bind(record.deadline_at.as_millis())
                        .bind(record.lease_until.map(Timestamp::as_millis))
                        .bind(to_i64(record.fence)?)
                        .bind(to_json(&record.meta)?)
                        .bind(record.created_at.as_millis())
                        .bind(record.updated_at.as_millis())
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?;
                    if let Some(row) = inserted {
                        return Ok(Claim::Claimed(execution_from_row(&row)?));
                    }
                    self.select_execution(&record.scope, &record.operation_key)
                        .await?
                        .map(Claim::Existing)
                        .ok_or_else(|| StoreError::Backend("a conflicting claim vanished".into()))
                }

                async fn execution(
                    &self,
                    scope: &CallerScope,
                    operation_key: &str,
                ) -> StoreResult<Option<ExecutionRecord>> {
                    self.select_execution(scope, operation_key).await
                }

                async fn update_execution(
                    &self,
                    record: &ExecutionRecord,
                    expected: u64,
                ) -> StoreResult<ExecutionRecord> {
                    let sql = q(&format!(
                        "UPDATE governed_executions
                         SET version = version + 1, status = ?, cause = ?, lease_until = ?,
                             fence = ?, meta = ?, updated_at = ?
                         WHERE caller_scope = ? AND operation_key = ? AND version = ?
                         RETURNING {EXECUTION_COLUMNS}"
                    ));
                    let row = sqlx::query(&sql)
                        .bind(record.status.as_str())
                        .bind(record.cause.map(|c| c.as_str()))
                        .bind(record.lease_until.map(Timestamp::as_millis))
                        .bind(to_i64(record.fence)?)
                        .bind(to_json(&record.meta)?)
                        .bind(record.updated_at.as_millis())
                        .bind(record.scope.as_str())
                        .bind(&record.operation_key)
                        .bind(to_i64(expected)?)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?;
                    match row {
                        Some(row) => execution_from_row(&row),
                        None => Err(StoreError::VersionConflict {
                            current: self
                                .select_execution(&record.scope, &record.operation_key)
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
                    let sql = q(&format!(
                        "SELECT {EXECUTION_COLUMNS} FROM governed_executions
                         WHERE caller_scope = ? AND status IN ('prepared', 'dispatching')
                           AND deadline_at <= ?
                         ORDER BY deadline_at, operation_key LIMIT ?"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(now.as_millis())
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend)?
                        .iter()
                        .map(execution_from_row)
                        .collect()
                }
            }

            #[async_trait]
            impl ExecutionResultStore for $store {
                async fn reserve_result(&self, slot: &ResultSlot) -> StoreResult<Reservation> {
                    let sql = q(&format!(
                        "INSERT INTO governed_results ({SLOT_COLUMNS})
                         VALUES (?, ?, ?, NULL, NULL, ?)
                         ON CONFLICT (caller_scope, operation_key) DO NOTHING
                         RETURNING {SLOT_COLUMNS}"
                    ));
                    let inserted = sqlx::query(&sql)
                        .bind(slot.scope.as_str())
                        .bind(&slot.operation_key)
                        .bind(slot.expires_at.as_millis())
                        .bind(slot.created_at.as_millis())
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?;
                    if let Some(row) = inserted {
                        return Ok(Reservation::Reserved(slot_from_row(&row)?));
                    }
                    self.select_slot(&slot.scope, &slot.operation_key)
                        .await?
                        .map(Reservation::Existing)
                        .ok_or_else(|| StoreError::Backend("a conflicting slot vanished".into()))
                }

                async fn result(
                    &self,
                    scope: &CallerScope,
                    operation_key: &str,
                ) -> StoreResult<Option<ResultSlot>> {
                    self.select_slot(scope, operation_key).await
                }

                async fn store_envelope(
                    &self,
                    scope: &CallerScope,
                    operation_key: &str,
                    envelope: &Value,
                ) -> StoreResult<ResultSlot> {
                    let sql = q(
                        "UPDATE governed_results SET envelope = ?
                         WHERE caller_scope = ? AND operation_key = ?
                           AND envelope IS NULL AND erased_at IS NULL",
                    );
                    sqlx::query(&sql)
                        .bind(to_json(envelope)?)
                        .bind(scope.as_str())
                        .bind(operation_key)
                        .execute(&self.pool)
                        .await
                        .map_err(backend)?;
                    self.select_slot(scope, operation_key)
                        .await?
                        .ok_or(StoreError::NotFound)
                }

                async fn erase_result(
                    &self,
                    scope: &CallerScope,
                    operation_key: &str,
                    now: Timestamp,
                ) -> StoreResult<bool> {
                    let sql = q(
                        "UPDATE governed_results
                         SET envelope = NULL, erased_at = COALESCE(erased_at, ?)
                         WHERE caller_scope = ? AND operation_key = ?",
                    );
                    let done = sqlx::query(&sql)
                        .bind(now.as_millis())
                        .bind(scope.as_str())
                        .bind(operation_key)
                        .execute(&self.pool)
                        .await
                        .map_err(backend)?;
                    Ok(done.rows_affected() > 0)
                }
            }

            #[async_trait]
            impl UsageInbox for $store {
                async fn deposit_usage(
                    &self,
                    observation: &UsageObservation,
                ) -> StoreResult<InboxEntry> {
                    let sql = q(&format!(
                        "INSERT INTO governed_usage_inbox
                           (caller_scope, operation_key, observation_id, exact, usage, observed_at)
                         VALUES (?, ?, ?, ?, ?, ?)
                         ON CONFLICT (caller_scope, operation_key, observation_id) DO NOTHING
                         RETURNING {INBOX_COLUMNS}"
                    ));
                    let inserted = sqlx::query(&sql)
                        .bind(observation.scope.as_str())
                        .bind(&observation.operation_key)
                        .bind(&observation.observation_id)
                        .bind(i64::from(observation.exact))
                        .bind(to_json(&observation.usage)?)
                        .bind(observation.observed_at.as_millis())
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?;
                    if let Some(row) = inserted {
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
                    let sql = q(&format!(
                        "SELECT {INBOX_COLUMNS} FROM governed_usage_inbox
                         WHERE caller_scope = ? AND acknowledged_at IS NULL AND seq > ?
                         ORDER BY seq LIMIT ?"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(after.map(to_i64).transpose()?.unwrap_or(0))
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend)?
                        .iter()
                        .map(inbox_from_row)
                        .collect()
                }

                async fn usage_for(
                    &self,
                    scope: &CallerScope,
                    operation_key: &str,
                ) -> StoreResult<Vec<InboxEntry>> {
                    let sql = q(&format!(
                        "SELECT {INBOX_COLUMNS} FROM governed_usage_inbox
                         WHERE caller_scope = ? AND operation_key = ? ORDER BY seq"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(operation_key)
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend)?
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
                    let sql = q(
                        "UPDATE governed_usage_inbox SET acknowledged_at = ?
                         WHERE caller_scope = ? AND seq = ? AND acknowledged_at IS NULL",
                    );
                    let done = sqlx::query(&sql)
                        .bind(now.as_millis())
                        .bind(scope.as_str())
                        .bind(to_i64(seq)?)
                        .execute(&self.pool)
                        .await
                        .map_err(backend)?;
                    Ok(done.rows_affected() > 0)
                }
            }

            #[async_trait]
            impl GovernedCostSettlementStore for $store {
                async fn settle(&self, charge: &GovernedCharge) -> StoreResult<Settlement> {
                    let mut tx = self.pool.begin().await.map_err(backend)?;
                    let sql = q(&format!(
                        "INSERT INTO governed_charges ({CHARGE_COLUMNS})
                         VALUES (?, ?, ?, ?, ?, ?, ?)
                         ON CONFLICT (caller_scope, operation_key) DO NOTHING
                         RETURNING {CHARGE_COLUMNS}"
                    ));
                    let inserted = sqlx::query(&sql)
                        .bind(charge.scope.as_str())
                        .bind(&charge.operation_key)
                        .bind(&charge.session_id)
                        .bind(&charge.day)
                        .bind(charge.amount_micros)
                        .bind(to_json(&charge.detail)?)
                        .bind(charge.settled_at.as_millis())
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(backend)?;
                    let Some(row) = inserted else {
                        tx.rollback().await.map_err(backend)?;
                        let sql = q(&format!(
                            "SELECT {CHARGE_COLUMNS} FROM governed_charges
                             WHERE caller_scope = ? AND operation_key = ?"
                        ));
                        let row = sqlx::query(&sql)
                            .bind(charge.scope.as_str())
                            .bind(&charge.operation_key)
                            .fetch_one(&self.pool)
                            .await
                            .map_err(backend)?;
                        return Ok(Settlement {
                            charge: charge_from_row(&row)?,
                            created: false,
                        });
                    };
                    add_to_counters(
                        &mut tx,
                        &charge.scope,
                        &charge.session_id,
                        &charge.day,
                        charge.amount_micros,
                    )
                    .await?;
                    let stored = charge_from_row(&row)?;
                    tx.commit().await.map_err(backend)?;
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
                    let sql = q(&format!(
                        "SELECT {CHARGE_COLUMNS} FROM governed_charges
                         WHERE caller_scope = ? AND operation_key = ?"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(operation_key)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?
                        .map(|row| charge_from_row(&row))
                        .transpose()
                }
            }

            #[async_trait]
            impl SpendStore for $store {
                async fn peek(
                    &self,
                    scope: &CallerScope,
                    session_id: &str,
                    day: &str,
                ) -> StoreResult<SpendTotals> {
                    let sql = q(
                        "SELECT counter, micros FROM governed_spend
                         WHERE caller_scope = ? AND counter IN (?, ?)",
                    );
                    let session = session_counter(session_id);
                    let day = day_counter(day);
                    let rows = sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(&session)
                        .bind(&day)
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend)?;
                    let mut totals = SpendTotals::default();
                    for row in rows {
                        let name: String = row.try_get("counter").map_err(backend)?;
                        let micros: i64 = row.try_get("micros").map_err(backend)?;
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
                    let mut tx = self.pool.begin().await.map_err(backend)?;
                    add_to_counters(&mut tx, scope, session_id, day, micros).await?;
                    tx.commit().await.map_err(backend)
                }
            }

            impl $store {
                async fn append_audit(&self, event: &AuditEvent, kind: &str) -> StoreResult<()> {
                    let sql = q(
                        "INSERT INTO governed_audit (caller_scope, operation_key, kind, detail, at)
                         VALUES (?, ?, ?, ?, ?)",
                    );
                    sqlx::query(&sql)
                        .bind(event.scope.as_str())
                        .bind(&event.operation_key)
                        .bind(kind)
                        .bind(to_json(&event.detail)?)
                        .bind(event.at.as_millis())
                        .execute(&self.pool)
                        .await
                        .map_err(backend)?;
                    Ok(())
                }
            }

            #[async_trait]
            impl AuditLog for $store {
                async fn record(&self, event: &AuditEvent) -> StoreResult<()> {
                    self.append_audit(event, &event.kind).await
                }

                async fn cost(&self, event: &AuditEvent) -> StoreResult<()> {
                    self.append_audit(event, &format!("cost:{}", event.kind)).await
                }

                async fn events(
                    &self,
                    scope: &CallerScope,
                    operation_key: &str,
                ) -> StoreResult<Vec<AuditEvent>> {
                    let sql = q(
                        "SELECT caller_scope, operation_key, kind, detail, at FROM governed_audit
                         WHERE caller_scope = ? AND operation_key = ? ORDER BY seq",
                    );
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(operation_key)
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend)?
                        .iter()
                        .map(audit_from_row)
                        .collect()
                }
            }

            #[async_trait]
            impl OperationTreeStore for $store {
                async fn open_root(&self, root: &RootRecord) -> StoreResult<RootOpen> {
                    let sql = q(&format!(
                        "INSERT INTO governed_roots ({ROOT_COLUMNS})
                         VALUES (?, ?, ?, 'active', ?, 0, 0, 0, ?, NULL)
                         ON CONFLICT (caller_scope, root_key) DO NOTHING
                         RETURNING {ROOT_COLUMNS}"
                    ));
                    let inserted = sqlx::query(&sql)
                        .bind(root.scope.as_str())
                        .bind(&root.root_key)
                        .bind(to_json(&root.binding)?)
                        .bind(root.deadline_at.as_millis())
                        .bind(root.created_at.as_millis())
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?;
                    if let Some(row) = inserted {
                        return Ok(RootOpen::Opened(root_from_row(&row)?));
                    }
                    self.select_root(&root.scope, &root.root_key)
                        .await?
                        .map(RootOpen::Existing)
                        .ok_or_else(|| StoreError::Backend("a conflicting root vanished".into()))
                }

                async fn root(
                    &self,
                    scope: &CallerScope,
                    root_key: &str,
                ) -> StoreResult<Option<RootRecord>> {
                    self.select_root(scope, root_key).await
                }

                async fn reserve_call(
                    &self,
                    scope: &CallerScope,
                    root_key: &str,
                    operation_key: &str,
                ) -> StoreResult<CallReservation> {
                    let mut tx = self.pool.begin().await.map_err(backend)?;
                    let Some(status) = lock_root(&mut tx, scope, root_key).await? else {
                        return Ok(CallReservation::MissingRoot);
                    };
                    let exists = q(
                        "SELECT 1 FROM governed_root_calls
                         WHERE caller_scope = ? AND root_key = ? AND operation_key = ?",
                    );
                    let found = sqlx::query(&exists)
                        .bind(scope.as_str())
                        .bind(root_key)
                        .bind(operation_key)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(backend)?;
                    if found.is_some() {
                        return Ok(CallReservation::AlreadyReserved);
                    }
                    let status = RootStatus::parse(&status)
                        .ok_or_else(|| StoreError::Corrupt("root status".into()))?;
                    if status != RootStatus::Active {
                        return Ok(CallReservation::RootNotActive(status));
                    }
                    let insert = q(
                        "INSERT INTO governed_root_calls (caller_scope, root_key, operation_key)
                         VALUES (?, ?, ?)",
                    );
                    sqlx::query(&insert)
                        .bind(scope.as_str())
                        .bind(root_key)
                        .bind(operation_key)
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                    let count = q(
                        "UPDATE governed_roots SET reserved_calls = reserved_calls + 1
                         WHERE caller_scope = ? AND root_key = ?",
                    );
                    sqlx::query(&count)
                        .bind(scope.as_str())
                        .bind(root_key)
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                    tx.commit().await.map_err(backend)?;
                    Ok(CallReservation::Reserved)
                }

                async fn has_call(
                    &self,
                    scope: &CallerScope,
                    root_key: &str,
                    operation_key: &str,
                ) -> StoreResult<bool> {
                    let sql = q(
                        "SELECT 1 FROM governed_root_calls
                         WHERE caller_scope = ? AND root_key = ? AND operation_key = ?",
                    );
                    Ok(sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(root_key)
                        .bind(operation_key)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?
                        .is_some())
                }

                async fn close_root(
                    &self,
                    scope: &CallerScope,
                    root_key: &str,
                    now: Timestamp,
                ) -> StoreResult<Option<RootRecord>> {
                    let sql = q(
                        "UPDATE governed_roots SET status = 'closed', closed_at = ?
                         WHERE caller_scope = ? AND root_key = ? AND status = 'active'",
                    );
                    sqlx::query(&sql)
                        .bind(now.as_millis())
                        .bind(scope.as_str())
                        .bind(root_key)
                        .execute(&self.pool)
                        .await
                        .map_err(backend)?;
                    self.select_root(scope, root_key).await
                }

                async fn expire_roots(
                    &self,
                    scope: &CallerScope,
                    now: Timestamp,
                    limit: u32,
                ) -> StoreResult<Vec<RootRecord>> {
                    let sql = q(&format!(
                        "UPDATE governed_roots SET status = 'expired', closed_at = ?
                         WHERE caller_scope = ? AND status = 'active' AND root_key IN (
                           SELECT root_key FROM governed_roots
                           WHERE caller_scope = ? AND status = 'active' AND deadline_at <= ?
                           ORDER BY deadline_at, root_key LIMIT ?)
                         RETURNING {ROOT_COLUMNS}"
                    ));
                    let mut roots = sqlx::query(&sql)
                        .bind(now.as_millis())
                        .bind(scope.as_str())
                        .bind(scope.as_str())
                        .bind(now.as_millis())
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend)?
                        .iter()
                        .map(root_from_row)
                        .collect::<StoreResult<Vec<_>>>()?;
                    roots.sort_by(|a, b| {
                        (a.deadline_at, &a.root_key).cmp(&(b.deadline_at, &b.root_key))
                    });
                    Ok(roots)
                }
            }

            #[async_trait]
            impl OperationAccountingStore for $store {
                async fn record_root_receipt(
                    &self,
                    receipt: &RootReceipt,
                ) -> StoreResult<(RootReceipt, bool)> {
                    let mut tx = self.pool.begin().await.map_err(backend)?;
                    if lock_root(&mut tx, &receipt.scope, &receipt.root_key)
                        .await?
                        .is_none()
                    {
                        return Err(StoreError::NotFound);
                    }
                    let sql = q(&format!(
                        "INSERT INTO governed_root_receipts ({RECEIPT_COLUMNS})
                         VALUES (?, ?, ?, ?, ?, ?)
                         ON CONFLICT (caller_scope, root_key, operation_key) DO NOTHING
                         RETURNING {RECEIPT_COLUMNS}"
                    ));
                    let inserted = sqlx::query(&sql)
                        .bind(receipt.scope.as_str())
                        .bind(&receipt.root_key)
                        .bind(&receipt.operation_key)
                        .bind(receipt.amount_micros)
                        .bind(to_json(&receipt.detail)?)
                        .bind(receipt.recorded_at.as_millis())
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(backend)?;
                    let Some(row) = inserted else {
                        tx.rollback().await.map_err(backend)?;
                        let existing = self
                            .root_receipt(&receipt.scope, &receipt.root_key, &receipt.operation_key)
                            .await?
                            .ok_or_else(|| StoreError::Backend("a conflicting receipt vanished".into()))?;
                        return Ok((existing, false));
                    };
                    let add = q(
                        "UPDATE governed_roots
                         SET settled_micros = settled_micros + ?, receipts = receipts + 1
                         WHERE caller_scope = ? AND root_key = ?",
                    );
                    sqlx::query(&add)
                        .bind(receipt.amount_micros)
                        .bind(receipt.scope.as_str())
                        .bind(&receipt.root_key)
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                    let stored = root_receipt_from_row(&row)?;
                    tx.commit().await.map_err(backend)?;
                    Ok((stored, true))
                }

                async fn root_receipt(
                    &self,
                    scope: &CallerScope,
                    root_key: &str,
                    operation_key: &str,
                ) -> StoreResult<Option<RootReceipt>> {
                    let sql = q(&format!(
                        "SELECT {RECEIPT_COLUMNS} FROM governed_root_receipts
                         WHERE caller_scope = ? AND root_key = ? AND operation_key = ?"
                    ));
                    sqlx::query(&sql)
                        .bind(scope.as_str())
                        .bind(root_key)
                        .bind(operation_key)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend)?
                        .map(|row| root_receipt_from_row(&row))
                        .transpose()
                }
            }
        }
    };
}
