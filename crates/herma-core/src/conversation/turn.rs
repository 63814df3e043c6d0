//! One turn: the body a caller posts, the model request Herma builds from it, how the model's
//! answer becomes `clarify`, `ready` or `blocked`, and the response — always `executed: false`.
//!
//! The model request holds the system instructions and the guidance of the contracts'
//! categories ([`super::instructions`]), the caller's other context entries as reference data,
//! the transcript and the new message; each work contract is one function tool. The answer is
//! read locally: one call of a known contract with arguments that pass the contract is `ready`;
//! arguments that do not are a `clarify` naming every failing field (never coerced); plain text
//! is a `clarify`; a call of anything else is `blocked` (a model cannot create tools).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::contract::{WorkContract, tool_spec, validate_arguments};
use super::instructions::{SYSTEM, guidance};
use crate::call::{Msg, Role, ToolSpec};
use crate::caller::id_problem;
use crate::problem::{FieldError, Problem};
use crate::upstream::Provider;

/// Longest caller message, in characters.
pub const MAX_MESSAGE_CHARS: usize = 16 * 1024;
/// Most context entries one turn may name.
pub const MAX_CONTEXT_REFS: usize = 16;

/// `POST /v1/conversations/turn`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnBody {
    /// The caller's id for the conversation; a new id starts one.
    pub conversation_id: String,
    /// The caller's id for this turn: repeating it with the same input replays the answer.
    pub request_id: String,
    /// The version the last answer returned (0 for a new conversation).
    pub expected_version: u64,
    pub message: String,
    /// Context entries visible to the caller: its work contracts and reference entries.
    pub context_refs: Vec<String>,
    /// `meta`, `ollama`, `openai`, `anthropic` or `openrouter`.
    pub provider: Provider,
    /// The caller's provider plan (`super::plan`): a context entry also listed in
    /// `context_refs`, whose first choice is `provider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_plan_ref: Option<String>,
}

impl TurnBody {
    /// Every field error at once.
    pub fn validate(&self) -> Result<(), Problem> {
        let mut v = Errors::default();
        for (pointer, id) in [
            ("/conversation_id", &self.conversation_id),
            ("/request_id", &self.request_id),
        ] {
            if let Some(problem) = id_problem(id) {
                v.push(pointer, problem);
            }
        }
        v.check(
            !self.message.trim().is_empty(),
            "/message",
            "must not be empty",
        );
        v.check(
            self.message.chars().count() <= MAX_MESSAGE_CHARS,
            "/message",
            format!("must be at most {MAX_MESSAGE_CHARS} characters"),
        );
        v.check(
            self.context_refs.len() <= MAX_CONTEXT_REFS,
            "/context_refs",
            format!("must name at most {MAX_CONTEXT_REFS} entries"),
        );
        for (i, id) in self.context_refs.iter().enumerate() {
            if let Some(problem) = id_problem(id) {
                v.push(&format!("/context_refs/{i}"), problem);
            } else if self.context_refs[..i].contains(id) {
                v.push(&format!("/context_refs/{i}"), "is listed twice");
            }
        }
        if let Some(problem) = self.provider_plan_ref.as_deref().and_then(id_problem) {
            v.push("/provider_plan_ref", problem);
        }
        if v.0.is_empty() {
            Ok(())
        } else {
            Err(Problem::validation(v.0))
        }
    }

    /// A digest of the whole input: a replay must match it exactly.
    pub fn input_digest(&self) -> String {
        let canonical = json!([
            self.conversation_id,
            self.request_id,
            self.expected_version,
            self.message,
            self.context_refs,
            self.provider.as_str(),
            self.provider_plan_ref,
        ]);
        hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
    }
}

/// Field errors collected while validating a body.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, pointer: &str, detail: impl Into<String>) {
        self.0.push(FieldError::new(pointer, detail));
    }

    fn check(&mut self, ok: bool, pointer: &str, detail: impl Into<String>) {
        if !ok {
            self.push(pointer, detail);
        }
    }
}

/// One context entry a turn names, as the store holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnContext {
    pub id: String,
    pub version: u64,
    pub title: String,
    pub body: Value,
}

/// What the conversation's turns must keep: provider, model and every named entry's id,
/// version and content. A changed contract is a changed fingerprint.
pub fn fingerprint(provider: Provider, model: &str, context: &[TurnContext]) -> String {
    let entries: Vec<Value> = context
        .iter()
        .map(|c| json!([c.id, c.version, c.body]))
        .collect();
    let canonical = json!([provider.as_str(), model, entries]);
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// A transcript message as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptMessage {
    pub role: Role,
    pub text: String,
}

/// What the model is sent: system, messages, tools.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInput {
    pub system: String,
    pub messages: Vec<Msg>,
    pub tools: Vec<ToolSpec>,
}

/// The model request of a turn, from its contracts, its other context, the transcript so far
/// and the new message.
pub fn model_input(
    contracts: &[WorkContract],
    references: &[TurnContext],
    transcript: &[TranscriptMessage],
    message: &str,
) -> ModelInput {
    let mut system = SYSTEM.to_owned();
    let mut categories: Vec<&str> = contracts.iter().map(WorkContract::category_id).collect();
    categories.sort_unstable();
    categories.dedup();
    for category in categories {
        if let Some(text) = guidance(category) {
            system.push_str("\n\n");
            system.push_str(text);
        }
    }
    if contracts.is_empty() {
        system.push_str("\n\nThe caller named no work contracts: answer in plain text only.");
    }
    for entry in references {
        let body = match &entry.body {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        system.push_str(&format!(
            "\n\n[CONTEXT {} v{}] {}\n{}",
            entry.id, entry.version, entry.title, body
        ));
    }
    let mut messages: Vec<Msg> = transcript
        .iter()
        .map(|m| Msg {
            role: m.role,
            text: m.text.clone(),
        })
        .collect();
    messages.push(Msg::user(message));
    let tools = contracts
        .iter()
        .map(|contract| {
            let spec = tool_spec(contract);
            ToolSpec {
                name: spec.name,
                description: spec.description,
                input_schema: spec.parameters,
            }
        })
        .collect();
    ModelInput {
        system,
        messages,
        tools,
    }
}

/// A function call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProposedCall {
    pub name: String,
    /// The model's raw JSON text.
    pub arguments: String,
}

/// What a turn answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A question back to the caller, with the failing fields when the model's arguments did not
    /// pass the contract.
    Clarify {
        message: String,
        errors: Vec<FieldError>,
    },
    /// One validated proposal, for the caller to execute (Herma never does).
    Ready {
        operation_id: String,
        category_id: String,
        arguments: Value,
    },
    /// No proposal: `reason` is a closed code.
    Blocked { reason: String, message: String },
}

impl Outcome {
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Clarify { .. } => "clarify",
            Outcome::Ready { .. } => "ready",
            Outcome::Blocked { .. } => "blocked",
        }
    }

    /// A blocked outcome.
    pub fn blocked(reason: &str, message: impl Into<String>) -> Self {
        Outcome::Blocked {
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// How the outcome reads in the transcript the next turn's model sees.
    pub fn transcript_text(&self) -> String {
        match self {
            Outcome::Clarify { message, errors } if errors.is_empty() => message.clone(),
            Outcome::Clarify { message, errors } => {
                let fields: Vec<String> = errors
                    .iter()
                    .map(|e| format!("{} {}", e.pointer, e.detail))
                    .collect();
                format!("{message} ({})", fields.join("; "))
            }
            Outcome::Ready {
                operation_id,
                arguments,
                ..
            } => format!("Proposed {operation_id} with {arguments} (not executed)."),
            Outcome::Blocked { reason, .. } => format!("No proposal ({reason})."),
        }
    }

    /// The outcome's members of the response.
    pub fn to_json(&self) -> Value {
        match self {
            Outcome::Clarify { message, errors } => {
                let mut out = json!({"status": "clarify", "message": message});
                if !errors.is_empty() {
                    out["errors"] = json!(errors);
                }
                out
            }
            Outcome::Ready {
                operation_id,
                category_id,
                arguments,
            } => json!({
                "status": "ready",
                "message": format!("Proposed {operation_id}: review and execute it through your own tools, then report the result in a later turn."),
                "proposal": {
                    "operation_id": operation_id,
                    "category_id": category_id,
                    "arguments": arguments,
                },
            }),
            Outcome::Blocked { reason, message } => {
                json!({"status": "blocked", "reason": reason, "message": message})
            }
        }
    }
}

/// Reads the model's answer against the turn's contracts.
pub fn interpret(contracts: &[WorkContract], text: &str, calls: &[ProposedCall]) -> Outcome {
    match calls {
        [] if text.trim().is_empty() => Outcome::blocked(
            "no_proposal",
            "The model answered with neither a question nor a proposal.",
        ),
        [] => Outcome::Clarify {
            message: text.trim().to_owned(),
            errors: Vec::new(),
        },
        [call] => interpret_call(contracts, call),
        many => {
            let names: Vec<&str> = many.iter().map(|c| c.name.as_str()).collect();
            Outcome::Clarify {
                message: format!(
                    "The model proposed {} actions ({}); a turn proposes one. Which should come first?",
                    many.len(),
                    names.join(", ")
                ),
                errors: Vec::new(),
            }
        }
    }
}

fn interpret_call(contracts: &[WorkContract], call: &ProposedCall) -> Outcome {
    let Some(contract) = contracts.iter().find(|c| c.operation_id() == call.name) else {
        return Outcome::blocked(
            "unknown_operation",
            "The model called a function that is not one of the named work contracts.",
        );
    };
    let arguments = match crate::json::parse_strict(call.arguments.as_bytes()) {
        Ok(value) => value,
        Err(problem) => {
            return Outcome::Clarify {
                message: format!(
                    "The proposed arguments for {} are not acceptable JSON; please restate the request.",
                    call.name
                ),
                errors: vec![FieldError::new("", problem.detail)],
            };
        }
    };
    match validate_arguments(contract, &arguments) {
        Ok(()) => Outcome::Ready {
            operation_id: contract.operation_id().to_owned(),
            category_id: contract.category_id().to_owned(),
            arguments,
        },
        Err(errors) => Outcome::Clarify {
            message: format!(
                "The proposal for {} needs these fields fixed before it can be ready.",
                call.name
            ),
            errors,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::contract::parse_work_contract;

    fn contract() -> WorkContract {
        parse_work_contract(&json!({
            "operation_id": "schedule_review",
            "category_id": "review",
            "description": "Schedule a review of a document.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "document": {"type": "string", "minLength": 1, "maxLength": 80},
                    "days": {"type": "integer", "minimum": 1, "maximum": 30}
                },
                "required": ["document", "days"],
                "additionalProperties": false
            }
        }))
        .unwrap()
    }

    fn call(name: &str, arguments: &str) -> ProposedCall {
        ProposedCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn one_valid_call_is_ready_and_nothing_is_coerced() {
        let contracts = [contract()];
        let ready = interpret(
            &contracts,
            "",
            &[call(
                "schedule_review",
                r#"{"document":"spec.md","days":3}"#,
            )],
        );
        assert_eq!(ready.status(), "ready");
        assert_eq!(ready.to_json()["proposal"]["arguments"]["days"], 3);
        let Outcome::Clarify { errors, .. } = interpret(
            &contracts,
            "",
            &[call(
                "schedule_review",
                r#"{"document":7,"days":"3","extra":1}"#,
            )],
        ) else {
            panic!("wrong types are a clarification");
        };
        let pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/document", "/days", "/extra"]);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn text_unknown_tools_several_calls_and_bad_json() {
        let contracts = [contract()];
        let cases: [(&str, Vec<ProposedCall>, &str); 5] = [
            ("Which document?", vec![], "clarify"),
            ("  ", vec![], "blocked"),
            ("", vec![call("run_shell", "{}")], "blocked"),
            (
                "",
                vec![call("schedule_review", "{}"), call("schedule_review", "{}")],
                "clarify",
            ),
            (
                "",
                vec![call("schedule_review", r#"{"a":1,"a":2}"#)],
                "clarify",
            ),
        ];
        for (text, calls, status) in cases {
            assert_eq!(
                interpret(&contracts, text, &calls).status(),
                status,
                "{text:?} {calls:?}"
            );
        }
        let blocked = interpret(&contracts, "", &[call("run_shell", "{}")]);
        assert_eq!(blocked.to_json()["reason"], "unknown_operation");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn bodies_are_validated_field_by_field() {
        let body = TurnBody {
            conversation_id: "".into(),
            request_id: "r 1".into(),
            expected_version: 0,
            message: " ".into(),
            context_refs: vec!["a".into(), "a".into()],
            provider: Provider::Meta,
            provider_plan_ref: Some("plan 1".into()),
        };
        let err = body.validate().unwrap_err();
        let pointers: Vec<&str> = err.errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/conversation_id",
                "/request_id",
                "/message",
                "/context_refs/1",
                "/provider_plan_ref"
            ]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_digest_and_fingerprint_follow_every_input() {
        let body: TurnBody = crate::json::from_slice(
            br#"{"conversation_id":"c","request_id":"r","expected_version":0,"message":"hi","context_refs":["w"],"provider":"meta"}"#,
        )
        .unwrap();
        let mut other = body.clone();
        other.message = "hi!".into();
        assert_ne!(body.input_digest(), other.input_digest());
        assert_eq!(body.input_digest(), body.clone().input_digest());
        let entry = TurnContext {
            id: "w".into(),
            version: 1,
            title: String::new(),
            body: json!({"work_contract": {}}),
        };
        let base = fingerprint(Provider::Meta, "m", std::slice::from_ref(&entry));
        let newer = TurnContext {
            version: 2,
            ..entry.clone()
        };
        let changed = TurnContext {
            body: json!({"work_contract": {"x": 1}}),
            ..entry.clone()
        };
        assert_ne!(base, fingerprint(Provider::Meta, "m", &[newer]));
        assert_ne!(base, fingerprint(Provider::Meta, "m", &[changed]));
        assert_ne!(
            base,
            fingerprint(Provider::Openai, "m", std::slice::from_ref(&entry))
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_model_input_carries_guidance_context_transcript_and_one_tool_per_contract() {
        let reference = TurnContext {
            id: "team.policy".into(),
            version: 4,
            title: "Policy".into(),
            body: json!("Reviews take three days."),
        };
        let transcript = [TranscriptMessage {
            role: Role::Assistant,
            text: "Which document?".into(),
        }];
        let input = model_input(&[contract()], &[reference], &transcript, "spec.md");
        assert!(input.system.starts_with(SYSTEM));
        assert!(input.system.contains(guidance("review").unwrap()));
        assert!(!input.system.contains(guidance("planning").unwrap()));
        assert!(
            input
                .system
                .contains("[CONTEXT team.policy v4] Policy\nReviews take three days.")
        );
        assert_eq!(input.messages.len(), 2);
        assert_eq!(input.messages[1], Msg::user("spec.md"));
        assert_eq!(input.tools.len(), 1);
        assert_eq!(input.tools[0].name, "schedule_review");
    }
}
