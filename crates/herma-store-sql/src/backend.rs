//! [`Backend`]: what an engine supplies to [`crate::SqlStore`] — its pool and transactions, the
//! migration lock, its own early migrations and the few places its SQL differs.

use std::borrow::Cow;

use async_trait::async_trait;
use herma_store::StoreResult;

use crate::migrations::{DdlDialect, Migration};
use crate::query::{Query, Statement};
use crate::rows::SqlRow;

/// One SQL engine: a pool to run [`Query`]s on and the dialect of the shared statements.
///
/// Every statement is written once, with `?` placeholders and SQL both engines accept; a
/// backend differs only in what is named here.
#[async_trait]
pub trait Backend: Send + Sync + Sized + 'static {
    /// A row as the driver returns it.
    type Row: SqlRow + Send;
    /// An open transaction; dropping it rolls back.
    type Tx: Send;

    /// What [`herma_store::Store::backend`] reports: `sqlite` or `postgres`.
    const NAME: &'static str;
    /// Membership in a bound text list ([`crate::Arg::Texts`]), after the tested column:
    /// `column {TEXT_IN}`.
    const TEXT_IN: &'static str;
    /// A row source with one text column `value` per element of a bound text list:
    /// `SELECT value FROM {TEXT_ROWS}`.
    const TEXT_ROWS: &'static str;
    /// The current time as Unix milliseconds, an SQL expression.
    const NOW_MILLIS: &'static str;
    /// The length in bytes of the text column `body`, an SQL expression.
    const BODY_BYTES: &'static str;
    /// One bounded step of giving freed pages back to the file system, where the engine needs
    /// one (SQLite's incremental vacuum); `None` where the engine does it itself.
    const RECLAIM_SPACE: Option<&'static str>;
    /// How the DDL tokens of [`crate::SHARED_MIGRATIONS`] are spelled here.
    const DDL: DdlDialect;
    /// The engine's own migrations, written per engine before migrations were shared; they run
    /// first, in order.
    const ENGINE_MIGRATIONS: &'static [Migration];
    /// The most parameters one statement may bind (multi-row inserts are cut to fit).
    const MAX_PARAMS: usize;

    /// `sql` with its `?` placeholders as this engine spells them.
    fn placeholders(sql: &str) -> Cow<'_, str>;

    /// A statement to run once.
    fn query(sql: &str) -> Query<'_> {
        Statement::new::<Self>(sql).into_query()
    }

    /// A statement to run several times (its placeholders are rewritten once).
    fn statement(sql: &str) -> Statement<'_> {
        Statement::new::<Self>(sql)
    }

    /// Runs `query` on the pool and returns its rows.
    async fn fetch(&self, query: Query<'_>) -> StoreResult<Vec<Self::Row>>;
    /// Runs `query` on the pool and returns its first row (the single-row reads).
    async fn fetch_optional(&self, query: Query<'_>) -> StoreResult<Option<Self::Row>>;
    /// Runs `query` on the pool and returns how many rows it changed.
    async fn execute(&self, query: Query<'_>) -> StoreResult<u64>;

    /// Runs `queries` in order as one atomic unit and returns each one's rows: by default in a
    /// transaction; an engine without interactive transactions (D1) sends them as one batch.
    /// Whatever depends on a result is written into the later statements' SQL, never decided
    /// between them.
    async fn batch(&self, queries: Vec<Query<'_>>) -> StoreResult<Vec<Vec<Self::Row>>> {
        let mut tx = self.begin().await?;
        let mut results = Vec::with_capacity(queries.len());
        for query in queries {
            results.push(Self::fetch_in(&mut tx, query).await?);
        }
        Self::commit(tx).await?;
        Ok(results)
    }

    /// Begins a transaction.
    async fn begin(&self) -> StoreResult<Self::Tx>;
    /// Begins the transaction migrations run in, holding the lock that keeps two processes
    /// from applying the same migration.
    async fn begin_migration(&self) -> StoreResult<Self::Tx>;
    /// Runs `query` in `tx` and returns its rows.
    async fn fetch_in(tx: &mut Self::Tx, query: Query<'_>) -> StoreResult<Vec<Self::Row>>;
    /// Runs `query` in `tx` and returns how many rows it changed.
    async fn execute_in(tx: &mut Self::Tx, query: Query<'_>) -> StoreResult<u64>;
    /// Runs a script of statements without parameters (a migration) in `tx`.
    async fn run_script(tx: &mut Self::Tx, sql: &str) -> StoreResult<()>;
    /// Commits `tx`.
    async fn commit(tx: Self::Tx) -> StoreResult<()>;
    /// Rolls `tx` back now (rather than when it is dropped).
    async fn rollback(tx: Self::Tx) -> StoreResult<()>;
}
