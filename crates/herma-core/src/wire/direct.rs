//! Direct answers: a `respond_directly` provision's text, rendered exactly as each protocol's
//! own API would have answered — JSON, or the protocol's full SSE event sequence — with zero
//! usage and no upstream involved. Each protocol module renders its own
//! ([`WireProtocol::direct_json`](super::WireProtocol::direct_json),
//! [`WireProtocol::direct_sse`](super::WireProtocol::direct_sse)), serializing borrowed structs
//! in the protocol's member order straight into the answer's buffer (no `Value` tree: a direct
//! answer is a whole response's work on Herma's side, where the pass-through only relays one).

use serde::{Serialize, Serializer};

use super::Protocol;
use crate::time::Timestamp;

/// Everything a direct answer needs; ids come from the caller's random source.
#[derive(Clone, Debug)]
pub struct DirectAnswer<'a> {
    pub protocol: Protocol,
    pub model: &'a str,
    pub text: &'a str,
    /// Hex used to build the protocol's ids (`chatcmpl-…`, `resp_…`, `msg_…`).
    pub id_hex: &'a str,
    pub created: Timestamp,
    /// Chat Completions: `stream_options.include_usage` was set.
    pub stream_usage: bool,
}

impl DirectAnswer<'_> {
    /// `created` in whole seconds, as the protocols' objects carry it.
    pub(crate) fn seconds(&self) -> i64 {
        self.created.as_millis().div_euclid(1000)
    }

    /// The protocol's id for this answer: `prefix` then the answer's hex.
    pub(crate) fn id(&self, prefix: &'static str) -> Id<'_> {
        Id {
            prefix,
            hex: self.id_hex,
        }
    }

    /// The non-streaming response object, as JSON.
    pub fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text.len() + 768);
        self.protocol.wire().direct_json(self, &mut out);
        out
    }

    /// The streaming response: the protocol's whole SSE event sequence.
    pub fn sse(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text.len() * 2 + 2048);
        self.protocol.wire().direct_sse(self, &mut out);
        out
    }
}

/// An id written as one JSON string, `prefix` and hex, without building it first.
#[derive(Clone, Copy)]
pub(crate) struct Id<'a> {
    prefix: &'static str,
    hex: &'a str,
}

impl Serialize for Id<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}{}", self.prefix, self.hex))
    }
}

impl Id<'_> {
    /// Appends the id as a JSON string (what serializing it writes).
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let (prefix, hex) = (self.prefix.as_bytes(), self.hex.as_bytes());
        if crate::json::plain(prefix, 0) < prefix.len() || crate::json::plain(hex, 0) < hex.len() {
            write_json(out, self);
        } else {
            out.reserve(prefix.len() + hex.len() + 2);
            out.push(b'"');
            out.extend_from_slice(prefix);
            out.extend_from_slice(hex);
            out.push(b'"');
        }
    }
}

/// `{}`.
#[derive(Serialize)]
pub(crate) struct Empty {}

/// `[]`.
pub(crate) const NONE: [(); 0] = [];

/// Appends `value`'s JSON to `out`: nothing if it would not serialize, which these structs of
/// strings and numbers never fail to.
pub(crate) fn write_json(out: &mut Vec<u8>, value: &impl Serialize) {
    let start = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start);
    }
}

/// Appends one SSE event whose data is `value`'s JSON: one `data:` line, since compact JSON
/// escapes every newline inside its strings.
pub(crate) fn write_json_event(out: &mut Vec<u8>, event: Option<&str>, value: &impl Serialize) {
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    write_json(out, value);
    out.extend_from_slice(b"\n\n");
}
