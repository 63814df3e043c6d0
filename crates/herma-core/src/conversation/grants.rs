//! Operator grants (`HERMA_CONVERSATION_PROVIDER_GRANTS`): which caller may spend operator funds
//! on which provider and model. A `route` key alone is not that permission.
//!
//! The setting is a JSON list; each grant names one exact `key:<key_id>` scope, its choices
//! (`provider`, `model`, and for OpenRouter only its pinned `routing_provider`) and
//! `allow_uncertain_failover` (default false, the operator's alone). Wildcards, duplicate
//! callers, duplicate choices, unknown fields and duplicate JSON keys are refused, and any
//! refusal fails closed: no caller is admitted while the setting is invalid. A contributor-tier
//! model anywhere in the grants is `contributor_tier_refused` (H03), checked first.

use serde::Deserialize;
use serde_json::Value;

use crate::caller::CallerScope;
use crate::contributor::is_contributor_model;
use crate::problem::{FieldError, Problem, ProblemCode};
use crate::upstream::Provider;

const SETTING: &str = "HERMA_CONVERSATION_PROVIDER_GRANTS";

/// One provider/model a caller may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantChoice {
    pub provider: Provider,
    pub model: String,
    /// OpenRouter's pinned underlying provider; `None` for every other provider.
    pub routing_provider: Option<String>,
}

/// One caller's grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub caller_scope: CallerScope,
    pub choices: Vec<GrantChoice>,
    pub allow_uncertain_failover: bool,
}

/// Every grant, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants(Vec<Grant>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    caller_scope: String,
    providers: Vec<RawChoice>,
    #[serde(default)]
    allow_uncertain_failover: bool,
}

/// One choice as written, in a grant or a provider plan (`super::plan`): read by [`parse_choice`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChoice {
    provider: String,
    model: String,
    #[serde(default)]
    routing_provider: Option<String>,
}

fn invalid(errors: Vec<FieldError>) -> Problem {
    let detail = format!(
        "{SETTING} is invalid, so no caller may use operator-funded turns: {}",
        errors
            .iter()
            .map(|e| format!("{} {}", e.pointer, e.detail))
            .collect::<Vec<_>>()
            .join("; ")
    );
    Problem::new(ProblemCode::InvalidProviderConfiguration, detail).with_errors(errors)
}

impl Grants {
    /// Parses the setting's value; `None` (unset) is no grants at all.
    pub fn parse(raw: Option<&str>) -> Result<Self, Problem> {
        let Some(raw) = raw else {
            return Ok(Self::default());
        };
        let value = crate::json::parse_strict(raw.as_bytes()).map_err(|p| {
            invalid(if p.errors.is_empty() {
                vec![FieldError::new(
                    "",
                    format!("is not acceptable JSON: {}", p.detail),
                )]
            } else {
                p.errors
            })
        })?;
        refuse_contributor_models(&value)?;
        let raw: Vec<RawGrant> = crate::json::decode(value).map_err(|p| invalid(p.errors))?;
        let mut errors = Vec::new();
        let mut grants: Vec<Grant> = Vec::new();
        for (i, grant) in raw.into_iter().enumerate() {
            let at = |rest: &str| format!("/{i}{rest}");
            let Some(scope) = exact_key_scope(&grant.caller_scope) else {
                errors.push(FieldError::new(
                    at("/caller_scope"),
                    "must be one exact `key:<key_id>` scope (no wildcards)",
                ));
                continue;
            };
            if grants.iter().any(|g| g.caller_scope == scope) {
                errors.push(FieldError::new(at("/caller_scope"), "is granted twice"));
                continue;
            }
            if grant.providers.is_empty() {
                errors.push(FieldError::new(
                    at("/providers"),
                    "must name at least one choice",
                ));
            }
            let mut choices: Vec<GrantChoice> = Vec::new();
            for (j, choice) in grant.providers.into_iter().enumerate() {
                let at = |rest: &str| at(&format!("/providers/{j}{rest}"));
                match parse_choice(choice) {
                    Ok(choice) if choices.contains(&choice) => {
                        errors.push(FieldError::new(at(""), "is listed twice"));
                    }
                    Ok(choice) => choices.push(choice),
                    Err((field, detail)) => errors.push(FieldError::new(at(field), detail)),
                }
            }
            grants.push(Grant {
                caller_scope: scope,
                choices,
                allow_uncertain_failover: grant.allow_uncertain_failover,
            });
        }
        if errors.is_empty() {
            Ok(Self(grants))
        } else {
            Err(invalid(errors))
        }
    }

    /// The caller's own grant; another caller's never stands in for it.
    pub fn for_caller(&self, caller: &CallerScope) -> Option<&Grant> {
        self.0.iter().find(|g| &g.caller_scope == caller)
    }

    /// `Ok` when `caller`'s own grant names exactly this provider, model and routing provider;
    /// otherwise `provider_grant_required`.
    pub fn admit(&self, caller: &CallerScope, wanted: &GrantChoice) -> Result<&Grant, Problem> {
        self.for_caller(caller)
            .filter(|grant| grant.choices.contains(wanted))
            .ok_or_else(|| {
                Problem::new(
                    ProblemCode::ProviderGrantRequired,
                    format!(
                        "the operator has not granted this caller provider `{}` with model `{}`{}",
                        wanted.provider.as_str(),
                        wanted.model,
                        wanted
                            .routing_provider
                            .as_ref()
                            .map(|r| format!(" routed to `{r}`"))
                            .unwrap_or_default()
                    ),
                )
            })
    }
}

/// `key:<key_id>` exactly: no wildcard, no `system_builtin`.
pub(super) fn exact_key_scope(raw: &str) -> Option<CallerScope> {
    CallerScope::parse(raw).filter(|scope| !scope.is_system_builtin() && scope.as_str() == raw)
}

/// A choice's shape: a known provider, one exact model, and a `routing_provider` slug exactly
/// when the provider is OpenRouter. `Err` names the member (relative to the choice) and why.
pub(super) fn parse_choice(choice: RawChoice) -> Result<GrantChoice, (&'static str, String)> {
    let provider = Provider::parse(&choice.provider).ok_or_else(|| {
        let names: Vec<&str> = Provider::ALL.into_iter().map(Provider::as_str).collect();
        (
            "/provider",
            format!("`{}` is not one of {}", choice.provider, names.join(", ")),
        )
    })?;
    let model = choice.model;
    if model.trim().is_empty() || model.trim() != model || model.contains('*') {
        return Err(("/model", "must be one exact model id".to_owned()));
    }
    let routing_provider = match (provider, choice.routing_provider) {
        (Provider::Openrouter, Some(slug)) if is_slug(&slug) => Some(slug),
        (Provider::Openrouter, Some(_)) => {
            return Err((
                "/routing_provider",
                "must be one exact provider slug".to_owned(),
            ));
        }
        (Provider::Openrouter, None) => {
            return Err((
                "/routing_provider",
                "is required for OpenRouter (the pinned underlying provider)".to_owned(),
            ));
        }
        (_, Some(_)) => {
            return Err((
                "/routing_provider",
                "is only for OpenRouter choices".to_owned(),
            ));
        }
        (_, None) => None,
    };
    Ok(GrantChoice {
        provider,
        model,
        routing_provider,
    })
}

/// A provider slug: lowercase letters, digits, `-`, `_`, `.` and `/`, no wildcard.
pub fn is_slug(raw: &str) -> bool {
    (1..=64).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_./".contains(&b))
}

/// Any `model` string inside any choice that is contributor tier, before other checks.
fn refuse_contributor_models(value: &Value) -> Result<(), Problem> {
    let Value::Array(grants) = value else {
        return Ok(());
    };
    for (i, grant) in grants.iter().enumerate() {
        let choices = grant.get("providers").and_then(Value::as_array);
        for (j, choice) in choices.into_iter().flatten().enumerate() {
            if let Some(model) = choice.get("model").and_then(Value::as_str)
                && is_contributor_model(model)
            {
                return Err(Problem::new(
                    ProblemCode::ContributorTierRefused,
                    format!("{SETTING} grants contributor-tier model `{model}`, which is refused"),
                )
                .with_pointer(format!("/{i}/providers/{j}/model")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "key:0123456789abcdef";
    const B: &str = "key:fedcba9876543210";

    fn scope(raw: &str) -> CallerScope {
        CallerScope::parse(raw).unwrap()
    }

    fn meta(model: &str) -> GrantChoice {
        GrantChoice {
            provider: Provider::Meta,
            model: model.into(),
            routing_provider: None,
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h17_direct_turns_need_the_callers_own_exact_grant() {
        let grants = Grants::parse(Some(&format!(
            r#"[{{"caller_scope":"{A}","providers":[{{"provider":"meta","model":"muse-spark-1.3"}},
               {{"provider":"openrouter","model":"vendor/model","routing_provider":"host-slug"}}]}},
               {{"caller_scope":"{B}","providers":[{{"provider":"openai","model":"gpt-x"}}],
                 "allow_uncertain_failover":true}}]"#
        )))
        .unwrap();
        let a = scope(A);
        let b = scope(B);
        assert!(grants.admit(&a, &meta("muse-spark-1.3")).is_ok());
        assert!(!grants.for_caller(&a).unwrap().allow_uncertain_failover);
        assert!(grants.for_caller(&b).unwrap().allow_uncertain_failover);
        let refused = |caller: &CallerScope, choice: GrantChoice| {
            grants.admit(caller, &choice).unwrap_err().code
        };
        // Another caller's grant never covers this one.
        assert_eq!(
            refused(&b, meta("muse-spark-1.3")),
            ProblemCode::ProviderGrantRequired
        );
        // A model change by the operator does not widen the grant.
        assert_eq!(
            refused(&a, meta("muse-spark-1.2")),
            ProblemCode::ProviderGrantRequired
        );
        assert_eq!(
            refused(&a, meta("MUSE-SPARK-1.3")),
            ProblemCode::ProviderGrantRequired
        );
        let routed = |slug: &str| GrantChoice {
            provider: Provider::Openrouter,
            model: "vendor/model".into(),
            routing_provider: Some(slug.into()),
        };
        assert!(grants.admit(&a, &routed("host-slug")).is_ok());
        assert_eq!(
            refused(&a, routed("other-host")),
            ProblemCode::ProviderGrantRequired
        );
        // Unknown callers and no grants at all.
        assert_eq!(
            refused(&scope("key:1111111111111111"), meta("muse-spark-1.3")),
            ProblemCode::ProviderGrantRequired
        );
        assert_eq!(
            Grants::parse(None)
                .unwrap()
                .admit(&a, &meta("muse-spark-1.3"))
                .unwrap_err()
                .code,
            ProblemCode::ProviderGrantRequired
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn invalid_grants_fail_closed_naming_the_member() {
        let meta_choice = r#"{"provider":"meta","model":"m"}"#;
        for (raw, pointer) in [
            ("not json", ""),
            ("{}", ""),
            (
                r#"[{"caller_scope":"key:*","providers":[]}]"#,
                "/0/caller_scope",
            ),
            (
                &format!(r#"[{{"caller_scope":"*","providers":[{meta_choice}]}}]"#),
                "/0/caller_scope",
            ),
            (
                &format!(r#"[{{"caller_scope":"system_builtin","providers":[{meta_choice}]}}]"#),
                "/0/caller_scope",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","providers":[{meta_choice}]}},{{"caller_scope":"{A}","providers":[{meta_choice}]}}]"#
                ),
                "/1/caller_scope",
            ),
            (
                &format!(r#"[{{"caller_scope":"{A}","providers":[{meta_choice},{meta_choice}]}}]"#),
                "/0/providers/1",
            ),
            (
                &format!(r#"[{{"caller_scope":"{A}","providers":[{meta_choice}],"extra":1}}]"#),
                "/0/extra",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","providers":[{{"provider":"meta","model":"m","x":1}}]}}]"#
                ),
                "/0/providers/0/x",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","caller_scope":"{B}","providers":[{meta_choice}]}}]"#
                ),
                "/0/caller_scope",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","providers":[{{"provider":"jev","model":"m"}}]}}]"#
                ),
                "/0/providers/0/provider",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","providers":[{{"provider":"meta","model":"*"}}]}}]"#
                ),
                "/0/providers/0/model",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","providers":[{{"provider":"openrouter","model":"v/m"}}]}}]"#
                ),
                "/0/providers/0/routing_provider",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","providers":[{{"provider":"meta","model":"m","routing_provider":"x"}}]}}]"#
                ),
                "/0/providers/0/routing_provider",
            ),
            (
                &format!(r#"[{{"caller_scope":"{A}","providers":[]}}]"#),
                "/0/providers",
            ),
            (
                &format!(
                    r#"[{{"caller_scope":"{A}","providers":[{meta_choice}],"allow_uncertain_failover":"yes"}}]"#
                ),
                "/0/allow_uncertain_failover",
            ),
        ] {
            let err = Grants::parse(Some(raw)).unwrap_err();
            assert_eq!(err.code, ProblemCode::InvalidProviderConfiguration, "{raw}");
            assert_eq!(err.errors[0].pointer, pointer, "{raw}: {err:?}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h03_contributor_models_in_grants_are_refused_first() {
        // Also invalid in other ways: the contributor check still comes first.
        let raw = r#"[{"caller_scope":"*","providers":[{"provider":"meta","model":"muse-spark-1.3-Contributor"}]}]"#;
        let err = Grants::parse(Some(raw)).unwrap_err();
        assert_eq!(err.code, ProblemCode::ContributorTierRefused);
        assert_eq!(err.errors[0].pointer, "/0/providers/0/model");
    }
}
