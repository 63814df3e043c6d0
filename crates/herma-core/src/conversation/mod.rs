//! Typed work conversations: the pure decisions of an operator-funded turn.
//!
//! Layout: [`config`] reads one provider's settings in the fixed outcome order; [`grants`] are
//! the operator's per-caller permissions; [`generation`] says what generation JSON may hold;
//! [`tariffs`] is Meta's dated price table; [`providers`] builds each provider's exact request
//! and reads its reply. Money is exact ([`crate::money`]).
//!
//! Everything here is pure and shared with the Worker: the fixtures under `parity/` drive the
//! tests of both runtimes.

pub mod config;
pub mod generation;
pub mod grants;
pub mod providers;
pub mod tariffs;

#[cfg(test)]
mod parity;
