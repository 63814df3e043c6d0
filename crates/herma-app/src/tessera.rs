//! Tessera store sync (`docs/tessera.md`): pull governed records page by page — from a Tessera
//! endpoint or an export file — into `system_builtin`: starters become provisions, nouns and
//! verbs context entries, each carrying its `fabric_governance`.
//!
//! - **Idempotent**: an unchanged record keeps its version; a changed one gets a new version
//!   through the normal compare-and-set path.
//! - **Resumable**: the report carries the cursor of the next page; `after` starts there.
//! - **Per record**: a malformed record, a bad blob URI or a record whose id belongs to a
//!   built-in Herma did not sync is refused with its reason and the sync goes on. A blob that
//!   cannot be fetched or does not hash to its digest is recorded as such, so the lens refuses
//!   the record wherever it would be served.
//! - **Removal**: after a complete sync from the first page, synced records Tessera no longer
//!   publishes are deleted. A quarantined record stays stored and is never served.
//!
//! Every write is one statement, so nothing half-written is ever served.

use std::collections::{BTreeMap, BTreeSet, HashMap};
#[cfg(not(target_arch = "wasm32"))]
use std::time::Duration;

use async_trait::async_trait;
use herma_core::governance::{FabricGovernance, blob_digest, sha256_hex};
use herma_core::json;
use herma_core::tessera::{
    Converted, MAX_BLOB_BYTES, MAX_PAGE_RECORDS, PAGE_LIMIT, RECORD_PREFIX, RecordPage,
    TesseraRecord, blob_uris, convert,
};
use herma_core::{CallerScope, Problem, ProblemCode};
use herma_providers::fabric::FabricClient;
use herma_store::{DocumentStoreExt, Typed};
use serde::Serialize;
use serde_json::Value;

use crate::App;
use crate::error::internal;
use crate::records::{Managed, Upserted, upsert};

/// The largest page body Herma reads.
pub const MAX_PAGE_BYTES: usize = 8 << 20;
/// Pages one sync reads at most (then it stops with a resume cursor).
pub const MAX_SYNC_PAGES: usize = 10_000;

impl App {
    /// The client of a governed-fabric endpoint at `base` (Tessera, a remote context API):
    /// natively its own HTTP client bounded by `HERMA_TESSERA_TIMEOUT_MS`; on wasm32 the
    /// transport's [`App::upstream`] (the platform's fetch, bounded by the platform).
    pub(crate) fn fabric(&self, base: &str, token: Option<&str>) -> Result<FabricClient, String> {
        #[cfg(not(target_arch = "wasm32"))]
        return FabricClient::new(
            base,
            token,
            Duration::from_millis(self.settings.tessera_timeout_ms),
        );
        #[cfg(target_arch = "wasm32")]
        Ok(FabricClient::over(self.upstream.clone(), base, token))
    }
}

/// Where records come from.
#[async_trait]
pub trait TesseraSource: Send + Sync {
    /// The page after `after` (the first page when `None`).
    async fn page(&self, after: Option<&str>) -> Result<RecordPage, String>;
    /// A blob's content by its URI.
    async fn blob(&self, uri: &str) -> Result<Vec<u8>, String>;
}

/// A Tessera endpoint over HTTP.
pub struct HttpSource(FabricClient);

impl HttpSource {
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(base: &str, token: Option<&str>, timeout: Duration) -> Result<Self, Problem> {
        FabricClient::new(base, token, timeout)
            .map(Self)
            .map_err(|e| Problem::new(ProblemCode::Internal, e))
    }

    /// A Tessera at `base` read through `client`.
    pub fn over(client: FabricClient) -> Self {
        Self(client)
    }
}

fn parse_page(bytes: &[u8]) -> Result<RecordPage, String> {
    let value = json::parse_strict(bytes).map_err(|p| p.detail)?;
    let page: RecordPage = json::decode(value).map_err(|p| {
        p.errors
            .first()
            .map_or(p.detail.clone(), |e| format!("{}: {}", e.pointer, e.detail))
    })?;
    if page.records.len() > MAX_PAGE_RECORDS {
        return Err(format!(
            "a page of {} records (at most {MAX_PAGE_RECORDS})",
            page.records.len()
        ));
    }
    Ok(page)
}

#[async_trait]
impl TesseraSource for HttpSource {
    async fn page(&self, after: Option<&str>) -> Result<RecordPage, String> {
        let bytes = self.0.page(after, PAGE_LIMIT, MAX_PAGE_BYTES).await?;
        parse_page(&bytes)
    }

    async fn blob(&self, uri: &str) -> Result<Vec<u8>, String> {
        let digest = blob_digest(uri).map_err(|r| r.to_string())?;
        self.0.blob(digest, MAX_BLOB_BYTES).await
    }
}

/// An export file: JSON Lines, each line a record or a blob
/// (`{"blob": "tessera://blobs/<sha256>", "content": "<text>"}`).
pub struct FileSource {
    records: Vec<Value>,
    blobs: HashMap<String, Vec<u8>>,
}

impl FileSource {
    pub fn parse(bytes: &[u8]) -> Result<Self, Problem> {
        let mut records = Vec::new();
        let mut blobs = HashMap::new();
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value = json::parse_strict(line).map_err(|p| {
                Problem::new(
                    ProblemCode::InvalidJson,
                    format!("line {}: {}", i + 1, p.detail),
                )
            })?;
            match (value.get("blob"), value.get("content")) {
                (Some(Value::String(uri)), Some(Value::String(content))) => {
                    blobs.insert(uri.clone(), content.clone().into_bytes());
                }
                _ => records.push(value),
            }
        }
        Ok(Self { records, blobs })
    }
}

#[async_trait]
impl TesseraSource for FileSource {
    async fn page(&self, after: Option<&str>) -> Result<RecordPage, String> {
        let start = match after {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .map_err(|_| format!("`{cursor}` is not a cursor of this file"))?,
        };
        let end = start.saturating_add(PAGE_LIMIT).min(self.records.len());
        Ok(RecordPage {
            records: self.records.get(start..end).unwrap_or_default().to_vec(),
            next: (end < self.records.len()).then(|| end.to_string()),
        })
    }

    async fn blob(&self, uri: &str) -> Result<Vec<u8>, String> {
        self.blobs
            .get(uri)
            .cloned()
            .ok_or_else(|| "the export file does not hold it".to_owned())
    }
}

/// A record the sync did not write, and why.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct SyncRefusal {
    pub uri: String,
    pub reason: String,
}

/// What a sync did.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub struct SyncReport {
    pub pages: u32,
    pub records: u32,
    pub created: u32,
    pub updated: u32,
    pub unchanged: u32,
    /// Stored, but the lens will not serve them (quarantined, a blob that did not verify, …).
    pub not_served: u32,
    pub removed: u32,
    pub refused: Vec<SyncRefusal>,
    /// Set when the sync stopped before the last page: resume with `after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_after: Option<String>,
    /// Why it stopped early.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// The governance of a stored built-in, if Tessera synced it.
fn synced(governance: Option<&FabricGovernance>) -> bool {
    governance
        .and_then(|g| g.record_uri.as_deref())
        .is_some_and(|u| u.starts_with(RECORD_PREFIX))
}

impl App {
    /// Syncs from the configured `HERMA_TESSERA_URL` (the admin route).
    pub async fn tessera_sync_configured(
        &self,
        after: Option<String>,
    ) -> Result<SyncReport, Problem> {
        let Some(url) = &self.settings.tessera_url else {
            return Err(Problem::new(
                ProblemCode::ValidationFailed,
                "no Tessera is configured: set HERMA_TESSERA_URL (and HERMA_TESSERA_TOKEN)",
            ));
        };
        let source = HttpSource::over(
            self.fabric(
                url,
                self.settings.tessera_token.as_ref().map(|t| t.expose()),
            )
            .map_err(|e| Problem::new(ProblemCode::Internal, e))?,
        );
        let report = self.tessera_sync(&source, after, &mut |_| {}).await?;
        tracing::info!(
            records = report.records,
            created = report.created,
            updated = report.updated,
            removed = report.removed,
            refused = report.refused.len(),
            "tessera sync finished"
        );
        Ok(report)
    }

    /// Pulls every record from `source` (from the page after `after`), reporting progress
    /// after each page.
    pub async fn tessera_sync(
        &self,
        source: &dyn TesseraSource,
        after: Option<String>,
        progress: &mut (dyn FnMut(&SyncReport) + Send),
    ) -> Result<SyncReport, Problem> {
        let from_start = after.is_none();
        let mut cursor = after;
        let mut report = SyncReport::default();
        // Every record URI Tessera still publishes, refused or not: removal never deletes the
        // last good version of a record that failed to read this time.
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut blob_digests: BTreeMap<String, Option<String>> = BTreeMap::new();
        loop {
            if report.pages as usize >= MAX_SYNC_PAGES {
                report.resume_after = cursor.clone();
                report.stopped = Some(format!("stopped after {MAX_SYNC_PAGES} pages"));
                break;
            }
            let page = match source.page(cursor.as_deref()).await {
                Ok(page) => page,
                Err(e) => {
                    report.resume_after = cursor.clone();
                    report.stopped = Some(format!("reading a page failed: {e}"));
                    break;
                }
            };
            report.pages += 1;
            for raw in page.records {
                report.records += 1;
                let uri = raw
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or("(no uri)")
                    .to_owned();
                seen.insert(uri.clone());
                let record: TesseraRecord = match json::decode(raw) {
                    Ok(r) => r,
                    Err(p) => {
                        let reason = p
                            .errors
                            .first()
                            .map_or(p.detail.clone(), |e| format!("{}: {}", e.pointer, e.detail));
                        report.refused.push(SyncRefusal { uri, reason });
                        continue;
                    }
                };
                let mut fetched = BTreeMap::new();
                if let Ok(uris) = blob_uris(&record) {
                    for blob in uris {
                        if !blob_digests.contains_key(&blob) {
                            let digest = match source.blob(&blob).await {
                                Ok(content) if content.len() <= MAX_BLOB_BYTES => {
                                    Some(sha256_hex(&content))
                                }
                                Ok(_) => None,
                                Err(e) => {
                                    tracing::warn!(blob = %blob, error = %e, "fetching a blob failed");
                                    None
                                }
                            };
                            blob_digests.insert(blob.clone(), digest);
                        }
                        if let Some(Some(digest)) = blob_digests.get(&blob) {
                            fetched.insert(blob, digest.clone());
                        }
                    }
                }
                let converted = match convert(&record, &fetched) {
                    Ok(c) => c,
                    Err(reason) => {
                        report.refused.push(SyncRefusal { uri, reason });
                        continue;
                    }
                };
                match self.write_synced(&converted).await {
                    Ok(written) => {
                        match written {
                            Upserted::Created => report.created += 1,
                            Upserted::Updated => report.updated += 1,
                            Upserted::Unchanged => report.unchanged += 1,
                        }
                        let governance = match &converted {
                            Converted::Provision(p) => p.fabric_governance.as_ref(),
                            Converted::Context(c) => c.fabric_governance.as_ref(),
                        };
                        if herma_core::governance::admit_anyone(governance).is_err() {
                            report.not_served += 1;
                        }
                    }
                    Err(reason) => report.refused.push(SyncRefusal { uri, reason }),
                }
            }
            progress(&report);
            match page.next {
                Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                    report.resume_after = cursor.clone();
                    report.stopped = Some("Tessera returned the same cursor again".into());
                    break;
                }
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let removed = if from_start && report.stopped.is_none() {
            self.remove_unpublished(&seen).await
        } else {
            Ok(0)
        };
        // Whatever was written is visible at once, even when removal failed.
        self.rules.invalidate(&CallerScope::system_builtin());
        report.removed = removed?;
        Ok(report)
    }

    async fn write_synced(&self, converted: &Converted) -> Result<Upserted, String> {
        let (store, scope, now) = (
            self.store.as_ref(),
            CallerScope::system_builtin(),
            self.clock.now(),
        );
        match converted {
            Converted::Provision(spec) => {
                upsert(store.provisions(), &scope, spec, now, |old| {
                    same_record(old, spec)
                })
                .await
            }
            Converted::Context(spec) => {
                upsert(store.context_entries(), &scope, spec, now, |old| {
                    same_record(old, spec)
                })
                .await
            }
        }
    }

    /// Deletes synced built-ins whose record URI is not in `seen`.
    async fn remove_unpublished(&self, seen: &BTreeSet<String>) -> Result<u32, Problem> {
        let store = self.store.as_ref();
        Ok(remove(store.provisions(), seen).await? + remove(store.context_entries(), seen).await?)
    }
}

/// A stored built-in may be replaced only by the Tessera record that wrote it.
fn same_record<D: Managed>(old: &D, spec: &D) -> Result<(), String> {
    if !synced(old.governance()) {
        return Err("a built-in of this id exists and was not synced from Tessera".into());
    }
    if record_uri(old.governance()) != record_uri(spec.governance()) {
        return Err(format!(
            "the id is taken by another Tessera record ({})",
            record_uri(old.governance()).unwrap_or_default()
        ));
    }
    Ok(())
}

fn record_uri(governance: Option<&FabricGovernance>) -> Option<&str> {
    governance.and_then(|g| g.record_uri.as_deref())
}

/// Deletes the synced built-ins of one kind whose record URI `seen` does not hold.
async fn remove<D: Managed>(typed: Typed<'_, D>, seen: &BTreeSet<String>) -> Result<u32, Problem> {
    let scope = CallerScope::system_builtin();
    let mut removed = 0;
    for stored in typed.list_all(&scope).await.map_err(internal)? {
        let spec = D::spec_of(&stored);
        let published = record_uri(spec.governance()).is_some_and(|u| seen.contains(u));
        if synced(spec.governance()) && !published {
            typed
                .delete(&scope, spec.id(), Some(D::version_of(&stored)))
                .await
                .map_err(internal)?;
            removed += 1;
        }
    }
    Ok(removed)
}
