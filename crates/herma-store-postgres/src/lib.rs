//! PostgreSQL implementation of Herma's stores: any number of Herma processes share one
//! database. Migrations are embedded and serialized across processes by an advisory lock.
//!
//! Every compare-and-set is one `UPDATE … WHERE version = $n RETURNING`, atomic under
//! PostgreSQL's row locking at any isolation level.

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
use herma_store_sql::{
    SqlRow, backend, claimed_ids, doc_from_row, entity_from_row, key_from_row, outcome_from_row,
    receipt_from_row, revisions_from_rows, rule_stats_from_rows, to_i64, to_json, vectors_from_row,
    version_of,
};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool, Row};

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

/// Key of the advisory lock that serializes migrations across processes.
const MIGRATION_LOCK: i64 = 0x4845_524d_4100; // "HERMA"

pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Connects to `url`. Does not migrate.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Backend(format!("invalid PostgreSQL URL: {e}")))?;
        Self::connect_with(options).await
    }

    /// Connects with every session's `search_path` set to `schema`, creating the schema if it
    /// does not exist. Lets several Herma deployments (or test runs) share one database.
    pub async fn connect_in_schema(url: &str, schema: &str) -> StoreResult<Self> {
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
        let mut tx = bootstrap.begin().await.map_err(backend)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        (&mut *tx)
            .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
            .await
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        bootstrap.close().await;
        Self::connect_with(options.options([("search_path", schema)])).await
    }

    async fn connect_with(options: PgConnectOptions) -> StoreResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(|e| StoreError::Backend(format!("connecting to PostgreSQL: {e}")))?;
        Ok(Self { pool })
    }

    async fn current_version(
        &self,
        table: &str,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<u64>> {
        let row = sqlx::query(&format!(
            "SELECT version FROM {table} WHERE caller_scope = $1 AND id = $2"
        ))
        .bind(scope.as_str())
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        row.map(|r| version_of(&r)).transpose()
    }
}

const DOC_COLUMNS: &str = "caller_scope, id, version, body, created_at, updated_at";

#[async_trait]
impl KeyStore for PgStore {
    async fn insert_key(&self, key: &HarnessKey) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO harness_keys (key_id, caller_scope, scopes, harness, label, digest, created_at, revoked_at, cohorts)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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
        let row = sqlx::query("SELECT * FROM harness_keys WHERE key_id = $1")
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
            "UPDATE harness_keys SET revoked_at = $1 WHERE key_id = $2 AND revoked_at IS NULL",
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
impl DocumentStore for PgStore {
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
            "INSERT INTO {table} ({DOC_COLUMNS}) VALUES ($1, $2, 1, $3, $4, $4)
             ON CONFLICT (caller_scope, id) DO NOTHING RETURNING {DOC_COLUMNS}"
        ))
        .bind(scope.as_str())
        .bind(id)
        .bind(to_json(body)?)
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
            "SELECT {DOC_COLUMNS} FROM {table} WHERE caller_scope = $1 AND id = $2"
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
            "SELECT {DOC_COLUMNS} FROM {table} WHERE caller_scope = $1 AND id = ANY($2) ORDER BY id"
        ))
        .bind(scope.as_str())
        .bind(ids)
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
             WHERE caller_scope = $1 AND ($2::text IS NULL OR id > $2) ORDER BY id LIMIT $3"
        ))
        .bind(scope.as_str())
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
            "UPDATE {table} SET body = $1, version = version + 1, updated_at = $2
             WHERE caller_scope = $3 AND id = $4 AND version = $5 RETURNING {DOC_COLUMNS}"
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
            "DELETE FROM {table} WHERE caller_scope = $1 AND id = $2 AND ($3::bigint IS NULL OR version = $3)"
        ))
        .bind(scope.as_str())
        .bind(id)
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
            "SELECT caller_scope, collection, revision FROM revisions WHERE caller_scope = ANY($1)",
        )
        .bind(&names)
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
            "INSERT INTO {table} AS t ({DOC_COLUMNS}) VALUES ($1, $2, 1, $3, $4, $4)
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
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
            summary.count(match row {
                None => ImportOutcome::Unchanged,
                Some(row) if version_of(&row)? == 1 => ImportOutcome::Created,
                Some(_) => ImportOutcome::Updated,
            });
        }
        tx.commit().await.map_err(backend)?;
        Ok(summary)
    }
}

#[async_trait]
impl ReceiptStore for PgStore {
    async fn insert_receipts(&self, receipts: &[InjectionReceipt]) -> StoreResult<()> {
        if receipts.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(backend)?;
        for receipt in receipts {
            let body = serde_json::to_string(receipt).map_err(backend)?;
            sqlx::query(
                "INSERT INTO injection_receipts (caller_scope, id, sha256, body, created_at)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (caller_scope, id) DO NOTHING",
            )
            .bind(receipt.body.caller_scope.as_str())
            .bind(&receipt.id)
            .bind(&receipt.sha256)
            .bind(body)
            .bind(receipt.body.created_at.as_millis())
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)
    }

    async fn get_receipt(
        &self,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<InjectionReceipt>> {
        let row =
            sqlx::query("SELECT body FROM injection_receipts WHERE caller_scope = $1 AND id = $2")
                .bind(scope.as_str())
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?;
        row.map(|r| receipt_from_row(&r)).transpose()
    }
}

#[async_trait]
impl EntityStore for PgStore {
    async fn entity_evictions(&self, scope: &CallerScope) -> StoreResult<u64> {
        let evicted: Option<i64> =
            sqlx::query_scalar("SELECT evicted FROM entity_evictions WHERE caller_scope = $1")
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
                "INSERT INTO working_entities AS w (caller_scope, project_tag, kind, value, count, first_seen, last_seen)
                 VALUES ($1, $2, $3, $4, 1, $5, $5)
                 ON CONFLICT (caller_scope, project_tag, kind, value) DO UPDATE
                   SET count = w.count + 1, last_seen = GREATEST(w.last_seen, excluded.last_seen)
                 RETURNING w.count",
            )
            .bind(scope.as_str())
            .bind(project_tag)
            .bind(obs.kind.as_str())
            .bind(&obs.value)
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
            sqlx::query_scalar("SELECT count(*) FROM working_entities WHERE caller_scope = $1")
                .bind(scope.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(backend)?;
        let excess = (total as u64).saturating_sub(max_per_scope);
        if excess > 0 {
            sqlx::query(
                "DELETE FROM working_entities WHERE ctid IN (
                   SELECT ctid FROM working_entities WHERE caller_scope = $1
                   ORDER BY count ASC, last_seen ASC, project_tag ASC, kind ASC, value ASC LIMIT $2)",
            )
            .bind(scope.as_str())
            .bind(to_i64(excess)?)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            sqlx::query(
                "INSERT INTO entity_evictions (caller_scope, evicted) VALUES ($1, $2)
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
            "SELECT * FROM working_entities WHERE caller_scope = $1 AND ($2::text IS NULL OR project_tag = $2)
             ORDER BY count DESC, last_seen DESC, project_tag ASC, kind ASC, value ASC LIMIT $3",
        )
        .bind(scope.as_str())
        .bind(project_tag)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter().map(entity_from_row).collect()
    }
}

#[async_trait]
impl OutcomeStore for PgStore {
    async fn fired_in_turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        turn: u64,
    ) -> StoreResult<Vec<(String, u64)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT provision_id, provision_version AS version FROM rule_outcomes
             WHERE caller_scope = $1 AND conversation_id = $2 AND turn = $3
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
            "SELECT provision_id, outcome, count(*) AS version FROM rule_outcomes WHERE caller_scope = $1
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
        // One statement for the whole batch: columns as arrays, rows by UNNEST.
        let mut turns = Vec::with_capacity(outcomes.len());
        let mut versions = Vec::with_capacity(outcomes.len());
        for o in outcomes {
            turns.push(to_i64(o.turn)?);
            versions.push(to_i64(o.provision_version)?);
        }
        let column = |f: fn(&RuleOutcomeRecord) -> Option<String>| -> Vec<Option<String>> {
            outcomes.iter().map(f).collect()
        };
        sqlx::query(
            "INSERT INTO rule_outcomes (caller_scope, conversation_id, turn, provision_id, provision_version,
               outcome, error_signature, receipt_id, recorded_at)
             SELECT s, c, t, p, v, o, e, r, a FROM UNNEST($1::text[], $2::text[], $3::bigint[],
               $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::bigint[])
               WITH ORDINALITY AS rows (s, c, t, p, v, o, e, r, a, n) ORDER BY n",

        )
        .bind(column(|o| Some(o.caller_scope.as_str().to_owned())))
        .bind(column(|o| Some(o.conversation_id.clone())))
        .bind(turns)
        .bind(column(|o| Some(o.provision_id.clone())))
        .bind(versions)
        .bind(column(|o| Some(o.outcome.as_str().to_owned())))
        .bind(column(|o| o.error_signature.clone()))
        .bind(column(|o| o.receipt_id.clone()))
        .bind(outcomes.iter().map(|o| o.recorded_at.as_millis()).collect::<Vec<_>>())
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn list_outcomes(
        &self,
        scope: &CallerScope,
        limit: u32,
    ) -> StoreResult<Vec<RuleOutcomeRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM rule_outcomes WHERE caller_scope = $1 ORDER BY seq DESC LIMIT $2",
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
impl ClaimStore for PgStore {
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
             SELECT $1, $2, id, $3 FROM unnest($4::text[]) AS id
             ON CONFLICT (caller_scope, conversation_id, provision_id) DO NOTHING
             RETURNING provision_id",
        )
        .bind(scope.as_str())
        .bind(conversation_id)
        .bind(now.as_millis())
        .bind(provision_ids)
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
        sqlx::query("DELETE FROM conversation_claims WHERE caller_scope = $1 AND conversation_id = $2 AND provision_id = ANY($3)")
            .bind(scope.as_str())
            .bind(conversation_id)
            .bind(provision_ids)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

#[async_trait]
impl VectorStore for PgStore {
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
             WHERE caller_scope = $1 AND model_id = $2 AND provision_id = ANY($3)",
        )
        .bind(scope.as_str())
        .bind(model_id)
        .bind(&ids)
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
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
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
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        // Serializes concurrent starts of many instances: one applies, the others then see it done.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        (&mut *tx)
            .execute(
                "CREATE TABLE IF NOT EXISTS herma_migrations (
                   version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
            )
            .await
            .map_err(backend)?;
        let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM herma_migrations")
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        let mut applied = Vec::new();
        for (version, name, sql) in MIGRATIONS {
            if done.contains(version) {
                continue;
            }
            (&mut *tx).execute(*sql).await.map_err(|e| {
                StoreError::Backend(format!("migration {version} ({name}) failed: {e}"))
            })?;
            sqlx::query(
                "INSERT INTO herma_migrations (version, name, applied_at)
                 VALUES ($1, $2, (extract(epoch from now()) * 1000)::bigint)",
            )
            .bind(version)
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            applied.push(AppliedMigration {
                version: *version,
                name: (*name).to_owned(),
            });
        }
        tx.commit().await.map_err(backend)?;
        Ok(applied)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

/// Test support: the PostgreSQL URL tests use, and a fresh schema per call.
#[allow(clippy::panic)] // test support: a missing test database is a failed test
pub mod testing {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::PgStore;

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
        let store = match PgStore::connect_in_schema(&url, &fresh_schema_name()).await {
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

herma_store_sql::governed_sql_impl!(
    super::PgStore,
    sqlx::Postgres,
    herma_store_sql::governed::numbered
);
