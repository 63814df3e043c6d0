//! `herma conversations show`: one caller's conversation as an operator inspects it.

use clap::Subcommand;
use herma_core::CallerScope;

use crate::{DatabaseArg, Failure, open_app};

#[derive(Subcommand)]
pub enum ConversationsCommand {
    /// Print a conversation: version, expiry, transcript, the active request and recent turns
    /// with their attempts and private server_exception records (JSON).
    Show {
        /// The caller's scope, `key:<key_id>` (the key id is the 16 characters after `hmk_`).
        scope: String,
        /// The conversation id.
        id: String,
        #[command(flatten)]
        db: DatabaseArg,
    },
}

pub async fn run(command: ConversationsCommand) -> Result<(), Failure> {
    let ConversationsCommand::Show { scope, id, db } = command;
    let scope = CallerScope::parse(&scope).ok_or_else(|| {
        Failure::usage(format!(
            "`{scope}` is not a caller scope: write key:<key_id> (the 16 characters after hmk_)"
        ))
    })?;
    let settings = db.settings()?;
    let app = open_app(settings).await?;
    let shown = app.conversation_record(&scope, &id).await;
    app.shutdown().await;
    let shown = shown?;
    let text = serde_json::to_string_pretty(&shown).map_err(|e| Failure::runtime(e.to_string()))?;
    outln!("{text}")?;
    Ok(())
}
