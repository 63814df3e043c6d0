//! `herma rules eval`: labelled prompts through a caller's rules, offline, with precision,
//! recall and semantic score margins per rule — the evidence for choosing thresholds.
//!
//! A labelled example is `{"text": "…", "expect": ["provision-id", …]}`; an empty (or absent)
//! `expect` says no rule should fire. Evaluation is offline: the classifier is not called (tier-3
//! rules count as not firing) and a remote embedding model is not called.

use std::collections::{BTreeMap, BTreeSet};

use herma_core::json;
use herma_core::problem::FieldError;
use herma_core::wire::{Envelope, HeaderFacts, Protocol};
use herma_core::{CallerScope, Problem, ProblemCode};
use serde::{Deserialize, Serialize};

use crate::App;
use crate::tiers::evaluate;
use crate::transfer::Format;
use herma_core::evaluation::Mode;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelledExample {
    pub text: String,
    /// Provisions that should fire; empty: none should.
    #[serde(default)]
    pub expect: Vec<String>,
}

/// Reads labelled examples (a JSON array, or one per line), naming each bad one.
pub fn parse_examples(bytes: &[u8], format: Format) -> Result<Vec<LabelledExample>, Problem> {
    let items: Vec<(Result<serde_json::Value, Problem>, String)> = match format {
        Format::Json => match json::parse_strict(bytes)? {
            serde_json::Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| (Ok(v), format!("/{i}")))
                .collect(),
            _ => {
                return Err(Problem::new(
                    ProblemCode::ValidationFailed,
                    "a JSON examples file must hold one array (use .jsonl for one example per line)",
                ));
            }
        },
        Format::Jsonl => bytes
            .split(|b| *b == b'\n')
            .enumerate()
            .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
            .map(|(i, line)| (json::parse_strict(line), format!("line {}", i + 1)))
            .collect(),
    };
    let mut examples = Vec::new();
    let mut errors = Vec::new();
    for (parsed, at) in items {
        match parsed.and_then(json::decode::<LabelledExample>) {
            Ok(example) if example.text.trim().is_empty() => {
                errors.push(FieldError::new(format!("{at}/text"), "must not be empty"));
            }
            Ok(example) => examples.push(example),
            Err(problem) => {
                for e in problem.errors {
                    errors.push(FieldError::new(format!("{at}{}", e.pointer), e.detail));
                }
            }
        }
    }
    if examples.is_empty() && errors.is_empty() {
        errors.push(FieldError::new("", "the file holds no examples"));
    }
    if errors.is_empty() {
        Ok(examples)
    } else {
        Err(Problem::validation(errors))
    }
}

/// How one rule did on the examples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuleEval {
    pub provision_id: String,
    pub true_positives: u32,
    pub false_positives: u32,
    pub false_negatives: u32,
    /// None when the rule never fired.
    pub precision: Option<f64>,
    /// None when no example expects the rule.
    pub recall: Option<f64>,
    /// Semantic rules: the lowest score among examples expecting the rule…
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lowest_expected_score: Option<f32>,
    /// …the highest among the others…
    #[serde(skip_serializing_if = "Option::is_none")]
    pub highest_other_score: Option<f32>,
    /// …their difference (positive: some threshold separates them)…
    #[serde(skip_serializing_if = "Option::is_none")]
    pub margin: Option<f32>,
    /// …and the midpoint, a threshold the evidence supports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggested_threshold: Option<f32>,
}

/// One example that did not come out as labelled.
#[derive(Clone, Debug, Serialize)]
pub struct Miss {
    pub text: String,
    pub expected: Vec<String>,
    pub fired: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    pub examples: u32,
    /// Examples whose fired set equals the labels.
    pub exact: u32,
    /// The embedding model scores came from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_model: Option<String>,
    pub rules: Vec<RuleEval>,
    pub misses: Vec<Miss>,
}

fn ratio(n: u32, d: u32) -> Option<f64> {
    (d > 0).then(|| f64::from(n) / f64::from(d))
}

impl App {
    /// Runs `examples` through the rules of `scope` (with the built-ins), offline.
    pub async fn evaluate_examples(
        &self,
        scope: &CallerScope,
        examples: &[LabelledExample],
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<EvalReport, Problem> {
        let snapshot = self.rules.snapshot(scope, Mode::Offline).await?;
        let rules = &snapshot.rules;
        let known: BTreeSet<&str> = rules
            .rules()
            .iter()
            .map(|r| r.provision.spec.id.as_str())
            .collect();
        let unknown: Vec<FieldError> = examples
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                e.expect
                    .iter()
                    .enumerate()
                    .filter(|(_, id)| !known.contains(id.as_str()))
                    .map(move |(j, id)| {
                        FieldError::new(
                            format!("/{i}/expect/{j}"),
                            format!("no provision `{id}` among this caller's rules"),
                        )
                    })
            })
            .collect();
        if !unknown.is_empty() {
            return Err(Problem::validation(unknown));
        }
        let mut per_rule: BTreeMap<String, RuleEval> = BTreeMap::new();
        let mut scores: BTreeMap<String, (Vec<f32>, Vec<f32>)> = BTreeMap::new();
        let mut report = EvalReport {
            examples: u32::try_from(examples.len()).unwrap_or(u32::MAX),
            exact: 0,
            embedding_model: None,
            rules: Vec::new(),
            misses: Vec::new(),
        };
        let embedder = self
            .tiers
            .embedder
            .as_ref()
            .filter(|e| !e.identity().remote && !snapshot.semantic.index.is_empty());
        for (i, example) in examples.iter().enumerate() {
            let body = serde_json::json!({"model": "herma-eval", "messages": [{"role": "user", "content": example.text}]});
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            let envelope =
                Envelope::from_request(Protocol::ChatCompletions, &bytes, &HeaderFacts::default())?;
            let (matches, _) = evaluate(
                &self.tiers,
                rules,
                &snapshot.semantic,
                &envelope,
                Mode::Offline,
            )
            .await;
            let fired: BTreeSet<String> = matches
                .iter()
                .map(|m| rules.rule(m.rule).provision.spec.id.clone())
                .collect();
            let expected: BTreeSet<String> = example.expect.iter().cloned().collect();
            for id in fired.union(&expected) {
                let entry = per_rule.entry(id.clone()).or_insert_with(|| RuleEval {
                    provision_id: id.clone(),
                    ..RuleEval::default()
                });
                match (fired.contains(id), expected.contains(id)) {
                    (true, true) => entry.true_positives += 1,
                    (true, false) => entry.false_positives += 1,
                    (false, true) => entry.false_negatives += 1,
                    (false, false) => {}
                }
            }
            if fired == expected {
                report.exact += 1;
            } else {
                report.misses.push(Miss {
                    text: example.text.clone(),
                    expected: expected.into_iter().collect(),
                    fired: fired.into_iter().collect(),
                });
            }
            // Every semantic rule's score, whether or not an earlier tier decided it.
            if let Some(embedder) = embedder {
                report.embedding_model = Some(embedder.identity().id.clone());
                if let Ok(Some(query)) = embedder
                    .embed(&[example.text.trim().to_owned()])
                    .await
                    .map(|mut v| v.pop())
                {
                    for s in snapshot.semantic.index.score(&query, |_| true) {
                        let id = rules.rule(s.rule).provision.spec.id.clone();
                        let slot = scores.entry(id.clone()).or_default();
                        if example.expect.contains(&id) {
                            slot.0.push(s.score);
                        } else {
                            slot.1.push(s.score);
                        }
                    }
                }
            }
            progress(i + 1, examples.len());
        }
        for (id, (expected, others)) in scores {
            let entry = per_rule.entry(id.clone()).or_insert_with(|| RuleEval {
                provision_id: id,
                ..RuleEval::default()
            });
            entry.lowest_expected_score = expected.iter().copied().reduce(f32::min);
            entry.highest_other_score = others.iter().copied().reduce(f32::max);
            if let (Some(lo), Some(hi)) = (entry.lowest_expected_score, entry.highest_other_score) {
                entry.margin = Some(lo - hi);
                entry.suggested_threshold = (lo > hi).then_some((lo + hi) / 2.0);
            }
        }
        report.rules = per_rule
            .into_values()
            .map(|mut r| {
                r.precision = ratio(r.true_positives, r.true_positives + r.false_positives);
                r.recall = ratio(r.true_positives, r.true_positives + r.false_negatives);
                r
            })
            .collect();
        Ok(report)
    }
}
