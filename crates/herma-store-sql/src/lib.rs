//! Herma's stores in SQL, every statement written once for SQLite and PostgreSQL.
//!
//! Layout: [`SqlStore`] implements [`herma_store::Store`] (`store`, `documents`,
//! `conversations`) and the governed ports (`governed`) as ordinary generic functions over a
//! [`Backend`] — the pool, transactions, migration lock and the few dialect spellings one engine
//! supplies (the backend crates). `query` holds the engine-neutral [`Query`] and its [`Arg`]s, `rows` the decoding of
//! rows into records through [`SqlRow`], `migrations` the migration runner, the migrations
//! written once ([`SHARED_MIGRATIONS`]) and their DDL tokens ([`expand_ddl`]).
//!
//! Portable SQL where the engines agree: `CAST(? AS TEXT) IS NULL OR …` for optional filters,
//! `CASE WHEN` rather than `max()`/`GREATEST()`, deletes by primary key rather than
//! `rowid`/`ctid`, `INSERT … AS alias … ON CONFLICT … DO UPDATE`, multi-row `VALUES`.
//!
//! Architecture invariant: a compare-and-set is one statement; governed and conversation writes
//! that race are one statement or one transaction (see `governed`, `conversations`), on every
//! backend alike.

mod backend;
mod conversations;
mod documents;
mod governed;
mod migrations;
mod query;
mod rows;
mod store;

use herma_store::{StoreError, StoreResult};
use serde_json::Value;

pub use backend::Backend;
pub use migrations::{
    DdlDialect, Migration, SHARED_MIGRATIONS, expand_ddl, migration_scripts, wrangler_migrations,
};
pub use query::{Arg, Query, Statement, numbered};
pub use rows::SqlRow;
pub use store::SqlStore;

/// A driver error as [`StoreError::Backend`].
pub fn backend(err: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(err.to_string())
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn to_i64(n: u64) -> StoreResult<i64> {
    i64::try_from(n).map_err(|_| corrupt("a counter exceeds the 64-bit signed range"))
}

fn to_u64(n: i64) -> StoreResult<u64> {
    u64::try_from(n).map_err(|_| corrupt("a negative counter"))
}

fn to_json(value: &Value) -> StoreResult<String> {
    serde_json::to_string(value).map_err(backend)
}
