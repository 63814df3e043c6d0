//! The wire protocols Herma speaks: Anthropic Messages, OpenAI Chat Completions and OpenAI
//! Responses, one module each with the same shape ([`WireProtocol`]).
//!
//! Proxied bodies are read leniently: Herma picks out what it needs — model, stream flag,
//! system text, the latest user turn, tools offered and called, tool results, file paths and a
//! conversation identity — and never refuses a field, role or item type it does not know.
//! Rewriting splices bytes: everything Herma does not change is forwarded byte for byte.
//!
//! Layout: [`Protocol`] maps each protocol to its module ([`messages`], [`chat`],
//! [`responses`]), which knows how to read a request, where a shim goes and what it becomes
//! there, the direct answer (JSON and SSE), Herma's error in its shape, the upstream credential,
//! its streaming decoder and, for governed calls ([`crate::call`]), its request encoder, path
//! and row of the support matrix. Shared machinery: [`Envelope`] (what a request says, and
//! [`Envelope::with_shim`]), [`direct`] (the direct answer's inputs), [`stream`] (the decoder
//! over chunks), [`usage`] (the proxy's usage observer), [`answer`] (an answer's text read
//! back), [`sse`] (framing), [`paths`] (file paths) and the lenient raw-JSON readers.

pub mod answer;
pub mod chat;
pub mod direct;
pub mod messages;
pub mod paths;
mod protocol;
mod quick;
mod raw;
pub mod responses;
pub mod sse;
pub mod stream;
pub mod usage;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use protocol::{Protocol, WireProtocol};
pub use quick::EventLead;

use crate::problem::{Problem, ProblemCode};

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

/// Where a shim goes in a request's bytes, and what it becomes there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insertion {
    /// The bytes `start..end` are replaced; an empty range inserts at `start`.
    pub start: usize,
    pub end: usize,
    pub splice: &'static Splice,
}

impl Insertion {
    /// The shim goes in at `at`.
    pub(crate) fn at(at: usize, splice: &'static Splice) -> Self {
        Self {
            start: at,
            end: at,
            splice,
        }
    }
}

/// What a shim becomes at one kind of place, as its protocol writes it.
#[derive(Debug, PartialEq, Eq)]
pub struct Splice {
    /// The replacement, in order.
    pub pieces: &'static [Piece],
    /// Where that is, in words (dry runs show it).
    pub placement: &'static str,
}

/// One part of a splice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Literal JSON text.
    Json(&'static str),
    /// The shim, as a JSON string.
    Shim,
    /// The bytes the splice replaces, as they were.
    Replaced,
}

/// What Herma reads from a proxied request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub protocol: Protocol,
    pub model: Option<String>,
    /// A member Herma reads or decides on (`model`, `messages`, …) given more than once at the
    /// top level; [`Envelope::from_request`] refuses such a body.
    pub repeated_member: Option<String>,
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
    /// Reads a proxied body. A body that is not a JSON object at all, or that repeats a member
    /// Herma decides on, is refused (`invalid_json`); anything inside that Herma does not
    /// understand is passed over.
    pub fn from_request(
        protocol: Protocol,
        body: &[u8],
        headers: &HeaderFacts,
    ) -> Result<Self, Problem> {
        let text = crate::utf8::str(body)
            .ok_or_else(|| Problem::new(ProblemCode::InvalidJson, "the body is not UTF-8 JSON"))?;
        if !text.trim_start().starts_with('{') {
            return Err(Problem::new(
                ProblemCode::InvalidJson,
                "the body must be a JSON object",
            ));
        }
        let mut envelope = protocol.wire().read(text).map_err(|e| {
            Problem::new(
                ProblemCode::InvalidJson,
                format!("the body is not a JSON object: {e}"),
            )
        })?;
        if let Some(member) = &envelope.repeated_member {
            // An upstream reading the first value could see another model than the one Herma
            // checked (H03) or other messages than it matched.
            return Err(Problem::new(
                ProblemCode::InvalidJson,
                format!("the body gives `{member}` more than once; send each member once"),
            )
            .with_pointer(format!("/{member}")));
        }
        envelope.conversation = choose_conversation(headers, envelope.conversation);
        paths::add_text_paths(&mut envelope.paths, &envelope.user_text);
        Ok(envelope)
    }

    /// The body with `shim` placed where this protocol expects system context: never after the
    /// user's prompt and without changing any byte before the insertion point. `None` when the
    /// body has no place for it (no messages at all).
    pub fn with_shim(&self, body: &[u8], shim: &str) -> Option<Vec<u8>> {
        self.with_shim_json(body, &serde_json::to_string(shim).ok()?)
    }

    /// [`Envelope::with_shim`] for a shim already written as a JSON string (`shim_json`, its
    /// quotes included, as `serde_json::to_string` writes it): the proxy keeps rendered shims
    /// in that form.
    pub fn with_shim_json(&self, body: &[u8], shim_json: &str) -> Option<Vec<u8>> {
        let Insertion { start, end, splice } = self.insertion?;
        let replaced = body.get(start..end)?;
        crate::utf8::str(replaced)?;
        let mut out = Vec::with_capacity(body.len() + shim_json.len() + 96);
        out.extend_from_slice(&body[..start]);
        for piece in splice.pieces {
            out.extend_from_slice(match piece {
                Piece::Json(text) => text.as_bytes(),
                Piece::Shim => shim_json.as_bytes(),
                Piece::Replaced => replaced,
            });
        }
        out.extend_from_slice(&body[end..]);
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
        prefixed_digest("h:", id.as_bytes(), 16)
    } else {
        id
    };
    Conversation {
        id,
        source: ConversationSource::Native,
    }
}

/// `prefix` and the first `bytes` bytes (at most 32) of the SHA-256 of `data`, in lowercase hex:
/// written straight into the id ([`crate::lower_hex::push`]), without the whole digest's hex
/// first. With an empty prefix and 32 bytes, the whole digest.
pub(crate) fn prefixed_digest(prefix: &str, data: &[u8], bytes: usize) -> String {
    let digest = Sha256::digest(data);
    let bytes = bytes.min(digest.len());
    let mut id = String::with_capacity(prefix.len() + 2 * bytes);
    id.push_str(prefix);
    crate::lower_hex::push(&mut id, digest.get(..bytes).unwrap_or_default());
    id
}

/// `fm:` + 16 hex of SHA-256 over the first user message's raw JSON.
pub(crate) fn first_message_conversation(raw: Option<&str>) -> Conversation {
    match raw {
        Some(raw) => Conversation {
            id: prefixed_digest("fm:", raw.as_bytes(), 8),
            source: ConversationSource::FirstMessage,
        },
        None => Conversation {
            id: String::new(),
            source: ConversationSource::None,
        },
    }
}

#[cfg(test)]
mod tests;
