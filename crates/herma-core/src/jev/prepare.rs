//! Preparing one `systemone` call: the exact request bytes a worker sends, and the attempt
//! record it persists before sending them. Preparation only computes: it sends, enqueues,
//! installs and activates nothing.
//!
//! Both the body and the attempt id are canonical JSON — compact, object keys sorted by their
//! UTF-8 bytes at every depth — so the same inputs give the same bytes on every runtime.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::question::{Question, deeper_than};
use super::{PROVIDER, SYSTEMONE_URL};
use crate::caller::{CallerScope, id_problem};
use crate::json::{MAX_DEPTH, escape_pointer_segment};
use crate::problem::{FieldError, Problem, ProblemCode};

/// The longest verb ref, noun ref or payer, in characters.
pub const MAX_REF_CHARS: usize = 512;

/// Names the attempt-id derivation; a change to what it covers changes this.
const ATTEMPT_SCHEME: &str = "herma.jev.attempt.v1";

/// What the worker wants decided: the fields of TypeSafe's request body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionSpec {
    /// Always explicit (e.g. `jev-latest`): the adapter never picks a model.
    pub model: String,
    /// What is judged: a string, an object or an array.
    pub state: Value,
    /// Question id (the worker's key, never shown to the model) → question.
    pub questions: BTreeMap<String, Question>,
}

/// Who asks and on whose behalf, as the worker's lease established it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptInputs {
    /// The authenticated caller the work belongs to.
    pub caller_scope: CallerScope,
    /// The verb (claimable work) this decision serves.
    pub owning_verb: String,
    /// The nouns the state was built from; a set (order is not significant, repeats refused).
    pub input_noun_refs: Vec<String>,
    /// Whose TypeSafe account pays for the call.
    pub payer: String,
}

/// The attempt noun the worker persists before dispatch. Everything in it is an input the
/// worker chose; nothing in it says the call happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRecord {
    /// `jev_` + SHA-256 (hex) of the canonical record without this field.
    pub attempt_id: String,
    pub caller_scope: CallerScope,
    pub owning_verb: String,
    /// Sorted.
    pub input_noun_refs: Vec<String>,
    /// Always `typesafe`.
    pub provider: String,
    pub model: String,
    pub payer: String,
    /// Always [`SYSTEMONE_URL`].
    pub endpoint: String,
    /// SHA-256 (hex) of the exact request body.
    pub request_sha256: String,
}

/// A prepared call: the body is fixed once prepared, and the reply is validated against the
/// questions it asked.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedDecision {
    attempt: AttemptRecord,
    body: Vec<u8>,
    questions: BTreeMap<String, Question>,
}

impl PreparedDecision {
    pub fn attempt(&self) -> &AttemptRecord {
        &self.attempt
    }

    /// The exact bytes to `POST` to [`SYSTEMONE_URL`] as `application/json`.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    pub fn questions(&self) -> &BTreeMap<String, Question> {
        &self.questions
    }
}

/// Checks the spec and the attempt inputs and prepares the call, or says every field that is
/// wrong (`validation_failed`, pointers into `{"spec": …, "attempt": …}`).
pub fn prepare(spec: DecisionSpec, inputs: AttemptInputs) -> Result<PreparedDecision, Problem> {
    let mut errors = spec_problems(&spec);
    let noun_refs = noun_ref_set(&inputs.input_noun_refs, &mut errors);
    for (field, value) in [
        ("owning_verb", &inputs.owning_verb),
        ("payer", &inputs.payer),
    ] {
        if let Some(problem) = ref_problem(value) {
            errors.push(FieldError::new(format!("/attempt/{field}"), problem));
        }
    }
    if !errors.is_empty() {
        return Err(Problem::validation(errors));
    }

    let body = canonical_json(&request_value(&spec)?)?;
    let mut attempt = AttemptRecord {
        attempt_id: String::new(),
        caller_scope: inputs.caller_scope,
        owning_verb: inputs.owning_verb,
        input_noun_refs: noun_refs.into_iter().map(str::to_owned).collect(),
        provider: PROVIDER.to_owned(),
        model: spec.model,
        payer: inputs.payer,
        endpoint: SYSTEMONE_URL.to_owned(),
        request_sha256: hex::encode(Sha256::digest(&body)),
    };
    attempt.attempt_id = attempt_id(&attempt)?;
    Ok(PreparedDecision {
        attempt,
        body,
        questions: spec.questions,
    })
}

fn spec_problems(spec: &DecisionSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(problem) = id_problem(&spec.model) {
        errors.push(FieldError::new("/spec/model", problem));
    }
    match &spec.state {
        Value::String(text) if text.trim().is_empty() => {
            errors.push(FieldError::new("/spec/state", "must not be empty"));
        }
        Value::String(_) | Value::Object(_) | Value::Array(_) => {}
        Value::Null | Value::Bool(_) | Value::Number(_) => errors.push(FieldError::new(
            "/spec/state",
            "must be a string, an object or an array",
        )),
    }
    if deeper_than(&spec.state, MAX_DEPTH) {
        errors.push(FieldError::new(
            "/spec/state",
            format!("nests deeper than {MAX_DEPTH} levels"),
        ));
    }
    if spec.questions.is_empty() {
        errors.push(FieldError::new(
            "/spec/questions",
            "ask at least one question",
        ));
    }
    for (id, question) in &spec.questions {
        let pointer = format!("/spec/questions/{}", escape_pointer_segment(id));
        if let Some(problem) = id_problem(id) {
            errors.push(FieldError::new(&pointer, format!("question id {problem}")));
        }
        question.check(&pointer, &mut errors);
    }
    errors
}

fn noun_ref_set<'a>(refs: &'a [String], errors: &mut Vec<FieldError>) -> BTreeSet<&'a str> {
    let mut set = BTreeSet::new();
    for (index, noun_ref) in refs.iter().enumerate() {
        let pointer = format!("/attempt/input_noun_refs/{index}");
        if let Some(problem) = ref_problem(noun_ref) {
            errors.push(FieldError::new(pointer, problem));
        } else if !set.insert(noun_ref.as_str()) {
            errors.push(FieldError::new(pointer, "is listed twice"));
        }
    }
    set
}

/// Why `value` cannot be a verb ref, noun ref or payer, or `None`. Refs are opaque to the
/// adapter (a Tessera URI, a record id); they only have to be one printable token.
fn ref_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("must not be empty".into());
    }
    if value.chars().count() > MAX_REF_CHARS {
        return Some(format!("must be at most {MAX_REF_CHARS} characters"));
    }
    value
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
        .then(|| "must not contain whitespace or control characters".into())
}

fn request_value(spec: &DecisionSpec) -> Result<Value, Problem> {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(spec.model.clone()));
    body.insert("state".into(), spec.state.clone());
    body.insert("questions".into(), to_value(&spec.questions)?);
    Ok(Value::Object(body))
}

fn attempt_id(attempt: &AttemptRecord) -> Result<String, Problem> {
    let mut covered = match to_value(attempt)? {
        Value::Object(members) => members,
        _ => Map::new(),
    };
    covered.remove("attempt_id");
    covered.insert("scheme".into(), ATTEMPT_SCHEME.into());
    let canonical = canonical_json(&Value::Object(covered))?;
    Ok(format!("jev_{}", hex::encode(Sha256::digest(&canonical))))
}

fn to_value(value: &impl Serialize) -> Result<Value, Problem> {
    serde_json::to_value(value).map_err(internal)
}

fn internal(err: serde_json::Error) -> Problem {
    Problem::new(
        ProblemCode::Internal,
        format!("could not encode JSON: {err}"),
    )
}

/// Compact JSON with every object's keys sorted by their UTF-8 bytes.
pub(super) fn canonical_json(value: &Value) -> Result<Vec<u8>, Problem> {
    let mut out = Vec::new();
    write_canonical(value, &mut out).map_err(internal)?;
    Ok(out)
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    match value {
        Value::Object(members) => {
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (key, member)) in sorted.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, key)?;
                out.push(b':');
                write_canonical(member, out)?;
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out)?;
            }
            out.push(b']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            serde_json::to_writer(&mut *out, value)?;
        }
    }
    Ok(())
}
