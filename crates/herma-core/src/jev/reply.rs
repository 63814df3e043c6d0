//! Validating a `systemone` reply against the questions a prepared call asked.
//!
//! The reader is strict: duplicate members, unknown members, numbers that are not finite and
//! any shape but TypeSafe's documented `{model, answers, usage}` are refused. The answers must
//! be exactly the questions asked, each of its asked type, and numerically coherent within
//! [`TOLERANCE`]. The first refusal found is returned (whole-reply checks, then missing and
//! unexpected answers, then each question in id order), naming the question and the rule.
//!
//! A validated [`Decision`] is worker-reported evidence: the worker says these bytes came back
//! from TypeSafe. Nothing here verifies the transport.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::TOLERANCE;
use super::prepare::PreparedDecision;
use super::question::{ChoiceQuestion, Question, ScoreQuestion};
use crate::json::{decode, escape_pointer_segment, parse_strict};
use crate::problem::{FieldError, Problem};

/// Where a decision's evidence comes from. There is one kind: Herma never claims to have
/// verified the transport between the worker and TypeSafe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// The worker reports these reply bytes; they are checked for coherence, not provenance.
    WorkerReported,
}

/// A reply that passed every rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub evidence: Evidence,
    pub attempt_id: String,
    /// The model TypeSafe says answered (an alias such as `jev-latest` resolves to a version).
    pub answered_model: String,
    /// SHA-256 (hex) of the exact reply bytes the worker handed in.
    pub reply_sha256: String,
    pub usage: Usage,
    pub answers: BTreeMap<String, Answer>,
}

/// Token usage as TypeSafe reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One typed answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Answer {
    Choice(ChoiceAnswer),
    Score(ScoreAnswer),
    Noul(NoulAnswer),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChoiceAnswer {
    /// The option with the highest probability.
    pub choice: String,
    /// Option name → probability; every asked option, nothing else.
    pub probabilities: BTreeMap<String, f64>,
    pub confidence: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreAnswer {
    /// The expected level: the probability-weighted mean of the level positions.
    pub score: f64,
    /// Level position (`"0"`, `"1"`, …) → the level's description as asked.
    pub legend: BTreeMap<String, String>,
    /// Level position → probability.
    pub probabilities: BTreeMap<String, f64>,
    pub confidence: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoulAnswer {
    /// The probability that the statement is true.
    pub noul: f64,
}

macro_rules! reply_rules {
    ($($variant:ident => $code:literal;)*) => {
        /// The rule a reply broke. `code` is stable; fixtures and workers match on it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ReplyRule {
            $($variant,)*
        }

        impl ReplyRule {
            pub const ALL: &'static [ReplyRule] = &[$(ReplyRule::$variant,)*];

            pub const fn code(self) -> &'static str {
                match self { $(ReplyRule::$variant => $code,)* }
            }
        }
    };
}

reply_rules! {
    InvalidJson => "invalid_json";
    DuplicateField => "duplicate_field";
    NonFiniteNumber => "non_finite_number";
    UnknownField => "unknown_field";
    Malformed => "malformed";
    MissingAnswer => "missing_answer";
    UnexpectedAnswer => "unexpected_answer";
    AnswerTypeMismatch => "answer_type_mismatch";
    OptionsMismatch => "options_mismatch";
    LevelsMismatch => "levels_mismatch";
    ProbabilityOutOfRange => "probability_out_of_range";
    ProbabilitiesNotNormalized => "probabilities_not_normalized";
    ChosenNotAnOption => "chosen_not_an_option";
    ChosenNotMaximum => "chosen_not_maximum";
    LegendMismatch => "legend_mismatch";
    ScoreMeanMismatch => "score_mean_mismatch";
    ConfidenceOutOfRange => "confidence_out_of_range";
}

/// Why a reply was refused. `question` is `None` only when the reply as a whole is at fault
/// (not JSON, or its top-level members); otherwise it names the question the rule is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyRefusal {
    pub question: Option<String>,
    pub rule: ReplyRule,
    /// JSON pointer into the reply.
    pub pointer: String,
    pub detail: String,
}

impl ReplyRefusal {
    fn new(question: Option<&str>, rule: ReplyRule, pointer: String, detail: String) -> Self {
        Self {
            question: question.map(str::to_owned),
            rule,
            pointer,
            detail,
        }
    }
}

impl fmt::Display for ReplyRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.question {
            Some(question) => write!(f, "question `{question}`")?,
            None => f.write_str("the reply")?,
        }
        if !self.pointer.is_empty() {
            write!(f, " at {}", self.pointer)?;
        }
        write!(f, ": {} ({})", self.detail, self.rule.code())
    }
}

impl std::error::Error for ReplyRefusal {}

impl From<ReplyRefusal> for Problem {
    /// A `validation_failed` problem carrying `question` and `rule` as extension members.
    fn from(refusal: ReplyRefusal) -> Self {
        let detail = refusal.to_string();
        Problem::validation(vec![FieldError::new(refusal.pointer, detail)])
            .with("question", refusal.question)
            .with("rule", refusal.rule.code())
    }
}

/// Exactly TypeSafe's response body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireReply {
    model: String,
    answers: Map<String, Value>,
    usage: Usage,
}

/// Validates `reply` (the bytes of a 2xx response) against what `prepared` asked.
pub fn validate_reply(prepared: &PreparedDecision, reply: &[u8]) -> Result<Decision, ReplyRefusal> {
    let value = parse_strict(reply).map_err(|problem| unreadable(&problem, reply))?;
    let WireReply {
        model,
        answers: mut raw_answers,
        usage,
    } = decode(value).map_err(|problem| undecodable(&problem, None, ""))?;
    if model.trim().is_empty() {
        return Err(ReplyRefusal::new(
            None,
            ReplyRule::Malformed,
            "/model".into(),
            "model must not be empty".into(),
        ));
    }
    let asked = prepared.questions();
    check_ids(asked, &raw_answers)?;
    let mut answers = BTreeMap::new();
    for (id, question) in asked {
        let raw = raw_answers.remove(id).unwrap_or(Value::Null);
        answers.insert(id.clone(), check_answer(id, question, raw)?);
    }
    Ok(Decision {
        evidence: Evidence::WorkerReported,
        attempt_id: prepared.attempt().attempt_id.clone(),
        answered_model: model,
        reply_sha256: hex::encode(Sha256::digest(reply)),
        usage,
        answers,
    })
}

/// The refusal for bytes the strict reader refused, attributed to a question when one can be.
fn unreadable(problem: &Problem, reply: &[u8]) -> ReplyRefusal {
    let (mut pointer, detail) = problem
        .errors
        .first()
        .map(|e| (e.pointer.clone(), e.detail.clone()))
        .unwrap_or_else(|| (String::new(), problem.detail.clone()));
    let rule = if detail.starts_with("duplicate key") {
        ReplyRule::DuplicateField
    } else if detail.contains("number out of range") {
        ReplyRule::NonFiniteNumber
    } else {
        ReplyRule::InvalidJson
    };
    let mut question = question_of_pointer(&pointer);
    if question.is_none() && rule == ReplyRule::NonFiniteNumber {
        question = answer_with_non_finite(reply);
        pointer = question.as_deref().map(answer_pointer).unwrap_or(pointer);
    }
    ReplyRefusal {
        question,
        rule,
        pointer,
        detail,
    }
}

/// `/answers/<id>/…` names question `<id>`.
fn question_of_pointer(pointer: &str) -> Option<String> {
    let rest = pointer.strip_prefix("/answers/")?;
    let segment = rest.split('/').next()?;
    Some(segment.replace("~1", "/").replace("~0", "~"))
}

/// The answer holding a number too large to be finite. The strict reader stops before it knows
/// where it was; a lenient pass that skips numbers unread (`RawValue`) finds the answer.
fn answer_with_non_finite(reply: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        answers: BTreeMap<String, &'a RawValue>,
    }
    let envelope: Envelope<'_> = serde_json::from_slice(reply).ok()?;
    envelope.answers.into_iter().find_map(|(id, raw)| {
        serde_json::from_str::<Value>(raw.get())
            .is_err()
            .then_some(id)
    })
}

/// The refusal for a value that does not decode, `prefix` locating it in the reply.
fn undecodable(problem: &Problem, question: Option<&str>, prefix: &str) -> ReplyRefusal {
    let (pointer, detail) = problem
        .errors
        .first()
        .map(|e| (format!("{prefix}{}", e.pointer), e.detail.clone()))
        .unwrap_or_else(|| (prefix.to_owned(), problem.detail.clone()));
    let rule = if detail == "unknown field" {
        ReplyRule::UnknownField
    } else {
        ReplyRule::Malformed
    };
    ReplyRefusal::new(question, rule, pointer, detail)
}

fn check_ids(
    asked: &BTreeMap<String, Question>,
    answers: &Map<String, Value>,
) -> Result<(), ReplyRefusal> {
    if let Some(missing) = asked.keys().find(|id| !answers.contains_key(*id)) {
        return Err(ReplyRefusal::new(
            Some(missing),
            ReplyRule::MissingAnswer,
            "/answers".into(),
            format!("no answer to question `{missing}`"),
        ));
    }
    if let Some(extra) = answers.keys().find(|id| !asked.contains_key(*id)) {
        return Err(ReplyRefusal::new(
            Some(extra),
            ReplyRule::UnexpectedAnswer,
            answer_pointer(extra),
            format!("an answer to `{extra}`, which was not asked"),
        ));
    }
    Ok(())
}

fn answer_pointer(id: &str) -> String {
    format!("/answers/{}", escape_pointer_segment(id))
}

/// Decodes one answer as its question's type and applies that type's rules.
fn check_answer(id: &str, question: &Question, raw: Value) -> Result<Answer, ReplyRefusal> {
    let at = answer_pointer(id);
    let refuse = |rule, pointer: String, detail: String| {
        Err(ReplyRefusal::new(Some(id), rule, pointer, detail))
    };
    let Value::Object(mut members) = raw else {
        return refuse(
            ReplyRule::Malformed,
            at,
            "an answer must be a JSON object".into(),
        );
    };
    let kind = question.kind().as_str();
    match members.remove("type") {
        Some(Value::String(found)) if found == kind => {}
        Some(Value::String(found)) => {
            return refuse(
                ReplyRule::AnswerTypeMismatch,
                format!("{at}/type"),
                format!("asked a {kind}, answered a `{found}`"),
            );
        }
        Some(_) | None => {
            return refuse(
                ReplyRule::Malformed,
                format!("{at}/type"),
                "type must be a string".into(),
            );
        }
    }
    let members = Value::Object(members);
    let undecodable = |problem: Problem| undecodable(&problem, Some(id), &at);
    let broken =
        |(rule, pointer, detail): Broken| ReplyRefusal::new(Some(id), rule, pointer, detail);
    match question {
        Question::Choice(asked) => {
            let answer: ChoiceAnswer = decode(members).map_err(undecodable)?;
            check_choice(asked, &answer, &at).map_err(broken)?;
            Ok(Answer::Choice(answer))
        }
        Question::Score(asked) => {
            let answer: ScoreAnswer = decode(members).map_err(undecodable)?;
            check_score(asked, &answer, &at).map_err(broken)?;
            Ok(Answer::Score(answer))
        }
        Question::Noul(_) => {
            let answer: NoulAnswer = decode(members).map_err(undecodable)?;
            check_noul(&answer, &at).map_err(broken)?;
            Ok(Answer::Noul(answer))
        }
    }
}

/// A broken rule: the rule, the pointer into the reply, what is wrong.
type Broken = (ReplyRule, String, String);

fn check_choice(asked: &ChoiceQuestion, answer: &ChoiceAnswer, at: &str) -> Result<(), Broken> {
    same_keys(
        asked.criteria.keys().map(String::as_str),
        &answer.probabilities,
        ReplyRule::OptionsMismatch,
        &format!("{at}/probabilities"),
        "option",
    )?;
    check_distribution(&answer.probabilities, &format!("{at}/probabilities"))?;
    let Some(&chosen) = answer.probabilities.get(&answer.choice) else {
        return Err((
            ReplyRule::ChosenNotAnOption,
            format!("{at}/choice"),
            format!("`{}` is not one of the asked options", answer.choice),
        ));
    };
    if let Some((best, &p)) = answer
        .probabilities
        .iter()
        .find(|(_, p)| **p > chosen + TOLERANCE)
    {
        return Err((
            ReplyRule::ChosenNotMaximum,
            format!("{at}/choice"),
            format!("chose `{}` ({chosen}) but `{best}` has {p}", answer.choice),
        ));
    }
    check_confidence(answer.confidence, at)
}

fn check_score(asked: &ScoreQuestion, answer: &ScoreAnswer, at: &str) -> Result<(), Broken> {
    let positions: Vec<String> = (0..asked.criteria.len()).map(|i| i.to_string()).collect();
    same_keys(
        positions.iter().map(String::as_str),
        &answer.probabilities,
        ReplyRule::LevelsMismatch,
        &format!("{at}/probabilities"),
        "level",
    )?;
    check_distribution(&answer.probabilities, &format!("{at}/probabilities"))?;
    check_legend(&asked.criteria, &answer.legend, &format!("{at}/legend"))?;
    let total: f64 = answer.probabilities.values().sum();
    let mean = positions
        .iter()
        .zip(0u32..)
        .map(|(key, level)| {
            f64::from(level) * answer.probabilities.get(key).copied().unwrap_or(0.0)
        })
        .sum::<f64>()
        / total;
    if (answer.score - mean).abs() > TOLERANCE {
        return Err((
            ReplyRule::ScoreMeanMismatch,
            format!("{at}/score"),
            format!(
                "score {} differs from the distribution's mean {mean} by more than {TOLERANCE}",
                answer.score
            ),
        ));
    }
    check_confidence(answer.confidence, at)
}

fn check_noul(answer: &NoulAnswer, at: &str) -> Result<(), Broken> {
    if in_unit_interval(answer.noul) {
        return Ok(());
    }
    Err((
        ReplyRule::ProbabilityOutOfRange,
        format!("{at}/noul"),
        format!("noul {} is outside [0, 1]", answer.noul),
    ))
}

/// The legend is every level, keyed by position, with exactly the asked description.
fn check_legend(
    levels: &[String],
    legend: &BTreeMap<String, String>,
    at: &str,
) -> Result<(), Broken> {
    let mismatch =
        |pointer: String, detail: String| Err((ReplyRule::LegendMismatch, pointer, detail));
    if legend.len() != levels.len() {
        return mismatch(
            at.to_owned(),
            format!(
                "{} legend entries for {} levels",
                legend.len(),
                levels.len()
            ),
        );
    }
    for (position, level) in levels.iter().enumerate() {
        let key = position.to_string();
        match legend.get(&key) {
            Some(described) if described == level => {}
            Some(described) => {
                return mismatch(
                    format!("{at}/{key}"),
                    format!("level {key} is `{level}`, the legend says `{described}`"),
                );
            }
            None => return mismatch(format!("{at}/{key}"), format!("level {key} is missing")),
        }
    }
    Ok(())
}

/// The keys of `found` are exactly `expected`.
fn same_keys<'a>(
    expected: impl Iterator<Item = &'a str>,
    found: &BTreeMap<String, f64>,
    rule: ReplyRule,
    at: &str,
    what: &str,
) -> Result<(), Broken> {
    let expected: BTreeSet<&str> = expected.collect();
    if let Some(missing) = expected.iter().find(|key| !found.contains_key(**key)) {
        return Err((
            rule,
            at.to_owned(),
            format!("no probability for {what} `{missing}`"),
        ));
    }
    if let Some(extra) = found.keys().find(|key| !expected.contains(key.as_str())) {
        return Err((
            rule,
            format!("{at}/{}", escape_pointer_segment(extra)),
            format!("a probability for `{extra}`, which is not an asked {what}"),
        ));
    }
    Ok(())
}

/// Every probability is in [0, 1] and they sum to 1 within [`TOLERANCE`].
fn check_distribution(probabilities: &BTreeMap<String, f64>, at: &str) -> Result<(), Broken> {
    if let Some((key, p)) = probabilities.iter().find(|(_, p)| !in_unit_interval(**p)) {
        return Err((
            ReplyRule::ProbabilityOutOfRange,
            format!("{at}/{}", escape_pointer_segment(key)),
            format!("probability {p} of `{key}` is outside [0, 1]"),
        ));
    }
    let total: f64 = probabilities.values().sum();
    if (total - 1.0).abs() > TOLERANCE {
        return Err((
            ReplyRule::ProbabilitiesNotNormalized,
            at.to_owned(),
            format!("probabilities sum to {total}, not 1 within {TOLERANCE}"),
        ));
    }
    Ok(())
}

fn check_confidence(confidence: f64, at: &str) -> Result<(), Broken> {
    if in_unit_interval(confidence) {
        return Ok(());
    }
    Err((
        ReplyRule::ConfidenceOutOfRange,
        format!("{at}/confidence"),
        format!("confidence {confidence} is outside [0, 1]"),
    ))
}

fn in_unit_interval(p: f64) -> bool {
    (0.0..=1.0).contains(&p)
}
