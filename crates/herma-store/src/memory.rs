//! The in-memory store: the reference behaviour of the conformance suite, and the store of
//! unit tests that need no database.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use herma_core::key::KeyId;
use herma_core::memory::RuleStats;
use herma_core::model::{
    HarnessKey, InjectionReceipt, OutcomeKind, RuleOutcomeRecord, WorkingEntity,
};
use herma_core::{CallerScope, Timestamp};
use serde_json::Value;

use crate::conversations::{
    Admission, AdmitTurn, AttemptRecord, ConversationRecord, ConversationStore, HealthRecord,
    LedgerCharge, ProbeReservation, Reserved, SealTurn, TurnRecord,
};
use crate::conversations_memory::ConversationTables;
use crate::documents::{
    Collection, DocUsage, DocumentStore, ImportOutcome, ImportSummary, Page, Revisions, StoredDoc,
};
use crate::{
    AppliedMigration, ClaimStore, EntityObservation, EntityStore, KeyStore, OutcomeStore,
    ReceiptStore, Store, StoreError, StoreResult, StoredVectors, VectorStore,
};

type EntityKey = (CallerScope, String, &'static str, String);

#[derive(Default)]
struct Inner {
    keys: BTreeMap<KeyId, HarnessKey>,
    docs: HashMap<(Collection, CallerScope), BTreeMap<String, StoredDoc>>,
    receipts: HashMap<(CallerScope, String), InjectionReceipt>,
    entities: BTreeMap<EntityKey, WorkingEntity>,
    outcomes: Vec<RuleOutcomeRecord>,
    evictions: HashMap<CallerScope, u64>,
    revisions: HashMap<(Collection, CallerScope), u64>,
    claims: std::collections::HashSet<(CallerScope, String, String)>,
    vectors: HashMap<(CallerScope, String, String), StoredVectors>,
}

impl Inner {
    fn bump(&mut self, collection: Collection, scope: &CallerScope) {
        *self
            .revisions
            .entry((collection, scope.clone()))
            .or_default() += 1;
    }
}

/// Everything in two mutexes (the conversation port's tables have their own); neither is held
/// across an await, and no operation takes both.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    conversations: Mutex<ConversationTables>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| StoreError::Backend("memory store lock poisoned".into()))
    }

    fn conversations(&self) -> StoreResult<MutexGuard<'_, ConversationTables>> {
        self.conversations
            .lock()
            .map_err(|_| StoreError::Backend("memory store lock poisoned".into()))
    }
}

fn conflict(current: Option<&StoredDoc>) -> StoreError {
    StoreError::VersionConflict {
        current: current.map(|d| d.version),
    }
}

#[async_trait]
impl KeyStore for MemoryStore {
    async fn insert_key(&self, key: &HarnessKey) -> StoreResult<()> {
        let mut inner = self.lock()?;
        if inner.keys.contains_key(&key.key_id) {
            return Err(StoreError::Backend(format!(
                "key id {} already exists",
                key.key_id
            )));
        }
        inner.keys.insert(key.key_id.clone(), key.clone());
        Ok(())
    }

    async fn find_key(&self, key_id: &KeyId) -> StoreResult<Option<HarnessKey>> {
        Ok(self.lock()?.keys.get(key_id).cloned())
    }

    async fn list_keys(&self) -> StoreResult<Vec<HarnessKey>> {
        let mut keys: Vec<_> = self.lock()?.keys.values().cloned().collect();
        keys.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(a.key_id.cmp(&b.key_id))
        });
        Ok(keys)
    }

    async fn revoke_key(&self, key_id: &KeyId, at: Timestamp) -> StoreResult<bool> {
        let mut inner = self.lock()?;
        let key = inner.keys.get_mut(key_id).ok_or(StoreError::NotFound)?;
        if key.revoked_at.is_some() {
            return Ok(false);
        }
        key.revoked_at = Some(at);
        Ok(true)
    }
}

#[async_trait]
impl DocumentStore for MemoryStore {
    async fn create_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        body: &Value,
        now: Timestamp,
    ) -> StoreResult<StoredDoc> {
        let mut inner = self.lock()?;
        let docs = inner.docs.entry((collection, scope.clone())).or_default();
        if let Some(existing) = docs.get(id) {
            return Err(conflict(Some(existing)));
        }
        let doc = StoredDoc {
            caller_scope: scope.clone(),
            id: id.to_owned(),
            version: 1,
            body: body.clone(),
            created_at: now,
            updated_at: now,
        };
        docs.insert(id.to_owned(), doc.clone());
        inner.bump(collection, scope);
        Ok(doc)
    }

    async fn get_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<StoredDoc>> {
        let inner = self.lock()?;
        Ok(inner
            .docs
            .get(&(collection, scope.clone()))
            .and_then(|docs| docs.get(id))
            .cloned())
    }

    async fn get_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        ids: &[String],
    ) -> StoreResult<Vec<StoredDoc>> {
        let inner = self.lock()?;
        let Some(docs) = inner.docs.get(&(collection, scope.clone())) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<StoredDoc> = ids.iter().filter_map(|id| docs.get(id).cloned()).collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.dedup_by(|a, b| a.id == b.id);
        Ok(out)
    }

    async fn list_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        page: &Page,
    ) -> StoreResult<Vec<StoredDoc>> {
        let inner = self.lock()?;
        let Some(docs) = inner.docs.get(&(collection, scope.clone())) else {
            return Ok(Vec::new());
        };
        Ok(docs
            .values()
            .filter(|d| {
                page.after
                    .as_deref()
                    .is_none_or(|after| d.id.as_str() > after)
            })
            .take(page.limit as usize)
            .cloned()
            .collect())
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
        let mut inner = self.lock()?;
        let doc = inner
            .docs
            .get_mut(&(collection, scope.clone()))
            .and_then(|docs| docs.get_mut(id))
            .ok_or(StoreError::NotFound)?;
        if doc.version != expected_version {
            return Err(conflict(Some(doc)));
        }
        doc.version += 1;
        doc.body = body.clone();
        doc.updated_at = now;
        let doc = doc.clone();
        inner.bump(collection, scope);
        Ok(doc)
    }

    async fn delete_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        expected_version: Option<u64>,
    ) -> StoreResult<()> {
        let mut inner = self.lock()?;
        let docs = inner
            .docs
            .get_mut(&(collection, scope.clone()))
            .ok_or(StoreError::NotFound)?;
        let doc = docs.get(id).ok_or(StoreError::NotFound)?;
        if expected_version.is_some_and(|v| v != doc.version) {
            return Err(conflict(Some(doc)));
        }
        docs.remove(id);
        inner.bump(collection, scope);
        Ok(())
    }

    async fn usage(&self, scope: &CallerScope) -> StoreResult<DocUsage> {
        let inner = self.lock()?;
        let mut usage = DocUsage::default();
        for collection in Collection::ALL {
            let Some(docs) = inner.docs.get(&(collection, scope.clone())) else {
                continue;
            };
            let count = docs.len() as u64;
            match collection {
                Collection::Provisions => usage.provisions = count,
                Collection::ContextEntries => usage.context_entries = count,
            }
            for doc in docs.values() {
                usage.bytes += serde_json::to_vec(&doc.body).map_or(0, |b| b.len() as u64);
            }
        }
        Ok(usage)
    }

    async fn revisions(&self, scopes: &[CallerScope]) -> StoreResult<Vec<Revisions>> {
        let inner = self.lock()?;
        Ok(scopes
            .iter()
            .map(|scope| {
                let mut r = Revisions::default();
                for c in Collection::ALL {
                    r.set(
                        c,
                        inner
                            .revisions
                            .get(&(c, scope.clone()))
                            .copied()
                            .unwrap_or(0),
                    );
                }
                r
            })
            .collect())
    }

    async fn import_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        incoming: &[(String, Value)],
        now: Timestamp,
    ) -> StoreResult<ImportSummary> {
        let mut inner = self.lock()?;
        let docs = inner.docs.entry((collection, scope.clone())).or_default();
        let mut summary = ImportSummary::default();
        for (id, body) in incoming {
            let outcome = match docs.get_mut(id) {
                None => {
                    docs.insert(
                        id.clone(),
                        StoredDoc {
                            caller_scope: scope.clone(),
                            id: id.clone(),
                            version: 1,
                            body: body.clone(),
                            created_at: now,
                            updated_at: now,
                        },
                    );
                    ImportOutcome::Created
                }
                Some(doc) if doc.body == *body => ImportOutcome::Unchanged,
                Some(doc) => {
                    doc.version += 1;
                    doc.body = body.clone();
                    doc.updated_at = now;
                    ImportOutcome::Updated
                }
            };
            summary.count(outcome);
        }
        for _ in 0..(summary.created + summary.updated) {
            inner.bump(collection, scope);
        }
        Ok(summary)
    }
}

#[async_trait]
impl ReceiptStore for MemoryStore {
    async fn prune_receipts(&self, before: Timestamp, limit: u32) -> StoreResult<u64> {
        let mut inner = self.lock()?;
        let old: Vec<(CallerScope, String)> = inner
            .receipts
            .iter()
            .filter(|(_, r)| r.body.created_at < before)
            .map(|(k, _)| k.clone())
            .take(limit as usize)
            .collect();
        for key in &old {
            inner.receipts.remove(key);
        }
        Ok(old.len() as u64)
    }

    async fn insert_receipts(&self, receipts: &[InjectionReceipt]) -> StoreResult<()> {
        let mut inner = self.lock()?;
        for receipt in receipts {
            inner
                .receipts
                .entry((receipt.body.caller_scope.clone(), receipt.id.clone()))
                .or_insert_with(|| receipt.clone());
        }
        Ok(())
    }

    async fn get_receipt(
        &self,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<InjectionReceipt>> {
        Ok(self
            .lock()?
            .receipts
            .get(&(scope.clone(), id.to_owned()))
            .cloned())
    }
}

/// Eviction order shared by every backend: rarest, then least recently seen, then by key.
fn eviction_order(a: &WorkingEntity, b: &WorkingEntity) -> std::cmp::Ordering {
    a.count
        .cmp(&b.count)
        .then(a.last_seen.cmp(&b.last_seen))
        .then(a.project_tag.cmp(&b.project_tag))
        .then(a.kind.as_str().cmp(b.kind.as_str()))
        .then(a.value.cmp(&b.value))
}

#[async_trait]
impl EntityStore for MemoryStore {
    async fn entity_evictions(&self, scope: &CallerScope) -> StoreResult<u64> {
        Ok(self.lock()?.evictions.get(scope).copied().unwrap_or(0))
    }

    async fn record_entities(
        &self,
        scope: &CallerScope,
        project_tag: &str,
        observations: &[EntityObservation],
        now: Timestamp,
        max_per_scope: u64,
    ) -> StoreResult<u64> {
        let mut inner = self.lock()?;
        for obs in observations {
            let key = (
                scope.clone(),
                project_tag.to_owned(),
                obs.kind.as_str(),
                obs.value.clone(),
            );
            inner
                .entities
                .entry(key)
                .and_modify(|e| {
                    e.count += 1;
                    e.last_seen = e.last_seen.max(now);
                })
                .or_insert_with(|| WorkingEntity {
                    caller_scope: scope.clone(),
                    project_tag: project_tag.to_owned(),
                    kind: obs.kind,
                    value: obs.value.clone(),
                    count: 1,
                    first_seen: now,
                    last_seen: now,
                });
        }
        let mut owned: Vec<&WorkingEntity> = inner
            .entities
            .values()
            .filter(|e| &e.caller_scope == scope)
            .collect();
        let excess = (owned.len() as u64).saturating_sub(max_per_scope);
        if excess == 0 {
            return Ok(0);
        }
        owned.sort_by(|a, b| eviction_order(a, b));
        let doomed: Vec<EntityKey> = owned
            .iter()
            .take(excess as usize)
            .map(|e| {
                (
                    e.caller_scope.clone(),
                    e.project_tag.clone(),
                    e.kind.as_str(),
                    e.value.clone(),
                )
            })
            .collect();
        for key in doomed {
            inner.entities.remove(&key);
        }
        *inner.evictions.entry(scope.clone()).or_default() += excess;
        Ok(excess)
    }

    async fn list_entities(
        &self,
        scope: &CallerScope,
        project_tag: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<WorkingEntity>> {
        let inner = self.lock()?;
        let mut out: Vec<WorkingEntity> = inner
            .entities
            .values()
            .filter(|e| &e.caller_scope == scope && project_tag.is_none_or(|p| e.project_tag == p))
            .cloned()
            .collect();
        out.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(b.last_seen.cmp(&a.last_seen))
                .then(a.project_tag.cmp(&b.project_tag))
                .then(a.kind.as_str().cmp(b.kind.as_str()))
                .then(a.value.cmp(&b.value))
        });
        out.truncate(limit as usize);
        Ok(out)
    }
}

#[async_trait]
impl OutcomeStore for MemoryStore {
    async fn fired_in_turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        turn: u64,
    ) -> StoreResult<Vec<(String, u64)>> {
        let inner = self.lock()?;
        let mut fired: Vec<(String, u64)> = inner
            .outcomes
            .iter()
            .filter(|o| {
                &o.caller_scope == scope && o.conversation_id == conversation_id && o.turn == turn
            })
            .filter(|o| {
                matches!(
                    o.outcome,
                    OutcomeKind::Injected | OutcomeKind::RespondedDirectly
                )
            })
            .map(|o| (o.provision_id.clone(), o.provision_version))
            .collect();
        fired.sort();
        fired.dedup();
        Ok(fired)
    }

    async fn rule_stats(&self, scope: &CallerScope) -> StoreResult<Vec<RuleStats>> {
        let inner = self.lock()?;
        let mut stats: BTreeMap<String, RuleStats> = BTreeMap::new();
        for o in inner.outcomes.iter().filter(|o| &o.caller_scope == scope) {
            stats
                .entry(o.provision_id.clone())
                .or_insert_with(|| RuleStats {
                    provision_id: o.provision_id.clone(),
                    ..RuleStats::default()
                })
                .add(o.outcome, 1);
        }
        Ok(stats.into_values().collect())
    }

    async fn prune_outcomes(&self, before: Timestamp, limit: u32) -> StoreResult<u64> {
        let mut inner = self.lock()?;
        let mut left = limit as usize;
        let before_len = inner.outcomes.len();
        inner.outcomes.retain(|o| {
            if left > 0 && o.recorded_at < before {
                left -= 1;
                false
            } else {
                true
            }
        });
        Ok((before_len - inner.outcomes.len()) as u64)
    }

    async fn insert_outcomes(&self, outcomes: &[RuleOutcomeRecord]) -> StoreResult<()> {
        self.lock()?.outcomes.extend_from_slice(outcomes);
        Ok(())
    }

    async fn list_outcomes(
        &self,
        scope: &CallerScope,
        limit: u32,
    ) -> StoreResult<Vec<RuleOutcomeRecord>> {
        let inner = self.lock()?;
        Ok(inner
            .outcomes
            .iter()
            .rev()
            .filter(|o| &o.caller_scope == scope)
            .take(limit as usize)
            .cloned()
            .collect())
    }
}

#[async_trait]
impl ClaimStore for MemoryStore {
    async fn claim_once(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        provision_ids: &[String],
        _now: Timestamp,
    ) -> StoreResult<Vec<String>> {
        let mut inner = self.lock()?;
        Ok(provision_ids
            .iter()
            .filter(|id| {
                inner
                    .claims
                    .insert((scope.clone(), conversation_id.to_owned(), (*id).clone()))
            })
            .cloned()
            .collect())
    }

    async fn release_claims(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        provision_ids: &[String],
    ) -> StoreResult<()> {
        let mut inner = self.lock()?;
        for id in provision_ids {
            inner
                .claims
                .remove(&(scope.clone(), conversation_id.to_owned(), id.clone()));
        }
        Ok(())
    }
}

#[async_trait]
impl VectorStore for MemoryStore {
    async fn get_vectors(
        &self,
        scope: &CallerScope,
        model_id: &str,
        wanted: &[(String, u64)],
    ) -> StoreResult<Vec<StoredVectors>> {
        let inner = self.lock()?;
        Ok(wanted
            .iter()
            .filter_map(|(id, version)| {
                inner
                    .vectors
                    .get(&(scope.clone(), id.clone(), model_id.to_owned()))
                    .filter(|v| v.version == *version)
                    .cloned()
            })
            .collect())
    }

    async fn put_vectors(
        &self,
        scope: &CallerScope,
        model_id: &str,
        vectors: &StoredVectors,
        _now: Timestamp,
    ) -> StoreResult<()> {
        let mut inner = self.lock()?;
        let slot = inner
            .vectors
            .entry((
                scope.clone(),
                vectors.provision_id.clone(),
                model_id.to_owned(),
            ))
            .or_insert_with(|| vectors.clone());
        if slot.version <= vectors.version {
            *slot = vectors.clone();
        }
        Ok(())
    }
}

#[async_trait]
impl ConversationStore for MemoryStore {
    async fn admit_turn(&self, admit: &AdmitTurn) -> StoreResult<Admission> {
        Ok(self.conversations()?.admit(admit))
    }

    async fn put_attempt(&self, attempt: &AttemptRecord) -> StoreResult<()> {
        self.conversations()?.put_attempt(attempt);
        Ok(())
    }

    async fn reserve(&self, charges: &[LedgerCharge]) -> StoreResult<Reserved> {
        Ok(self.conversations()?.reserve(charges))
    }

    async fn release(&self, charges: &[LedgerCharge]) -> StoreResult<()> {
        self.conversations()?.release(charges);
        Ok(())
    }

    async fn seal_turn(&self, seal: &SealTurn) -> StoreResult<bool> {
        self.conversations()?.seal(seal)
    }

    async fn conversation(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationRecord>> {
        Ok(self.conversations()?.conversation(scope, conversation_id))
    }

    async fn turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Option<TurnRecord>> {
        Ok(self
            .conversations()?
            .turn(scope, conversation_id, request_id))
    }

    async fn recent_turns(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>> {
        Ok(self
            .conversations()?
            .recent_turns(scope, conversation_id, limit))
    }

    async fn attempts(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Vec<AttemptRecord>> {
        Ok(self
            .conversations()?
            .attempts(scope, conversation_id, request_id))
    }

    async fn unfinished_turns(
        &self,
        admitted_before: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>> {
        Ok(self
            .conversations()?
            .unfinished_turns(admitted_before, limit))
    }

    async fn expire_conversations(&self, now: Timestamp, limit: u32) -> StoreResult<u64> {
        Ok(self.conversations()?.expire(now, limit))
    }

    async fn next_due(&self, seal_after_ms: i64) -> StoreResult<Option<Timestamp>> {
        Ok(self.conversations()?.next_due(seal_after_ms))
    }

    async fn ledger(&self, counters: &[String]) -> StoreResult<Vec<u64>> {
        Ok(self.conversations()?.ledger(counters))
    }

    async fn health(&self, resources: &[String]) -> StoreResult<Vec<HealthRecord>> {
        Ok(self.conversations()?.health(resources))
    }

    async fn all_health(&self) -> StoreResult<Vec<HealthRecord>> {
        Ok(self.conversations()?.all_health())
    }

    async fn limit(&self, record: &HealthRecord) -> StoreResult<bool> {
        Ok(self.conversations()?.limit(record))
    }

    async fn clear_health(&self, resource: &str, observed_at: Timestamp) -> StoreResult<bool> {
        Ok(self.conversations()?.clear_health(resource, observed_at))
    }

    async fn reserve_probe(
        &self,
        resource: &str,
        probe_id: &str,
        lease_until: Timestamp,
        now: Timestamp,
        charges: &[LedgerCharge],
    ) -> StoreResult<ProbeReservation> {
        Ok(self
            .conversations()?
            .reserve_probe(resource, probe_id, lease_until, now, charges))
    }

    async fn expire_probe(&self, probe_id: &str, record: &HealthRecord) -> StoreResult<bool> {
        Ok(self.conversations()?.expire_probe(probe_id, record))
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>> {
        Ok(Vec::new())
    }

    async fn ping(&self) -> StoreResult<()> {
        self.lock().map(|_| ())
    }
}
