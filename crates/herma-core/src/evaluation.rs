//! The pure half of one request's trip through tiers 2 and 3: whether a tier may run at all in
//! this mode, what a rule's classifier call is decided as before any call, and the report dry
//! runs, receipts and metrics read. The services run the models; every decision that needs no
//! I/O is made here, so both runtimes make it the same way.
//!
//! Offline evaluation (dry runs, the public preview, `herma rules eval`) never calls the
//! classifier or a remote embedding model (H16); the in-process model still runs (it is not a
//! provider).

use serde::Serialize;

use crate::contributor::is_contributor_model;
use crate::micromodel::Outcome;
use crate::model::{MicromodelTrigger, Tier};
use crate::rules::RuleSet;
use crate::semantic::{ModelIdentity, SemanticScore};

/// Whether an evaluation may call remote models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The proxy: every configured tier runs.
    Online,
    /// Dry run, preview, `rules eval`: no classifier, no remote embedder.
    Offline,
}

pub const OFFLINE_CLASSIFIER: &str = "offline evaluation never calls the classifier";
pub const OFFLINE_EMBEDDER: &str = "offline evaluation never calls the remote embedding model";
pub const NO_EMBEDDER: &str = "no embedding model is configured (HERMA_EMBED_MODEL_DIR)";
pub const NO_CLASSIFIER: &str = "no classifier is configured (HERMA_MICROMODEL_URL)";
pub const NO_TEXT: &str = "the request has no user text to compare";

/// Whether `embedder` may be called in `mode`: a remote model never is offline.
pub fn may_embed(embedder: &ModelIdentity, mode: Mode) -> bool {
    !(embedder.remote && mode == Mode::Offline)
}

/// Why tier 2 cannot score this request, if it cannot: no model, a remote model offline, or no
/// user text to embed.
pub fn semantic_blocked(
    embedder: Option<&ModelIdentity>,
    mode: Mode,
    user_text: &str,
) -> Option<&'static str> {
    match embedder {
        None => Some(NO_EMBEDDER),
        Some(e) if !may_embed(e, mode) => Some(OFFLINE_EMBEDDER),
        Some(_) if user_text.trim().is_empty() => Some(NO_TEXT),
        Some(_) => None,
    }
}

/// A rule's classifier outcome decided before any call, or `None` when the classifier must be
/// asked: a contributor-tier model is refused first, then offline evaluation and a missing
/// classifier skip.
pub fn precheck(
    trigger: &MicromodelTrigger,
    mode: Mode,
    classifier_configured: bool,
) -> Option<Outcome> {
    if let Some(model) = trigger.model.as_deref().filter(|m| is_contributor_model(m)) {
        return Some(Outcome::Refused(format!(
            "model `{model}` is contributor tier"
        )));
    }
    match (mode, classifier_configured) {
        (Mode::Offline, _) => Some(Outcome::Skipped(OFFLINE_CLASSIFIER.into())),
        (Mode::Online, false) => Some(Outcome::Skipped(NO_CLASSIFIER.into())),
        (Mode::Online, true) => None,
    }
}

/// One rule's semantic score, for dry runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemanticView {
    pub provision_id: String,
    /// Best cosine similarity with an example.
    pub score: f32,
    /// That example.
    pub example: String,
    /// Best similarity with a negative, and that negative, when the rule has negatives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negative_score: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negative: Option<String>,
    pub threshold: f32,
    pub margin: f32,
    pub matched: bool,
}

impl SemanticView {
    /// The view of `score`, with the example texts of its rule in `rules`.
    pub fn of(rules: &RuleSet, score: &SemanticScore) -> Self {
        let trigger = rules
            .rule(score.rule)
            .provision
            .spec
            .triggers
            .semantic
            .as_ref();
        let text = |i: usize, negatives: bool| {
            trigger
                .and_then(|t| {
                    if negatives {
                        t.negatives.get(i)
                    } else {
                        t.examples.get(i)
                    }
                })
                .cloned()
                .unwrap_or_default()
        };
        Self {
            provision_id: rules.rule(score.rule).provision.spec.id.clone(),
            score: score.score,
            example: text(score.example, false),
            negative_score: score.negative.map(|(_, n)| n),
            negative: score.negative.map(|(i, _)| text(i, true)),
            threshold: score.threshold,
            margin: score.margin,
            matched: score.matched,
        }
    }
}

/// What the classifier said about one rule, for dry runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MicromodelView {
    pub provision_id: String,
    /// `apply=true confidence=0.910`, `malformed reply: …`, `failed: …`, `skipped: …`.
    pub outcome: String,
    /// `decided`, `malformed`, `failed`, `refused` or `skipped`.
    pub result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    pub activated: bool,
}

impl MicromodelView {
    /// The view of rule `rule`'s `outcome`, and whether it activates the rule.
    pub fn of(rules: &RuleSet, rule: usize, outcome: &Outcome) -> Self {
        let spec = &rules.rule(rule).provision.spec;
        let activated = spec
            .triggers
            .micromodel
            .as_ref()
            .is_some_and(|t| outcome.activates(t, spec.action));
        Self {
            provision_id: spec.id.clone(),
            outcome: outcome.label(),
            result: outcome.kind(),
            confidence: outcome.confidence(),
            activated,
        }
    }
}

/// A rule a tier did not evaluate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkippedView {
    pub provision_id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "semantic"))]
    pub tier: Tier,
    pub reason: String,
}

/// How tiers 2 and 3 went for one request.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Evaluation {
    /// The embedding model tier 2 used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_model: Option<String>,
    pub semantic: Vec<SemanticView>,
    pub micromodel: Vec<MicromodelView>,
    pub skipped: Vec<SkippedView>,
    /// Microseconds spent embedding the request (0 when tier 2 did not run).
    pub embed_micros: u64,
    /// Classifier calls made.
    pub classifier_calls: u32,
}

impl Evaluation {
    /// Records that `tier` did not evaluate rule `rule` of `rules`, and why.
    pub fn skip(&mut self, rules: &RuleSet, rule: usize, tier: Tier, reason: &str) {
        self.skipped.push(SkippedView {
            provision_id: rules.rule(rule).provision.spec.id.clone(),
            tier,
            reason: reason.to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::micromodel::{ClassifierError, Decision};
    use crate::model::FailurePolicy;

    fn identity(remote: bool) -> ModelIdentity {
        ModelIdentity {
            id: "m".into(),
            dimensions: 3,
            remote,
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn when_tier_2_may_run() {
        let local = identity(false);
        let remote = identity(true);
        let cases: [(Option<&ModelIdentity>, Mode, &str, Option<&str>); 8] = [
            (None, Mode::Online, "deploy", Some(NO_EMBEDDER)),
            (None, Mode::Offline, "deploy", Some(NO_EMBEDDER)),
            (Some(&local), Mode::Online, "deploy", None),
            (Some(&local), Mode::Offline, "deploy", None),
            (Some(&remote), Mode::Online, "deploy", None),
            (
                Some(&remote),
                Mode::Offline,
                "deploy",
                Some(OFFLINE_EMBEDDER),
            ),
            (Some(&local), Mode::Online, "  \n", Some(NO_TEXT)),
            (Some(&remote), Mode::Offline, "", Some(OFFLINE_EMBEDDER)),
        ];
        for (embedder, mode, text, expected) in cases {
            assert_eq!(
                semantic_blocked(embedder, mode, text),
                expected,
                "{embedder:?} {mode:?} {text:?}"
            );
        }
    }

    fn trigger(model: Option<&str>) -> MicromodelTrigger {
        serde_json::from_value(serde_json::json!({"question": "deploying?", "model": model}))
            .unwrap()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn what_is_decided_before_a_classifier_call() {
        let refused = Some("model `tiny-Contributor-1` is contributor tier");
        /// The model asked for, the mode, whether a classifier is configured, and the
        /// outcome decided without a call (its kind and reason).
        type Case<'a> = (
            Option<&'a str>,
            Mode,
            bool,
            Option<(&'a str, Option<&'a str>)>,
        );
        let cases: [Case; 7] = [
            (None, Mode::Online, true, None),
            (Some("qwen2.5:0.5b"), Mode::Online, true, None),
            (
                None,
                Mode::Online,
                false,
                Some(("skipped", Some(NO_CLASSIFIER))),
            ),
            (
                None,
                Mode::Offline,
                true,
                Some(("skipped", Some(OFFLINE_CLASSIFIER))),
            ),
            (
                None,
                Mode::Offline,
                false,
                Some(("skipped", Some(OFFLINE_CLASSIFIER))),
            ),
            // Contributor refusal comes before everything else, offline included.
            (
                Some("tiny-Contributor-1"),
                Mode::Online,
                true,
                Some(("refused", refused)),
            ),
            (
                Some("tiny-Contributor-1"),
                Mode::Offline,
                false,
                Some(("refused", refused)),
            ),
        ];
        for (model, mode, configured, expected) in cases {
            let got = precheck(&trigger(model), mode, configured);
            let got = got.as_ref().map(|o| {
                let why = match o {
                    Outcome::Skipped(why) | Outcome::Refused(why) => Some(why.as_str()),
                    _ => None,
                };
                (o.kind(), why)
            });
            assert_eq!(got, expected, "{model:?} {mode:?} {configured}");
        }
    }

    fn rules() -> RuleSet {
        let spec: crate::model::ProvisionSpec = serde_json::from_value(serde_json::json!({
            "id": "deploy", "action": "shim_context", "context_refs": ["c"],
            "triggers": {
                "semantic": {"examples": ["ship it", "deploy to prod"], "negatives": ["roll back"]},
                "micromodel": {"question": "deploying?", "min_confidence": 0.7, "on_failure": "fallback"}
            }
        }))
        .unwrap();
        let provision = crate::model::Provision {
            caller_scope: crate::CallerScope::system_builtin(),
            version: 3,
            created_at: crate::Timestamp::default(),
            updated_at: crate::Timestamp::default(),
            spec,
        };
        RuleSet::compile([(std::sync::Arc::new(provision), false)])
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn views_name_the_rule_its_texts_and_whether_it_activates() {
        let rules = rules();
        let score = SemanticScore {
            rule: 0,
            score: 0.8,
            example: 1,
            negative: Some((0, 0.4)),
            threshold: 0.6,
            margin: 0.05,
            matched: true,
        };
        let view = SemanticView::of(&rules, &score);
        assert_eq!(
            (
                view.provision_id.as_str(),
                view.example.as_str(),
                view.negative.as_deref()
            ),
            ("deploy", "deploy to prod", Some("roll back"))
        );
        assert_eq!(view.negative_score, Some(0.4));

        let cases = [
            (
                Outcome::Decided(Decision {
                    apply: true,
                    confidence: 0.9,
                }),
                "decided",
                true,
            ),
            (
                Outcome::Decided(Decision {
                    apply: true,
                    confidence: 0.5,
                }),
                "decided",
                false,
            ),
            (
                Outcome::Decided(Decision {
                    apply: false,
                    confidence: 0.9,
                }),
                "decided",
                false,
            ),
            (Outcome::Failed(ClassifierError::Timeout), "failed", true),
            (Outcome::Malformed("prose".into()), "malformed", false),
            (Outcome::Skipped(NO_CLASSIFIER.into()), "skipped", false),
        ];
        for (outcome, kind, activated) in cases {
            let view = MicromodelView::of(&rules, 0, &outcome);
            assert_eq!(
                (view.result, view.activated),
                (kind, activated),
                "{outcome:?}"
            );
            assert_eq!(view.outcome, outcome.label());
        }
        assert_eq!(
            rules
                .rule(0)
                .provision
                .spec
                .triggers
                .micromodel
                .as_ref()
                .unwrap()
                .on_failure,
            FailurePolicy::Fallback
        );

        let mut report = Evaluation::default();
        report.skip(&rules, 0, Tier::Semantic, NO_TEXT);
        assert_eq!(
            report.skipped,
            [SkippedView {
                provision_id: "deploy".into(),
                tier: Tier::Semantic,
                reason: NO_TEXT.into()
            }]
        );
    }
}
