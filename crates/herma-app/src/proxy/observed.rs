//! The upstream's answer on its way back: relayed chunk by chunk while usage is read, and at
//! its end the receipt sealed and the turn handed to memory.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use web_time::Instant;

use bytes::Bytes;
use futures_util::Stream;
use herma_core::model::{ReceiptBody, StreamEnd};
use herma_core::wire::Protocol;
use herma_core::wire::usage::UsageObserver;
use herma_providers::{BodyStream, UpstreamError};

use crate::memory::{
    MAX_CAPTURED_RESPONSE, MAX_RESPONSE_TEXT, MemoryWorker, TurnAnswer, TurnRecord,
};
use crate::metrics::StreamEnds;
use crate::receipts::ReceiptWriter;

/// Microseconds since `since`.
pub(crate) fn elapsed_micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The upstream body on its way to the client: every chunk passes through untouched while the
/// usage observer reads it; at the end — or when the client goes away and the stream is
/// dropped, which also closes the upstream connection — the receipt is sealed and queued with
/// how the body ended ([`StreamEnd`]), which `/metrics` counts and the log names when it was not
/// `completed`.
pub(super) struct ObservedBody {
    pub(super) inner: BodyStream,
    pub(super) observer: Option<UsageObserver>,
    pub(super) pending: Option<(ReceiptBody, String, Instant)>,
    pub(super) writer: Arc<ReceiptWriter>,
    /// The turn memory will read once the answer has been relayed, and the answer so far: a
    /// JSON body's bytes ([`TurnAnswer::Relayed`]) or a stream's text
    /// ([`TurnAnswer::Streamed`]).
    pub(super) memory: Option<(Arc<MemoryWorker>, TurnRecord)>,
    pub(super) streaming: bool,
    pub(super) protocol: Protocol,
    pub(super) ends: Arc<StreamEnds>,
}

impl ObservedBody {
    fn finish(&mut self, end: StreamEnd) {
        // A JSON answer's text, when memory wants it, is read with its usage (one reading).
        let mut text = None;
        if let Some((mut receipt, id, received)) = self.pending.take() {
            receipt.usage = match self.observer.take() {
                Some(observer) if self.memory.is_some() => {
                    let read;
                    (read, text) =
                        observer.finish_with_text(MAX_RESPONSE_TEXT, MAX_CAPTURED_RESPONSE);
                    read
                }
                Some(observer) => observer.finish(),
                None => None,
            };
            receipt.timings.total_micros = Some(elapsed_micros(received));
            receipt.stream_end = Some(end);
            self.ends.record(self.protocol, end);
            if end != StreamEnd::Completed {
                tracing::warn!(
                    receipt = %id,
                    protocol = self.protocol.as_str(),
                    end = end.as_str(),
                    streaming = self.streaming,
                    "a forwarded response ended before it was whole"
                );
            }
            self.writer.submit_detached(receipt.seal(id));
        }
        if let Some((memory, mut turn)) = self.memory.take() {
            // The text was read where the JSON body was kept whole: it stands for the bytes.
            if let Some(text) = text {
                turn.answer = TurnAnswer::Read(text);
            }
            memory.submit(turn);
        }
    }
}

impl Stream for ObservedBody {
    type Item = Result<Bytes, UpstreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let answer = this.memory.as_mut().map(|(_, turn)| &mut turn.answer);
                match (answer, this.observer.as_mut()) {
                    // A stream's text is read from the events the observer reads (the observer
                    // and the turn are both taken in `finish`: one is there while the other is).
                    (Some(TurnAnswer::Streamed(text)), Some(observer)) => {
                        observer.feed_reading(&chunk, text);
                    }
                    (answer, observer) => {
                        if let Some(TurnAnswer::Relayed { body }) = answer {
                            let room = MAX_CAPTURED_RESPONSE.saturating_sub(body.len());
                            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                        }
                        if let Some(observer) = observer {
                            observer.feed(&chunk);
                        }
                    }
                }
                if let Some(observer) = this.observer.as_mut() {
                    // The protocol's last event is in this chunk: the client will know the
                    // answer is whole once it has the chunk, so the receipt is sealed (and
                    // journaled) before the chunk leaves.
                    if this.streaming && observer.ended() {
                        this.finish(StreamEnd::Completed);
                    }
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(err))) => {
                this.finish(match err {
                    UpstreamError::Timeout(_) => StreamEnd::IdleTimeout,
                    _ => StreamEnd::UpstreamError,
                });
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(None) => {
                let whole = this.observer.as_ref().is_none_or(UsageObserver::ended);
                this.finish(if whole {
                    StreamEnd::Completed
                } else {
                    StreamEnd::UpstreamClosedEarly
                });
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for ObservedBody {
    /// Dropped before its end: the client went away (a finished body was sealed already).
    fn drop(&mut self) {
        self.finish(StreamEnd::ClientGone);
    }
}
