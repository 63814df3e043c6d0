//! PostgreSQL implementation of Herma's stores: any number of Herma processes share one
//! database. Migrations are embedded and serialized across processes by an advisory lock.
//!
//! The statements are `herma_store_sql`'s; this crate supplies the pool (optionally in one
//! schema), the migration lock (`pg_advisory_xact_lock`), the engine's own migrations 0001–0006
//! and its dialect (`$n` placeholders, text lists as arrays). A compare-and-set is one
//! `UPDATE … WHERE version = $n RETURNING`, atomic under PostgreSQL's row locking at any
//! isolation level.

use std::borrow::Cow;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use herma_store::{StoreError, StoreResult};
use herma_store_sql::{Arg, Backend, DdlDialect, Migration, Query, SqlStore, backend, numbered};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{Executor, PgPool, Postgres, Transaction};

/// Herma's stores on one PostgreSQL database (or one schema of it).
pub type PgStore = SqlStore<PgBackend>;

/// The PostgreSQL engine under [`PgStore`]: a connection pool.
pub struct PgBackend {
    pool: PgPool,
}

/// Key of the advisory lock that serializes migrations across processes.
const MIGRATION_LOCK: i64 = 0x4845_524d_4100; // "HERMA"

/// Connects to `url`. Does not migrate.
pub async fn connect(url: &str) -> StoreResult<PgStore> {
    connect_pooled(url, DEFAULT_POOL_SIZE).await
}

/// The connections one store keeps at most unless told otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 16;

/// [`connect`] keeping at most `pool_size` connections.
pub async fn connect_pooled(url: &str, pool_size: u32) -> StoreResult<PgStore> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::Backend(format!("invalid PostgreSQL URL: {e}")))?;
    connect_with(options, pool_size).await
}

/// Connects with every session's `search_path` set to `schema`, creating the schema if it does
/// not exist. Lets several Herma deployments (or test runs) share one database.
pub async fn connect_in_schema(url: &str, schema: &str) -> StoreResult<PgStore> {
    let valid = !schema.is_empty()
        && schema.len() <= 63
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        return Err(StoreError::Backend(format!(
            "`{schema}` is not a plain lowercase schema name"
        )));
    }
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::Backend(format!("invalid PostgreSQL URL: {e}")))?;
    let bootstrap = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await
        .map_err(backend)?;
    // CREATE SCHEMA IF NOT EXISTS races with itself; the migration lock serializes it.
    let mut tx = migration_lock(&bootstrap).await?;
    (&mut *tx)
        .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
        .await
        .map_err(backend)?;
    tx.commit().await.map_err(backend)?;
    bootstrap.close().await;
    connect_with(
        options.options([("search_path", schema)]),
        DEFAULT_POOL_SIZE,
    )
    .await
}

async fn connect_with(options: PgConnectOptions, pool_size: u32) -> StoreResult<PgStore> {
    let pool = PgPoolOptions::new()
        .max_connections(pool_size.max(1))
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
        .map_err(|e| StoreError::Backend(format!("connecting to PostgreSQL: {e}")))?;
    Ok(SqlStore::new(PgBackend { pool }))
}

/// A transaction holding the migration lock until it ends.
async fn migration_lock(pool: &PgPool) -> StoreResult<Transaction<'static, Postgres>> {
    let mut tx = pool.begin().await.map_err(backend)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    Ok(tx)
}

/// Embedded migrations written for PostgreSQL before migrations were shared.
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

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// `sql` with its arguments bound; a text list is bound as a `text[]`.
fn prepare<'q>(sql: &'q str, args: Vec<Arg<'q>>) -> PgQuery<'q> {
    let mut query = sqlx::query(sql);
    for arg in args {
        query = match arg {
            Arg::Int(n) => query.bind(n),
            Arg::Text(Some(Cow::Borrowed(text))) => query.bind(text),
            Arg::Text(Some(Cow::Owned(text))) => query.bind(text),
            Arg::Text(None) => query.bind(None::<&str>),
            Arg::Bytes(bytes) => query.bind(bytes),
            Arg::Texts(texts) => query.bind(texts),
        };
    }
    query
}

#[async_trait]
impl Backend for PgBackend {
    type Row = PgRow;
    type Tx = Transaction<'static, Postgres>;

    const NAME: &'static str = "postgres";
    const TEXT_IN: &'static str = "= ANY(?)";
    const TEXT_ROWS: &'static str = "unnest(CAST(? AS TEXT[])) AS t (value)";
    const NOW_MILLIS: &'static str = "(extract(epoch from now()) * 1000)::bigint";
    const BODY_BYTES: &'static str = "octet_length(body)";
    const RECLAIM_SPACE: Option<&'static str> = None;
    const DDL: DdlDialect = DdlDialect {
        integer: "BIGINT",
        key_text: "TEXT COLLATE \"C\"",
        serial: "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        blob: "BYTEA",
        without_rowid: "",
    };
    const ENGINE_MIGRATIONS: &'static [Migration] = MIGRATIONS;
    /// The wire protocol counts parameters in 16 bits.
    const MAX_PARAMS: usize = 65_535;

    fn placeholders(sql: &str) -> Cow<'_, str> {
        Cow::Owned(numbered(sql))
    }

    async fn fetch(&self, query: Query<'_>) -> StoreResult<Vec<PgRow>> {
        let (sql, args) = query.into_parts();
        prepare(&sql, args)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)
    }

    async fn fetch_optional(&self, query: Query<'_>) -> StoreResult<Option<PgRow>> {
        let (sql, args) = query.into_parts();
        prepare(&sql, args)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)
    }

    async fn execute(&self, query: Query<'_>) -> StoreResult<u64> {
        let (sql, args) = query.into_parts();
        let done = prepare(&sql, args)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(done.rows_affected())
    }

    async fn begin(&self) -> StoreResult<Self::Tx> {
        self.pool.begin().await.map_err(backend)
    }

    async fn begin_migration(&self) -> StoreResult<Self::Tx> {
        // Serializes concurrent starts of many instances: one applies, the others then see it
        // done.
        migration_lock(&self.pool).await
    }

    async fn fetch_in(tx: &mut Self::Tx, query: Query<'_>) -> StoreResult<Vec<PgRow>> {
        let (sql, args) = query.into_parts();
        prepare(&sql, args)
            .fetch_all(&mut **tx)
            .await
            .map_err(backend)
    }

    async fn execute_in(tx: &mut Self::Tx, query: Query<'_>) -> StoreResult<u64> {
        let (sql, args) = query.into_parts();
        let done = prepare(&sql, args)
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

/// Test support: the PostgreSQL URL tests use, and a fresh schema per call.
#[allow(clippy::panic)] // test support: a missing test database is a failed test
pub mod testing {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::{PgStore, connect_in_schema};

    /// `HERMA_TEST_DATABASE_URL`, else the local server on 127.0.0.1:5432, database `test`.
    pub fn test_database_url() -> String {
        #[allow(clippy::disallowed_methods)]
        // tests are configured by the test command's environment
        let url = std::env::var("HERMA_TEST_DATABASE_URL").ok();
        url.filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// A schema name unique to this process and call (`herma_test_<pid>_<start>_<n>`). The
    /// start time keeps a reused pid (one process per test adds up to many) from landing in a
    /// schema an earlier process left behind.
    pub fn fresh_schema_name() -> String {
        #[allow(clippy::disallowed_methods)] // test support: uniqueness, not a product clock
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        format!(
            "herma_test_{}_{:x}_{}",
            std::process::id(),
            start,
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// A migrated store in a fresh schema of the test database.
    pub async fn fresh_store() -> PgStore {
        use herma_store::Store;
        let url = test_database_url();
        let store = match connect_in_schema(&url, &fresh_schema_name()).await {
            Ok(store) => store,
            Err(err) => panic!(
                "PostgreSQL is needed for these tests ({url}): {err}. Run scripts/test, which starts one."
            ),
        };
        if let Err(err) = store.migrate().await {
            panic!("migrating the test schema failed: {err}");
        }
        store
    }
}
