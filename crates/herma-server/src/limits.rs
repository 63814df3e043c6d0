//! Request bodies: how long one may take to arrive and how much memory all of them may hold.
//!
//! Every request's body is wrapped ([`guard_body`]) in a [`GuardedBody`] that, once a handler
//! starts reading it:
//!
//! - reserves its declared `Content-Length` whole from the process's [`BodyBudget`]
//!   (`HERMA_BODY_BUDGET_BYTES`), or, for a body without one, each chunk as it arrives; a
//!   reservation the budget cannot hold ends the body with [`BodyRefusal::OverBudget`]
//!   (503 `server_busy`, `Retry-After`);
//! - ends it with [`BodyRefusal::TimedOut`] (408 `request_timeout`) when the whole body has
//!   not arrived within `HERMA_BODY_READ_TIMEOUT_MS` of that first read.
//!
//! The reservation is held until the handler has answered (its response head exists), not
//! merely until the body is read: what a handler buffered — the bytes, the JSON parsed from
//! them, a proxied body on its way upstream, which is written before the upstream's response
//! head arrives — lives until then. A streamed response holds none of it. Bodies a handler
//! never reads reserve nothing.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use herma_core::{Problem, ProblemCode};
use herma_store::Runtime;
use herma_store::runtime::Sleep;

/// What `Retry-After` tells a client refused for the budget.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// The limits every request body is read under.
#[derive(Debug)]
pub struct BodyLimits {
    pub budget: Arc<BodyBudget>,
    pub read_timeout: Duration,
    /// Whose clock the read timeout runs on.
    pub runtime: Arc<dyn Runtime>,
}

impl BodyLimits {
    pub fn from_settings(
        settings: &herma_core::settings::Settings,
        runtime: Arc<dyn Runtime>,
    ) -> Self {
        Self {
            budget: Arc::new(BodyBudget::new(settings.body_budget_bytes)),
            read_timeout: Duration::from_millis(settings.body_read_timeout_ms),
            runtime,
        }
    }
}

/// The bytes all request bodies in flight may hold together.
#[derive(Debug)]
pub struct BodyBudget {
    limit: u64,
    held: AtomicU64,
}

impl BodyBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            held: AtomicU64::new(0),
        }
    }

    /// Bytes reserved now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Takes `bytes` when they fit, all or nothing.
    fn take(&self, bytes: u64) -> bool {
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                held.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::SeqCst);
    }
}

/// The bytes one request's body holds of the budget; given back when the last holder drops it.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: AtomicU64,
}

impl Reservation {
    pub fn new(budget: Arc<BodyBudget>) -> Self {
        Self {
            budget,
            bytes: AtomicU64::new(0),
        }
    }

    /// Reserves `more` bytes; `false`, with nothing reserved, when the budget cannot hold them.
    pub fn grow(&self, more: u64) -> bool {
        if !self.budget.take(more) {
            return false;
        }
        self.bytes.fetch_add(more, Ordering::SeqCst);
        true
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give(*self.bytes.get_mut());
    }
}

/// Why a guarded body ended early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyRefusal {
    /// The whole body did not arrive within the read timeout.
    TimedOut { after: Duration },
    /// The budget cannot hold this body now.
    OverBudget { budget: u64 },
}

impl std::fmt::Display for BodyRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TimedOut { after } => write!(
                f,
                "the request body did not arrive within {} ms",
                after.as_millis()
            ),
            Self::OverBudget { budget } => write!(
                f,
                "request bodies in flight already hold the {budget}-byte budget"
            ),
        }
    }
}

impl std::error::Error for BodyRefusal {}

impl BodyRefusal {
    /// The problem a client gets.
    pub fn problem(self) -> Problem {
        match self {
            Self::TimedOut { after } => Problem::new(
                ProblemCode::RequestTimeout,
                format!(
                    "the request body did not arrive within {} ms (HERMA_BODY_READ_TIMEOUT_MS)",
                    after.as_millis()
                ),
            )
            .with("limit", "HERMA_BODY_READ_TIMEOUT_MS"),
            Self::OverBudget { budget } => Problem::new(
                ProblemCode::ServerBusy,
                format!(
                    "Herma is holding as many request bodies as its {budget}-byte memory budget allows (HERMA_BODY_BUDGET_BYTES); try again shortly"
                ),
            )
            .with("retry_after_seconds", RETRY_AFTER_SECONDS)
            .with("limit", "HERMA_BODY_BUDGET_BYTES"),
        }
    }

    /// The refusal somewhere in `error`'s source chain, when a guarded body ended with one.
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<Self> {
        let mut current = Some(error);
        while let Some(error) = current {
            if let Some(refusal) = error.downcast_ref::<Self>() {
                return Some(*refusal);
            }
            current = error.source();
        }
        None
    }
}

type Frame = http_body::Frame<Bytes>;

/// A request body read under the budget and the read timeout.
pub struct GuardedBody {
    inner: Body,
    reservation: Arc<Reservation>,
    read_timeout: Duration,
    runtime: Arc<dyn Runtime>,
    /// Started by the first read.
    deadline: Option<Sleep>,
    /// Bytes received beyond what the first read reserved (a body without `Content-Length`).
    received: u64,
    declared: u64,
    ended: bool,
}

impl GuardedBody {
    pub fn new(
        inner: Body,
        reservation: Arc<Reservation>,
        read_timeout: Duration,
        runtime: Arc<dyn Runtime>,
    ) -> Self {
        Self {
            inner,
            reservation,
            read_timeout,
            runtime,
            deadline: None,
            received: 0,
            declared: 0,
            ended: false,
        }
    }

    fn refuse(&mut self, refusal: BodyRefusal) -> Poll<Option<Result<Frame, BoxError>>> {
        self.ended = true;
        Poll::Ready(Some(Err(Box::new(refusal))))
    }

    fn over_budget(&self) -> BodyRefusal {
        BodyRefusal::OverBudget {
            budget: self.reservation.budget.limit(),
        }
    }
}

impl HttpBody for GuardedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame, BoxError>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if this.deadline.is_none() {
            this.deadline = Some(this.runtime.sleep(this.read_timeout));
            // Reserved whole before a byte is read: a declared length is what it will hold.
            this.declared = this.inner.size_hint().exact().unwrap_or(0);
            if !this.reservation.grow(this.declared) {
                let refusal = this.over_budget();
                return this.refuse(refusal);
            }
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let before = this.received.max(this.declared);
                    this.received += data.len() as u64;
                    let more = this.received.saturating_sub(before);
                    if more > 0 && !this.reservation.grow(more) {
                        let refusal = this.over_budget();
                        return this.refuse(refusal);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => {
                this.ended = true;
                Poll::Ready(Some(Err(err.into())))
            }
            Poll::Ready(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let expired = this
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    let refusal = BodyRefusal::TimedOut {
                        after: this.read_timeout,
                    };
                    return this.refuse(refusal);
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Wraps the request's body in a [`GuardedBody`] and holds its reservation until the handler
/// has answered (`crate::layers` calls it for every request).
pub async fn guard_body(limits: &BodyLimits, request: Request, next: Next) -> Response {
    let reservation = Arc::new(Reservation::new(limits.budget.clone()));
    let held = reservation.clone();
    let (read_timeout, runtime) = (limits.read_timeout, limits.runtime.clone());
    let request =
        request.map(|body| Body::new(GuardedBody::new(body, held, read_timeout, runtime)));
    let response = next.run(request).await;
    drop(reservation);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn the_budget_is_all_or_nothing_and_given_back_when_the_last_holder_drops() {
        let budget = Arc::new(BodyBudget::new(1000));
        let first = Arc::new(Reservation::new(budget.clone()));
        assert!(first.grow(700));
        let second = Reservation::new(budget.clone());
        assert!(!second.grow(400), "700 + 400 is over 1000");
        assert_eq!(budget.held(), 700, "a refused growth takes nothing");
        assert!(second.grow(300));
        let holder = first.clone();
        drop(first);
        assert_eq!(budget.held(), 1000, "still held by its other holder");
        drop(holder);
        drop(second);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_body_without_length_reserves_chunk_by_chunk_and_ends_past_the_budget() {
        let budget = Arc::new(BodyBudget::new(1000));
        let reservation = Arc::new(Reservation::new(budget.clone()));
        let chunks = futures_util::stream::iter([
            Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 600])),
            Ok(Bytes::from(vec![b'b'; 600])),
        ]);
        let mut body = GuardedBody::new(
            Body::from_stream(chunks),
            reservation.clone(),
            Duration::from_secs(60),
            Arc::new(herma_store::TokioRuntime),
        );
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap().len(), 600);
        assert_eq!(reservation.bytes(), 600);
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(
            BodyRefusal::find(err.as_ref()),
            Some(BodyRefusal::OverBudget { budget: 1000 })
        );
        assert!(
            body.frame().await.is_none(),
            "the body ends with its refusal"
        );
        drop(body);
        drop(reservation);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_declared_length_is_reserved_whole_before_a_byte_is_read() {
        let budget = Arc::new(BodyBudget::new(1000));
        let holder = Reservation::new(budget.clone());
        assert!(holder.grow(500));
        let reservation = Arc::new(Reservation::new(budget.clone()));
        let mut body = GuardedBody::new(
            Body::from(vec![b'x'; 600]),
            reservation.clone(),
            Duration::from_secs(60),
            Arc::new(herma_store::TokioRuntime),
        );
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(
            BodyRefusal::find(err.as_ref()),
            Some(BodyRefusal::OverBudget { budget: 1000 })
        );
        assert_eq!(reservation.bytes(), 0);
        drop(holder);
        let mut body = GuardedBody::new(
            Body::from(vec![b'x'; 600]),
            reservation.clone(),
            Duration::from_secs(60),
            Arc::new(herma_store::TokioRuntime),
        );
        assert_eq!(
            body.frame()
                .await
                .unwrap()
                .unwrap()
                .into_data()
                .unwrap()
                .len(),
            600
        );
        assert_eq!(
            reservation.bytes(),
            600,
            "reserved once, not again per chunk"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_ends_with_the_read_timeout() {
        let budget = Arc::new(BodyBudget::new(1000));
        let stalled = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let mut body = GuardedBody::new(
            Body::from_stream(stalled),
            Arc::new(Reservation::new(budget)),
            Duration::from_secs(30),
            Arc::new(herma_store::TokioRuntime),
        );
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(
            BodyRefusal::find(err.as_ref()),
            Some(BodyRefusal::TimedOut {
                after: Duration::from_secs(30)
            })
        );
    }
}
