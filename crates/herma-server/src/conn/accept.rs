//! The accept loop: at most `HERMA_MAX_CONNECTIONS` connections served at once, each with
//! hyper's HTTP/1.1 over [`DeadlineIo`]; a connection past the cap is answered 503
//! `server_busy` with `Retry-After` and closed. On shutdown the loop stops accepting, every
//! connection finishes the request it is serving (idle ones close at once), and the loop
//! returns when the last one has.
//!
//! Answering past the cap costs a descriptor for as long as the busy answer takes (bounded by
//! the head deadline), so at most [`REFUSALS_AT_ONCE`] are answered at a time; beyond those a
//! new connection is closed without an answer.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, Request, header};
use axum::response::{IntoResponse, Response};
use herma_core::time::Clock;
use herma_core::{Problem, ProblemCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt;

use super::Peer;
use super::deadline::{Activity, DeadlineIo, ResponseEnd, Timeouts};
use super::problem::ProblemIo;
use crate::error::ApiError;

/// Connections past the cap answered at the same time.
pub const REFUSALS_AT_ONCE: usize = 64;
/// What `Retry-After` tells a client refused past the cap.
pub const RETRY_AFTER_SECONDS: u64 = 1;
/// Descriptors kept aside from the connection cap: the listener, the database pool, logs.
const RESERVED_FILES: u64 = 64;

/// What the accept loop enforces.
#[derive(Clone)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub timeouts: Timeouts,
    /// The clock answers written below hyper take their `Date` from.
    pub clock: Arc<dyn Clock>,
}

impl ConnectionLimits {
    /// From the settings, the cap lowered to what `open_files` descriptors can carry.
    pub fn from_settings(
        settings: &herma_core::settings::Settings,
        clock: Arc<dyn Clock>,
        open_files: Option<u64>,
    ) -> Self {
        let cap = connection_cap(settings.max_connections, open_files);
        if cap < settings.max_connections {
            tracing::warn!(
                configured = settings.max_connections,
                serving = cap,
                open_files = open_files.unwrap_or_default(),
                "HERMA_MAX_CONNECTIONS does not fit the open-file limit: raise `ulimit -n` to serve more"
            );
        }
        Self {
            max_connections: usize::try_from(cap).unwrap_or(usize::MAX),
            timeouts: Timeouts {
                header: Duration::from_millis(settings.header_read_timeout_ms),
                idle: Duration::from_millis(settings.keep_alive_timeout_ms),
            },
            clock,
        }
    }
}

/// The connection cap that `open_files` descriptors can carry: each connection may hold a
/// second descriptor upstream, and some are kept for the listener and the database.
pub fn connection_cap(configured: u64, open_files: Option<u64>) -> u64 {
    match open_files {
        Some(limit) => configured
            .min(limit.saturating_sub(RESERVED_FILES) / 2)
            .max(1),
        None => configured,
    }
}

/// The process's open-file limit after raising its soft limit to the hard one (as Go's runtime
/// does: the customary soft default of 1024 is far below what a server needs). `None` when
/// unlimited or unknown.
#[cfg(unix)]
pub fn open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
        && current < maximum
    {
        let raised = Rlimit {
            current: Some(maximum),
            maximum: Some(maximum),
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => return Some(maximum),
            Err(err) => tracing::debug!(error = %err, "could not raise the open-file limit"),
        }
    }
    limit.current
}

#[cfg(not(unix))]
pub fn open_file_limit() -> Option<u64> {
    None
}

/// Accepts connections on `listener` and serves `router` on them until `shutdown` resolves,
/// then waits for the connections to finish their requests.
pub async fn run(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    // Each connection holds a receiver: `true` asks it to finish; all dropped, all are done.
    let (stop, stopping) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut full = false;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (tcp, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                accept_failed(err).await;
                continue;
            }
        };
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY");
        }
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                full = false;
                tokio::spawn(serve(
                    tcp,
                    remote,
                    router.clone(),
                    slot,
                    limits.clone(),
                    stopping.clone(),
                ));
            }
            Err(_) => {
                if !full {
                    // Once per episode: a flood must not flood the log too.
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection cap reached: new connections get 503 server_busy"
                    );
                    full = true;
                }
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(refuse(tcp, permit, limits.clone()));
                }
            }
        }
    }
    drop(listener);
    drop(stopping);
    let _ = stop.send(true);
    stop.closed().await;
}

/// A failed `accept`: a connection that went away before it was accepted is nothing; anything
/// else (out of descriptors) waits a moment before the next try, as axum's loop does.
async fn accept_failed(err: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        err.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %err, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The IO a connection is served over.
fn io(
    tcp: TcpStream,
    activity: Arc<Activity>,
    limits: &ConnectionLimits,
    slot: Option<OwnedSemaphorePermit>,
) -> TokioIo<ProblemIo<DeadlineIo<TcpStream>>> {
    TokioIo::new(ProblemIo::new(DeadlineIo::new(
        tcp,
        activity,
        limits.timeouts,
        limits.clock.clone(),
        slot,
    )))
}

fn builder(keep_alive: bool) -> http1::Builder {
    let mut builder = http1::Builder::new();
    // hyper's own head timer would start at the idle wait: `DeadlineIo` keeps both instead.
    builder.keep_alive(keep_alive).header_read_timeout(None);
    builder
}

async fn serve(
    tcp: TcpStream,
    remote: SocketAddr,
    router: Router,
    slot: OwnedSemaphorePermit,
    limits: ConnectionLimits,
    mut stopping: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::default());
    let service = RouterService {
        router,
        peer: Peer(remote),
        activity: activity.clone(),
    };
    let builder = builder(true);
    let connection = builder.serve_connection(io(tcp, activity, &limits, Some(slot)), service);
    let mut connection = std::pin::pin!(connection);
    let stop = async {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(err) = result {
        // A timed-out head, a reset, a peer that went away: the connection's own business.
        tracing::debug!(error = %err, "connection ended");
    }
}

/// Answers one request with 503 `server_busy` and closes.
async fn refuse(tcp: TcpStream, permit: OwnedSemaphorePermit, limits: ConnectionLimits) {
    let max = limits.max_connections;
    let service = hyper::service::service_fn(move |_: Request<Incoming>| async move {
        Ok::<_, Infallible>(busy(max))
    });
    let activity = Arc::new(Activity::default());
    let _ = builder(false)
        .serve_connection(io(tcp, activity, &limits, None), service)
        .await;
    drop(permit);
}

/// The answer past the connection cap.
pub fn busy(max_connections: usize) -> Response {
    let problem = Problem::new(
        ProblemCode::ServerBusy,
        format!("Herma is serving its maximum of {max_connections} connections; try again shortly"),
    )
    .with("retry_after_seconds", RETRY_AFTER_SECONDS)
    .with("limit", "HERMA_MAX_CONNECTIONS");
    let mut response = ApiError(problem).into_response();
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The router as hyper's service on one connection: each request carries the peer, and marks
/// the connection as serving until its response body is dropped.
#[derive(Clone)]
struct RouterService {
    router: Router,
    peer: Peer,
    activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for RouterService {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        self.activity.begin();
        let end = ResponseEnd(self.activity.clone());
        request.extensions_mut().insert(self.peer);
        let router = self.router.clone();
        Box::pin(async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok(response.map(|body| TrackedBody { body, _end: end }))
        })
    }
}

/// A response body that ends its connection's [`Activity`] when hyper drops it.
pub struct TrackedBody {
    body: Body,
    _end: ResponseEnd,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_two_descriptors_per_connection_inside_the_open_file_limit() {
        assert_eq!(connection_cap(1024, None), 1024);
        assert_eq!(connection_cap(1024, Some(1_048_576)), 1024);
        assert_eq!(connection_cap(1024, Some(1024)), 480);
        assert_eq!(connection_cap(1024, Some(10)), 1);
    }
}
