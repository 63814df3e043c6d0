//! Decoding a provider's response stream into neutral [`ModelEvent`]s, fed chunk by chunk.
//!
//! [`StreamDecoder`] frames the bytes (SSE) and hands each event to its protocol's
//! [`EventDecoder`]; the protocol modules hold those decoders. A usage-only reader (the proxy's
//! [`UsageObserver`](super::usage::UsageObserver)) needs none of this: it reads the same events
//! through [`WireProtocol::event_usage`](super::WireProtocol::event_usage), which the decoders
//! use for their usage too.

use serde_json::Value;
use thiserror::Error;

use super::Protocol;
use super::sse;
use crate::call::ModelEvent;

/// Longest SSE line (and event) a decoder reads; a longer one is dropped.
pub const MAX_EVENT: usize = 4 * 1024 * 1024;

/// The stream broke its protocol: an unparseable event, an `error` event, an early end.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{0}")]
pub struct StreamError(pub String);

impl StreamError {
    pub(crate) fn new(what: &str) -> Self {
        Self(what.to_owned())
    }
}

/// Whether a stream goes on after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Open,
    /// The terminal event arrived: nothing after it is read.
    Finished,
}

/// One protocol's stream state: reads one framed event at a time and emits what it says.
pub trait EventDecoder: Send {
    /// Reads `event`; an error ends the stream.
    fn on_event(
        &mut self,
        event: &sse::Event,
        emit: &mut dyn FnMut(ModelEvent),
    ) -> Result<Progress, StreamError>;
}

/// A protocol's stream decoder over arbitrary chunks.
pub struct StreamDecoder {
    reader: sse::Reader,
    events: Box<dyn EventDecoder>,
    finished: bool,
}

impl std::fmt::Debug for StreamDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamDecoder")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl StreamDecoder {
    pub fn new(protocol: Protocol) -> Self {
        Self {
            reader: sse::Reader::new(MAX_EVENT),
            events: protocol.wire().decoder(),
            finished: false,
        }
    }

    /// Feeds a chunk; `out` receives every event decoded from it, and at most one error, after
    /// which (as after the terminal event) nothing more is read.
    pub fn feed(&mut self, chunk: &[u8], out: &mut dyn FnMut(Result<ModelEvent, StreamError>)) {
        let Self {
            reader,
            events,
            finished,
        } = self;
        reader.feed(chunk, &mut |event| {
            if *finished {
                return;
            }
            match events.on_event(event, &mut |decoded| out(Ok(decoded))) {
                Ok(Progress::Open) => {}
                Ok(Progress::Finished) => *finished = true,
                Err(error) => {
                    *finished = true;
                    out(Err(error));
                }
            }
        });
    }

    /// The terminal event (or an error) has been read.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The body ended: an error unless the terminal event was read.
    pub fn end(&mut self) -> Result<(), StreamError> {
        if std::mem::replace(&mut self.finished, true) {
            Ok(())
        } else {
            Err(StreamError::new(
                "the stream ended before its terminal event",
            ))
        }
    }
}

// ---- helpers the protocol decoders share ----------------------------------------------------

/// An event's JSON and its type (the `type` member, else the SSE event name). A provider's
/// `error` event is an error.
pub(crate) fn parse(event: &sse::Event) -> Result<(String, Value), StreamError> {
    let data = serde_json::from_str::<Value>(&event.data)
        .map_err(|_| StreamError::new("an event is not JSON"))?;
    let kind = data
        .get("type")
        .and_then(Value::as_str)
        .or(event.event.as_deref())
        .unwrap_or("")
        .to_owned();
    if kind == "error" {
        return Err(StreamError::new("the provider sent an error event"));
    }
    Ok((kind, data))
}

/// Emits the provider's reference once: the first non-empty id seen.
#[derive(Debug, Default)]
pub(crate) struct Reference {
    sent: bool,
}

impl Reference {
    pub(crate) fn see(&mut self, id: Option<&str>, emit: &mut dyn FnMut(ModelEvent)) {
        if let Some(id) = id
            && !self.sent
            && !id.is_empty()
        {
            self.sent = true;
            emit(ModelEvent::Reference(id.to_owned()));
        }
    }
}

/// An event's usage (see [`WireProtocol::event_usage`](super::WireProtocol::event_usage)) as
/// JSON; `null` when there is none.
pub(crate) fn usage_of(raw: Option<&str>) -> Value {
    raw.and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or(Value::Null)
}

/// The unsigned integer at `pointer`, 0 when absent.
pub(crate) fn u(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// The string member `field` of `value`, empty when absent.
pub(crate) fn str_of(value: &Value, field: &str) -> String {
    value
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests;
