//! A direct answer as the Messages API would have sent it.

use serde::Serialize;

use crate::wire::direct::{DirectAnswer, Id, write_json, write_json_event};
use crate::wire::sse::write_event;

pub(super) fn json(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    let content = [TextBlock {
        kind: "text",
        text: answer.text,
    }];
    write_json(out, &message(answer, &content, Some("end_turn")));
}

pub(super) fn sse(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    write_json_event(
        out,
        Some("message_start"),
        &MessageStart {
            kind: "message_start",
            message: message(answer, &[], None),
        },
    );
    write_event(
        out,
        Some("content_block_start"),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    write_event(out, Some("ping"), r#"{"type":"ping"}"#);
    write_json_event(
        out,
        Some("content_block_delta"),
        &BlockDelta {
            kind: "content_block_delta",
            index: 0,
            delta: TextBlock {
                kind: "text_delta",
                text: answer.text,
            },
        },
    );
    write_event(
        out,
        Some("content_block_stop"),
        r#"{"type":"content_block_stop","index":0}"#,
    );
    write_event(
        out,
        Some("message_delta"),
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":0}}"#,
    );
    write_event(out, Some("message_stop"), r#"{"type":"message_stop"}"#);
}

fn message<'a>(
    answer: &'a DirectAnswer<'a>,
    content: &'a [TextBlock<'a>],
    stop_reason: Option<&'static str>,
) -> Message<'a> {
    Message {
        id: answer.id("msg_"),
        kind: "message",
        role: "assistant",
        model: answer.model,
        content,
        stop_reason,
        stop_sequence: (),
        usage: Usage::default(),
    }
}

// `()` is JSON's `null`; members in the API's order.

#[derive(Serialize)]
struct Message<'a> {
    id: Id<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: &'a [TextBlock<'a>],
    stop_reason: Option<&'static str>,
    stop_sequence: (),
    usage: Usage,
}

#[derive(Serialize)]
struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct MessageStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: Message<'a>,
}

#[derive(Serialize)]
struct BlockDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u32,
    delta: TextBlock<'a>,
}

/// Zero usage, every member Anthropic reports.
#[derive(Default, Serialize)]
struct Usage {
    input_tokens: u32,
    output_tokens: u32,
    cache_creation_input_tokens: u32,
    cache_read_input_tokens: u32,
}
