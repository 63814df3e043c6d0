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
//! Provider plans and governed failover (part 2): [`identity`] folds a model into its upstream
//! `vendor/model` identity; [`plan`] reads a caller's provider plan and admits a turn under it;
//! [`failover`] decides, after each step, whether a planned turn advances or stops; [`cooldown`]
//! is the health coordinator's delay math and what a condition holds; [`health`] what shared
//! provider health says before an attempt and what the attempt writes after it. Imports run one way:
//! `failover` → `plan` → `grants`, `identity`; `health` → `cooldown` → `identity`, `providers`.
//!
//! Everything here is pure and shared with the Worker: the fixtures under `parity/` drive the
//! tests of both runtimes.

pub mod config;
pub mod contract;
pub mod cooldown;
pub mod failover;
pub mod generation;
pub mod grants;
pub mod health;
pub mod identity;
pub mod instructions;
pub mod plan;
pub mod providers;
pub mod schema;
pub mod tariffs;
pub mod turn;

#[cfg(test)]
mod parity;
