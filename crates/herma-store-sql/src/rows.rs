//! Reading rows: the [`SqlRow`] column reads both drivers' rows implement, and the decoders of
//! every record (both engines store the same columns with the same meaning).

use herma_core::key::{KeyDigest, KeyId, Scopes};
use herma_core::model::{
    EntityKind, HarnessKey, InjectionReceipt, OutcomeKind, RuleOutcomeRecord, WorkingEntity,
};
use herma_core::semantic::RuleVectors;
use herma_core::{CallerScope, Timestamp};
use herma_store::{Collection, Revisions, StoreResult, StoredDoc, StoredVectors, decode_vectors};
use serde_json::Value;

use crate::{corrupt, to_u64};

/// The column reads the decoders need, implemented for both backends' rows.
pub trait SqlRow {
    fn text(&self, column: &str) -> StoreResult<String>;
    fn opt_text(&self, column: &str) -> StoreResult<Option<String>>;
    fn int(&self, column: &str) -> StoreResult<i64>;
    fn opt_int(&self, column: &str) -> StoreResult<Option<i64>>;
    fn bytes(&self, column: &str) -> StoreResult<Vec<u8>>;
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! sql_row {
    ($row:ty) => {
        impl SqlRow for $row {
            fn text(&self, column: &str) -> StoreResult<String> {
                sqlx::Row::try_get(self, column)
                    .map_err(|e| herma_store::StoreError::Backend(e.to_string()))
            }
            fn opt_text(&self, column: &str) -> StoreResult<Option<String>> {
                sqlx::Row::try_get(self, column)
                    .map_err(|e| herma_store::StoreError::Backend(e.to_string()))
            }
            fn int(&self, column: &str) -> StoreResult<i64> {
                sqlx::Row::try_get(self, column)
                    .map_err(|e| herma_store::StoreError::Backend(e.to_string()))
            }
            fn opt_int(&self, column: &str) -> StoreResult<Option<i64>> {
                sqlx::Row::try_get(self, column)
                    .map_err(|e| herma_store::StoreError::Backend(e.to_string()))
            }
            fn bytes(&self, column: &str) -> StoreResult<Vec<u8>> {
                sqlx::Row::try_get(self, column)
                    .map_err(|e| herma_store::StoreError::Backend(e.to_string()))
            }
        }
    };
}

#[cfg(feature = "sqlite")]
sql_row!(sqlx::sqlite::SqliteRow);
#[cfg(feature = "postgres")]
sql_row!(sqlx::postgres::PgRow);

pub(crate) fn scope(row: &impl SqlRow) -> StoreResult<CallerScope> {
    CallerScope::parse(&row.text("caller_scope")?).ok_or_else(|| corrupt("caller_scope"))
}

pub(crate) fn time(row: &impl SqlRow, column: &str) -> StoreResult<Timestamp> {
    row.int(column).map(Timestamp::from_millis)
}

pub(crate) fn opt_time(row: &impl SqlRow, column: &str) -> StoreResult<Option<Timestamp>> {
    Ok(row.opt_int(column)?.map(Timestamp::from_millis))
}

/// A JSON text column.
pub(crate) fn json(row: &impl SqlRow, column: &str) -> StoreResult<Value> {
    serde_json::from_str(&row.text(column)?).map_err(|e| corrupt(&format!("{column}: {e}")))
}

/// A nullable JSON text column.
pub(crate) fn opt_json(row: &impl SqlRow, column: &str) -> StoreResult<Option<Value>> {
    row.opt_text(column)?
        .map(|text| serde_json::from_str(&text).map_err(|e| corrupt(&format!("{column}: {e}"))))
        .transpose()
}

pub(crate) fn doc_from_row(row: &impl SqlRow) -> StoreResult<StoredDoc> {
    Ok(StoredDoc {
        caller_scope: scope(row)?,
        id: row.text("id")?,
        version: to_u64(row.int("version")?)?,
        body: serde_json::from_str(&row.text("body")?)
            .map_err(|e| corrupt(&format!("document body: {e}")))?,
        created_at: time(row, "created_at")?,
        updated_at: time(row, "updated_at")?,
    })
}

pub(crate) fn key_from_row(row: &impl SqlRow) -> StoreResult<HarnessKey> {
    Ok(HarnessKey {
        key_id: KeyId::parse(&row.text("key_id")?).ok_or_else(|| corrupt("key_id"))?,
        caller_scope: scope(row)?,
        scopes: Scopes::parse_list(&row.text("scopes")?, "/scopes")
            .map_err(|_| corrupt("scopes"))?,
        harness: row.opt_text("harness")?,
        label: row.text("label")?,
        cohorts: serde_json::from_str(&row.text("cohorts")?).map_err(|_| corrupt("cohorts"))?,
        digest: KeyDigest::from_hex(&row.text("digest")?).ok_or_else(|| corrupt("digest"))?,
        created_at: time(row, "created_at")?,
        revoked_at: row.opt_int("revoked_at")?.map(Timestamp::from_millis),
    })
}

pub(crate) fn receipt_from_row(row: &impl SqlRow) -> StoreResult<InjectionReceipt> {
    serde_json::from_str(&row.text("body")?).map_err(|e| corrupt(&format!("receipt: {e}")))
}

pub(crate) fn entity_from_row(row: &impl SqlRow) -> StoreResult<WorkingEntity> {
    Ok(WorkingEntity {
        caller_scope: scope(row)?,
        project_tag: row.text("project_tag")?,
        kind: EntityKind::parse(&row.text("kind")?).ok_or_else(|| corrupt("entity kind"))?,
        value: row.text("value")?,
        count: to_u64(row.int("count")?)?,
        first_seen: time(row, "first_seen")?,
        last_seen: time(row, "last_seen")?,
    })
}

pub(crate) fn outcome_from_row(row: &impl SqlRow) -> StoreResult<RuleOutcomeRecord> {
    Ok(RuleOutcomeRecord {
        caller_scope: scope(row)?,
        conversation_id: row.text("conversation_id")?,
        turn: to_u64(row.int("turn")?)?,
        provision_id: row.text("provision_id")?,
        provision_version: to_u64(row.int("provision_version")?)?,
        outcome: OutcomeKind::parse(&row.text("outcome")?).ok_or_else(|| corrupt("outcome"))?,
        error_signature: row.opt_text("error_signature")?,
        receipt_id: row.opt_text("receipt_id")?,
        recorded_at: time(row, "recorded_at")?,
    })
}

/// Reads a version column as `u64`.
pub(crate) fn version_of(row: &impl SqlRow) -> StoreResult<u64> {
    to_u64(row.int("version")?)
}

/// Folds `(caller_scope, collection, revision)` rows into one [`Revisions`] per scope.
pub(crate) fn revisions_from_rows(
    scopes: &[CallerScope],
    rows: &[impl SqlRow],
) -> StoreResult<Vec<Revisions>> {
    let mut out = vec![Revisions::default(); scopes.len()];
    for row in rows {
        let scope = row.text("caller_scope")?;
        let collection = Collection::parse_table(&row.text("collection")?)
            .ok_or_else(|| corrupt("revision collection"))?;
        let revision = to_u64(row.int("revision")?)?;
        for (i, s) in scopes.iter().enumerate() {
            if s.as_str() == scope {
                out[i].set(collection, revision);
            }
        }
    }
    Ok(out)
}

/// The claimed ids of a `RETURNING provision_id`, in the order they were asked for.
pub(crate) fn claimed_ids(asked: &[String], rows: &[impl SqlRow]) -> StoreResult<Vec<String>> {
    let returned = rows
        .iter()
        .map(|r| r.text("provision_id"))
        .collect::<StoreResult<Vec<_>>>()?;
    let mut out: Vec<String> = asked
        .iter()
        .filter(|id| returned.contains(id))
        .cloned()
        .collect();
    out.dedup();
    Ok(out)
}

/// Folds `(provision_id, outcome, count AS version)` rows into per-provision stats.
pub(crate) fn rule_stats_from_rows(
    rows: &[impl SqlRow],
) -> StoreResult<Vec<herma_core::memory::RuleStats>> {
    let mut out: Vec<herma_core::memory::RuleStats> = Vec::new();
    for row in rows {
        let id = row.text("provision_id")?;
        let outcome =
            OutcomeKind::parse(&row.text("outcome")?).ok_or_else(|| corrupt("outcome"))?;
        let count = version_of(row)?;
        match out.last_mut() {
            Some(last) if last.provision_id == id => last.add(outcome, count),
            _ => {
                let mut stats = herma_core::memory::RuleStats {
                    provision_id: id,
                    ..Default::default()
                };
                stats.add(outcome, count);
                out.push(stats);
            }
        }
    }
    Ok(out)
}

/// A `rule_vectors` row (`provision_id, provision_version, dimensions, examples, negatives`).
pub(crate) fn vectors_from_row(row: &impl SqlRow) -> StoreResult<StoredVectors> {
    let dimensions = usize::try_from(row.int("dimensions")?)
        .map_err(|_| corrupt("a negative vector dimension"))?;
    Ok(StoredVectors {
        provision_id: row.text("provision_id")?,
        version: to_u64(row.int("provision_version")?)?,
        vectors: RuleVectors {
            examples: decode_vectors(&row.bytes("examples")?, dimensions)?,
            negatives: decode_vectors(&row.bytes("negatives")?, dimensions)?,
        },
    })
}
