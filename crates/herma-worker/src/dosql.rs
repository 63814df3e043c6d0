//! Conversations at the edge: `herma_store_sql`'s statements — the native SQLite store's — on a
//! Durable Object's own SQLite database, with the transactions conversation turns and the
//! governed ledger need.
//!
//! A Durable Object's SQL runs synchronously and refuses `BEGIN` and `SAVEPOINT`: a transaction
//! is a callback, `storage.transactionSync(f)`, rolled back when `f` throws. So each call of a
//! conversation or governed port is one such callback ([`Atomic`]): its future is polled inside
//! it, where every statement completes at once, and the callback throws when the call rolled a
//! transaction back or failed. What that changes, checked on every call:
//! - a rollback undoes the whole call, not only the transaction since `begin`. Every port
//!   method opens its one transaction first and only reads after a rollback; a call that writes
//!   after rolling back, or commits and then rolls back, fails instead of half-applying;
//! - a call that would wait (I/O inside a transaction) fails: none does.
//!
//! The database is migrated by the object itself ([`migrate`]), with the files wrangler applies
//! to D1 (`migrations/`, the SQLite store's own).

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use herma_store::{StoreError, StoreResult};
use herma_store_sql::{Backend, DdlDialect, Migration, Query, SqlStore};
use wasm_bindgen::{JsCast, JsValue};
use worker::SqlStorage;
use worker::send::SendWrapper;

use herma_core::{CallerScope, Timestamp};
use herma_store::conversations::*;
use herma_store::governed::*;
use serde_json::Value;

use crate::d1::{D1Backend, JsRow, RawRow, js_arg, rows};

/// The migrations wrangler applies to D1, in order: `(file name, SQL)` (see `build.rs`).
const MIGRATIONS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

fn sql_error(err: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("Durable Object SQL: {err}"))
}

/// What the call in progress has done with its transactions.
const CLEAN: u8 = 0;
const COMMITTED: u8 = 1;
const ROLLED_BACK: u8 = 2;
/// A statement wrote after a rollback, or a commit was rolled back: the call must fail.
const BROKEN: u8 = 3;

/// A Durable Object's SQLite database.
pub struct DoSql {
    sql: SqlStorage,
    /// The call in progress ([`Atomic`] runs one at a time).
    call: Arc<AtomicU8>,
}

/// A transaction: the statements of the call in progress (see the module's notes).
pub struct DoTx {
    sql: SqlStorage,
    call: Arc<AtomicU8>,
}

impl DoSql {
    pub fn new(sql: SqlStorage) -> Self {
        Self {
            sql,
            call: Arc::new(AtomicU8::new(CLEAN)),
        }
    }
}

fn run(sql: &SqlStorage, call: &AtomicU8, query: Query<'_>) -> StoreResult<(Vec<JsRow>, u64)> {
    let (text, args) = query.into_parts();
    let values = args
        .into_iter()
        .map(js_arg)
        .collect::<StoreResult<Vec<_>>>()?;
    let cursor = sql.exec_raw(&text, values).map_err(sql_error)?;
    let found = rows(cursor.to_array::<RawRow>().map_err(sql_error)?)?;
    let written = cursor.rows_written() as u64;
    if written > 0 && call.load(Ordering::SeqCst) == ROLLED_BACK {
        call.store(BROKEN, Ordering::SeqCst);
        return Err(sql_error(
            "a call wrote after rolling back; its writes are undone",
        ));
    }
    Ok((found, written))
}

#[async_trait]
impl Backend for DoSql {
    type Row = JsRow;
    type Tx = DoTx;

    const NAME: &'static str = "durable-object";
    // The same SQLite as D1's, spelled the same way.
    const TEXT_IN: &'static str = D1Backend::TEXT_IN;
    const TEXT_ROWS: &'static str = D1Backend::TEXT_ROWS;
    const NOW_MILLIS: &'static str = D1Backend::NOW_MILLIS;
    const BODY_BYTES: &'static str = D1Backend::BODY_BYTES;
    const RECLAIM_SPACE: Option<&'static str> = D1Backend::RECLAIM_SPACE;
    const DDL: DdlDialect = D1Backend::DDL;
    /// Applied by [`migrate`] from `migrations/`, not here.
    const ENGINE_MIGRATIONS: &'static [Migration] = &[];
    const MAX_PARAMS: usize = D1Backend::MAX_PARAMS;

    fn placeholders(sql: &str) -> Cow<'_, str> {
        Cow::Borrowed(sql)
    }

    async fn fetch(&self, query: Query<'_>) -> StoreResult<Vec<JsRow>> {
        Ok(run(&self.sql, &self.call, query)?.0)
    }

    async fn fetch_optional(&self, query: Query<'_>) -> StoreResult<Option<JsRow>> {
        Ok(self.fetch(query).await?.into_iter().next())
    }

    async fn execute(&self, query: Query<'_>) -> StoreResult<u64> {
        Ok(run(&self.sql, &self.call, query)?.1)
    }

    /// The statements in order, inside the call's own transaction.
    async fn batch(&self, queries: Vec<Query<'_>>) -> StoreResult<Vec<Vec<JsRow>>> {
        queries
            .into_iter()
            .map(|q| Ok(run(&self.sql, &self.call, q)?.0))
            .collect()
    }

    async fn begin(&self) -> StoreResult<DoTx> {
        Ok(DoTx {
            sql: self.sql.clone(),
            call: self.call.clone(),
        })
    }

    async fn begin_migration(&self) -> StoreResult<DoTx> {
        Err(StoreError::Backend(
            "a Durable Object's database is migrated when the object starts".into(),
        ))
    }

    async fn fetch_in(tx: &mut DoTx, query: Query<'_>) -> StoreResult<Vec<JsRow>> {
        Ok(run(&tx.sql, &tx.call, query)?.0)
    }

    async fn execute_in(tx: &mut DoTx, query: Query<'_>) -> StoreResult<u64> {
        Ok(run(&tx.sql, &tx.call, query)?.1)
    }

    async fn run_script(tx: &mut DoTx, sql: &str) -> StoreResult<()> {
        tx.sql.exec(sql, None).map_err(sql_error)?;
        Ok(())
    }

    async fn commit(tx: DoTx) -> StoreResult<()> {
        let _ = tx
            .call
            .compare_exchange(CLEAN, COMMITTED, Ordering::SeqCst, Ordering::SeqCst);
        Ok(())
    }

    async fn rollback(tx: DoTx) -> StoreResult<()> {
        match tx.call.load(Ordering::SeqCst) {
            CLEAN | ROLLED_BACK => tx.call.store(ROLLED_BACK, Ordering::SeqCst),
            _ => {
                tx.call.store(BROKEN, Ordering::SeqCst);
                return Err(sql_error(
                    "a call rolled back after committing; its writes are undone",
                ));
            }
        }
        Ok(())
    }
}

/// Applies the migrations `sql` lacks, each file in its own transaction (each records itself
/// in `herma_migrations`, as on D1).
fn migrate(sql: &SqlStorage, storage: &TxStorage) -> StoreResult<()> {
    let ledger = sql
        .exec_raw(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'herma_migrations'",
            Vec::new(),
        )
        .map_err(sql_error)?;
    let applied = if ledger.to_array::<RawRow>().map_err(sql_error)?.is_empty() {
        0
    } else {
        let cursor = sql
            .exec_raw(
                "SELECT COALESCE(MAX(version), 0) AS version FROM herma_migrations",
                Vec::new(),
            )
            .map_err(sql_error)?;
        let found = rows(cursor.to_array::<RawRow>().map_err(sql_error)?)?;
        found
            .first()
            .map(|row| herma_store_sql::SqlRow::int(row, "version"))
            .transpose()?
            .unwrap_or(0)
    };
    for (name, script) in MIGRATIONS {
        let version: i64 = name
            .split('_')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| sql_error(format!("migration file {name} has no version")))?;
        if version <= applied {
            continue;
        }
        let mut apply = || -> Result<JsValue, JsValue> {
            sql.exec(script, None)
                .map(|_| JsValue::UNDEFINED)
                .map_err(|err| JsValue::from_str(&err.to_string()))
        };
        storage
            .transaction_sync(&mut apply)
            .map_err(|err| sql_error(format!("applying migration {name}: {err:?}")))?;
    }
    Ok(())
}

/// The conversation and governed ports on a Durable Object's database, each call one
/// `transactionSync` (see the module's notes).
pub struct Atomic {
    store: SqlStore<DoSql>,
    call: Arc<AtomicU8>,
    storage: SendWrapper<JsValue>,
}

/// What the callback throws to roll the call back.
const ROLLBACK: &str = "herma: roll this call back";

impl Atomic {
    /// The ports on `storage` (the object's `ctx.storage`), migrated first.
    pub fn open(storage: &worker::Storage) -> StoreResult<Self> {
        let sql = storage.sql();
        let raw: JsValue = storage.as_raw().unchecked_ref::<JsValue>().clone();
        migrate(&sql, raw.unchecked_ref())?;
        let backend = DoSql::new(sql.clone());
        let call = backend.call.clone();
        Ok(Self {
            store: SqlStore::new(backend),
            call,
            storage: SendWrapper::new(raw),
        })
    }

    /// Runs `call` to its end inside one `transactionSync`, which rolls it back when it failed
    /// or rolled a transaction back.
    fn atomic<T>(&self, call: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        let mut call = std::pin::pin!(call);
        let mut result: Option<StoreResult<T>> = None;
        self.call.store(CLEAN, Ordering::SeqCst);
        let thrown = {
            let state = &self.call;
            let result = &mut result;
            let mut body = || -> Result<JsValue, JsValue> {
                let mut cx = Context::from_waker(Waker::noop());
                let outcome = match call.as_mut().poll(&mut cx) {
                    Poll::Ready(outcome) => outcome,
                    Poll::Pending => Err(sql_error("a store call waited inside its transaction")),
                };
                let state = state.load(Ordering::SeqCst);
                let undo = outcome.is_err() || matches!(state, ROLLED_BACK | BROKEN);
                *result = Some(match outcome {
                    Ok(_) if state == BROKEN => Err(sql_error(
                        "a call's transactions could not be kept apart; its writes are undone",
                    )),
                    outcome => outcome,
                });
                if undo {
                    Err(JsValue::from_str(ROLLBACK))
                } else {
                    Ok(JsValue::UNDEFINED)
                }
            };
            self.storage
                .unchecked_ref::<TxStorage>()
                .transaction_sync(&mut body)
        };
        self.call.store(CLEAN, Ordering::SeqCst);
        match (result, thrown) {
            (Some(result), _) => result,
            (None, Err(thrown)) => Err(sql_error(format!(
                "transactionSync did not run the call: {thrown:?}"
            ))),
            (None, Ok(_)) => Err(sql_error("transactionSync did not run the call")),
        }
    }
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `ctx.storage`, for the one method workers-rs does not bind.
    type TxStorage;

    /// Runs `body` in a transaction, rolled back when it throws (and the throw passed on).
    #[wasm_bindgen(method, catch, js_name = transactionSync)]
    fn transaction_sync(
        this: &TxStorage,
        body: &mut dyn FnMut() -> Result<JsValue, JsValue>,
    ) -> Result<JsValue, JsValue>;
}

/// Each port method of `$trait`, run as one [`Atomic::atomic`] call on the SQL store.
macro_rules! atomic_ports {
    ($(impl $trait:ident { $(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)* })*) => {
        $(
            #[async_trait]
            impl $trait for Atomic {
                $(
                    async fn $name(&self $(, $arg: $ty)*) -> StoreResult<$ret> {
                        self.atomic(self.store.$name($($arg),*))
                    }
                )*
            }
        )*
    };
}

atomic_ports! {
    impl ConversationStore {
        fn admit_turn(&self, admit: &AdmitTurn) -> Admission;
        fn put_attempt(&self, attempt: &AttemptRecord) -> ();
        fn reserve(&self, charges: &[LedgerCharge]) -> Reserved;
        fn release(&self, charges: &[LedgerCharge]) -> ();
        fn seal_turn(&self, seal: &SealTurn) -> bool;
        fn conversation(&self, scope: &CallerScope, conversation_id: &str) -> Option<ConversationRecord>;
        fn turn(&self, scope: &CallerScope, conversation_id: &str, request_id: &str) -> Option<TurnRecord>;
        fn recent_turns(&self, scope: &CallerScope, conversation_id: &str, limit: u32) -> Vec<TurnRecord>;
        fn attempts(&self, scope: &CallerScope, conversation_id: &str, request_id: &str) -> Vec<AttemptRecord>;
        fn unfinished_turns(&self, admitted_before: Timestamp, limit: u32) -> Vec<TurnRecord>;
        fn expire_conversations(&self, now: Timestamp, limit: u32) -> u64;
        fn next_due(&self, seal_after_ms: i64) -> Option<Timestamp>;
        fn ledger(&self, counters: &[String]) -> Vec<u64>;
        fn health(&self, resources: &[String]) -> Vec<HealthRecord>;
        fn all_health(&self) -> Vec<HealthRecord>;
        fn limit(&self, record: &HealthRecord) -> bool;
        fn clear_health(&self, resource: &str, observed_at: Timestamp) -> bool;
        fn reserve_probe(&self, resource: &str, probe_id: &str, lease_until: Timestamp, now: Timestamp, charges: &[LedgerCharge]) -> ProbeReservation;
        fn expire_probe(&self, probe_id: &str, record: &HealthRecord) -> bool;
    }
    impl ExecutionStore {
        fn claim_execution(&self, record: &ExecutionRecord) -> Claim;
        fn execution(&self, scope: &CallerScope, operation_key: &str) -> Option<ExecutionRecord>;
        fn update_execution(&self, record: &ExecutionRecord, expected: u64) -> ExecutionRecord;
        fn overdue_executions(&self, scope: &CallerScope, now: Timestamp, limit: u32) -> Vec<ExecutionRecord>;
    }
    impl ExecutionResultStore {
        fn reserve_result(&self, slot: &ResultSlot) -> Reservation;
        fn result(&self, scope: &CallerScope, operation_key: &str) -> Option<ResultSlot>;
        fn store_envelope(&self, scope: &CallerScope, operation_key: &str, envelope: &Value) -> ResultSlot;
        fn erase_result(&self, scope: &CallerScope, operation_key: &str, now: Timestamp) -> bool;
    }
    impl UsageInbox {
        fn deposit_usage(&self, observation: &UsageObservation) -> InboxEntry;
        fn pending_usage(&self, scope: &CallerScope, after: Option<u64>, limit: u32) -> Vec<InboxEntry>;
        fn usage_for(&self, scope: &CallerScope, operation_key: &str) -> Vec<InboxEntry>;
        fn acknowledge_usage(&self, scope: &CallerScope, seq: u64, now: Timestamp) -> bool;
    }
    impl GovernedCostSettlementStore {
        fn settle(&self, charge: &GovernedCharge) -> Settlement;
        fn charge(&self, scope: &CallerScope, operation_key: &str) -> Option<GovernedCharge>;
    }
    impl SpendStore {
        fn peek(&self, scope: &CallerScope, session_id: &str, day: &str) -> SpendTotals;
        fn add(&self, scope: &CallerScope, session_id: &str, day: &str, micros: i64) -> ();
    }
    impl AuditLog {
        fn record(&self, event: &AuditEvent) -> ();
        fn cost(&self, event: &AuditEvent) -> ();
        fn events(&self, scope: &CallerScope, operation_key: &str) -> Vec<AuditEvent>;
    }
    impl OperationTreeStore {
        fn open_root(&self, root: &RootRecord) -> RootOpen;
        fn root(&self, scope: &CallerScope, root_key: &str) -> Option<RootRecord>;
        fn reserve_call(&self, scope: &CallerScope, root_key: &str, operation_key: &str) -> CallReservation;
        fn has_call(&self, scope: &CallerScope, root_key: &str, operation_key: &str) -> bool;
        fn close_root(&self, scope: &CallerScope, root_key: &str, now: Timestamp) -> Option<RootRecord>;
        fn expire_roots(&self, scope: &CallerScope, now: Timestamp, limit: u32) -> Vec<RootRecord>;
    }
    impl OperationAccountingStore {
        fn record_root_receipt(&self, receipt: &RootReceipt) -> (RootReceipt, bool);
        fn root_receipt(&self, scope: &CallerScope, root_key: &str, operation_key: &str) -> Option<RootReceipt>;
    }
}
