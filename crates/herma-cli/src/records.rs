//! `herma provisions|context import|export`: JSON or JSON Lines, all or nothing.

use std::io::IsTerminal;

use clap::Subcommand;
use herma_app::records::Managed;
use herma_app::transfer::{Format, parse_records, write_records};
use herma_core::CallerScope;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{DatabaseArg, Failure, open_app, output};

#[derive(Subcommand)]
pub enum TransferCommand {
    /// Validate every record of FILE, then write them all in one transaction.
    Import {
        /// A JSON array (.json) or one record per line (.jsonl).
        file: String,
        /// Whose records: `key:<key_id>`.
        #[arg(
            long,
            value_name = "SCOPE",
            conflicts_with = "builtin",
            required_unless_present = "builtin"
        )]
        caller: Option<String>,
        /// Write the system built-ins instead of a caller's records.
        #[arg(long)]
        builtin: bool,
        /// json or jsonl (default: from the file extension).
        #[arg(long)]
        format: Option<String>,
        #[command(flatten)]
        db: DatabaseArg,
    },
    /// Write every record of a scope (re-importable).
    Export {
        #[arg(
            long,
            value_name = "SCOPE",
            conflicts_with = "builtin",
            required_unless_present = "builtin"
        )]
        caller: Option<String>,
        #[arg(long)]
        builtin: bool,
        /// json or jsonl (default: from --output's extension, else json).
        #[arg(long)]
        format: Option<String>,
        /// Write here instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        output: Option<String>,
        #[command(flatten)]
        db: DatabaseArg,
    },
}

pub(crate) fn scope(caller: Option<&str>, builtin: bool) -> Result<CallerScope, Failure> {
    if builtin {
        return Ok(CallerScope::system_builtin());
    }
    let raw = caller.unwrap_or_default();
    CallerScope::parse(raw).ok_or_else(|| {
        Failure::usage(format!(
            "--caller `{raw}` is not a caller scope (key:<key_id>)"
        ))
    })
}

pub(crate) fn format(explicit: Option<&str>, path: Option<&str>) -> Result<Format, Failure> {
    match explicit {
        Some(raw) => Format::parse(raw)
            .ok_or_else(|| Failure::usage(format!("--format `{raw}`: use json or jsonl"))),
        None => Ok(path.map(Format::for_path).unwrap_or(Format::Json)),
    }
}

pub(crate) fn progress(total_hint: u64, message: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total_hint);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message.to_owned());
    bar
}

pub async fn run<D: Managed>(command: TransferCommand, plural: &str) -> Result<(), Failure> {
    match command {
        TransferCommand::Import {
            file,
            caller,
            builtin,
            format: fmt,
            db,
        } => {
            let scope = scope(caller.as_deref(), builtin)?;
            let format = format(fmt.as_deref(), Some(&file))?;
            let bytes = std::fs::read(&file)
                .map_err(|e| Failure::usage(format!("cannot read {file}: {e}")))?;
            let bar = progress(0, "validating");
            let records: Vec<D> = parse_records(&bytes, format, &mut |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })
            .inspect_err(|_| bar.abandon())?;
            bar.finish_and_clear();
            let app = open_app(db.settings()?).await?;
            let spinner = progress(records.len() as u64, "writing");
            spinner.set_position(0);
            let summary = app.import_records(&scope, &records).await?;
            spinner.finish_and_clear();
            outln!(
                "imported {} {plural} into {scope}: {} created, {} updated, {} unchanged",
                records.len(),
                summary.created,
                summary.updated,
                summary.unchanged
            )?;
            Ok(())
        }
        TransferCommand::Export {
            caller,
            builtin,
            format: fmt,
            output,
            db,
        } => {
            let scope = scope(caller.as_deref(), builtin)?;
            let format = format(fmt.as_deref(), output.as_deref())?;
            let app = open_app(db.settings()?).await?;
            let stored = app.export_records::<D>(&scope).await?;
            let specs: Vec<&D> = stored.iter().map(D::spec_of).collect();
            let bytes = write_records(&specs, format)?;
            match output {
                Some(path) => {
                    std::fs::write(&path, &bytes)
                        .map_err(|e| Failure::runtime(format!("cannot write {path}: {e}")))?;
                    output::note(&format!(
                        "exported {} {plural} from {scope} to {path}",
                        specs.len()
                    ));
                }
                None => output::write(&bytes)?,
            }
            Ok(())
        }
    }
}
