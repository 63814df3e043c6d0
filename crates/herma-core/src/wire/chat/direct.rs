//! A direct answer as the Chat Completions API would have sent it.

use serde::Serialize;

use crate::wire::direct::{DirectAnswer, Id, write_json_event};
use crate::wire::sse::write_event;

/// Written by hand (every request a Chat rule answers writes it): byte for byte what
/// serializing the tests' `Completion` (the answer as the API's types) gives.
pub(super) fn json(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    use crate::json::{write_signed, write_string};
    out.extend_from_slice(b"{\"id\":");
    answer.id("chatcmpl-").write_json(out);
    out.extend_from_slice(b",\"object\":\"chat.completion\",\"created\":");
    write_signed(out, answer.seconds());
    out.extend_from_slice(b",\"model\":");
    write_string(out, answer.model);
    out.extend_from_slice(
        b",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":",
    );
    write_string(out, answer.text);
    out.extend_from_slice(
        b",\"refusal\":null,\"annotations\":[]},\"logprobs\":null,\"finish_reason\":\"stop\"}],\
          \"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0,\
          \"prompt_tokens_details\":{\"cached_tokens\":0},\
          \"completion_tokens_details\":{\"reasoning_tokens\":0}},\"system_fingerprint\":null}",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;
    use crate::wire::Protocol;

    /// The answer as the API's types (members in its order), which serde serializes: what
    /// `json` must write.
    fn completion<'a>(answer: &'a DirectAnswer<'a>) -> Completion<'a> {
        Completion {
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
                    annotations: crate::wire::direct::NONE,
                },
                logprobs: (),
                finish_reason: "stop",
            }],
            usage: Usage::default(),
            system_fingerprint: (),
        }
    }

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

    /// The hand-written answer is what serializing the `Completion` gives, for texts and models
    /// that need escapes and those that do not, ids, and times before 1970.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_json_answer_is_the_completion_serialized() {
        let texts = [
            "Deploys are frozen.",
            "",
            "a \"quoted\"\nline\t\u{1}\\ é \u{2028} 😀",
            "</script>",
        ];
        for (i, text) in texts.into_iter().enumerate() {
            for (model, id_hex, millis) in [
                ("gpt-4o", "0f1e2d3c4b5a6978", 1_796_000_000_123),
                ("m\"odel\u{7f}", "", -1_500),
                ("", "a\"b", 0),
            ] {
                let answer = DirectAnswer {
                    protocol: Protocol::ChatCompletions,
                    model,
                    text,
                    id_hex,
                    created: Timestamp::from_millis(millis),
                    stream_usage: i % 2 == 0,
                };
                let mut out = Vec::new();
                json(&answer, &mut out);
                let expected = serde_json::to_string(&completion(&answer)).unwrap();
                assert_eq!(String::from_utf8(out).unwrap(), expected);
            }
        }
    }
}
