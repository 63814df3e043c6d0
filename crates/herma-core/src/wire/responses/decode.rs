//! The Responses stream: the response's id on `response.created`, text deltas, whole output
//! items on `response.output_item.done` (function calls, reasoning, refusals, other items),
//! and the stop and usage on `response.completed` or `response.incomplete`.

use serde_json::Value;

use super::Responses;
use crate::call::{ModelEvent, StopReason, Usage};
use crate::wire::WireProtocol;
use crate::wire::sse::Event;
use crate::wire::stream::{
    EventDecoder, Progress, Reference, StreamError, parse, str_of, u, usage_of,
};

#[derive(Debug, Default)]
pub(super) struct Decoder {
    reference: Reference,
    saw_tool_call: bool,
    /// A stop read from an output item (a refusal), reported at the end.
    stop: Option<StopReason>,
}

impl EventDecoder for Decoder {
    fn on_event(
        &mut self,
        event: &Event,
        emit: &mut dyn FnMut(ModelEvent),
    ) -> Result<Progress, StreamError> {
        let (kind, data) = parse(event)?;
        match kind.as_str() {
            "response.created" | "response.in_progress" => {
                self.reference
                    .see(data.pointer("/response/id").and_then(Value::as_str), emit);
            }
            "response.output_text.delta" => {
                if let Some(delta) = data.get("delta").and_then(Value::as_str) {
                    emit(ModelEvent::TextDelta(delta.to_owned()));
                }
            }
            "response.output_item.done" => {
                let item = data.get("item").cloned().unwrap_or(Value::Null);
                self.on_item(item, emit);
            }
            "response.completed" | "response.incomplete" => {
                self.reference
                    .see(data.pointer("/response/id").and_then(Value::as_str), emit);
                let stop = if let Some(stop) = self.stop.take() {
                    stop
                } else if kind == "response.incomplete" {
                    match data
                        .pointer("/response/incomplete_details/reason")
                        .and_then(Value::as_str)
                    {
                        Some("max_output_tokens") => StopReason::MaxTokens,
                        Some("content_filter") => StopReason::Refusal,
                        Some(other) => StopReason::Other(other.to_owned()),
                        None => StopReason::Other("incomplete".to_owned()),
                    }
                } else if self.saw_tool_call {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                };
                emit(ModelEvent::Stop(stop));
                let usage = usage_of(Responses.event_usage(&event.data));
                let cached = u(&usage, "/input_tokens_details/cached_tokens");
                emit(ModelEvent::Usage(Usage {
                    input_tokens: u(&usage, "/input_tokens").saturating_sub(cached),
                    output_tokens: u(&usage, "/output_tokens"),
                    cache_read_tokens: cached,
                    cache_write_tokens: 0,
                }));
                return Ok(Progress::Finished);
            }
            "response.failed" => return Err(StreamError::new("the response failed")),
            _ => {}
        }
        Ok(Progress::Open)
    }
}

impl Decoder {
    fn on_item(&mut self, item: Value, emit: &mut dyn FnMut(ModelEvent)) {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                self.saw_tool_call = true;
                emit(ModelEvent::ToolCall {
                    id: str_of(&item, "call_id"),
                    name: str_of(&item, "name"),
                    arguments: str_of(&item, "arguments"),
                });
            }
            Some("reasoning") => emit(ModelEvent::Reasoning(item)),
            // Text arrived as deltas; refusals end with a refusal stop.
            Some("message") => {
                let refused = item
                    .get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|c| {
                        c.iter()
                            .any(|p| p.get("type").and_then(Value::as_str) == Some("refusal"))
                    });
                if refused {
                    self.stop = Some(StopReason::Refusal);
                }
            }
            _ => emit(ModelEvent::ProviderBlock(item)),
        }
    }
}
