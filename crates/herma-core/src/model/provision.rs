//! Provisions: a caller's rules. Triggers decide when a provision fires; its action either shims
//! context entries into the request or answers directly.

use serde::{Deserialize, Serialize};

use super::{Violations, check_string_list};
use crate::caller::{CallerScope, id_problem};
use crate::time::Timestamp;

pub const MAX_KEYWORDS: usize = 64;
pub const MAX_KEYWORD_CHARS: usize = 200;
pub const MAX_REGEXES: usize = 16;
pub const MAX_REGEX_CHARS: usize = 512;
/// Compiled-size ceiling per regular expression (the engine is linear-time; this bounds memory).
pub const MAX_REGEX_COMPILED_BYTES: usize = 256 * 1024;
pub const MAX_GLOBS: usize = 32;
pub const MAX_GLOB_CHARS: usize = 256;
pub const MAX_TOOLS: usize = 32;
pub const MAX_TOOL_CHARS: usize = 128;
pub const MAX_CONTEXT_REFS: usize = 32;
pub const MAX_RESPONSE_CHARS: usize = 32 * 1024;
pub const MAX_DESCRIPTION_CHARS: usize = 1000;
pub const MAX_SEMANTIC_EXAMPLES: usize = 32;
pub const MAX_SEMANTIC_NEGATIVES: usize = 32;
pub const MAX_EXAMPLE_CHARS: usize = 500;
/// Cosine similarity a request must reach with one of a rule's examples. Calibrated for
/// all-MiniLM-L6-v2 on short prompts: paraphrases mostly score above it, unrelated text below.
pub const DEFAULT_SEMANTIC_THRESHOLD: f32 = 0.30;
/// How much closer to an example than to any negative a request must be.
pub const DEFAULT_SEMANTIC_MARGIN: f32 = 0.05;
pub const MAX_MICROMODEL_QUESTION_CHARS: usize = 1000;
pub const MAX_MICROMODEL_MODEL_CHARS: usize = 200;
pub const DEFAULT_MIN_CONFIDENCE: f32 = 0.5;

/// A number in [0, 1] (a similarity, a margin or a confidence). Validated finite, so equality is
/// an equivalence.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Unit(pub f32);

impl Eq for Unit {}

impl Unit {
    pub fn get(self) -> f32 {
        self.0
    }

    fn is_valid(self) -> bool {
        self.0.is_finite() && (0.0..=1.0).contains(&self.0)
    }
}

/// Tier 2: the request's meaning, compared with examples by sentence embeddings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SemanticTrigger {
    /// Prompts that should fire the rule, as a user would phrase them.
    #[cfg_attr(feature = "openapi", schema(example = json!(["ship the release to production", "push this build live"])))]
    pub examples: Vec<String>,
    /// Prompts that must not fire it although they are close ("roll back the last deploy").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["roll back the last production deployment"])))]
    pub negatives: Vec<String>,
    /// Cosine similarity the best example must reach (default 0.30).
    #[serde(default = "default_threshold")]
    #[cfg_attr(feature = "openapi", schema(value_type = f32, example = 0.3))]
    pub threshold: Unit,
    /// How much the best example must beat the best negative by (default 0.05).
    #[serde(default = "default_margin")]
    #[cfg_attr(feature = "openapi", schema(value_type = f32, example = 0.05))]
    pub margin: Unit,
}

fn default_threshold() -> Unit {
    Unit(DEFAULT_SEMANTIC_THRESHOLD)
}

fn default_margin() -> Unit {
    Unit(DEFAULT_SEMANTIC_MARGIN)
}

fn default_min_confidence() -> Unit {
    Unit(DEFAULT_MIN_CONFIDENCE)
}

/// What a micromodel rule does when its classifier could not answer (timeout, rate limit,
/// unreachable). A malformed answer is not a failure: it never activates anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// The rule does not fire.
    #[default]
    Skip,
    /// The rule fires as if the classifier had said yes (`shim_context` rules only: adding
    /// context is harmless; a direct answer never comes from a failed classifier).
    Fallback,
}

/// Tier 3: a small model answers a yes/no question about the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MicromodelTrigger {
    /// The yes/no question the classifier answers about the latest user turn.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "Is the user asking to change production infrastructure?")
    )]
    pub question: String,
    /// The classifier's confidence must reach this (default 0.5).
    #[serde(default = "default_min_confidence")]
    #[cfg_attr(feature = "openapi", schema(value_type = f32, example = 0.7))]
    pub min_confidence: Unit,
    /// The classifier model to ask; default the operator's `HERMA_MICROMODEL_MODEL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(example = "qwen2.5:0.5b"))]
    pub model: Option<String>,
    #[serde(default)]
    pub on_failure: FailurePolicy,
}

/// What a provision does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Inject the `context_refs` entries into the request, then forward it upstream.
    ShimContext,
    /// Answer with `response.text` in the request's own protocol; nothing goes upstream.
    RespondDirectly,
}

/// How a provision's triggers combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TriggerMode {
    /// Fires when any configured trigger kind matches.
    #[default]
    Any,
    /// Fires only when every configured trigger kind matches.
    All,
}

/// Tier-1 triggers. Empty lists are "not configured".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Triggers {
    /// Keywords and phrases, matched case-insensitively on word boundaries in the latest user turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["deploy", "release checklist"])))]
    pub keywords: Vec<String>,
    /// Regular expressions (linear-time engine, size-limited) over the latest user turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["\\bv\\d+\\.\\d+\\.\\d+\\b"])))]
    pub regex: Vec<String>,
    /// Path globs over file paths found in tool inputs and text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["**/migrations/*.sql"])))]
    pub paths: Vec<String>,
    /// Tool names, over tools offered in the request and tools called in its history.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["Bash"])))]
    pub tools: Vec<String>,
    /// Tier 2: meaning, by examples (needs an embedding model; see `herma models check`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic: Option<SemanticTrigger>,
    /// Tier 3: a classifier's yes/no (needs `HERMA_MICROMODEL_URL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micromodel: Option<MicromodelTrigger>,
}

impl Triggers {
    pub fn is_empty(&self) -> bool {
        !self.has_tier1() && self.semantic.is_none() && self.micromodel.is_none()
    }

    /// Whether any tier-1 trigger (keywords, regex, paths, tools) is configured.
    pub fn has_tier1(&self) -> bool {
        !(self.keywords.is_empty()
            && self.regex.is_empty()
            && self.paths.is_empty()
            && self.tools.is_empty())
    }

    fn validate(&self, v: &mut Violations) {
        check_string_list(
            v,
            "/triggers/keywords",
            &self.keywords,
            MAX_KEYWORDS,
            MAX_KEYWORD_CHARS,
        );
        check_string_list(
            v,
            "/triggers/regex",
            &self.regex,
            MAX_REGEXES,
            MAX_REGEX_CHARS,
        );
        for (i, pattern) in self.regex.iter().enumerate() {
            if let Err(err) = regex::RegexBuilder::new(pattern)
                .size_limit(MAX_REGEX_COMPILED_BYTES)
                .dfa_size_limit(MAX_REGEX_COMPILED_BYTES)
                .build()
            {
                v.push(format!("/triggers/regex/{i}"), regex_error(&err));
            }
        }
        check_string_list(v, "/triggers/paths", &self.paths, MAX_GLOBS, MAX_GLOB_CHARS);
        for (i, glob) in self.paths.iter().enumerate() {
            if let Err(err) = globset::Glob::new(glob) {
                v.push(
                    format!("/triggers/paths/{i}"),
                    format!("invalid glob: {}", err.kind()),
                );
            }
        }
        check_string_list(v, "/triggers/tools", &self.tools, MAX_TOOLS, MAX_TOOL_CHARS);
        if let Some(semantic) = &self.semantic {
            v.check(
                !semantic.examples.is_empty(),
                "/triggers/semantic/examples",
                "at least one example is required",
            );
            check_string_list(
                v,
                "/triggers/semantic/examples",
                &semantic.examples,
                MAX_SEMANTIC_EXAMPLES,
                MAX_EXAMPLE_CHARS,
            );
            check_string_list(
                v,
                "/triggers/semantic/negatives",
                &semantic.negatives,
                MAX_SEMANTIC_NEGATIVES,
                MAX_EXAMPLE_CHARS,
            );
            for (i, negative) in semantic.negatives.iter().enumerate() {
                if semantic.examples.contains(negative) {
                    v.push(
                        format!("/triggers/semantic/negatives/{i}"),
                        "is also an example",
                    );
                }
            }
            for (name, value) in [
                ("threshold", semantic.threshold),
                ("margin", semantic.margin),
            ] {
                v.check(
                    value.is_valid(),
                    format!("/triggers/semantic/{name}"),
                    "must be a number from 0 to 1",
                );
            }
        }
        if let Some(micro) = &self.micromodel {
            let question = micro.question.trim();
            v.check(
                !question.is_empty(),
                "/triggers/micromodel/question",
                "must not be empty",
            );
            v.check(
                micro.question.chars().count() <= MAX_MICROMODEL_QUESTION_CHARS,
                "/triggers/micromodel/question",
                format!("must be at most {MAX_MICROMODEL_QUESTION_CHARS} characters"),
            );
            v.check(
                micro.min_confidence.is_valid(),
                "/triggers/micromodel/min_confidence",
                "must be a number from 0 to 1",
            );
            if let Some(model) = &micro.model {
                v.check(
                    !model.trim().is_empty() && model.chars().count() <= MAX_MICROMODEL_MODEL_CHARS,
                    "/triggers/micromodel/model",
                    format!("must be 1 to {MAX_MICROMODEL_MODEL_CHARS} characters"),
                );
            }
        }
    }
}

fn regex_error(err: &regex::Error) -> String {
    match err {
        regex::Error::CompiledTooBig(limit) => {
            format!("regular expression is too large once compiled (limit {limit} bytes)")
        }
        other => {
            let text = other.to_string();
            let last = text.lines().last().unwrap_or("invalid regular expression");
            format!(
                "invalid regular expression: {}",
                last.trim_start_matches("error: ")
            )
        }
    }
}

/// The answer of a `respond_directly` provision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DirectResponse {
    /// The assistant text returned to the client.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "Deploys are frozen until Monday.")
    )]
    pub text: String,
}

/// A provision as a caller writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProvisionSpec {
    /// Caller-chosen id, unique within the caller scope: letters, digits, `.`, `_`, `:`, `-`.
    #[cfg_attr(feature = "openapi", schema(example = "deploy.checklist"))]
    pub id: String,
    /// What the provision is for, for people reading the rule set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[cfg_attr(
        feature = "openapi",
        schema(example = "Remind the model of the deploy checklist")
    )]
    pub description: String,
    #[cfg_attr(feature = "openapi", schema(example = "shim_context"))]
    pub action: Action,
    /// Higher priority is evaluated and listed first; ties are broken by id.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(example = 10))]
    pub priority: i32,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(example = "any"))]
    pub trigger_mode: TriggerMode,
    pub triggers: Triggers,
    /// Ids of context entries to shim (`shim_context` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["deploy.checklist"])))]
    pub context_refs: Vec<String>,
    /// The direct answer (`respond_directly` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<DirectResponse>,
    /// Shim at most once per conversation identity.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(example = false))]
    pub once_per_conversation: bool,
    /// Disabled provisions are stored but never fire.
    #[serde(default = "default_true")]
    #[cfg_attr(feature = "openapi", schema(example = true))]
    pub enabled: bool,
    /// The governed fabric's say on this record (a synced or shipped starter). A `system_builtin`
    /// provision fires only while this passes the governance lens for the requesting caller; on
    /// a caller's own provision it is optional, but when present it is enforced the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_governance: Option<crate::governance::FabricGovernance>,
}

fn default_true() -> bool {
    true
}

impl ProvisionSpec {
    /// Checks every field, reporting all violations at once.
    pub fn validate(&self) -> Result<(), crate::problem::Problem> {
        // H03: a contributor-tier classifier is refused outright, before anything else.
        if let Some(model) = self
            .triggers
            .micromodel
            .as_ref()
            .and_then(|m| m.model.as_ref())
        {
            crate::contributor::refuse_contributor_model(model, "/triggers/micromodel/model")?;
        }
        let mut v = Violations::default();
        if let Some(problem) = id_problem(&self.id) {
            v.push("/id", problem);
        }
        v.check(
            self.description.chars().count() <= MAX_DESCRIPTION_CHARS,
            "/description",
            format!("must be at most {MAX_DESCRIPTION_CHARS} characters"),
        );
        v.check(
            !self.triggers.is_empty(),
            "/triggers",
            "at least one trigger is required (keywords, regex, paths, tools, semantic or micromodel)",
        );
        self.triggers.validate(&mut v);
        check_string_list(
            &mut v,
            "/context_refs",
            &self.context_refs,
            MAX_CONTEXT_REFS,
            128,
        );
        for (i, r) in self.context_refs.iter().enumerate() {
            if let Some(problem) = id_problem(r) {
                v.push(format!("/context_refs/{i}"), problem);
            }
        }
        match self.action {
            Action::ShimContext => {
                v.check(
                    !self.context_refs.is_empty(),
                    "/context_refs",
                    "shim_context needs at least one context ref",
                );
                v.check(
                    self.response.is_none(),
                    "/response",
                    "only respond_directly provisions carry a response",
                );
            }
            Action::RespondDirectly => {
                v.check(
                    self.triggers
                        .micromodel
                        .as_ref()
                        .is_none_or(|m| m.on_failure == FailurePolicy::Skip),
                    "/triggers/micromodel/on_failure",
                    "a respond_directly rule never answers when its classifier failed: use `skip`",
                );
                v.check(
                    self.context_refs.is_empty(),
                    "/context_refs",
                    "respond_directly provisions do not shim context",
                );
                match &self.response {
                    None => v.push("/response", "respond_directly needs a response"),
                    Some(r) if r.text.trim().is_empty() => {
                        v.push("/response/text", "must not be empty")
                    }
                    Some(r) if r.text.chars().count() > MAX_RESPONSE_CHARS => v.push(
                        "/response/text",
                        format!("must be at most {MAX_RESPONSE_CHARS} characters"),
                    ),
                    Some(_) => {}
                }
            }
        }
        v.into_result()
    }
}

/// A stored provision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Provision {
    pub caller_scope: CallerScope,
    /// Starts at 1 and grows by one with every accepted write.
    #[cfg_attr(feature = "openapi", schema(example = 1))]
    pub version: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(flatten)]
    pub spec: ProvisionSpec,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::from_slice;
    use crate::problem::ProblemCode;

    fn spec(json: &str) -> ProvisionSpec {
        from_slice(json.as_bytes()).unwrap()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_valid_shim_provision() {
        let p = spec(
            r#"{"id":"deploy.checklist","action":"shim_context",
                "triggers":{"keywords":["deploy"],"paths":["**/*.tf"]},
                "context_refs":["deploy.checklist"]}"#,
        );
        assert!(p.validate().is_ok());
        assert!(p.enabled);
        assert_eq!(p.trigger_mode, TriggerMode::Any);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn unknown_fields_are_refused_by_pointer() {
        let err = from_slice::<ProvisionSpec>(
            br#"{"id":"a","action":"shim_context","triggers":{"keyword":["x"]},"context_refs":["a"]}"#,
        )
        .unwrap_err();
        assert_eq!(err.errors[0].pointer, "/triggers/keyword");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn every_violation_is_reported() {
        let p = spec(
            r#"{"id":"bad id","action":"respond_directly",
                "triggers":{"regex":["(unclosed"],"paths":["a[b"],"keywords":["x","x",""]},
                "context_refs":["c"]}"#,
        );
        let err = p.validate().unwrap_err();
        assert_eq!(err.code, ProblemCode::ValidationFailed);
        let pointers: Vec<_> = err.errors.iter().map(|e| e.pointer.as_str()).collect();
        for expected in [
            "/id",
            "/triggers/regex/0",
            "/triggers/paths/0",
            "/triggers/keywords/1",
            "/triggers/keywords/2",
            "/context_refs",
            "/response",
        ] {
            assert!(
                pointers.contains(&expected),
                "{expected} missing from {pointers:?}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn oversized_regexes_are_refused() {
        let p = ProvisionSpec {
            triggers: Triggers {
                regex: vec!["\\w{1000}\\w{1000}".into()],
                ..Triggers::default()
            },
            ..spec(
                r#"{"id":"a","action":"shim_context","triggers":{"tools":["x"]},"context_refs":["a"]}"#,
            )
        };
        let err = p.validate().unwrap_err();
        assert_eq!(err.errors[0].pointer, "/triggers/regex/0");
        assert!(
            err.errors[0].detail.contains("too large"),
            "{}",
            err.errors[0].detail
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn triggers_are_required() {
        let p = spec(
            r#"{"id":"a","action":"respond_directly","triggers":{},"response":{"text":"hi"}}"#,
        );
        assert_eq!(p.validate().unwrap_err().errors[0].pointer, "/triggers");
    }
}
