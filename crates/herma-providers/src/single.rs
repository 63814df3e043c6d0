//! Single-dispatch model clients for the governed engine: one request, one HTTP call, typed
//! events.
//!
//! A [`SingleDispatchClient`] is built only through its explicit constructors
//! ([`SingleDispatchClient::openai_responses`], [`SingleDispatchClient::anthropic_messages`],
//! [`SingleDispatchClient::chat_completions`]). It never retries, never follows a redirect and
//! never falls back: a failure is reported, and the caller's journal decides what it means. The
//! [`ModelClient`] port says how many attempts a client makes per dispatch; the governed runners
//! refuse any client that says more than one.
//!
//! Every client turns its provider's stream into the same [`ModelEvent`]s: a provider
//! reference (the response or message id), text deltas, finished tool calls (arguments as the
//! raw JSON text the model produced), reasoning blocks, other provider blocks, the stop and the
//! terminal usage.
//!
//! # Support matrix
//!
//! [`SingleDispatchClient::validate`] refuses, before any network access, what a provider does
//! not support. The matrix is deliberately bounded: what is not listed is refused.
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

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use herma_core::wire::sse;
use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::{HttpUpstream, Upstream, UpstreamError, UpstreamRequest};

/// Who speaks which wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    OpenAiResponses,
    AnthropicMessages,
    ChatCompletions,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAiResponses => "openai_responses",
            Self::AnthropicMessages => "anthropic_messages",
            Self::ChatCompletions => "chat_completions",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One text message of the conversation (the only kind the governed engine sends).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
}

/// Which tool the model must (or may) call.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ToolChoice {
    Auto,
    None,
    Any,
    Tool { name: String },
}

/// A native JSON output contract.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OutputSchema {
    pub name: String,
    pub schema: Value,
}

/// The controls a call is dispatched with: persisted with the execution before dispatch.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// Why a dispatch failed. Never carries a provider body or a credential.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ProviderError {
    /// The provider refused the request before streaming (a non-2xx status).
    #[error("the provider rejected the request with status {status}")]
    Rejected { status: u16 },
    #[error("transport failed: {0}")]
    Transport(String),
    /// The stream broke its protocol (an unparseable event, an `error` event, an early end).
    #[error("the provider stream is malformed: {0}")]
    Protocol(String),
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

pub type EventStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ProviderError>> + Send>>;

/// The port the governed runners call.
#[async_trait]
pub trait ModelClient: Send + Sync {
    fn provider(&self) -> ProviderKind;
    /// HTTP attempts one `dispatch` may make. The governed runners accept only 1.
    fn attempts_per_dispatch(&self) -> u32;
    /// Refuses what the provider cannot take (the support matrix), before any network access.
    fn validate(&self, request: &ModelRequest) -> Result<(), Unsupported>;
    /// Sends the request once. Events arrive as the provider streams them; a non-2xx answer
    /// yields the reference (the `request-id` header, when sent) and then
    /// [`ProviderError::Rejected`].
    async fn dispatch(&self, request: &ModelRequest) -> Result<EventStream, ProviderError>;
}

/// Limits a single-dispatch client works within.
#[derive(Clone, Copy, Debug)]
pub struct ClientTimeouts {
    pub connect: Duration,
    pub headers: Duration,
    pub idle: Duration,
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            headers: Duration::from_secs(120),
            idle: Duration::from_secs(120),
        }
    }
}

/// The single-dispatch HTTP client of one provider.
#[derive(Clone)]
pub struct SingleDispatchClient {
    kind: ProviderKind,
    base: String,
    api_key: String,
    http: Arc<dyn Upstream>,
}

impl std::fmt::Debug for SingleDispatchClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleDispatchClient")
            .field("kind", &self.kind)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl SingleDispatchClient {
    fn build(
        kind: ProviderKind,
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        let http = HttpUpstream::new(timeouts.connect, timeouts.headers, timeouts.idle)
            .map_err(|e| ProviderError::Transport(e.to_string()))?;
        Ok(Self {
            kind,
            base: base.trim_end_matches('/').to_owned(),
            api_key: api_key.to_owned(),
            http: Arc::new(http),
        })
    }

    /// OpenAI's Responses API at `base` (e.g. `https://api.openai.com/v1`): `POST {base}/responses`.
    pub fn openai_responses(
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        Self::build(ProviderKind::OpenAiResponses, base, api_key, timeouts)
    }

    /// Anthropic's Messages API at `base` (e.g. `https://api.anthropic.com`):
    /// `POST {base}/v1/messages`.
    pub fn anthropic_messages(
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        Self::build(ProviderKind::AnthropicMessages, base, api_key, timeouts)
    }

    /// A Chat-Completions-style provider at `base`: `POST {base}/chat/completions`.
    pub fn chat_completions(
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        Self::build(ProviderKind::ChatCompletions, base, api_key, timeouts)
    }

    fn url(&self) -> String {
        match self.kind {
            ProviderKind::OpenAiResponses => format!("{}/responses", self.base),
            ProviderKind::AnthropicMessages => format!("{}/v1/messages", self.base),
            ProviderKind::ChatCompletions => format!("{}/chat/completions", self.base),
        }
    }

    fn headers(&self, call: Option<&CallTag>) -> Vec<(String, Vec<u8>)> {
        let mut headers = vec![
            ("content-type".to_owned(), b"application/json".to_vec()),
            ("accept".to_owned(), b"text/event-stream".to_vec()),
        ];
        match self.kind {
            ProviderKind::AnthropicMessages => {
                headers.push(("x-api-key".to_owned(), self.api_key.as_bytes().to_vec()));
                headers.push(("anthropic-version".to_owned(), b"2023-06-01".to_vec()));
            }
            _ => headers.push((
                "authorization".to_owned(),
                format!("Bearer {}", self.api_key).into_bytes(),
            )),
        }
        if let Some(call) = call {
            headers.push((
                "x-herma-call-id".to_owned(),
                call.call_id.clone().into_bytes(),
            ));
            headers.push((
                "x-herma-attempt".to_owned(),
                call.attempt.to_string().into_bytes(),
            ));
        }
        headers
    }
}

/// The support matrix, for any provider kind.
pub fn validate_for(kind: ProviderKind, request: &ModelRequest) -> Result<(), Unsupported> {
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
        let max = if kind == ProviderKind::AnthropicMessages {
            1.0
        } else {
            2.0
        };
        if !t.is_finite() || !(0.0..=max).contains(&t) {
            return Err(unsupported(
                "controls.temperature",
                format!("{} accepts 0.0 to {max}", kind.as_str()),
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
    if controls.cache.is_some() && kind != ProviderKind::AnthropicMessages {
        return Err(unsupported(
            "controls.cache",
            format!(
                "{} caches automatically; it cannot be overridden",
                kind.as_str()
            ),
        ));
    }
    if request.output.is_some() && kind == ProviderKind::AnthropicMessages {
        return Err(unsupported(
            "output",
            "anthropic_messages has no native JSON schema output",
        ));
    }
    Ok(())
}

#[async_trait]
impl ModelClient for SingleDispatchClient {
    fn provider(&self) -> ProviderKind {
        self.kind
    }

    fn attempts_per_dispatch(&self) -> u32 {
        1
    }

    fn validate(&self, request: &ModelRequest) -> Result<(), Unsupported> {
        validate_for(self.kind, request)
    }

    async fn dispatch(&self, request: &ModelRequest) -> Result<EventStream, ProviderError> {
        let body = encode_request(self.kind, request);
        let response = self
            .http
            .send(UpstreamRequest {
                method: "POST".to_owned(),
                url: self.url(),
                headers: self.headers(request.call.as_ref()),
                body: Bytes::from(body.to_string()),
            })
            .await
            .map_err(|e| match e {
                UpstreamError::Redirect(status) => ProviderError::Rejected { status },
                other => ProviderError::Transport(other.to_string()),
            })?;
        if !(200..300).contains(&response.status) {
            let reference = response
                .headers
                .iter()
                .find(|(n, _)| n == "request-id" || n == "x-request-id")
                .and_then(|(_, v)| String::from_utf8(v.clone()).ok());
            let status = response.status;
            let events: Vec<Result<ModelEvent, ProviderError>> = reference
                .map(|r| Ok(ModelEvent::Reference(r)))
                .into_iter()
                .chain([Err(ProviderError::Rejected { status })])
                .collect();
            return Ok(Box::pin(futures_util::stream::iter(events)));
        }
        Ok(decode_stream(self.kind, response.body))
    }
}

/// The provider's JSON for `request`, always streaming.
pub fn encode_request(kind: ProviderKind, request: &ModelRequest) -> Value {
    let c = &request.controls;
    let mut body = Map::new();
    body.insert("model".into(), json!(c.model));
    match kind {
        ProviderKind::OpenAiResponses => {
            if let Some(system) = &request.system {
                body.insert("instructions".into(), json!(system));
            }
            let input: Vec<Value> = request
                .messages
                .iter()
                .map(|m| json!({"role": m.role, "content": m.text}))
                .collect();
            body.insert("input".into(), Value::Array(input));
            body.insert("max_output_tokens".into(), json!(c.max_tokens));
            body.insert("store".into(), json!(false));
            // Without stored responses, reasoning comes back only as encrypted content.
            body.insert("include".into(), json!(["reasoning.encrypted_content"]));
            if !request.tools.is_empty() {
                let tools: Vec<Value> = request
                    .tools
                    .iter()
                    .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.input_schema}))
                    .collect();
                body.insert("tools".into(), Value::Array(tools));
            }
            if let Some(choice) = &c.tool_choice {
                body.insert(
                    "tool_choice".into(),
                    match choice {
                        ToolChoice::Auto => json!("auto"),
                        ToolChoice::None => json!("none"),
                        ToolChoice::Any => json!("required"),
                        ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
                    },
                );
            }
            if let Some(output) = &request.output {
                body.insert(
                    "text".into(),
                    json!({"format": {"type": "json_schema", "name": output.name, "schema": output.schema, "strict": true}}),
                );
            }
        }
        ProviderKind::AnthropicMessages => {
            if let Some(system) = &request.system {
                if c.cache == Some(true) {
                    body.insert(
                        "system".into(),
                        json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]),
                    );
                } else {
                    body.insert("system".into(), json!(system));
                }
            }
            let messages: Vec<Value> = request
                .messages
                .iter()
                .map(|m| json!({"role": m.role, "content": m.text}))
                .collect();
            body.insert("messages".into(), Value::Array(messages));
            body.insert("max_tokens".into(), json!(c.max_tokens));
            if !request.tools.is_empty() {
                let tools: Vec<Value> = request
                    .tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
                    .collect();
                body.insert("tools".into(), Value::Array(tools));
            }
            if let Some(choice) = &c.tool_choice {
                body.insert(
                    "tool_choice".into(),
                    match choice {
                        ToolChoice::Auto => json!({"type": "auto"}),
                        ToolChoice::None => json!({"type": "none"}),
                        ToolChoice::Any => json!({"type": "any"}),
                        ToolChoice::Tool { name } => json!({"type": "tool", "name": name}),
                    },
                );
            }
        }
        ProviderKind::ChatCompletions => {
            let mut messages = Vec::new();
            if let Some(system) = &request.system {
                messages.push(json!({"role": "system", "content": system}));
            }
            messages.extend(
                request
                    .messages
                    .iter()
                    .map(|m| json!({"role": m.role, "content": m.text})),
            );
            body.insert("messages".into(), Value::Array(messages));
            body.insert("max_tokens".into(), json!(c.max_tokens));
            body.insert("stream_options".into(), json!({"include_usage": true}));
            if !request.tools.is_empty() {
                let tools: Vec<Value> = request
                    .tools
                    .iter()
                    .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
                    .collect();
                body.insert("tools".into(), Value::Array(tools));
            }
            if let Some(choice) = &c.tool_choice {
                body.insert(
                    "tool_choice".into(),
                    match choice {
                        ToolChoice::Auto => json!("auto"),
                        ToolChoice::None => json!("none"),
                        ToolChoice::Any => json!("required"),
                        ToolChoice::Tool { name } => {
                            json!({"type": "function", "function": {"name": name}})
                        }
                    },
                );
            }
            if let Some(output) = &request.output {
                body.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": {"name": output.name, "schema": output.schema, "strict": true}}),
                );
            }
        }
    }
    if let Some(t) = c.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// Turns a provider's SSE body into neutral events.
pub fn decode_stream(kind: ProviderKind, body: crate::BodyStream) -> EventStream {
    struct State {
        body: crate::BodyStream,
        reader: sse::Reader,
        decoder: Decoder,
        queue: std::collections::VecDeque<Result<ModelEvent, ProviderError>>,
        done: bool,
    }
    let state = State {
        body,
        reader: sse::Reader::new(4 * 1024 * 1024),
        decoder: Decoder::new(kind),
        queue: Default::default(),
        done: false,
    };
    Box::pin(futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(item) = s.queue.pop_front() {
                if item.is_err() {
                    s.done = true;
                    s.queue.clear();
                }
                return Some((item, s));
            }
            if s.done {
                return None;
            }
            match s.body.next().await {
                Some(Ok(chunk)) => {
                    let State {
                        reader,
                        decoder,
                        queue,
                        ..
                    } = &mut s;
                    reader.feed(&chunk, &mut |event| decoder.on_event(&event, queue));
                    if decoder.finished {
                        s.done = true;
                    }
                }
                Some(Err(e)) => {
                    s.done = true;
                    s.queue
                        .push_back(Err(ProviderError::Transport(e.to_string())));
                }
                None => {
                    s.done = true;
                    if !s.decoder.finished {
                        s.queue.push_back(Err(ProviderError::Protocol(
                            "the stream ended before its terminal event".to_owned(),
                        )));
                    }
                }
            }
        }
    }))
}

#[derive(Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

/// One provider's stream state.
struct Decoder {
    kind: ProviderKind,
    finished: bool,
    referenced: bool,
    /// Anthropic: blocks by index; Chat Completions: tool calls by index.
    blocks: BTreeMap<u64, (Value, String)>,
    calls: BTreeMap<u64, PendingCall>,
    usage: Usage,
    saw_tool_call: bool,
    /// Chat Completions: a usage chunk arrived.
    usage_seen: bool,
    stop: Option<StopReason>,
}

type Queue = std::collections::VecDeque<Result<ModelEvent, ProviderError>>;

fn protocol(what: &str) -> ProviderError {
    ProviderError::Protocol(what.to_owned())
}

fn u(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

fn anthropic_stop(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "max_tokens" => StopReason::MaxTokens,
        "tool_use" => StopReason::ToolUse,
        "refusal" => StopReason::Refusal,
        "model_context_window_exceeded" => StopReason::ContextWindowExceeded,
        other => StopReason::Other(other.to_owned()),
    }
}

impl Decoder {
    fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            finished: false,
            referenced: false,
            blocks: BTreeMap::new(),
            calls: BTreeMap::new(),
            usage: Usage::default(),
            saw_tool_call: false,
            usage_seen: false,
            stop: None,
        }
    }

    fn reference(&mut self, id: Option<&str>, out: &mut Queue) {
        if let Some(id) = id
            && !self.referenced
            && !id.is_empty()
        {
            self.referenced = true;
            out.push_back(Ok(ModelEvent::Reference(id.to_owned())));
        }
    }

    fn on_event(&mut self, event: &sse::Event, out: &mut Queue) {
        if self.finished {
            return;
        }
        if self.kind == ProviderKind::ChatCompletions && event.data.trim() == "[DONE]" {
            self.finish_chat(out);
            return;
        }
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            out.push_back(Err(protocol("an event is not JSON")));
            self.finished = true;
            return;
        };
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("")
            .to_owned();
        if kind == "error" {
            out.push_back(Err(protocol("the provider sent an error event")));
            self.finished = true;
            return;
        }
        match self.kind {
            ProviderKind::OpenAiResponses => self.on_responses(&kind, &data, out),
            ProviderKind::AnthropicMessages => self.on_messages(&kind, &data, out),
            ProviderKind::ChatCompletions => self.on_chat(&data, out),
        }
    }

    fn on_responses(&mut self, kind: &str, data: &Value, out: &mut Queue) {
        match kind {
            "response.created" | "response.in_progress" => {
                self.reference(data.pointer("/response/id").and_then(Value::as_str), out);
            }
            "response.output_text.delta" => {
                if let Some(delta) = data.get("delta").and_then(Value::as_str) {
                    out.push_back(Ok(ModelEvent::TextDelta(delta.to_owned())));
                }
            }
            "response.output_item.done" => {
                let item = data.get("item").cloned().unwrap_or(Value::Null);
                match item.get("type").and_then(Value::as_str) {
                    Some("function_call") => {
                        self.saw_tool_call = true;
                        out.push_back(Ok(ModelEvent::ToolCall {
                            id: item
                                .get("call_id")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            name: item
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            arguments: item
                                .get("arguments")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        }));
                    }
                    Some("reasoning") => out.push_back(Ok(ModelEvent::Reasoning(item))),
                    // Text arrived as deltas; refusals end with a refusal stop below.
                    Some("message") => {
                        let refused =
                            item.get("content")
                                .and_then(Value::as_array)
                                .is_some_and(|c| {
                                    c.iter().any(|p| {
                                        p.get("type").and_then(Value::as_str) == Some("refusal")
                                    })
                                });
                        if refused {
                            self.stop = Some(StopReason::Refusal);
                        }
                    }
                    _ => out.push_back(Ok(ModelEvent::ProviderBlock(item))),
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = data.get("response").cloned().unwrap_or(Value::Null);
                self.reference(response.get("id").and_then(Value::as_str), out);
                let stop = if let Some(stop) = self.stop.take() {
                    stop
                } else if kind == "response.incomplete" {
                    match response
                        .pointer("/incomplete_details/reason")
                        .and_then(Value::as_str)
                    {
                        Some("max_output_tokens") => StopReason::MaxTokens,
                        Some("content_filter") => StopReason::Refusal,
                        Some(other) => StopReason::Other(other.to_owned()),
                        None => StopReason::Other("incomplete".to_owned()),
                    }
                } else if self.saw_tool_call {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                };
                out.push_back(Ok(ModelEvent::Stop(stop)));
                let cached = u(&response, "/usage/input_tokens_details/cached_tokens");
                out.push_back(Ok(ModelEvent::Usage(Usage {
                    input_tokens: u(&response, "/usage/input_tokens").saturating_sub(cached),
                    output_tokens: u(&response, "/usage/output_tokens"),
                    cache_read_tokens: cached,
                    cache_write_tokens: 0,
                })));
                self.finished = true;
            }
            "response.failed" => {
                out.push_back(Err(protocol("the response failed")));
                self.finished = true;
            }
            _ => {}
        }
    }

    fn on_messages(&mut self, kind: &str, data: &Value, out: &mut Queue) {
        match kind {
            "message_start" => {
                let message = data.get("message").cloned().unwrap_or(Value::Null);
                self.reference(message.get("id").and_then(Value::as_str), out);
                self.usage.input_tokens = u(&message, "/usage/input_tokens");
                self.usage.cache_read_tokens = u(&message, "/usage/cache_read_input_tokens");
                self.usage.cache_write_tokens = u(&message, "/usage/cache_creation_input_tokens");
                self.usage.output_tokens = u(&message, "/usage/output_tokens");
            }
            "content_block_start" => {
                let index = u(data, "/index");
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                self.blocks.insert(index, (block, String::new()));
            }
            "content_block_delta" => {
                let index = u(data, "/index");
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                let Some((block, partial)) = self.blocks.get_mut(&index) else {
                    out.push_back(Err(protocol("a delta for a block that never started")));
                    self.finished = true;
                    return;
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str) {
                            out.push_back(Ok(ModelEvent::TextDelta(text.to_owned())));
                        }
                    }
                    Some("input_json_delta") => {
                        if let Some(p) = delta.get("partial_json").and_then(Value::as_str) {
                            partial.push_str(p);
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(t) = delta.get("thinking").and_then(Value::as_str) {
                            append_str(block, "thinking", t);
                        }
                    }
                    Some("signature_delta") => {
                        if let Some(t) = delta.get("signature").and_then(Value::as_str) {
                            append_str(block, "signature", t);
                        }
                    }
                    Some("citations_delta") => {}
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = u(data, "/index");
                let Some((block, partial)) = self.blocks.remove(&index) else {
                    return;
                };
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {}
                    Some("tool_use") => out.push_back(Ok(ModelEvent::ToolCall {
                        id: block
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        name: block
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        arguments: if partial.is_empty() {
                            "{}".to_owned()
                        } else {
                            partial
                        },
                    })),
                    Some("thinking") | Some("redacted_thinking") => {
                        out.push_back(Ok(ModelEvent::Reasoning(block)))
                    }
                    _ => {
                        // Server tools stream their input as JSON too: keep it, parsed.
                        let mut block = block;
                        if !partial.is_empty()
                            && let (Some(object), Ok(input)) = (
                                block.as_object_mut(),
                                serde_json::from_str::<Value>(&partial),
                            )
                        {
                            object.insert("input".to_owned(), input);
                        }
                        out.push_back(Ok(ModelEvent::ProviderBlock(block)))
                    }
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    out.push_back(Ok(ModelEvent::Stop(anthropic_stop(reason))));
                }
                if let Some(n) = data.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = n;
                }
                if let Some(n) = data.pointer("/usage/input_tokens").and_then(Value::as_u64) {
                    self.usage.input_tokens = n;
                }
            }
            "message_stop" => {
                out.push_back(Ok(ModelEvent::Usage(self.usage)));
                self.finished = true;
            }
            _ => {}
        }
    }

    fn on_chat(&mut self, data: &Value, out: &mut Queue) {
        self.reference(data.get("id").and_then(Value::as_str), out);
        if let Some(usage) = data.get("usage").filter(|u| u.is_object()) {
            let cached = u(usage, "/prompt_tokens_details/cached_tokens");
            self.usage = Usage {
                input_tokens: u(usage, "/prompt_tokens").saturating_sub(cached),
                output_tokens: u(usage, "/completion_tokens"),
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            };
            self.usage_seen = true;
        }
        let Some(choice) = data
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return;
        };
        let delta = choice.get("delta").cloned().unwrap_or(Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            out.push_back(Ok(ModelEvent::TextDelta(text.to_owned())));
        }
        if let Some(reasoning) = delta.get("reasoning_content").and_then(Value::as_str)
            && !reasoning.is_empty()
        {
            out.push_back(Ok(ModelEvent::Reasoning(
                json!({"type": "reasoning_content", "text": reasoning}),
            )));
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                let pending = self.calls.entry(u(call, "/index")).or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    pending.id = id.to_owned();
                }
                if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                    pending.name.push_str(name);
                }
                if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                    pending.arguments.push_str(args);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            for (_, call) in std::mem::take(&mut self.calls) {
                out.push_back(Ok(ModelEvent::ToolCall {
                    id: call.id,
                    name: call.name,
                    arguments: call.arguments,
                }));
            }
            out.push_back(Ok(ModelEvent::Stop(match reason {
                "stop" => StopReason::EndTurn,
                "length" => StopReason::MaxTokens,
                "tool_calls" | "function_call" => StopReason::ToolUse,
                "content_filter" => StopReason::Refusal,
                other => StopReason::Other(other.to_owned()),
            })));
        }
    }

    fn finish_chat(&mut self, out: &mut Queue) {
        // Usage arrives in the last chunk before `[DONE]` when `include_usage` is honoured.
        if self.usage_seen {
            out.push_back(Ok(ModelEvent::Usage(self.usage)));
        }
        self.finished = true;
    }
}

fn append_str(block: &mut Value, field: &str, text: &str) {
    if let Some(object) = block.as_object_mut() {
        let current = object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        object.insert(field.to_owned(), Value::String(current + text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(events: &[(&str, Value)]) -> crate::BodyStream {
        let mut text = String::new();
        for (name, data) in events {
            if !name.is_empty() {
                text.push_str(&format!("event: {name}\n"));
            }
            text.push_str(&format!("data: {data}\n\n"));
        }
        // Split at awkward boundaries to exercise the reader.
        let bytes = text.into_bytes();
        let chunks: Vec<Result<Bytes, UpstreamError>> = bytes
            .chunks(7)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Box::pin(futures_util::stream::iter(chunks))
    }

    async fn collect(
        kind: ProviderKind,
        body: crate::BodyStream,
    ) -> Vec<Result<ModelEvent, ProviderError>> {
        decode_stream(kind, body).collect().await
    }

    #[tokio::test]
    async fn anthropic_blocks_become_neutral_events_in_order() {
        let events = collect(
            ProviderKind::AnthropicMessages,
            sse(&[
                ("message_start", json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 1}}})),
                ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})),
                ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}})),
                ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}})),
                ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
                ("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
                ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "héllo"}})),
                ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
                ("content_block_start", json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tu_1", "name": "extract", "input": {}}})),
                ("content_block_delta", json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}})),
                ("content_block_delta", json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "1}"}})),
                ("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
                ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}})),
                ("message_stop", json!({"type": "message_stop"})),
            ]),
        )
        .await;
        let events: Vec<ModelEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            events,
            vec![
                ModelEvent::Reference("msg_1".into()),
                ModelEvent::Reasoning(
                    json!({"type": "thinking", "thinking": "hm", "signature": "sig"})
                ),
                ModelEvent::TextDelta("héllo".into()),
                ModelEvent::ToolCall {
                    id: "tu_1".into(),
                    name: "extract".into(),
                    arguments: "{\"a\":1}".into()
                },
                ModelEvent::Stop(StopReason::ToolUse),
                ModelEvent::Usage(Usage {
                    input_tokens: 12,
                    output_tokens: 40,
                    cache_read_tokens: 3,
                    cache_write_tokens: 0
                }),
            ]
        );
    }

    #[tokio::test]
    async fn responses_items_and_usage_are_read() {
        let events = collect(
            ProviderKind::OpenAiResponses,
            sse(&[
                ("response.created", json!({"type": "response.created", "response": {"id": "resp_1"}})),
                ("response.output_item.done", json!({"type": "response.output_item.done", "item": {"type": "reasoning", "encrypted_content": "xyz", "summary": []}})),
                ("response.output_text.delta", json!({"type": "response.output_text.delta", "delta": "hi"})),
                ("response.output_item.done", json!({"type": "response.output_item.done", "item": {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}})),
                ("response.completed", json!({"type": "response.completed", "response": {"id": "resp_1", "usage": {"input_tokens": 20, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 5}}}})),
            ]),
        )
        .await;
        let events: Vec<ModelEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(events[0], ModelEvent::Reference("resp_1".into()));
        assert!(matches!(events[1], ModelEvent::Reasoning(_)));
        assert_eq!(events[2], ModelEvent::TextDelta("hi".into()));
        assert_eq!(events[4], ModelEvent::Stop(StopReason::ToolUse));
        assert_eq!(
            events[5],
            ModelEvent::Usage(Usage {
                input_tokens: 15,
                output_tokens: 7,
                cache_read_tokens: 5,
                cache_write_tokens: 0
            })
        );
    }

    #[tokio::test]
    async fn chat_chunks_accumulate_tool_calls_and_read_usage_before_done() {
        let body = {
            let text = [
                json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]}).to_string(),
                json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{\"x\""}}]}}]}).to_string(),
                json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":2}"}}]}}]}).to_string(),
                json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
                json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}).to_string(),
                "[DONE]".to_owned(),
            ]
            .iter()
            .map(|d| format!("data: {d}\n\n"))
            .collect::<String>();
            let chunk: Result<Bytes, UpstreamError> = Ok(Bytes::from(text));
            Box::pin(futures_util::stream::iter([chunk])) as crate::BodyStream
        };
        let events: Vec<ModelEvent> = collect(ProviderKind::ChatCompletions, body)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            events,
            vec![
                ModelEvent::Reference("chatcmpl-1".into()),
                ModelEvent::TextDelta("a".into()),
                ModelEvent::ToolCall {
                    id: "call_1".into(),
                    name: "f".into(),
                    arguments: "{\"x\":2}".into()
                },
                ModelEvent::Stop(StopReason::ToolUse),
                ModelEvent::Usage(Usage {
                    input_tokens: 9,
                    output_tokens: 4,
                    ..Usage::default()
                }),
            ]
        );
    }

    #[tokio::test]
    async fn a_stream_that_ends_early_or_sends_garbage_fails() {
        let early = collect(
            ProviderKind::AnthropicMessages,
            sse(&[(
                "message_start",
                json!({"type": "message_start", "message": {"id": "m"}}),
            )]),
        )
        .await;
        assert!(matches!(
            early.last(),
            Some(Err(ProviderError::Protocol(_)))
        ));
        let chunk: Result<Bytes, UpstreamError> = Ok(Bytes::from_static(b"data: {nope\n\n"));
        let garbage = collect(
            ProviderKind::OpenAiResponses,
            Box::pin(futures_util::stream::iter([chunk])),
        )
        .await;
        assert_eq!(garbage.len(), 1);
        assert!(garbage[0].is_err());
    }

    fn request(
        tools: Vec<ToolSpec>,
        choice: Option<ToolChoice>,
        temperature: Option<f64>,
    ) -> ModelRequest {
        ModelRequest {
            system: None,
            messages: vec![Msg::user("hi")],
            tools,
            output: None,
            call: None,
            controls: Controls {
                model: "m".into(),
                max_tokens: 100,
                temperature,
                tool_choice: choice,
                cache: None,
            },
        }
    }

    #[test]
    fn the_support_matrix_refuses_before_any_network_access() {
        let tool = ToolSpec {
            name: "extract".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        };
        for kind in [
            ProviderKind::OpenAiResponses,
            ProviderKind::AnthropicMessages,
            ProviderKind::ChatCompletions,
        ] {
            assert!(validate_for(kind, &request(vec![], None, Some(0.5))).is_ok());
            assert_eq!(
                validate_for(kind, &request(vec![], Some(ToolChoice::Auto), None))
                    .unwrap_err()
                    .field,
                "controls.tool_choice"
            );
            assert!(
                validate_for(
                    kind,
                    &request(
                        vec![tool.clone()],
                        Some(ToolChoice::Tool {
                            name: "extract".into()
                        }),
                        None
                    )
                )
                .is_ok()
            );
            assert!(
                validate_for(
                    kind,
                    &request(
                        vec![tool.clone()],
                        Some(ToolChoice::Tool {
                            name: "other".into()
                        }),
                        None
                    )
                )
                .is_err()
            );
            assert_eq!(
                validate_for(kind, &request(vec![], None, Some(f64::NAN)))
                    .unwrap_err()
                    .field,
                "controls.temperature"
            );
        }
        assert!(
            validate_for(
                ProviderKind::AnthropicMessages,
                &request(vec![], None, Some(1.5))
            )
            .is_err()
        );
        assert!(
            validate_for(
                ProviderKind::OpenAiResponses,
                &request(vec![], None, Some(1.5))
            )
            .is_ok()
        );
        let mut cached = request(vec![], None, None);
        cached.controls.cache = Some(false);
        assert!(validate_for(ProviderKind::AnthropicMessages, &cached).is_ok());
        assert_eq!(
            validate_for(ProviderKind::OpenAiResponses, &cached)
                .unwrap_err()
                .field,
            "controls.cache"
        );
    }

    #[test]
    fn requests_carry_controls_in_each_wire_format() {
        let tool = ToolSpec {
            name: "extract".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        };
        let r = request(
            vec![tool],
            Some(ToolChoice::Tool {
                name: "extract".into(),
            }),
            Some(0.2),
        );
        let a = encode_request(ProviderKind::AnthropicMessages, &r);
        assert_eq!(a["tool_choice"], json!({"type": "tool", "name": "extract"}));
        assert_eq!(a["temperature"], json!(0.2));
        assert_eq!(a["stream"], json!(true));
        let o = encode_request(ProviderKind::OpenAiResponses, &r);
        assert_eq!(
            o["tool_choice"],
            json!({"type": "function", "name": "extract"})
        );
        assert_eq!(o["max_output_tokens"], json!(100));
        let c = encode_request(ProviderKind::ChatCompletions, &r);
        assert_eq!(
            c["tool_choice"],
            json!({"type": "function", "function": {"name": "extract"}})
        );
        assert_eq!(c["stream_options"], json!({"include_usage": true}));
    }
}
