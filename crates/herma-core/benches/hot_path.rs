//! The request hot path's pure parts: reading an envelope, evaluating tier-1 rules, rendering
//! a shim and splicing it, watching a relayed stream for usage, sealing a receipt and rendering
//! a direct answer. Rule evaluation is measured over 100, 1,000 and 10,000 keyword rules (the
//! index should make these cost about the same).

// A benchmark fails loudly on a broken fixture.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};
use herma_core::CallerScope;
use herma_core::Timestamp;
use herma_core::model::{
    Action, ContextEntry, ContextEntrySpec, ContextKind, MatchedRule, Provision, ProvisionSpec,
    ReceiptAction, ReceiptBody, ShimmedRef, StreamEnd, Tier, Timings, TriggerMode, Triggers,
};
use herma_core::rules::RuleSet;
use herma_core::shim::{ShimEntry, render};
use herma_core::wire::direct::DirectAnswer;
use herma_core::wire::usage::UsageObserver;
use herma_core::wire::{Envelope, HeaderFacts, Protocol};

const CLAUDE_CODE: &str = include_str!("../fixtures/requests/claude_code_messages.json");
const CODEX: &str = include_str!("../fixtures/requests/codex_responses.json");
const OPENCODE: &str = include_str!("../fixtures/requests/opencode_chat.json");

fn provision(i: usize, triggers: Triggers) -> (Arc<Provision>, bool) {
    let spec = ProvisionSpec {
        id: format!("rule-{i:05}"),
        description: String::new(),
        action: Action::ShimContext,
        priority: (i % 7) as i32,
        trigger_mode: TriggerMode::Any,
        triggers,
        context_refs: vec!["ctx".into()],
        response: None,
        once_per_conversation: false,
        enabled: true,
        fabric_governance: None,
    };
    (
        Arc::new(Provision {
            caller_scope: CallerScope::system_builtin(),
            version: 1,
            created_at: Timestamp::default(),
            updated_at: Timestamp::default(),
            spec,
        }),
        false,
    )
}

/// `n` keyword rules (two keywords each, one regex in every 50th, a glob in every 100th);
/// exactly one of them matches the benchmark prompt.
fn rules(n: usize) -> RuleSet {
    RuleSet::compile((0..n).map(|i| {
        let mut t = Triggers {
            keywords: vec![format!("topic{i}"), format!("subject {i}")],
            ..Triggers::default()
        };
        if i % 50 == 0 {
            t.regex = vec![format!(r"\bticket-{i}\b")];
        }
        if i % 100 == 0 {
            t.paths = vec![format!("**/module{i}/*.rs")];
        }
        if i == n / 2 {
            t.keywords.push("deploy".into());
        }
        provision(i, t)
    }))
}

fn bench_rules(c: &mut Criterion) {
    let envelope = Envelope::from_request(
        Protocol::Messages,
        CLAUDE_CODE.as_bytes(),
        &HeaderFacts::default(),
    )
    .expect("fixture");
    let mut group = c.benchmark_group("tier1 evaluate");
    for n in [100, 1_000, 10_000] {
        let set = rules(n);
        assert_eq!(set.evaluate(&envelope).len(), 1);
        group.bench_with_input(BenchmarkId::from_parameter(n), &set, |b, set| {
            b.iter(|| black_box(set.evaluate(black_box(&envelope))))
        });
    }
    group.finish();
    c.bench_function("tier1 compile 1000 rules", |b| {
        b.iter(|| black_box(rules(1_000)))
    });
}

/// The Claude Code fixture grown to the size of a real first request (~49 KB: a 7 KB system
/// prompt, a dozen tools with full schemas, a short history).
fn claude_code_full_size() -> String {
    let mut body: serde_json::Value = serde_json::from_str(CLAUDE_CODE).expect("fixture");
    let schema = serde_json::json!({"type": "object", "properties": (0..40).map(|i| (format!("field_{i}"), serde_json::json!({"type": "string", "description": "A parameter the tool accepts, described at length for the model's benefit."}))).collect::<serde_json::Map<_, _>>()});
    let tools: Vec<_> = (0..12).map(|i| serde_json::json!({"name": format!("Tool{i}"), "description": "Does one thing well. ".repeat(40), "input_schema": schema})).collect();
    body["tools"] = serde_json::Value::Array(tools);
    body["system"][1]["text"] =
        serde_json::Value::String("Follow the repository's conventions. ".repeat(180));
    body.to_string()
}

/// The Claude Code fixture in the middle of an agent's turn: the model's last call edited a
/// file (≈ 12 KB of Rust on each side of the edit, as an `Edit` input carries it) and the
/// result came back, so the edit is in the window whose tool inputs are read for paths.
fn claude_code_mid_edit() -> String {
    let mut body: serde_json::Value = serde_json::from_str(CLAUDE_CODE).expect("fixture");
    let code: String = (0..300)
        .map(|i| format!("    let value_{i} = compute(\"item {i}\", &mut state);\n"))
        .collect();
    let messages = body["messages"].as_array_mut().expect("messages");
    messages.push(serde_json::json!({"role": "assistant", "content": [
        {"type": "text", "text": "I'll update the loop."},
        {"type": "tool_use", "id": "toolu_edit", "name": "Edit", "input": {
            "file_path": "/repo/src/engine.rs", "old_string": code, "new_string": code.replace("state", "ctx")
        }}
    ]}));
    messages.push(serde_json::json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_edit", "content": "The file /repo/src/engine.rs has been updated."}
    ]}));
    body.to_string()
}

fn bench_envelopes(c: &mut Criterion) {
    let mut group = c.benchmark_group("envelope");
    let mid_edit = claude_code_mid_edit();
    let envelope = Envelope::from_request(
        Protocol::Messages,
        mid_edit.as_bytes(),
        &HeaderFacts::default(),
    )
    .expect("fixture");
    assert!(envelope.paths.iter().any(|p| p == "/repo/src/engine.rs"));
    let full = claude_code_full_size();
    for (name, protocol, body) in [
        (
            format!(
                "claude code messages mid-edit, {} KB",
                mid_edit.len() / 1024
            ),
            Protocol::Messages,
            mid_edit.as_str(),
        ),
        (
            format!("claude code messages, {} KB", full.len() / 1024),
            Protocol::Messages,
            full.as_str(),
        ),
        (
            "claude code messages".into(),
            Protocol::Messages,
            CLAUDE_CODE,
        ),
        ("codex responses".into(), Protocol::Responses, CODEX),
        ("opencode chat".into(), Protocol::ChatCompletions, OPENCODE),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(Envelope::from_request(
                    protocol,
                    black_box(body.as_bytes()),
                    &HeaderFacts::default(),
                ))
            })
        });
    }
    group.finish();
}

fn bench_shim(c: &mut Criterion) {
    let entries: Vec<ContextEntry> = (0..4)
        .map(|i| ContextEntry {
            caller_scope: CallerScope::system_builtin(),
            version: 1,
            created_at: Timestamp::default(),
            updated_at: Timestamp::default(),
            spec: ContextEntrySpec {
                id: format!("entry-{i}"),
                kind: [
                    ContextKind::Noun,
                    ContextKind::Verb,
                    ContextKind::Detail,
                    ContextKind::Verb,
                ][i],
                title: format!("Entry {i}"),
                schema_or_body: serde_json::Value::String(
                    "Run the migrations before the canary. ".repeat(10),
                ),
                uri: None,
                tags: vec![],
                fabric_governance: None,
            },
        })
        .collect();
    let shim_entries: Vec<ShimEntry<'_>> = entries
        .iter()
        .map(|entry| ShimEntry {
            entry,
            builtin: false,
        })
        .collect();
    c.bench_function("shim render 4 entries", |b| {
        b.iter(|| black_box(render(black_box(&shim_entries), 8000)))
    });
    let envelope = Envelope::from_request(
        Protocol::Messages,
        CLAUDE_CODE.as_bytes(),
        &HeaderFacts::default(),
    )
    .expect("fixture");
    let text = render(&shim_entries, 8000).text;
    c.bench_function("shim splice into claude code request", |b| {
        b.iter(|| black_box(envelope.with_shim(CLAUDE_CODE.as_bytes(), black_box(&text))))
    });
}

const MESSAGES_START: &str = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":4123,"cache_creation_input_tokens":0,"cache_read_input_tokens":3900,"output_tokens":1}}}"#;
const MESSAGES_DELTA: &str = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":48}}"#;
const CHAT_USAGE: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4123,"completion_tokens":48,"total_tokens":4171,"prompt_tokens_details":{"cached_tokens":3900}}}"#;
const RESPONSE_IN_PROGRESS: &str =
    r#"{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}"#;
const RESPONSE_COMPLETED: &str = r#"{"id":"resp_1","object":"response","status":"completed","usage":{"input_tokens":4123,"input_tokens_details":{"cached_tokens":3900},"output_tokens":48,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":4171}}"#;

/// A streamed answer of 22 events as each protocol's API sends it: the opening events, the
/// text deltas, the closing events with the usage.
fn streamed_answer(protocol: Protocol) -> String {
    let mut events: Vec<(Option<&str>, String)> = Vec::new();
    match protocol {
        Protocol::Messages => {
            events.push((Some("message_start"), MESSAGES_START.to_owned()));
            events.push((
                Some("content_block_start"),
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
            ));
            events.push((Some("ping"), r#"{"type":"ping"}"#.to_owned()));
            for i in 0..16 {
                events.push((
                    Some("content_block_delta"),
                    format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"word{i} "}}}}"#),
                ));
            }
            events.push((
                Some("content_block_stop"),
                r#"{"type":"content_block_stop","index":0}"#.to_owned(),
            ));
            events.push((Some("message_delta"), MESSAGES_DELTA.to_owned()));
            events.push((
                Some("message_stop"),
                r#"{"type":"message_stop"}"#.to_owned(),
            ));
        }
        Protocol::ChatCompletions => {
            // With `include_usage` every chunk carries `"usage":null`, which the observer must
            // see past (only the last chunk's usage is parsed).
            let chunk = |delta: &str, finish: &str| {
                format!(
                    r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}],"usage":null}}"#
                )
            };
            events.push((None, chunk(r#"{"role":"assistant","content":""}"#, "null")));
            for i in 0..18 {
                events.push((None, chunk(&format!(r#"{{"content":"word{i} "}}"#), "null")));
            }
            events.push((None, chunk("{}", r#""stop""#)));
            events.push((None, CHAT_USAGE.to_owned()));
            events.push((None, "[DONE]".to_owned()));
        }
        Protocol::Responses => {
            for (n, kind) in ["response.created", "response.in_progress"]
                .into_iter()
                .enumerate()
            {
                events.push((
                    Some(kind),
                    format!(r#"{{"type":"{kind}","sequence_number":{n},"response":{RESPONSE_IN_PROGRESS}}}"#),
                ));
            }
            events.push((
                Some("response.output_item.added"),
                r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}"#.to_owned(),
            ));
            for i in 0..16 {
                events.push((
                    Some("response.output_text.delta"),
                    format!(r#"{{"type":"response.output_text.delta","sequence_number":{},"item_id":"msg_1","output_index":0,"content_index":0,"delta":"word{i} "}}"#, i + 3),
                ));
            }
            events.push((
                Some("response.output_text.done"),
                r#"{"type":"response.output_text.done","sequence_number":19,"item_id":"msg_1","output_index":0,"content_index":0,"text":"…"}"#.to_owned(),
            ));
            events.push((
                Some("response.output_item.done"),
                r#"{"type":"response.output_item.done","sequence_number":20,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"…"}]}}"#.to_owned(),
            ));
            events.push((
                Some("response.completed"),
                format!(r#"{{"type":"response.completed","sequence_number":21,"response":{RESPONSE_COMPLETED}}}"#),
            ));
        }
    }
    assert_eq!(events.len(), 22);
    events
        .into_iter()
        .map(|(name, data)| match name {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        })
        .collect()
}

/// A whole JSON answer as an upstream sends it: a paragraph of text, then the usage.
fn json_answer(protocol: Protocol) -> String {
    let text = "The deploy checklist says to run the migrations before the canary, watch the \
                error rate for ten minutes and roll back on any page. Here is the order I would \
                follow for this service, with the commands for each step.";
    match protocol {
        Protocol::Messages => format!(
            r#"{{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"{text}"}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{{"input_tokens":4123,"cache_creation_input_tokens":0,"cache_read_input_tokens":3900,"output_tokens":48}}}}"#
        ),
        Protocol::ChatCompletions => format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":4123,"completion_tokens":48,"total_tokens":4171,"prompt_tokens_details":{{"cached_tokens":3900}}}}}}"#
        ),
        Protocol::Responses => format!(
            r#"{{"id":"resp_1","object":"response","status":"completed","output":[{{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"{text}","annotations":[]}}]}}],"usage":{{"input_tokens":4123,"input_tokens_details":{{"cached_tokens":3900}},"output_tokens":48,"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":4171}}}}"#
        ),
    }
}

/// The proxy's usage observer over a streamed answer, fed in network-sized chunks, and over a
/// whole JSON answer (kept, then read for its usage at the end).
fn bench_usage(c: &mut Criterion) {
    for (group, streaming) in [
        ("usage observer, 22 events", true),
        ("usage observer, JSON answer", false),
    ] {
        let mut group = c.benchmark_group(group);
        for (name, protocol) in [
            ("messages", Protocol::Messages),
            ("chat", Protocol::ChatCompletions),
            ("responses", Protocol::Responses),
        ] {
            let body = if streaming {
                streamed_answer(protocol)
            } else {
                json_answer(protocol)
            };
            let mut observer = UsageObserver::new(protocol, streaming);
            observer.feed(body.as_bytes());
            assert!(observer.finish().is_some(), "{name}: usage is read");
            group.bench_function(name, |b| {
                b.iter(|| {
                    let mut observer = UsageObserver::new(protocol, streaming);
                    for chunk in black_box(body.as_bytes()).chunks(1400) {
                        observer.feed(chunk);
                    }
                    black_box(observer.finish())
                })
            });
        }
        group.finish();
    }
}

/// A forwarded request's receipt, one rule matched and one entry shimmed, as the proxy seals it
/// when the answer ends (digest and JSON together).
fn bench_seal(c: &mut Criterion) {
    let body = ReceiptBody {
        caller_scope: CallerScope::parse("key:3f9a1c0d5e7b2a64").expect("scope"),
        protocol: "messages".into(),
        conversation_id: "conv_0f1e2d3c4b5a6978".into(),
        model: "claude-sonnet-4-5".into(),
        action: ReceiptAction::Shimmed,
        matched: vec![MatchedRule {
            provision_id: "deploy-checklist".into(),
            version: 3,
            builtin: false,
            tier: Tier::Keyword,
            trigger: "keyword:deploy".into(),
            applied: true,
            score: None,
            confidence: None,
        }],
        shimmed_context_refs: vec![ShimmedRef {
            id: "deploy-steps".into(),
            version: 2,
            kind: ContextKind::Verb,
            builtin: false,
            chars: 412,
            truncated: false,
            record_uri: None,
            record_version: None,
            blob_digests: vec![],
        }],
        unresolved_context_refs: vec![],
        upstream_status: Some(200),
        usage: Some(
            serde_json::json!({
                "input_tokens": 4211, "output_tokens": 57,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 3968
            })
            .into(),
        ),
        timings: Timings {
            decision_micros: 41,
            upstream_headers_micros: Some(1830),
            total_micros: Some(2411),
        },
        stream_end: Some(StreamEnd::Completed),
        error: None,
        created_at: Timestamp::from_millis(1_764_800_000_000),
    };
    let sealed = body
        .clone()
        .seal("rcpt_0f1e2d3c4b5a69788796a5b4c3d2e1f0".into());
    assert!(sealed.verifies(), "the bench's receipt verifies");
    c.bench_function("receipt seal", |b| {
        b.iter(|| {
            let receipt =
                black_box(body.clone()).seal("rcpt_0f1e2d3c4b5a69788796a5b4c3d2e1f0".into());
            black_box(receipt.to_json().len())
        })
    });
}

/// A `respond_directly` answer rendered in each protocol, as JSON and as its event sequence.
fn bench_direct(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct answer");
    for (name, protocol) in [
        ("messages", Protocol::Messages),
        ("chat", Protocol::ChatCompletions),
        ("responses", Protocol::Responses),
    ] {
        let answer = DirectAnswer {
            protocol,
            model: "claude-sonnet-4-5",
            text: "All systems nominal.",
            id_hex: "0f1e2d3c4b5a6978",
            created: Timestamp::from_millis(1_764_800_000_000),
            stream_usage: true,
        };
        group.bench_function(format!("{name} json"), |b| {
            b.iter(|| black_box(black_box(&answer).json().len()))
        });
        group.bench_function(format!("{name} sse"), |b| {
            b.iter(|| black_box(black_box(&answer).sse().len()))
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_rules,
    bench_envelopes,
    bench_shim,
    bench_usage,
    bench_seal,
    bench_direct
);
criterion_main!(benches);
