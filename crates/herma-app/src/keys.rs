//! Issuing, listing and revoking harness keys.

use herma_core::caller::harness_problem;
use herma_core::key::{KeyId, KeyMaterial, Scope, Scopes};
use herma_core::model::HarnessKey;
use herma_core::{CallerScope, FieldError, Problem, ProblemCode};
use serde::{Deserialize, Serialize};

use crate::App;
use crate::error::{internal, store_problem};

pub const MAX_LABEL_CHARS: usize = 100;

/// A request for a new key.
#[derive(Clone, Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// What the key may do.
    #[schema(value_type = Vec<Scope>, example = json!(["route", "configure"]))]
    pub scopes: Scopes,
    /// The harness this key attests for configure operations; required with `configure`.
    #[serde(default)]
    #[schema(example = "claude-code")]
    pub harness: Option<String>,
    /// A note for the operator (where the key is used).
    #[serde(default)]
    pub label: String,
    /// Cohorts the caller belongs to (governed records scoped to a cohort become visible).
    #[serde(default)]
    #[schema(example = json!(["platform"]))]
    pub cohorts: Vec<String>,
}

/// A key as issued: the only time the secret is shown.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct IssuedKey {
    /// The key. Shown once; Herma keeps only its SHA-256 digest.
    #[schema(
        example = "hmk_3f9a1c0d5e7b2a64_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )]
    pub key: String,
    #[schema(value_type = String, example = "3f9a1c0d5e7b2a64")]
    pub key_id: KeyId,
    pub caller_scope: CallerScope,
    #[schema(value_type = Vec<Scope>)]
    pub scopes: Scopes,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cohorts: Vec<String>,
}

impl NewKey {
    pub fn validate(&self) -> Result<(), Problem> {
        let mut errors = Vec::new();
        if self.scopes.is_empty() {
            errors.push(FieldError::new("/scopes", "at least one scope is required"));
        }
        match &self.harness {
            Some(h) => {
                if let Some(problem) = harness_problem(h) {
                    errors.push(FieldError::new("/harness", problem));
                }
            }
            None if self.scopes.contains(Scope::Configure) => errors.push(FieldError::new(
                "/harness",
                "a key with the configure scope must name its harness (e.g. claude-code)",
            )),
            None => {}
        }
        if self.cohorts.len() > 32 {
            errors.push(FieldError::new("/cohorts", "at most 32 cohorts"));
        }
        for (i, cohort) in self.cohorts.iter().enumerate() {
            if let Some(problem) = harness_problem(cohort) {
                errors.push(FieldError::new(format!("/cohorts/{i}"), problem));
            }
        }
        if self.label.chars().count() > MAX_LABEL_CHARS {
            errors.push(FieldError::new(
                "/label",
                format!("must be at most {MAX_LABEL_CHARS} characters"),
            ));
        }
        if let Some(problem) = herma_core::model::unprintable(&self.label) {
            errors.push(FieldError::new("/label", problem));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Problem::validation(errors))
        }
    }
}

impl App {
    /// Mints a key (256-bit secret from the OS RNG) and stores only its digest.
    pub async fn issue_key(&self, request: NewKey) -> Result<IssuedKey, Problem> {
        request.validate()?;
        let mut id_bytes = [0u8; 8];
        let mut secret_bytes = [0u8; 32];
        for buf in [&mut id_bytes[..], &mut secret_bytes[..]] {
            self.random.fill(buf).map_err(|e| {
                tracing::error!(error = %e, "random source failed");
                Problem::new(ProblemCode::Internal, "Herma could not generate a key")
            })?;
        }
        let material = KeyMaterial::from_random(id_bytes, secret_bytes);
        let record = HarnessKey {
            key_id: material.key_id.clone(),
            caller_scope: CallerScope::for_key(&material.key_id),
            scopes: request.scopes.clone(),
            harness: request.harness.clone(),
            label: request.label.clone(),
            cohorts: request.cohorts.clone(),
            digest: material.digest.clone(),
            created_at: self.clock.now(),
            revoked_at: None,
        };
        self.store.insert_key(&record).await.map_err(internal)?;
        // Forget any "no such key" this instance cached for the new id.
        self.gate.forget(&record.key_id);
        tracing::info!(key_id = %record.key_id, scopes = %record.scopes.to_list(), "key issued");
        Ok(IssuedKey {
            key: material.key,
            key_id: record.key_id,
            caller_scope: record.caller_scope,
            scopes: record.scopes,
            harness: record.harness,
            label: record.label,
            cohorts: record.cohorts,
        })
    }

    pub async fn list_keys(&self) -> Result<Vec<HarnessKey>, Problem> {
        self.store.list_keys().await.map_err(internal)
    }

    /// Revokes a key; it stops working here at once and everywhere within one second.
    pub async fn revoke_key(&self, key_id: &str) -> Result<HarnessKey, Problem> {
        let id = KeyId::parse(key_id).ok_or_else(|| Problem::not_found("key", key_id))?;
        self.store
            .revoke_key(&id, self.clock.now())
            .await
            .map_err(|e| store_problem(e, "key", key_id, 0))?;
        self.gate.forget(&id);
        tracing::info!(key_id = %id, "key revoked");
        self.store
            .find_key(&id)
            .await
            .map_err(internal)?
            .ok_or_else(|| Problem::not_found("key", key_id))
    }

    /// True when no key has been issued yet (first start).
    pub async fn has_no_keys(&self) -> Result<bool, Problem> {
        Ok(self.store.list_keys().await.map_err(internal)?.is_empty())
    }
}
