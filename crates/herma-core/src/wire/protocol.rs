//! What every wire protocol knows, as one trait ([`WireProtocol`]), and [`Protocol`], the one
//! place that maps a protocol to the module implementing it.
//!
//! Adding a protocol is adding a module with a unit struct that implements [`WireProtocol`],
//! a variant here and its line in [`Protocol::wire`]: the compiler asks for every part.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Envelope;
use super::direct::DirectAnswer;
use super::stream::EventDecoder;
use super::{chat, messages, responses};
use crate::call::{ModelRequest, Support, Unsupported};
use crate::problem::Problem;

/// Everything Herma knows about one wire protocol, implemented by a unit struct in the
/// protocol's module, in this order: names, the proxied request, the answers Herma gives itself,
/// the response, governed calls.
pub trait WireProtocol: Sync {
    /// The protocol's name in Herma's API and records (`messages`).
    fn as_str(&self) -> &'static str;
    /// The route Herma serves it on, which is also the upstream's path (`/v1/messages`).
    fn path(&self) -> &'static str;

    // ---- the proxied request -------------------------------------------------------------------

    /// Reads a request leniently: everything but the conversation's headers and the user
    /// text's paths (which [`Envelope::from_request`] adds), including the
    /// [`Insertion`](super::Insertion) of a shim with this protocol's splice text.
    fn read(&self, body: &str) -> Result<Envelope, serde_json::Error>;
    /// `(header, value)` carrying an upstream API key the way this protocol's API takes it.
    fn credential(&self, key: &str) -> (&'static str, String);

    // ---- answers Herma gives itself ------------------------------------------------------------

    /// A direct answer as this protocol's non-streaming response object, its JSON appended to
    /// `out`.
    fn direct_json(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>);
    /// A direct answer as this protocol's whole SSE event sequence, appended to `out`.
    fn direct_sse(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>);
    /// Herma's error in this protocol's error shape, so the official SDKs raise their usual
    /// exceptions; it carries the same `code` as Herma's own API.
    fn error_body(&self, problem: &Problem) -> Value;

    // ---- the response --------------------------------------------------------------------------

    /// The usage one streamed event reports (its JSON text, an object when there is one). The
    /// proxy's usage observer reads only this, and only from events that mention `usage`,
    /// leaving the rest of the event unparsed; the stream decoders read their usage through it
    /// too.
    fn event_usage<'e>(&self, data: &'e str) -> Option<&'e str>;
    /// The usage member of a whole (non-streaming) JSON response body (its JSON text).
    fn body_usage<'b>(&self, body: &'b [u8]) -> Option<&'b str>;
    /// A fresh decoder turning this protocol's stream into neutral events.
    fn decoder(&self) -> Box<dyn EventDecoder>;
    /// The answer text one streamed event's data carries (entity memory reads it back).
    /// `lead` is held across one stream's events, read in order: what of the last event's
    /// opening the next may repeat (see [`EventLead`](super::EventLead)).
    fn stream_text<'d>(&self, data: &'d str, lead: &mut super::EventLead) -> Option<Cow<'d, str>>;
    /// The answer texts of a whole JSON response body, in order.
    fn body_text(&self, body: &[u8], push: &mut dyn FnMut(&str));
    /// [`body_usage`](Self::body_usage) and [`body_text`](Self::body_text) of a body that is
    /// a JSON object, in one reading of it: `None` when that reading fails (a usage or texts
    /// that do not read; nothing is pushed then), and each must be read apart to tell which.
    fn body_usage_and_text<'b>(
        &self,
        body: &'b [u8],
        push: &mut dyn FnMut(&str),
    ) -> Option<Option<&'b str>>;

    // ---- governed calls ------------------------------------------------------------------------

    /// The name a governed call records as its provider (`anthropic_messages`).
    fn provider_name(&self) -> &'static str;
    /// The path a governed client posts to, after its base URL (`/v1/messages`).
    fn call_path(&self) -> &'static str;
    /// Headers a governed request carries besides the content type, `accept` and the
    /// credential (`anthropic-version`).
    fn call_headers(&self) -> &'static [(&'static str, &'static str)];
    /// This protocol's row of the support matrix.
    fn support(&self) -> Support;
    /// The provider's JSON for `request`, always streaming.
    fn encode(&self, request: &ModelRequest) -> Value;
}

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

    /// The module that implements this protocol: the one place a protocol is dispatched on.
    pub(crate) fn wire(self) -> &'static dyn WireProtocol {
        match self {
            Protocol::ChatCompletions => &chat::ChatCompletions,
            Protocol::Responses => &responses::Responses,
            Protocol::Messages => &messages::Messages,
        }
    }

    /// See [`WireProtocol::as_str`].
    pub fn as_str(self) -> &'static str {
        self.wire().as_str()
    }

    /// See [`WireProtocol::path`].
    pub fn path(self) -> &'static str {
        self.wire().path()
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == raw)
    }

    /// See [`WireProtocol::decoder`].
    pub fn decoder(self) -> Box<dyn super::stream::EventDecoder> {
        self.wire().decoder()
    }

    /// See [`WireProtocol::credential`].
    pub fn credential(self, key: &str) -> (&'static str, String) {
        self.wire().credential(key)
    }

    /// See [`WireProtocol::error_body`].
    pub fn error_body(self, problem: &Problem) -> Value {
        self.wire().error_body(problem)
    }

    /// See [`WireProtocol::provider_name`].
    pub fn provider_name(self) -> &'static str {
        self.wire().provider_name()
    }

    /// See [`WireProtocol::call_path`].
    pub fn call_path(self) -> &'static str {
        self.wire().call_path()
    }

    /// See [`WireProtocol::call_headers`].
    pub fn call_headers(self) -> &'static [(&'static str, &'static str)] {
        self.wire().call_headers()
    }

    /// Refuses, before any network access, what this protocol cannot take (the support
    /// matrix of [`crate::call`]).
    pub fn validate(self, request: &ModelRequest) -> Result<(), Unsupported> {
        self.wire().support().check(self.provider_name(), request)
    }

    /// See [`WireProtocol::encode`].
    pub fn encode(self, request: &ModelRequest) -> Value {
        self.wire().encode(request)
    }
}
