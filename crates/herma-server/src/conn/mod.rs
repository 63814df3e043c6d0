//! The connections Herma's server accepts, and what a slow or greedy client can hold of them.
//!
//! Layout: [`accept`] is the accept loop (`HERMA_MAX_CONNECTIONS`, the busy answer past it,
//! graceful shutdown) and serves each connection with hyper's HTTP/1.1 over
//! `ProblemIo<DeadlineIo<TcpStream>>`: [`deadline`] holds the head and idle deadlines below
//! hyper, [`problem`] turns hyper's own answers to unparseable heads into problem+json.
//! Every connection has TCP_NODELAY set (small writes, such as SSE events, go out at once) and
//! its peer as request extension (`axum::extract::ConnectInfo<Peer>`).

pub mod accept;
pub mod deadline;
pub mod problem;

use std::net::SocketAddr;

pub use accept::{ConnectionLimits, connection_cap};
pub use deadline::Timeouts;
pub use problem::ProblemIo;

/// The peer of a connection, as request extensions carry it
/// (`axum::extract::ConnectInfo<Peer>`).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);
