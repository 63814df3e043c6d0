//! Anthropic Messages (`POST /v1/messages`).
//!
//! Layout: `read` (the lenient request and where a shim goes), `direct` (direct answers),
//! `decode` (the stream decoder), `encode` (governed requests); the error shape, the
//! credential and the support row are here.

mod decode;

pub(crate) use decode::stop_reason;
mod direct;
mod encode;
mod read;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::direct::DirectAnswer;
use super::quick::{EventLead, Scan};
use super::raw::{Obj, Raw};
use super::stream::EventDecoder;
use super::{Envelope, WireProtocol, answer, usage};
use crate::call::{ModelRequest, Support};
use crate::problem::{Problem, ProblemCode};

/// What of a streamed event holds the answer's text (the rest is skipped unparsed).
#[derive(Deserialize)]
struct AnswerEvent<'a> {
    #[serde(borrow, default)]
    delta: Option<AnswerBlock<'a>>,
}

/// What of a whole body holds the answer's text.
#[derive(Deserialize)]
struct AnswerBody<'a> {
    #[serde(borrow, default)]
    content: Vec<AnswerBlock<'a>>,
}

/// [`AnswerBody`] and the usage, in one reading of a whole body.
#[derive(Deserialize)]
struct AnswerAndUsage<'a> {
    #[serde(borrow, default)]
    content: Vec<AnswerBlock<'a>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AnswerBlock<'a> {
    #[serde(borrow, default)]
    text: answer::Text<'a>,
}

/// A stream event's text read by serde_json: its `delta.text`.
pub(super) fn event_text(data: &str) -> Option<Cow<'_, str>> {
    answer::read_str::<AnswerEvent<'_>>(data)?.delta?.text.0
}

/// [`event_text`] read by the quick reader, `None` where it is not sure: `delta` once, `null`
/// or an object of a `text` text. From after `lead` where the event begins with it.
pub(super) fn quick_event_text<'d>(
    data: &'d str,
    lead: &mut EventLead,
) -> Option<Option<Cow<'d, str>>> {
    Scan::led_text(data, "delta", lead, |scan| scan.text_in("text"))
}

/// A whole body's texts (every content block's `text`) and usage read by the quick reader as
/// serde_json reads [`AnswerAndUsage`], `None` where it is not sure: each block an object
/// whose `text` is read once.
pub(super) fn quick_body(body: &str) -> Option<(Vec<Cow<'_, str>>, Option<&str>)> {
    Scan::texts_and_usage(body, "content", |scan, texts| {
        scan.only("text", |scan| {
            texts.extend(scan.text()?);
            Some(())
        })
    })
}

/// Every content block's `text`, in order.
fn push_blocks(blocks: Vec<AnswerBlock<'_>>, push: &mut dyn FnMut(&str)) {
    for block in blocks {
        if let Some(text) = block.text.0 {
            push(&text);
        }
    }
}

impl<'a> answer::BodyTexts<'a> for AnswerBody<'a> {
    fn push_texts(self, push: &mut dyn FnMut(&str)) {
        push_blocks(self.content, push);
    }
}

impl<'a> answer::BodyTexts<'a> for AnswerAndUsage<'a> {
    fn push_texts(self, push: &mut dyn FnMut(&str)) {
        push_blocks(self.content, push);
    }
}

impl<'a> answer::BodyTextsAndUsage<'a> for AnswerAndUsage<'a> {
    fn usage(&self) -> Option<&'a RawValue> {
        self.usage
    }
}

/// Anthropic's Messages API.
#[derive(Clone, Copy, Debug, Default)]
pub struct Messages;

impl WireProtocol for Messages {
    fn as_str(&self) -> &'static str {
        "messages"
    }

    fn path(&self) -> &'static str {
        "/v1/messages"
    }

    fn read(&self, body: &str) -> Result<Envelope, serde_json::Error> {
        read::read(body)
    }

    /// The key as it is, in `x-api-key`.
    fn credential(&self, key: &str) -> (&'static str, String) {
        ("x-api-key", key.to_owned())
    }

    fn direct_json(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
        direct::json(answer, out)
    }

    fn direct_sse(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
        direct::sse(answer, out)
    }

    fn error_body(&self, problem: &Problem) -> Value {
        json!({
            "type": "error",
            "error": {"type": error_type(problem.code), "message": problem.detail, "code": problem.code.as_str()}
        })
    }

    /// `message_start` carries it in `message.usage`, `message_delta` in `usage`.
    fn event_usage<'e>(&self, data: &'e str) -> Option<&'e str> {
        let event = Obj::parse(data)?;
        Obj::of(event.get("message"))
            .get("usage")
            .or_else(|| event.get("usage"))
            .map(Raw::get)
    }

    fn body_usage<'b>(&self, body: &'b [u8]) -> Option<&'b str> {
        usage::top_level(body)
    }

    fn decoder(&self) -> Box<dyn EventDecoder> {
        Box::<decode::Decoder>::default()
    }

    /// A `content_block_delta`'s `delta.text`.
    fn stream_text<'d>(&self, data: &'d str, lead: &mut EventLead) -> Option<Cow<'d, str>> {
        quick_event_text(data, lead).unwrap_or_else(|| event_text(data))
    }

    /// Every content block's `text`.
    fn body_text(&self, body: &[u8], push: &mut dyn FnMut(&str)) {
        answer::body_text::<AnswerBody<'_>>(body, push);
    }

    fn body_usage_and_text<'b>(
        &self,
        body: &'b [u8],
        push: &mut dyn FnMut(&str),
    ) -> Option<Option<&'b str>> {
        answer::body_usage_and_text::<AnswerAndUsage<'_>>(body, push, Some(quick_body))
    }

    fn provider_name(&self) -> &'static str {
        "anthropic_messages"
    }

    /// The base is the API's origin (`https://api.anthropic.com`).
    fn call_path(&self) -> &'static str {
        "/v1/messages"
    }

    fn call_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", "2023-06-01")]
    }

    fn support(&self) -> Support {
        Support {
            max_temperature: 1.0,
            cache_override: true,
            json_schema_output: false,
        }
    }

    fn encode(&self, request: &ModelRequest) -> Value {
        encode::encode(request)
    }
}

/// Anthropic's `error.type` for a problem.
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
        PayloadTooLarge => "request_too_large",
        ProviderOperatorDisabled | Unavailable | ServerBusy => "overloaded_error",
        Internal | UpstreamUnreachable | UpstreamRedirectRefused | UpstreamTimeout => "api_error",
        _ => "invalid_request_error",
    }
}
