//! Provisions and context entries: create, read, list, compare-and-set update, delete, import
//! and export — partitioned by caller scope, with `system_builtin` records writable only by an
//! admin (H11).

use herma_core::gate::Principal;
use herma_core::json;
use herma_core::key::Scope;
use herma_core::model::{ContextEntrySpec, ProvisionSpec};
use herma_core::{CallerScope, FieldError, Problem, ProblemCode};
use herma_store::{Document, ImportSummary, Page, Typed};
use serde_json::Value;

use crate::App;
use crate::error::{internal, store_problem};

/// A record type managed through the API.
pub trait Managed: Document<Stored: serde::Serialize + Sync> + Clone + PartialEq {
    /// What to call one record in messages, e.g. `provision`.
    const NOUN: &'static str;
    fn version_of(stored: &Self::Stored) -> u64;
    fn validate(&self) -> Result<(), Problem>;
    fn governance(&self) -> Option<&herma_core::governance::FabricGovernance>;
    /// Whether the record needs example vectors (a semantic trigger).
    fn needs_vectors(&self) -> bool {
        false
    }
}

impl Managed for ProvisionSpec {
    const NOUN: &'static str = "provision";
    fn version_of(stored: &Self::Stored) -> u64 {
        stored.version
    }
    fn validate(&self) -> Result<(), Problem> {
        ProvisionSpec::validate(self)
    }
    fn governance(&self) -> Option<&herma_core::governance::FabricGovernance> {
        self.fabric_governance.as_ref()
    }
    fn needs_vectors(&self) -> bool {
        self.triggers.semantic.is_some()
    }
}

impl Managed for ContextEntrySpec {
    const NOUN: &'static str = "context entry";
    fn version_of(stored: &Self::Stored) -> u64 {
        stored.version
    }
    fn validate(&self) -> Result<(), Problem> {
        ContextEntrySpec::validate(self)
    }
    fn governance(&self) -> Option<&herma_core::governance::FabricGovernance> {
        self.fabric_governance.as_ref()
    }
}

/// Whether a non-admin principal may read a built-in record: the governance lens decides, so a
/// quarantined or otherwise refused record is refused on every surface (H12).
pub(crate) fn visible_builtin<D: Managed>(principal: &Principal, spec: &D) -> bool {
    match principal {
        Principal::Bootstrap => true,
        Principal::Key(k) if k.scopes.contains(herma_core::key::Scope::Admin) => true,
        Principal::Key(k) => herma_core::governance::admit(
            spec.governance(),
            &herma_core::governance::Requester {
                caller: &k.caller_scope,
                harness: k.harness.as_deref(),
                cohorts: &k.cohorts,
            },
        )
        .is_ok(),
    }
}

/// Whose records a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partition {
    /// The caller's own scope.
    Own,
    /// `system_builtin`: admins only.
    Builtin,
}

fn is_admin(principal: &Principal) -> bool {
    match principal {
        Principal::Bootstrap => true,
        Principal::Key(k) => k.scopes.contains(Scope::Admin),
    }
}

/// The scope a principal reads: its own.
pub fn own_scope(principal: &Principal) -> Result<&CallerScope, Problem> {
    match principal {
        Principal::Key(k) => Ok(&k.caller_scope),
        Principal::Bootstrap => Err(Problem::new(
            ProblemCode::InsufficientScope,
            "the bootstrap token owns no records; use an hmk_ key",
        )),
    }
}

fn builtin_protected<D: Managed>(id: &str) -> Problem {
    Problem::new(
        ProblemCode::BuiltinProtected,
        format!(
            "{} `{id}` is a system built-in; only an admin can change it",
            D::NOUN
        ),
    )
}

/// Decodes a strict JSON body into a validated record.
pub fn decode_record<D: Managed>(value: Value) -> Result<D, Problem> {
    let record: D = json::decode(value)?;
    record.validate()?;
    Ok(record)
}

/// Splits `expected_version` off an update body, then decodes the record.
pub fn decode_update<D: Managed>(value: Value) -> Result<(D, u64), Problem> {
    let Value::Object(mut map) = value else {
        return Err(Problem::validation(vec![FieldError::new(
            "",
            "the body must be a JSON object",
        )]));
    };
    let expected = match map.shift_remove("expected_version") {
        None => {
            return Err(Problem::validation(vec![FieldError::new(
                "/expected_version",
                "is required: send the version you read, so concurrent edits are not lost",
            )]));
        }
        Some(value) => value.as_u64().ok_or_else(|| {
            Problem::validation(vec![FieldError::new(
                "/expected_version",
                "must be a non-negative integer (the version you read)",
            )])
        })?,
    };
    Ok((
        decode_record(Value::Object(map))?,
        expected_version_in_range(expected)?,
    ))
}

/// The largest version a record can have: versions are stored as signed 64-bit integers.
pub const MAX_VERSION: u64 = i64::MAX as u64;

/// An `expected_version` beyond any version a record can have is refused as a field error
/// (it could only ever be stale, and the stores cannot even compare it).
pub fn expected_version_in_range(expected: u64) -> Result<u64, Problem> {
    if expected > MAX_VERSION {
        return Err(Problem::validation(vec![FieldError::new(
            "/expected_version",
            format!("must be at most {MAX_VERSION}"),
        )]));
    }
    Ok(expected)
}

impl App {
    fn typed<D: Managed>(&self) -> Typed<'_, D> {
        Typed::new(self.store.as_ref())
    }

    /// The scope a write lands in, refusing non-admin writes to built-ins.
    pub(crate) async fn write_scope<D: Managed>(
        &self,
        principal: &Principal,
        partition: Partition,
        id: &str,
    ) -> Result<CallerScope, Problem> {
        match partition {
            Partition::Builtin if is_admin(principal) => Ok(CallerScope::system_builtin()),
            Partition::Builtin => Err(builtin_protected::<D>(id)),
            Partition::Own => {
                let scope = own_scope(principal)?.clone();
                let builtin = self
                    .typed::<D>()
                    .get(&CallerScope::system_builtin(), id)
                    .await
                    .map_err(internal)?;
                if builtin.is_some() && !is_admin(principal) {
                    return Err(builtin_protected::<D>(id));
                }
                Ok(scope)
            }
        }
    }

    /// Whether `scope` may store `record` (new, or replacing one of `replaced_bytes`) within the
    /// operator's per-caller quotas. The built-ins are the operator's own and have none.
    /// Checked before each write: concurrent writes of one caller may pass a quota by as many as
    /// race.
    pub(crate) async fn within_quota<D: Managed>(
        &self,
        scope: &CallerScope,
        record: &D,
        replaced_bytes: Option<u64>,
    ) -> Result<(), Problem> {
        if scope.is_system_builtin() {
            return Ok(());
        }
        let quotas = self.settings.quotas;
        let usage = self.store.usage(scope).await.map_err(internal)?;
        let (limit, setting) = match D::COLLECTION {
            herma_store::Collection::Provisions => {
                (quotas.provisions, "HERMA_CALLER_MAX_PROVISIONS")
            }
            herma_store::Collection::ContextEntries => {
                (quotas.context_entries, "HERMA_CALLER_MAX_CONTEXT_ENTRIES")
            }
        };
        let exceeded = |detail: String, setting: &str| {
            Problem::new(ProblemCode::QuotaExceeded, detail)
                .with_extension("limit", serde_json::json!(setting))
        };
        if replaced_bytes.is_none() && usage.count(D::COLLECTION) >= limit {
            return Err(exceeded(
                format!(
                    "this key's caller already holds {} {}s, the operator's limit; delete some or ask the operator",
                    usage.count(D::COLLECTION),
                    D::NOUN
                ),
                setting,
            ));
        }
        let bytes = serde_json::to_vec(record).map_or(0, |b| b.len() as u64);
        let after = usage
            .bytes
            .saturating_sub(replaced_bytes.unwrap_or(0))
            .saturating_add(bytes);
        if after > quotas.stored_bytes {
            return Err(exceeded(
                format!(
                    "this write would bring the caller's stored records to {after} bytes, over the operator's limit of {}; delete some or ask the operator",
                    quotas.stored_bytes
                ),
                "HERMA_CALLER_MAX_STORED_BYTES",
            ));
        }
        Ok(())
    }

    pub async fn create_record<D: Managed>(
        &self,
        principal: &Principal,
        partition: Partition,
        body: Value,
    ) -> Result<D::Stored, Problem> {
        let record: D = decode_record(body)?;
        let scope = self
            .write_scope::<D>(principal, partition, record.id())
            .await?;
        self.within_quota(&scope, &record, None).await?;
        let created = self
            .typed::<D>()
            .create(&scope, &record, self.clock.now())
            .await
            .map_err(|e| store_problem(e, D::NOUN, record.id(), 0))?;
        self.rules.invalidate(&scope);
        self.prepare_vectors(&scope, std::slice::from_ref(&record))
            .await;
        Ok(created)
    }

    /// The caller's own record, else a built-in of that id (read-only), else `not_found`.
    pub async fn get_record<D: Managed>(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<D::Stored, Problem> {
        let typed = self.typed::<D>();
        let scope = own_scope(principal)?;
        if let Some(own) = typed.get(scope, id).await.map_err(internal)? {
            return Ok(own);
        }
        typed
            .get(&CallerScope::system_builtin(), id)
            .await
            .map_err(internal)?
            .filter(|b| visible_builtin(principal, D::spec_of(b)))
            .ok_or_else(|| Problem::not_found(D::NOUN, id))
    }

    /// A page of the caller's records (or of the built-ins).
    pub async fn list_records<D: Managed>(
        &self,
        principal: &Principal,
        partition: Partition,
        page: &Page,
    ) -> Result<Vec<D::Stored>, Problem> {
        let scope = match partition {
            Partition::Own => own_scope(principal)?.clone(),
            Partition::Builtin => CallerScope::system_builtin(),
        };
        let typed = self.typed::<D>();
        if partition == Partition::Own {
            return typed.list(&scope, page).await.map_err(internal);
        }
        // Built-ins the lens refuses this caller are left out; read on so a page stays full
        // while more records exist (callers page on with the last id).
        let mut out = Vec::new();
        let mut cursor = page.clone();
        loop {
            let batch = typed.list(&scope, &cursor).await.map_err(internal)?;
            let full = batch.len() as u32 == cursor.limit;
            cursor.after = batch.last().map(|r| D::spec_of(r).id().to_owned());
            out.extend(
                batch
                    .into_iter()
                    .filter(|r| visible_builtin(principal, D::spec_of(r))),
            );
            if !full || out.len() as u32 >= page.limit {
                out.truncate(page.limit as usize);
                return Ok(out);
            }
        }
    }

    pub async fn update_record<D: Managed>(
        &self,
        principal: &Principal,
        partition: Partition,
        id: &str,
        body: Value,
    ) -> Result<D::Stored, Problem> {
        let (record, expected) = decode_update::<D>(body)?;
        if record.id() != id {
            return Err(Problem::validation(vec![FieldError::new(
                "/id",
                format!("must match the id in the path (`{id}`); ids cannot be renamed"),
            )]));
        }
        let scope = self.write_scope::<D>(principal, partition, id).await?;
        if let Some(old) = self.typed::<D>().get(&scope, id).await.map_err(internal)? {
            let old_bytes = serde_json::to_vec(D::spec_of(&old)).map_or(0, |b| b.len() as u64);
            self.within_quota(&scope, &record, Some(old_bytes)).await?;
        }
        let updated = self
            .typed::<D>()
            .update(&scope, &record, expected, self.clock.now())
            .await
            .map_err(|e| store_problem(e, D::NOUN, id, expected))?;
        self.rules.invalidate(&scope);
        self.prepare_vectors(&scope, std::slice::from_ref(&record))
            .await;
        Ok(updated)
    }

    pub async fn delete_record<D: Managed>(
        &self,
        principal: &Principal,
        partition: Partition,
        id: &str,
        expected_version: Option<u64>,
    ) -> Result<(), Problem> {
        if let Some(expected) = expected_version {
            expected_version_in_range(expected)?;
        }
        let scope = self.write_scope::<D>(principal, partition, id).await?;
        self.typed::<D>()
            .delete(&scope, id, expected_version)
            .await
            .map_err(|e| store_problem(e, D::NOUN, id, expected_version.unwrap_or(0)))?;
        self.rules.invalidate(&scope);
        Ok(())
    }

    /// Imports validated records into `scope`, all or nothing.
    pub async fn import_records<D: Managed>(
        &self,
        scope: &CallerScope,
        records: &[D],
    ) -> Result<ImportSummary, Problem> {
        let summary = self
            .typed::<D>()
            .import(scope, records, self.clock.now())
            .await
            .map_err(internal)?;
        self.rules.invalidate(scope);
        self.prepare_vectors(scope, records).await;
        Ok(summary)
    }

    /// Computes (and stores) the example vectors of newly written semantic rules now, on the
    /// configure call, so the first proxied request after it does not pay for them. Failure is
    /// only logged: the rule index computes missing vectors itself.
    async fn prepare_vectors<D: Managed>(&self, scope: &CallerScope, written: &[D]) {
        if self.tiers.embedder.is_none() || !written.iter().any(Managed::needs_vectors) {
            return;
        }
        if let Err(p) = self
            .rules
            .snapshot(scope, herma_core::evaluation::Mode::Online)
            .await
        {
            tracing::warn!(detail = %p.detail, "preparing example vectors failed");
        }
    }

    /// Every record of `scope`, as specs (what an import takes back).
    pub async fn export_records<D: Managed>(
        &self,
        scope: &CallerScope,
    ) -> Result<Vec<D::Stored>, Problem> {
        self.typed::<D>().list_all(scope).await.map_err(internal)
    }
}

/// What [`upsert`] did.
pub(crate) enum Upserted {
    Created,
    Updated,
    Unchanged,
}

/// Writes `spec` into `scope` for a sync (Tessera, a handshake): created when new, left as it is
/// when unchanged (its version kept), else updated by compare-and-set — unless a record of that
/// id exists that `same_origin` does not accept as this source's, which is refused.
pub(crate) async fn upsert<D: Managed>(
    typed: Typed<'_, D>,
    scope: &CallerScope,
    spec: &D,
    now: herma_core::Timestamp,
    same_origin: impl Fn(&D) -> Result<(), String>,
) -> Result<Upserted, String> {
    let fail = |e: herma_store::StoreError| e.to_string();
    match typed.get(scope, spec.id()).await.map_err(fail)? {
        None => typed
            .create(scope, spec, now)
            .await
            .map(|_| Upserted::Created),
        Some(old) => {
            same_origin(D::spec_of(&old))?;
            if D::spec_of(&old) == spec {
                Ok(Upserted::Unchanged)
            } else {
                typed
                    .update(scope, spec, D::version_of(&old), now)
                    .await
                    .map(|_| Upserted::Updated)
            }
        }
    }
    .map_err(fail)
}
