//! The five turn providers on the wire: one model request per attempt, as exact bytes, and its
//! one reply read back into the neutral call vocabulary ([`crate::call`]).
//!
//! Layout: [`encode`] builds a [`ProviderRequest`] from a resolved [`ProviderConfig`] and a
//! [`TurnRequest`]; [`decode`] turns the HTTP status, headers and body of the reply into a
//! [`Reply`]; [`outcome`] is the closed list of attempt outcomes; [`diagnostics`] builds the only
//! error evidence a record keeps. One file per wire shape: `chat` (Meta and OpenRouter Chat
//! Completions), `ollama` (native `/api/chat`), `responses` (OpenAI Responses) and `messages`
//! (Anthropic Messages), with `read` for what their reply readers share. Pure: the HTTP layer
//! sends the bytes, adds the credential ([`CredentialStyle`]) and hands back what came.
//!
//! # Requests
//!
//! Every request is one non-streaming JSON body, compact UTF-8 ([`MAX_REQUEST_BYTES`] at most:
//! [`check_request_size`] refuses a larger one with 413 before anything is reserved). Members
//! come in a fixed order — Herma's own first, in the order below, then the operator's generation
//! JSON members in their own order. Generation JSON never replaces a member Herma set (the
//! configuration already refused the collisions; a forced `service_tier` it repeats keeps
//! Herma's place). `tools` and `tool_choice` are left out when a turn offers no tool.
//!
//! | provider   | members, in order                                                                 |
//! |------------|-----------------------------------------------------------------------------------|
//! | meta       | `model`, `messages`, `tools`, `tool_choice`, `max_tokens`, `reasoning_effort`?     |
//! | openrouter | `model`, `messages`, `tools`, `tool_choice`, `max_tokens`, `reasoning`?, `provider` |
//! | ollama     | `model`, `messages`, `tools`, `stream`, `options` (`num_predict` first), generation's other members |
//! | openai     | `model`, `instructions`, `input`, `tools`, `tool_choice`, `max_output_tokens`, `store`, `background`, `service_tier`, `reasoning`? |
//! | anthropic  | `model`, `max_tokens`, `system`, `messages`, `tools`, `tool_choice`, `service_tier` |
//!
//! (`?`: only when a reasoning effort is configured and generation JSON does not set it.)
//!
//! # Replies
//!
//! Exactly `200` is a completed reply, parsed strictly ([`crate::json::parse_strict`], at most
//! [`MAX_RESPONSE_BYTES`]); anything unreadable or of the wrong shape is [`Reply::Invalid`]. Any
//! other 2xx (`202 Accepted`), or a Responses body still `queued` or `in_progress` (or `failed`
//! or `cancelled`, which say nothing of what was generated), is [`Reply::Uncertain`]: it is never
//! polled, followed or repeated. Everything else — 1xx, 3xx (a redirect is never followed), 4xx,
//! 5xx — is [`Reply::Rejected`] with its outcome by status ([`AttemptOutcome::for_rejection`])
//! and allowlisted [`ProviderDiagnostics`]. Reasons are Herma's own words; a reply's text is
//! never copied into them. Tool calls are returned as they came: a reply with several is the
//! turn's to refuse (a turn proposes at most one action), not the wire's.

mod chat;
pub mod diagnostics;
mod messages;
mod ollama;
pub mod outcome;
mod read;
mod responses;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::call::{ModelEvent, Msg, ToolSpec};
use crate::problem::{Problem, ProblemCode};
use crate::secret::Secret;
use crate::upstream::Provider;

use super::config::ProviderConfig;

pub use diagnostics::{DiagnosticReason, MAX_ERROR_BODY_BYTES, ProviderDiagnostics, diagnose};
pub use outcome::AttemptOutcome;

/// The largest model request body a turn sends, in bytes of compact UTF-8 JSON.
pub const MAX_REQUEST_BYTES: usize = 32 * 1024;
/// The largest reply body parsed, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// What one model attempt asks: the system instructions, the transcript and the caller's work
/// contracts as function tools (named by operation id). The model may call at most one of them;
/// the tool choice is always `auto`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRequest {
    pub system: String,
    pub messages: Vec<Msg>,
    pub tools: Vec<ToolSpec>,
}

/// How the HTTP layer attaches the operator's key (it never travels in [`ProviderRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialStyle {
    /// `authorization: Bearer <key>` (Meta, Ollama, OpenAI, OpenRouter).
    Bearer,
    /// `x-api-key: <key>` (Anthropic).
    XApiKey,
}

impl CredentialStyle {
    pub fn for_provider(provider: Provider) -> Self {
        match provider {
            Provider::Anthropic => CredentialStyle::XApiKey,
            Provider::Meta | Provider::Ollama | Provider::Openai | Provider::Openrouter => {
                CredentialStyle::Bearer
            }
        }
    }

    pub fn header_name(self) -> &'static str {
        match self {
            CredentialStyle::Bearer => "authorization",
            CredentialStyle::XApiKey => "x-api-key",
        }
    }

    /// The header's value for `key`, still a [`Secret`].
    pub fn header_value(self, key: &Secret) -> Secret {
        match self {
            CredentialStyle::Bearer => Secret::new(format!("Bearer {}", key.expose())),
            CredentialStyle::XApiKey => key.clone(),
        }
    }
}

/// One model request, exactly as it is sent (the credential aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRequest {
    /// The configured destination ([`super::config::Destination::url`]).
    pub url: String,
    /// Lowercase names: `content-type`, and `anthropic-version` for Anthropic.
    pub headers: Vec<(&'static str, String)>,
    pub credential: CredentialStyle,
    /// Compact UTF-8 JSON in the documented member order.
    pub body: Vec<u8>,
}

/// The request for one attempt of `config`'s provider.
pub fn encode(config: &ProviderConfig, request: &TurnRequest) -> ProviderRequest {
    let body = match config.provider {
        Provider::Meta | Provider::Openrouter => chat::encode(config, request),
        Provider::Ollama => ollama::encode(config, request),
        Provider::Openai => responses::encode(config, request),
        Provider::Anthropic => messages::encode(config, request),
    };
    let mut headers = vec![("content-type", "application/json".to_owned())];
    if let (Provider::Anthropic, Some(version)) = (config.provider, config.anthropic_version) {
        headers.push(("anthropic-version", version.to_owned()));
    }
    ProviderRequest {
        url: config.destination.url(),
        headers,
        credential: CredentialStyle::for_provider(config.provider),
        body: Value::Object(body).to_string().into_bytes(),
    }
}

/// Refuses (413 `payload_too_large`) a request body over [`MAX_REQUEST_BYTES`]; exactly at the
/// limit is sent.
pub fn check_request_size(request: &ProviderRequest) -> Result<(), Problem> {
    let bytes = request.body.len();
    if bytes <= MAX_REQUEST_BYTES {
        return Ok(());
    }
    let mut problem = Problem::new(
        ProblemCode::PayloadTooLarge,
        format!(
            "the model request would be {bytes} bytes of compact JSON; a turn sends at most {MAX_REQUEST_BYTES}"
        ),
    );
    problem.extensions = vec![
        ("request_bytes".to_owned(), json!(bytes)),
        ("limit_bytes".to_owned(), json!(MAX_REQUEST_BYTES)),
    ];
    Err(problem)
}

/// What one reply says.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// HTTP 200 with a well-formed body (`completed`). Events in order: `Reference` (the
    /// provider's response id) if any, one `TextDelta` with all text if any, one `ToolCall` per
    /// completed tool call, `Stop`, and `Usage` when the provider reported it.
    Completed {
        events: Vec<ModelEvent>,
        reported_model: Option<String>,
        /// OpenRouter's `provider`: the underlying provider that served the call.
        reported_provider: Option<String>,
    },
    /// Accepted or still running (`provider_outcome_uncertain`): the provider may generate and
    /// charge; never polled or repeated.
    Uncertain { reason: String },
    /// A 200 whose body cannot be read (`provider_invalid_response`): the outcome is unknown and
    /// possibly charged.
    Invalid { reason: String },
    /// Any status outside 2xx.
    Rejected {
        status: u16,
        outcome: AttemptOutcome,
        diagnostics: ProviderDiagnostics,
        /// `Retry-After` in plain decimal seconds (an HTTP-date is not read).
        retry_after_seconds: Option<u64>,
        /// The provider's request id header (`request-id`, else `x-request-id`).
        reference: Option<String>,
    },
}

impl Reply {
    /// The attempt outcome this reply records.
    pub fn outcome(&self) -> AttemptOutcome {
        match self {
            Reply::Completed { .. } => AttemptOutcome::Completed,
            Reply::Uncertain { .. } => AttemptOutcome::ProviderOutcomeUncertain,
            Reply::Invalid { .. } => AttemptOutcome::ProviderInvalidResponse,
            Reply::Rejected { outcome, .. } => *outcome,
        }
    }
}

/// Reads `provider`'s reply. `headers` names are matched case-insensitively.
pub fn decode(provider: Provider, status: u16, headers: &[(String, String)], body: &[u8]) -> Reply {
    match status {
        200 => decode_body(provider, body),
        201..=299 => Reply::Uncertain {
            reason: format!(
                "HTTP {status} is acceptance for processing, not a completed reply; it is never polled or repeated"
            ),
        },
        _ => Reply::Rejected {
            status,
            outcome: AttemptOutcome::for_rejection(status),
            diagnostics: diagnose(status, body),
            retry_after_seconds: header(headers, "retry-after").and_then(plain_seconds),
            reference: ["request-id", "x-request-id"]
                .into_iter()
                .find_map(|name| header(headers, name))
                .filter(|value| is_reference(value))
                .map(str::to_owned),
        },
    }
}

fn decode_body(provider: Provider, body: &[u8]) -> Reply {
    if body.len() > MAX_RESPONSE_BYTES {
        return Reply::Invalid {
            reason: format!("the reply body exceeds {MAX_RESPONSE_BYTES} bytes"),
        };
    }
    let Ok(value) = crate::json::parse_strict(body) else {
        return Reply::Invalid {
            reason: "the reply body is not strict JSON (a syntax error, a duplicate member or nesting deeper than 32)".to_owned(),
        };
    };
    let read = match provider {
        Provider::Meta | Provider::Openrouter => chat::decode(&value, provider),
        Provider::Ollama => ollama::decode(&value),
        Provider::Openai => responses::decode(&value),
        Provider::Anthropic => messages::decode(&value),
    };
    read.unwrap_or_else(|shape| Reply::Invalid {
        reason: format!("the reply's `{}` must be {}", shape.member, shape.expected),
    })
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.trim())
}

/// `Retry-After` as plain decimal seconds; an HTTP-date or anything else is not read.
fn plain_seconds(value: &str) -> Option<u64> {
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| value.parse().ok()).flatten()
}

/// A request id is kept only as a short visible-ASCII token.
fn is_reference(value: &str) -> bool {
    (1..=128).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_graphic())
}

// ---- shared by the wire shapes: building bodies ----

/// Chat-shaped messages (Chat Completions, Ollama): the system prompt first.
fn chat_messages(request: &TurnRequest) -> Value {
    let system = json!({"role": "system", "content": request.system});
    let turns = request
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.text}));
    Value::Array(std::iter::once(system).chain(turns).collect())
}

/// Chat-shaped function tools (Chat Completions, Ollama).
fn function_tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            }})
        })
        .collect()
}

/// Inserts `tools` and `tool_choice` (when the wire shape has one) if the turn offers tools: a
/// tool choice without tools is an error for the providers that take one.
fn insert_tools(body: &mut Map<String, Value>, tools: Value, choice: Option<Value>) {
    if tools.as_array().is_some_and(|t| !t.is_empty()) {
        body.insert("tools".into(), tools);
        if let Some(choice) = choice {
            body.insert("tool_choice".into(), choice);
        }
    }
}

/// Inserts the configured reasoning effort as `member` (spelled by `spell`), unless generation
/// JSON sets that member itself.
fn insert_reasoning(
    body: &mut Map<String, Value>,
    config: &ProviderConfig,
    member: &str,
    spell: fn(&str) -> Value,
) {
    if let Some(effort) = &config.reasoning
        && !config.generation.contains_key(member)
    {
        body.insert(member.to_owned(), spell(effort));
    }
}

/// Appends the generation members Herma did not set, in their own order.
fn merge_generation(body: &mut Map<String, Value>, generation: &Map<String, Value>) {
    for (name, value) in generation {
        if !body.contains_key(name) {
            body.insert(name.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests;
