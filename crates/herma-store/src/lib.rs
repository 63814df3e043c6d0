//! Herma's storage ports.
//!
//! Layout: the traits ([`KeyStore`], [`DocumentStore`] — provisions and context entries share
//! one versioned-document contract — [`ReceiptStore`], [`EntityStore`], [`OutcomeStore`],
//! [`ClaimStore`], [`VectorStore`] — semantic example vectors —, [`ConversationStore`] — typed
//! conversations, their turns, attempts and shared ledger — and [`Store`] which is all of
//! them), typed facades over documents ([`Provisions`], [`ContextEntries`]), the in-memory
//! implementation ([`MemoryStore`]) and, behind the `conformance` feature, the suites every
//! backend must pass.
//!
//! Architecture invariant: every caller-owned read and write names a [`CallerScope`]; the only
//! methods that read across scopes are the admin's key listing and the conversation sweeper's
//! (`unfinished_turns`, `expire_conversations`).
//! Architecture invariant: compare-and-set writes are single statements in SQL backends; a stale
//! `expected_version` returns [`StoreError::VersionConflict`] and writes nothing.

mod clock;
pub mod conversations;
mod conversations_memory;
mod documents;
mod error;
pub mod governed;
mod governed_memory;
pub mod journal;
mod memory;
pub mod runtime;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "conformance")]
pub mod conversation_conformance;
#[cfg(feature = "conformance")]
pub mod governed_conformance;

use async_trait::async_trait;
use herma_core::CallerScope;
use herma_core::Timestamp;
use herma_core::key::KeyId;
use herma_core::memory::RuleStats;
use herma_core::model::{HarnessKey, InjectionReceipt, RuleOutcomeRecord, WorkingEntity};
use herma_core::semantic::RuleVectors;

pub use clock::SystemClock;
pub use conversations::ConversationStore;
pub use documents::{
    Collection, ContextEntries, DocUsage, Document, DocumentStore, DocumentStoreExt, ImportOutcome,
    ImportSummary, Page, Provisions, Revisions, StoredDoc, Typed,
};
pub use error::{StoreError, StoreResult};
pub use governed_memory::MemoryGovernedStore;
pub use memory::MemoryStore;
pub use runtime::Runtime;
#[cfg(not(target_arch = "wasm32"))]
pub use runtime::TokioRuntime;

/// Harness keys. Keys are not caller-owned data: only admins list and revoke them.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Inserts a new key; an existing `key_id` is a [`StoreError::Backend`] collision.
    async fn insert_key(&self, key: &HarnessKey) -> StoreResult<()>;
    async fn find_key(&self, key_id: &KeyId) -> StoreResult<Option<HarnessKey>>;
    /// Every key, newest first.
    async fn list_keys(&self) -> StoreResult<Vec<HarnessKey>>;
    /// Marks a key revoked. `Ok(false)` when it already was; `NotFound` when it does not exist.
    async fn revoke_key(&self, key_id: &KeyId, at: Timestamp) -> StoreResult<bool>;
}

/// Sealed injection receipts.
#[async_trait]
pub trait ReceiptStore: Send + Sync {
    /// Inserts a batch atomically. Re-inserting an identical receipt is a no-op.
    async fn insert_receipts(&self, receipts: &[InjectionReceipt]) -> StoreResult<()>;
    async fn get_receipt(
        &self,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<InjectionReceipt>>;
    /// Deletes up to `limit` receipts created before `before`, any scope; returns how many.
    async fn prune_receipts(&self, before: Timestamp, limit: u32) -> StoreResult<u64>;
}

/// One observation of an entity in a proxied turn.
pub use herma_core::memory::Observation as EntityObservation;

/// One turn's observations, for [`EntityStore::record_entity_turns`].
#[derive(Clone, Debug, PartialEq)]
pub struct EntityTurn {
    pub scope: CallerScope,
    pub project_tag: String,
    pub observations: Vec<EntityObservation>,
    pub at: Timestamp,
}

/// Working entities, bounded per caller scope.
#[async_trait]
pub trait EntityStore: Send + Sync {
    /// Counts each observation (first/last seen at `now`), then evicts the rarest, oldest
    /// entities of the scope beyond `max_per_scope`. Returns how many were evicted.
    async fn record_entities(
        &self,
        scope: &CallerScope,
        project_tag: &str,
        observations: &[EntityObservation],
        now: Timestamp,
        max_per_scope: u64,
    ) -> StoreResult<u64>;

    /// Records several turns in order, each exactly as [`EntityStore::record_entities`] would
    /// (its observations counted, then its scope's excess evicted), in one write where the
    /// engine can: the memory worker hands over whole batches. Returns how many were evicted
    /// in all. A store may read what the scopes hold first, to leave out evictions that cannot
    /// happen; a scope another writer fills between that read and the write can then stay
    /// over `max_per_scope` by that writer's entities until its next turn here.
    async fn record_entity_turns(
        &self,
        turns: &[EntityTurn],
        max_per_scope: u64,
    ) -> StoreResult<u64> {
        let mut evicted = 0;
        for turn in turns {
            evicted += self
                .record_entities(
                    &turn.scope,
                    &turn.project_tag,
                    &turn.observations,
                    turn.at,
                    max_per_scope,
                )
                .await?;
        }
        Ok(evicted)
    }
    /// How many entities the scope has lost to eviction since it began.
    async fn entity_evictions(&self, scope: &CallerScope) -> StoreResult<u64>;

    /// Entities of the scope (optionally one project), most frequent first, then most recent.
    async fn list_entities(
        &self,
        scope: &CallerScope,
        project_tag: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<WorkingEntity>>;
}

/// Rule outcomes, appended in order.
#[async_trait]
pub trait OutcomeStore: Send + Sync {
    async fn insert_outcomes(&self, outcomes: &[RuleOutcomeRecord]) -> StoreResult<()>;
    /// The scope's outcomes, most recent first.
    async fn list_outcomes(
        &self,
        scope: &CallerScope,
        limit: u32,
    ) -> StoreResult<Vec<RuleOutcomeRecord>>;

    /// The provisions (id, version) applied in one turn of a conversation (outcomes
    /// `injected` and `responded_directly`), in id order.
    async fn fired_in_turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        turn: u64,
    ) -> StoreResult<Vec<(String, u64)>>;

    /// Per provision: how often it was injected, answered directly and followed by an error,
    /// in provision id order.
    async fn rule_stats(&self, scope: &CallerScope) -> StoreResult<Vec<RuleStats>>;

    /// Deletes up to `limit` outcomes recorded before `before`, any scope; returns how many.
    async fn prune_outcomes(&self, before: Timestamp, limit: u32) -> StoreResult<u64>;
}

/// `once_per_conversation`: claims that a provision was applied in a conversation.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Atomically claims each provision id for (`scope`, `conversation_id`) and returns the ids
    /// this call claimed first. Concurrent callers never both win one id.
    async fn claim_once(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        provision_ids: &[String],
        now: Timestamp,
    ) -> StoreResult<Vec<String>>;

    /// Gives claims back (the shim never reached the model: the upstream failed or refused),
    /// so the next request of the conversation gets it again.
    async fn release_claims(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        provision_ids: &[String],
    ) -> StoreResult<()>;
}

/// The example and negative vectors of one semantic rule, for one provision version.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredVectors {
    pub provision_id: String,
    pub version: u64,
    pub vectors: RuleVectors,
}

/// Semantic triggers' example vectors, computed once per provision version and model and kept
/// with the model's identity, so a restart does not run the model again and a model change is
/// noticed (its vectors are simply not found).
#[async_trait]
pub trait VectorStore: Send + Sync {
    /// The vectors stored for `model_id` for each `(provision id, version)` asked for; pairs
    /// with none (another version, another model) are left out.
    async fn get_vectors(
        &self,
        scope: &CallerScope,
        model_id: &str,
        wanted: &[(String, u64)],
    ) -> StoreResult<Vec<StoredVectors>>;

    /// Stores vectors, replacing those of an older version of the same provision and model
    /// (a newer version already stored is kept).
    async fn put_vectors(
        &self,
        scope: &CallerScope,
        model_id: &str,
        vectors: &StoredVectors,
        now: Timestamp,
    ) -> StoreResult<()>;
}

/// Vectors as stored: each value as 4 little-endian bytes, one vector after another.
pub fn encode_vectors(vectors: &[Vec<f32>]) -> Vec<u8> {
    vectors
        .iter()
        .flat_map(|v| v.iter().flat_map(|x| x.to_le_bytes()))
        .collect()
}

/// The inverse of [`encode_vectors`] for vectors of `dimensions` values.
pub fn decode_vectors(bytes: &[u8], dimensions: usize) -> StoreResult<Vec<Vec<f32>>> {
    let width = dimensions.saturating_mul(4);
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    if width == 0 || !bytes.len().is_multiple_of(width) {
        return Err(StoreError::Corrupt(format!(
            "a vector blob of {} bytes does not hold {dimensions}-value vectors",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(width)
        .map(|v| {
            v.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
        .collect())
}

/// A migration applied by [`Store::migrate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedMigration {
    pub version: i64,
    pub name: String,
}

/// Everything Herma stores.
#[async_trait]
pub trait Store:
    KeyStore
    + DocumentStore
    + ReceiptStore
    + EntityStore
    + OutcomeStore
    + ClaimStore
    + VectorStore
    + ConversationStore
{
    /// `memory`, `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// Applies pending embedded migrations, returning those it applied (empty when current).
    async fn migrate(&self) -> StoreResult<Vec<AppliedMigration>>;
    /// A cheap round trip proving the store answers.
    async fn ping(&self) -> StoreResult<()>;
    /// Gives pages freed by deletions back to the file system where the engine keeps them
    /// (SQLite's incremental vacuum, a bounded step); a no-op elsewhere.
    async fn reclaim_space(&self) -> StoreResult<()> {
        Ok(())
    }
}
