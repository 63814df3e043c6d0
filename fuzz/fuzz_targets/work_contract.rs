//! The portable-schema validator: work contracts (`conversation::contract::parse_work_contract`)
//! and the arguments a model proposes for one (`validate_arguments`), from any strict JSON. An
//! array `[contract, arguments]` is read as both; any other value as a contract alone.
//!
//! Invariants: nothing panics; every refusal is reported by JSON pointer to a node of the value
//! it is about (or to a member missing from an object there), within the error caps; a contract
//! read keeps its members as written; a check of arguments is the same on the arguments written
//! out and read again.

#![no_main]

use herma_core::FieldError;
use herma_core::conversation::contract::{
    MAX_ARGUMENT_ERRORS, MAX_CONTRACT_ERRORS, parse_work_contract, tool_spec, validate_arguments,
};
use herma_core::json::parse_strict;
use herma_fuzz::names_a_node;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn check_errors(errors: &[FieldError], about: &Value, cap: usize) {
    assert!(!errors.is_empty(), "a refusal lists what is wrong");
    assert!(errors.len() <= cap, "more errors than the cap");
    for error in errors {
        assert!(
            names_a_node(about, &error.pointer),
            "`{}` ({}) names no node of {about}",
            error.pointer,
            error.detail
        );
        assert!(!error.detail.trim().is_empty());
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = parse_strict(data) else {
        return;
    };
    let (contract, args) = match &value {
        Value::Array(pair) if pair.len() == 2 => (&pair[0], Some(&pair[1])),
        other => (other, None),
    };
    let parsed = match parse_work_contract(contract) {
        Ok(parsed) => parsed,
        Err(errors) => {
            check_errors(&errors, contract, MAX_CONTRACT_ERRORS);
            return;
        }
    };
    assert_eq!(Some(parsed.input_schema()), contract.get("input_schema"));
    assert_eq!(
        Some(parsed.operation_id()),
        contract["operation_id"].as_str()
    );
    assert_eq!(Some(parsed.description()), contract["description"].as_str());
    assert_eq!(Some(parsed.category_id()), contract["category_id"].as_str());
    let spec = tool_spec(&parsed);
    assert_eq!(&spec.parameters, parsed.input_schema());

    let Some(args) = args else {
        return;
    };
    let verdict = validate_arguments(&parsed, args);
    if let Err(errors) = &verdict {
        check_errors(errors, args, MAX_ARGUMENT_ERRORS);
    }
    let written = serde_json::to_vec(args).expect("a Value serializes");
    let again = parse_strict(&written).expect("written arguments read");
    assert_eq!(
        validate_arguments(&parsed, &again),
        verdict,
        "the check changed through text"
    );
});
