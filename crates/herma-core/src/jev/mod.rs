//! Jev typed decisions (`herma.decision_provider`): the pure adapter an authorized worker uses
//! to ask TypeSafe's native `POST https://api.typesafe.ai/v1/systemone` for typed decisions
//! (`docs/jev.md`).
//!
//! Layout: [`question`] (Choice, Score and Noul and their checks), [`prepare`] (the exact
//! request bytes and the attempt record persisted before dispatch) and [`reply`] (the strict
//! reply validator and the worker-reported [`Decision`]).
//!
//! Architecture invariant: Jev produces decisions, not generated text or tool arguments. The
//! worker sends and receives; Herma's server has no Jev route, and a conversation's provider
//! plan can never choose Jev ([`refuse_in_provider_plan`]).

pub mod prepare;
pub mod question;
pub mod reply;

#[cfg(test)]
mod tests;

pub use prepare::{AttemptInputs, AttemptRecord, DecisionSpec, PreparedDecision, prepare};
pub use question::{ChoiceQuestion, NoulQuestion, Question, QuestionKind, ScoreQuestion};
pub use reply::{
    Answer, ChoiceAnswer, Decision, Evidence, NoulAnswer, ReplyRefusal, ReplyRule, ScoreAnswer,
    Usage, validate_reply,
};

use crate::problem::{Problem, ProblemCode};

/// The only origin a prepared call is for, and the only one `TYPESAFE_API_KEY` may be sent to.
pub const ORIGIN: &str = "https://api.typesafe.ai";
/// The native typed-decision endpoint, relative to [`ORIGIN`].
pub const SYSTEMONE_PATH: &str = "/v1/systemone";
/// [`ORIGIN`] + [`SYSTEMONE_PATH`].
pub const SYSTEMONE_URL: &str = "https://api.typesafe.ai/v1/systemone";
/// The provider an attempt records.
pub const PROVIDER: &str = "typesafe";
/// The name of the worker's credential (the core never reads the environment).
pub const API_KEY_VARIABLE: &str = "TYPESAFE_API_KEY";
/// How far sums and means may stray from exact: room for numeric serialization noise only.
pub const TOLERANCE: f64 = 1e-6;

/// Names that mean Jev in a provider plan, compared exactly after ASCII lowercasing.
pub const PLAN_NAMES: [&str; 4] = [
    "jev",
    "typesafe",
    "herma.decision_provider",
    "api.typesafe.ai",
];

/// Refuses `provider` as a conversation's provider plan choice when it names Jev
/// (`jev_not_a_plan_provider`); any other name passes.
pub fn refuse_in_provider_plan(provider: &str) -> Result<(), Problem> {
    let name = provider.trim().to_ascii_lowercase();
    if !PLAN_NAMES.contains(&name.as_str()) {
        return Ok(());
    }
    Err(Problem::new(
        ProblemCode::JevNotAPlanProvider,
        format!(
            "`{provider}` is Jev, which produces typed decisions for a worker; a conversation's \
             provider plan cannot choose it"
        ),
    )
    .with("provider", provider))
}
