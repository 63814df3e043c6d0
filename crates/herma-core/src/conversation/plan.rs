//! Provider plans: a caller's own ordered list of operator-funded provider choices for a
//! conversation, and the checks that admit a turn under one (H17).
//!
//! A plan is a caller-owned context entry of kind `noun` whose `schema_or_body` holds only
//! `provider_plan`:
//!
//! ```json
//! {"provider_plan": {
//!   "caller_scope": "key:0123456789abcdef",
//!   "purpose": "caller_requested_typed_proposal",
//!   "payer": "operator",
//!   "context_refs": ["work.observation"],
//!   "providers": [
//!     {"provider": "meta", "model": "muse-spark-1.3"},
//!     {"provider": "openrouter", "model": "openai/gpt-x", "routing_provider": "openai"}
//!   ],
//!   "allow_failover": true,
//!   "allow_uncertain_outcome": false,
//!   "allow_recovery_probe": true
//! }}
//! ```
//!
//! - `providers` (required): the choices in the order they are tried, each shaped like a grant
//!   choice (`super::grants`). Each provider appears at most once, and each upstream model
//!   identity ([`super::identity`]) at most once, so a rotation is finite and never moves
//!   between two credentials for one model.
//! - `context_refs` (required, may be empty): the turn's other context entries (see
//!   [`admit_plan_turn`] for what "match" means). Not the plan itself; at most
//!   [`MAX_PLAN_CONTEXT_REFS`].
//! - `allow_failover` (default true: a plan is itself the opt-in to rotation; `false` pins the
//!   first choice), `allow_uncertain_outcome` (default false: the plan's half of uncertain
//!   failover) and `allow_recovery_probe` (default true; `false` pauses recovery probes).
//! - `caller_scope`, `purpose`, `payer` (optional): when present they must be the owner's own
//!   `key:<key_id>`, [`PURPOSE`] and [`PAYER`].
//! - `allow_uncertain_failover` is refused by name: it is the operator grant's alone.
//!
//! Order of refusal, on write ([`check_plan_entry`], hooked into `ContextEntrySpec::validate`)
//! and again at a turn: a contributor-tier model (`contributor_tier_refused`, H03) first, then a
//! Jev choice (`jev_not_a_plan_provider`), then every shape error at once (`validation_failed`).
//! Grants are not known at write time: only a turn checks them ([`admit_plan_turn`]). Pointers
//! are relative to the entry (`/schema_or_body/provider_plan/providers/1/model`); a turn's own
//! members are pointed at relative to the turn body (`/provider_plan_ref`).
//!
//! A choice is usable in a turn only while the provider's configuration resolves to exactly that
//! choice (`ProviderConfig::choice() == choice`); otherwise the plan's model is not configured:
//! the shell records `provider_not_configured` and the plan may advance ([`super::failover`]).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::grants::{GrantChoice, Grants, RawChoice, exact_key_scope, parse_choice};
use super::identity::upstream_identity;
use super::turn::{MAX_CONTEXT_REFS, TurnBody};
use crate::caller::{CallerScope, id_problem};
use crate::contributor::refuse_contributor_model;
use crate::jev::refuse_in_provider_plan;
use crate::json::escape_pointer_segment;
use crate::problem::{FieldError, Problem, ProblemCode};

/// The `schema_or_body` member that makes an entry a plan.
pub const MEMBER: &str = "provider_plan";
/// Where a plan sits in its entry; every plan pointer starts here.
pub const POINTER: &str = "/schema_or_body/provider_plan";
/// The one purpose a plan may state.
pub const PURPOSE: &str = "caller_requested_typed_proposal";
/// The one payer a plan may state: plans govern operator-funded turns.
pub const PAYER: &str = "operator";
/// A turn names the plan and the plan's other refs, within the turn's limit.
pub const MAX_PLAN_CONTEXT_REFS: usize = MAX_CONTEXT_REFS - 1;
/// The extension member naming the plan entry of a turn-time problem.
pub const PLAN_REF_EXTENSION: &str = "provider_plan_ref";

/// A plan that passed [`check_plan_entry`]. `choices` is never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderPlan {
    /// The owner the plan states, if it states one.
    pub caller_scope: Option<CallerScope>,
    pub context_refs: Vec<String>,
    pub choices: Vec<GrantChoice>,
    pub allow_failover: bool,
    pub allow_uncertain_outcome: bool,
    pub allow_recovery_probe: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    #[serde(default)]
    caller_scope: Option<String>,
    #[serde(default)]
    purpose: Option<String>,
    #[serde(default)]
    payer: Option<String>,
    context_refs: Vec<String>,
    providers: Vec<RawChoice>,
    #[serde(default = "yes")]
    allow_failover: bool,
    #[serde(default)]
    allow_uncertain_outcome: bool,
    #[serde(default = "yes")]
    allow_recovery_probe: bool,
}

fn yes() -> bool {
    true
}

fn at(rest: &str) -> String {
    format!("{POINTER}{rest}")
}

/// The write-time rules of an entry whose object `schema_or_body` holds [`MEMBER`]: `kind` (as
/// `ContextKind::as_str` spells it) must be `noun`, nothing may sit beside the plan, and the
/// plan must be well formed. `id` is the entry's own id (a plan cannot list itself).
pub fn check_plan_entry(
    id: &str,
    kind: &str,
    schema_or_body: &Map<String, Value>,
) -> Result<ProviderPlan, Problem> {
    let Some(plan) = schema_or_body.get(MEMBER) else {
        return Err(Problem::validation(vec![FieldError::new(
            "/schema_or_body",
            format!("has no `{MEMBER}`"),
        )]));
    };
    let Some(members) = plan.as_object() else {
        return Err(Problem::validation(vec![FieldError::new(
            POINTER,
            "must be an object",
        )]));
    };
    refuse_contributor_models(members)?;
    refuse_jev_choices(members)?;
    let mut errors = Vec::new();
    if kind != "noun" {
        errors.push(FieldError::new(
            "/kind",
            format!("is `{kind}`; a provider plan is a `noun`"),
        ));
    }
    for key in schema_or_body.keys().filter(|key| *key != MEMBER) {
        errors.push(FieldError::new(
            format!("/schema_or_body/{}", escape_pointer_segment(key)),
            format!("must not sit beside `{MEMBER}`: a plan entry holds only its plan"),
        ));
    }
    match read_plan(id, members) {
        Ok(plan) if errors.is_empty() => Ok(plan),
        Ok(_) => Err(Problem::validation(errors)),
        Err(more) => {
            errors.extend(more);
            Err(Problem::validation(errors))
        }
    }
}

/// Every `providers/*/model` that is contributor tier, before anything else (H03).
fn refuse_contributor_models(plan: &Map<String, Value>) -> Result<(), Problem> {
    for (j, choice) in raw_choices(plan) {
        if let Some(model) = choice.get("model").and_then(Value::as_str) {
            refuse_contributor_model(model, &at(&format!("/providers/{j}/model")))?;
        }
    }
    Ok(())
}

/// A choice naming Jev, which produces decisions rather than generated proposals.
fn refuse_jev_choices(plan: &Map<String, Value>) -> Result<(), Problem> {
    for (j, choice) in raw_choices(plan) {
        if let Some(provider) = choice.get("provider").and_then(Value::as_str) {
            refuse_in_provider_plan(provider)
                .map_err(|p| p.with_pointer(at(&format!("/providers/{j}/provider"))))?;
        }
    }
    Ok(())
}

fn raw_choices(plan: &Map<String, Value>) -> impl Iterator<Item = (usize, &Map<String, Value>)> {
    plan.get("providers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(j, choice)| choice.as_object().map(|c| (j, c)))
}

/// The plan's shape, every error at once (pointers from [`POINTER`]).
fn read_plan(id: &str, members: &Map<String, Value>) -> Result<ProviderPlan, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut members = members.clone();
    if members.remove("allow_uncertain_failover").is_some() {
        errors.push(FieldError::new(
            at("/allow_uncertain_failover"),
            "is set only by the operator, in this caller's grant; a plan cannot supply it (the \
             plan's own opt-in is `allow_uncertain_outcome`)",
        ));
    }
    let raw: RawPlan = match crate::json::decode(Value::Object(members)) {
        Ok(raw) => raw,
        Err(problem) => {
            errors.extend(
                problem
                    .errors
                    .into_iter()
                    .map(|e| FieldError::new(at(&e.pointer), e.detail)),
            );
            return Err(errors);
        }
    };
    let caller_scope = read_statements(&raw, &mut errors);
    check_context_refs(id, &raw.context_refs, &mut errors);
    let choices = read_choices(raw.providers, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(ProviderPlan {
        caller_scope,
        context_refs: raw.context_refs,
        choices,
        allow_failover: raw.allow_failover,
        allow_uncertain_outcome: raw.allow_uncertain_outcome,
        allow_recovery_probe: raw.allow_recovery_probe,
    })
}

/// `caller_scope`, `purpose` and `payer`: optional, and fixed when present.
fn read_statements(raw: &RawPlan, errors: &mut Vec<FieldError>) -> Option<CallerScope> {
    if raw.purpose.as_deref().is_some_and(|p| p != PURPOSE) {
        errors.push(FieldError::new(
            at("/purpose"),
            format!("must be `{PURPOSE}`, the only purpose of a plan"),
        ));
    }
    if raw.payer.as_deref().is_some_and(|p| p != PAYER) {
        errors.push(FieldError::new(
            at("/payer"),
            format!("must be `{PAYER}`: plans govern operator-funded turns only"),
        ));
    }
    let raw_scope = raw.caller_scope.as_deref()?;
    let scope = exact_key_scope(raw_scope);
    if scope.is_none() {
        errors.push(FieldError::new(
            at("/caller_scope"),
            "must be the owner's own exact `key:<key_id>` scope",
        ));
    }
    scope
}

fn check_context_refs(id: &str, refs: &[String], errors: &mut Vec<FieldError>) {
    if refs.len() > MAX_PLAN_CONTEXT_REFS {
        errors.push(FieldError::new(
            at("/context_refs"),
            format!(
                "must name at most {MAX_PLAN_CONTEXT_REFS} entries (a turn names these and the plan, at most {MAX_CONTEXT_REFS})"
            ),
        ));
        return;
    }
    for (i, entry) in refs.iter().enumerate() {
        let pointer = at(&format!("/context_refs/{i}"));
        if let Some(problem) = id_problem(entry) {
            errors.push(FieldError::new(pointer, problem));
        } else if entry == id {
            errors.push(FieldError::new(
                pointer,
                "is the plan itself; list only the other entries its turns name",
            ));
        } else if refs[..i].contains(entry) {
            errors.push(FieldError::new(pointer, "is listed twice"));
        }
    }
}

/// The choices, each provider and each upstream identity once.
fn read_choices(raw: Vec<RawChoice>, errors: &mut Vec<FieldError>) -> Vec<GrantChoice> {
    if raw.is_empty() {
        errors.push(FieldError::new(
            at("/providers"),
            "must name at least one choice",
        ));
    }
    let mut choices: Vec<GrantChoice> = Vec::new();
    let mut identities: Vec<String> = Vec::new();
    for (j, choice) in raw.into_iter().enumerate() {
        let pointer = |rest: &str| at(&format!("/providers/{j}{rest}"));
        let choice = match parse_choice(choice) {
            Ok(choice) => choice,
            Err((field, detail)) => {
                errors.push(FieldError::new(pointer(field), detail));
                continue;
            }
        };
        let identity = upstream_identity(choice.provider, &choice.model);
        if let Some(i) = choices.iter().position(|c| c.provider == choice.provider) {
            errors.push(FieldError::new(
                pointer("/provider"),
                format!(
                    "`{}` is already choice {i}; each provider appears once",
                    choice.provider.as_str()
                ),
            ));
        } else if let Some(i) = identities.iter().position(|known| *known == identity) {
            errors.push(FieldError::new(
                pointer("/model"),
                format!(
                    "reaches upstream model `{identity}`, as choice {i} does; a plan names each \
                     upstream model once, never a second credential for it (H17)"
                ),
            ));
        } else {
            identities.push(identity);
            choices.push(choice);
        }
    }
    choices
}

/// The entry a turn's `provider_plan_ref` names, as the store holds it.
#[derive(Clone, Copy, Debug)]
pub struct PlanEntry<'a> {
    pub id: &'a str,
    /// The entry's owner (`system_builtin` for a shipped starter).
    pub owner: &'a CallerScope,
    /// `noun`, `verb` or `detail`, as `ContextKind::as_str` spells it.
    pub kind: &'a str,
    pub schema_or_body: &'a Value,
}

/// A turn admitted under its plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTurn {
    pub plan: ProviderPlan,
    /// The turn's `context_refs` without the plan, in the turn's order: the only entries a model
    /// may be sent. (The plan's version and content still join the conversation fingerprint.)
    pub model_refs: Vec<String>,
    /// The caller's own grant's `allow_uncertain_failover`: the operator's half of uncertain
    /// failover. Never the plan's, never another caller's.
    pub allow_uncertain_failover: bool,
}

/// Admits `body` under the plan `entry` for `caller`. In order:
/// 1. `provider_plan_ref` is present, and names an entry holding a plan;
/// 2. the plan passes [`check_plan_entry`] (contributor, then Jev, then shape);
/// 3. the entry is the caller's own: a `system_builtin` entry (or another caller's) never
///    stands in for it, and a stated `caller_scope` is the caller's;
/// 4. the turn: `context_refs` includes `provider_plan_ref`; `provider` is the plan's first
///    provider; and the other refs **match** the plan — the turn's `context_refs` with the plan
///    ref removed (wherever it stands) equal the plan's `context_refs` element by element: the
///    same ids, in the same order, none missing and none added. Order counts because it is the
///    order the model reads its context in and the conversation fingerprint keeps;
/// 5. every choice is in the caller's own grant, exactly (`provider_grant_required`, each
///    missing choice named).
pub fn admit_plan_turn(
    caller: &CallerScope,
    grants: &Grants,
    body: &TurnBody,
    entry: &PlanEntry<'_>,
) -> Result<PlannedTurn, Problem> {
    let Some(plan_ref) = body.provider_plan_ref.as_deref() else {
        return Err(Problem::validation(vec![FieldError::new(
            "/provider_plan_ref",
            "is required for a planned turn",
        )]));
    };
    let Some(stored) = entry
        .schema_or_body
        .as_object()
        .filter(|body| body.contains_key(MEMBER))
    else {
        return Err(Problem::validation(vec![FieldError::new(
            "/provider_plan_ref",
            format!("names `{plan_ref}`, which holds no `schema_or_body.{MEMBER}`"),
        )]));
    };
    let plan = check_plan_entry(entry.id, entry.kind, stored)
        .map_err(|p| p.with(PLAN_REF_EXTENSION, plan_ref))?;
    check_owner(caller, entry, &plan, plan_ref)?;
    let mut errors = Vec::new();
    if !body.context_refs.iter().any(|r| r == plan_ref) {
        errors.push(FieldError::new(
            "/provider_plan_ref",
            "must also be listed in `context_refs`",
        ));
    }
    let first = plan.choices.first().map(|c| c.provider);
    if first != Some(body.provider) {
        errors.push(FieldError::new(
            "/provider",
            format!(
                "must be the plan's first provider `{}`",
                first.map_or("", |p| p.as_str())
            ),
        ));
    }
    let model_refs: Vec<String> = body
        .context_refs
        .iter()
        .filter(|r| *r != plan_ref)
        .cloned()
        .collect();
    if model_refs != plan.context_refs {
        errors.push(FieldError::new(
            "/context_refs",
            format!(
                "must be the plan's context_refs [{}] in that order, plus the plan itself",
                plan.context_refs.join(", ")
            ),
        ));
    }
    if !errors.is_empty() {
        return Err(Problem::validation(errors));
    }
    let allow_uncertain_failover = admit_choices(caller, grants, &plan, plan_ref)?;
    Ok(PlannedTurn {
        plan,
        model_refs,
        allow_uncertain_failover,
    })
}

/// Step 3 of [`admit_plan_turn`].
fn check_owner(
    caller: &CallerScope,
    entry: &PlanEntry<'_>,
    plan: &ProviderPlan,
    plan_ref: &str,
) -> Result<(), Problem> {
    let refused = |pointer: String, detail: &str| {
        Err(Problem::validation(vec![FieldError::new(pointer, detail)])
            .with(PLAN_REF_EXTENSION, plan_ref))
    };
    if entry.owner.is_system_builtin() {
        return refused(
            "/provider_plan_ref".into(),
            "names a built-in entry; a provider plan is the caller's own noun",
        );
    }
    if entry.owner != caller {
        return refused(
            "/provider_plan_ref".into(),
            "names another caller's entry; a provider plan is the caller's own noun",
        );
    }
    if plan.caller_scope.as_ref().is_some_and(|s| s != caller) {
        return refused(
            at("/caller_scope"),
            "names another caller; a plan is its owner's alone",
        );
    }
    Ok(())
}

/// Step 5 of [`admit_plan_turn`]: the grant's `allow_uncertain_failover` when every choice is
/// granted.
fn admit_choices(
    caller: &CallerScope,
    grants: &Grants,
    plan: &ProviderPlan,
    plan_ref: &str,
) -> Result<bool, Problem> {
    let missing: Vec<FieldError> = plan
        .choices
        .iter()
        .enumerate()
        .filter_map(|(j, choice)| {
            grants
                .admit(caller, choice)
                .err()
                .map(|p| FieldError::new(at(&format!("/providers/{j}")), p.detail))
        })
        .collect();
    if let Some(first) = missing.first() {
        let detail = format!(
            "every plan choice must be in the caller's own grant: {}",
            first.detail
        );
        return Err(Problem::new(ProblemCode::ProviderGrantRequired, detail)
            .with_errors(missing)
            .with(PLAN_REF_EXTENSION, plan_ref));
    }
    Ok(grants
        .for_caller(caller)
        .is_some_and(|grant| grant.allow_uncertain_failover))
}

#[cfg(test)]
mod tests;
