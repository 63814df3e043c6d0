//! Herma's pure core.
//!
//! Layout: [`problem`] (RFC 9457 vocabulary), [`json`] (the strict reader), [`key`] and
//! [`gate`] (keys, credentials, authorization decisions), [`caller`] (caller scopes and ids),
//! [`model`] (provisions, context entries, keys, receipts, entities, outcomes), [`settings`]
//! (`HERMA_*`: the settings table and its reader), [`secret`] (values that never print),
//! [`contributor`] (the contributor-tier classifier), [`time`] (timestamps), [`wire`] (the
//! protocols, one module each), [`call`] (a governed model call, neutrally), [`evaluation`]
//! (the pure decisions of tiers 2 and 3) and [`jev`] (the TypeSafe `systemone` typed-decision
//! adapter a worker uses; never a conversation provider).
//!
//! Architecture invariant: nothing here does I/O, reads the clock or the environment, or spawns;
//! the crate builds for `wasm32-unknown-unknown`, so every runtime decides the same way.

pub mod call;
pub mod caller;
pub mod contributor;
pub mod conversation;
pub mod engine;
pub mod evaluation;
pub mod gate;
pub mod governance;
pub mod handshake;
pub mod jev;
pub mod json;
pub mod key;
pub mod lower_hex;
pub mod memory;
pub mod micromodel;
pub mod model;
pub mod money;
pub mod problem;
pub mod retired;
pub mod rules;
pub mod secret;
pub mod semantic;
pub mod settings;
pub mod shim;
pub mod tessera;
pub mod time;
pub mod upstream;
pub mod utf8;
pub mod wire;

pub use caller::CallerScope;
pub use problem::{FieldError, Problem, ProblemCode};
pub use time::Timestamp;
