//! The Messages stream: `message_start`, content blocks by index (text, tool use with its
//! input as JSON deltas, thinking with its signature, server tools), `message_delta` with the
//! stop and the output usage, `message_stop`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Messages;
use crate::call::{ModelEvent, StopReason, Usage};
use crate::wire::WireProtocol;
use crate::wire::sse::Event;
use crate::wire::stream::{
    EventDecoder, Progress, Reference, StreamError, parse, str_of, u, usage_of,
};

#[derive(Debug, Default)]
pub(super) struct Decoder {
    reference: Reference,
    /// Open blocks by index, with the partial JSON of their input.
    blocks: BTreeMap<u64, (Value, String)>,
    usage: Usage,
}

impl EventDecoder for Decoder {
    fn on_event(
        &mut self,
        event: &Event,
        emit: &mut dyn FnMut(ModelEvent),
    ) -> Result<Progress, StreamError> {
        let (kind, data) = parse(event)?;
        match kind.as_str() {
            "message_start" => {
                self.reference
                    .see(data.pointer("/message/id").and_then(Value::as_str), emit);
                let usage = usage_of(Messages.event_usage(&event.data));
                self.usage.input_tokens = u(&usage, "/input_tokens");
                self.usage.cache_read_tokens = u(&usage, "/cache_read_input_tokens");
                self.usage.cache_write_tokens = u(&usage, "/cache_creation_input_tokens");
                self.usage.output_tokens = u(&usage, "/output_tokens");
            }
            "content_block_start" => {
                let index = u(&data, "/index");
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                self.blocks.insert(index, (block, String::new()));
            }
            "content_block_delta" => {
                let index = u(&data, "/index");
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                let Some((block, partial)) = self.blocks.get_mut(&index) else {
                    return Err(StreamError::new("a delta for a block that never started"));
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str) {
                            emit(ModelEvent::TextDelta(text.to_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        if let Some(p) = delta.get("partial_json").and_then(Value::as_str) {
                            partial.push_str(p);
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(t) = delta.get("thinking").and_then(Value::as_str) {
                            append_str(block, "thinking", t);
                        }
                    }
                    Some("signature_delta") => {
                        if let Some(t) = delta.get("signature").and_then(Value::as_str) {
                            append_str(block, "signature", t);
                        }
                    }
                    // Citations and anything newer: the block is kept as it started.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = u(&data, "/index");
                if let Some((block, partial)) = self.blocks.remove(&index) {
                    finish_block(block, partial, emit);
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    emit(ModelEvent::Stop(stop_reason(reason)));
                }
                let usage = usage_of(Messages.event_usage(&event.data));
                if let Some(n) = usage.get("output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = n;
                }
                if let Some(n) = usage.get("input_tokens").and_then(Value::as_u64) {
                    self.usage.input_tokens = n;
                }
            }
            "message_stop" => {
                emit(ModelEvent::Usage(self.usage));
                return Ok(Progress::Finished);
            }
            _ => {}
        }
        Ok(Progress::Open)
    }
}

/// A finished block: text was already streamed; tool calls, reasoning and other blocks are
/// emitted whole.
fn finish_block(block: Value, partial: String, emit: &mut dyn FnMut(ModelEvent)) {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => {}
        Some("tool_use") => emit(ModelEvent::ToolCall {
            id: str_of(&block, "id"),
            name: str_of(&block, "name"),
            arguments: if partial.is_empty() {
                "{}".to_owned()
            } else {
                partial
            },
        }),
        Some("thinking") | Some("redacted_thinking") => emit(ModelEvent::Reasoning(block)),
        _ => {
            // Server tools stream their input as JSON too: keep it, parsed.
            let mut block = block;
            if !partial.is_empty()
                && let (Some(object), Ok(input)) = (
                    block.as_object_mut(),
                    serde_json::from_str::<Value>(&partial),
                )
            {
                object.insert("input".to_owned(), input);
            }
            emit(ModelEvent::ProviderBlock(block))
        }
    }
}

/// An Anthropic `stop_reason`, neutrally (streamed and whole replies alike).
pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "max_tokens" => StopReason::MaxTokens,
        "tool_use" => StopReason::ToolUse,
        "refusal" => StopReason::Refusal,
        "model_context_window_exceeded" => StopReason::ContextWindowExceeded,
        other => StopReason::Other(other.to_owned()),
    }
}

fn append_str(block: &mut Value, field: &str, text: &str) {
    if let Some(object) = block.as_object_mut() {
        let current = object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        object.insert(field.to_owned(), Value::String(current + text));
    }
}
