//! Proposed arguments against a checked schema.
//!
//! Nothing is coerced: `"5"` is not an integer, and neither is `5.0` or `5e0` (an integer is
//! written without a fraction or exponent, so whatever executes the proposal can read it into
//! an integer type unchanged). Numbers compare exactly in decimal; string lengths count Unicode
//! code points. `anyOf` holds when at least one alternative does, `oneOf` when exactly one does.
//!
//! Errors come in a fixed order: at an object, its properties in schema order (a value's own
//! errors, or "is required"), then its unknown fields in argument order; at an array, its item
//! count, then each item, then duplicates. A value of the wrong type gets only that error. A
//! failed `anyOf`/`oneOf` reports the errors of the one alternative of the value's type, if
//! exactly one has it, else one error at the combinator.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use serde_json::{Map, Number, Value};

use super::number::{Decimal, canonical, same_value};
use super::schema::{Bounds, Choices, JsonType, Limit, Schema, Shape, Typed};
use super::{MAX_ARGUMENT_ERRORS, Report, child};

/// Checks `value` (found at `at`) against `schema`.
pub(super) fn check(schema: &Schema, value: &Value, at: &str, report: &mut Report) {
    match schema {
        Schema::Typed(typed) => check_typed(typed, value, at, report),
        Schema::AnyOf(alternatives) => check_any_of(alternatives, value, at, report),
        Schema::OneOf(alternatives) => check_one_of(alternatives, value, at, report),
    }
}

fn check_typed(typed: &Typed, value: &Value, at: &str, report: &mut Report) {
    let ty = typed.shape.json_type();
    if !ty.holds(value) {
        report.push(at, type_detail(ty, value));
        return;
    }
    if let Some(choices) = &typed.choices
        && !choices.values.iter().any(|c| same_value(c, value))
    {
        report.push(at, choices_detail(choices));
        return;
    }
    match &typed.shape {
        Shape::Object {
            properties,
            required,
        } => {
            if let Value::Object(members) = value {
                check_object(properties, required, members, at, report);
            }
        }
        Shape::Array {
            items,
            min_items,
            max_items,
            unique_items,
        } => {
            if let Value::Array(values) = value {
                check_count(values.len(), *min_items, *max_items, "item", at, report);
                for (i, item) in values.iter().enumerate() {
                    check(items, item, &format!("{at}/{i}"), report);
                }
                if *unique_items {
                    check_unique(values, at, report);
                }
            }
        }
        Shape::String {
            min_length,
            max_length,
        } => {
            if let Value::String(text) = value {
                let chars = text.chars().count();
                check_length(chars, *min_length, *max_length, at, report);
            }
        }
        Shape::Integer(bounds) | Shape::Number(bounds) => {
            if let Value::Number(number) = value {
                check_bounds(bounds, number, at, report);
            }
        }
        Shape::Boolean | Shape::Null => {}
    }
}

fn type_detail(ty: JsonType, value: &Value) -> String {
    match (ty, value) {
        (JsonType::Integer, Value::Number(_)) => {
            "must be an integer written without a fraction or exponent".to_owned()
        }
        _ => format!("must be {}", ty.spoken()),
    }
}

fn choices_detail(choices: &Choices) -> String {
    let shown: Vec<String> = choices.values.iter().map(Value::to_string).collect();
    if choices.is_const {
        format!("must be {}", shown.join(""))
    } else {
        format!("must be one of {}", shown.join(", "))
    }
}

fn check_object(
    properties: &[(String, Schema)],
    required: &[String],
    members: &Map<String, Value>,
    at: &str,
    report: &mut Report,
) {
    for (name, schema) in properties {
        let field_at = child(at, name);
        match members.get(name) {
            Some(value) => check(schema, value, &field_at, report),
            None if required.contains(name) => report.push(field_at, "is required"),
            None => {}
        }
    }
    for key in members.keys() {
        if !properties.iter().any(|(name, _)| name == key) {
            report.push(child(at, key), "unknown field");
        }
    }
}

fn check_count(
    len: usize,
    min: Option<u64>,
    max: Option<u64>,
    noun: &str,
    at: &str,
    report: &mut Report,
) {
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if let Some(min) = min
        && len < min
    {
        report.push(at, format!("must have at least {}", plural(min, noun)));
    }
    if let Some(max) = max
        && len > max
    {
        report.push(at, format!("must have at most {}", plural(max, noun)));
    }
}

fn check_length(chars: usize, min: Option<u64>, max: Option<u64>, at: &str, report: &mut Report) {
    let chars = u64::try_from(chars).unwrap_or(u64::MAX);
    if let Some(min) = min
        && chars < min
    {
        report.push(at, format!("must be at least {}", plural(min, "character")));
    }
    if let Some(max) = max
        && chars > max
    {
        report.push(at, format!("must be at most {}", plural(max, "character")));
    }
}

/// Each repeated item is reported at its own index, naming the first one it repeats.
fn check_unique(values: &[Value], at: &str, report: &mut Report) {
    let mut first_seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, value) in values.iter().enumerate() {
        match first_seen.entry(canonical(value)) {
            Entry::Occupied(first) => {
                report.push(
                    format!("{at}/{i}"),
                    format!("duplicates item {}", first.get()),
                );
            }
            Entry::Vacant(slot) => {
                slot.insert(i);
            }
        }
    }
}

fn check_bounds(bounds: &Bounds, number: &Number, at: &str, report: &mut Report) {
    let value = Decimal::of(number);
    let mut check =
        |limit: &Option<Limit>, broken: fn(&Decimal, &Decimal) -> bool, detail: &str| {
            if let Some(limit) = limit
                && broken(&value, &limit.exact)
            {
                report.push(at, format!("{detail} {}", limit.shown));
            }
        };
    check(&bounds.minimum, |v, l| v < l, "must be at least");
    check(&bounds.maximum, |v, l| v > l, "must be at most");
    check(
        &bounds.exclusive_minimum,
        |v, l| v <= l,
        "must be greater than",
    );
    check(
        &bounds.exclusive_maximum,
        |v, l| v >= l,
        "must be less than",
    );
    check(
        &bounds.multiple_of,
        |v, l| !v.is_multiple_of(l),
        "must be a multiple of",
    );
}

fn check_any_of(alternatives: &[Schema], value: &Value, at: &str, report: &mut Report) {
    let outcomes = try_each(alternatives, value, at);
    if !outcomes.iter().any(Report::is_clean) {
        let n = alternatives.len();
        let summary = format!("must match at least one of the {n} alternatives");
        explain(alternatives, outcomes, value, at, summary, report);
    }
}

fn check_one_of(alternatives: &[Schema], value: &Value, at: &str, report: &mut Report) {
    let outcomes = try_each(alternatives, value, at);
    let n = alternatives.len();
    match outcomes.iter().filter(|r| r.is_clean()).count() {
        1 => {}
        0 => {
            let summary = format!("must match exactly one of the {n} alternatives");
            explain(alternatives, outcomes, value, at, summary, report);
        }
        matched => report.push(
            at,
            format!("must match exactly one of the {n} alternatives, not {matched}"),
        ),
    }
}

/// Each alternative's own report for `value`.
fn try_each(alternatives: &[Schema], value: &Value, at: &str) -> Vec<Report> {
    alternatives
        .iter()
        .map(|alternative| {
            let mut outcome = Report::new(MAX_ARGUMENT_ERRORS);
            check(alternative, value, at, &mut outcome);
            outcome
        })
        .collect()
}

/// Why no alternative matched: the errors of the only alternative of the value's type, when
/// there is exactly one (they name fields), else `summary` at the combinator.
fn explain(
    alternatives: &[Schema],
    outcomes: Vec<Report>,
    value: &Value,
    at: &str,
    summary: String,
    report: &mut Report,
) {
    let mut candidates = alternatives
        .iter()
        .zip(outcomes)
        .filter(|(alternative, _)| takes_type_of(alternative, value));
    match (candidates.next(), candidates.next()) {
        (Some((_, only)), None) => {
            for error in only.errors {
                report.push(error.pointer, error.detail);
            }
        }
        _ => report.push(at, summary),
    }
}

/// Whether `schema` accepts values of `value`'s JSON type at all.
fn takes_type_of(schema: &Schema, value: &Value) -> bool {
    match schema {
        Schema::Typed(typed) => typed.shape.json_type().holds(value),
        Schema::AnyOf(alternatives) | Schema::OneOf(alternatives) => {
            alternatives.iter().any(|a| takes_type_of(a, value))
        }
    }
}

fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
