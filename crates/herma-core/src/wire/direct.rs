//! Direct answers: a `respond_directly` provision's text, rendered exactly as each protocol's
//! own API would have answered — JSON, or the protocol's full SSE event sequence — with zero
//! usage and no upstream involved.

use serde_json::{Value, json};

use super::Protocol;
use super::sse::write_event;
use crate::time::Timestamp;

/// Everything a direct answer needs; ids come from the caller's random source.
#[derive(Clone, Debug)]
pub struct DirectAnswer<'a> {
    pub protocol: Protocol,
    pub model: &'a str,
    pub text: &'a str,
    /// Hex used to build the protocol's ids (`chatcmpl-…`, `resp_…`, `msg_…`).
    pub id_hex: &'a str,
    pub created: Timestamp,
    /// Chat Completions: `stream_options.include_usage` was set.
    pub stream_usage: bool,
}

impl DirectAnswer<'_> {
    fn seconds(&self) -> i64 {
        self.created.as_millis().div_euclid(1000)
    }

    /// The non-streaming response object.
    pub fn json(&self) -> Value {
        match self.protocol {
            Protocol::ChatCompletions => json!({
                "id": format!("chatcmpl-{}", self.id_hex),
                "object": "chat.completion",
                "created": self.seconds(),
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": self.text, "refusal": null, "annotations": []},
                    "logprobs": null,
                    "finish_reason": "stop"
                }],
                "usage": chat_usage(),
                "system_fingerprint": null
            }),
            Protocol::Responses => {
                self.response_object("completed", vec![self.output_message("completed")])
            }
            Protocol::Messages => json!({
                "id": format!("msg_{}", self.id_hex),
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [{"type": "text", "text": self.text}],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": messages_usage()
            }),
        }
    }

    /// The streaming response: the protocol's whole SSE event sequence.
    pub fn sse(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text.len() * 2 + 2048);
        match self.protocol {
            Protocol::ChatCompletions => self.chat_sse(&mut out),
            Protocol::Responses => self.responses_sse(&mut out),
            Protocol::Messages => self.messages_sse(&mut out),
        }
        out
    }

    fn chat_chunk(&self, delta: Value, finish: Value) -> Value {
        json!({
            "id": format!("chatcmpl-{}", self.id_hex),
            "object": "chat.completion.chunk",
            "created": self.seconds(),
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        })
    }

    fn chat_sse(&self, out: &mut Vec<u8>) {
        let chunks = [
            self.chat_chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                Value::Null,
            ),
            self.chat_chunk(json!({"content": self.text}), Value::Null),
            self.chat_chunk(json!({}), json!("stop")),
        ];
        for chunk in chunks {
            write_event(out, None, &chunk.to_string());
        }
        if self.stream_usage {
            let mut usage = self.chat_chunk(json!({}), Value::Null);
            usage["choices"] = json!([]);
            usage["usage"] = chat_usage();
            write_event(out, None, &usage.to_string());
        }
        write_event(out, None, "[DONE]");
    }

    fn output_message(&self, status: &str) -> Value {
        let content = if status == "completed" {
            json!([{"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}])
        } else {
            json!([])
        };
        json!({
            "id": format!("msg_{}", self.id_hex),
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content
        })
    }

    fn response_object(&self, status: &str, output: Vec<Value>) -> Value {
        json!({
            "id": format!("resp_{}", self.id_hex),
            "object": "response",
            "created_at": self.seconds(),
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "max_output_tokens": null,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null},
            "store": false,
            "temperature": null,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": null,
            "truncation": "disabled",
            "usage": if status == "completed" { responses_usage() } else { Value::Null },
            "user": null,
            "metadata": {}
        })
    }

    fn responses_sse(&self, out: &mut Vec<u8>) {
        let item_id = format!("msg_{}", self.id_hex);
        let part =
            json!({"type": "output_text", "text": self.text, "annotations": [], "logprobs": []});
        let empty_part =
            json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
        let events = [
            (
                "response.created",
                json!({"response": self.response_object("in_progress", vec![])}),
            ),
            (
                "response.in_progress",
                json!({"response": self.response_object("in_progress", vec![])}),
            ),
            (
                "response.output_item.added",
                json!({"output_index": 0, "item": self.output_message("in_progress")}),
            ),
            (
                "response.content_part.added",
                json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": empty_part}),
            ),
            (
                "response.output_text.delta",
                json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": self.text, "logprobs": []}),
            ),
            (
                "response.output_text.done",
                json!({"item_id": item_id, "output_index": 0, "content_index": 0, "text": self.text, "logprobs": []}),
            ),
            (
                "response.content_part.done",
                json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
            ),
            (
                "response.output_item.done",
                json!({"output_index": 0, "item": self.output_message("completed")}),
            ),
            (
                "response.completed",
                json!({"response": self.response_object("completed", vec![self.output_message("completed")])}),
            ),
        ];
        for (sequence, (kind, mut data)) in events.into_iter().enumerate() {
            if let Value::Object(map) = &mut data {
                let mut ordered = serde_json::Map::new();
                ordered.insert("type".into(), json!(kind));
                ordered.insert("sequence_number".into(), json!(sequence));
                ordered.extend(std::mem::take(map));
                data = Value::Object(ordered);
            }
            write_event(out, Some(kind), &data.to_string());
        }
    }

    fn messages_sse(&self, out: &mut Vec<u8>) {
        let mut start = self.json();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        let events = [
            (
                "message_start",
                json!({"type": "message_start", "message": start}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            ("ping", json!({"type": "ping"})),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": self.text}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 0}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ];
        for (kind, data) in events {
            write_event(out, Some(kind), &data.to_string());
        }
    }
}

fn chat_usage() -> Value {
    json!({
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0}
    })
}

fn responses_usage() -> Value {
    json!({
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0
    })
}

fn messages_usage() -> Value {
    json!({"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}
