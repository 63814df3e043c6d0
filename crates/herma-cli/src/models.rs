//! `herma models check`: whether tiers 2 and 3 have usable models.

use clap::Subcommand;
use herma_cli::wiring::{OpenedTiers, open_tiers};
use herma_core::micromodel::{Outcome, classify};
use herma_core::model::{FailurePolicy, MicromodelTrigger, Unit};
use herma_core::settings::EmbedSource;

use crate::{Failure, settings};

#[derive(Subcommand)]
pub enum ModelsCommand {
    /// Load the embedding model (or reach the remote one), embed a probe, and ask the
    /// classifier one question when one is configured. Exits 1 when a configured model is not
    /// usable or no embedding model is configured.
    Check,
}

pub async fn run(command: ModelsCommand) -> Result<(), Failure> {
    let ModelsCommand::Check = command;
    let settings = settings(&[])?;
    let OpenedTiers { tiers, local } = open_tiers(&settings.tiers).await;
    let mut usable = true;
    match (&settings.tiers.embed, &tiers.embedder) {
        (None, _) => {
            outln!(
                "embedding model: not configured — semantic rules never fire (set HERMA_EMBED_MODEL_DIR to an all-MiniLM-L6-v2 directory, or HERMA_EMBED_URL)"
            )?;
            usable = false;
        }
        (Some(source), None) => {
            let which = match source {
                EmbedSource::Local { dir } => dir.clone(),
                EmbedSource::Remote(remote) => remote.base.clone(),
            };
            outln!("embedding model: NOT USABLE ({which})")?;
            usable = false;
        }
        (Some(_), Some(embedder)) => {
            let identity = embedder.identity();
            outln!("embedding model: ok")?;
            outln!("  identity     {}", identity.id)?;
            outln!("  dimensions   {}", identity.dimensions)?;
            if let Some(local) = &local {
                let report = local.report();
                outln!("  directory    {}", report.dir.display())?;
                outln!("  layers       {}", report.layers)?;
                outln!("  parameters   {}", report.parameters)?;
                outln!("  window       {} tokens", report.window_tokens)?;
                outln!(
                    "  precision    {}",
                    match report.precision {
                        herma_embed::Precision::Int8 => "int8 (8-bit linear layers)",
                        herma_embed::Precision::F32 | herma_embed::Precision::Auto => "f32",
                    }
                )?;
                outln!("  load time    {} ms", report.load_time.as_millis())?;
            }
            let probe = "deploy the service to production".to_owned();
            let started = std::time::Instant::now();
            match embedder.embed(std::slice::from_ref(&probe)).await {
                Ok(v) => outln!(
                    "  probe        {} values in {:.1} ms",
                    v.first().map_or(0, Vec::len),
                    started.elapsed().as_secs_f64() * 1000.0
                )?,
                Err(e) => {
                    outln!("  probe        FAILED: {e}")?;
                    usable = false;
                }
            }
        }
    }
    match (&settings.tiers.micromodel, &tiers.classifier) {
        (None, _) => outln!(
            "classifier: not configured — micromodel rules never fire (set HERMA_MICROMODEL_URL and HERMA_MICROMODEL_MODEL)"
        )?,
        (Some(remote), None) => {
            outln!("classifier: NOT USABLE ({})", remote.base)?;
            usable = false;
        }
        (Some(remote), Some(classifier)) => {
            let trigger = MicromodelTrigger {
                question: "Is the user asking to deploy something?".into(),
                min_confidence: Unit(0.5),
                model: None,
                on_failure: FailurePolicy::Skip,
            };
            let outcome = classify(
                classifier.as_ref(),
                &trigger,
                "deploy the service to production",
            )
            .await;
            match outcome {
                Outcome::Decided(_) => {
                    outln!("classifier: ok")?;
                    outln!("  endpoint     {}", remote.base)?;
                    outln!("  model        {}", remote.model)?;
                    outln!("  probe        {}", outcome.label())?;
                }
                other => {
                    outln!(
                        "classifier: NOT USABLE ({} {}): {}",
                        remote.base,
                        remote.model,
                        other.label()
                    )?;
                    usable = false;
                }
            }
        }
    }
    for problem in &tiers.problems {
        outln!("problem: {problem}")?;
    }
    if usable {
        Ok(())
    } else {
        Err(Failure::runtime(
            "a model is missing or not usable (see above)",
        ))
    }
}
