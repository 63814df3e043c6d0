//! The stored form of a harness key: never the key itself, only its digest.

use serde::Serialize;

use crate::caller::CallerScope;
use crate::key::{KeyDigest, KeyId, Scopes};
use crate::time::Timestamp;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HarnessKey {
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "3f9a1c0d5e7b2a64"))]
    pub key_id: KeyId,
    pub caller_scope: CallerScope,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::key::Scope>))]
    pub scopes: Scopes,
    /// The harness this key attests for configure operations (`X-Herma-Harness`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(example = "claude-code"))]
    pub harness: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = "laptop"))]
    pub label: String,
    /// Cohorts the key's caller belongs to: `cohort`-scoped governed records are visible to it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["platform"])))]
    pub cohorts: Vec<String>,
    #[serde(skip)]
    pub digest: KeyDigest,
    pub created_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Timestamp>,
}

impl HarnessKey {
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }
}
