//! `herma config check|docs`.

use clap::Subcommand;
use herma_core::settings::{Settings, docs, report, unknown_settings};

use crate::output::{self, columns};
use crate::{Failure, environment};

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Show the effective configuration (secrets redacted) and name every invalid setting.
    Check,
    /// Print the README's configuration tables (Markdown), generated from the settings table.
    Docs,
}

pub fn run(command: ConfigCommand) -> Result<(), Failure> {
    match command {
        ConfigCommand::Check => {
            let env = environment();
            let rows: Vec<Vec<String>> = report(&env)
                .into_iter()
                .map(|line| {
                    let marker = if line.from_default { "  (default)" } else { "" };
                    vec![line.name, format!("{}{marker}", line.shown)]
                })
                .collect();
            output::write(columns(&rows).as_bytes())?;
            for name in unknown_settings(&env) {
                outln!("warning: {name} is not a Herma setting (a typo?)")?;
            }
            match Settings::from_map(&env) {
                Ok(_) => outln!("configuration is valid"),
                Err(errors) => {
                    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
                    Err(Failure::usage(format!(
                        "invalid configuration:\n{}",
                        lines.join("\n")
                    )))
                }
            }
        }
        ConfigCommand::Docs => output::write(docs::markdown().as_bytes()),
    }
}
