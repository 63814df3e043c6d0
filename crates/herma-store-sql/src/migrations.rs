//! Migrations: the runner every backend shares, the migrations written once for every engine and
//! the DDL tokens they are written in.
//!
//! A backend's own migrations ([`Backend::ENGINE_MIGRATIONS`], 0001–0006) were written per engine and
//! stay as deployed databases applied them. Every later one is written once, in
//! `migrations/NNNN_name.sql` of this crate, naming the column types and table options that
//! differ by token ([`expand_ddl`]), and listed in [`SHARED_MIGRATIONS`].

use std::borrow::Cow;

use herma_store::{AppliedMigration, StoreError, StoreResult};

use crate::{Backend, SqlRow, SqlStore};

/// One embedded migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// The migrations written once for every engine, in DDL tokens, in order; they run after the
/// backend's own. The next is `migrations/0008_<name>.sql`, listed as
/// `Migration { version: 8, name: "<name>", sql: include_str!("../migrations/0008_<name>.sql") }`.
pub const SHARED_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 7,
        name: "conversations",
        sql: include_str!("../migrations/0007_conversations.sql"),
    },
    Migration {
        version: 8,
        name: "provider_health",
        sql: include_str!("../migrations/0008_provider_health.sql"),
    },
    Migration {
        version: 9,
        name: "retention",
        sql: include_str!("../migrations/0009_retention.sql"),
    },
    Migration {
        version: 10,
        name: "receipts_by_rowid",
        sql: include_str!("../migrations/0010_receipts_by_rowid.sql"),
    },
];

/// How one engine spells the DDL tokens of a shared migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdlDialect {
    /// `{integer}`: a 64-bit integer column.
    pub integer: &'static str,
    /// `{key_text}`: text that keys, compares and orders byte by byte (as the in-memory store).
    pub key_text: &'static str,
    /// `{serial}`: an auto-incrementing 64-bit primary key column (the table then keeps its
    /// rowid in SQLite: no `{without_rowid}`).
    pub serial: &'static str,
    /// `{blob}`: a bytes column.
    pub blob: &'static str,
    /// `{without_rowid}`: after a table's closing parenthesis, a table clustered by its primary
    /// key (SQLite's `WITHOUT ROWID`; PostgreSQL has no such option).
    pub without_rowid: &'static str,
}

impl DdlDialect {
    /// The spelling of token `name` (without braces).
    fn spell(&self, name: &str) -> Option<&'static str> {
        Some(match name {
            "integer" => self.integer,
            "key_text" => self.key_text,
            "serial" => self.serial,
            "blob" => self.blob,
            "without_rowid" => self.without_rowid,
            _ => return None,
        })
    }
}

/// `sql` with its DDL tokens (`{integer}`, `{key_text}`, `{serial}`, `{blob}`,
/// `{without_rowid}`) spelled as `dialect` spells them. Braces around anything but a lowercase
/// word (`DEFAULT '{}'`) are kept; an unknown `{word}` is an error naming it.
pub fn expand_ddl(sql: &str, dialect: &DdlDialect) -> Result<String, String> {
    let mut out = String::with_capacity(sql.len() + 64);
    let mut rest = sql;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let word = after
            .find('}')
            .map(|close| &after[..close])
            .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        match word {
            Some(word) => {
                let spelled = dialect
                    .spell(word)
                    .ok_or_else(|| format!("unknown DDL token `{{{word}}}`"))?;
                out.push_str(spelled);
                rest = &after[word.len() + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The ledger of applied migrations.
const LEDGER: &str = "CREATE TABLE IF NOT EXISTS herma_migrations (
    version {integer} PRIMARY KEY, name TEXT NOT NULL, applied_at {integer} NOT NULL)";

fn failed(migration: &Migration, err: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!(
        "migration {} ({}) failed: {err}",
        migration.version, migration.name
    ))
}

/// Every migration `B` applies, in order, as the SQL it runs: the backend's own, then the shared
/// ones spelled in its DDL.
pub fn migration_scripts<B: Backend>() -> StoreResult<Vec<(Migration, Cow<'static, str>)>> {
    let own = B::ENGINE_MIGRATIONS.iter().map(|m| (m, false));
    let shared = SHARED_MIGRATIONS.iter().map(|m| (m, true));
    own.chain(shared)
        .map(|(migration, in_tokens)| {
            let sql = if in_tokens {
                Cow::Owned(expand_ddl(migration.sql, &B::DDL).map_err(|e| failed(migration, e))?)
            } else {
                Cow::Borrowed(migration.sql)
            };
            Ok((*migration, sql))
        })
        .collect()
}

/// `B`'s migrations as `wrangler d1 migrations` files (name, contents), for a D1 database —
/// which is SQLite, so `B` is the SQLite backend: each file runs one migration and records it
/// in the same ledger [`SqlStore::migrate`] keeps, so both say what a database has.
pub fn wrangler_migrations<B: Backend>() -> StoreResult<Vec<(String, String)>> {
    let ledger = expand_ddl(LEDGER, &B::DDL).map_err(StoreError::Backend)?;
    migration_scripts::<B>().map(|scripts| {
        scripts
            .into_iter()
            .enumerate()
            .map(|(at, (migration, sql))| {
                let Migration { version, name, .. } = migration;
                let mut file = format!(
                    "-- Herma's migration {version} ({name}), as the SQLite store applies it.\n\
                     -- Generated by `cargo test -p herma-store-sqlite wrangler_migrations`; do not\n\
                     -- edit (HERMA_BLESS=1 writes it again).\n\n"
                );
                if at == 0 {
                    file.push_str(&ledger);
                    file.push_str(";\n\n");
                }
                file.push_str(sql.trim_end());
                file.push_str(&format!(
                    "\n\nINSERT INTO herma_migrations (version, name, applied_at)\n  \
                     VALUES ({version}, '{name}', {});\n",
                    B::NOW_MILLIS
                ));
                (format!("{version:04}_{name}.sql"), file)
            })
            .collect()
    })
}

impl<B: Backend> SqlStore<B> {
    /// The newest migration the database has applied (`None`: none, or no ledger at all), and
    /// the newest this build knows.
    pub async fn migration_level(&self) -> StoreResult<(Option<i64>, i64)> {
        let known = SHARED_MIGRATIONS.last().map_or(0, |m| m.version);
        let query = B::query("SELECT max(version) AS version FROM herma_migrations");
        let applied = match self.db.fetch_optional(query).await {
            Ok(row) => row.map(|r| r.opt_int("version")).transpose()?.flatten(),
            // No ledger (SQLite and D1 say "no such table", PostgreSQL "does not exist"):
            // nothing has been applied. Any other failure is the database's, and says so.
            Err(StoreError::Backend(message))
                if message.contains("no such table") || message.contains("does not exist") =>
            {
                None
            }
            Err(other) => return Err(other),
        };
        Ok((applied, known))
    }

    /// Applies the pending migrations (the backend's own, then the shared ones) in one
    /// transaction under the backend's migration lock, so concurrent starts apply each once.
    pub(crate) async fn apply_migrations(&self) -> StoreResult<Vec<AppliedMigration>> {
        let mut tx = self.db.begin_migration().await?;
        let ledger = expand_ddl(LEDGER, &B::DDL).map_err(StoreError::Backend)?;
        B::run_script(&mut tx, &ledger).await?;
        let done = B::fetch_in(&mut tx, B::query("SELECT version FROM herma_migrations"))
            .await?
            .iter()
            .map(|row| row.int("version"))
            .collect::<StoreResult<Vec<_>>>()?;
        let record = format!(
            "INSERT INTO herma_migrations (version, name, applied_at) VALUES (?, ?, {})",
            B::NOW_MILLIS
        );
        let record = B::statement(&record);
        let mut applied = Vec::new();
        for (migration, sql) in migration_scripts::<B>()? {
            if done.contains(&migration.version) {
                continue;
            }
            B::run_script(&mut tx, &sql).await.map_err(|e| match e {
                StoreError::Backend(message) => failed(&migration, message),
                other => other,
            })?;
            let row = record.query().bind(migration.version).bind(migration.name);
            B::execute_in(&mut tx, row).await?;
            applied.push(AppliedMigration {
                version: migration.version,
                name: migration.name.to_owned(),
            });
        }
        B::commit(tx).await?;
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dialect for the tests, every token spelled differently from its name.
    const DIALECT: DdlDialect = DdlDialect {
        integer: "BIGINT",
        key_text: "TEXT COLLATE \"C\"",
        serial: "BIGSERIAL PRIMARY KEY",
        blob: "BYTEA",
        without_rowid: "WITHOUT ROWID",
    };

    #[test]
    fn ddl_tokens_are_spelled_by_the_dialect() {
        let sql = "CREATE TABLE t (
    seq   {serial},
    scope {key_text} NOT NULL,
    n     {integer} NOT NULL,
    data  {blob},
    meta  TEXT NOT NULL DEFAULT '{}',
    body  TEXT NOT NULL DEFAULT '{\"a\": {\"b\": 1}}'
) {without_rowid};";
        assert_eq!(
            expand_ddl(sql, &DIALECT).unwrap(),
            "CREATE TABLE t (
    seq   BIGSERIAL PRIMARY KEY,
    scope TEXT COLLATE \"C\" NOT NULL,
    n     BIGINT NOT NULL,
    data  BYTEA,
    meta  TEXT NOT NULL DEFAULT '{}',
    body  TEXT NOT NULL DEFAULT '{\"a\": {\"b\": 1}}'
) WITHOUT ROWID;"
        );
    }

    #[test]
    fn an_unknown_ddl_token_is_an_error_and_other_braces_are_text() {
        assert_eq!(
            expand_ddl("CREATE TABLE t (n {int})", &DIALECT),
            Err("unknown DDL token `{int}`".to_owned())
        );
        assert_eq!(
            expand_ddl("a { b } {", &DIALECT).as_deref(),
            Ok("a { b } {")
        );
    }

    #[test]
    fn shared_migrations_follow_the_backends_own_in_order_and_expand() {
        let mut last = 6;
        for migration in SHARED_MIGRATIONS {
            assert!(migration.version > last, "{migration:?} is out of order");
            last = migration.version;
            assert!(expand_ddl(migration.sql, &DIALECT).is_ok(), "{migration:?}");
        }
    }
}
