//! OpenAI Responses (`POST /v1/responses`).
//!
//! Layout: `read` (the lenient request and where a shim goes), `direct` (direct answers),
//! `decode` (the stream decoder), `encode` (governed requests); the error shape and the
//! credential are OpenAI's, as for Chat Completions; the support row is here.

mod decode;
mod direct;
mod encode;
mod read;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::chat::ChatCompletions;
use super::direct::DirectAnswer;
use super::quick::{EventLead, Scan};
use super::raw::{Obj, Raw};
use super::stream::EventDecoder;
use super::{Envelope, WireProtocol, answer, usage};
use crate::call::{ModelRequest, Support};
use crate::problem::Problem;

/// OpenAI's Responses API.
#[derive(Clone, Copy, Debug, Default)]
pub struct Responses;

/// What of a streamed event holds the answer's text (the rest is skipped unparsed).
#[derive(Deserialize)]
struct AnswerEvent<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: answer::Text<'a>,
    #[serde(borrow, default)]
    delta: answer::Text<'a>,
}

/// The kind of event whose `delta` is the answer's text.
const TEXT_DELTA: &str = "response.output_text.delta";

/// A stream event's text read by serde_json: a `response.output_text.delta` event's `delta`.
pub(super) fn event_text(data: &str) -> Option<Cow<'_, str>> {
    let event: AnswerEvent<'_> = answer::read_str(data)?;
    if event.kind.0.as_deref() == Some(TEXT_DELTA) {
        event.delta.0
    } else {
        None
    }
}

/// [`event_text`] read by the quick reader, `None` where it is not sure: `type` and `delta`
/// once each, read as texts. Its events open with the `type` it reads: no lead is kept.
pub(super) fn quick_event_text<'d>(
    data: &'d str,
    _lead: &mut EventLead,
) -> Option<Option<Cow<'d, str>>> {
    let mut texts = [None, None];
    Scan::whole(data, |scan| {
        scan.each_once(["type", "delta"], |scan, named| {
            texts[named] = scan.text()?;
            Some(())
        })
    })?;
    let [kind, delta] = texts;
    if kind.as_deref() == Some(TEXT_DELTA) {
        Some(delta)
    } else {
        Some(None)
    }
}

/// What of a whole body holds the answer's text.
#[derive(Deserialize)]
struct AnswerBody<'a> {
    #[serde(borrow, default)]
    output: Vec<AnswerItem<'a>>,
}

/// [`AnswerBody`] and the usage, in one reading of a whole body.
#[derive(Deserialize)]
struct AnswerAndUsage<'a> {
    #[serde(borrow, default)]
    output: Vec<AnswerItem<'a>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AnswerItem<'a> {
    #[serde(borrow, default)]
    content: Vec<AnswerPart<'a>>,
}

#[derive(Deserialize)]
struct AnswerPart<'a> {
    #[serde(borrow, default)]
    text: answer::Text<'a>,
}

/// Every output item's content parts' `text`, in order.
fn push_parts(output: Vec<AnswerItem<'_>>, push: &mut dyn FnMut(&str)) {
    for part in output.into_iter().flat_map(|item| item.content) {
        if let Some(text) = part.text.0 {
            push(&text);
        }
    }
}

impl<'a> answer::BodyTexts<'a> for AnswerBody<'a> {
    fn push_texts(self, push: &mut dyn FnMut(&str)) {
        push_parts(self.output, push);
    }
}

impl<'a> answer::BodyTexts<'a> for AnswerAndUsage<'a> {
    fn push_texts(self, push: &mut dyn FnMut(&str)) {
        push_parts(self.output, push);
    }
}

impl<'a> answer::BodyTextsAndUsage<'a> for AnswerAndUsage<'a> {
    fn usage(&self) -> Option<&'a RawValue> {
        self.usage
    }
}

impl WireProtocol for Responses {
    fn as_str(&self) -> &'static str {
        "responses"
    }

    fn path(&self) -> &'static str {
        "/v1/responses"
    }

    fn read(&self, body: &str) -> Result<Envelope, serde_json::Error> {
        read::read(body)
    }

    /// OpenAI's bearer key, as for Chat Completions.
    fn credential(&self, key: &str) -> (&'static str, String) {
        ChatCompletions.credential(key)
    }

    fn direct_json(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
        direct::json(answer, out)
    }

    fn direct_sse(&self, answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
        direct::sse(answer, out)
    }

    /// OpenAI's error object, as for Chat Completions.
    fn error_body(&self, problem: &Problem) -> Value {
        ChatCompletions.error_body(problem)
    }

    /// The `response` object's usage (`response.completed` carries the terminal one).
    fn event_usage<'e>(&self, data: &'e str) -> Option<&'e str> {
        Obj::of(Obj::parse(data)?.get("response"))
            .get("usage")
            .map(Raw::get)
    }

    fn body_usage<'b>(&self, body: &'b [u8]) -> Option<&'b str> {
        usage::top_level(body)
    }

    fn decoder(&self) -> Box<dyn EventDecoder> {
        Box::<decode::Decoder>::default()
    }

    /// A `response.output_text.delta` event's `delta`.
    fn stream_text<'d>(&self, data: &'d str, lead: &mut EventLead) -> Option<Cow<'d, str>> {
        quick_event_text(data, lead).unwrap_or_else(|| event_text(data))
    }

    /// Every output item's content parts' `text`.
    fn body_text(&self, body: &[u8], push: &mut dyn FnMut(&str)) {
        answer::body_text::<AnswerBody<'_>>(body, push);
    }

    fn body_usage_and_text<'b>(
        &self,
        body: &'b [u8],
        push: &mut dyn FnMut(&str),
    ) -> Option<Option<&'b str>> {
        answer::body_usage_and_text::<AnswerAndUsage<'_>>(body, push, None)
    }

    fn provider_name(&self) -> &'static str {
        "openai_responses"
    }

    /// The base includes the API's version (`https://api.openai.com/v1`).
    fn call_path(&self) -> &'static str {
        "/responses"
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
