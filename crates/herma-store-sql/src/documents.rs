//! The versioned documents (provisions, context entries): one table per [`Collection`], the
//! same columns and statements for each.

use async_trait::async_trait;
use herma_core::{CallerScope, Timestamp};
use herma_store::{
    Collection, DocUsage, DocumentStore, ImportOutcome, ImportSummary, Page, Revisions, StoreError,
    StoreResult, StoredDoc,
};
use serde_json::Value;

use crate::rows::{doc_from_row, revisions_from_rows, version_of};
use crate::{Backend, SqlRow, SqlStore, to_i64, to_json, to_u64};

const DOC_COLUMNS: &str = "caller_scope, id, version, body, created_at, updated_at";

impl<B: Backend> SqlStore<B> {
    async fn current_version(
        &self,
        table: &str,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<u64>> {
        let sql = format!("SELECT version FROM {table} WHERE caller_scope = ? AND id = ?");
        let query = B::query(&sql).bind(scope.as_str()).bind(id);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| version_of(&row))
            .transpose()
    }

    /// The error of a compare-and-set that matched no row: a conflict with the current version,
    /// or `NotFound`.
    async fn missed(&self, table: &str, scope: &CallerScope, id: &str) -> StoreError {
        match self.current_version(table, scope, id).await {
            Ok(Some(current)) => StoreError::VersionConflict {
                current: Some(current),
            },
            Ok(None) => StoreError::NotFound,
            Err(err) => err,
        }
    }
}

#[async_trait]
impl<B: Backend> DocumentStore for SqlStore<B> {
    async fn create_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        body: &Value,
        now: Timestamp,
    ) -> StoreResult<StoredDoc> {
        let table = collection.table();
        let sql = format!(
            "INSERT INTO {table} ({DOC_COLUMNS}) VALUES (?, ?, 1, ?, ?, ?)
             ON CONFLICT (caller_scope, id) DO NOTHING RETURNING {DOC_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(id)
            .bind(to_json(body)?)
            .bind(now.as_millis())
            .bind(now.as_millis());
        match self.db.fetch_optional(query).await? {
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
        let sql = format!("SELECT {DOC_COLUMNS} FROM {table} WHERE caller_scope = ? AND id = ?");
        let query = B::query(&sql).bind(scope.as_str()).bind(id);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| doc_from_row(&row))
            .transpose()
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
        let sql = format!(
            "SELECT {DOC_COLUMNS} FROM {table} WHERE caller_scope = ? AND id {} ORDER BY id",
            B::TEXT_IN
        );
        let query = B::query(&sql).bind(scope.as_str()).bind(ids);
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(doc_from_row)
            .collect()
    }

    async fn list_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        page: &Page,
    ) -> StoreResult<Vec<StoredDoc>> {
        let table = collection.table();
        let sql = format!(
            "SELECT {DOC_COLUMNS} FROM {table}
             WHERE caller_scope = ? AND (CAST(? AS TEXT) IS NULL OR id > ?) ORDER BY id LIMIT ?"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(page.after.as_deref())
            .bind(page.after.as_deref())
            .bind(i64::from(page.limit));
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(doc_from_row)
            .collect()
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
        let sql = format!(
            "UPDATE {table} SET body = ?, version = version + 1, updated_at = ?
             WHERE caller_scope = ? AND id = ? AND version = ? RETURNING {DOC_COLUMNS}"
        );
        let query = B::query(&sql)
            .bind(to_json(body)?)
            .bind(now.as_millis())
            .bind(scope.as_str())
            .bind(id)
            .bind(to_i64(expected_version)?);
        match self.db.fetch_optional(query).await? {
            Some(row) => doc_from_row(&row),
            None => Err(self.missed(table, scope, id).await),
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
        let sql = format!(
            "DELETE FROM {table}
             WHERE caller_scope = ? AND id = ? AND (CAST(? AS BIGINT) IS NULL OR version = ?)"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(id)
            .bind(expected)
            .bind(expected);
        if self.db.execute(query).await? == 1 {
            return Ok(());
        }
        Err(self.missed(table, scope, id).await)
    }

    async fn usage(&self, scope: &CallerScope) -> StoreResult<DocUsage> {
        let mut usage = DocUsage::default();
        for collection in Collection::ALL {
            let sql = format!(
                "SELECT count(*) AS n, COALESCE(SUM({}), 0) AS bytes FROM {} WHERE caller_scope = ?",
                B::BODY_BYTES,
                collection.table()
            );
            let row = self
                .db
                .fetch_optional(B::query(&sql).bind(scope.as_str()))
                .await?;
            let (count, bytes) = match row {
                Some(row) => (to_u64(row.int("n")?)?, to_u64(row.int("bytes")?)?),
                None => (0, 0),
            };
            match collection {
                Collection::Provisions => usage.provisions = count,
                Collection::ContextEntries => usage.context_entries = count,
            }
            usage.bytes += bytes;
        }
        Ok(usage)
    }

    async fn revisions(&self, scopes: &[CallerScope]) -> StoreResult<Vec<Revisions>> {
        let sql = format!(
            "SELECT caller_scope, collection, revision FROM revisions WHERE caller_scope {}",
            B::TEXT_IN
        );
        let names: Vec<&str> = scopes.iter().map(CallerScope::as_str).collect();
        let query = B::query(&sql).bind(names);
        revisions_from_rows(scopes, &self.db.fetch(query).await?)
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
        let upsert = B::statement(&sql);
        let mut queries = Vec::with_capacity(docs.len());
        for (id, body) in docs {
            queries.push(
                upsert
                    .query()
                    .bind(scope.as_str())
                    .bind(id)
                    .bind(to_json(body)?)
                    .bind(now.as_millis())
                    .bind(now.as_millis()),
            );
        }
        let mut summary = ImportSummary::default();
        for rows in self.db.batch(queries).await? {
            summary.count(match rows.into_iter().next() {
                None => ImportOutcome::Unchanged,
                Some(row) if version_of(&row)? == 1 => ImportOutcome::Created,
                Some(_) => ImportOutcome::Updated,
            });
        }
        Ok(summary)
    }
}
