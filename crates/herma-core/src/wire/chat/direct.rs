//! A direct answer as the Chat Completions API would have sent it.

use serde::Serialize;

use crate::wire::direct::{DirectAnswer, Id, NONE, write_json, write_json_event};
use crate::wire::sse::write_event;

pub(super) fn json(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    write_json(
        out,
        &Completion {
            id: answer.id("chatcmpl-"),
            object: "chat.completion",
            created: answer.seconds(),
            model: answer.model,
            choices: [Choice {
                index: 0,
                message: Message {
                    role: "assistant",
                    content: answer.text,
                    refusal: (),
                    annotations: NONE,
                },
                logprobs: (),
                finish_reason: "stop",
            }],
            usage: Usage::default(),
            system_fingerprint: (),
        },
    );
}

pub(super) fn sse(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    // As OpenAI sends it with `include_usage`: `"usage": null` in every chunk before the last
    // one, which carries the usage and no choices.
    let usage = answer.stream_usage.then_some(None);
    let deltas = [
        (
            Delta {
                role: Some("assistant"),
                content: Some(""),
                refusal: Some(()),
            },
            None,
        ),
        (
            Delta {
                content: Some(answer.text),
                ..Delta::default()
            },
            None,
        ),
        (Delta::default(), Some("stop")),
    ];
    for (delta, finish_reason) in deltas {
        let choice = [ChunkChoice {
            index: 0,
            delta,
            logprobs: (),
            finish_reason,
        }];
        write_json_event(out, None, &chunk(answer, &choice, usage));
    }
    if answer.stream_usage {
        write_json_event(out, None, &chunk(answer, &[], Some(Some(Usage::default()))));
    }
    write_event(out, None, "[DONE]");
}

fn chunk<'a>(
    answer: &'a DirectAnswer<'a>,
    choices: &'a [ChunkChoice<'a>],
    usage: Option<Option<Usage>>,
) -> Chunk<'a> {
    Chunk {
        id: answer.id("chatcmpl-"),
        object: "chat.completion.chunk",
        created: answer.seconds(),
        model: answer.model,
        system_fingerprint: (),
        choices,
        usage,
    }
}

// `()` is JSON's `null`, `NONE` its `[]`; members in the API's order.

#[derive(Serialize)]
struct Completion<'a> {
    id: Id<'a>,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: Usage,
    system_fingerprint: (),
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    logprobs: (),
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
    refusal: (),
    annotations: [(); 0],
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: Id<'a>,
    object: &'static str,
    created: i64,
    model: &'a str,
    system_fingerprint: (),
    choices: &'a [ChunkChoice<'a>],
    /// Absent without `include_usage`; `null`, then the usage, with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<Usage>>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: (),
    finish_reason: Option<&'static str>,
}

#[derive(Default, Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    /// `null` in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<()>,
}

/// Zero usage, every member OpenAI reports.
#[derive(Clone, Copy, Default, Serialize)]
struct Usage {
    prompt_tokens: u32,
    completion_tokens: u32,
    total_tokens: u32,
    prompt_tokens_details: CachedTokens,
    completion_tokens_details: ReasoningTokens,
}

#[derive(Clone, Copy, Default, Serialize)]
struct CachedTokens {
    cached_tokens: u32,
}

#[derive(Clone, Copy, Default, Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u32,
}
