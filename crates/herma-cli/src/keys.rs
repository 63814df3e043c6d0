//! `herma keys create|list|revoke`: straight to the database (the bootstrap path).

use clap::Subcommand;
use herma_app::keys::NewKey;
use herma_core::key::{Scope, Scopes};

use crate::output::{self, columns};
use crate::{DatabaseArg, Failure, open_app};

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Issue a key and print it once.
    Create {
        /// Comma-separated scopes: route, configure, admin.
        #[arg(long, value_name = "SCOPES", default_value = "route")]
        scope: String,
        /// Add the admin scope (manage keys and built-ins).
        #[arg(long)]
        admin: bool,
        /// The harness this key attests (required with configure), e.g. claude-code.
        #[arg(long, value_name = "NAME")]
        harness: Option<String>,
        /// A note for yourself: where the key is used.
        #[arg(long, value_name = "TEXT", default_value = "")]
        label: String,
        /// A cohort the caller belongs to (repeatable): cohort-scoped governed records become
        /// visible to it.
        #[arg(long = "cohort", value_name = "NAME")]
        cohorts: Vec<String>,
        /// Print JSON: {"key", "key_id", "caller_scope", "scopes", …}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DatabaseArg,
    },
    /// List keys (never secrets).
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DatabaseArg,
    },
    /// Revoke a key by id.
    Revoke {
        key_id: String,
        #[command(flatten)]
        db: DatabaseArg,
    },
}

pub async fn run(command: KeysCommand) -> Result<(), Failure> {
    match command {
        KeysCommand::Create {
            scope,
            admin,
            harness,
            label,
            cohorts,
            json,
            db,
        } => {
            let mut scopes = Scopes::parse_list(&scope, "--scope")?;
            if admin {
                scopes = Scopes::new(scopes.iter().chain([Scope::Admin]));
            }
            let app = open_app(db.settings()?).await?;
            let issued = app
                .issue_key(NewKey {
                    scopes,
                    harness,
                    label,
                    cohorts,
                })
                .await?;
            if json {
                outln!(
                    "{}",
                    serde_json::to_string(&issued).map_err(|e| Failure::runtime(e.to_string()))?
                )?;
            } else {
                outln!(
                    "Created key {} (caller scope {}, scopes {}{}).\n\n  {}\n\nThis is the only time the key is shown: Herma keeps only its SHA-256 digest.\nSend it as `Authorization: Bearer <key>` or `x-api-key`{}.",
                    issued.key_id,
                    issued.caller_scope,
                    issued.scopes.to_list(),
                    issued
                        .harness
                        .as_deref()
                        .map(|h| format!(", harness {h}"))
                        .unwrap_or_default(),
                    issued.key,
                    issued
                        .harness
                        .as_deref()
                        .map(|h| format!("; configure requests also need `X-Herma-Harness: {h}`"))
                        .unwrap_or_default(),
                )?;
            }
            Ok(())
        }
        KeysCommand::List { json, db } => {
            let app = open_app(db.settings()?).await?;
            let keys = app.list_keys().await?;
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&keys)
                        .map_err(|e| Failure::runtime(e.to_string()))?
                )?;
                return Ok(());
            }
            if keys.is_empty() {
                outln!(
                    "no keys yet: herma keys create --scope route,configure --harness claude-code"
                )?;
                return Ok(());
            }
            let header = ["KEY ID", "SCOPES", "HARNESS", "STATUS", "CREATED", "LABEL"];
            let mut rows = vec![header.map(str::to_owned).to_vec()];
            rows.extend(keys.iter().map(|k| {
                vec![
                    k.key_id.to_string(),
                    k.scopes.to_list(),
                    k.harness.clone().unwrap_or_else(|| "-".to_owned()),
                    if k.is_revoked() { "revoked" } else { "active" }.to_owned(),
                    k.created_at.to_string(),
                    // Labels written before they were checked may hold anything: shown escaped.
                    printable(&k.label),
                ]
            }));
            output::write(columns(&rows).as_bytes())
        }
        KeysCommand::Revoke { key_id, db } => {
            let app = open_app(db.settings()?).await?;
            let key = app.revoke_key(&key_id).await?;
            outln!(
                "revoked {} (running servers refuse it within one second)",
                key.key_id
            )?;
            Ok(())
        }
    }
}

/// `text` with control and bidirectional characters escaped (`\u{1b}`), so a stored label can
/// never drive the terminal.
fn printable(text: &str) -> String {
    if herma_core::model::unprintable(text).is_none() {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if herma_core::model::unprintable(c.encode_utf8(&mut [0; 4])).is_some() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
