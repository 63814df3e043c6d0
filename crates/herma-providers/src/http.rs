//! [`HttpUpstream`]: the [`Upstream`] port over reqwest, and what every reqwest client of this
//! crate is built from.

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
        let mut builder = self
            .client
            .request(method, &request.url)
            .headers(request.headers);
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
        let idle = self.idle_timeout;
        let chunks = response
            .bytes_stream()
            .map(|chunk| chunk.map_err(|e| UpstreamError::Body(describe(&e))));
        // A stalled stream ends with an error instead of holding the connection forever.
        let body = futures_util::stream::unfold(
            (Box::pin(chunks), false),
            move |(mut chunks, done)| async move {
                if done {
                    return None;
                }
                match tokio::time::timeout(idle, chunks.next()).await {
                    Ok(Some(item)) => Some((item, (chunks, false))),
                    Ok(None) => None,
                    Err(_) => Some((Err(UpstreamError::Timeout(idle)), (chunks, true))),
                }
            },
        );
        Ok(UpstreamResponse {
            status,
            headers,
            body: Box::pin(body),
        })
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
