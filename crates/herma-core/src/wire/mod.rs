//! The three wire protocols Herma proxies: OpenAI Chat Completions, OpenAI Responses and
//! Anthropic Messages.
//!
//! Proxied bodies are read leniently: Herma picks out what it needs — model, stream flag,
//! system text, the latest user turn, tools offered and called, tool results, file paths and a
//! conversation identity — and never refuses a field, role or item type it does not know.
//! Rewriting splices bytes: everything Herma does not change is forwarded byte for byte.
//!
//! Layout: [`Envelope::from_request`] dispatches to [`messages`], [`chat`] and [`responses`];
//! [`Envelope::with_shim`] places a shim where each protocol expects system context;
//! [`direct`] renders answers Herma gives itself; [`errors`] renders Herma's errors in each
//! protocol's own shape; [`sse`] frames and reads event streams; [`paths`] finds file paths.

pub mod answer;
pub mod chat;
pub mod direct;
pub mod errors;
pub mod messages;
pub mod paths;
pub mod responses;
pub mod sse;
pub mod usage;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::problem::{Problem, ProblemCode};

/// A wire protocol, named by its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/responses`
    Responses,
    /// `POST /v1/messages` (Anthropic)
    Messages,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [
        Protocol::ChatCompletions,
        Protocol::Responses,
        Protocol::Messages,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::ChatCompletions => "chat_completions",
            Protocol::Responses => "responses",
            Protocol::Messages => "messages",
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Protocol::ChatCompletions => "/v1/chat/completions",
            Protocol::Responses => "/v1/responses",
            Protocol::Messages => "/v1/messages",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == raw)
    }
}

/// Headers that name a conversation, most explicit first.
pub const CONVERSATION_HEADER: &str = "x-herma-conversation-id";
/// Session headers real harnesses send (see clients.md), in order of preference.
pub const SESSION_HEADERS: [&str; 4] = [
    "x-claude-code-session-id",
    "session-id",
    "x-session-id",
    "thread-id",
];

/// Where a conversation identity came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversationSource {
    /// `X-Herma-Conversation-Id`.
    Header,
    /// A harness's own session header or body field.
    Native,
    /// A digest of the first user message (stable because history is resent each turn).
    FirstMessage,
    /// Nothing to go on: the request stands alone.
    None,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conversation {
    pub id: String,
    pub source: ConversationSource,
}

/// What the extraction needs from the request's headers.
#[derive(Clone, Debug, Default)]
pub struct HeaderFacts {
    /// `X-Herma-Conversation-Id`.
    pub conversation_id: Option<String>,
    /// The first session header present, by [`SESSION_HEADERS`] order.
    pub session_id: Option<String>,
}

impl HeaderFacts {
    /// Picks the identity headers out of `(name, value)` pairs (names lowercase).
    pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut facts = HeaderFacts::default();
        let mut session: Option<(usize, String)> = None;
        for (name, value) in headers {
            let value = value.trim();
            if value.is_empty() || value.len() > MAX_CONVERSATION_ID {
                continue;
            }
            if name == CONVERSATION_HEADER {
                facts.conversation_id = Some(value.to_owned());
            } else if let Some(rank) = SESSION_HEADERS.iter().position(|h| *h == name)
                && session.as_ref().is_none_or(|(r, _)| rank < *r)
            {
                session = Some((rank, value.to_owned()));
            }
        }
        facts.session_id = session.map(|(_, v)| v);
        facts
    }
}

/// Where a shim goes in this request's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Insertion {
    /// Insert `prefix + item + suffix` at `at`.
    At { at: usize, kind: InsertKind },
    /// Replace `start..end` (a string value) with a rewritten form around the original text.
    WrapString {
        start: usize,
        end: usize,
        kind: WrapKind,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertKind {
    /// Anthropic: append a text block at the end of the `system` array (`first` when empty).
    SystemBlockAppend { first: bool },
    /// Anthropic: no `system` yet: add the member right after the body's `{`.
    SystemMember { first_member: bool },
    /// Chat Completions: a system message before the latest user message.
    ChatSystemMessage,
    /// Responses: a developer item before the latest user item.
    DeveloperItem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrapKind {
    /// Anthropic `system` given as a string: becomes `[{text: original}, {text: shim}]`.
    AnthropicSystemString,
    /// Anthropic `system: null`: becomes `[{text: shim}]`.
    AnthropicSystemNull,
    /// Responses `input` given as a string: becomes `[developer item, user message]`.
    ResponsesInputString,
}

/// What Herma reads from a proxied request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub protocol: Protocol,
    pub model: Option<String>,
    pub stream: bool,
    /// Chat Completions: `stream_options.include_usage`.
    pub stream_usage: bool,
    /// System prompt / instructions text, joined.
    pub system: Option<String>,
    /// The text of the latest user turn (the last user message that carries text).
    pub user_text: String,
    /// Names of the tools the request offers.
    pub tools_offered: Vec<String>,
    /// Names of tools called anywhere in the history, in order, deduplicated.
    pub tools_called: Vec<String>,
    /// Texts of tool results since the latest user turn.
    pub tool_results: Vec<String>,
    /// File paths from tool inputs since the latest user turn and from the user text.
    pub paths: Vec<String>,
    pub conversation: Conversation,
    /// Which turn of the conversation this is: 1 + the number of model responses in the
    /// history. Turn N's tool results answer the tool calls of turn N-1.
    pub turn: u64,
    /// Where a shim would go, if the body has a place for one.
    pub insertion: Option<Insertion>,
}

/// Upper bounds that keep extraction linear and small whatever the body.
pub const MAX_TOOL_NAMES: usize = 256;
pub const MAX_TOOL_RESULTS: usize = 64;
pub const MAX_TOOL_RESULT_CHARS: usize = 16 * 1024;

impl Envelope {
    /// Reads a proxied body. Only a body that is not a JSON object at all is refused
    /// (`invalid_json`); anything inside that Herma does not understand is passed over.
    pub fn from_request(
        protocol: Protocol,
        body: &[u8],
        headers: &HeaderFacts,
    ) -> Result<Self, Problem> {
        let text = std::str::from_utf8(body)
            .map_err(|_| Problem::new(ProblemCode::InvalidJson, "the body is not UTF-8 JSON"))?;
        if !text.trim_start().starts_with('{') {
            return Err(Problem::new(
                ProblemCode::InvalidJson,
                "the body must be a JSON object",
            ));
        }
        let mut envelope = match protocol {
            Protocol::Messages => messages::extract(text),
            Protocol::ChatCompletions => chat::extract(text),
            Protocol::Responses => responses::extract(text),
        }
        .map_err(|e| {
            Problem::new(
                ProblemCode::InvalidJson,
                format!("the body is not a JSON object: {e}"),
            )
        })?;
        envelope.conversation = choose_conversation(headers, envelope.conversation);
        paths::add_text_paths(&mut envelope.paths, &envelope.user_text);
        Ok(envelope)
    }

    /// The body with `shim` placed where this protocol expects system context: never after the
    /// user's prompt and without changing any byte before the insertion point. `None` when the
    /// body has no place for it (no messages at all).
    pub fn with_shim(&self, body: &[u8], shim: &str) -> Option<Vec<u8>> {
        let insertion = self.insertion.as_ref()?;
        let shim_json = serde_json::to_string(shim).ok()?;
        let mut out = Vec::with_capacity(body.len() + shim_json.len() + 96);
        match *insertion {
            Insertion::At { at, kind } => {
                let (head, tail) = body.split_at(at.min(body.len()));
                out.extend_from_slice(head);
                let piece = match kind {
                    InsertKind::SystemBlockAppend { first } => {
                        format!(
                            "{}{{\"type\":\"text\",\"text\":{shim_json}}}",
                            if first { "" } else { "," }
                        )
                    }
                    InsertKind::SystemMember { first_member } => format!(
                        "\"system\":[{{\"type\":\"text\",\"text\":{shim_json}}}]{}",
                        if first_member { "" } else { "," }
                    ),
                    InsertKind::ChatSystemMessage => {
                        format!("{{\"role\":\"system\",\"content\":{shim_json}}},")
                    }
                    InsertKind::DeveloperItem => {
                        format!("{},", responses::developer_item(&shim_json))
                    }
                };
                out.extend_from_slice(piece.as_bytes());
                out.extend_from_slice(tail);
            }
            Insertion::WrapString { start, end, kind } => {
                let original = body.get(start..end)?;
                let original = std::str::from_utf8(original).ok()?;
                out.extend_from_slice(&body[..start]);
                let piece = match kind {
                    WrapKind::AnthropicSystemString => format!(
                        "[{{\"type\":\"text\",\"text\":{original}}},{{\"type\":\"text\",\"text\":{shim_json}}}]"
                    ),
                    WrapKind::AnthropicSystemNull => {
                        format!("[{{\"type\":\"text\",\"text\":{shim_json}}}]")
                    }
                    WrapKind::ResponsesInputString => format!(
                        "[{},{{\"type\":\"message\",\"role\":\"user\",\"content\":{original}}}]",
                        responses::developer_item(&shim_json)
                    ),
                };
                out.extend_from_slice(piece.as_bytes());
                out.extend_from_slice(&body[end..]);
            }
        }
        Some(out)
    }
}

fn choose_conversation(headers: &HeaderFacts, from_body: Conversation) -> Conversation {
    if let Some(id) = &headers.conversation_id {
        return Conversation {
            id: id.clone(),
            source: ConversationSource::Header,
        };
    }
    if let Some(id) = &headers.session_id {
        return Conversation {
            id: id.clone(),
            source: ConversationSource::Native,
        };
    }
    from_body
}

/// Longest conversation id taken as it is; longer ones are digested.
pub const MAX_CONVERSATION_ID: usize = 256;

/// A harness's own session id from the body, bounded: an over-long one becomes a digest.
pub(crate) fn native_conversation(id: String) -> Conversation {
    let id = if id.len() > MAX_CONVERSATION_ID {
        format!("h:{}", &hex::encode(Sha256::digest(id.as_bytes()))[..32])
    } else {
        id
    };
    Conversation {
        id,
        source: ConversationSource::Native,
    }
}

/// `fm:` + 16 hex of SHA-256 over the first user message's raw JSON.
pub(crate) fn first_message_conversation(raw: Option<&str>) -> Conversation {
    match raw {
        Some(raw) => Conversation {
            id: format!("fm:{}", &hex::encode(Sha256::digest(raw.as_bytes()))[..16]),
            source: ConversationSource::FirstMessage,
        },
        None => Conversation {
            id: String::new(),
            source: ConversationSource::None,
        },
    }
}

// ---- lenient readers over raw JSON -------------------------------------------------------

/// A JSON object's members as raw values, read leniently: a repeated key keeps its last value
/// (what most upstream JSON parsers do, so Herma reads the request the way the model's API
/// will), and anything that is not an object reads as empty.
#[derive(Debug, Default)]
pub(crate) struct Obj<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Obj<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for ObjVisitor<'a> {
            type Value = Obj<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Obj<'a>, A::Error> {
                let mut members = Vec::new();
                while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
                    let value: &'a RawValue = map.next_value()?;
                    members.push((key, value));
                }
                Ok(Obj(members))
            }
        }
        deserializer.deserialize_map(ObjVisitor(std::marker::PhantomData))
    }
}

impl<'a> Obj<'a> {
    /// The members of `raw` if it is an object, else none.
    pub(crate) fn of(raw: Option<&'a RawValue>) -> Obj<'a> {
        match raw {
            Some(raw) if raw.get().starts_with('{') => {
                serde_json::from_str(raw.get()).unwrap_or_default()
            }
            _ => Obj::default(),
        }
    }

    /// The last value given for `key` (JSON `null` included).
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    pub(crate) fn str(&self, key: &str) -> Option<String> {
        raw_str(self.get(key))
    }

    pub(crate) fn array(&self, key: &str) -> Vec<&'a RawValue> {
        raw_array(self.get(key))
    }
}

/// Decodes the body of a JSON string literal, replacing what strict decoding refuses (a lone
/// surrogate escape) with U+FFFD instead of giving up: Herma must read the text the model will.
fn unescape_lossy(literal: &str) -> Option<String> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    let mut pending_high: Option<u32> = None;
    while let Some(c) = chars.next() {
        if c != '\\' {
            if pending_high.take().is_some() {
                out.push('\u{FFFD}');
            }
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        if escaped != 'u' {
            if pending_high.take().is_some() {
                out.push('\u{FFFD}');
            }
            out.push(match escaped {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                'b' => '\u{8}',
                'f' => '\u{c}',
                other => other,
            });
            continue;
        }
        let hex: String = chars.by_ref().take(4).collect();
        let unit = u32::from_str_radix(&hex, 16).ok()?;
        match (pending_high.take(), unit) {
            (Some(high), 0xDC00..=0xDFFF) => {
                let code = 0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00);
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            (previous, 0xD800..=0xDBFF) => {
                if previous.is_some() {
                    out.push('\u{FFFD}');
                }
                pending_high = Some(unit);
            }
            (previous, unit) => {
                if previous.is_some() {
                    out.push('\u{FFFD}');
                }
                out.push(char::from_u32(unit).unwrap_or('\u{FFFD}'));
            }
        }
    }
    if pending_high.is_some() {
        out.push('\u{FFFD}');
    }
    Some(out)
}

/// Byte offset of a borrowed raw value inside `body`.
pub(crate) fn offset_in(body: &str, raw: &RawValue) -> usize {
    (raw.get().as_ptr() as usize).saturating_sub(body.as_ptr() as usize)
}

pub(crate) fn raw_str(raw: Option<&RawValue>) -> Option<String> {
    let raw = raw?;
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str(raw.get())
        .ok()
        .or_else(|| unescape_lossy(raw.get()))
}

pub(crate) fn raw_bool(raw: Option<&RawValue>) -> Option<bool> {
    match raw?.get() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The elements of a raw array (empty when it is not one).
pub(crate) fn raw_array(raw: Option<&RawValue>) -> Vec<&RawValue> {
    match raw {
        Some(raw) if raw.get().starts_with('[') => {
            serde_json::from_str(raw.get()).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// Pushes `name` unless present or the list is full.
pub(crate) fn push_unique(list: &mut Vec<String>, name: String, max: usize) {
    if list.len() < max && !name.is_empty() && !list.contains(&name) {
        list.push(name);
    }
}

/// Truncates to at most `max` characters on a char boundary.
pub(crate) fn bounded(mut text: String, max: usize) -> String {
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
    }
    text
}

/// The position just after the body's opening `{`, and whether the object is empty.
pub(crate) fn object_open(body: &str) -> Option<(usize, bool)> {
    let start = body.find('{')? + 1;
    let rest = body[start..].trim_start();
    Some((start, rest.starts_with('}')))
}

/// The position of the closing `]` of a raw array, and whether the array is empty.
pub(crate) fn array_close(body: &str, raw: &RawValue) -> Option<(usize, bool)> {
    let start = offset_in(body, raw);
    let text = raw.get();
    let close = text.rfind(']')?;
    let empty = text[1..close].trim().is_empty();
    Some((start + close, empty))
}

#[cfg(test)]
mod tests;
