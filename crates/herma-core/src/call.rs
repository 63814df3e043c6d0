//! The neutral vocabulary of one governed model call: the request and its controls, the events
//! a provider's stream is decoded into, and the support matrix a request is checked against.
//!
//! Each wire protocol encodes a [`ModelRequest`] in its own JSON and decodes its own stream into
//! [`ModelEvent`]s ([`crate::wire`]); this module is what they have in common. Pure data and
//! pure functions: the HTTP side lives in `herma-providers`.
//!
//! # Support matrix
//!
//! [`Protocol::validate`](crate::wire::Protocol::validate) refuses, before any network access,
//! what a protocol does not support: the checks below are the same for every protocol, and each
//! protocol gives its row ([`Support`]). The matrix is deliberately bounded: what is not listed
//! is refused.
//!
//! | control                    | OpenAI Responses | Anthropic Messages | Chat Completions |
//! |----------------------------|------------------|--------------------|------------------|
//! | `temperature`              | 0.0 – 2.0        | 0.0 – 1.0          | 0.0 – 2.0        |
//! | `max_tokens`               | 1 – 128,000      | 1 – 128,000        | 1 – 128,000      |
//! | tool choice `auto`         | yes              | yes                | yes              |
//! | tool choice `none`         | yes              | yes                | yes              |
//! | tool choice `any`          | yes (`required`) | yes (`any`)        | yes (`required`) |
//! | tool choice `tool` (named) | yes              | yes                | yes              |
//! | a tool choice, no tools    | refused          | refused            | refused          |
//! | output JSON schema         | yes (`text.format`) | refused         | yes (`response_format`) |
//! | `cache` override           | refused (automatic) | yes (`cache_control`) | refused (automatic) |
//! | messages                   | text user/assistant | text user/assistant | text user/assistant |

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One text message of the conversation (the only kind the governed engine sends).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Msg {
    pub role: Role,
    pub text: String,
}

impl Msg {
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            text: text.into(),
        }
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            text: text.into(),
        }
    }
}

/// A tool the model may call, from the host's authorized registry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
}

/// Which tool the model must (or may) call.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ToolChoice {
    Auto,
    None,
    Any,
    Tool { name: String },
}

/// A native JSON output contract.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    pub name: String,
    pub schema: Value,
}

/// The controls a call is dispatched with: persisted with the execution before dispatch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Controls {
    pub model: String,
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Prompt caching: `Some(false)` turns it off, `Some(true)` asks for it, `None` leaves the
    /// provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
}

/// Which governed call a request belongs to: sent with it so the provider side (logs, a
/// gateway's routing and access rules) can correlate it. Never the host's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallTag {
    /// The engine's call id (a digest of scope and operation key).
    pub call_id: String,
    /// Always 1 for a governed call: a key is one call.
    pub attempt: u32,
}

/// One request.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    pub system: Option<String>,
    pub messages: Vec<Msg>,
    pub tools: Vec<ToolSpec>,
    pub output: Option<OutputSchema>,
    pub controls: Controls,
    /// Set by the engine just before the dispatch.
    pub call: Option<CallTag>,
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    ToolUse,
    Refusal,
    /// Anthropic's `model_context_window_exceeded`: the input left no room to answer.
    ContextWindowExceeded,
    Other(String),
}

/// Terminal token usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

/// What a provider stream says, neutrally.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    /// The provider's id for this response: the attested reference.
    Reference(String),
    TextDelta(String),
    /// A finished tool call; `arguments` is the model's raw JSON text.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    /// A reasoning block as the provider sent it (OpenAI `reasoning` item with its
    /// `encrypted_content` and summary; Anthropic `thinking`/`redacted_thinking`).
    Reasoning(Value),
    /// Any other output block (server tools, citations, …), preserved as opaque JSON.
    ProviderBlock(Value),
    Stop(StopReason),
    Usage(Usage),
}

/// A request the provider cannot take as asked.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{field}: {reason}")]
pub struct Unsupported {
    pub field: String,
    pub reason: String,
}

fn unsupported(field: &str, reason: impl Into<String>) -> Unsupported {
    Unsupported {
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// One protocol's row of the support matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Support {
    /// The highest `temperature` taken (the lowest is 0.0).
    pub max_temperature: f64,
    /// `controls.cache` may be given; without it the provider caches automatically.
    pub cache_override: bool,
    /// `output` (a native JSON schema) is supported.
    pub json_schema_output: bool,
}

impl Support {
    /// Refuses what this row does not allow; `name` is the protocol's name in the reasons.
    pub fn check(&self, name: &str, request: &ModelRequest) -> Result<(), Unsupported> {
        let controls = &request.controls;
        if controls.model.trim().is_empty() {
            return Err(unsupported("controls.model", "must not be empty"));
        }
        if !(1..=128_000).contains(&controls.max_tokens) {
            return Err(unsupported(
                "controls.max_tokens",
                "must be between 1 and 128000",
            ));
        }
        if let Some(t) = controls.temperature {
            let max = self.max_temperature;
            if !t.is_finite() || !(0.0..=max).contains(&t) {
                return Err(unsupported(
                    "controls.temperature",
                    format!("{name} accepts 0.0 to {max}"),
                ));
            }
        }
        if let Some(choice) = &controls.tool_choice {
            if request.tools.is_empty() {
                return Err(unsupported(
                    "controls.tool_choice",
                    "a tool choice needs tools",
                ));
            }
            if let ToolChoice::Tool { name } = choice
                && !request.tools.iter().any(|t| &t.name == name)
            {
                return Err(unsupported(
                    "controls.tool_choice",
                    format!("names `{name}`, which is not among the request's tools"),
                ));
            }
        }
        if controls.cache.is_some() && !self.cache_override {
            return Err(unsupported(
                "controls.cache",
                format!("{name} caches automatically; it cannot be overridden"),
            ));
        }
        if request.output.is_some() && !self.json_schema_output {
            return Err(unsupported(
                "output",
                format!("{name} has no native JSON schema output"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
