//! The connections Herma's server accepts, and what a slow or greedy client can hold of them.
//!
//! Layout: [`accept`] is the accept loop (`HERMA_MAX_CONNECTIONS`, the busy answer past it,
//! graceful shutdown) and serves each connection with hyper's HTTP/1.1 over
//! `ProblemIo<DeadlineIo<TcpStream>>`: [`deadline`] holds the head and idle deadlines below
//! hyper, [`problem`] turns hyper's own answers to unparseable heads into problem+json.
//! Every connection has TCP_NODELAY set (small writes, such as SSE events, go out at once) and
//! its [`Peer`] as a request extension.

#[cfg(not(target_arch = "wasm32"))]
pub mod accept;
#[cfg(not(target_arch = "wasm32"))]
pub mod deadline;
#[cfg(not(target_arch = "wasm32"))]
pub mod problem;

use std::net::SocketAddr;

#[cfg(not(target_arch = "wasm32"))]
pub use accept::{ConnectionLimits, connection_cap};
#[cfg(not(target_arch = "wasm32"))]
pub use deadline::Timeouts;
#[cfg(not(target_arch = "wasm32"))]
pub use problem::ProblemIo;

/// The peer of a connection, as request extensions carry it (a plain extension rather than
/// axum's `ConnectInfo`, which exists only where axum serves sockets itself).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);
