//! SQLite implementation of Herma's stores: one embedded file in WAL mode, migrations embedded
//! in the binary. The default store of `herma serve`.
//!
//! The statements are `herma_store_sql`'s; this crate supplies the pool, the migration lock
//! (`BEGIN IMMEDIATE`), the engine's own migrations 0001–0006 and its dialect (text lists as
//! `json_each`). SQLite serializes writers and the busy timeout makes concurrent writers wait
//! rather than fail.
//!
//! Writes that return nothing (`execute`, `batch`: receipts, rule outcomes, claims, entity
//! upserts) go through one connection of their own. SQLite takes one writer at a time anyway,
//! and a connection that finds its database changed by another connection drops its whole page
//! cache and reads every page again: with the writes spread over the pool, every batch of
//! receipts paid that (docs/performance.md).
//!
//! WAL checkpoints run once a second from a task of their own ([`CHECKPOINT_EVERY`]), not when
//! a commit takes the log past SQLite's 1,000 pages: copying the log back into the file and
//! its `fsync`s no longer stall the writer's connection (claims and admissions wait on it), a
//! page rewritten by many commits in a second (a table's or an index's last page) is copied
//! once, and a commit is on disk within about a second even when traffic is light.

use std::borrow::Cow;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use herma_store::{Store, StoreError, StoreResult};
use herma_store_sql::{Arg, Backend, DdlDialect, Migration, Query, SqlStore, backend};
use sqlx::sqlite::{
    SqliteArguments, SqliteAutoVacuum, SqliteConnectOptions, SqliteConnection, SqliteJournalMode,
    SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Executor, Sqlite, SqlitePool, Transaction};

/// Herma's stores on one SQLite file.
pub type SqliteStore = SqlStore<SqliteBackend>;

/// The SQLite engine under [`SqliteStore`]: a pool on one database file, the one connection
/// writes without results go through, and the task that checkpoints the WAL.
pub struct SqliteBackend {
    pool: SqlitePool,
    writer: Writer,
    checkpoints: tokio::task::AbortHandle,
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        self.checkpoints.abort();
    }
}

/// How often the WAL is copied back into the database file.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Checkpoints `pool`'s WAL every [`CHECKPOINT_EVERY`] (`PASSIVE`: it copies what no reader
/// still needs and never waits for a reader or the writer) until [`SqliteBackend`] is dropped.
fn spawn_checkpoints(pool: SqlitePool) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(CHECKPOINT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            // A failure (the disk full, the file gone) is left to the next write to report;
            // the next tick tries again.
            let _ = pool.execute("PRAGMA wal_checkpoint(PASSIVE)").await;
        }
    })
    .abort_handle()
}

/// Opens (creating if missing) the database file at `path`. Does not migrate.
pub async fn open(path: &str) -> StoreResult<SqliteStore> {
    let options = SqliteConnectOptions::from_str("sqlite://")
        .map_err(backend)?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // A new file gives pages freed by pruning back with `PRAGMA incremental_vacuum`; an
        // older one needs one `VACUUM` to switch (docs/operations.md).
        .auto_vacuum(SqliteAutoVacuum::Incremental)
        .synchronous(SqliteSynchronous::Normal)
        // The checkpoints are the task's ([`spawn_checkpoints`]), not each commit's.
        .pragma("wal_autocheckpoint", "0")
        .busy_timeout(Duration::from_secs(30))
        .foreign_keys(true);
    let opened =
        |e: sqlx::Error| StoreError::Backend(format!("opening SQLite database `{path}`: {e}"));
    let (pool, writer) = connect(options).await.map_err(opened)?;
    let checkpoints = spawn_checkpoints(pool.clone());
    Ok(SqlStore::new(SqliteBackend {
        pool,
        writer,
        checkpoints,
    }))
}

/// The readers' pool and the writer's one connection, on `options`.
///
/// The pool pings no connection before handing it out (sqlx's `test_before_acquire`, on by
/// default): a connection here is a thread of this process, not a socket that can go stale,
/// and the ping was a round trip to that thread — two wake-ups — on every acquire. A
/// connection whose thread has gone answers its statement with an error, and the ping sqlx
/// still makes when a connection is released (always, in sqlx 0.8) closes it then, so the
/// pool opens another. The writer's connection is in no pool ([`Writer`]).
async fn connect(options: SqliteConnectOptions) -> Result<(SqlitePool, Writer), sqlx::Error> {
    let pool = SqlitePoolOptions::new()
        .max_connections(8)
        .min_connections(1)
        .test_before_acquire(false)
        .connect_with(options.clone())
        .await?;
    let writer = Writer::open(writer_options(options)).await?;
    Ok((pool, writer))
}

/// The one connection writes without results go through, held by the backend itself.
///
/// A pool of one did the same job at a price on every write: the semaphore and idle queue to
/// acquire it, a task spawned to give it back, and on the way back a ping — a round trip to
/// the connection's thread, two more wake-ups of it — besides the write's own statements.
/// Here a write waits for the lock (in the order writers asked, at most [`WRITER_WAIT`], as
/// long as the pool waited), runs, and lets go. The connection lives as long as the backend
/// (the pool closed it after 30 minutes, with its page cache and prepared statements) unless
/// its thread has gone or a transaction on it failed: the next write then opens another.
struct Writer {
    options: SqliteConnectOptions,
    connection: tokio::sync::Mutex<Option<SqliteConnection>>,
}

/// How long a write waits for the writer's connection before it fails (sqlx's pools wait as
/// long for a connection).
const WRITER_WAIT: Duration = Duration::from_secs(30);

impl Writer {
    async fn open(options: SqliteConnectOptions) -> Result<Self, sqlx::Error> {
        let connection = options.connect().await?;
        Ok(Self {
            options,
            connection: tokio::sync::Mutex::new(Some(connection)),
        })
    }

    /// Runs `write` on the connection, opening one first if there is none; a failure keeps the
    /// connection unless it says the connection's thread has gone. A write cancelled part way
    /// leaves the connection consistent: what it sent still runs, in order, before anything
    /// the next write sends, and a transaction it began is rolled back (sqlx queues the
    /// `ROLLBACK` when the transaction is dropped).
    async fn run<T>(
        &self,
        write: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, sqlx::Error>,
    ) -> StoreResult<T> {
        self.run_then(write, |error| matches!(error, sqlx::Error::WorkerCrashed))
            .await
    }

    /// Runs `write` in one transaction and commits it. After any failure the connection is
    /// closed and the next write opens another: SQLite rolls some failed transactions back
    /// itself (a full disk, an I/O error), and then sqlx's `ROLLBACK` fails and its count of
    /// open transactions stays one too high, so that the connection's next `BEGIN` would
    /// become a savepoint inside a transaction never committed.
    async fn transaction<T>(
        &self,
        write: impl AsyncFnOnce(&mut Transaction<'_, Sqlite>) -> Result<T, sqlx::Error>,
    ) -> StoreResult<T> {
        let in_transaction = async |connection: &mut SqliteConnection| {
            let mut tx = connection.begin().await?;
            let done = write(&mut tx).await?;
            tx.commit().await?;
            Ok(done)
        };
        self.run_then(in_transaction, |_| true).await
    }

    async fn run_then<T>(
        &self,
        write: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, sqlx::Error>,
        closes: impl FnOnce(&sqlx::Error) -> bool,
    ) -> StoreResult<T> {
        // A free lock is taken at once: tokio's mutex hands a released lock to the first
        // waiter, so a free one has nobody waiting and this jumps no queue. Only a write that
        // has to wait sets a timer.
        let mut slot = match self.connection.try_lock() {
            Ok(slot) => slot,
            Err(_) => tokio::time::timeout(WRITER_WAIT, self.connection.lock())
                .await
                .map_err(|_| {
                    StoreError::Backend(format!(
                        "the SQLite writer's connection stayed busy for {} s",
                        WRITER_WAIT.as_secs()
                    ))
                })?,
        };
        let connection = match slot.take() {
            Some(connection) => connection,
            None => self.options.connect().await.map_err(backend)?,
        };
        let done = write(slot.insert(connection)).await;
        if done.as_ref().is_err_and(closes) {
            *slot = None;
        }
        done.map_err(backend)
    }
}

/// The writer connection's options: `options` with its statement journals kept in memory.
///
/// In a transaction of several statements each statement journals the pages it changes, so that
/// it alone can be undone; a journal over 64 KiB (a 64-receipt statement of a larger batch) went
/// to a temporary file, created, written and removed for that one statement. The writer's
/// statements are bounded batches, so their journals stay small in memory; `VACUUM`, which would
/// build a whole copy of the database in temporary storage, is never run by Herma.
fn writer_options(options: SqliteConnectOptions) -> SqliteConnectOptions {
    options.pragma("temp_store", "memory")
}

/// Opens and migrates.
pub async fn open_migrated(path: &str) -> StoreResult<SqliteStore> {
    let store = open(path).await?;
    store.migrate().await?;
    Ok(store)
}

/// Embedded migrations written for SQLite before migrations were shared.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "revisions_and_claims",
        sql: include_str!("../migrations/0002_revisions_and_claims.sql"),
    },
    Migration {
        version: 3,
        name: "memory",
        sql: include_str!("../migrations/0003_memory.sql"),
    },
    Migration {
        version: 4,
        name: "rule_vectors",
        sql: include_str!("../migrations/0004_rule_vectors.sql"),
    },
    Migration {
        version: 5,
        name: "key_cohorts",
        sql: include_str!("../migrations/0005_key_cohorts.sql"),
    },
    Migration {
        version: 6,
        name: "governed",
        sql: include_str!("../migrations/0006_governed.sql"),
    },
];

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

/// `sql` with its arguments bound; a text list is bound as a JSON array for `json_each`.
fn prepare<'q>(sql: &'q str, args: Vec<Arg<'q>>) -> StoreResult<SqliteQuery<'q>> {
    let mut query = sqlx::query(sql);
    for arg in args {
        query = match arg {
            Arg::Int(n) => query.bind(n),
            Arg::Text(Some(Cow::Borrowed(text))) => query.bind(text),
            Arg::Text(Some(Cow::Owned(text))) => query.bind(text),
            Arg::Text(None) => query.bind(None::<&str>),
            Arg::Bytes(bytes) => query.bind(bytes),
            Arg::Texts(texts) => query.bind(serde_json::to_string(&texts).map_err(backend)?),
        };
    }
    Ok(query)
}

#[async_trait]
impl Backend for SqliteBackend {
    type Row = SqliteRow;
    type Tx = Transaction<'static, Sqlite>;

    const NAME: &'static str = "sqlite";
    const TEXT_IN: &'static str = "IN (SELECT value FROM json_each(?))";
    const TEXT_ROWS: &'static str = "json_each(?)";
    const NOW_MILLIS: &'static str = "strftime('%s','now') * 1000";
    const BODY_BYTES: &'static str = "length(CAST(body AS BLOB))";
    const RECLAIM_SPACE: Option<&'static str> = Some("PRAGMA incremental_vacuum(4096)");
    const DDL: DdlDialect = DdlDialect {
        integer: "INTEGER",
        key_text: "TEXT",
        serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
        blob: "BLOB",
        without_rowid: "WITHOUT ROWID",
    };
    const ENGINE_MIGRATIONS: &'static [Migration] = MIGRATIONS;
    /// SQLite's default `SQLITE_MAX_VARIABLE_NUMBER` since 3.32.
    const MAX_PARAMS: usize = 32_766;

    fn placeholders(sql: &str) -> Cow<'_, str> {
        Cow::Borrowed(sql)
    }

    async fn fetch(&self, query: Query<'_>) -> StoreResult<Vec<SqliteRow>> {
        let (sql, args) = query.into_parts();
        prepare(&sql, args)?
            .fetch_all(&self.pool)
            .await
            .map_err(backend)
    }

    async fn fetch_optional(&self, query: Query<'_>) -> StoreResult<Option<SqliteRow>> {
        let (sql, args) = query.into_parts();
        prepare(&sql, args)?
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)
    }

    async fn execute(&self, query: Query<'_>) -> StoreResult<u64> {
        let (sql, args) = query.into_parts();
        let query = prepare(&sql, args)?;
        let done = self
            .writer
            .run(async |connection| query.execute(connection).await)
            .await?;
        Ok(done.rows_affected())
    }

    async fn batch(&self, queries: Vec<Query<'_>>) -> StoreResult<Vec<Vec<SqliteRow>>> {
        let (sqls, args): (Vec<_>, Vec<_>) = queries.into_iter().map(Query::into_parts).unzip();
        let prepared = sqls
            .iter()
            .zip(args)
            .map(|(sql, args)| prepare(sql, args))
            .collect::<StoreResult<Vec<_>>>()?;
        // The default's transaction, on the writer's connection: nothing between its
        // statements waits on anything but them.
        self.writer
            .transaction(async |tx| {
                let mut results = Vec::with_capacity(prepared.len());
                for query in prepared {
                    results.push(query.fetch_all(&mut **tx).await?);
                }
                Ok(results)
            })
            .await
    }

    async fn begin(&self) -> StoreResult<Self::Tx> {
        self.pool.begin().await.map_err(backend)
    }

    async fn begin_migration(&self) -> StoreResult<Self::Tx> {
        // IMMEDIATE takes the write lock up front, so two processes starting on one file
        // cannot both apply the same migration.
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(backend)
    }

    async fn fetch_in(tx: &mut Self::Tx, query: Query<'_>) -> StoreResult<Vec<SqliteRow>> {
        let (sql, args) = query.into_parts();
        prepare(&sql, args)?
            .fetch_all(&mut **tx)
            .await
            .map_err(backend)
    }

    async fn execute_in(tx: &mut Self::Tx, query: Query<'_>) -> StoreResult<u64> {
        let (sql, args) = query.into_parts();
        let done = prepare(&sql, args)?
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(done.rows_affected())
    }

    async fn run_script(tx: &mut Self::Tx, sql: &str) -> StoreResult<()> {
        (&mut **tx).execute(sql).await.map_err(backend)?;
        Ok(())
    }

    async fn commit(tx: Self::Tx) -> StoreResult<()> {
        tx.commit().await.map_err(backend)
    }

    async fn rollback(tx: Self::Tx) -> StoreResult<()> {
        tx.rollback().await.map_err(backend)
    }
}

/// For tests that need a real database failure (a trigger that aborts a write, a dropped
/// table): runs `sql` on the database file at `path` through its own connection.
pub mod testing {
    use sqlx::{Connection, Executor};

    pub async fn execute(path: &str, sql: &str) -> Result<(), String> {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
            .await
            .map_err(|e| e.to_string())?;
        conn.execute(sql).await.map_err(|e| e.to_string())?;
        conn.close().await.map_err(|e| e.to_string())
    }

    /// How many pages the database at `path` has (`PRAGMA page_count`).
    pub async fn page_count(path: &str) -> Result<i64, String> {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
            .await
            .map_err(|e| e.to_string())?;
        let (pages,): (i64,) = sqlx::query_as("PRAGMA page_count")
            .fetch_one(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        conn.close().await.map_err(|e| e.to_string())?;
        Ok(pages)
    }

    /// The schema of the database at `path` (each object's type, name and SQL, by name) and
    /// its migration ledger (version and name, in order).
    pub async fn schema(
        path: &str,
    ) -> Result<(Vec<(String, String, String)>, Vec<(i64, String)>), String> {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
            .await
            .map_err(|e| e.to_string())?;
        let objects = sqlx::query_as(
            "SELECT type, name, coalesce(sql, '') FROM sqlite_master ORDER BY type, name",
        )
        .fetch_all(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
        let ledger = sqlx::query_as("SELECT version, name FROM herma_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        conn.close().await.map_err(|e| e.to_string())?;
        Ok((objects, ledger))
    }
}

#[cfg(test)]
mod tests {
    // A test fails loudly.
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn temp_store<'c>(executor: impl Executor<'c, Database = Sqlite>) -> i64 {
        let (store,): (i64,) = sqlx::query_as("PRAGMA temp_store")
            .fetch_one(executor)
            .await
            .unwrap();
        store
    }

    fn options(dir: &tempfile::TempDir) -> SqliteConnectOptions {
        SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(dir.path().join("t.db"))
            .create_if_missing(true)
    }

    /// The connections `open` uses: the writer keeps temporary storage in memory (2 is MEMORY),
    /// the readers keep the default (0).
    #[tokio::test]
    async fn the_writer_keeps_temporary_storage_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (pool, writer) = connect(options(&dir)).await.unwrap();
        let writers = writer.run(async |c| Ok(temp_store(c).await)).await.unwrap();
        assert_eq!(writers, 2);
        assert_eq!(temp_store(&pool).await, 0);
    }

    /// Whether the writer's connection is the one that made the temporary table `mine`.
    const MINE: &str = "SELECT count(*) FROM temp.sqlite_master WHERE name = 'mine'";

    /// A writer whose connection has made the table `t` and the temporary table `mine`.
    async fn writer_with_tables(dir: &tempfile::TempDir) -> Writer {
        let writer = Writer::open(options(dir)).await.unwrap();
        writer
            .run(async |c| {
                c.execute("CREATE TABLE t (x); CREATE TEMP TABLE mine (x)")
                    .await
            })
            .await
            .unwrap();
        writer
    }

    async fn count(writer: &Writer, sql: &'static str) -> StoreResult<i64> {
        writer
            .run(async |c| sqlx::query_scalar(sql).fetch_one(c).await)
            .await
    }

    /// A failed statement keeps the writer's connection (its temporary table survives); with
    /// no connection, the next write opens one (the table has gone with the old one).
    #[tokio::test]
    async fn the_writer_keeps_its_connection_until_it_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_with_tables(&dir).await;
        let failed = writer
            .run(async |c| c.execute("INSERT INTO missing VALUES (1)").await)
            .await;
        assert!(failed.is_err());
        assert_eq!(count(&writer, MINE).await.unwrap(), 1);

        let gone = writer.connection.lock().await.take().unwrap();
        gone.close().await.unwrap();
        assert_eq!(count(&writer, MINE).await.unwrap(), 0);
    }

    /// A failed transaction closes the writer's connection, rolled back (its row is not
    /// there); the next write opens another (the temporary table has gone with the old one).
    #[tokio::test]
    async fn a_failed_transaction_closes_the_connection() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_with_tables(&dir).await;
        let failed = writer
            .transaction(async |tx| {
                (&mut **tx).execute("INSERT INTO t VALUES (1)").await?;
                (&mut **tx).execute("INSERT INTO missing VALUES (1)").await
            })
            .await;
        assert!(failed.is_err());
        assert!(writer.connection.lock().await.is_none());
        assert_eq!(count(&writer, "SELECT count(*) FROM t").await.unwrap(), 0);
        assert_eq!(count(&writer, MINE).await.unwrap(), 0);
    }

    /// A write that cannot have the connection for [`WRITER_WAIT`] fails and says so (the
    /// clock paused: tokio moves it on when every task waits).
    #[tokio::test(start_paused = true)]
    async fn a_write_waits_for_the_connection_at_most_writer_wait() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Writer::open(options(&dir)).await.unwrap();
        let held = writer.connection.lock().await;
        let started = tokio::time::Instant::now();
        let waited = count(&writer, "SELECT 1").await.unwrap_err();
        assert!(started.elapsed() >= WRITER_WAIT);
        assert!(
            waited
                .to_string()
                .contains("writer's connection stayed busy for 30 s")
        );
        drop(held);
        assert_eq!(count(&writer, "SELECT 1").await.unwrap(), 1);
    }

    /// A write dropped inside its transaction leaves nothing behind: the transaction is rolled
    /// back before the next write's statements run, on the same connection (its temporary
    /// table is still there).
    #[tokio::test]
    async fn a_cancelled_write_rolls_back_before_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_with_tables(&dir).await;
        let (inserted, wait) = tokio::sync::oneshot::channel();
        let stuck = writer.run(async |c| {
            let mut tx = c.begin().await?;
            (&mut *tx).execute("INSERT INTO t VALUES (1)").await?;
            inserted.send(()).unwrap();
            std::future::pending::<()>().await;
            tx.commit().await
        });
        tokio::select! {
            _ = stuck => unreachable!("the write never finishes"),
            _ = wait => {}
        }
        writer
            .run(async |c| c.execute("INSERT INTO t VALUES (2)").await)
            .await
            .unwrap();
        assert_eq!(count(&writer, "SELECT count(*) FROM t").await.unwrap(), 1);
        assert_eq!(count(&writer, "SELECT sum(x) FROM t").await.unwrap(), 2);
        assert_eq!(count(&writer, MINE).await.unwrap(), 1);
    }
}
