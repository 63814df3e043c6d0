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
                Ok(settings) => {
                    conversation_lines(&settings)?;
                    outln!("configuration is valid")
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
        ConfigCommand::Docs => output::write(docs::markdown().as_bytes()),
    }
}

/// Loud warnings for redirected provider destinations, and each turn provider's state when
/// conversations are enabled.
fn conversation_lines(settings: &Settings) -> Result<(), Failure> {
    use herma_core::conversation::config::{ProviderConfig, fixed_destination};
    use herma_core::settings::conversation::DESTINATION;
    use herma_core::upstream::Provider;

    let env = &settings.conversation.env;
    for (provider, member) in Provider::ALL
        .into_iter()
        .zip(herma_core::settings::conversation::PROVIDERS.members)
    {
        let name = DESTINATION.name(member);
        if let Some(url) = env.get(&name) {
            let (origin, _) = fixed_destination(provider);
            outln!(
                "WARNING: {name} sends {} turns and the operator's {} key to {url} instead of {origin}: for a staging mock or a test only",
                provider.as_str(),
                provider.as_str()
            )?;
        }
    }
    if !settings.conversation.enabled {
        return Ok(());
    }
    for provider in Provider::ALL {
        match ProviderConfig::resolve(env, provider) {
            Ok(config) => {
                let key = if config.api_key.is_some() {
                    "key set"
                } else {
                    "no key: turns are recorded as provider_not_configured"
                };
                outln!(
                    "conversation provider {}: usable with {} (allowance {}, {key})",
                    provider.as_str(),
                    config.model,
                    config.allowance
                )?;
            }
            Err(problem) => outln!(
                "conversation provider {}: {} ({})",
                provider.as_str(),
                problem.code,
                problem.detail
            )?,
        }
    }
    if let Err(problem) = herma_core::conversation::config::grants(env) {
        outln!("warning: {}: {}", problem.code, problem.detail)?;
    }
    Ok(())
}
