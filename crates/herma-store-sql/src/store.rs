//! [`SqlStore`] and its keys, receipts, entities, outcomes, claims and vectors (documents are
//! in `documents`, the governed ports in `governed`).

use std::collections::{BTreeMap, HashMap, HashSet};

use async_trait::async_trait;
use herma_core::key::KeyId;
use herma_core::memory::RuleStats;
use herma_core::model::{HarnessKey, InjectionReceipt, RuleOutcomeRecord, WorkingEntity};
use herma_core::{CallerScope, Timestamp};
use herma_store::{
    AppliedMigration, ClaimStore, EntityObservation, EntityStore, EntityTurn, KeyStore,
    OutcomeStore, ReceiptStore, Store, StoreError, StoreResult, StoredVectors, VectorStore,
    encode_vectors,
};

use crate::query::{RowsInsert, RowsStatements};
use crate::rows::{
    claimed_ids, entity_from_row, key_from_row, outcome_from_row, receipt_from_row,
    rule_stats_from_rows, vectors_from_row, version_of,
};
use crate::{Backend, Query, SqlRow, backend, to_i64, to_json, to_u64};

/// Every store port in SQL over one engine's [`Backend`].
pub struct SqlStore<B> {
    pub(crate) db: B,
    receipts_insert: RowsStatements,
    outcomes_insert: RowsStatements,
    entities_upsert: RowsStatements,
}

impl<B: Backend> SqlStore<B> {
    /// The store over `db`, an open pool of one engine. Does not migrate.
    pub fn new(db: B) -> Self {
        Self {
            db,
            receipts_insert: RowsStatements::new(
                RECEIPTS_INSERT,
                RECEIPTS_INSERT.rows_within::<B>(RECEIPT_CHUNK),
            ),
            outcomes_insert: RowsStatements::new(
                OUTCOMES_INSERT,
                OUTCOMES_INSERT.rows_within::<B>(OUTCOME_CHUNK),
            ),
            entities_upsert: RowsStatements::new(
                ENTITIES_UPSERT,
                ENTITIES_UPSERT.rows_within::<B>(ENTITY_CHUNK),
            ),
        }
    }

    /// Inserts `items` with multi-row statements of up to `statements.max_rows()` rows (a
    /// statement is a round trip, which costs more than the insert): one statement runs on its
    /// own, several as one batch. `bind` binds one item's row.
    async fn insert_rows<T: Sync>(
        &self,
        statements: &RowsStatements,
        items: &[T],
        bind: for<'q> fn(Query<'q>, &'q T) -> StoreResult<Query<'q>>,
    ) -> StoreResult<()> {
        let mut queries = Vec::new();
        for chunk in items.chunks(statements.max_rows()) {
            let mut query = statements.query::<B>(chunk.len());
            for item in chunk {
                query = bind(query, item)?;
            }
            queries.push(query);
        }
        match queries.len() {
            0 => Ok(()),
            1 => self.db.execute(queries.remove(0)).await.map(drop),
            _ => self.db.batch(queries).await.map(drop),
        }
    }

    /// Appends one turn's statements to `queries`: its observations counted (multi-row upserts
    /// of distinct entities), then, when `evict`, the scope's excess over `max_per_scope`
    /// counted and evicted, least seen first, both from the count after the upserts. Returns
    /// the index of the statement whose rows are the evicted entities, if it was appended.
    ///
    /// The eviction statements count the scope's entities, which costs a pass over all of them
    /// (thousands for a long-used key); `evict` is false only where [`Tally`] has shown
    /// they would find nothing over the cap.
    #[allow(clippy::too_many_arguments)]
    fn entity_turn<'q>(
        &'q self,
        queries: &mut Vec<Query<'q>>,
        scope: &'q CallerScope,
        project_tag: &'q str,
        observations: &'q [EntityObservation],
        now: Timestamp,
        max_per_scope: u64,
        evict: bool,
    ) -> StoreResult<Option<usize>> {
        let at = now.as_millis();
        let mut rest = observations;
        while !rest.is_empty() {
            // An upsert may not meet one entity twice (PostgreSQL refuses to update a row a
            // second time in one statement): a repeated observation starts the next statement.
            let mut seen = HashSet::new();
            let rows = rest
                .iter()
                .take(self.entities_upsert.max_rows())
                .take_while(|o| seen.insert((o.kind.as_str(), o.value.as_str())))
                .count();
            let (chunk, tail) = rest.split_at(rows);
            let mut query = self.entities_upsert.query::<B>(rows);
            for obs in chunk {
                query = query
                    .bind(scope.as_str())
                    .bind(project_tag)
                    .bind(obs.kind.as_str())
                    .bind(&obs.value)
                    .bind(at)
                    .bind(at);
            }
            queries.push(query);
            rest = tail;
        }
        if !evict {
            return Ok(None);
        }
        let max = to_i64(max_per_scope)?;
        queries.push(
            B::query(
                "INSERT INTO entity_evictions (caller_scope, evicted)
                 SELECT ?, total - ? FROM (
                   SELECT count(*) AS total FROM working_entities WHERE caller_scope = ?) AS c
                 WHERE total > ?
                 ON CONFLICT (caller_scope)
                 DO UPDATE SET evicted = entity_evictions.evicted + excluded.evicted",
            )
            .bind(scope.as_str())
            .bind(max)
            .bind(scope.as_str())
            .bind(max),
        );
        queries.push(
            B::query(
                "DELETE FROM working_entities
                 WHERE caller_scope = ? AND (project_tag, kind, value) IN (
                   SELECT project_tag, kind, value FROM working_entities WHERE caller_scope = ?
                   ORDER BY count ASC, last_seen ASC, project_tag ASC, kind ASC, value ASC
                   LIMIT (SELECT CASE WHEN count(*) > ? THEN count(*) - ? ELSE 0 END
                          FROM working_entities WHERE caller_scope = ?))
                 RETURNING 1 AS evicted",
            )
            .bind(scope.as_str())
            .bind(scope.as_str())
            .bind(max)
            .bind(max)
            .bind(scope.as_str()),
        );
        Ok(Some(queries.len() - 1))
    }

    /// Which turns of `turns` may take their scope over `max_per_scope`, from what the store
    /// holds before they are written: per scope, one count, and — only when the count plus
    /// every observation of the batch could pass the cap — which of the batch's entities it
    /// already has.
    async fn eviction_plan(
        &self,
        turns: &[EntityTurn],
        max_per_scope: u64,
    ) -> StoreResult<Vec<bool>> {
        // A cap the engine cannot bind is refused whether or not a turn evicts, as one by one.
        to_i64(max_per_scope)?;
        let entities: Vec<_> = turns.iter().map(distinct_entities).collect();
        let mut plan: HashMap<&CallerScope, Tally> = HashMap::new();
        for scope in distinct(turns.iter().map(|t| &t.scope)) {
            let query =
                B::query("SELECT count(*) AS total FROM working_entities WHERE caller_scope = ?")
                    .bind(scope.as_str());
            let held = match self.db.fetch_optional(query).await? {
                Some(row) => to_u64(row.int("total")?.max(0))?,
                None => 0,
            };
            let mine = || {
                turns
                    .iter()
                    .zip(&entities)
                    .filter(|(t, _)| &t.scope == scope)
                    .map(|(_, e)| e)
            };
            let at_most = held + mine().map(|e| e.len() as u64).sum::<u64>();
            if at_most <= max_per_scope {
                plan.insert(scope, Tally::BelowCap);
                continue;
            }
            // Which of the batch's entities the scope has: one read per project and kind, so
            // that each value is found through the key rather than by a pass over the scope.
            let mut wanted: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
            for &(project, kind, value) in distinct(mine().flatten()) {
                wanted.entry((project, kind)).or_default().push(value);
            }
            let sql = format!(
                "SELECT value FROM working_entities
                 WHERE caller_scope = ? AND project_tag = ? AND kind = ? AND value {}",
                B::TEXT_IN
            );
            let mut known = HashSet::new();
            for ((project, kind), values) in wanted {
                let query = B::query(&sql)
                    .bind(scope.as_str())
                    .bind(project)
                    .bind(kind)
                    .bind(values);
                for row in &self.db.fetch(query).await? {
                    known.insert((project.to_owned(), kind.to_owned(), row.text("value")?));
                }
            }
            let tally = Tally::NearCap {
                held,
                known,
                evicting: false,
            };
            plan.insert(scope, tally);
        }
        Ok(turns
            .iter()
            .zip(&entities)
            .map(|(turn, entities)| match plan.get_mut(&turn.scope) {
                Some(tally) => tally.may_evict(entities, max_per_scope),
                // Every scope of the batch is planned; were one not, evicting is always right.
                None => true,
            })
            .collect())
    }
}

/// The distinct items of `items`, in their first order.
fn distinct<T: Eq + std::hash::Hash + Copy>(
    items: impl Iterator<Item = T>,
) -> impl Iterator<Item = T> {
    let mut seen = HashSet::new();
    items.filter(move |item| seen.insert(*item))
}

/// A turn's entities, each once: `(project_tag, kind, value)`.
fn distinct_entities(turn: &EntityTurn) -> HashSet<(&str, &str, &str)> {
    turn.observations
        .iter()
        .map(|o| (turn.project_tag.as_str(), o.kind.as_str(), o.value.as_str()))
        .collect()
}

/// One scope's replay of a batch against what it held before, telling which turns can take it
/// over the cap (and so need the eviction statements, which count the whole scope) and which
/// cannot. Until the scope's first eviction the replay knows its exact count: it starts from the
/// stored count, and an upsert adds exactly the entities the scope did not have. From that turn
/// on it cannot know which entities went, so every later turn of the scope evicts as before. A
/// scope other writers fill meanwhile (another instance on PostgreSQL; on a Worker, each turn's
/// own task) may pass the cap by all their new entities until its next batch here, whose count
/// sees them.
enum Tally {
    /// Even if every observation of the batch were new, the scope stays within the cap.
    BelowCap,
    /// The scope holds `held` entities, `known` among them; `evicting` once it passed the cap.
    NearCap {
        held: u64,
        known: HashSet<(String, String, String)>,
        evicting: bool,
    },
}

impl Tally {
    /// Whether the scope's next turn, with `entities`, may leave it over `max_per_scope`.
    fn may_evict(&mut self, entities: &HashSet<(&str, &str, &str)>, max_per_scope: u64) -> bool {
        match self {
            Tally::BelowCap => false,
            Tally::NearCap {
                held,
                known,
                evicting,
            } => {
                if !*evicting {
                    for &(project, kind, value) in entities {
                        let key = (project.to_owned(), kind.to_owned(), value.to_owned());
                        if known.insert(key) {
                            *held += 1;
                        }
                    }
                    *evicting = *held > max_per_scope;
                }
                *evicting
            }
        }
    }
}

/// Entities per upsert statement (6 parameters each), where the engine's parameter limit allows.
const ENTITY_CHUNK: usize = 64;

const ENTITIES_UPSERT: RowsInsert = RowsInsert {
    head: "INSERT INTO working_entities AS w (caller_scope, project_tag, kind, value, count,
             first_seen, last_seen) VALUES ",
    row: "(?, ?, ?, ?, 1, ?, ?)",
    tail: " ON CONFLICT (caller_scope, project_tag, kind, value) DO UPDATE
             SET count = w.count + 1,
                 last_seen = CASE WHEN w.last_seen > excluded.last_seen
                             THEN w.last_seen ELSE excluded.last_seen END",
};

/// Receipts per INSERT statement (5 parameters each), where the engine's parameter limit allows.
const RECEIPT_CHUNK: usize = 64;
/// Rule outcomes per INSERT statement (9 parameters each), likewise.
const OUTCOME_CHUNK: usize = 100;

const RECEIPTS_INSERT: RowsInsert = RowsInsert {
    head: "INSERT INTO injection_receipts (caller_scope, id, sha256, body, created_at) VALUES ",
    row: "(?, ?, ?, ?, ?)",
    tail: " ON CONFLICT (caller_scope, id) DO NOTHING",
};

fn bind_receipt<'a>(query: Query<'a>, receipt: &'a InjectionReceipt) -> StoreResult<Query<'a>> {
    Ok(query
        .bind(receipt.body.caller_scope.as_str())
        .bind(&receipt.id)
        .bind(&receipt.sha256)
        .bind(receipt.to_json())
        .bind(receipt.body.created_at.as_millis()))
}

const OUTCOMES_INSERT: RowsInsert = RowsInsert {
    head: "INSERT INTO rule_outcomes (caller_scope, conversation_id, turn, provision_id,
             provision_version, outcome, error_signature, receipt_id, recorded_at) VALUES ",
    row: "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
    tail: "",
};

fn bind_outcome<'a>(query: Query<'a>, o: &'a RuleOutcomeRecord) -> StoreResult<Query<'a>> {
    Ok(query
        .bind(o.caller_scope.as_str())
        .bind(&o.conversation_id)
        .bind(to_i64(o.turn)?)
        .bind(&o.provision_id)
        .bind(to_i64(o.provision_version)?)
        .bind(o.outcome.as_str())
        .bind(o.error_signature.as_deref())
        .bind(o.receipt_id.as_deref())
        .bind(o.recorded_at.as_millis()))
}

#[async_trait]
impl<B: Backend> KeyStore for SqlStore<B> {
    async fn insert_key(&self, key: &HarnessKey) -> StoreResult<()> {
        let query = B::query(
            "INSERT INTO harness_keys (key_id, caller_scope, scopes, harness, label, digest,
               created_at, revoked_at, cohorts)
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
        .bind(to_json(&serde_json::json!(key.cohorts))?);
        self.db.execute(query).await?;
        Ok(())
    }

    async fn find_key(&self, key_id: &KeyId) -> StoreResult<Option<HarnessKey>> {
        let query = B::query("SELECT * FROM harness_keys WHERE key_id = ?").bind(key_id.as_str());
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| key_from_row(&row))
            .transpose()
    }

    async fn list_keys(&self) -> StoreResult<Vec<HarnessKey>> {
        let query = B::query("SELECT * FROM harness_keys ORDER BY created_at DESC, key_id ASC");
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(key_from_row)
            .collect()
    }

    async fn revoke_key(&self, key_id: &KeyId, at: Timestamp) -> StoreResult<bool> {
        let query = B::query(
            "UPDATE harness_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
        )
        .bind(at.as_millis())
        .bind(key_id.as_str());
        if self.db.execute(query).await? == 1 {
            return Ok(true);
        }
        match self.find_key(key_id).await? {
            Some(_) => Ok(false),
            None => Err(StoreError::NotFound),
        }
    }
}

#[async_trait]
impl<B: Backend> ReceiptStore for SqlStore<B> {
    async fn insert_receipts(&self, receipts: &[InjectionReceipt]) -> StoreResult<()> {
        self.insert_rows(&self.receipts_insert, receipts, bind_receipt)
            .await
    }

    async fn prune_receipts(&self, before: Timestamp, limit: u32) -> StoreResult<u64> {
        let query = B::query(
            "DELETE FROM injection_receipts WHERE (caller_scope, id) IN (
                 SELECT caller_scope, id FROM injection_receipts WHERE created_at < ? LIMIT ?)",
        )
        .bind(before.as_millis())
        .bind(i64::from(limit));
        self.db.execute(query).await
    }

    async fn get_receipt(
        &self,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<InjectionReceipt>> {
        let query =
            B::query("SELECT body FROM injection_receipts WHERE caller_scope = ? AND id = ?")
                .bind(scope.as_str())
                .bind(id);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| receipt_from_row(&row))
            .transpose()
    }
}

#[async_trait]
impl<B: Backend> EntityStore for SqlStore<B> {
    async fn entity_evictions(&self, scope: &CallerScope) -> StoreResult<u64> {
        let query = B::query("SELECT evicted FROM entity_evictions WHERE caller_scope = ?")
            .bind(scope.as_str());
        match self.db.fetch_optional(query).await? {
            Some(row) => Ok(to_u64(row.int("evicted")?.max(0))?),
            None => Ok(0),
        }
    }

    async fn record_entities(
        &self,
        scope: &CallerScope,
        project_tag: &str,
        observations: &[EntityObservation],
        now: Timestamp,
        max_per_scope: u64,
    ) -> StoreResult<u64> {
        let mut queries = Vec::with_capacity(3);
        let eviction = self.entity_turn(
            &mut queries,
            scope,
            project_tag,
            observations,
            now,
            max_per_scope,
            true,
        )?;
        let results = self.db.batch(queries).await?;
        Ok(eviction.and_then(|i| results.get(i)).map_or(0, Vec::len) as u64)
    }

    async fn record_entity_turns(
        &self,
        turns: &[EntityTurn],
        max_per_scope: u64,
    ) -> StoreResult<u64> {
        if turns.is_empty() {
            return Ok(0);
        }
        let may_evict = self.eviction_plan(turns, max_per_scope).await?;
        // Every turn's statements in one batch: one transaction (one commit) for all of them.
        let mut queries = Vec::with_capacity(turns.len() * 3);
        let mut evictions = Vec::with_capacity(turns.len());
        for (turn, evict) in turns.iter().zip(may_evict) {
            evictions.extend(self.entity_turn(
                &mut queries,
                &turn.scope,
                &turn.project_tag,
                &turn.observations,
                turn.at,
                max_per_scope,
                evict,
            )?);
        }
        if queries.is_empty() {
            return Ok(0);
        }
        let results = self.db.batch(queries).await?;
        Ok(evictions
            .iter()
            .map(|&i| results.get(i).map_or(0, Vec::len) as u64)
            .sum())
    }

    async fn list_entities(
        &self,
        scope: &CallerScope,
        project_tag: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<WorkingEntity>> {
        let query = B::query(
            "SELECT * FROM working_entities
             WHERE caller_scope = ? AND (CAST(? AS TEXT) IS NULL OR project_tag = ?)
             ORDER BY count DESC, last_seen DESC, project_tag ASC, kind ASC, value ASC LIMIT ?",
        )
        .bind(scope.as_str())
        .bind(project_tag)
        .bind(project_tag)
        .bind(i64::from(limit));
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(entity_from_row)
            .collect()
    }
}

#[async_trait]
impl<B: Backend> OutcomeStore for SqlStore<B> {
    async fn fired_in_turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        turn: u64,
    ) -> StoreResult<Vec<(String, u64)>> {
        let query = B::query(
            "SELECT DISTINCT provision_id, provision_version AS version FROM rule_outcomes
             WHERE caller_scope = ? AND conversation_id = ? AND turn = ?
               AND outcome IN ('injected', 'responded_directly')
             ORDER BY provision_id, provision_version",
        )
        .bind(scope.as_str())
        .bind(conversation_id)
        .bind(to_i64(turn)?);
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(|row| Ok((row.text("provision_id")?, version_of(row)?)))
            .collect()
    }

    async fn rule_stats(&self, scope: &CallerScope) -> StoreResult<Vec<RuleStats>> {
        let query = B::query(
            "SELECT provision_id, outcome, count(*) AS version FROM rule_outcomes
             WHERE caller_scope = ? GROUP BY provision_id, outcome ORDER BY provision_id",
        )
        .bind(scope.as_str());
        rule_stats_from_rows(&self.db.fetch(query).await?)
    }

    async fn prune_outcomes(&self, before: Timestamp, limit: u32) -> StoreResult<u64> {
        let query = B::query(
            "DELETE FROM rule_outcomes WHERE seq IN (
                 SELECT seq FROM rule_outcomes WHERE recorded_at < ? LIMIT ?)",
        )
        .bind(before.as_millis())
        .bind(i64::from(limit));
        self.db.execute(query).await
    }

    async fn insert_outcomes(&self, outcomes: &[RuleOutcomeRecord]) -> StoreResult<()> {
        // The memory worker hands over whole batches: multi-row statements, as for receipts.
        self.insert_rows(&self.outcomes_insert, outcomes, bind_outcome)
            .await
    }

    async fn list_outcomes(
        &self,
        scope: &CallerScope,
        limit: u32,
    ) -> StoreResult<Vec<RuleOutcomeRecord>> {
        let query = B::query(
            "SELECT * FROM rule_outcomes WHERE caller_scope = ? ORDER BY seq DESC LIMIT ?",
        )
        .bind(scope.as_str())
        .bind(i64::from(limit));
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(outcome_from_row)
            .collect()
    }
}

#[async_trait]
impl<B: Backend> ClaimStore for SqlStore<B> {
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
        let sql = format!(
            "INSERT INTO conversation_claims (caller_scope, conversation_id, provision_id, claimed_at)
             SELECT ?, ?, value, ? FROM {} WHERE true
             ON CONFLICT (caller_scope, conversation_id, provision_id) DO NOTHING
             RETURNING provision_id",
            B::TEXT_ROWS
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(conversation_id)
            .bind(now.as_millis())
            .bind(provision_ids);
        claimed_ids(provision_ids, &self.db.fetch(query).await?)
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
        let sql = format!(
            "DELETE FROM conversation_claims
             WHERE caller_scope = ? AND conversation_id = ? AND provision_id {}",
            B::TEXT_IN
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(conversation_id)
            .bind(provision_ids);
        self.db.execute(query).await?;
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> VectorStore for SqlStore<B> {
    async fn get_vectors(
        &self,
        scope: &CallerScope,
        model_id: &str,
        wanted: &[(String, u64)],
    ) -> StoreResult<Vec<StoredVectors>> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT provision_id, provision_version, dimensions, examples, negatives
             FROM rule_vectors WHERE caller_scope = ? AND model_id = ? AND provision_id {}",
            B::TEXT_IN
        );
        let ids: Vec<&str> = wanted.iter().map(|(id, _)| id.as_str()).collect();
        let query = B::query(&sql).bind(scope.as_str()).bind(model_id).bind(ids);
        let mut found = Vec::new();
        for row in &self.db.fetch(query).await? {
            let vectors = vectors_from_row(row)?;
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
        let query = B::query(
            "INSERT INTO rule_vectors (caller_scope, provision_id, model_id, provision_version,
               dimensions, examples, negatives, computed_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (caller_scope, provision_id, model_id) DO UPDATE SET
                 provision_version = excluded.provision_version, dimensions = excluded.dimensions,
                 examples = excluded.examples, negatives = excluded.negatives,
                 computed_at = excluded.computed_at
             WHERE rule_vectors.provision_version <= excluded.provision_version",
        )
        .bind(scope.as_str())
        .bind(&vectors.provision_id)
        .bind(model_id)
        .bind(to_i64(vectors.version)?)
        .bind(i64::try_from(dimensions).map_err(backend)?)
        .bind(encode_vectors(&vectors.vectors.examples))
        .bind(encode_vectors(&vectors.vectors.negatives))
        .bind(now.as_millis());
        self.db.execute(query).await?;
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> Store for SqlStore<B> {
    fn backend(&self) -> &'static str {
        B::NAME
    }

    async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        self.apply_migrations().await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.db.execute(B::query("SELECT 1")).await?;
        Ok(())
    }

    async fn reclaim_space(&self) -> StoreResult<()> {
        if let Some(statement) = B::RECLAIM_SPACE {
            self.db.execute(B::query(statement)).await?;
        }
        Ok(())
    }
}
