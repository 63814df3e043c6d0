//! Versioned documents: provisions and context entries share one contract — caller-partitioned,
//! caller-chosen ids, a version starting at 1 and bumped by every compare-and-set write.

use std::marker::PhantomData;

use async_trait::async_trait;
use herma_core::model::{ContextEntry, ContextEntrySpec, Provision, ProvisionSpec};
use herma_core::{CallerScope, Timestamp};
use serde_json::Value;

use crate::{StoreError, StoreResult};

/// Which table a document lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collection {
    Provisions,
    ContextEntries,
}

impl Collection {
    pub const ALL: [Collection; 2] = [Collection::Provisions, Collection::ContextEntries];

    pub fn parse_table(table: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.table() == table)
    }

    /// The SQL table name (a fixed identifier, never caller input).
    pub fn table(self) -> &'static str {
        match self {
            Collection::Provisions => "provisions",
            Collection::ContextEntries => "context_entries",
        }
    }
}

/// A document as stored: the caller's JSON body plus the store-managed columns.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredDoc {
    pub caller_scope: CallerScope,
    pub id: String,
    pub version: u64,
    pub body: Value,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A page of a listing, in ascending id order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Only ids strictly after this one.
    pub after: Option<String>,
    pub limit: u32,
}

impl Page {
    pub const MAX_LIMIT: u32 = 1000;

    pub fn first(limit: u32) -> Self {
        Self {
            after: None,
            limit: limit.min(Self::MAX_LIMIT),
        }
    }

    pub fn all() -> Self {
        Self::first(Self::MAX_LIMIT)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportOutcome {
    Created,
    Updated,
    Unchanged,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportSummary {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
}

impl ImportSummary {
    pub fn count(&mut self, outcome: ImportOutcome) {
        match outcome {
            ImportOutcome::Created => self.created += 1,
            ImportOutcome::Updated => self.updated += 1,
            ImportOutcome::Unchanged => self.unchanged += 1,
        }
    }
}

/// Change counters of one scope: each grows with every write to that scope's collection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Revisions {
    pub provisions: u64,
    pub context_entries: u64,
}

impl Revisions {
    pub fn set(&mut self, collection: Collection, revision: u64) {
        match collection {
            Collection::Provisions => self.provisions = revision,
            Collection::ContextEntries => self.context_entries = revision,
        }
    }
}

/// What one caller scope stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DocUsage {
    pub provisions: u64,
    pub context_entries: u64,
    /// Bytes of the compact JSON bodies, both collections.
    pub bytes: u64,
}

impl DocUsage {
    pub fn count(&self, collection: Collection) -> u64 {
        match collection {
            Collection::Provisions => self.provisions,
            Collection::ContextEntries => self.context_entries,
        }
    }
}

/// The untyped, object-safe document contract every backend implements.
#[async_trait]
pub trait DocumentStore: Send + Sync {
    /// Creates a document at version 1. If the id exists, `VersionConflict` with its version.
    async fn create_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        body: &Value,
        now: Timestamp,
    ) -> StoreResult<StoredDoc>;

    async fn get_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
    ) -> StoreResult<Option<StoredDoc>>;

    /// The documents among `ids` that exist, in ascending id order.
    async fn get_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        ids: &[String],
    ) -> StoreResult<Vec<StoredDoc>>;

    async fn list_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        page: &Page,
    ) -> StoreResult<Vec<StoredDoc>>;

    /// Compare-and-set: replaces the body and bumps the version only if the version is
    /// `expected_version`. Stale → `VersionConflict`; missing → `NotFound`.
    async fn update_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        body: &Value,
        expected_version: u64,
        now: Timestamp,
    ) -> StoreResult<StoredDoc>;

    /// Deletes, optionally only at `expected_version`. Missing → `NotFound`.
    async fn delete_doc(
        &self,
        collection: Collection,
        scope: &CallerScope,
        id: &str,
        expected_version: Option<u64>,
    ) -> StoreResult<()>;

    /// What `scope` stores: documents per collection and the bytes of their compact JSON bodies
    /// (what per-caller quotas count).
    async fn usage(&self, scope: &CallerScope) -> StoreResult<DocUsage>;

    /// The change counters of each scope, in the order given (zero when never written). Every
    /// create, update, delete and changing import bumps its scope's counter; nothing else does.
    async fn revisions(&self, scopes: &[CallerScope]) -> StoreResult<Vec<Revisions>>;

    /// Creates or replaces every document, all or nothing. An unchanged body keeps its version.
    async fn import_docs(
        &self,
        collection: Collection,
        scope: &CallerScope,
        docs: &[(String, Value)],
        now: Timestamp,
    ) -> StoreResult<ImportSummary>;
}

/// A record type stored as a document.
pub trait Document: serde::Serialize + serde::de::DeserializeOwned + Send + Sync {
    const COLLECTION: Collection;
    type Stored: Send;

    fn id(&self) -> &str;
    fn stored(doc: StoredDoc, spec: Self) -> Self::Stored;
    /// The caller-written part of a stored record.
    fn spec_of(stored: &Self::Stored) -> &Self;
}

impl Document for ProvisionSpec {
    const COLLECTION: Collection = Collection::Provisions;
    type Stored = Provision;

    fn id(&self) -> &str {
        &self.id
    }

    fn spec_of(stored: &Provision) -> &Self {
        &stored.spec
    }

    fn stored(doc: StoredDoc, spec: Self) -> Provision {
        Provision {
            caller_scope: doc.caller_scope,
            version: doc.version,
            created_at: doc.created_at,
            updated_at: doc.updated_at,
            spec,
        }
    }
}

impl Document for ContextEntrySpec {
    const COLLECTION: Collection = Collection::ContextEntries;
    type Stored = ContextEntry;

    fn id(&self) -> &str {
        &self.id
    }

    fn spec_of(stored: &ContextEntry) -> &Self {
        &stored.spec
    }

    fn stored(doc: StoredDoc, spec: Self) -> ContextEntry {
        ContextEntry {
            caller_scope: doc.caller_scope,
            version: doc.version,
            created_at: doc.created_at,
            updated_at: doc.updated_at,
            spec,
        }
    }
}

/// A typed view of one collection of a [`DocumentStore`].
pub struct Typed<'s, D> {
    store: &'s dyn DocumentStore,
    _doc: PhantomData<fn() -> D>,
}

pub type Provisions<'s> = Typed<'s, ProvisionSpec>;
pub type ContextEntries<'s> = Typed<'s, ContextEntrySpec>;

fn encode<D: Document>(spec: &D) -> StoreResult<Value> {
    serde_json::to_value(spec).map_err(|e| StoreError::Backend(format!("encoding a document: {e}")))
}

fn decode<D: Document>(doc: StoredDoc) -> StoreResult<D::Stored> {
    let spec: D = serde_json::from_value(doc.body.clone())
        .map_err(|e| StoreError::Corrupt(format!("{} `{}`: {e}", D::COLLECTION.table(), doc.id)))?;
    Ok(D::stored(doc, spec))
}

impl<'s, D: Document> Typed<'s, D> {
    pub fn new(store: &'s dyn DocumentStore) -> Self {
        Self {
            store,
            _doc: PhantomData,
        }
    }

    pub async fn create(
        &self,
        scope: &CallerScope,
        spec: &D,
        now: Timestamp,
    ) -> StoreResult<D::Stored> {
        let doc = self
            .store
            .create_doc(D::COLLECTION, scope, spec.id(), &encode(spec)?, now)
            .await?;
        decode::<D>(doc)
    }

    pub async fn get(&self, scope: &CallerScope, id: &str) -> StoreResult<Option<D::Stored>> {
        match self.store.get_doc(D::COLLECTION, scope, id).await? {
            Some(doc) => decode::<D>(doc).map(Some),
            None => Ok(None),
        }
    }

    pub async fn get_many(
        &self,
        scope: &CallerScope,
        ids: &[String],
    ) -> StoreResult<Vec<D::Stored>> {
        let docs = self.store.get_docs(D::COLLECTION, scope, ids).await?;
        docs.into_iter().map(decode::<D>).collect()
    }

    pub async fn list(&self, scope: &CallerScope, page: &Page) -> StoreResult<Vec<D::Stored>> {
        let docs = self.store.list_docs(D::COLLECTION, scope, page).await?;
        docs.into_iter().map(decode::<D>).collect()
    }

    /// Every document of the scope, page by page.
    pub async fn list_all(&self, scope: &CallerScope) -> StoreResult<Vec<D::Stored>> {
        let mut out = Vec::new();
        let mut page = Page::all();
        loop {
            let docs = self.store.list_docs(D::COLLECTION, scope, &page).await?;
            let full = docs.len() as u32 == page.limit;
            page.after = docs.last().map(|d| d.id.clone());
            for doc in docs {
                out.push(decode::<D>(doc)?);
            }
            if !full {
                return Ok(out);
            }
        }
    }

    pub async fn update(
        &self,
        scope: &CallerScope,
        spec: &D,
        expected_version: u64,
        now: Timestamp,
    ) -> StoreResult<D::Stored> {
        let doc = self
            .store
            .update_doc(
                D::COLLECTION,
                scope,
                spec.id(),
                &encode(spec)?,
                expected_version,
                now,
            )
            .await?;
        decode::<D>(doc)
    }

    pub async fn delete(
        &self,
        scope: &CallerScope,
        id: &str,
        expected_version: Option<u64>,
    ) -> StoreResult<()> {
        self.store
            .delete_doc(D::COLLECTION, scope, id, expected_version)
            .await
    }

    pub async fn import(
        &self,
        scope: &CallerScope,
        specs: &[D],
        now: Timestamp,
    ) -> StoreResult<ImportSummary> {
        let docs = specs
            .iter()
            .map(|s| Ok((s.id().to_owned(), encode(s)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        self.store
            .import_docs(D::COLLECTION, scope, &docs, now)
            .await
    }
}

/// `store.provisions()` and `store.context_entries()`.
pub trait DocumentStoreExt {
    fn provisions(&self) -> Provisions<'_>;
    fn context_entries(&self) -> ContextEntries<'_>;
}

impl<S: DocumentStore> DocumentStoreExt for S {
    fn provisions(&self) -> Provisions<'_> {
        Typed::new(self)
    }

    fn context_entries(&self) -> ContextEntries<'_> {
        Typed::new(self)
    }
}

impl DocumentStoreExt for dyn crate::Store {
    fn provisions(&self) -> Provisions<'_> {
        Typed::new(self)
    }

    fn context_entries(&self) -> ContextEntries<'_> {
        Typed::new(self)
    }
}
