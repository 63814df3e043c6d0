//! The shared parity cases (`parity/conversation_contracts.json`), and the tool spec.

use serde_json::{Value, json};

use super::*;
use crate::json::parse_strict;

const PARITY: &str = include_str!("../../../../../parity/conversation_contracts.json");

fn parity() -> Value {
    parse_strict(PARITY.as_bytes()).unwrap()
}

fn cases<'a>(parity: &'a Value, section: &str) -> &'a [Value] {
    parity[section].as_array().unwrap()
}

fn as_json(result: Result<(), Vec<FieldError>>) -> Value {
    let errors = result.err().unwrap_or_default();
    Value::Array(
        errors
            .into_iter()
            .map(|e| json!({"pointer": e.pointer, "detail": e.detail}))
            .collect(),
    )
}

/// A contract around `schema`, as the profile cases are run.
fn probe(schema: &Value) -> Value {
    json!({
        "operation_id": "probe",
        "category_id": "planning",
        "description": "A probe of the portable profile",
        "input_schema": schema,
    })
}

/// Runs every case of a section, reporting every mismatch at once.
fn run(section: &str, actual: impl Fn(&Value) -> Value) {
    let parity = parity();
    let mut mismatches = Vec::new();
    for case in cases(&parity, section) {
        let got = actual(case);
        if got != case["errors"] {
            mismatches.push(format!(
                "{}:\n  expected {}\n  got      {got}",
                case["name"], case["errors"]
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn contracts_are_checked_as_the_parity_cases_say() {
    run("contracts", |case| {
        as_json(parse_work_contract(&case["contract"]).map(|_| ()))
    });
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn input_schemas_are_checked_as_the_parity_cases_say() {
    run("profiles", |case| {
        as_json(parse_work_contract(&probe(&case["schema"])).map(|_| ()))
    });
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn arguments_are_checked_as_the_parity_cases_say() {
    run("arguments", |case| {
        let contract = parse_work_contract(&probe(&case["schema"]))
            .unwrap_or_else(|e| panic!("{}: schema refused: {e:?}", case["name"]));
        as_json(validate_arguments(&contract, &case["arguments"]))
    });
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn parity_cases_have_unique_names() {
    let parity = parity();
    let mut names = std::collections::BTreeSet::new();
    for section in ["contracts", "profiles", "arguments"] {
        for case in cases(&parity, section) {
            let name = case["name"].as_str().unwrap();
            assert!(names.insert(name.to_owned()), "duplicate case name {name}");
        }
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn each_operation_becomes_one_neutral_tool_with_its_schema_unchanged() {
    let schema = json!({
        "type": "object",
        "description": "When to meet",
        "properties": {"when": {"type": "string", "maxLength": 80}},
        "required": ["when"],
        "additionalProperties": false
    });
    let contract = parse_work_contract(&json!({
        "operation_id": "schedule_review",
        "category_id": "review",
        "description": "Schedule a design review",
        "input_schema": schema,
    }))
    .unwrap();
    assert_eq!(contract.category_id(), "review");
    assert_eq!(
        tool_spec(&contract),
        ToolSpec {
            name: "schedule_review".into(),
            description: "Schedule a design review".into(),
            parameters: schema,
        }
    );
}

/// Exponent forms cannot be written by every fixture generator, so they are checked here.
#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn integers_written_with_an_exponent_are_not_integers() {
    let contract = parse_work_contract(&probe(&json!({
        "type": "object",
        "properties": {"n": {"type": "integer"}, "x": {"type": "number", "maximum": 1e2}},
        "additionalProperties": false
    })))
    .unwrap();
    let args = parse_strict(br#"{"n": 5e0, "x": 1.5E2}"#).unwrap();
    assert_eq!(
        validate_arguments(&contract, &args).unwrap_err(),
        [
            FieldError::new(
                "/n",
                "must be an integer written without a fraction or exponent"
            ),
            FieldError::new("/x", "must be at most 100.0"),
        ]
    );
    let args = parse_strict(br#"{"n": 5, "x": 1E2}"#).unwrap();
    assert_eq!(validate_arguments(&contract, &args), Ok(()));
}
