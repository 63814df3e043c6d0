//! Entity-memory extraction, per turn: reading the answer back from the relayed response
//! (streamed SSE or JSON) and extracting paths, symbols, URIs, card ids and error signatures
//! from the prompt, the tool results and the answer — everything the memory worker does for a
//! turn except writing to the store. Reported as turns per second (one core).

// A benchmark fails loudly on a broken fixture.
#![allow(clippy::expect_used)]

use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use herma_core::memory::{error_signatures, observations};
use herma_core::wire::answer::response_text;
use herma_core::wire::{Envelope, HeaderFacts, Protocol};

const CLAUDE_CODE: &str = include_str!("../fixtures/requests/claude_code_messages.json");
const CODEX: &str = include_str!("../fixtures/requests/codex_responses.json");

/// An answer the way Claude Code receives it: ~300 small text deltas (about 3 KB of text)
/// mentioning files, symbols and a compiler error.
fn streamed_messages_answer() -> Vec<u8> {
    let words = [
        "I",
        "looked",
        "at",
        "`src/gate.rs`",
        "and",
        "the",
        "call",
        "to",
        "verify_key()",
        "fails",
        "with",
        "error[E0308]:",
        "mismatched",
        "types",
        "in",
        "crates/herma-app/src/proxy.rs;",
        "see",
        "tessera://nouns/gate-policy",
        "and",
        "RuleCache::snapshot.",
    ];
    let mut body = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
    );
    for i in 0..300 {
        let text = format!("{} ", words[i % words.len()]);
        body.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
        ));
    }
    body.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    body.into_bytes()
}

fn turn(
    c: &mut Criterion,
    name: &str,
    protocol: Protocol,
    request: &str,
    answer: &[u8],
    streaming: bool,
) {
    let envelope = Envelope::from_request(protocol, request.as_bytes(), &HeaderFacts::default())
        .expect("fixture");
    let mut group = c.benchmark_group("memory extraction");
    group.throughput(Throughput::Elements(1));
    group.bench_function(name, |b| {
        b.iter(|| {
            let text = response_text(protocol, streaming, black_box(answer), 64 * 1024);
            let seen = observations(
                &envelope.paths,
                &envelope.user_text,
                &envelope.tool_results,
                &text,
            );
            let errors = error_signatures(
                std::iter::once(envelope.user_text.as_str())
                    .chain(envelope.tool_results.iter().map(String::as_str)),
            );
            black_box((seen, errors))
        });
    });
    group.finish();
}

fn extraction(c: &mut Criterion) {
    let streamed = streamed_messages_answer();
    let text = response_text(Protocol::Messages, true, &streamed, usize::MAX);
    assert!(
        text.contains("error[E0308]"),
        "the fixture answer is read back"
    );
    turn(
        c,
        "claude code turn, streamed answer",
        Protocol::Messages,
        CLAUDE_CODE,
        &streamed,
        true,
    );
    let json_answer = serde_json::json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
    })
    .to_string();
    turn(
        c,
        "codex turn, JSON answer",
        Protocol::Responses,
        CODEX,
        json_answer.as_bytes(),
        false,
    );
    // A turn that names nothing worth remembering: a one-line prompt and answer (the load
    // harness's forwarded request, whose system prompt extraction does not read).
    let short_request = serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a careful coding assistant. ".repeat(40)},
            {"role": "user", "content": "please deploy the billing service"}
        ]
    })
    .to_string();
    let short_answer = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the mock upstream."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    })
    .to_string();
    turn(
        c,
        "short chat turn, nothing to remember",
        Protocol::ChatCompletions,
        &short_request,
        short_answer.as_bytes(),
        false,
    );
}

/// Reading a streamed Chat answer's text back: 300 chunks, one word each, as OpenAI sends them.
fn chat_answer_text(c: &mut Criterion) {
    let mut body = String::new();
    for i in 0..300 {
        body.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    body.push_str("data: [DONE]\n\n");
    let text = response_text(Protocol::ChatCompletions, true, body.as_bytes(), usize::MAX);
    assert!(
        text.starts_with("word0 word1 "),
        "the fixture answer is read back"
    );
    c.bench_function("answer text, streamed Chat answer (300 chunks)", |b| {
        b.iter(|| {
            black_box(response_text(
                Protocol::ChatCompletions,
                true,
                black_box(body.as_bytes()),
                64 * 1024,
            ))
        })
    });
}

criterion_group!(benches, extraction, chat_answer_text);
criterion_main!(benches);
