//! Sending one request to an upstream model API and streaming its answer back.
//!
//! [`Upstream`] is the port the services use; `HttpUpstream` implements it with reqwest
//! (rustls, HTTP/1.1 and HTTP/2). It never follows a redirect (a 3xx is an error, so a caller's
//! credential can never be carried to a third host), never retries, and bounds the wait for the
//! response headers; bodies are streamed chunk by chunk as they arrive. Dropping the body stream
//! closes the upstream connection — that is how a client disconnect cancels the upstream call.
//! Every client here resolves names through [`dns`]'s resolver: a loopback name never leads to
//! another machine.

pub mod conversation;
#[cfg(not(target_arch = "wasm32"))]
pub mod dns;
pub mod fabric;
#[cfg(not(target_arch = "wasm32"))]
mod http;
pub mod single;
pub mod tiers;

// reqwest, sockets and the system resolver are the native runtime's: on wasm32 (the Worker) the
// transport brings its own [`Upstream`] over the platform's fetch.
#[cfg(not(target_arch = "wasm32"))]
pub use http::HttpUpstream;

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::Stream;
use thiserror::Error;

pub use ::http::{HeaderMap, HeaderName, HeaderValue};

/// Appends one request header (after any of the same name). A name or value that cannot be
/// sent is [`UpstreamError::Request`], naming the header and never its value (it may be a
/// credential); a credential's value is marked sensitive.
pub fn append_header(
    headers: &mut HeaderMap,
    name: &str,
    value: impl AsRef<[u8]>,
) -> Result<(), UpstreamError> {
    let invalid = || UpstreamError::Request(format!("the header {name} cannot be sent"));
    let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
    let mut value = HeaderValue::from_bytes(value.as_ref()).map_err(|_| invalid())?;
    if matches!(
        name.as_str(),
        "authorization" | "proxy-authorization" | "x-api-key"
    ) {
        value.set_sensitive(true);
    }
    headers.append(name, value);
    Ok(())
}

/// Request headers from `(name, value)` pairs, in order (a repeated name keeps every value),
/// each as [`append_header`] takes it.
pub fn header_map<N, V>(pairs: impl IntoIterator<Item = (N, V)>) -> Result<HeaderMap, UpstreamError>
where
    N: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        append_header(&mut headers, name.as_ref(), value)?;
    }
    Ok(headers)
}

/// A header's value as text, when it is UTF-8.
pub fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    std::str::from_utf8(headers.get(name)?.as_bytes()).ok()
}

/// A response body arriving chunk by chunk.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, UpstreamError>> + Send>>;

/// One request to send.
#[derive(Clone)]
pub struct UpstreamRequest {
    pub method: String,
    pub url: String,
    pub headers: ::http::HeaderMap,
    pub body: Bytes,
}

impl std::fmt::Debug for UpstreamRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print headers: they carry credentials.
        f.debug_struct("UpstreamRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .finish()
    }
}

pub struct UpstreamResponse {
    pub status: u16,
    pub headers: ::http::HeaderMap,
    pub body: BodyStream,
}

/// Why an upstream call failed. Nothing here echoes upstream bodies, credentials or socket
/// details (those are in the server log): the texts are safe to show.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UpstreamError {
    #[error("could not connect: {0}")]
    Connect(String),
    #[error("no response headers within {0:?}")]
    Timeout(Duration),
    #[error("the upstream answered {0} with a redirect; redirects are never followed")]
    Redirect(u16),
    #[error("the request could not be built: {0}")]
    Request(String),
    /// A loopback name (`localhost`, `*.localhost`) resolved to a non-loopback address; nothing
    /// was sent.
    #[error("`{0}` names loopback but resolved to a non-loopback address; refused")]
    LoopbackPromiseBroken(String),
    #[error("the response body failed: {0}")]
    Body(String),
}

/// The port: send one request, get its status, headers and streaming body.
#[async_trait]
pub trait Upstream: Send + Sync {
    async fn send(&self, request: UpstreamRequest) -> Result<UpstreamResponse, UpstreamError>;
}

/// A whole response body of at most `max_bytes` (refused at once when its declared length is
/// larger, else as soon as the chunks pass it).
pub(crate) async fn read_limited(
    response: UpstreamResponse,
    max_bytes: usize,
) -> Result<Vec<u8>, UpstreamError> {
    use futures_util::StreamExt;
    let too_large = || UpstreamError::Body(format!("the body is larger than {max_bytes} bytes"));
    let declared =
        header_text(&response.headers, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_bytes as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    let mut chunks = response.body;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > max_bytes {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The failure as the fixed phrase a report may show (`connection failed`, `timed out`, `body
/// failed`, …); the detail went to the server log where the HTTP client saw it.
pub(crate) fn phrase(err: &UpstreamError) -> String {
    match err {
        UpstreamError::Connect(phrase) | UpstreamError::Body(phrase) => phrase.clone(),
        UpstreamError::Timeout(_) => "timed out".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_pairs_keep_their_order_and_every_repeated_value() {
        let headers = header_map([
            ("accept", "text/event-stream"),
            ("x-trace", "one"),
            ("x-trace", "two"),
        ])
        .unwrap();
        let trace: Vec<&[u8]> = headers
            .get_all("x-trace")
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(trace, [b"one".as_slice(), b"two".as_slice()]);
        assert_eq!(header_text(&headers, "accept"), Some("text/event-stream"));
        assert_eq!(header_text(&headers, "authorization"), None);
        assert!(!headers["accept"].is_sensitive());
    }

    #[test]
    fn a_credential_is_marked_sensitive() {
        let headers = header_map([("authorization", "Bearer k"), ("x-api-key", "k")]).unwrap();
        assert!(headers["authorization"].is_sensitive());
        assert!(headers["x-api-key"].is_sensitive());
    }

    #[test]
    fn a_header_that_cannot_be_sent_is_named_without_its_value() {
        let err = header_map([("authorization", "Bearer sk-secret\nx-injected: 1")]).unwrap_err();
        assert_eq!(
            err,
            UpstreamError::Request("the header authorization cannot be sent".into())
        );
        let err = header_map([("bad name", "v")]).unwrap_err();
        assert!(err.to_string().contains("bad name"), "{err}");
    }
}
