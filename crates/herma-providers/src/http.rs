//! [`HttpUpstream`]: the [`Upstream`] port over reqwest, and what every reqwest client of this
//! crate is built from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;

use crate::{Upstream, UpstreamError, UpstreamRequest, UpstreamResponse, dns};

/// The HTTP implementation.
#[derive(Clone)]
pub struct HttpUpstream {
    client: reqwest::Client,
    headers_timeout: Duration,
    idle_timeout: Duration,
    urls: Arc<ParsedUrls>,
}

/// Upstream URLs as parsed, by their text. Requests name a few URLs over and over (a base URL,
/// the operator's or a caller's, with one path per protocol), and parsing one (scheme, host
/// and its IDNA mapping, path) cost about 6,500 instructions a request: 7% of a forwarded
/// request's in the pass-through (docs/performance.md). Only URLs that parse are kept, and
/// the map is emptied when it is full: a caller sending ever new URLs cannot grow it past its
/// bound.
#[derive(Default)]
struct ParsedUrls(Mutex<HashMap<Box<str>, Arc<reqwest::Url>>>);

/// URLs kept at most, and the longest kept.
const MAX_PARSED_URLS: usize = 256;
const MAX_PARSED_URL_LEN: usize = 2048;

impl ParsedUrls {
    /// `url` parsed, from the map when it was parsed before; `None` when it does not parse
    /// (reqwest then parses the text itself, and its error says why) or the map's lock was
    /// poisoned (the same: reqwest parses).
    fn get(&self, url: &str) -> Option<reqwest::Url> {
        if url.len() > MAX_PARSED_URL_LEN {
            return reqwest::Url::parse(url).ok();
        }
        // Only the lookup holds the lock; the copy reqwest takes is made after it.
        let kept = self.0.lock().ok()?.get(url).cloned();
        if let Some(parsed) = kept {
            return Some(reqwest::Url::clone(&parsed));
        }
        // Parsed without holding the lock: other requests' lookups do not wait for it.
        let parsed = reqwest::Url::parse(url).ok()?;
        if let Ok(mut urls) = self.0.lock() {
            if urls.len() >= MAX_PARSED_URLS {
                urls.clear();
            }
            urls.insert(url.into(), Arc::new(parsed.clone()));
        }
        Some(parsed)
    }
}

impl HttpUpstream {
    /// A client that connects within `connect_timeout`, waits at most `headers_timeout` for the
    /// response headers and `idle_timeout` between body chunks, follows no redirects and
    /// retries nothing.
    pub fn new(
        connect_timeout: Duration,
        headers_timeout: Duration,
        idle_timeout: Duration,
    ) -> Result<Self, UpstreamError> {
        Self::build(
            connect_timeout,
            headers_timeout,
            idle_timeout,
            dns::GuardedResolver::system(),
        )
    }

    pub(crate) fn build(
        connect_timeout: Duration,
        headers_timeout: Duration,
        idle_timeout: Duration,
        resolver: std::sync::Arc<dns::GuardedResolver>,
    ) -> Result<Self, UpstreamError> {
        let client = client_builder(resolver)
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(64)
            .build()
            .map_err(|e| UpstreamError::Request(e.to_string()))?;
        Ok(Self {
            client,
            headers_timeout,
            idle_timeout,
            urls: Arc::default(),
        })
    }
}

/// What every client of this crate starts from: no redirects, names resolved through the
/// guarded resolver.
pub(crate) fn client_builder(
    resolver: std::sync::Arc<dns::GuardedResolver>,
) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(resolver)
}

#[async_trait]
impl Upstream for HttpUpstream {
    async fn send(&self, request: UpstreamRequest) -> Result<UpstreamResponse, UpstreamError> {
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|e| UpstreamError::Request(e.to_string()))?;
        let builder = match self.urls.get(&request.url) {
            Some(url) => self.client.request(method, url),
            None => self.client.request(method, &request.url),
        };
        let mut builder = builder.headers(request.headers);
        if !request.body.is_empty() {
            builder = builder.body(request.body);
        }
        let mut response = match tokio::time::timeout(self.headers_timeout, builder.send()).await {
            Err(_) => return Err(UpstreamError::Timeout(self.headers_timeout)),
            Ok(Err(e)) if e.is_builder() => return Err(UpstreamError::Request(e.to_string())),
            Ok(Err(e)) => {
                return Err(match dns::broken_promise(&e) {
                    Some(refused) => UpstreamError::LoopbackPromiseBroken(refused.host.clone()),
                    None => UpstreamError::Connect(describe(&e)),
                });
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        if response.status().is_redirection() {
            return Err(UpstreamError::Redirect(status));
        }
        let headers = std::mem::take(response.headers_mut());
        let chunks = response
            .bytes_stream()
            .map(|chunk| chunk.map_err(|e| UpstreamError::Body(describe(&e))));
        Ok(UpstreamResponse {
            status,
            headers,
            body: Box::pin(IdleTimeout::new(chunks, self.idle_timeout)),
        })
    }
}

/// A body that ends with [`UpstreamError::Timeout`] when its next chunk has not arrived within
/// `idle` of being asked for, instead of holding the connection forever.
///
/// One timer serves the whole body: asking for a chunk only notes the time, and the timer,
/// armed for the first wait, is moved to the current wait's deadline only when it fires early.
/// (A `tokio::time::timeout` per chunk put an entry in the runtime's timer wheel and took it
/// out again for every chunk that was not already there when asked for: most of a stream's.)
struct IdleTimeout<S> {
    chunks: S,
    idle: Duration,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// When the chunk being waited for was first asked for; `None` between chunks.
    asked: Option<tokio::time::Instant>,
    timed_out: bool,
}

impl<S> IdleTimeout<S> {
    fn new(chunks: S, idle: Duration) -> Self {
        Self {
            chunks,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            asked: None,
            timed_out: false,
        }
    }
}

impl<S> futures_util::Stream for IdleTimeout<S>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, UpstreamError>> + Unpin,
{
    type Item = Result<bytes::Bytes, UpstreamError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(None);
        }
        let asked = *this.asked.get_or_insert_with(tokio::time::Instant::now);
        if let Poll::Ready(item) = this.chunks.poll_next_unpin(cx) {
            this.asked = None;
            return Poll::Ready(item);
        }
        let deadline = asked + this.idle;
        loop {
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The timer was set for an earlier wait: this one's deadline may be later.
            if this.timer.deadline() >= deadline {
                this.timed_out = true;
                return Poll::Ready(Some(Err(UpstreamError::Timeout(this.idle))));
            }
            this.timer.as_mut().reset(deadline);
        }
    }
}

/// What went wrong, as a fixed phrase that is safe in a response body: `connection failed`,
/// `timed out` or `body failed`. The cause chain (OS error texts such as `Connection refused
/// (os error 111)`, DNS and TLS messages) tells whoever reads it which local ports are open,
/// so it goes only to the server log, with the host it concerned (never the URL: it may carry
/// a caller's path).
pub(crate) fn describe(err: &reqwest::Error) -> String {
    let phrase = if err.is_timeout() && !err.is_connect() {
        "timed out"
    } else if err.is_body() || err.is_decode() {
        "body failed"
    } else {
        // Refused, reset, unresolvable, a TLS failure, or a peer that is not HTTP: one phrase,
        // so the answer does not say which.
        "connection failed"
    };
    let mut chain = String::new();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if !chain.is_empty() {
            chain.push_str(": ");
        }
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    let host = err.url().and_then(reqwest::Url::host_str).unwrap_or("-");
    tracing::warn!(host, cause = %chain, "upstream {phrase}");
    phrase.to_owned()
}

#[cfg(test)]
mod tests {
    // A test fails loudly.
    #![allow(clippy::expect_used, clippy::unwrap_used)]
    use std::time::Duration;

    use bytes::Bytes;
    use futures_util::StreamExt;
    use tokio::sync::mpsc;
    use tokio::time::{Instant, sleep};

    use super::{IdleTimeout, MAX_PARSED_URL_LEN, MAX_PARSED_URLS, ParsedUrls};
    use crate::UpstreamError;

    fn kept(urls: &ParsedUrls) -> usize {
        urls.0.lock().unwrap().len()
    }

    /// A URL parsed before comes back as reqwest would have parsed its text, each URL its own;
    /// one that does not parse is not kept (reqwest parses it and says why); the map never
    /// holds more than its bound, nor a URL longer than the longest kept.
    #[test]
    fn parsed_urls_are_what_parsing_gives_and_stay_bounded() {
        let urls = ParsedUrls::default();
        for text in [
            "http://127.0.0.1:8080/v1/chat/completions",
            "https://API.Example.com/v1/messages?beta=true",
            "https://bücher.example/v1/responses",
        ] {
            let expected = reqwest::Url::parse(text).unwrap();
            assert_eq!(urls.get(text), Some(expected.clone()), "{text}");
            assert_eq!(urls.get(text), Some(expected), "{text}, again");
        }
        assert_eq!(kept(&urls), 3);
        assert_eq!(
            urls.get("https://api.example.com/v1/messages?beta=true")
                .unwrap()
                .host_str(),
            Some("api.example.com")
        );
        assert_eq!(
            urls.get("https://xn--bcher-kva.example/v1/responses")
                .unwrap()
                .as_str(),
            "https://xn--bcher-kva.example/v1/responses"
        );

        assert_eq!(urls.get("http://[::1/v1"), None);
        assert_eq!(urls.get("not a url"), None);
        assert_eq!(
            kept(&urls),
            5,
            "the two lookups by other texts above are kept, the bad ones not"
        );

        let long = format!("http://example.com/{}", "a".repeat(MAX_PARSED_URL_LEN));
        assert_eq!(urls.get(&long), Some(reqwest::Url::parse(&long).unwrap()));
        assert_eq!(kept(&urls), 5);

        for i in 0..MAX_PARSED_URLS * 2 {
            let text = format!("http://example.com/{i}");
            assert_eq!(urls.get(&text).unwrap().path(), format!("/{i}"));
            assert!(kept(&urls) <= MAX_PARSED_URLS);
        }
    }

    const IDLE: Duration = Duration::from_secs(10);

    /// A body whose chunks are sent on the returned channel, read under [`IDLE`].
    fn body(
        rx: mpsc::UnboundedReceiver<Bytes>,
    ) -> IdleTimeout<futures_util::stream::BoxStream<'static, Result<Bytes, UpstreamError>>> {
        let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (Ok(chunk), rx))
        });
        IdleTimeout::new(chunks.boxed(), IDLE)
    }

    /// Chunks that each come within the idle time of the one before pass, however long the
    /// whole body takes; the first one late ends the body with a timeout, counted from when it
    /// was asked for, and nothing follows.
    #[tokio::test(start_paused = true)]
    async fn a_late_chunk_ends_the_body_however_long_the_body_ran_before() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut body = body(rx);
        let start = Instant::now();
        tokio::spawn({
            let tx = tx.clone();
            async move {
                for n in 0..4u8 {
                    tx.send(Bytes::from(vec![n])).unwrap();
                    sleep(IDLE - Duration::from_secs(1)).await;
                }
            }
        });
        for n in 0..4u8 {
            assert_eq!(body.next().await.unwrap().unwrap(), Bytes::from(vec![n]));
        }
        // The fourth chunk came at 27 s; the fifth never does (the channel stays open).
        match body.next().await {
            Some(Err(UpstreamError::Timeout(idle))) => assert_eq!(idle, IDLE),
            other => panic!("expected a timeout, got {other:?}"),
        }
        // Virtual time (paused): the timer wheel's millisecond ticks are all that may differ.
        let waited = Instant::now() - start;
        let due = Duration::from_secs(27) + IDLE;
        assert!(
            waited >= due && waited < due + Duration::from_millis(10),
            "{waited:?}"
        );
        assert!(body.next().await.is_none(), "nothing after the timeout");
        drop(tx);
    }

    /// A reader that takes its time between chunks is not the upstream being idle: the wait
    /// starts when the next chunk is asked for.
    #[tokio::test(start_paused = true)]
    async fn the_wait_for_a_chunk_starts_when_it_is_asked_for() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut body = body(rx);
        tx.send(Bytes::from_static(b"a")).unwrap();
        tx.send(Bytes::from_static(b"b")).unwrap();
        assert_eq!(body.next().await.unwrap().unwrap(), "a");
        // Three idle times pass before the reader asks again: the chunk already there is read.
        sleep(IDLE * 3).await;
        assert_eq!(body.next().await.unwrap().unwrap(), "b");
        // Again, and now the upstream sends the next chunk just within the idle time of the ask.
        sleep(IDLE * 2).await;
        let asked = Instant::now();
        tokio::spawn({
            let tx = tx.clone();
            async move {
                sleep(IDLE - Duration::from_millis(1)).await;
                tx.send(Bytes::from_static(b"c")).unwrap();
            }
        });
        assert_eq!(body.next().await.unwrap().unwrap(), "c");
        assert!(Instant::now() - asked < IDLE);
        drop(tx);
        assert!(
            body.next().await.is_none(),
            "the body ends with its upstream"
        );
    }
}
