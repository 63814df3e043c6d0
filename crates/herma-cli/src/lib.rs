//! The `herma` binary's library half: [`wiring`], where the concrete adapters behind Herma's
//! ports are chosen from the settings — the SQLite or PostgreSQL store, the HTTP client, the
//! in-process or remote embedding model and the classifier. Everything inward of this crate
//! (`herma-app`, `herma-server`) works over the ports only; the binary and the test support
//! wire the same adapters through these functions.

pub mod log_fields;
pub mod wiring;
