//! Statements and their arguments, independent of the engine.
//!
//! Statements are written with `?` placeholders. A [`Statement`] holds the text as one backend
//! spells them (rewritten once by [`Backend::placeholders`]); each run takes a [`Query`] from it
//! and binds its [`Arg`]s in order.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::Backend;

/// One bound value, in the few kinds Herma's statements use. NULLs keep their type (PostgreSQL
/// types every parameter).
#[derive(Clone, Debug, PartialEq)]
pub enum Arg<'a> {
    /// A 64-bit integer or NULL.
    Int(Option<i64>),
    /// Text or NULL.
    Text(Option<Cow<'a, str>>),
    /// A blob.
    Bytes(Vec<u8>),
    /// A list of texts, read where a statement spells [`Backend::TEXT_IN`] or
    /// [`Backend::TEXT_ROWS`].
    Texts(Vec<&'a str>),
}

impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Self::Int(Some(n))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(n: Option<i64>) -> Self {
        Self::Int(n)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Self {
        Self::Text(Some(Cow::Borrowed(text)))
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(text: &'a String) -> Self {
        Self::Text(Some(Cow::Borrowed(text)))
    }
}

impl<'a> From<Cow<'a, str>> for Arg<'a> {
    fn from(text: Cow<'a, str>) -> Self {
        Self::Text(Some(text))
    }
}

impl From<String> for Arg<'_> {
    fn from(text: String) -> Self {
        Self::Text(Some(Cow::Owned(text)))
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(text: Option<&'a str>) -> Self {
        Self::Text(text.map(Cow::Borrowed))
    }
}

impl From<Vec<u8>> for Arg<'_> {
    fn from(bytes: Vec<u8>) -> Self {
        Self::Bytes(bytes)
    }
}

impl<'a> From<Vec<&'a str>> for Arg<'a> {
    fn from(texts: Vec<&'a str>) -> Self {
        Self::Texts(texts)
    }
}

impl<'a> From<&'a [String]> for Arg<'a> {
    fn from(texts: &'a [String]) -> Self {
        Self::Texts(texts.iter().map(String::as_str).collect())
    }
}

/// A statement's text in one backend's placeholder spelling: rewritten once, run any number of
/// times (one [`Query`] per run).
#[derive(Debug)]
pub struct Statement<'s> {
    sql: Cow<'s, str>,
}

impl<'s> Statement<'s> {
    /// `sql` (with `?` placeholders) as backend `B` spells it.
    pub(crate) fn new<B: Backend>(sql: &'s str) -> Self {
        Self {
            sql: B::placeholders(sql),
        }
    }

    /// A run of the statement, borrowing its text.
    pub fn query(&self) -> Query<'_> {
        Query::new(Cow::Borrowed(&self.sql))
    }

    /// The only run of the statement.
    pub fn into_query(self) -> Query<'s> {
        Query::new(self.sql)
    }
}

/// One run of a statement: its text in the backend's spelling and the arguments bound so far,
/// in placeholder order. Backends take it apart with [`Query::into_parts`].
#[derive(Debug)]
pub struct Query<'a> {
    sql: Cow<'a, str>,
    args: Vec<Arg<'a>>,
}

impl<'a> Query<'a> {
    fn new(sql: Cow<'a, str>) -> Self {
        Self {
            sql,
            args: Vec::new(),
        }
    }

    /// Binds the next placeholder.
    pub fn bind(mut self, arg: impl Into<Arg<'a>>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The text (already in the backend's spelling) and the arguments.
    pub fn into_parts(self) -> (Cow<'a, str>, Vec<Arg<'a>>) {
        (self.sql, self.args)
    }
}

/// `?` placeholders as PostgreSQL's `$1, $2, …` (no statement has a literal `?`).
pub fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    for (n, part) in sql.split('?').enumerate() {
        if n > 0 {
            out.push('$');
            push_decimal(&mut out, n);
        }
        out.push_str(part);
    }
    out
}

fn push_decimal(out: &mut String, n: usize) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// A multi-row `INSERT`: `head` (up to `VALUES `), one `row` (a parenthesized placeholder
/// list) per row, then `tail`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowsInsert {
    pub(crate) head: &'static str,
    pub(crate) row: &'static str,
    pub(crate) tail: &'static str,
}

impl RowsInsert {
    /// The statement for `rows` rows.
    /// `wanted` rows, or as many as fit in one statement of `B` (at least one).
    pub(crate) fn rows_within<B: Backend>(&self, wanted: usize) -> usize {
        let per_row = self.row.matches('?').count().max(1);
        wanted.min(B::MAX_PARAMS / per_row).max(1)
    }

    pub(crate) fn sql(&self, rows: usize) -> String {
        let mut sql =
            String::with_capacity(self.head.len() + rows * (self.row.len() + 2) + self.tail.len());
        sql.push_str(self.head);
        for i in 0..rows {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(self.row);
        }
        sql.push_str(self.tail);
        sql
    }
}

/// The statements of one [`RowsInsert`] for 1 to `max_rows` rows in one backend's spelling,
/// each built on first use and kept: a batch of a given size is the same text every time.
pub(crate) struct RowsStatements {
    insert: RowsInsert,
    built: Box<[OnceLock<Box<str>>]>,
}

impl RowsStatements {
    pub(crate) fn new(insert: RowsInsert, max_rows: usize) -> Self {
        Self {
            insert,
            built: (0..max_rows).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The most rows one statement takes.
    pub(crate) fn max_rows(&self) -> usize {
        self.built.len()
    }

    /// A run of the statement for `rows` rows, spelled for backend `B`.
    pub(crate) fn query<B: Backend>(&self, rows: usize) -> Query<'_> {
        let build = || B::placeholders(&self.insert.sql(rows)).into_owned();
        let sql = match rows.checked_sub(1).and_then(|i| self.built.get(i)) {
            Some(cell) => Cow::Borrowed(&**cell.get_or_init(|| build().into())),
            None => Cow::Owned(build()),
        };
        let per_row = self.insert.row.matches('?').count();
        Query {
            sql,
            args: Vec::with_capacity(rows * per_row),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order() {
        assert_eq!(
            numbered("SELECT a FROM t WHERE b = ? AND c IN (?, ?)"),
            "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)"
        );
        assert_eq!(numbered("SELECT 1"), "SELECT 1");
        let many = vec!["?"; 120].join(", ");
        let spelled: Vec<String> = (1..=120).map(|n| format!("${n}")).collect();
        assert_eq!(numbered(&many), spelled.join(", "));
    }

    #[test]
    fn a_rows_insert_repeats_its_row() {
        let insert = RowsInsert {
            head: "INSERT INTO t (a, b) VALUES ",
            row: "(?, ?)",
            tail: " ON CONFLICT (a) DO NOTHING",
        };
        assert_eq!(
            insert.sql(3),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?) ON CONFLICT (a) DO NOTHING"
        );
        assert_eq!(
            insert.sql(1),
            "INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT (a) DO NOTHING"
        );
    }
}
