//! `herma rules eval FILE`: precision, recall and score margins per rule from labelled prompts.

use clap::Subcommand;
use herma_app::calibrate::{EvalReport, parse_examples};
use herma_app::transfer::Format;

use crate::records::{format, progress, scope};
use crate::{DatabaseArg, Failure, open_app, output};

#[derive(Subcommand)]
pub enum RulesCommand {
    /// Run labelled prompts through a caller's rules (offline: no classifier, no remote
    /// embedder) and report precision, recall and semantic score margins per rule.
    Eval {
        /// Labelled examples: `{"text": "…", "expect": ["provision-id"]}` per line (.jsonl) or
        /// in one array (.json); an empty `expect` means no rule should fire.
        file: String,
        /// Whose rules: `key:<key_id>` (the built-ins are included, as on the proxy).
        #[arg(
            long,
            value_name = "SCOPE",
            conflicts_with = "builtin",
            required_unless_present = "builtin"
        )]
        caller: Option<String>,
        /// Evaluate only the built-ins.
        #[arg(long)]
        builtin: bool,
        /// json or jsonl (default: from the file extension).
        #[arg(long)]
        format: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DatabaseArg,
    },
}

pub async fn run(command: RulesCommand) -> Result<(), Failure> {
    let RulesCommand::Eval {
        file,
        caller,
        builtin,
        format: fmt,
        json,
        db,
    } = command;
    let scope = scope(caller.as_deref(), builtin)?;
    let format: Format = format(fmt.as_deref(), Some(&file))?;
    let bytes =
        std::fs::read(&file).map_err(|e| Failure::usage(format!("cannot read {file}: {e}")))?;
    let examples = parse_examples(&bytes, format)?;
    let app = open_app(db.settings()?).await?;
    let bar = progress(examples.len() as u64, "evaluating");
    let report = app
        .evaluate_examples(&scope, &examples, &mut |done, _| {
            bar.set_position(done as u64)
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
        output::write(render(&report).as_bytes())?;
    }
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{:.0}%", v * 100.0))
}

fn score(v: Option<f32>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// The report as a table, then the misses.
pub fn render(report: &EvalReport) -> String {
    let mut out = format!(
        "{} examples, {} exactly as labelled",
        report.examples, report.exact
    );
    if let Some(model) = &report.embedding_model {
        out.push_str(&format!(" (scores from {model})"));
    }
    out.push_str("\n\n");
    let width = report
        .rules
        .iter()
        .map(|r| r.provision_id.len())
        .max()
        .unwrap_or(4)
        .max(4);
    out.push_str(&format!(
        "{:width$}  {:>3} {:>3} {:>3}  {:>9} {:>6}  {:>8} {:>8} {:>7} {:>9}\n",
        "rule",
        "tp",
        "fp",
        "fn",
        "precision",
        "recall",
        "lowest+",
        "highest-",
        "margin",
        "threshold"
    ));
    for r in &report.rules {
        out.push_str(&format!(
            "{:width$}  {:>3} {:>3} {:>3}  {:>9} {:>6}  {:>8} {:>8} {:>7} {:>9}\n",
            r.provision_id,
            r.true_positives,
            r.false_positives,
            r.false_negatives,
            pct(r.precision),
            pct(r.recall),
            score(r.lowest_expected_score),
            score(r.highest_other_score),
            score(r.margin),
            score(r.suggested_threshold),
        ));
    }
    if !report.misses.is_empty() {
        out.push_str("\nnot as labelled:\n");
        for m in &report.misses {
            out.push_str(&format!(
                "  {:?}\n    expected [{}], fired [{}]\n",
                m.text,
                m.expected.join(", "),
                m.fired.join(", ")
            ));
        }
    }
    out.push_str(
        "\nlowest+ is the lowest semantic score among prompts labelled with the rule, highest- the\nhighest among the others; a positive margin means a threshold separates them (the midpoint is\nshown). A negative margin with full precision means the rule's negatives, not its threshold,
keep the others out. Tier-3 rules are not evaluated here (offline: the classifier is never called).\n",
    );
    out
}
