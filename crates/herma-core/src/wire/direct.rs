//! Direct answers: a `respond_directly` provision's text, rendered exactly as each protocol's
//! own API would have answered — JSON, or the protocol's full SSE event sequence — with zero
//! usage and no upstream involved. Each protocol module renders its own
//! ([`WireProtocol::direct_json`](super::WireProtocol::direct_json),
//! [`WireProtocol::direct_sse`](super::WireProtocol::direct_sse)).

use serde_json::Value;

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

    /// The non-streaming response object.
    pub fn json(&self) -> Value {
        self.protocol.wire().direct_json(self)
    }

    /// The streaming response: the protocol's whole SSE event sequence.
    pub fn sse(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text.len() * 2 + 2048);
        self.protocol.wire().direct_sse(self, &mut out);
        out
    }
}
