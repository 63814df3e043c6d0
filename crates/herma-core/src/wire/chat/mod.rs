//! OpenAI Chat Completions (`POST /v1/chat/completions`), also spoken by many other providers
//! and local servers.
//!
//! Layout: `read` (the lenient request and where a shim goes), `direct` (direct answers),
//! `decode` (the stream decoder), `encode` (governed requests); the error shape and the
//! credential (OpenAI's, shared with Responses) and the support row are here.

mod decode;

pub(crate) use decode::stop_reason;
mod direct;
mod encode;
mod read;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

pub(super) use read::tool_name;

use super::direct::DirectAnswer;
use super::quick::{EventLead, Scan};
use super::raw::{Obj, Raw};
use super::stream::EventDecoder;
use super::{Envelope, WireProtocol, answer, usage};
use crate::call::{ModelRequest, Support};
use crate::problem::{Problem, ProblemCode};

/// OpenAI's Chat Completions API.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChatCompletions;

/// What of a chunk or a whole body holds the answer's text (the rest is skipped unparsed).
#[derive(Deserialize)]
struct AnswerChoices<'a> {
    #[serde(borrow, default)]
    choices: Vec<AnswerChoice<'a>>,
}

/// [`AnswerChoices`] and the usage, in one reading of a whole body.
#[derive(Deserialize)]
struct AnswerAndUsage<'a> {
    #[serde(borrow, default)]
    choices: Vec<AnswerChoice<'a>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AnswerChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<AnswerContent<'a>>,
    #[serde(borrow, default)]
    message: Option<AnswerContent<'a>>,
}

#[derive(Deserialize)]
struct AnswerContent<'a> {
    #[serde(borrow, default)]
    content: answer::Text<'a>,
}

/// A stream event's text read by serde_json: the first choice's `delta.content`.
pub(super) fn event_text(data: &str) -> Option<Cow<'_, str>> {
    let chunk: AnswerChoices<'_> = answer::read_str(data)?;
    chunk.choices.into_iter().next()?.delta?.content.0
}

/// [`event_text`] read by the quick reader, `None` where it is not sure: `choices` once, each
/// choice read by [`quick_choice`]. From after `lead` where the event begins with it.
pub(super) fn quick_event_text<'d>(
    data: &'d str,
    lead: &mut EventLead,
) -> Option<Option<Cow<'d, str>>> {
    Scan::led_text(data, "choices", lead, |scan| {
        let (mut first, mut text) = (true, None);
        scan.elements(|scan| {
            let (delta, _) = quick_choice(scan)?;
            if std::mem::take(&mut first) {
                text = delta;
            }
            Some(())
        })?;
        Some(text)
    })
}

/// A whole body's texts (every choice's `message.content`) and usage read by the quick
/// reader as serde_json reads [`AnswerAndUsage`], `None` where it is not sure.
pub(super) fn quick_body(body: &str) -> Option<(Vec<Cow<'_, str>>, Option<&str>)> {
    Scan::texts_and_usage(body, "choices", |scan, texts| {
        let (_, message) = quick_choice(scan)?;
        texts.extend(message);
        Some(())
    })
}

/// A choice's texts: its `delta.content` and its `message.content`.
type ChoiceTexts<'d> = (Option<Cow<'d, str>>, Option<Cow<'d, str>>);

/// An [`AnswerChoice`] read by the quick reader: `delta` and `message` each once, `null` or
/// an object of a `content` text, other members skipped; the two texts.
fn quick_choice<'d>(scan: &mut Scan<'d>) -> Option<ChoiceTexts<'d>> {
    let mut texts = [None, None];
    scan.each_once(["delta", "message"], |scan, named| {
        texts[named] = scan.text_in("content")?;
        Some(())
    })?;
    let [delta, message] = texts;
    Some((delta, message))
}

/// Every choice's `message.content`, in order.
fn push_messages(choices: Vec<AnswerChoice<'_>>, push: &mut dyn FnMut(&str)) {
    for choice in choices {
        if let Some(text) = choice.message.and_then(|m| m.content.0) {
            push(&text);
        }
    }
}

impl<'a> answer::BodyTexts<'a> for AnswerChoices<'a> {
    fn push_texts(self, push: &mut dyn FnMut(&str)) {
        push_messages(self.choices, push);
    }
}

impl<'a> answer::BodyTexts<'a> for AnswerAndUsage<'a> {
    fn push_texts(self, push: &mut dyn FnMut(&str)) {
        push_messages(self.choices, push);
    }
}

impl<'a> answer::BodyTextsAndUsage<'a> for AnswerAndUsage<'a> {
    fn usage(&self) -> Option<&'a RawValue> {
        self.usage
    }
}

impl WireProtocol for ChatCompletions {
    fn as_str(&self) -> &'static str {
        "chat_completions"
    }

    fn path(&self) -> &'static str {
        "/v1/chat/completions"
    }

    fn read(&self, body: &str) -> Result<Envelope, serde_json::Error> {
        read::read(body)
    }

    /// `authorization: Bearer <key>`.
    fn credential(&self, key: &str) -> (&'static str, String) {
        ("authorization", format!("Bearer {key}"))
    }

    fn direct_json(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
        direct::json(answer, out)
    }

    fn direct_sse(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
        direct::sse(answer, out)
    }

    /// OpenAI's error object; the first field error's pointer is its `param`.
    fn error_body(&self, problem: &Problem) -> Value {
        let param = problem
            .errors
            .first()
            .map(|e| e.pointer.clone())
            .filter(|p| !p.is_empty());
        json!({
            "error": {
                "message": problem.detail,
                "type": error_type(problem.code),
                "param": param,
                "code": problem.code.as_str()
            }
        })
    }

    /// A chunk's `usage` (with `include_usage`, the last chunk before `[DONE]`).
    fn event_usage<'e>(&self, data: &'e str) -> Option<&'e str> {
        Obj::parse(data)?.get("usage").map(Raw::get)
    }

    fn body_usage<'b>(&self, body: &'b [u8]) -> Option<&'b str> {
        usage::top_level(body)
    }

    fn decoder(&self) -> Box<dyn EventDecoder> {
        Box::<decode::Decoder>::default()
    }

    /// The first choice's `delta.content`.
    fn stream_text<'d>(&self, data: &'d str, lead: &mut EventLead) -> Option<Cow<'d, str>> {
        quick_event_text(data, lead).unwrap_or_else(|| event_text(data))
    }

    /// Every choice's `message.content`.
    fn body_text(&self, body: &[u8], push: &mut dyn FnMut(&str)) {
        answer::body_text::<AnswerChoices<'_>>(body, push);
    }

    fn body_usage_and_text<'b>(
        &self,
        body: &'b [u8],
        push: &mut dyn FnMut(&str),
    ) -> Option<Option<&'b str>> {
        answer::body_usage_and_text::<AnswerAndUsage<'_>>(body, push, Some(quick_body))
    }

    fn provider_name(&self) -> &'static str {
        "chat_completions"
    }

    /// The base includes the API's version (`https://api.openai.com/v1`).
    fn call_path(&self) -> &'static str {
        "/chat/completions"
    }

    fn call_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    fn support(&self) -> Support {
        Support {
            max_temperature: 2.0,
            cache_override: false,
            json_schema_output: true,
        }
    }

    fn encode(&self, request: &ModelRequest) -> Value {
        encode::encode(request)
    }
}

/// OpenAI's `error.type` for a problem.
fn error_type(code: ProblemCode) -> &'static str {
    use ProblemCode::*;
    match code {
        Unauthorized => "authentication_error",
        HarnessRequired
        | InsufficientScope
        | AdminRequired
        | BuiltinProtected
        | BrowserNavigationRefused
        | EdgeAuthRequired
        | ContributorTierRefused
        | UpstreamHostRefused => "permission_error",
        NotFound => "not_found_error",
        Internal
        | Unavailable
        | ProviderOperatorDisabled
        | UpstreamUnreachable
        | UpstreamRedirectRefused
        | UpstreamTimeout
        | ServerBusy => "server_error",
        _ => "invalid_request_error",
    }
}
