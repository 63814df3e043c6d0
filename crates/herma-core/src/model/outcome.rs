//! Rule outcomes: what happened after a rule fired, recorded honestly (an injection is not proof
//! of influence).

use serde::{Deserialize, Serialize};

use crate::caller::CallerScope;
use crate::time::Timestamp;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// The rule's context was injected into the turn.
    Injected,
    /// The rule answered the turn directly.
    RespondedDirectly,
    /// The next turn of the conversation carried an error signature.
    RetryError,
    /// The rule matched but was not applied (outranked, or once-only and already used).
    Matched,
}

impl OutcomeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Injected => "injected",
            OutcomeKind::RespondedDirectly => "responded_directly",
            OutcomeKind::RetryError => "retry_error",
            OutcomeKind::Matched => "matched",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [
            Self::Injected,
            Self::RespondedDirectly,
            Self::RetryError,
            Self::Matched,
        ]
        .into_iter()
        .find(|k| k.as_str() == raw)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RuleOutcomeRecord {
    pub caller_scope: CallerScope,
    #[cfg_attr(feature = "openapi", schema(example = "conv-6f1c"))]
    pub conversation_id: String,
    /// The turn the outcome belongs to, counted from 1 within the conversation.
    pub turn: u64,
    pub provision_id: String,
    pub provision_version: u64,
    pub outcome: OutcomeKind,
    /// The error signature that caused a `retry_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_signature: Option<String>,
    /// The receipt of the turn that recorded this outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<String>,
    pub recorded_at: Timestamp,
}
