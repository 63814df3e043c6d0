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
//! Each client speaks one [`Protocol`], whose module in `herma_core::wire` knows the rest: the
//! support matrix ([`Protocol::validate`], checked before any network access), the request's
//! JSON ([`Protocol::encode`]), its path and how the key is sent, and the stream decoder
//! ([`StreamDecoder`]) that turns the provider's stream into the same
//! [`ModelEvent`]s for every provider: a provider reference (the
//! response or message id), text deltas, finished tool calls (arguments as the raw JSON text
//! the model produced), reasoning blocks, other provider blocks, the stop and the terminal
//! usage. This module is the HTTP around them.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use herma_core::call::{CallTag, ModelEvent, ModelRequest, Unsupported};
use herma_core::wire::Protocol;
use herma_core::wire::stream::{StreamDecoder, StreamError};
use thiserror::Error;

#[cfg(not(target_arch = "wasm32"))]
use crate::HttpUpstream;
use crate::{BodyStream, Upstream, UpstreamError, UpstreamRequest};

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

impl From<StreamError> for ProviderError {
    fn from(error: StreamError) -> Self {
        ProviderError::Protocol(error.0)
    }
}

pub type EventStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ProviderError>> + Send>>;

/// The port the governed runners call.
#[async_trait]
pub trait ModelClient: Send + Sync {
    /// The provider a governed call records (`anthropic_messages`, `meta_chat`).
    fn provider_name(&self) -> &'static str;
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
    protocol: Protocol,
    base: String,
    api_key: String,
    http: Arc<dyn Upstream>,
}

impl std::fmt::Debug for SingleDispatchClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleDispatchClient")
            .field("protocol", &self.protocol)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl SingleDispatchClient {
    #[cfg(not(target_arch = "wasm32"))]
    fn build(
        protocol: Protocol,
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        let http = HttpUpstream::new(timeouts.connect, timeouts.headers, timeouts.idle)
            .map_err(|e| ProviderError::Transport(e.to_string()))?;
        Ok(Self {
            protocol,
            base: base.trim_end_matches('/').to_owned(),
            api_key: api_key.to_owned(),
            http: Arc::new(http),
        })
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// OpenAI's Responses API at `base` (e.g. `https://api.openai.com/v1`): `POST {base}/responses`.
    pub fn openai_responses(
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        Self::build(Protocol::Responses, base, api_key, timeouts)
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// Anthropic's Messages API at `base` (e.g. `https://api.anthropic.com`):
    /// `POST {base}/v1/messages`.
    pub fn anthropic_messages(
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        Self::build(Protocol::Messages, base, api_key, timeouts)
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// A Chat-Completions-style provider at `base`: `POST {base}/chat/completions`.
    pub fn chat_completions(
        base: &str,
        api_key: &str,
        timeouts: ClientTimeouts,
    ) -> Result<Self, ProviderError> {
        Self::build(Protocol::ChatCompletions, base, api_key, timeouts)
    }

    fn url(&self) -> String {
        format!("{}{}", self.base, self.protocol.call_path())
    }

    fn headers(&self, call: Option<&CallTag>) -> Result<crate::HeaderMap, UpstreamError> {
        let mut headers = crate::header_map([
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ])?;
        let (name, value) = self.protocol.credential(&self.api_key);
        crate::append_header(&mut headers, name, value)?;
        for (name, value) in self.protocol.call_headers() {
            crate::append_header(&mut headers, name, value)?;
        }
        if let Some(call) = call {
            crate::append_header(&mut headers, "x-herma-call-id", &call.call_id)?;
            crate::append_header(&mut headers, "x-herma-attempt", call.attempt.to_string())?;
        }
        Ok(headers)
    }
}

#[async_trait]
impl ModelClient for SingleDispatchClient {
    fn provider_name(&self) -> &'static str {
        self.protocol.provider_name()
    }

    fn attempts_per_dispatch(&self) -> u32 {
        1
    }

    fn validate(&self, request: &ModelRequest) -> Result<(), Unsupported> {
        self.protocol.validate(request)
    }

    async fn dispatch(&self, request: &ModelRequest) -> Result<EventStream, ProviderError> {
        let body = self.protocol.encode(request);
        let sent = async {
            let request = UpstreamRequest {
                method: "POST".to_owned(),
                url: self.url(),
                headers: self.headers(request.call.as_ref())?,
                body: Bytes::from(body.to_string()),
            };
            self.http.send(request).await
        };
        let response = sent.await.map_err(|e| match e {
            UpstreamError::Redirect(status) => ProviderError::Rejected { status },
            other => ProviderError::Transport(other.to_string()),
        })?;
        if !(200..300).contains(&response.status) {
            let reference = crate::header_text(&response.headers, "request-id")
                .or_else(|| crate::header_text(&response.headers, "x-request-id"))
                .map(str::to_owned);
            let status = response.status;
            let events: Vec<Result<ModelEvent, ProviderError>> = reference
                .map(|r| Ok(ModelEvent::Reference(r)))
                .into_iter()
                .chain([Err(ProviderError::Rejected { status })])
                .collect();
            return Ok(Box::pin(futures_util::stream::iter(events)));
        }
        Ok(decode_stream(self.protocol, response.body))
    }
}

/// Turns a provider's streamed body into neutral events: the protocol's decoder over the
/// chunks as they arrive, ending at the terminal event, the first error or the body's end.
pub fn decode_stream(protocol: Protocol, body: BodyStream) -> EventStream {
    struct State {
        body: BodyStream,
        decoder: StreamDecoder,
        queue: VecDeque<Result<ModelEvent, ProviderError>>,
        done: bool,
    }
    let state = State {
        body,
        decoder: StreamDecoder::new(protocol),
        queue: VecDeque::new(),
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
                    let State { decoder, queue, .. } = &mut s;
                    decoder.feed(&chunk, &mut |item| {
                        queue.push_back(item.map_err(ProviderError::from))
                    });
                    if decoder.is_finished() {
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
                    if let Err(error) = s.decoder.end() {
                        s.queue.push_back(Err(error.into()));
                    }
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

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
        protocol: Protocol,
        body: crate::BodyStream,
    ) -> Vec<Result<ModelEvent, ProviderError>> {
        decode_stream(protocol, body).collect().await
    }

    #[tokio::test]
    async fn a_stream_that_ends_early_or_sends_garbage_fails() {
        let early = collect(
            Protocol::Messages,
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
            Protocol::Responses,
            Box::pin(futures_util::stream::iter([chunk])),
        )
        .await;
        assert_eq!(garbage.len(), 1);
        assert!(garbage[0].is_err());
    }
}
