//! Context entries: the atomic nouns, verbs and details a provision shims into a request.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Violations, check_string_list};
use crate::caller::{CallerScope, id_problem};
use crate::conversation::contract::parse_work_contract;
use crate::conversation::plan::{self, check_plan_entry};
use crate::problem::ProblemCode;
use crate::time::Timestamp;

/// Largest `schema_or_body`, counted in characters of its compact JSON form.
pub const MAX_BODY_CHARS: usize = 64 * 1024;
pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_URI_CHARS: usize = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ContextKind {
    /// A thing: a system, a file, a policy, a glossary term.
    Noun,
    /// A way of doing something: a procedure, a checklist.
    Verb,
    /// A fact that refines a noun or verb.
    Detail,
}

impl ContextKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ContextKind::Noun => "noun",
            ContextKind::Verb => "verb",
            ContextKind::Detail => "detail",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [ContextKind::Noun, ContextKind::Verb, ContextKind::Detail]
            .into_iter()
            .find(|k| k.as_str() == raw)
    }
}

/// A context entry as a caller writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ContextEntrySpec {
    /// Caller-chosen id, referenced from `context_refs`.
    #[cfg_attr(feature = "openapi", schema(example = "deploy.checklist"))]
    pub id: String,
    #[cfg_attr(feature = "openapi", schema(example = "verb"))]
    pub kind: ContextKind,
    /// A short human title, rendered ahead of the body.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = "Deploy checklist"))]
    pub title: String,
    /// The entry itself: text, or a JSON object (for example a schema or a work contract).
    #[cfg_attr(feature = "openapi", schema(schema_with = text_or_object))]
    pub schema_or_body: Value,
    /// Where the entry comes from, when it has an address (`tessera://…`, `https://…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(example = "https://wiki.example.com/deploys")
    )]
    pub uri: Option<String>,
    /// Free-form labels for people and filters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["ops"])))]
    pub tags: Vec<String>,
    /// The governed fabric's say on this entry (a synced Tessera noun or verb, a shipped
    /// starter). A `system_builtin` entry is shimmed only while this passes the governance
    /// lens for the requesting caller; on a caller's own entry it is optional but enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_governance: Option<crate::governance::FabricGovernance>,
}

impl ContextEntrySpec {
    pub fn validate(&self) -> Result<(), crate::problem::Problem> {
        let mut v = Violations::default();
        if let Some(problem) = id_problem(&self.id) {
            v.push("/id", problem);
        }
        v.check(
            self.title.chars().count() <= MAX_TITLE_CHARS,
            "/title",
            format!("must be at most {MAX_TITLE_CHARS} characters"),
        );
        match &self.schema_or_body {
            Value::String(text) => {
                v.check(
                    !text.trim().is_empty(),
                    "/schema_or_body",
                    "must not be empty",
                );
                v.check(
                    text.chars().count() <= MAX_BODY_CHARS,
                    "/schema_or_body",
                    format!("must be at most {MAX_BODY_CHARS} characters"),
                );
            }
            Value::Object(members) => {
                let chars = self.schema_or_body.to_string().chars().count();
                v.check(
                    chars <= MAX_BODY_CHARS,
                    "/schema_or_body",
                    format!("must be at most {MAX_BODY_CHARS} characters as compact JSON"),
                );
                if let Some(Err(errors)) = members.get("work_contract").map(parse_work_contract) {
                    for error in errors {
                        let pointer = format!("/schema_or_body/work_contract{}", error.pointer);
                        v.push(pointer, error.detail);
                    }
                }
                // Grants are not known on write: a turn checks them (`admit_plan_turn`).
                if members.contains_key(plan::MEMBER) {
                    match check_plan_entry(&self.id, self.kind.as_str(), members) {
                        Ok(_) => {}
                        Err(problem) if problem.code == ProblemCode::ValidationFailed => {
                            for error in problem.errors {
                                v.push(error.pointer, error.detail);
                            }
                        }
                        // Contributor tier and Jev are refused before any shape error.
                        Err(problem) => return Err(problem),
                    }
                }
            }
            _ => v.push("/schema_or_body", "must be a string or a JSON object"),
        }
        if let Some(uri) = &self.uri {
            v.check(
                !uri.is_empty() && uri.len() <= MAX_URI_CHARS && uri.contains(':'),
                "/uri",
                "must be an absolute URI of at most 2048 characters",
            );
        }
        check_string_list(&mut v, "/tags", &self.tags, 32, 64);
        v.into_result()
    }
}

/// `schema_or_body`: a string or a JSON object.
#[cfg(feature = "openapi")]
fn text_or_object() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::String))
        .item(ObjectBuilder::new().schema_type(Type::Object))
        .description(Some(
            "The entry itself: text, or a JSON object (for example a schema or a work contract).",
        ))
        .examples([serde_json::json!(
            "Run the migrations before the canary; never deploy on Fridays."
        )])
        .into()
}

/// A stored context entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContextEntry {
    pub caller_scope: CallerScope,
    #[cfg_attr(feature = "openapi", schema(example = 1))]
    pub version: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(flatten)]
    pub spec: ContextEntrySpec,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::from_slice;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn text_and_object_bodies_are_accepted() {
        for body in [
            r#""Never deploy on Fridays""#,
            r#"{"work_contract":{"operation_id":"schedule_review","category_id":"review","description":"Schedule a review","input_schema":{"type":"object","properties":{"when":{"type":"string"}},"required":["when"],"additionalProperties":false}}}"#,
            r#"{"schema":{"type":"object"}}"#,
        ] {
            let json = format!(r#"{{"id":"a","kind":"verb","schema_or_body":{body}}}"#);
            let spec: ContextEntrySpec = from_slice(json.as_bytes()).unwrap();
            assert!(spec.validate().is_ok(), "{body}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_bad_work_contract_is_refused_at_its_offending_node() {
        let spec: ContextEntrySpec = from_slice(
            br#"{"id":"a","kind":"verb","schema_or_body":{"work_contract":{"operation_id":"x","category_id":"review","description":"d","input_schema":{"type":"object","properties":{"when":{"type":"date"}},"additionalProperties":false},"extra":1}}}"#,
        )
        .unwrap();
        let pointers: Vec<String> = spec
            .validate()
            .unwrap_err()
            .errors
            .into_iter()
            .map(|e| e.pointer)
            .collect();
        assert_eq!(
            pointers,
            [
                "/schema_or_body/work_contract/extra",
                "/schema_or_body/work_contract/input_schema/properties/when/type",
            ]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn other_bodies_and_kinds_are_refused() {
        let spec: ContextEntrySpec =
            from_slice(br#"{"id":"a","kind":"noun","schema_or_body":[1]}"#).unwrap();
        assert_eq!(
            spec.validate().unwrap_err().errors[0].pointer,
            "/schema_or_body"
        );
        let err =
            from_slice::<ContextEntrySpec>(br#"{"id":"a","kind":"thing","schema_or_body":"x"}"#)
                .unwrap_err();
        assert_eq!(err.errors[0].pointer, "/kind");
        assert!(
            err.errors[0].detail.contains("unknown value `thing`"),
            "{}",
            err.errors[0].detail
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn provider_plans_are_checked_on_write_without_grants() {
        let pointers = |p: &crate::problem::Problem| -> Vec<String> {
            p.errors.iter().map(|e| e.pointer.clone()).collect()
        };
        let spec = |kind: &str, body: Value| -> ContextEntrySpec {
            crate::json::decode(serde_json::json!({"id": "plan.main", "kind": kind, "title": "", "schema_or_body": body}))
            .unwrap()
        };
        let good = serde_json::json!({"provider_plan": {"context_refs": [], "providers": [
            {"provider": "meta", "model": "muse-spark-1.3"}
        ]}});
        assert!(spec("noun", good.clone()).validate().is_ok());
        let err = spec("verb", good).validate().unwrap_err();
        assert_eq!(pointers(&err), ["/kind"]);
        // The uncertainty grant by name, beside the entry's other errors.
        let err = spec(
        "noun",
        serde_json::json!({"provider_plan": {"context_refs": [], "allow_uncertain_failover": true,
            "providers": [{"provider": "meta", "model": "m"}]}}),
    )
    .validate()
    .unwrap_err();
        assert_eq!(
            pointers(&err),
            ["/schema_or_body/provider_plan/allow_uncertain_failover"]
        );
        // Contributor tier wins over every other error of the entry, even a bad id.
        let mut contributor = spec(
            "verb",
            serde_json::json!({"provider_plan": {"extra": 1, "providers": [{"provider": "jev", "model": "m"},
            {"provider": "meta", "model": "m-contributor"}]}}),
        );
        contributor.id = "bad id".into();
        let err = contributor.validate().unwrap_err();
        assert_eq!(
            err.code,
            crate::problem::ProblemCode::ContributorTierRefused
        );
        assert_eq!(
            pointers(&err),
            ["/schema_or_body/provider_plan/providers/1/model"]
        );
        contributor.schema_or_body["provider_plan"]["providers"][1]["model"] = "m".into();
        assert_eq!(
            contributor.validate().unwrap_err().code,
            crate::problem::ProblemCode::JevNotAPlanProvider
        );
        // Entries without a plan are untouched by the hook.
        assert!(
            spec("verb", serde_json::json!({"schema": {"provider": "jev"}}))
                .validate()
                .is_ok()
        );
    }
}
