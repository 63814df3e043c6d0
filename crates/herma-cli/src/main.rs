//! `herma`: run the server and manage its database.
//!
//! Every command reads the `HERMA_*` settings from the environment (flags override them),
//! validates them all at once and names each invalid one. Output goes through [`output`], so a
//! reader that closes early never makes a command panic.

// `print!` and friends panic on a closed pipe: `output` writes instead.
#![deny(clippy::print_stdout, clippy::print_stderr)]

/// mimalloc instead of glibc's allocator: a request allocates and frees many small buffers
/// across threads (docs/performance.md measures the difference).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[macro_use]
mod output;
mod config;
mod conversations;
mod keys;
mod models;
mod records;
mod rules;
mod serve;
mod tessera;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use herma_app::App;
use herma_cli::wiring;
use herma_core::settings::table::{BIND, DATABASE_URL};
use herma_core::settings::{LogFormat, Settings};

#[derive(Parser)]
#[command(
    name = "herma",
    version,
    about = "Context-shimming middleware for coding harnesses"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the database is; shared by every command that opens it.
#[derive(Args, Clone, Default)]
struct DatabaseArg {
    /// `sqlite://PATH` or `postgres://…` (default: HERMA_DATABASE_URL, else sqlite://herma.db).
    #[arg(long, value_name = "URL")]
    database: Option<String>,
}

impl DatabaseArg {
    /// Settings from the environment with `--database` applied.
    fn settings(&self) -> Result<Settings, Failure> {
        settings(&[(DATABASE_URL.name, self.database.as_ref())])
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (migrates the database and loads the starters first).
    Serve {
        /// Address to listen on (default: HERMA_BIND, else 127.0.0.1:7730).
        #[arg(long, value_name = "ADDR")]
        bind: Option<String>,
        #[command(flatten)]
        db: DatabaseArg,
    },
    /// Apply pending database migrations.
    Migrate {
        #[command(flatten)]
        db: DatabaseArg,
    },
    /// Delete receipts and rule outcomes older than their retention settings, now.
    Prune {
        #[command(flatten)]
        db: DatabaseArg,
    },
    /// Issue, list and revoke keys (writes straight to the database).
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Inspect the configuration.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// Import and export provisions.
    Provisions {
        #[command(subcommand)]
        command: records::TransferCommand,
    },
    /// Import and export context entries.
    Context {
        #[command(subcommand)]
        command: records::TransferCommand,
    },
    /// Check the models of semantic and micromodel rules.
    Models {
        #[command(subcommand)]
        command: models::ModelsCommand,
    },
    /// Evaluate a caller's rules against labelled prompts.
    Rules {
        #[command(subcommand)]
        command: rules::RulesCommand,
    },
    /// Sync governed records from Tessera.
    Tessera {
        #[command(subcommand)]
        command: tessera::TesseraCommand,
    },
    /// Inspect typed work conversations.
    Conversations {
        #[command(subcommand)]
        command: conversations::ConversationsCommand,
    },
}

/// A command failure: printed as `error: …`; `usage` failures exit 2, others 1.
pub struct Failure {
    message: String,
    usage: bool,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            usage: true,
        }
    }

    pub fn runtime(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            usage: false,
        }
    }
}

impl From<herma_core::Problem> for Failure {
    fn from(problem: herma_core::Problem) -> Self {
        let mut message = problem.detail.clone();
        for error in &problem.errors {
            if !error.pointer.is_empty() || error.detail != problem.detail {
                message.push_str(&format!(
                    "\n  {} {}",
                    if error.pointer.is_empty() {
                        "(body)"
                    } else {
                        &error.pointer
                    },
                    error.detail
                ));
            }
        }
        let usage = matches!(
            problem.code,
            herma_core::ProblemCode::ValidationFailed
                | herma_core::ProblemCode::InvalidJson
                | herma_core::ProblemCode::NotFound
        );
        Self { message, usage }
    }
}

/// The process environment as a map (the core parses settings from a map).
fn environment() -> BTreeMap<String, String> {
    std::env::vars().collect()
}

/// Settings from the environment with flag overrides, every error named.
fn settings(overrides: &[(&str, Option<&String>)]) -> Result<Settings, Failure> {
    let mut env = environment();
    for (name, value) in overrides {
        if let Some(value) = value {
            env.insert((*name).to_owned(), (*value).clone());
        }
    }
    Settings::from_map(&env).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        Failure::usage(format!("invalid configuration:\n{}", lines.join("\n")))
    })
}

fn init_logging(settings: &Settings) {
    let filter = tracing_subscriber::EnvFilter::try_new(&settings.log_filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match settings.log_format {
        LogFormat::Json => builder.json().try_init(),
        // DefaultFields' text, written faster (`herma_cli::log_fields`).
        LogFormat::Text => builder
            .fmt_fields(herma_cli::log_fields::PlainFields)
            .try_init(),
    };
}

/// Opens and migrates the configured database and loads the built-in starters (idempotent:
/// unchanged starters keep their versions).
async fn open_app(settings: Settings) -> Result<Arc<App>, Failure> {
    open_app_journaled(settings, false).await
}

/// The app; with `journaled`, receipts are journaled (`HERMA_RECEIPT_JOURNAL_DIR`) and what a
/// crashed process left in the journal is stored first.
async fn open_app_journaled(settings: Settings, journaled: bool) -> Result<Arc<App>, Failure> {
    let shown = settings.database.redacted();
    let connected = wiring::connect(&settings.database, settings.database_pool_size)
        .await
        .map_err(|e| Failure::runtime(format!("cannot open the database {shown}: {e}")))?;
    let applied = connected
        .store
        .migrate()
        .await
        .map_err(|e| Failure::runtime(format!("migrating {shown} failed: {e}")))?;
    for m in &applied {
        tracing::info!(version = m.version, name = %m.name, "applied migration");
    }
    let journal = match wiring::receipt_journal_dir(&settings).filter(|_| journaled) {
        None => None,
        Some(dir) => {
            let journal = herma_store::journal::FileJournal::open(&dir).map_err(|e| {
                Failure::runtime(format!(
                    "cannot open the receipt journal {} (HERMA_RECEIPT_JOURNAL_DIR): {e}",
                    dir.display()
                ))
            })?;
            let recovered =
                herma_app::receipts::recover_journal(connected.store.as_ref(), &journal)
                    .await
                    .map_err(|e| {
                        Failure::runtime(format!(
                            "recovering receipts from the journal {} failed: {e}",
                            dir.display()
                        ))
                    })?;
            if recovered > 0 {
                tracing::warn!(
                    recovered,
                    journal = %dir.display(),
                    "stored receipts a stopped process had journaled but not written"
                );
            }
            Some(Arc::new(journal))
        }
    };
    let tiers = wiring::open_tiers(&settings.tiers).await.tiers;
    let mut app = wiring::app(connected.store, settings)?
        .with_tiers(tiers)
        .with_governed(connected.governed);
    if let Some(journal) = journal {
        app = app.with_receipt_journal(journal);
    }
    let app = Arc::new(app);
    let starters = app.load_starters().await.map_err(|p| {
        Failure::runtime(format!(
            "loading the built-in starters failed: {}",
            p.detail
        ))
    })?;
    tracing::info!(
        provisions_created = starters.provisions.created,
        provisions_updated = starters.provisions.updated,
        context_created = starters.context.created,
        context_updated = starters.context.updated,
        "built-in starters loaded"
    );
    // Example vectors of the built-in semantic rules, computed now rather than on a request.
    if app.tiers.embedder.is_some() {
        let builtin = herma_core::CallerScope::system_builtin();
        if let Err(p) = app
            .rules
            .snapshot(&builtin, herma_core::evaluation::Mode::Online)
            .await
        {
            tracing::warn!(detail = %p.detail, "preparing the built-in rules failed");
        }
    }
    Ok(app)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve { bind, db } => {
            let settings = settings(&[
                (BIND.name, bind.as_ref()),
                (DATABASE_URL.name, db.database.as_ref()),
            ])?;
            init_logging(&settings);
            serve::run(settings).await
        }
        Command::Migrate { db } => {
            let settings = db.settings()?;
            let shown = settings.database.redacted();
            let store = wiring::connect_store(&settings.database)
                .await
                .map_err(|e| Failure::runtime(format!("cannot open the database {shown}: {e}")))?;
            let applied = store
                .migrate()
                .await
                .map_err(|e| Failure::runtime(format!("migrating {shown} failed: {e}")))?;
            if applied.is_empty() {
                outln!("{shown} is up to date")?;
            }
            for m in applied {
                outln!("applied migration {} ({}) to {shown}", m.version, m.name)?;
            }
            Ok(())
        }
        Command::Prune { db } => {
            let settings = db.settings()?;
            let (receipt_days, outcome_days) = (
                settings.receipt_retention_days,
                settings.outcome_retention_days,
            );
            let app = open_app(settings).await?;
            let report = app.prune().await;
            app.shutdown().await;
            let report = report?;
            let kept = |days: u64| {
                if days == 0 {
                    "kept forever".to_owned()
                } else {
                    format!("older than {days} days")
                }
            };
            outln!(
                "pruned {} receipts ({}) and {} rule outcomes ({})",
                report.receipts,
                kept(receipt_days),
                report.outcomes,
                kept(outcome_days)
            )?;
            Ok(())
        }
        Command::Keys { command } => keys::run(command).await,
        Command::Config { command } => config::run(command),
        Command::Provisions { command } => {
            records::run::<herma_core::model::ProvisionSpec>(command, "provisions").await
        }
        Command::Context { command } => {
            records::run::<herma_core::model::ContextEntrySpec>(command, "context entries").await
        }
        Command::Models { command } => models::run(command).await,
        Command::Rules { command } => rules::run(command).await,
        Command::Tessera { command } => tessera::run(command).await,
        Command::Conversations { command } => conversations::run(command).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            output::note(&format!("error: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            output::note(&format!("error: {}", failure.message));
            if failure.usage {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
