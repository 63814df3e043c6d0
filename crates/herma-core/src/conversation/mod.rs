//! Typed work conversations: the pure decisions of an operator-funded turn.
//!
//! Layout: [`contract`] reads work contracts (the portable schema profile) and validates
//! proposed arguments against them; [`config`] reads one provider's settings in the fixed
//! outcome order; [`grants`] are the operator's per-caller permissions; [`generation`] says what
//! generation JSON may hold; [`tariffs`] is Meta's dated price table; [`providers`] builds each
//! provider's exact request and reads its reply; [`turn`] is one turn's body, model input and
//! outcome, [`instructions`] the system text and category guidance, [`schema`] the JSON Schemas
//! served. Money is exact ([`crate::money`]).
//!
//! Everything here is pure and shared with the Worker: the fixtures under `parity/` drive the
//! tests of both runtimes.

pub mod config;
pub mod contract;
pub mod generation;
pub mod grants;
pub mod instructions;
pub mod providers;
pub mod schema;
pub mod tariffs;
pub mod turn;

#[cfg(test)]
mod parity;
