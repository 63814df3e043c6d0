//! The governed engine's tests: every behaviour on memory, SQLite and PostgreSQL.

// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod crash;
mod http;
mod property;
mod step;
mod structured;
mod support;
mod text;
