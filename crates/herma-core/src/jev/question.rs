//! The three question types of a `systemone` request — Choice, Score and Noul — in the shapes
//! TypeSafe documents, and the checks Herma makes on them before anything is sent.
//!
//! Where TypeSafe's documentation allows more than one shape Herma takes the one it can check:
//! Score levels are plain strings (so a reply's legend can be compared exactly), and
//! instructions must say something (a non-empty string, an object or an array).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::{MAX_DEPTH, escape_pointer_segment};
use crate::problem::FieldError;

/// A Choice has at least two options and at most 255.
pub const CHOICE_OPTIONS: std::ops::RangeInclusive<usize> = 2..=255;
/// A Score has at least two levels and at most ten.
pub const SCORE_LEVELS: std::ops::RangeInclusive<usize> = 2..=10;
/// The longest option name or Score level, in characters.
pub const MAX_LABEL_CHARS: usize = 512;

/// One typed question, tagged by `type` on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Question {
    Choice(ChoiceQuestion),
    Score(ScoreQuestion),
    Noul(NoulQuestion),
}

/// Which of the three a question (or an answer) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuestionKind {
    Choice,
    Score,
    Noul,
}

impl QuestionKind {
    /// The wire `type`.
    pub const fn as_str(self) -> &'static str {
        match self {
            QuestionKind::Choice => "choice",
            QuestionKind::Score => "score",
            QuestionKind::Noul => "noul",
        }
    }
}

/// Which one of a set of unordered options the state is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChoiceQuestion {
    pub instructions: Value,
    /// Option name → its description: a string, an object, an array, or `null`.
    pub criteria: BTreeMap<String, Value>,
}

/// Where the state sits on ordered, described levels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreQuestion {
    pub instructions: Value,
    /// Level descriptions, lowest first: level `i` is `criteria[i]`.
    pub criteria: Vec<String>,
}

/// Whether a statement about the state is true.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoulQuestion {
    pub instructions: Value,
    /// What `true` and `false` mean (either may be left out): member → its description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criteria: Option<BTreeMap<String, Value>>,
}

impl Question {
    pub fn kind(&self) -> QuestionKind {
        match self {
            Question::Choice(_) => QuestionKind::Choice,
            Question::Score(_) => QuestionKind::Score,
            Question::Noul(_) => QuestionKind::Noul,
        }
    }

    /// Appends what is wrong with this question, `pointer` naming it.
    pub(super) fn check(&self, pointer: &str, errors: &mut Vec<FieldError>) {
        let instructions = match self {
            Question::Choice(q) => &q.instructions,
            Question::Score(q) => &q.instructions,
            Question::Noul(q) => &q.instructions,
        };
        if let Some(problem) = entry_problem(instructions, false) {
            errors.push(FieldError::new(format!("{pointer}/instructions"), problem));
        }
        let criteria = format!("{pointer}/criteria");
        match self {
            Question::Choice(q) => check_choice(q, &criteria, errors),
            Question::Score(q) => check_score(q, &criteria, errors),
            Question::Noul(q) => check_noul(q, &criteria, errors),
        }
    }
}

fn check_choice(q: &ChoiceQuestion, pointer: &str, errors: &mut Vec<FieldError>) {
    if !CHOICE_OPTIONS.contains(&q.criteria.len()) {
        errors.push(FieldError::new(
            pointer,
            format!(
                "a choice needs {} to {} options",
                CHOICE_OPTIONS.start(),
                CHOICE_OPTIONS.end()
            ),
        ));
    }
    for (name, description) in &q.criteria {
        let at = format!("{pointer}/{}", escape_pointer_segment(name));
        if let Some(problem) = label_problem(name) {
            errors.push(FieldError::new(&at, format!("option name {problem}")));
        }
        if let Some(problem) = entry_problem(description, true) {
            errors.push(FieldError::new(at, problem));
        }
    }
}

fn check_score(q: &ScoreQuestion, pointer: &str, errors: &mut Vec<FieldError>) {
    if !SCORE_LEVELS.contains(&q.criteria.len()) {
        errors.push(FieldError::new(
            pointer,
            format!(
                "a score needs {} to {} levels",
                SCORE_LEVELS.start(),
                SCORE_LEVELS.end()
            ),
        ));
    }
    for (index, level) in q.criteria.iter().enumerate() {
        if let Some(problem) = label_problem(level) {
            errors.push(FieldError::new(
                format!("{pointer}/{index}"),
                format!("level {problem}"),
            ));
        }
    }
}

fn check_noul(q: &NoulQuestion, pointer: &str, errors: &mut Vec<FieldError>) {
    for (member, entry) in q.criteria.iter().flatten() {
        let at = format!("{pointer}/{}", escape_pointer_segment(member));
        if !matches!(member.as_str(), "true" | "false") {
            errors.push(FieldError::new(at, "unknown member; use `true` or `false`"));
        } else if let Some(problem) = entry_problem(entry, true) {
            errors.push(FieldError::new(at, problem));
        }
    }
}

/// Why `label` cannot name an option or a level, or `None`.
fn label_problem(label: &str) -> Option<String> {
    if label.trim().is_empty() {
        return Some("must not be empty".into());
    }
    if label.chars().count() > MAX_LABEL_CHARS {
        return Some(format!("must be at most {MAX_LABEL_CHARS} characters"));
    }
    label
        .chars()
        .any(char::is_control)
        .then(|| "must not contain control characters".into())
}

/// Why `entry` cannot be instructions or a description, or `None`. Numbers and booleans say
/// nothing a model can read; nesting is bounded like every JSON Herma reads.
fn entry_problem(entry: &Value, null_allowed: bool) -> Option<String> {
    let shape = match entry {
        Value::Null if null_allowed => None,
        Value::String(text) if text.trim().is_empty() => Some("must not be empty"),
        Value::String(_) | Value::Object(_) | Value::Array(_) => None,
        Value::Null | Value::Bool(_) | Value::Number(_) => Some(if null_allowed {
            "must be a string, an object, an array or null"
        } else {
            "must be a non-empty string, an object or an array"
        }),
    };
    match shape {
        Some(problem) => Some(problem.into()),
        None => {
            deeper_than(entry, MAX_DEPTH).then(|| format!("nests deeper than {MAX_DEPTH} levels"))
        }
    }
}

/// True when `value` nests arrays and objects more than `limit` deep (the value itself is 1).
pub(super) fn deeper_than(value: &Value, limit: usize) -> bool {
    match value {
        Value::Array(items) => limit == 0 || items.iter().any(|v| deeper_than(v, limit - 1)),
        Value::Object(members) => limit == 0 || members.values().any(|v| deeper_than(v, limit - 1)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}
