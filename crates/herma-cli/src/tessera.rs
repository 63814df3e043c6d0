//! `herma tessera sync`: governed records from Tessera (or an export file) into the built-ins.

use clap::Subcommand;
use herma_app::tessera::{FileSource, HttpSource, SyncReport, TesseraSource};

use crate::records::progress;
use crate::{DatabaseArg, Failure, open_app};

#[derive(Subcommand)]
pub enum TesseraCommand {
    /// Pull every record page by page: starters become built-in provisions, nouns and verbs
    /// built-in context entries, each with its fabric_governance. Idempotent; prints the cursor
    /// to resume from when it stops early.
    Sync {
        /// Read a Tessera export file (JSON Lines) instead of HERMA_TESSERA_URL.
        #[arg(long, value_name = "FILE")]
        from: Option<String>,
        /// Resume after this cursor (skips removing records Tessera no longer publishes).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DatabaseArg,
    },
}

pub async fn run(command: TesseraCommand) -> Result<(), Failure> {
    let TesseraCommand::Sync {
        from,
        after,
        json,
        db,
    } = command;
    let settings = db.settings()?;
    let source: Box<dyn TesseraSource> = match (&from, &settings.tessera_url) {
        (Some(file), _) => {
            let bytes = std::fs::read(file)
                .map_err(|e| Failure::usage(format!("cannot read {file}: {e}")))?;
            Box::new(FileSource::parse(&bytes)?)
        }
        (None, Some(url)) => Box::new(HttpSource::new(
            url,
            settings.tessera_token.as_ref().map(|t| t.expose()),
            std::time::Duration::from_millis(settings.tessera_timeout_ms),
        )?),
        (None, None) => {
            return Err(Failure::usage(
                "no source: set HERMA_TESSERA_URL (and HERMA_TESSERA_TOKEN) or pass --from FILE",
            ));
        }
    };
    let app = open_app(settings).await?;
    let bar = progress(0, "syncing");
    let report = app
        .tessera_sync(source.as_ref(), after, &mut |r: &SyncReport| {
            bar.set_message(format!("syncing: page {}", r.pages));
            bar.set_length(u64::from(r.records));
            bar.set_position(u64::from(r.records));
        })
        .await;
    bar.finish_and_clear();
    app.shutdown().await;
    let report = report?;
    if json {
        let text =
            serde_json::to_string_pretty(&report).map_err(|e| Failure::runtime(e.to_string()))?;
        outln!("{text}")?;
    } else {
        outln!(
            "{} records in {} pages: {} created, {} updated, {} unchanged, {} removed; {} stored but not served (quarantined, unverified or untrusted), {} refused",
            report.records,
            report.pages,
            report.created,
            report.updated,
            report.unchanged,
            report.removed,
            report.not_served,
            report.refused.len()
        )?;
        for r in &report.refused {
            outln!("  refused {}: {}", r.uri, r.reason)?;
        }
    }
    match (&report.stopped, &report.resume_after) {
        (Some(why), Some(cursor)) => Err(Failure::runtime(format!(
            "{why}; resume with --after {cursor}"
        ))),
        (Some(why), None) => Err(Failure::runtime(format!("{why}; run the sync again"))),
        _ => Ok(()),
    }
}
