//! The Chat Completions stream: chunks of `choices[0].delta` (content, `reasoning_content`,
//! tool calls accumulated by index), the `finish_reason`, a usage chunk when `include_usage`
//! is honoured, then `[DONE]`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::ChatCompletions;
use crate::call::{ModelEvent, StopReason, Usage};
use crate::wire::WireProtocol;
use crate::wire::sse::Event;
use crate::wire::stream::{EventDecoder, Progress, Reference, StreamError, parse, u, usage_of};

#[derive(Debug, Default)]
pub(super) struct Decoder {
    reference: Reference,
    /// Tool calls by index, as their deltas arrive.
    calls: BTreeMap<u64, PendingCall>,
    /// The usage chunk, once it arrived.
    usage: Option<Usage>,
}

#[derive(Debug, Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

impl EventDecoder for Decoder {
    fn on_event(
        &mut self,
        event: &Event,
        emit: &mut dyn FnMut(ModelEvent),
    ) -> Result<Progress, StreamError> {
        if event.data.trim() == "[DONE]" {
            if let Some(usage) = self.usage {
                emit(ModelEvent::Usage(usage));
            }
            return Ok(Progress::Finished);
        }
        let (_, data) = parse(event)?;
        self.reference
            .see(data.get("id").and_then(Value::as_str), emit);
        let usage = usage_of(ChatCompletions.event_usage(&event.data));
        if usage.is_object() {
            let cached = u(&usage, "/prompt_tokens_details/cached_tokens");
            self.usage = Some(Usage {
                input_tokens: u(&usage, "/prompt_tokens").saturating_sub(cached),
                output_tokens: u(&usage, "/completion_tokens"),
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            });
        }
        let Some(choice) = data
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(Progress::Open);
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            emit(ModelEvent::TextDelta(text.to_owned()));
        }
        if let Some(reasoning) = delta.get("reasoning_content").and_then(Value::as_str)
            && !reasoning.is_empty()
        {
            emit(ModelEvent::Reasoning(
                json!({"type": "reasoning_content", "text": reasoning}),
            ));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let pending = self.calls.entry(u(call, "/index")).or_default();
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                pending.id = id.to_owned();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                pending.name.push_str(name);
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                pending.arguments.push_str(args);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            for (_, call) in std::mem::take(&mut self.calls) {
                emit(ModelEvent::ToolCall {
                    id: call.id,
                    name: call.name,
                    arguments: call.arguments,
                });
            }
            emit(ModelEvent::Stop(stop_reason(reason)));
        }
        Ok(Progress::Open)
    }
}

/// A Chat Completions `finish_reason`, neutrally (streamed and whole replies alike).
pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}
