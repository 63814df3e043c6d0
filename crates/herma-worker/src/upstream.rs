//! The `Upstream` port at the edge: the platform's `fetch`.
//!
//! The same promises as the native client: a redirect is never followed (`redirect: manual`,
//! a 3xx is [`UpstreamError::Redirect`]), nothing is retried, the wait for the response headers
//! and each wait between body chunks are bounded, and dropping the body aborts the request —
//! that is how a client that goes away cancels the upstream call. Error texts are the native
//! client's fixed phrases; the platform's own message goes to the Worker's log only.
//!
//! A request for a base a service binding stands for (`TESSERA` for `HERMA_TESSERA_URL`) goes
//! to that Worker through the binding instead of the network, with the same header and idle
//! bounds and no redirect followed; dropping its body stops reading it but does not abort the
//! other Worker's work (the binding's `fetch` is given no abort signal).

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::{Either, select};
use herma_core::settings::Settings;
use herma_providers::{
    HeaderName, HeaderValue, Upstream, UpstreamError, UpstreamRequest, UpstreamResponse,
};
use worker::send::{SendFuture, SendWrapper};
use worker::{
    AbortController, ByteStream, Fetch, Fetcher, Headers, Method, RequestInit, RequestRedirect,
};

/// `fetch` with the settings' header and idle timeouts (the platform connects by itself).
#[derive(Debug)]
pub struct FetchUpstream {
    headers_timeout: Duration,
    idle_timeout: Duration,
    /// Requests under this base go through this service binding.
    bound: Option<(String, SendWrapper<Fetcher>)>,
}

impl FetchUpstream {
    pub fn new(settings: &Settings) -> Self {
        Self {
            headers_timeout: Duration::from_millis(settings.upstream_headers_timeout_ms),
            idle_timeout: Duration::from_millis(settings.upstream_idle_timeout_ms),
            bound: None,
        }
    }

    /// Sends what is addressed under `base` through `binding` (another Worker).
    pub fn binding(mut self, base: &str, binding: Fetcher) -> Self {
        self.bound = Some((
            base.trim_end_matches('/').to_owned(),
            SendWrapper::new(binding),
        ));
        self
    }

    /// The binding `url` goes through, if any: under the base itself or a path below it.
    fn binding_for(&self, url: &str) -> Option<&Fetcher> {
        let (base, binding) = self.bound.as_ref()?;
        let rest = url.strip_prefix(base.as_str())?;
        (rest.is_empty() || rest.starts_with('/') || rest.starts_with('?')).then_some(&**binding)
    }
}

/// `outgoing` through the service binding `binding` (its `fetch`, as the platform defines it).
async fn through(
    binding: &Fetcher,
    outgoing: &worker::Request,
) -> worker::Result<worker::Response> {
    use worker::wasm_bindgen::JsCast;
    let target: &worker::wasm_bindgen::JsValue = binding.as_ref();
    let fetch: worker::js_sys::Function =
        worker::js_sys::Reflect::get(target, &"fetch".into())?.dyn_into()?;
    let promise: worker::js_sys::Promise = fetch.call1(target, outgoing.inner())?.dyn_into()?;
    let response: worker::web_sys::Response = worker::wasm_bindgen_futures::JsFuture::from(promise)
        .await?
        .dyn_into()?;
    Ok(worker::Response::from(response))
}

/// Aborts the request when the body (or the failed send) is dropped.
struct AbortOnDrop(Option<AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(controller) = self.0.take() {
            controller.abort();
        }
    }
}

fn request_error(err: impl std::fmt::Display) -> UpstreamError {
    UpstreamError::Request(err.to_string())
}

impl FetchUpstream {
    async fn send_here(&self, request: UpstreamRequest) -> Result<UpstreamResponse, UpstreamError> {
        let headers = Headers::new();
        for (name, value) in &request.headers {
            let value = std::str::from_utf8(value.as_bytes())
                .map_err(|_| request_error(format!("the header {name} is not text")))?;
            headers
                .append(name.as_str(), value)
                .map_err(request_error)?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::from(request.method.clone()))
            .with_headers(headers)
            .with_redirect(RequestRedirect::Manual);
        if !request.body.is_empty() {
            init.with_body(Some(
                worker::js_sys::Uint8Array::from(request.body.as_ref()).into(),
            ));
        }
        let outgoing =
            worker::Request::new_with_init(&request.url, &init).map_err(request_error)?;
        let controller = AbortController::default();
        let signal = controller.signal();
        let abort = AbortOnDrop(Some(controller));
        let binding = self.binding_for(&request.url);
        let sent = async move {
            match binding {
                Some(binding) => through(binding, &outgoing).await,
                None => Fetch::Request(outgoing).send_with_signal(&signal).await,
            }
        };
        let sent = std::pin::pin!(sent);
        let waited = worker::Delay::from(self.headers_timeout);
        let mut response = match select(sent, waited).await {
            Either::Left((Ok(response), _)) => response,
            Either::Left((Err(err), _)) => {
                worker::console_warn!("upstream connection failed: {err}");
                return Err(UpstreamError::Connect("connection failed".to_owned()));
            }
            Either::Right(((), _)) => return Err(UpstreamError::Timeout(self.headers_timeout)),
        };
        let status = response.status_code();
        if (300..400).contains(&status) {
            return Err(UpstreamError::Redirect(status));
        }
        let headers = response
            .headers()
            .entries()
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from_bytes(name.as_bytes()).ok()?,
                    HeaderValue::from_bytes(value.as_bytes()).ok()?,
                ))
            })
            .collect();
        let chunks = response.stream().map_err(request_error)?;
        Ok(UpstreamResponse {
            status,
            headers,
            body: body(chunks, abort, self.idle_timeout),
        })
    }
}

struct Body {
    chunks: ByteStream,
    _abort: AbortOnDrop,
    ended: bool,
}

/// The body chunk by chunk; a wait longer than `idle` between chunks ends it with an error.
fn body(chunks: ByteStream, abort: AbortOnDrop, idle: Duration) -> herma_providers::BodyStream {
    let state = SendWrapper::new(Body {
        chunks,
        _abort: abort,
        ended: false,
    });
    Box::pin(futures_util::stream::unfold(state, move |mut state| {
        SendFuture::new(async move {
            if state.ended {
                return None;
            }
            let next = state.chunks.next();
            let waited = worker::Delay::from(idle);
            match select(next, waited).await {
                Either::Left((Some(Ok(chunk)), _)) => Some((Ok(Bytes::from(chunk)), state)),
                Either::Left((Some(Err(err)), _)) => {
                    worker::console_warn!("upstream body failed: {err}");
                    state.ended = true;
                    Some((Err(UpstreamError::Body("body failed".to_owned())), state))
                }
                Either::Left((None, _)) => None,
                Either::Right(((), _)) => {
                    state.ended = true;
                    Some((Err(UpstreamError::Timeout(idle)), state))
                }
            }
        })
    }))
}

#[async_trait]
impl Upstream for FetchUpstream {
    async fn send(&self, request: UpstreamRequest) -> Result<UpstreamResponse, UpstreamError> {
        SendFuture::new(self.send_here(request)).await
    }
}
