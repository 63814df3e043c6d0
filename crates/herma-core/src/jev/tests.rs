//! The parity fixture (`parity/jev.json`), the worked example of `docs/jev.md`, and the
//! provider-plan refusal.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{Value, json};

use super::prepare::canonical_json;
use super::*;
use crate::json::{decode, parse_strict};
use crate::problem::ProblemCode;

const FIXTURE: &str = include_str!("../../../../parity/jev.json");
const DOC: &str = include_str!("../../../../docs/jev.md");

fn fixture() -> Value {
    serde_json::from_str(FIXTURE).unwrap()
}

/// `base` with `overrides`' members put over it (one level, as the fixture describes).
fn merged(base: &Value, overrides: Option<&Value>) -> Value {
    let mut out = base.clone();
    if let (Some(Value::Object(over)), Value::Object(members)) = (overrides, &mut out) {
        for (key, value) in over {
            members.insert(key.clone(), value.clone());
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Inputs {
    spec: DecisionSpec,
    attempt: AttemptInputs,
}

/// Decodes and prepares, as a worker holding JSON would.
fn prepare_json(spec: Value, attempt: Value) -> Result<PreparedDecision, Problem> {
    let inputs: Inputs = decode(json!({"spec": spec, "attempt": attempt}))?;
    prepare(inputs.spec, inputs.attempt)
}

fn base_prepared() -> PreparedDecision {
    let f = fixture();
    prepare_json(
        f["prepare"]["spec"].clone(),
        f["prepare"]["attempt"].clone(),
    )
    .unwrap()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn fixture_tolerance_is_the_adapters() {
    assert_eq!(fixture()["tolerance"].as_f64(), Some(TOLERANCE));
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn preparation_gives_the_fixtures_exact_bytes_and_attempt_record() {
    let f = fixture();
    let prepared = base_prepared();
    let body = std::str::from_utf8(prepared.body()).unwrap();
    assert_eq!(body, f["prepare"]["request_body"].as_str().unwrap());
    assert_eq!(
        serde_json::to_value(prepared.attempt()).unwrap(),
        f["prepare"]["attempt_record"]
    );
    // The bytes are canonical: compact, keys sorted, and readable by the strict reader.
    let reread = parse_strict(prepared.body()).unwrap();
    assert_eq!(canonical_json(&reread).unwrap(), prepared.body());
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn attempt_id_is_stable_for_the_same_inputs_and_differs_when_any_changes() {
    let f = fixture();
    let base = &f["prepare"];
    let base_id = base_prepared().attempt().attempt_id.clone();
    assert_eq!(base_prepared().attempt().attempt_id, base_id, "stable");
    let mut changed_ids = BTreeSet::new();
    for case in f["attempt_ids"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let spec = merged(&base["spec"], case.get("spec"));
        let attempt = merged(&base["attempt"], case.get("attempt"));
        let prepared = prepare_json(spec, attempt).unwrap();
        let id = &prepared.attempt().attempt_id;
        assert_eq!(id, case["attempt_id"].as_str().unwrap(), "{name}");
        assert_eq!(*id == base_id, case["same_as_base"] == true, "{name}");
        if *id != base_id {
            assert!(
                changed_ids.insert(id.clone()),
                "{name}: id repeats another case's"
            );
        }
    }
    assert!(changed_ids.len() >= 8);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn preparation_refusals_name_every_field() {
    let f = fixture();
    let base = &f["prepare"];
    for case in f["prepare_refusals"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let spec = case.get("spec").unwrap_or(&base["spec"]).clone();
        let attempt = merged(&base["attempt"], case.get("attempt"));
        let problem = prepare_json(spec, attempt).expect_err(name);
        assert_eq!(problem.code, ProblemCode::ValidationFailed, "{name}");
        let pointers: Vec<&str> = problem.errors.iter().map(|e| e.pointer.as_str()).collect();
        let expected: Vec<&str> = case["pointers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(pointers, expected, "{name}: {problem}");
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn every_fixture_reply_is_accepted_or_refused_as_it_says() {
    let f = fixture();
    let prepared = base_prepared();
    for case in f["replies"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let reply = case["reply"].as_str().unwrap().as_bytes();
        match validate_reply(&prepared, reply) {
            Ok(decision) => {
                assert_eq!(case["accepted"], true, "{name} was accepted");
                assert_eq!(decision.evidence, Evidence::WorkerReported);
                assert_eq!(decision.attempt_id, prepared.attempt().attempt_id);
                assert_eq!(decision.answers.len(), prepared.questions().len());
            }
            Err(refusal) => {
                let expected = &case["refused"];
                assert!(expected.is_object(), "{name} was refused: {refusal}");
                assert_eq!(
                    refusal.question.as_deref(),
                    expected["question"].as_str(),
                    "{name}: {refusal}"
                );
                assert_eq!(refusal.rule.code(), expected["rule"], "{name}: {refusal}");
            }
        }
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_fixture_exercises_every_rule() {
    let f = fixture();
    let exercised: BTreeSet<&str> = f["replies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|case| case["refused"]["rule"].as_str())
        .collect();
    for rule in ReplyRule::ALL {
        assert!(
            exercised.contains(rule.code()),
            "{} is untested",
            rule.code()
        );
    }
    let names: Vec<&str> = f["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| case["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), names.iter().collect::<BTreeSet<_>>().len());
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn rule_codes_are_unique_snake_case_and_serialize_as_themselves() {
    let mut seen = BTreeSet::new();
    for rule in ReplyRule::ALL {
        assert!(seen.insert(rule.code()));
        assert!(
            rule.code()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_')
        );
        assert_eq!(serde_json::to_value(rule).unwrap(), rule.code());
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_decision_is_labelled_worker_reported_evidence() {
    let f = fixture();
    let reply = f["replies"][0]["reply"].as_str().unwrap();
    let decision = validate_reply(&base_prepared(), reply.as_bytes()).unwrap();
    let body = serde_json::to_value(&decision).unwrap();
    assert_eq!(body["evidence"], "worker_reported");
    assert_eq!(
        decision.reply_sha256,
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(reply.as_bytes()))
    );
    assert_eq!(decision.answered_model, "jev-1.14.0");
    assert_eq!(decision.usage.input_tokens, 214);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_refusal_becomes_a_problem_naming_question_and_rule() {
    let refusal = ReplyRefusal {
        question: Some("urgency".into()),
        rule: ReplyRule::ScoreMeanMismatch,
        pointer: "/answers/urgency/score".into(),
        detail: "score 1.9 differs".into(),
    };
    let problem = Problem::from(refusal);
    assert_eq!(problem.code, ProblemCode::ValidationFailed);
    assert_eq!(problem.errors[0].pointer, "/answers/urgency/score");
    assert_eq!(problem.extension("question"), Some(&json!("urgency")));
    assert_eq!(
        problem.extension("rule"),
        Some(&json!("score_mean_mismatch"))
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn state_nesting_is_bounded_like_every_json_herma_reads() {
    let f = fixture();
    let nested = |depth: usize| (1..depth).fold(json!({}), |inner, _| json!({ "a": inner }));
    for (depth, ok) in [
        (crate::json::MAX_DEPTH, true),
        (crate::json::MAX_DEPTH + 1, false),
    ] {
        let spec = merged(
            &f["prepare"]["spec"],
            Some(&json!({"state": nested(depth)})),
        );
        let result = prepare_json(spec, f["prepare"]["attempt"].clone());
        assert_eq!(result.is_ok(), ok, "depth {depth}");
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_url_is_the_fixed_origin_and_path() {
    assert_eq!(SYSTEMONE_URL, format!("{ORIGIN}{SYSTEMONE_PATH}"));
    let url = url::Url::parse(SYSTEMONE_URL).unwrap();
    assert_eq!(
        (url.scheme(), url.host_str()),
        ("https", Some("api.typesafe.ai"))
    );
    assert_eq!(base_prepared().attempt().endpoint, SYSTEMONE_URL);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn jev_cannot_be_a_provider_plan_choice() {
    for name in [
        "jev",
        "Jev",
        " typesafe ",
        "herma.decision_provider",
        "API.TYPESAFE.AI",
    ] {
        let problem = refuse_in_provider_plan(name).expect_err(name);
        assert_eq!(problem.code, ProblemCode::JevNotAPlanProvider, "{name}");
        assert_eq!(problem.code.as_str(), "jev_not_a_plan_provider");
        assert_eq!(problem.extension("provider"), Some(&json!(name)));
    }
    for name in [
        "openai",
        "anthropic",
        "ollama",
        "jevx",
        "typesafe.ai.example",
        "",
    ] {
        assert!(refuse_in_provider_plan(name).is_ok(), "{name}");
    }
}

/// The fenced block of `docs/jev.md` whose info string is exactly `info`.
fn doc_block(info: &str) -> &'static str {
    let fence = format!("```{info}\n");
    let start = DOC
        .find(&fence)
        .unwrap_or_else(|| panic!("no {info} block"))
        + fence.len();
    let len = DOC[start..].find("```").unwrap();
    &DOC[start..start + len]
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_documented_example_is_the_fixtures_and_is_accepted() {
    let prepared = base_prepared();
    let request = parse_strict(doc_block("json request").as_bytes()).unwrap();
    assert_eq!(canonical_json(&request).unwrap(), prepared.body());
    let attempt = parse_strict(doc_block("json attempt").as_bytes()).unwrap();
    assert_eq!(attempt, serde_json::to_value(prepared.attempt()).unwrap());
    let reply = doc_block("json reply");
    let decision = validate_reply(&prepared, reply.as_bytes()).unwrap();
    let documented = parse_strict(doc_block("json decision").as_bytes()).unwrap();
    assert_eq!(documented, serde_json::to_value(&decision).unwrap());
    // The documented refusal is what the validator says about the documented bad reply.
    let refused =
        validate_reply(&prepared, doc_block("json refused-reply").as_bytes()).unwrap_err();
    let documented = parse_strict(doc_block("json refusal").as_bytes()).unwrap();
    let refusal = json!({
        "question": refused.question,
        "rule": refused.rule.code(),
        "pointer": refused.pointer,
        "detail": refused.detail,
    });
    assert_eq!(documented, refusal);
}
