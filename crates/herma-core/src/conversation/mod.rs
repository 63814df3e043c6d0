//! Typed work conversations: what a caller's work contracts allow a model to propose.
//! Pure decisions only; the turn lifecycle, providers and stores live elsewhere.

pub mod contract;
