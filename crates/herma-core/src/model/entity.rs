//! Working entities: what deterministic extraction remembers per caller and project.

use serde::{Deserialize, Serialize};

use crate::caller::CallerScope;
use crate::time::Timestamp;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    FilePath,
    CodeSymbol,
    TesseraUri,
    StatuteCardId,
    ErrorSignature,
}

impl EntityKind {
    pub const ALL: [EntityKind; 5] = [
        EntityKind::FilePath,
        EntityKind::CodeSymbol,
        EntityKind::TesseraUri,
        EntityKind::StatuteCardId,
        EntityKind::ErrorSignature,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::FilePath => "file_path",
            EntityKind::CodeSymbol => "code_symbol",
            EntityKind::TesseraUri => "tessera_uri",
            EntityKind::StatuteCardId => "statute_card_id",
            EntityKind::ErrorSignature => "error_signature",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == raw)
    }
}

/// One remembered entity, counted per (`caller_scope`, `project_tag`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkingEntity {
    pub caller_scope: CallerScope,
    #[cfg_attr(feature = "openapi", schema(example = "herma"))]
    pub project_tag: String,
    pub kind: EntityKind,
    #[cfg_attr(feature = "openapi", schema(example = "crates/herma-core/src/lib.rs"))]
    pub value: String,
    pub count: u64,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
}
