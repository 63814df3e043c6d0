//! `herma config check`.

use clap::Subcommand;
use herma_core::settings::{Settings, report, unknown_settings};

use crate::{Failure, environment};

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Show the effective configuration (secrets redacted) and name every invalid setting.
    Check,
}

pub fn run(command: ConfigCommand) -> Result<(), Failure> {
    match command {
        ConfigCommand::Check => {
            let env = environment();
            for line in report(&env) {
                println!(
                    "{:<24} {}{}",
                    line.name,
                    line.shown,
                    if line.from_default { "  (default)" } else { "" }
                );
            }
            for name in unknown_settings(&env) {
                println!("warning: {name} is not a Herma setting (a typo?)");
            }
            match Settings::from_map(&env) {
                Ok(_) => {
                    println!("configuration is valid");
                    Ok(())
                }
                Err(errors) => {
                    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
                    Err(Failure::usage(format!(
                        "invalid configuration:\n{}",
                        lines.join("\n")
                    )))
                }
            }
        }
    }
}
