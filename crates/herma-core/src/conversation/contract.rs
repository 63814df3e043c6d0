//! Work contracts: the typed operations a caller offers a model, read from a context entry's
//! `schema_or_body.work_contract`, checked against the portable profile, turned into one neutral
//! function tool each, and used to check the arguments a model proposes.
//!
//! A contract has exactly four members (others are refused):
//! - `operation_id`: the tool name. `^[A-Za-z][A-Za-z0-9_]{0,63}$`, the intersection of the
//!   providers' rules: OpenAI and Anthropic accept `^[a-zA-Z0-9_-]{1,64}$` (Anthropic now allows
//!   128), Gemini-style and Kimi-style APIs want a leading letter, and Ollama renders tool names
//!   into model templates that parse them as identifiers, so no hyphen.
//! - `category_id`: one of [`CATEGORIES`].
//! - `description`: non-empty, at most [`MAX_DESCRIPTION_CHARS`] characters.
//! - `input_schema`: an `object` schema in the portable profile (see `profile`): explicit
//!   types, closed objects, typed items, primitive `enum`/`const`, bounds, at most
//!   [`MAX_ALTERNATIVES`] `anyOf`/`oneOf` alternatives, at most [`MAX_SCHEMA_BYTES`] bytes of
//!   compact JSON, [`MAX_SCHEMA_NODES`] nodes and [`MAX_SCHEMA_DEPTH`] levels.
//!
//! Every refusal names its node by JSON pointer relative to the `work_contract` object (for
//! example `/input_schema/properties/when/type`); all are reported, up to
//! [`MAX_CONTRACT_ERRORS`]. Argument checks never coerce (see `arguments`) and report every
//! failing path, up to [`MAX_ARGUMENT_ERRORS`].

mod arguments;
mod number;
mod profile;
mod schema;
#[cfg(test)]
mod tests;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::json::escape_pointer_segment;
use crate::problem::FieldError;

/// The canonical Tessera categories: the seed names planning, research, generation and review
/// as the work that scoped Tessera verbs perform, so a contract files its operation under one.
pub const CATEGORIES: &[&str] = &["planning", "research", "generation", "review"];

pub const MAX_OPERATION_ID_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Largest `input_schema`, in bytes of its compact JSON form.
pub const MAX_SCHEMA_BYTES: usize = 12 * 1024;
/// Most schema nodes in an `input_schema`: the root, every property schema, every `items`
/// schema and every `anyOf`/`oneOf` alternative count one each.
pub const MAX_SCHEMA_NODES: usize = 128;
/// Deepest schema nesting: the root is level 1, and a property, `items` or alternative schema
/// is one level below the node holding it.
pub const MAX_SCHEMA_DEPTH: usize = 8;
pub const MAX_ALTERNATIVES: usize = 8;
/// Most field errors reported for one contract.
pub const MAX_CONTRACT_ERRORS: usize = 32;
/// Most field errors reported for one set of arguments.
pub const MAX_ARGUMENT_ERRORS: usize = 64;

const FIELDS: &[&str] = &["operation_id", "category_id", "description", "input_schema"];

/// A work contract that satisfies the profile. Built only by [`parse_work_contract`].
#[derive(Clone, Debug, PartialEq)]
pub struct WorkContract {
    operation_id: String,
    category_id: &'static str,
    description: String,
    input_schema: Value,
    checked: schema::Schema,
}

impl WorkContract {
    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }

    pub fn category_id(&self) -> &'static str {
        self.category_id
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    /// The schema exactly as the caller wrote it.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }
}

/// One operation as a provider-neutral function tool; each protocol maps it to its wire shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The contract's `input_schema`, unchanged.
    pub parameters: Value,
}

/// Reads a `work_contract` object. Pointers in the errors are relative to that object.
pub fn parse_work_contract(value: &Value) -> Result<WorkContract, Vec<FieldError>> {
    let mut report = Report::new(MAX_CONTRACT_ERRORS);
    let Some(members) = value.as_object() else {
        report.push(String::new(), "must be an object");
        return Err(report.errors);
    };
    for key in members.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
        report.push(child("", key), "unknown field");
    }
    let operation_id = string_member(members, "operation_id", &mut report)
        .filter(|id| check_operation_id(id, &mut report));
    let category_id =
        string_member(members, "category_id", &mut report).and_then(|id| category(id, &mut report));
    let description = string_member(members, "description", &mut report)
        .filter(|text| check_description(text, &mut report));
    let input_schema = member(members, "input_schema", &mut report);
    let checked = input_schema
        .and_then(|schema| profile::check_parameters(schema, "/input_schema", &mut report));
    match (
        operation_id,
        category_id,
        description,
        input_schema,
        checked,
    ) {
        (Some(operation_id), Some(category_id), Some(description), Some(schema), Some(checked))
            if report.is_clean() =>
        {
            Ok(WorkContract {
                operation_id: operation_id.to_owned(),
                category_id,
                description: description.to_owned(),
                input_schema: schema.clone(),
                checked,
            })
        }
        _ => Err(report.errors),
    }
}

/// Checks a model's proposed arguments against `contract`, reporting every failing path
/// (pointers into `args`). Nothing is coerced: `"5"` is not an integer.
pub fn validate_arguments(contract: &WorkContract, args: &Value) -> Result<(), Vec<FieldError>> {
    let mut report = Report::new(MAX_ARGUMENT_ERRORS);
    arguments::check(&contract.checked, args, "", &mut report);
    report.into_result()
}

/// The contract's operation as a neutral function tool.
pub fn tool_spec(contract: &WorkContract) -> ToolSpec {
    ToolSpec {
        name: contract.operation_id.clone(),
        description: contract.description.clone(),
        parameters: contract.input_schema.clone(),
    }
}

fn member<'a>(
    members: &'a Map<String, Value>,
    name: &str,
    report: &mut Report,
) -> Option<&'a Value> {
    let found = members.get(name);
    if found.is_none() {
        report.push(child("", name), "is required");
    }
    found
}

fn string_member<'a>(
    members: &'a Map<String, Value>,
    name: &str,
    report: &mut Report,
) -> Option<&'a str> {
    let value = member(members, name, report)?;
    let text = value.as_str();
    if text.is_none() {
        report.push(child("", name), "must be a string");
    }
    text
}

fn check_operation_id(id: &str, report: &mut Report) -> bool {
    let mut chars = id.chars();
    let ok = id.len() <= MAX_OPERATION_ID_CHARS
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        report.push(
            "/operation_id",
            format!(
                "must start with a letter and hold only letters, digits and underscores, at most {MAX_OPERATION_ID_CHARS} characters"
            ),
        );
    }
    ok
}

fn category(id: &str, report: &mut Report) -> Option<&'static str> {
    let found = CATEGORIES.iter().copied().find(|c| *c == id);
    if found.is_none() {
        report.push(
            "/category_id",
            format!("must be one of {}", CATEGORIES.join(", ")),
        );
    }
    found
}

fn check_description(text: &str, report: &mut Report) -> bool {
    if text.trim().is_empty() {
        report.push("/description", "must not be empty");
        return false;
    }
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        report.push(
            "/description",
            format!("must be at most {MAX_DESCRIPTION_CHARS} characters"),
        );
        return false;
    }
    true
}

/// The pointer of member `key` of the node at `at`.
fn child(at: &str, key: &str) -> String {
    format!("{at}/{}", escape_pointer_segment(key))
}

/// Field errors in the order found, keeping the first `cap` and counting the rest.
#[derive(Debug)]
struct Report {
    errors: Vec<FieldError>,
    found: usize,
    cap: usize,
}

impl Report {
    fn new(cap: usize) -> Self {
        Self {
            errors: Vec::new(),
            found: 0,
            cap,
        }
    }

    fn push(&mut self, pointer: impl Into<String>, detail: impl Into<String>) {
        self.found += 1;
        if self.errors.len() < self.cap {
            self.errors.push(FieldError::new(pointer, detail));
        }
    }

    /// How many errors have been found so far, reported or not.
    fn found(&self) -> usize {
        self.found
    }

    fn is_clean(&self) -> bool {
        self.found == 0
    }

    fn into_result(self) -> Result<(), Vec<FieldError>> {
        if self.is_clean() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}
