//! A direct answer as the Chat Completions API would have sent it.

use serde_json::{Value, json};

use crate::wire::direct::DirectAnswer;
use crate::wire::sse::write_event;

pub(super) fn json(answer: &DirectAnswer<'_>) -> Value {
    json!({
        "id": format!("chatcmpl-{}", answer.id_hex),
        "object": "chat.completion",
        "created": answer.seconds(),
        "model": answer.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer.text, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": usage(),
        "system_fingerprint": null
    })
}

pub(super) fn sse(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    let chunks = [
        chunk(
            answer,
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        ),
        chunk(answer, json!({"content": answer.text}), Value::Null),
        chunk(answer, json!({}), json!("stop")),
    ];
    for chunk in chunks {
        write_event(out, None, &chunk.to_string());
    }
    if answer.stream_usage {
        let mut usage_chunk = chunk(answer, json!({}), Value::Null);
        usage_chunk["choices"] = json!([]);
        usage_chunk["usage"] = usage();
        write_event(out, None, &usage_chunk.to_string());
    }
    write_event(out, None, "[DONE]");
}

/// One chunk. With `include_usage`, OpenAI puts `"usage": null` in every chunk before the last
/// one (which carries the usage and no choices).
fn chunk(answer: &DirectAnswer<'_>, delta: Value, finish: Value) -> Value {
    let mut chunk = json!({
        "id": format!("chatcmpl-{}", answer.id_hex),
        "object": "chat.completion.chunk",
        "created": answer.seconds(),
        "model": answer.model,
        "system_fingerprint": null,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
    });
    if answer.stream_usage {
        chunk["usage"] = Value::Null;
    }
    chunk
}

fn usage() -> Value {
    json!({
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0}
    })
}
