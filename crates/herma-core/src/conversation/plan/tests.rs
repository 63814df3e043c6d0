use serde_json::{Value, json};

use super::*;
use crate::upstream::Provider;

const A: &str = "key:0123456789abcdef";
const B: &str = "key:fedcba9876543210";

fn scope(raw: &str) -> CallerScope {
    CallerScope::parse(raw).unwrap()
}

fn check(body: Value) -> Result<ProviderPlan, Problem> {
    check_plan_entry("plan.main", "noun", body.as_object().unwrap())
}

fn pointers(problem: &Problem) -> Vec<&str> {
    problem.errors.iter().map(|e| e.pointer.as_str()).collect()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn h17_plans_refuse_a_second_credential_for_the_same_upstream_model() {
    for (direct, routed) in [
        (
            json!({"provider": "openai", "model": "gpt-x"}),
            json!({"provider": "openrouter", "model": "openai/gpt-x", "routing_provider": "openai"}),
        ),
        (
            json!({"provider": "openai", "model": "gpt-x-2025-01-31"}),
            json!({"provider": "openrouter", "model": "OpenAI/GPT_X:free", "routing_provider": "azure"}),
        ),
        (
            json!({"provider": "meta", "model": "muse-spark-1.3"}),
            json!({"provider": "openrouter", "model": "meta-llama/muse-spark-1.3", "routing_provider": "together"}),
        ),
        (
            json!({"provider": "anthropic", "model": "claude-sonnet-4-5-latest"}),
            json!({"provider": "openrouter", "model": "anthropic/claude-sonnet-4.5", "routing_provider": "anthropic"}),
        ),
    ] {
        for providers in [
            json!([direct.clone(), routed.clone()]),
            json!([routed.clone(), direct.clone()]),
        ] {
            let err = check(json!({"provider_plan": {"context_refs": [], "providers": providers}}))
                .unwrap_err();
            assert_eq!(err.code, ProblemCode::ValidationFailed, "{providers}");
            assert_eq!(
                pointers(&err),
                ["/schema_or_body/provider_plan/providers/1/model"],
                "{providers}"
            );
            assert!(
                err.errors[0].detail.contains("H17"),
                "{}",
                err.errors[0].detail
            );
        }
    }
    // Ollama's open-weight name is its own identity, so it may sit beside the direct model.
    let plan = check(json!({"provider_plan": {"context_refs": [], "providers": [
        {"provider": "openai", "model": "gpt-oss"},
        {"provider": "ollama", "model": "gpt-oss"}
    ]}}))
    .unwrap();
    assert_eq!(plan.choices.len(), 2);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn defaults_pin_nothing_and_opt_into_nothing_uncertain() {
    let plan = check(json!({"provider_plan": {
        "context_refs": ["work.review"],
        "providers": [{"provider": "meta", "model": "muse-spark-1.3"}]
    }}))
    .unwrap();
    assert!(plan.allow_failover);
    assert!(!plan.allow_uncertain_outcome);
    assert!(plan.allow_recovery_probe);
    assert_eq!(plan.caller_scope, None);
    assert_eq!(plan.context_refs, ["work.review"]);
    assert_eq!(plan.choices[0].provider, Provider::Meta);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_turn_problem_names_the_plan_entry() {
    let grants = Grants::parse(Some(&format!(
        r#"[{{"caller_scope":"{A}","providers":[{{"provider":"meta","model":"m"}}]}}]"#
    )))
    .unwrap();
    let body: TurnBody = crate::json::decode(json!({
        "conversation_id": "c", "request_id": "r", "expected_version": 0, "message": "hi",
        "context_refs": ["plan.main"], "provider": "meta", "provider_plan_ref": "plan.main"
    }))
    .unwrap();
    let stored = json!({"provider_plan": {"context_refs": [], "providers": [
        {"provider": "meta", "model": "m"}, {"provider": "ollama", "model": "o"}
    ]}});
    let owner = scope(A);
    let entry = PlanEntry {
        id: "plan.main",
        owner: &owner,
        kind: "noun",
        schema_or_body: &stored,
    };
    let err = admit_plan_turn(&scope(A), &grants, &body, &entry).unwrap_err();
    assert_eq!(err.code, ProblemCode::ProviderGrantRequired);
    assert_eq!(err.extension(PLAN_REF_EXTENSION), Some(&json!("plan.main")));
    assert!(err.detail.contains("`ollama`"), "{}", err.detail);
    // A caller without the plan's owner cannot use it, whatever its own grant says.
    let err = admit_plan_turn(&scope(B), &grants, &body, &entry).unwrap_err();
    assert_eq!(pointers(&err), ["/provider_plan_ref"]);
}

/// The plan as the fixture spells it.
fn spelled(plan: &ProviderPlan) -> Value {
    let choices: Vec<Value> = plan
        .choices
        .iter()
        .map(|c| {
            let mut out = json!({"provider": c.provider.as_str(), "model": c.model});
            if let Some(slug) = &c.routing_provider {
                out["routing_provider"] = slug.as_str().into();
            }
            out["identity"] = upstream_identity(c.provider, &c.model).into();
            out
        })
        .collect();
    json!({
        "caller_scope": plan.caller_scope.as_ref().map(CallerScope::as_str),
        "context_refs": plan.context_refs,
        "choices": choices,
        "allow_failover": plan.allow_failover,
        "allow_uncertain_outcome": plan.allow_uncertain_outcome,
        "allow_recovery_probe": plan.allow_recovery_probe,
    })
}

fn expect_problem(name: &str, case: &Value, problem: &Problem) {
    assert_eq!(problem.code.as_str(), case["code"], "{name}: {problem:?}");
    let expected: Vec<&str> = case["pointers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(pointers(problem), expected, "{name}: {problem:?}");
}

fn fixture() -> Value {
    crate::json::parse_strict(
        include_str!("../../../../../parity/conversation_plans.json").as_bytes(),
    )
    .unwrap()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn plan_entry_parity_fixtures_hold() {
    let fixture = fixture();
    let cases = fixture["entries"].as_array().unwrap();
    assert!(cases.len() >= 40, "{}", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let result = check_plan_entry(
            case["id"].as_str().unwrap(),
            case["kind"].as_str().unwrap(),
            case["schema_or_body"].as_object().unwrap(),
        );
        match (result, case.get("plan")) {
            (Ok(plan), Some(expected)) => assert_eq!(&spelled(&plan), expected, "{name}"),
            (Ok(plan), None) => panic!("{name}: expected {}, got {plan:?}", case["code"]),
            (Err(problem), _) => expect_problem(name, case, &problem),
        }
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn plan_turn_parity_fixtures_hold() {
    let fixture = fixture();
    let cases = fixture["turns"].as_array().unwrap();
    assert!(cases.len() >= 25, "{}", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let grants_value = case.get("grants").unwrap_or(&fixture["grants"]);
        let grants = Grants::parse(Some(&grants_value.to_string())).expect(name);
        let body: TurnBody = crate::json::decode(case["body"].clone()).expect(name);
        let stored = &case["entry"];
        let owner = scope(stored["owner"].as_str().unwrap());
        let entry = PlanEntry {
            id: stored["id"].as_str().unwrap(),
            owner: &owner,
            kind: stored["kind"].as_str().unwrap(),
            schema_or_body: &stored["schema_or_body"],
        };
        let caller = scope(case["caller"].as_str().unwrap());
        match admit_plan_turn(&caller, &grants, &body, &entry) {
            Ok(turn) if case.get("code").is_none() => {
                assert_eq!(json!(turn.model_refs), case["model_refs"], "{name}");
                assert_eq!(
                    json!(turn.allow_uncertain_failover),
                    case["allow_uncertain_failover"],
                    "{name}"
                );
            }
            Ok(turn) => panic!("{name}: expected {}, got {turn:?}", case["code"]),
            Err(problem) => {
                assert!(case.get("code").is_some(), "{name}: {problem:?}");
                expect_problem(name, case, &problem);
            }
        }
    }
}
