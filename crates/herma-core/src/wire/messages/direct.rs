//! A direct answer as the Messages API would have sent it.

use serde_json::{Value, json};

use crate::wire::direct::DirectAnswer;
use crate::wire::sse::write_event;

pub(super) fn json(answer: &DirectAnswer<'_>) -> Value {
    json!({
        "id": format!("msg_{}", answer.id_hex),
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": [{"type": "text", "text": answer.text}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": usage()
    })
}

pub(super) fn sse(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    let mut start = json(answer);
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
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": answer.text}}),
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

fn usage() -> Value {
    json!({"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}
