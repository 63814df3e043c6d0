//! Each protocol's stream decoder on the streams its API sends, split at awkward boundaries.

use serde_json::{Value, json};

use super::{StreamDecoder, StreamError};
use crate::call::{ModelEvent, StopReason, Usage};
use crate::wire::Protocol;

/// The stream's bytes in chunks of 7, to exercise the reader across boundaries.
fn sse(events: &[(&str, Value)]) -> Vec<Vec<u8>> {
    let mut text = String::new();
    for (name, data) in events {
        if !name.is_empty() {
            text.push_str(&format!("event: {name}\n"));
        }
        text.push_str(&format!("data: {data}\n\n"));
    }
    text.into_bytes().chunks(7).map(<[u8]>::to_vec).collect()
}

/// What a decoder makes of `chunks`, ending as the body ends.
fn collect(protocol: Protocol, chunks: Vec<Vec<u8>>) -> Vec<Result<ModelEvent, StreamError>> {
    let mut decoder = StreamDecoder::new(protocol);
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.feed(&chunk, &mut |item| out.push(item));
        if decoder.is_finished() {
            break;
        }
    }
    if let Err(error) = decoder.end() {
        out.push(Err(error));
    }
    out
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn anthropic_blocks_become_neutral_events_in_order() {
    let events = collect(
        Protocol::Messages,
        sse(&[
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 1}}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "héllo"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tu_1", "name": "extract", "input": {}}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 2}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]),
    );
    let events: Vec<ModelEvent> = events.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        events,
        vec![
            ModelEvent::Reference("msg_1".into()),
            ModelEvent::Reasoning(
                json!({"type": "thinking", "thinking": "hm", "signature": "sig"})
            ),
            ModelEvent::TextDelta("héllo".into()),
            ModelEvent::ToolCall {
                id: "tu_1".into(),
                name: "extract".into(),
                arguments: "{\"a\":1}".into()
            },
            ModelEvent::Stop(StopReason::ToolUse),
            ModelEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 40,
                cache_read_tokens: 3,
                cache_write_tokens: 0
            }),
        ]
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn responses_items_and_usage_are_read() {
    let events = collect(
        Protocol::Responses,
        sse(&[
            (
                "response.created",
                json!({"type": "response.created", "response": {"id": "resp_1"}}),
            ),
            (
                "response.output_item.done",
                json!({"type": "response.output_item.done", "item": {"type": "reasoning", "encrypted_content": "xyz", "summary": []}}),
            ),
            (
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "delta": "hi"}),
            ),
            (
                "response.output_item.done",
                json!({"type": "response.output_item.done", "item": {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}}),
            ),
            (
                "response.completed",
                json!({"type": "response.completed", "response": {"id": "resp_1", "usage": {"input_tokens": 20, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 5}}}}),
            ),
        ]),
    );
    let events: Vec<ModelEvent> = events.into_iter().map(Result::unwrap).collect();
    assert_eq!(events[0], ModelEvent::Reference("resp_1".into()));
    assert!(matches!(events[1], ModelEvent::Reasoning(_)));
    assert_eq!(events[2], ModelEvent::TextDelta("hi".into()));
    assert_eq!(events[4], ModelEvent::Stop(StopReason::ToolUse));
    assert_eq!(
        events[5],
        ModelEvent::Usage(Usage {
            input_tokens: 15,
            output_tokens: 7,
            cache_read_tokens: 5,
            cache_write_tokens: 0
        })
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn chat_chunks_accumulate_tool_calls_and_read_usage_before_done() {
    let body = {
        let text = [
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]}).to_string(),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{\"x\""}}]}}]}).to_string(),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":2}"}}]}}]}).to_string(),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
            json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}).to_string(),
            "[DONE]".to_owned(),
        ]
        .iter()
        .map(|d| format!("data: {d}\n\n"))
        .collect::<String>();
        vec![text.into_bytes()]
    };
    let events: Vec<ModelEvent> = collect(Protocol::ChatCompletions, body)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        vec![
            ModelEvent::Reference("chatcmpl-1".into()),
            ModelEvent::TextDelta("a".into()),
            ModelEvent::ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{\"x\":2}".into()
            },
            ModelEvent::Stop(StopReason::ToolUse),
            ModelEvent::Usage(Usage {
                input_tokens: 9,
                output_tokens: 4,
                ..Usage::default()
            }),
        ]
    );
}
