//! The strict JSON reader of Herma's own API (`herma_core::json::parse_strict`) on any bytes.
//!
//! Invariants: it never panics; what it accepts is JSON that serde_json reads to the same value,
//! nested at most `MAX_DEPTH` deep, and written back it reads back the same (numbers exactly); a
//! refusal is `invalid_json` with a detail and one field error.
//!
//! What it accepts is then decoded (`json::decode`) and validated as three of the API's request
//! bodies — a provision, a context entry, a conversation turn — (an array: each of its first
//! items): every field error either step reports names a node of the value, or a member
//! missing from an object of it.

#![no_main]

use herma_core::conversation::turn::TurnBody;
use herma_core::json::{MAX_DEPTH, decode, parse_strict};
use herma_core::model::{ContextEntrySpec, ProvisionSpec};
use herma_core::problem::{Problem, ProblemCode};
use herma_fuzz::names_a_node;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn names_nodes(problem: &Problem, value: &Value) {
    assert!(
        !problem.errors.is_empty(),
        "a refusal lists what is wrong: {problem:?}"
    );
    for error in &problem.errors {
        assert!(
            names_a_node(value, &error.pointer),
            "`{}` ({}) names no node of {value}",
            error.pointer,
            error.detail
        );
    }
}

/// Decodes `value` as one request body and validates it, checking what both report.
fn request(value: &Value) {
    match decode::<ProvisionSpec>(value.clone()) {
        Ok(spec) => {
            if let Err(problem) = spec.validate() {
                names_nodes(&problem, value);
            }
        }
        Err(problem) => names_nodes(&problem, value),
    }
    match decode::<ContextEntrySpec>(value.clone()) {
        Ok(spec) => {
            if let Err(problem) = spec.validate() {
                names_nodes(&problem, value);
            }
        }
        Err(problem) => names_nodes(&problem, value),
    }
    match decode::<TurnBody>(value.clone()) {
        Ok(body) => {
            if let Err(problem) = body.validate() {
                names_nodes(&problem, value);
            }
        }
        Err(problem) => names_nodes(&problem, value),
    }
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fuzz_target!(|data: &[u8]| {
    match parse_strict(data) {
        Ok(value) => {
            let lenient = serde_json::from_slice::<Value>(data);
            assert_eq!(
                lenient.as_ref().ok(),
                Some(&value),
                "strict and serde_json read the same JSON differently"
            );
            assert!(depth(&value) <= MAX_DEPTH, "nested past MAX_DEPTH");
            let written = serde_json::to_vec(&value).expect("a Value serializes");
            let again = parse_strict(&written).expect("what the reader read, written, reads");
            assert_eq!(again, value, "a value changed on its way through text");
            match &value {
                Value::Array(items) => items.iter().take(4).for_each(request),
                other => request(other),
            }
        }
        Err(problem) => {
            assert_eq!(problem.code, ProblemCode::InvalidJson);
            assert!(!problem.detail.is_empty(), "a refusal says why");
            assert_eq!(problem.errors.len(), 1, "a refusal names one place");
        }
    }
});
