//! The store at the edge: `herma_store_sql`'s statements — the same SQL the native SQLite store
//! runs — on a D1 database, which is SQLite.
//!
//! What D1 changes, and how it is met:
//! - No interactive transactions. Every multi-statement write of the context and auth stores
//!   (imports, multi-row inserts, entity memory) is an atomic [`Backend::batch`], which D1 runs
//!   as one; [`Backend::begin`] refuses, so the writes that need one (conversation turns and the
//!   governed ledger, which the Worker does not serve yet) fail plainly rather than half-apply.
//! - At most 100 bound parameters per statement ([`Backend::MAX_PARAMS`]).
//! - Numbers cross as JavaScript doubles: an integer beyond ±2^53 is refused when bound, and
//!   read back as stored below it.
//! - Migrations are applied by `wrangler d1 migrations apply` from `migrations/`, generated
//!   from the SQLite backend's (a test keeps them equal); [`current`] refuses a database that
//!   is behind.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use herma_store::{StoreError, StoreResult};
use herma_store_sql::{Arg, Backend, DdlDialect, Migration, Query, SqlRow, SqlStore};
use serde::Deserialize;
use wasm_bindgen::{JsCast, JsValue};
use worker::send::SendFuture;
use worker::{D1Database, D1PreparedStatement};

/// The largest integer a JavaScript number holds exactly.
const MAX_SAFE: i64 = (1 << 53) - 1;

/// The D1 database under the Worker's store.
pub struct D1Backend {
    db: D1Database,
}

impl D1Backend {
    pub fn new(db: D1Database) -> Self {
        Self { db }
    }
}

/// A transaction D1 cannot open (see the module's notes).
pub enum NoTx {}

/// One column's value as D1 returned it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Number(f64),
    Text(String),
    Bytes(Vec<u8>),
}

/// A row as JavaScript returned it (D1 and a Durable Object's SQLite alike): its columns by
/// name.
#[derive(Debug)]
pub struct JsRow {
    cells: Vec<(Arc<str>, Cell)>,
}

fn no_column(column: &str) -> StoreError {
    StoreError::Backend(format!("no column `{column}` in the row"))
}

fn wrong_type(column: &str, wanted: &str) -> StoreError {
    StoreError::Corrupt(format!("column `{column}` is not {wanted}"))
}

impl JsRow {
    fn cell(&self, column: &str) -> StoreResult<&Cell> {
        self.cells
            .iter()
            .find(|(name, _)| &**name == column)
            .map(|(_, cell)| cell)
            .ok_or_else(|| no_column(column))
    }
}

fn integer(column: &str, n: f64) -> StoreResult<i64> {
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE as f64 {
        Ok(n as i64)
    } else {
        Err(wrong_type(column, "an integer within ±2^53"))
    }
}

impl SqlRow for JsRow {
    fn text(&self, column: &str) -> StoreResult<String> {
        self.opt_text(column)?
            .ok_or_else(|| wrong_type(column, "text"))
    }

    fn opt_text(&self, column: &str) -> StoreResult<Option<String>> {
        match self.cell(column)? {
            Cell::Null => Ok(None),
            Cell::Text(text) => Ok(Some(text.clone())),
            _ => Err(wrong_type(column, "text")),
        }
    }

    fn int(&self, column: &str) -> StoreResult<i64> {
        self.opt_int(column)?
            .ok_or_else(|| wrong_type(column, "an integer"))
    }

    fn opt_int(&self, column: &str) -> StoreResult<Option<i64>> {
        match self.cell(column)? {
            Cell::Null => Ok(None),
            Cell::Number(n) => integer(column, *n).map(Some),
            _ => Err(wrong_type(column, "an integer")),
        }
    }

    fn bytes(&self, column: &str) -> StoreResult<Vec<u8>> {
        match self.cell(column)? {
            Cell::Bytes(bytes) => Ok(bytes.clone()),
            _ => Err(wrong_type(column, "bytes")),
        }
    }
}

fn d1_error(err: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("D1: {err}"))
}

/// A result row as the JavaScript object D1 returned.
#[derive(Deserialize)]
pub(crate) struct RawRow(#[serde(with = "serde_wasm_bindgen::preserve")] JsValue);

fn cell(value: JsValue) -> StoreResult<Cell> {
    if value.is_null() || value.is_undefined() {
        return Ok(Cell::Null);
    }
    if let Some(n) = value.as_f64() {
        return Ok(Cell::Number(n));
    }
    if let Some(text) = value.as_string() {
        return Ok(Cell::Text(text));
    }
    if let Some(buffer) = value.dyn_ref::<js_sys::ArrayBuffer>() {
        return Ok(Cell::Bytes(js_sys::Uint8Array::new(buffer).to_vec()));
    }
    if let Some(view) = value.dyn_ref::<js_sys::Uint8Array>() {
        return Ok(Cell::Bytes(view.to_vec()));
    }
    if let Some(array) = value.dyn_ref::<js_sys::Array>() {
        // A blob as an array of byte values.
        let bytes = array
            .iter()
            .map(|b| {
                b.as_f64()
                    .filter(|n| (0.0..=255.0).contains(n))
                    .map(|n| n as u8)
            })
            .collect::<Option<Vec<u8>>>();
        return bytes
            .map(Cell::Bytes)
            .ok_or_else(|| d1_error("a column holds an array that is not bytes"));
    }
    Err(d1_error("a column of an unknown type"))
}

pub(crate) fn rows(raw: Vec<RawRow>) -> StoreResult<Vec<JsRow>> {
    let mut names: Vec<Arc<str>> = Vec::new();
    raw.into_iter()
        .map(|RawRow(object)| {
            let object: js_sys::Object = object
                .dyn_into()
                .map_err(|_| d1_error("a result row is not an object"))?;
            let entries = js_sys::Object::entries(&object);
            let mut cells = Vec::with_capacity(entries.length() as usize);
            for (at, entry) in entries.iter().enumerate() {
                let entry: js_sys::Array = entry.unchecked_into();
                let name = entry.get(0).as_string().unwrap_or_default();
                // Each row names the same columns: keep one copy of each name.
                let name = match names.get(at) {
                    Some(known) if **known == *name => known.clone(),
                    _ => {
                        let name: Arc<str> = name.into();
                        if at < names.len() {
                            names[at] = name.clone();
                        } else {
                            names.push(name.clone());
                        }
                        name
                    }
                };
                cells.push((name, cell(entry.get(1))?));
            }
            Ok(JsRow { cells })
        })
        .collect()
}

pub(crate) fn js_arg(arg: Arg<'_>) -> StoreResult<JsValue> {
    Ok(match arg {
        Arg::Int(None) | Arg::Text(None) => JsValue::NULL,
        Arg::Int(Some(n)) if (-MAX_SAFE..=MAX_SAFE).contains(&n) => JsValue::from_f64(n as f64),
        Arg::Int(Some(n)) => {
            return Err(StoreError::Backend(format!(
                "D1 and Durable Objects hold integers within ±2^53; {n} is beyond"
            )));
        }
        Arg::Text(Some(text)) => JsValue::from_str(&text),
        Arg::Bytes(bytes) => js_sys::Uint8Array::from(bytes.as_slice()).buffer().into(),
        // A text list is one JSON array, read with `json_each` as on SQLite.
        Arg::Texts(texts) => JsValue::from_str(
            &serde_json::to_string(&texts).map_err(|e| StoreError::Backend(e.to_string()))?,
        ),
    })
}

impl D1Backend {
    fn prepare(&self, query: Query<'_>) -> StoreResult<D1PreparedStatement> {
        let (sql, args) = query.into_parts();
        let values = args
            .into_iter()
            .map(js_arg)
            .collect::<StoreResult<Vec<_>>>()?;
        self.db
            .prepare(sql.into_owned())
            .bind(&values)
            .map_err(d1_error)
    }
}

fn no_transactions() -> StoreError {
    StoreError::Backend(
        "D1 has no interactive transactions: this write is not available at the edge yet".into(),
    )
}

#[async_trait]
impl Backend for D1Backend {
    type Row = JsRow;
    type Tx = NoTx;

    const NAME: &'static str = "d1";
    const TEXT_IN: &'static str = "IN (SELECT value FROM json_each(?))";
    const TEXT_ROWS: &'static str = "json_each(?)";
    const NOW_MILLIS: &'static str = "strftime('%s','now') * 1000";
    const BODY_BYTES: &'static str = "length(CAST(body AS BLOB))";
    /// D1 manages its own pages.
    const RECLAIM_SPACE: Option<&'static str> = None;
    const DDL: DdlDialect = DdlDialect {
        integer: "INTEGER",
        key_text: "TEXT",
        serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
        blob: "BLOB",
        without_rowid: "WITHOUT ROWID",
    };
    /// Applied by wrangler from `migrations/` (the SQLite backend's, generated), not here.
    const ENGINE_MIGRATIONS: &'static [Migration] = &[];
    const MAX_PARAMS: usize = 100;

    fn placeholders(sql: &str) -> Cow<'_, str> {
        Cow::Borrowed(sql)
    }

    async fn fetch(&self, query: Query<'_>) -> StoreResult<Vec<JsRow>> {
        let statement = self.prepare(query)?;
        SendFuture::new(async move {
            let result = statement.all().await.map_err(d1_error)?;
            rows(result.results::<RawRow>().map_err(d1_error)?)
        })
        .await
    }

    async fn fetch_optional(&self, query: Query<'_>) -> StoreResult<Option<JsRow>> {
        Ok(self.fetch(query).await?.into_iter().next())
    }

    async fn execute(&self, query: Query<'_>) -> StoreResult<u64> {
        let statement = self.prepare(query)?;
        SendFuture::new(async move {
            let result = statement.run().await.map_err(d1_error)?;
            let meta = result.meta().map_err(d1_error)?;
            Ok(meta.and_then(|m| m.changes).unwrap_or(0) as u64)
        })
        .await
    }

    async fn batch(&self, queries: Vec<Query<'_>>) -> StoreResult<Vec<Vec<JsRow>>> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let statements = queries
            .into_iter()
            .map(|q| self.prepare(q))
            .collect::<StoreResult<Vec<_>>>()?;
        let db = &self.db;
        SendFuture::new(async move {
            let results = db.batch(statements).await.map_err(d1_error)?;
            results
                .iter()
                .map(|result| rows(result.results::<RawRow>().map_err(d1_error)?))
                .collect()
        })
        .await
    }

    async fn begin(&self) -> StoreResult<NoTx> {
        Err(no_transactions())
    }

    async fn begin_migration(&self) -> StoreResult<NoTx> {
        Err(StoreError::Backend(
            "a D1 database is migrated by `wrangler d1 migrations apply` (docs/deploy-cloudflare.md)"
                .into(),
        ))
    }

    async fn fetch_in(tx: &mut NoTx, _query: Query<'_>) -> StoreResult<Vec<JsRow>> {
        match *tx {}
    }

    async fn execute_in(tx: &mut NoTx, _query: Query<'_>) -> StoreResult<u64> {
        match *tx {}
    }

    async fn run_script(tx: &mut NoTx, _sql: &str) -> StoreResult<()> {
        match *tx {}
    }

    async fn commit(tx: NoTx) -> StoreResult<()> {
        match tx {}
    }

    async fn rollback(tx: NoTx) -> StoreResult<()> {
        match tx {}
    }
}

/// `store` when its migrations are current; else an error saying how to apply them.
pub async fn current(store: SqlStore<D1Backend>) -> StoreResult<SqlStore<D1Backend>> {
    match store.migration_level().await? {
        (Some(applied), known) if applied >= known => Ok(store),
        (applied, known) => Err(StoreError::Backend(format!(
            "the D1 database is at migration {} but this build needs {known}: run `wrangler d1 migrations apply herma --remote` (--local for wrangler dev)",
            applied.map_or_else(|| "none".to_owned(), |v| v.to_string())
        ))),
    }
}
