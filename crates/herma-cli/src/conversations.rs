//! `herma conversations show`: one caller's conversation as an operator inspects it;
//! `herma conversations budget`: the operator's summary of operator-funded turns.

use clap::Subcommand;
use herma_core::CallerScope;

use crate::output::{self, columns};
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
    /// Print reserved dollars per provider against its ceiling, today's Ollama calls, shared
    /// provider health with the next eligible time, upstream identity holds and paused
    /// providers (as `GET /v1/admin/conversation-budget` answers).
    Budget {
        /// Print the summary as JSON instead of tables.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DatabaseArg,
    },
}

pub async fn run(command: ConversationsCommand) -> Result<(), Failure> {
    let (scope, id, db) = match command {
        ConversationsCommand::Show { scope, id, db } => (scope, id, db),
        ConversationsCommand::Budget { json, db } => return budget(json, db).await,
    };
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

async fn budget(json: bool, db: DatabaseArg) -> Result<(), Failure> {
    let settings = db.settings()?;
    let app = open_app(settings).await?;
    let summary = app.conversation_budget().await;
    app.shutdown().await;
    let summary = summary?;
    if json {
        let text =
            serde_json::to_string_pretty(&summary).map_err(|e| Failure::runtime(e.to_string()))?;
        outln!("{text}")?;
        return Ok(());
    }
    let dash = || "-".to_owned();
    let mut rows = vec![vec![
        "PROVIDER".to_owned(),
        "MODEL".to_owned(),
        "ACCOUNT".to_owned(),
        "STATE".to_owned(),
        "RESERVED".to_owned(),
        "CEILING".to_owned(),
    ]];
    for p in &summary.providers {
        let state = if p.operator_disabled {
            "paused".to_owned()
        } else if let Some(problem) = &p.configuration_problem {
            problem.clone()
        } else {
            "configured".to_owned()
        };
        let (reserved, ceiling) = match (p.calls_today, &p.reserved_usd) {
            (Some(calls), _) => (
                format!("{calls} calls today"),
                p.calls_per_day
                    .map_or_else(dash, |cap| format!("{cap} calls per day")),
            ),
            (None, reserved) => (
                reserved.as_ref().map_or_else(dash, |r| format!("${r}")),
                p.budget_usd.as_ref().map_or_else(dash, |b| format!("${b}")),
            ),
        };
        rows.push(vec![
            p.provider.clone(),
            p.model.clone().unwrap_or_else(dash),
            p.account_scope.clone().unwrap_or_else(dash),
            state,
            reserved,
            ceiling,
        ]);
    }
    let mut text = format!("Operator-funded turns as of {}\n\n", summary.as_of);
    text.push_str(&columns(&rows));
    for (title, records) in [
        ("Provider health", &summary.resource_health),
        ("Upstream identity holds", &summary.identity_cooldowns),
    ] {
        text.push_str(&format!("\n{title}:\n"));
        if records.is_empty() {
            text.push_str("  none\n");
            continue;
        }
        let mut rows = vec![vec![
            "RESOURCE".to_owned(),
            "CONDITION".to_owned(),
            "NEXT ELIGIBLE".to_owned(),
            "SOURCE".to_owned(),
            "FAILURES".to_owned(),
            "PROBE".to_owned(),
        ]];
        for r in records {
            rows.push(vec![
                r.resource.clone(),
                r.condition.clone(),
                r.next_eligible_at.clone(),
                r.source.clone(),
                r.failures.to_string(),
                if r.probe_in_flight { "in flight" } else { "-" }.to_owned(),
            ]);
        }
        text.push_str(&columns(&rows));
    }
    if !summary.operator_disabled.is_empty() {
        text.push_str(&format!(
            "\nPaused by the operator (HERMA_CONVERSATION_DISABLED_PROVIDERS): {}\n",
            summary.operator_disabled.join(", ")
        ));
    }
    output::write(text.as_bytes())
}
