//! A direct answer as the Responses API would have sent it.

use serde_json::{Value, json};

use crate::wire::direct::DirectAnswer;
use crate::wire::sse::write_event;

pub(super) fn json(answer: &DirectAnswer<'_>) -> Value {
    response_object(
        answer,
        "completed",
        vec![output_message(answer, "completed")],
    )
}

fn output_message(answer: &DirectAnswer<'_>, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}])
    } else {
        json!([])
    };
    json!({
        "id": format!("msg_{}", answer.id_hex),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content
    })
}

fn response_object(answer: &DirectAnswer<'_>, status: &str, output: Vec<Value>) -> Value {
    json!({
        "id": format!("resp_{}", answer.id_hex),
        "object": "response",
        "created_at": answer.seconds(),
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": answer.model,
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
        "usage": if status == "completed" { usage() } else { Value::Null },
        "user": null,
        "metadata": {}
    })
}

pub(super) fn sse(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    let item_id = format!("msg_{}", answer.id_hex);
    let part =
        json!({"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []});
    let empty_part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
    let events = [
        (
            "response.created",
            json!({"response": response_object(answer, "in_progress", vec![])}),
        ),
        (
            "response.in_progress",
            json!({"response": response_object(answer, "in_progress", vec![])}),
        ),
        (
            "response.output_item.added",
            json!({"output_index": 0, "item": output_message(answer, "in_progress")}),
        ),
        (
            "response.content_part.added",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": empty_part}),
        ),
        (
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": answer.text, "logprobs": []}),
        ),
        (
            "response.output_text.done",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "text": answer.text, "logprobs": []}),
        ),
        (
            "response.content_part.done",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
        ),
        (
            "response.output_item.done",
            json!({"output_index": 0, "item": output_message(answer, "completed")}),
        ),
        (
            "response.completed",
            json!({"response": response_object(answer, "completed", vec![output_message(answer, "completed")])}),
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

fn usage() -> Value {
    json!({
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0
    })
}
