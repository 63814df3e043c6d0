//! How long a connection may take to send a request head, and wait for its next one.
//!
//! hyper 1.x has one timer for this, `header_read_timeout`, and it starts when hyper begins
//! waiting for a head — for a kept-alive connection, as soon as the previous response is
//! written — so an idle wait and a slow head would share one deadline. [`DeadlineIo`] keeps two
//! instead, below hyper (whose own timer is off):
//!
//! - the **head deadline**, `HERMA_HEADER_READ_TIMEOUT_MS` from the connection's start (its
//!   first request) or from the first byte of a later request. When it passes with part of a
//!   head received, the connection is answered 408 `request_timeout` (problem+json) and closed;
//!   when nothing at all arrived, it is closed silently.
//! - the **idle deadline**, `HERMA_KEEP_ALIVE_TIMEOUT_MS` from the end of a response to the
//!   first byte of the next request; past it the connection is closed silently (an unsolicited
//!   408 could be read as the answer to a request the client is sending at that moment).
//!
//! While a request is being served — from hyper handing its head to the service until hyper
//! drops the response body, i.e. has written all of it — no deadline applies here: the body
//! has its own (`crate::limits`), and a response (an SSE stream) runs as long as it runs. The
//! service reports those moments through the connection's [`Activity`].

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use herma_core::time::{Clock, Timestamp};
use herma_core::{Problem, ProblemCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::problem::closing_answer;

/// The two deadlines of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// For a whole request head.
    pub header: Duration,
    /// For the first byte of the next request on a kept-alive connection.
    pub idle: Duration,
}

/// Whether a connection's request is being served, as its service reports it.
#[derive(Debug, Default)]
pub struct Activity {
    serving: AtomicBool,
    /// Responses written: each one starts an idle wait.
    finished: AtomicU64,
    /// The read that was pending while serving: hyper may not read again by itself once the
    /// response is written (nothing arrives), so the end wakes it to start the idle deadline.
    reader: Mutex<Option<Waker>>,
}

impl Activity {
    /// A request head has arrived and is being served.
    pub fn begin(&self) {
        self.serving.store(true, Ordering::SeqCst);
    }

    /// Its response is written (or abandoned).
    pub fn end(&self) {
        // Counted before `serving` is cleared: whoever sees it clear sees the count moved.
        self.finished.fetch_add(1, Ordering::SeqCst);
        self.serving.store(false, Ordering::SeqCst);
        let reader = self.reader.lock().ok().and_then(|mut reader| reader.take());
        if let Some(reader) = reader {
            reader.wake();
        }
    }

    /// Remembers the read pending while serving.
    fn park(&self, waker: &Waker) {
        if let Ok(mut reader) = self.reader.lock()
            && !reader.as_ref().is_some_and(|r| r.will_wake(waker))
        {
            *reader = Some(waker.clone());
        }
    }
}

/// Ends a request's [`Activity`] when dropped; it travels with the response body, which hyper
/// drops once it has written it.
#[derive(Debug)]
pub struct ResponseEnd(pub Arc<Activity>);

impl Drop for ResponseEnd {
    fn drop(&mut self) {
        self.0.end();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    /// For a request head; `started` once a byte of it arrived.
    Head { started: bool },
    /// For the first byte of the next request.
    Idle,
    /// For nothing: a request is being served.
    Serving,
}

/// A connection's IO with the head and idle deadlines, holding the connection's slot under
/// `HERMA_MAX_CONNECTIONS` (given back as the connection starts to close).
pub struct DeadlineIo<T> {
    // Declared first, so dropped first: the slot is free before the socket closes.
    slot: Option<OwnedSemaphorePermit>,
    inner: T,
    activity: Arc<Activity>,
    timeouts: Timeouts,
    waiting: Waiting,
    /// `activity.finished` when this IO last looked.
    finished_seen: u64,
    timer: Pin<Box<Sleep>>,
    /// A 408 being written (then the connection ends).
    answer: Option<(Vec<u8>, usize)>,
    /// Where the 408's `Date` comes from.
    clock: Arc<dyn Clock>,
}

impl<T> DeadlineIo<T> {
    /// Starts the first request's head deadline now.
    pub fn new(
        inner: T,
        activity: Arc<Activity>,
        timeouts: Timeouts,
        clock: Arc<dyn Clock>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Self {
        Self {
            slot,
            inner,
            activity,
            timeouts,
            waiting: Waiting::Head { started: false },
            finished_seen: 0,
            timer: Box::pin(tokio::time::sleep(timeouts.header)),
            answer: None,
            clock,
        }
    }

    fn restart(&mut self, wait: Duration) {
        self.timer.as_mut().reset(Instant::now() + wait);
    }

    /// Bytes arrived while waiting: a head has started.
    fn arrived(&mut self) {
        match self.waiting {
            Waiting::Idle => {
                self.waiting = Waiting::Head { started: true };
                self.restart(self.timeouts.header);
            }
            Waiting::Head { started: false } => self.waiting = Waiting::Head { started: true },
            Waiting::Head { started: true } | Waiting::Serving => {}
        }
    }
}

/// The answer to a head that did not arrive in time.
fn request_timeout_answer(header: Duration, now: Timestamp) -> Vec<u8> {
    let problem = Problem::new(
        ProblemCode::RequestTimeout,
        format!(
            "the request head did not arrive within {} ms (HERMA_HEADER_READ_TIMEOUT_MS)",
            header.as_millis()
        ),
    )
    .with("limit", "HERMA_HEADER_READ_TIMEOUT_MS");
    let since_epoch = Duration::from_millis(u64::try_from(now.as_millis()).unwrap_or_default());
    let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + since_epoch);
    closing_answer("408 Request Timeout", &problem, Some(&date))
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the client did not send in time")
}

impl<T: AsyncWrite + Unpin> DeadlineIo<T> {
    /// Writes the pending 408 as far as the socket takes it; a failed write ends it too.
    fn drive_answer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while let Some((bytes, written)) = &mut self.answer {
            if *written >= bytes.len() {
                break;
            }
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..])) {
                Ok(n) if n > 0 => *written += n,
                _ => break,
            }
        }
        Poll::Ready(())
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for DeadlineIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.answer.is_some() {
            ready!(this.drive_answer(cx));
            return Poll::Ready(Err(timed_out()));
        }
        if this.activity.serving.load(Ordering::SeqCst) {
            this.waiting = Waiting::Serving;
            this.activity.park(cx.waker());
            // Parked before this second look: an end in between has woken this task.
            if this.activity.serving.load(Ordering::SeqCst) {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
        }
        let finished = this.activity.finished.load(Ordering::SeqCst);
        if finished != this.finished_seen || this.waiting == Waiting::Serving {
            // A response was written: the wait for the next request starts now.
            this.finished_seen = finished;
            this.waiting = Waiting::Idle;
            this.restart(this.timeouts.idle);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => {
                if this.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                if this.waiting == (Waiting::Head { started: true }) {
                    let answer = request_timeout_answer(this.timeouts.header, this.clock.now());
                    this.answer = Some((answer, 0));
                    ready!(this.drive_answer(cx));
                }
                Poll::Ready(Err(timed_out()))
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for DeadlineIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The connection is done serving: its slot is free before the peer sees it close, so a
        // client that saw the close finds the slot free.
        drop(self.slot.take());
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const TIMEOUTS: Timeouts = Timeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(75),
    };

    /// An IO over one end of an in-memory pipe, the client holding the other.
    fn pair() -> (
        DeadlineIo<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        Arc<Activity>,
    ) {
        let (server, client) = tokio::io::duplex(4096);
        let activity = Arc::new(Activity::default());
        (
            DeadlineIo::new(
                server,
                activity.clone(),
                TIMEOUTS,
                herma_core::time::ManualClock::at(1_796_000_000_000),
                None,
            ),
            client,
            activity,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_nothing_is_closed_silently_at_the_head_deadline() {
        let (mut io, mut client, _) = pair();
        let mut buf = [0u8; 16];
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(io);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert!(answer.is_empty(), "{answer:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_stops_midway_is_answered_408_problem_json() {
        let (mut io, mut client, _) = pair();
        client
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert!(io.read(&mut buf).await.unwrap() > 0);
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(io);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        let text = String::from_utf8(answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
            "{head}"
        );
        assert!(
            head.contains("content-type: application/problem+json"),
            "{head}"
        );
        assert!(head.contains("connection: close"), "{head}");
        assert!(head.contains("date: Mon, 30 Nov 2026 "), "{head}");
        let problem = herma_core::json::parse_strict(body.as_bytes()).unwrap();
        assert_eq!(problem["code"], "request_timeout");
        assert_eq!(problem["status"], 408);
        assert_eq!(problem["limit"], "HERMA_HEADER_READ_TIMEOUT_MS");
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_connection_waits_the_idle_timeout_then_a_new_head_deadline() {
        let (mut io, mut client, activity) = pair();
        let mut buf = [0u8; 64];
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(io.read(&mut buf).await.unwrap() > 0);
        activity.begin();
        // Serving: no deadline, however long the response takes.
        let served = tokio::time::timeout(Duration::from_secs(3600), io.read(&mut buf)).await;
        assert!(served.is_err(), "a served request has no read deadline");
        activity.end();

        // Idle for longer than the head deadline but within the idle one: still open.
        let idle = tokio::time::timeout(TIMEOUTS.header * 3, io.read(&mut buf)).await;
        assert!(
            idle.is_err(),
            "an idle connection outlives the head deadline"
        );
        // The next request's first byte starts a head deadline, which then passes.
        client.write_all(b"GET").await.unwrap();
        assert!(io.read(&mut buf).await.unwrap() > 0);
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let mut answer = vec![0u8; 12];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 408");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_pending_while_serving_starts_the_idle_deadline_when_the_response_ends() {
        let (mut io, _client, activity) = pair();
        activity.begin();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            io.read(&mut buf).await.map(|_| ()).map_err(|e| e.kind())
        });
        // The reader is parked on a socket that stays silent.
        tokio::time::sleep(Duration::from_millis(1)).await;
        activity.end();
        let read = tokio::time::timeout(TIMEOUTS.idle * 2, reader)
            .await
            .expect("the idle deadline ended the read");
        assert_eq!(read.unwrap(), Err(io::ErrorKind::TimedOut));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_silently_at_the_idle_deadline() {
        let (mut io, _client, activity) = pair();
        activity.begin();
        activity.end();
        let mut buf = [0u8; 8];
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(io.answer.is_none(), "no answer to an idle connection");
    }
}
