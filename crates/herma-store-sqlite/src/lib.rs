//! SQLite implementation of Herma's stores: one embedded file in WAL mode, migrations embedded
//! in the binary. The default store of `herma serve`.
//!
//! Every compare-and-set is one `UPDATE … WHERE version = ? RETURNING`; SQLite serializes writers
//! and the busy timeout makes concurrent writers wait rather than fail.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use herma_core::key::KeyId;
use herma_core::memory::RuleStats;
use herma_core::model::{HarnessKey, InjectionReceipt, RuleOutcomeRecord, WorkingEntity};
use herma_core::{CallerScope, Timestamp};
use herma_store::{
    AppliedMigration, ClaimStore, Collection, DocumentStore, EntityObservation, EntityStore,
    ImportOutcome, ImportSummary, KeyStore, OutcomeStore, Page, ReceiptStore, Revisions, Store,
    StoreError, StoreResult, StoredDoc, StoredVectors, VectorStore, encode_vectors,
};
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Executor, Row, SqlitePool};

use herma_store_sql::{
    SqlRow, backend, claimed_ids, doc_from_row, entity_from_row, key_from_row, outcome_from_row,
    receipt_from_row, revisions_from_rows, rule_stats_from_rows, to_i64, to_json, vectors_from_row,
    version_of,
};

/// Embedded migrations, applied in order by [`SqliteStore::migrate`].
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial", include_str!("../migrations/0001_initial.sql")),
    (
        2,
        "revisions_and_claims",
        include_str!("../migrations/0002_revisions_and_claims.sql"),
    ),
    (3, "memory", include_str!("../migrations/0003_memory.sql")),
    (
        4,
        "rule_vectors",
        include_str!("../migrations/0004_rule_vectors.sql"),
    ),
    (
        5,
        "key_cohorts",
        include_str!("../migrations/0005_key_cohorts.sql"),
    ),
    (
        6,
        "governed",
        include_str!("../migrations/0006_governed.sql"),
    ),
];

/// Receipts per INSERT statement (5 parameters each, far below SQLite's limit).
const RECEIPT_CHUNK: usize = 64;
/// Rule outcomes per INSERT statement (9 parameters each).
const OUTCOME_CHUNK: usize = 100;

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path`. Does not migrate.
    pub async fn open(path: &str) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(backend)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .connect_with(options)
            .await
            .map_err(|e| StoreError::Backend(format!("opening SQLite database `{path}`: {e}")))?;
        Ok(Self { pool })
    }

    /// Opens and migrates.
    pub async fn open_migrated(path: &str) -> StoreResult<Self> {
        let store = Self::open(path).await?;
        store.migrate().await?;
        Ok(store)
    }

    async fn current_version(
        &self,
        table: &str,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<u64>> {
        let row = sqlx::query(&format!(
            "SELECT version FROM {table} WHERE caller_scope = ? AND id = ?"
        ))
        .bind(scope.as_str())
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        row.map(|r| r.try_get::<i64, _>(0).map_err(backend).map(|v| v as u64))
            .transpose()
    }
}

const DOC_COLUMNS: &str = "caller_scope, id, version, body, created_at, updated_at";

#[async_trait]
impl KeyStore for SqliteStore {
    async fn insert_key(&self, key: &HarnessKey) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO harness_keys (key_id, caller_scope, scopes, harness, label, digest, created_at, revoked_at, cohorts)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(key.key_id.as_str())
        .bind(key.caller_scope.as_str())
        .bind(key.scopes.to_list())
        .bind(key.harness.as_deref())
        .bind(&key.label)
        .bind(key.digest.to_hex())
        .bind(key.created_at.as_millis())
        .bind(key.revoked_at.map(Timestamp::as_millis))
        .bind(to_json(&serde_json::json!(key.cohorts))?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn find_key(&self, key_id: &KeyId) -> StoreResult<Option<HarnessKey>> {
        let row = sqlx::query("SELECT * FROM harness_keys WHERE key_id = ?")
            .bind(key_id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        row.map(|r| key_from_row(&r)).transpose()
    }

    async fn list_keys(&self) -> StoreResult<Vec<HarnessKey>> {
        let rows = sqlx::query("SELECT * FROM harness_keys ORDER BY created_at DESC, key_id ASC")
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        rows.iter().map(key_from_row).collect()
    }

    async fn revoke_key(&self, key_id: &KeyId, at: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE harness_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
        )
        .bind(at.as_millis())
        .bind(key_id.as_str())
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        match self.find_key(key_id).await? {
            Some(_) => Ok(false),
            None => Err(StoreError::NotFound),
        }
    }
}

#[async_trait]
impl DocumentStore for SqliteStore {
    async fn create_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        body: &Value,
        now: Timestamp,
    ) -> StoreResult<StoredDoc> {
        let table = collection.table();
        let row = sqlx::query(&format!(
            "INSERT INTO {table} ({DOC_COLUMNS}) VALUES (?, ?, 1, ?, ?, ?)
             ON CONFLICT (caller_scope, id) DO NOTHING RETURNING {DOC_COLUMNS}"
        ))
        .bind(scope.as_str())
        .bind(id)
        .bind(to_json(body)?)
        .bind(now.as_millis())
        .bind(now.as_millis())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        match row {
            Some(row) => doc_from_row(&row),
            None => Err(StoreError::VersionConflict {
                current: self.current_version(table, scope, id).await?,
            }),
        }
    }

    async fn get_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<StoredDoc>> {
        let table = collection.table();
        let row = sqlx::query(&format!(
            "SELECT {DOC_COLUMNS} FROM {table} WHERE caller_scope = ? AND id = ?"
        ))
        .bind(scope.as_str())
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        row.map(|r| doc_from_row(&r)).transpose()
    }

    async fn get_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        ids: &[String],
    ) -> StoreResult<Vec<StoredDoc>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let table = collection.table();
        let rows = sqlx::query(&format!(
            "SELECT {DOC_COLUMNS} FROM {table}
             WHERE caller_scope = ? AND id IN (SELECT value FROM json_each(?)) ORDER BY id"
        ))
        .bind(scope.as_str())
        .bind(to_json(&serde_json::json!(ids))?)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter().map(doc_from_row).collect()
    }

    async fn list_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        page: &Page,
    ) -> StoreResult<Vec<StoredDoc>> {
        let table = collection.table();
        let rows = sqlx::query(&format!(
            "SELECT {DOC_COLUMNS} FROM {table}
             WHERE caller_scope = ? AND (? IS NULL OR id > ?) ORDER BY id LIMIT ?"
        ))
        .bind(scope.as_str())
        .bind(page.after.as_deref())
        .bind(page.after.as_deref())
        .bind(i64::from(page.limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter().map(doc_from_row).collect()
    }

    async fn update_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        body: &Value,
        expected_version: u64,
        now: Timestamp,
    ) -> StoreResult<StoredDoc> {
        let table = collection.table();
        let row = sqlx::query(&format!(
            "UPDATE {table} SET body = ?, version = version + 1, updated_at = ?
             WHERE caller_scope = ? AND id = ? AND version = ? RETURNING {DOC_COLUMNS}"
        ))
        .bind(to_json(body)?)
        .bind(now.as_millis())
        .bind(scope.as_str())
        .bind(id)
        .bind(to_i64(expected_version)?)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        match row {
            Some(row) => doc_from_row(&row),
            None => match self.current_version(table, scope, id).await? {
                Some(current) => Err(StoreError::VersionConflict {
                    current: Some(current),
                }),
                None => Err(StoreError::NotFound),
            },
        }
    }

    async fn delete_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        expected_version: Option<u64>,
    ) -> StoreResult<()> {
        let table = collection.table();
        let expected = expected_version.map(to_i64).transpose()?;
        let done = sqlx::query(&format!(
            "DELETE FROM {table} WHERE caller_scope = ? AND id = ? AND (? IS NULL OR version = ?)"
        ))
        .bind(scope.as_str())
        .bind(id)
        .bind(expected)
        .bind(expected)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        match self.current_version(table, scope, id).await? {
            Some(current) => Err(StoreError::VersionConflict {
                current: Some(current),
            }),
            None => Err(StoreError::NotFound),
        }
    }

    async fn revisions(&self, scopes: &[CallerScope]) -> StoreResult<Vec<Revisions>> {
        let names: Vec<&str> = scopes.iter().map(CallerScope::as_str).collect();
        let rows = sqlx::query(
            "SELECT caller_scope, collection, revision FROM revisions WHERE caller_scope IN (SELECT value FROM json_each(?))",
        )
        .bind(to_json(&serde_json::json!(names))?)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        revisions_from_rows(scopes, &rows)
    }

    async fn import_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        docs: &[(String, Value)],
        now: Timestamp,
    ) -> StoreResult<ImportSummary> {
        let table = collection.table();
        let sql = format!(
            "INSERT INTO {table} AS t ({DOC_COLUMNS}) VALUES (?, ?, 1, ?, ?, ?)
             ON CONFLICT (caller_scope, id) DO UPDATE
               SET body = excluded.body, version = t.version + 1, updated_at = excluded.updated_at
               WHERE t.body <> excluded.body
             RETURNING version"
        );
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let mut summary = ImportSummary::default();
        for (id, body) in docs {
            let row = sqlx::query(&sql)
                .bind(scope.as_str())
                .bind(id)
                .bind(to_json(body)?)
                .bind(now.as_millis())
                .bind(now.as_millis())
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
            summary.count(match row {
                None => ImportOutcome::Unchanged,
                Some(row) if row.try_get::<i64, _>(0).map_err(backend)? == 1 => {
                    ImportOutcome::Created
                }
                Some(_) => ImportOutcome::Updated,
            });
        }
        tx.commit().await.map_err(backend)?;
        Ok(summary)
    }
}

#[async_trait]
impl ReceiptStore for SqliteStore {
    async fn insert_receipts(&self, receipts: &[InjectionReceipt]) -> StoreResult<()> {
        if receipts.is_empty() {
            return Ok(());
        }
        // One multi-row statement per chunk: each statement is a round trip to SQLite's worker
        // thread, which costs more than the insert itself. One chunk needs no transaction.
        let mut conn = self.pool.acquire().await.map_err(backend)?;
        let single = receipts.len() <= RECEIPT_CHUNK;
        if !single {
            (&mut *conn).execute("BEGIN").await.map_err(backend)?;
        }
        for chunk in receipts.chunks(RECEIPT_CHUNK) {
            let mut sql = String::from(
                "INSERT INTO injection_receipts (caller_scope, id, sha256, body, created_at) VALUES ",
            );
            for i in 0..chunk.len() {
                sql.push_str(if i == 0 {
                    "(?, ?, ?, ?, ?)"
                } else {
                    ", (?, ?, ?, ?, ?)"
                });
            }
            sql.push_str(" ON CONFLICT (caller_scope, id) DO NOTHING");
            let mut query = sqlx::query(&sql);
            for receipt in chunk {
                query = query
                    .bind(receipt.body.caller_scope.as_str())
                    .bind(&receipt.id)
                    .bind(&receipt.sha256)
                    .bind(serde_json::to_string(receipt).map_err(backend)?)
                    .bind(receipt.body.created_at.as_millis());
            }
            if let Err(err) = query.execute(&mut *conn).await {
                if !single {
                    let _ = (&mut *conn).execute("ROLLBACK").await;
                }
                return Err(backend(err));
            }
        }
        if !single {
            (&mut *conn).execute("COMMIT").await.map_err(backend)?;
        }
        Ok(())
    }

    async fn get_receipt(
        &self,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<InjectionReceipt>> {
        let row =
            sqlx::query("SELECT body FROM injection_receipts WHERE caller_scope = ? AND id = ?")
                .bind(scope.as_str())
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?;
        row.map(|r| receipt_from_row(&r)).transpose()
    }
}

#[async_trait]
impl EntityStore for SqliteStore {
    async fn entity_evictions(&self, scope: &CallerScope) -> StoreResult<u64> {
        let evicted: Option<i64> =
            sqlx::query_scalar("SELECT evicted FROM entity_evictions WHERE caller_scope = ?")
                .bind(scope.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?;
        Ok(evicted.map(|n| n.max(0) as u64).unwrap_or(0))
    }

    async fn record_entities(
        &self,
        scope: &CallerScope,
        project_tag: &str,
        observations: &[EntityObservation],
        now: Timestamp,
        max_per_scope: u64,
    ) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let mut added = false;
        for obs in observations {
            let count: i64 = sqlx::query_scalar(
                "INSERT INTO working_entities (caller_scope, project_tag, kind, value, count, first_seen, last_seen)
                 VALUES (?, ?, ?, ?, 1, ?, ?)
                 ON CONFLICT (caller_scope, project_tag, kind, value) DO UPDATE
                   SET count = count + 1, last_seen = max(last_seen, excluded.last_seen)
                 RETURNING count",
            )
            .bind(scope.as_str())
            .bind(project_tag)
            .bind(obs.kind.as_str())
            .bind(&obs.value)
            .bind(now.as_millis())
            .bind(now.as_millis())
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?;
            added |= count == 1;
        }
        // Only a new entity can push the caller over its bound (counting is a scan).
        if !added {
            tx.commit().await.map_err(backend)?;
            return Ok(0);
        }
        let total: i64 =
            sqlx::query_scalar("SELECT count(*) FROM working_entities WHERE caller_scope = ?")
                .bind(scope.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(backend)?;
        let excess = (total as u64).saturating_sub(max_per_scope);
        if excess > 0 {
            sqlx::query(
                "DELETE FROM working_entities WHERE rowid IN (
                   SELECT rowid FROM working_entities WHERE caller_scope = ?
                   ORDER BY count ASC, last_seen ASC, project_tag ASC, kind ASC, value ASC LIMIT ?)",
            )
            .bind(scope.as_str())
            .bind(to_i64(excess)?)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            sqlx::query(
                "INSERT INTO entity_evictions (caller_scope, evicted) VALUES (?, ?)
                 ON CONFLICT (caller_scope) DO UPDATE SET evicted = entity_evictions.evicted + excluded.evicted",
            )
            .bind(scope.as_str())
            .bind(to_i64(excess)?)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(excess)
    }

    async fn list_entities(
        &self,
        scope: &CallerScope,
        project_tag: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<WorkingEntity>> {
        let rows = sqlx::query(
            "SELECT * FROM working_entities WHERE caller_scope = ? AND (? IS NULL OR project_tag = ?)
             ORDER BY count DESC, last_seen DESC, project_tag ASC, kind ASC, value ASC LIMIT ?",
        )
        .bind(scope.as_str())
        .bind(project_tag)
        .bind(project_tag)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter().map(entity_from_row).collect()
    }
}

#[async_trait]
impl OutcomeStore for SqliteStore {
    async fn fired_in_turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        turn: u64,
    ) -> StoreResult<Vec<(String, u64)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT provision_id, provision_version AS version FROM rule_outcomes
             WHERE caller_scope = ? AND conversation_id = ? AND turn = ?
               AND outcome IN ('injected', 'responded_directly')
             ORDER BY provision_id, provision_version",
        )
        .bind(scope.as_str())
        .bind(conversation_id)
        .bind(to_i64(turn)?)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|r| Ok((r.text("provision_id")?, version_of(r)?)))
            .collect()
    }

    async fn rule_stats(&self, scope: &CallerScope) -> StoreResult<Vec<RuleStats>> {
        let rows = sqlx::query(
            "SELECT provision_id, outcome, count(*) AS version FROM rule_outcomes WHERE caller_scope = ?
             GROUP BY provision_id, outcome ORDER BY provision_id",
        )
        .bind(scope.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rule_stats_from_rows(&rows)
    }

    async fn insert_outcomes(&self, outcomes: &[RuleOutcomeRecord]) -> StoreResult<()> {
        if outcomes.is_empty() {
            return Ok(());
        }
        // Multi-row statements, as for receipts: the memory worker hands over whole batches.
        let statement = |chunk: &[RuleOutcomeRecord]| -> StoreResult<_> {
            let mut sql = String::from(
                "INSERT INTO rule_outcomes (caller_scope, conversation_id, turn, provision_id, provision_version,
                   outcome, error_signature, receipt_id, recorded_at) VALUES ",
            );
            for i in 0..chunk.len() {
                sql.push_str(if i == 0 { "" } else { ", " });
                sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?, ?)");
            }
            let mut binds = Vec::with_capacity(chunk.len());
            for o in chunk {
                binds.push((to_i64(o.turn)?, to_i64(o.provision_version)?));
            }
            Ok((sql, binds))
        };
        let mut tx = self.pool.begin().await.map_err(backend)?;
        for chunk in outcomes.chunks(OUTCOME_CHUNK) {
            let (sql, numbers) = statement(chunk)?;
            let mut query = sqlx::query(&sql);
            for (o, (turn, version)) in chunk.iter().zip(numbers) {
                query = query
                    .bind(o.caller_scope.as_str())
                    .bind(&o.conversation_id)
                    .bind(turn)
                    .bind(&o.provision_id)
                    .bind(version)
                    .bind(o.outcome.as_str())
                    .bind(o.error_signature.as_deref())
                    .bind(o.receipt_id.as_deref())
                    .bind(o.recorded_at.as_millis());
            }
            query.execute(&mut *tx).await.map_err(backend)?;
        }
        tx.commit().await.map_err(backend)
    }

    async fn list_outcomes(
        &self,
        scope: &CallerScope,
        limit: u32,
    ) -> StoreResult<Vec<RuleOutcomeRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM rule_outcomes WHERE caller_scope = ? ORDER BY seq DESC LIMIT ?",
        )
        .bind(scope.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter().map(outcome_from_row).collect()
    }
}

#[async_trait]
impl ClaimStore for SqliteStore {
    async fn claim_once(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        provision_ids: &[String],
        now: Timestamp,
    ) -> StoreResult<Vec<String>> {
        if provision_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "INSERT INTO conversation_claims (caller_scope, conversation_id, provision_id, claimed_at)
             SELECT ?, ?, value, ? FROM json_each(?) WHERE true
             ON CONFLICT (caller_scope, conversation_id, provision_id) DO NOTHING
             RETURNING provision_id",
        )
        .bind(scope.as_str())
        .bind(conversation_id)
        .bind(now.as_millis())
        .bind(to_json(&serde_json::json!(provision_ids))?)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        claimed_ids(provision_ids, &rows)
    }

    async fn release_claims(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        provision_ids: &[String],
    ) -> StoreResult<()> {
        if provision_ids.is_empty() {
            return Ok(());
        }
        sqlx::query("DELETE FROM conversation_claims WHERE caller_scope = ? AND conversation_id = ? AND provision_id IN (SELECT value FROM json_each(?))")
            .bind(scope.as_str())
            .bind(conversation_id)
            .bind(to_json(&serde_json::json!(provision_ids))?)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

#[async_trait]
impl VectorStore for SqliteStore {
    async fn get_vectors(
        &self,
        scope: &CallerScope,
        model_id: &str,
        wanted: &[(String, u64)],
    ) -> StoreResult<Vec<StoredVectors>> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = wanted.iter().map(|(id, _)| id.as_str()).collect();
        let rows = sqlx::query(
            "SELECT provision_id, provision_version, dimensions, examples, negatives FROM rule_vectors
             WHERE caller_scope = ? AND model_id = ? AND provision_id IN (SELECT value FROM json_each(?))",
        )
        .bind(scope.as_str())
        .bind(model_id)
        .bind(to_json(&serde_json::json!(ids))?)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        let mut found = Vec::new();
        for row in &rows {
            let vectors = vectors_from_row(
                row.text("provision_id")?,
                row.int("provision_version")?,
                row.int("dimensions")?,
                &row.try_get::<Vec<u8>, _>("examples").map_err(backend)?,
                &row.try_get::<Vec<u8>, _>("negatives").map_err(backend)?,
            )?;
            if wanted
                .iter()
                .any(|(id, v)| *id == vectors.provision_id && *v == vectors.version)
            {
                found.push(vectors);
            }
        }
        Ok(found)
    }

    async fn put_vectors(
        &self,
        scope: &CallerScope,
        model_id: &str,
        vectors: &StoredVectors,
        now: Timestamp,
    ) -> StoreResult<()> {
        let dimensions = vectors.vectors.examples.first().map_or(0, Vec::len);
        sqlx::query(
            "INSERT INTO rule_vectors (caller_scope, provision_id, model_id, provision_version, dimensions, examples, negatives, computed_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (caller_scope, provision_id, model_id) DO UPDATE SET
                 provision_version = excluded.provision_version, dimensions = excluded.dimensions,
                 examples = excluded.examples, negatives = excluded.negatives, computed_at = excluded.computed_at
             WHERE rule_vectors.provision_version <= excluded.provision_version",
        )
        .bind(scope.as_str())
        .bind(&vectors.provision_id)
        .bind(model_id)
        .bind(to_i64(vectors.version)?)
        .bind(i64::try_from(dimensions).map_err(backend)?)
        .bind(encode_vectors(&vectors.vectors.examples))
        .bind(encode_vectors(&vectors.vectors.negatives))
        .bind(now.as_millis())
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        let mut conn = self.pool.acquire().await.map_err(backend)?;
        // IMMEDIATE takes the write lock up front, so two processes starting on one file
        // cannot both apply the same migration.
        (&mut *conn)
            .execute("BEGIN IMMEDIATE")
            .await
            .map_err(backend)?;
        let result = apply_pending(&mut conn).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        (&mut *conn).execute(end).await.map_err(backend)?;
        result
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

async fn apply_pending(conn: &mut sqlx::SqliteConnection) -> StoreResult<Vec<AppliedMigration>> {
    (&mut *conn)
        .execute(
            "CREATE TABLE IF NOT EXISTS herma_migrations (
           version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
        )
        .await
        .map_err(backend)?;
    let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM herma_migrations")
        .fetch_all(&mut *conn)
        .await
        .map_err(backend)?;
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        (&mut *conn).execute(*sql).await.map_err(|e| {
            StoreError::Backend(format!("migration {version} ({name}) failed: {e}"))
        })?;
        sqlx::query("INSERT INTO herma_migrations (version, name, applied_at) VALUES (?, ?, strftime('%s','now') * 1000)")
            .bind(version)
            .bind(name)
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
        applied.push(AppliedMigration {
            version: *version,
            name: (*name).to_owned(),
        });
    }
    Ok(applied)
}

herma_store_sql::governed_sql_impl!(
    super::SqliteStore,
    sqlx::Sqlite,
    herma_store_sql::governed::plain
);
