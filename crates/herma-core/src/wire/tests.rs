//! Extraction, shim placement and direct answers against realistic harness requests
//! (`fixtures/requests`, modelled on what Claude Code, Codex and opencode send).

use serde_json::{Value, json};

use super::direct::DirectAnswer;
use super::sse::Reader;
use super::*;
use crate::time::Timestamp;

const CLAUDE_CODE: &str = include_str!("../../fixtures/requests/claude_code_messages.json");
const CODEX: &str = include_str!("../../fixtures/requests/codex_responses.json");
const OPENCODE: &str = include_str!("../../fixtures/requests/opencode_chat.json");

fn extract(protocol: Protocol, body: &str) -> Envelope {
    Envelope::from_request(protocol, body.as_bytes(), &HeaderFacts::default()).unwrap()
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn claude_code_messages_are_read() {
    let e = extract(Protocol::Messages, CLAUDE_CODE);
    assert_eq!(e.model.as_deref(), Some("claude-sonnet-4-5"));
    assert!(e.stream);
    assert!(
        e.system
            .as_deref()
            .unwrap()
            .starts_with("You are Claude Code")
    );
    assert_eq!(
        e.user_text,
        "Now deploy the fix in src/deploy.rs to production"
    );
    assert_eq!(e.tools_offered, ["Read", "Edit", "Bash", "WebFetch"]);
    assert_eq!(e.tools_called, ["Read", "Edit", "Bash"]);
    assert_eq!(e.tool_results, ["error[E0308]: mismatched types", "ok"]);
    assert_eq!(
        e.paths,
        [
            "/repo/src/deploy.rs",
            "crates/app/Cargo.toml",
            "src/deploy.rs"
        ]
    );
    assert_eq!(
        e.conversation,
        Conversation {
            id: "5f0c1e7a-2d3b-4c5d-8e9f-0a1b2c3d4e5f".into(),
            source: ConversationSource::Native
        }
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn codex_responses_are_read() {
    let e = extract(Protocol::Responses, CODEX);
    assert_eq!(e.model.as_deref(), Some("gpt-5-codex"));
    assert_eq!(
        e.user_text,
        "Rename the migration in db/migrations/0003_add.sql and update the release checklist"
    );
    assert_eq!(
        e.tools_offered,
        ["shell", "apply_patch", "web_search", "view_image"]
    );
    assert_eq!(e.tools_called, ["shell", "apply_patch"]);
    assert_eq!(
        e.paths,
        [
            "db/migrations/0003_add.sql",
            "db/migrations/0003_add_users.sql",
            "/repo",
            "docs/RELEASE.md"
        ]
    );
    assert_eq!(e.tool_results.len(), 2);
    assert!(
        e.system.as_deref().unwrap().contains("Codex")
            && e.system.as_deref().unwrap().contains("permissions")
    );
    assert_eq!(e.conversation.source, ConversationSource::Native);
    assert_eq!(e.conversation.id, "0199a2b3-c4d5-7e6f-8a9b-0c1d2e3f4a5b");
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn opencode_chat_is_read() {
    let e = extract(Protocol::ChatCompletions, OPENCODE);
    assert_eq!(e.user_text, "Add a bucket to infra/main.tf");
    assert!(e.stream && e.stream_usage);
    assert_eq!(
        e.system.as_deref(),
        Some("You are opencode, an interactive CLI tool.\nProject: /repo")
    );
    assert_eq!(e.tools_offered, ["glob", "read", "bash"]);
    assert_eq!(e.tools_called, ["glob", "read"]);
    assert_eq!(e.paths, ["infra/main.tf"]);
    assert_eq!(e.tool_results, ["resource \"aws_s3_bucket\" \"a\" {}"]);
    assert_eq!(e.conversation.source, ConversationSource::FirstMessage);
    assert!(e.conversation.id.starts_with("fm:"));
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn conversation_identity_prefers_herma_header_then_session_headers() {
    let headers = HeaderFacts::from_headers([
        ("session-id", "codex-session"),
        ("x-claude-code-session-id", "cc-session"),
    ]);
    assert_eq!(headers.session_id.as_deref(), Some("cc-session"));
    let e =
        Envelope::from_request(Protocol::ChatCompletions, OPENCODE.as_bytes(), &headers).unwrap();
    assert_eq!(
        e.conversation,
        Conversation {
            id: "cc-session".into(),
            source: ConversationSource::Native
        }
    );
    let explicit = HeaderFacts::from_headers([
        ("x-herma-conversation-id", "mine"),
        ("session-id", "theirs"),
    ]);
    let e = Envelope::from_request(Protocol::Messages, CLAUDE_CODE.as_bytes(), &explicit).unwrap();
    assert_eq!(
        e.conversation,
        Conversation {
            id: "mine".into(),
            source: ConversationSource::Header
        }
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_first_message_digest_is_stable_across_turns() {
    let turn1 = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]});
    let turn2 = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]});
    let a = extract(Protocol::ChatCompletions, &turn1.to_string()).conversation;
    let b = extract(Protocol::ChatCompletions, &turn2.to_string()).conversation;
    assert_eq!(a, b);
}

/// The bytes before the insertion point are untouched and everything after follows unchanged.
fn assert_spliced(original: &str, shimmed: &[u8]) {
    let shimmed = std::str::from_utf8(shimmed).unwrap();
    let common_prefix = original
        .bytes()
        .zip(shimmed.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let common_suffix = original
        .bytes()
        .rev()
        .zip(shimmed.bytes().rev())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        common_prefix + common_suffix >= original.len(),
        "only the insertion differs"
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn anthropic_shims_append_a_system_block_after_the_cached_prefix() {
    let e = extract(Protocol::Messages, CLAUDE_CODE);
    let out = e
        .with_shim(
            CLAUDE_CODE.as_bytes(),
            "[VERB CONTEXT]\nDeploy on Tuesdays.",
        )
        .unwrap();
    assert_spliced(CLAUDE_CODE, &out);
    let v = parse(&out);
    let original = parse(CLAUDE_CODE.as_bytes());
    let system = v["system"].as_array().unwrap();
    assert_eq!(system.len(), 4);
    assert_eq!(
        &system[..3],
        original["system"].as_array().unwrap().as_slice(),
        "cache-marked blocks unchanged"
    );
    assert_eq!(
        system[3],
        json!({"type": "text", "text": "[VERB CONTEXT]\nDeploy on Tuesdays."})
    );
    assert_eq!(v["messages"], original["messages"]);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn anthropic_shims_handle_string_null_and_absent_system() {
    for (body, expected) in [
        (
            json!({"model": "m", "system": "be brief", "messages": [{"role": "user", "content": "hi"}]}),
            json!([{"type": "text", "text": "be brief"}, {"type": "text", "text": "S"}]),
        ),
        (
            json!({"model": "m", "system": null, "messages": [{"role": "user", "content": "hi"}]}),
            json!([{"type": "text", "text": "S"}]),
        ),
        (
            json!({"model": "m", "system": [], "messages": [{"role": "user", "content": "hi"}]}),
            json!([{"type": "text", "text": "S"}]),
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            json!([{"type": "text", "text": "S"}]),
        ),
    ] {
        let text = body.to_string();
        let e = extract(Protocol::Messages, &text);
        let out = parse(&e.with_shim(text.as_bytes(), "S").unwrap());
        assert_eq!(out["system"], expected, "{text}");
        assert_eq!(out["messages"], body["messages"]);
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn chat_shims_go_before_the_latest_user_message() {
    let e = extract(Protocol::ChatCompletions, OPENCODE);
    let out = e
        .with_shim(OPENCODE.as_bytes(), "shim \"quoted\"\nline")
        .unwrap();
    assert_spliced(OPENCODE, &out);
    let v = parse(&out);
    let messages = v["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 10);
    assert_eq!(
        messages[6],
        json!({"role": "system", "content": "shim \"quoted\"\nline"})
    );
    assert_eq!(messages[7]["role"], "user");
    assert_eq!(
        messages[7]["content"][0]["text"],
        "Add a bucket to infra/main.tf"
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn responses_shims_become_a_developer_item_before_the_latest_user_item() {
    let e = extract(Protocol::Responses, CODEX);
    let out = e.with_shim(CODEX.as_bytes(), "S").unwrap();
    assert_spliced(CODEX, &out);
    let v = parse(&out);
    let input = v["input"].as_array().unwrap();
    assert_eq!(
        input[3],
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "S"}]})
    );
    assert_eq!(
        input[4]["content"][0]["text"],
        "Rename the migration in db/migrations/0003_add.sql and update the release checklist"
    );
    assert_eq!(
        v["instructions"],
        parse(CODEX.as_bytes())["instructions"],
        "instructions untouched"
    );

    let text = json!({"model": "m", "instructions": "x", "input": "just a question"}).to_string();
    let e = extract(Protocol::Responses, &text);
    assert_eq!(e.user_text, "just a question");
    let v = parse(&e.with_shim(text.as_bytes(), "S").unwrap());
    assert_eq!(v["input"][0]["role"], "developer");
    assert_eq!(
        v["input"][1],
        json!({"type": "message", "role": "user", "content": "just a question"})
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn unknown_fields_roles_and_items_are_passed_over() {
    let body = json!({
        "model": "m", "future_field": {"x": [1]}, "stream": "yes",
        "messages": [{"role": "critic", "content": 7}, {"role": "user", "content": [{"type": "hologram"}, {"type": "text", "text": "hello"}]}],
        "tools": [{"name": 5}, "not-an-object", {"name": "Ok"}]
    })
    .to_string();
    let e = extract(Protocol::Messages, &body);
    assert_eq!(e.user_text, "hello");
    assert!(!e.stream);
    assert_eq!(e.tools_offered, ["Ok"]);
    for bad in [&b"[1,2]"[..], b"not json", b"\xff\xfe"] {
        for protocol in Protocol::ALL {
            let err = Envelope::from_request(protocol, bad, &HeaderFacts::default()).unwrap_err();
            assert_eq!(err.code, ProblemCode::InvalidJson);
        }
    }
}

fn answer(protocol: Protocol, stream_usage: bool) -> DirectAnswer<'static> {
    DirectAnswer {
        protocol,
        model: "m-1",
        text: "Deploys are frozen.",
        id_hex: "abc123",
        created: Timestamp::from_millis(1_796_000_000_500),
        stream_usage,
    }
}

fn events(bytes: &[u8]) -> Vec<(Option<String>, Value)> {
    let mut reader = Reader::default();
    let mut out = Vec::new();
    reader.feed(bytes, &mut |e| {
        out.push((
            e.event.clone(),
            serde_json::from_str(&e.data).unwrap_or(Value::String(e.data.clone())),
        ))
    });
    out
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn direct_json_answers_are_protocol_objects_with_zero_usage() {
    let chat: Value =
        serde_json::from_slice(&answer(Protocol::ChatCompletions, false).json()).unwrap();
    assert_eq!(
        (chat["object"].clone(), chat["id"].clone()),
        (json!("chat.completion"), json!("chatcmpl-abc123"))
    );
    assert_eq!(
        chat["choices"][0]["message"]["content"],
        "Deploys are frozen."
    );
    assert_eq!(chat["usage"]["total_tokens"], 0);
    assert_eq!(chat["created"], 1_796_000_000);
    let resp: Value = serde_json::from_slice(&answer(Protocol::Responses, false).json()).unwrap();
    assert_eq!(
        (resp["object"].clone(), resp["status"].clone()),
        (json!("response"), json!("completed"))
    );
    assert_eq!(
        resp["output"][0]["content"][0]["text"],
        "Deploys are frozen."
    );
    assert_eq!(resp["usage"]["total_tokens"], 0);
    let msg: Value = serde_json::from_slice(&answer(Protocol::Messages, false).json()).unwrap();
    assert_eq!(
        (msg["type"].clone(), msg["stop_reason"].clone()),
        (json!("message"), json!("end_turn"))
    );
    assert_eq!(msg["usage"]["output_tokens"], 0);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn direct_streams_follow_each_protocols_event_sequence() {
    let chat = events(&answer(Protocol::ChatCompletions, true).sse());
    assert_eq!(chat.last().unwrap().1, json!("[DONE]"));
    assert_eq!(chat[0].1["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        chat[1].1["choices"][0]["delta"]["content"],
        "Deploys are frozen."
    );
    assert_eq!(chat[2].1["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        chat[3].1["usage"]["total_tokens"], 0,
        "usage chunk when include_usage is set"
    );
    // As OpenAI sends it: every chunk before the usage chunk has `"usage": null`.
    for (_, chunk) in &chat[..3] {
        assert_eq!(chunk.get("usage"), Some(&Value::Null), "{chunk}");
    }
    let plain = events(&answer(Protocol::ChatCompletions, false).sse());
    assert_eq!(plain.len(), 4);
    assert!(
        plain.iter().all(|(_, chunk)| chunk.get("usage").is_none()),
        "no usage member without include_usage"
    );

    let resp = events(&answer(Protocol::Responses, false).sse());
    let kinds: Vec<_> = resp.iter().map(|(e, _)| e.clone().unwrap()).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("response.created"));
    assert_eq!(kinds.last().map(String::as_str), Some("response.completed"));
    for (i, (kind, data)) in resp.iter().enumerate() {
        assert_eq!(data["type"], json!(kind), "event name and type agree");
        assert_eq!(data["sequence_number"], i, "sequence numbers count from 0");
    }
    assert!(kinds.contains(&"response.output_text.delta".to_owned()));

    let msg = events(&answer(Protocol::Messages, false).sse());
    let kinds: Vec<_> = msg.iter().map(|(e, _)| e.clone().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(msg[0].1["message"]["content"], json!([]));
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn errors_use_each_protocols_shape_and_keep_the_code() {
    let problem =
        crate::contributor::refuse_contributor_model("x-contributor", "/model").unwrap_err();
    let anthropic = Protocol::Messages.error_body(&problem);
    assert_eq!(anthropic["type"], "error");
    assert_eq!(anthropic["error"]["type"], "permission_error");
    assert_eq!(anthropic["error"]["code"], "contributor_tier_refused");
    let openai = Protocol::Responses.error_body(&problem);
    assert_eq!(openai["error"]["code"], "contributor_tier_refused");
    assert_eq!(openai["error"]["param"], "/model");
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn herma_reads_what_the_upstream_reads_even_from_odd_json() {
    // A lone surrogate escape: strict decoders refuse it, lenient upstreams accept it. Herma
    // must still see the prompt, or a rule could be dodged.
    let body = r#"{"model":"m","messages":[{"role":"user","content":"please deploy \ud800 now"}]}"#;
    let e = extract(Protocol::ChatCompletions, body);
    assert_eq!(e.user_text, "please deploy \u{FFFD} now");
    // Repeated keys inside a message: the last value counts, as in most JSON parsers upstream.
    // (A repeated top-level member Herma decides on is refused instead:
    // `a_repeated_decided_member_is_refused_in_every_protocol`.)
    let body = r#"{"model":"b","messages":[{"role":"user","content":"decoy","content":"deploy it","role":"user"}]}"#;
    let e = extract(Protocol::ChatCompletions, body);
    assert_eq!(
        (e.model.as_deref(), e.user_text.as_str()),
        (Some("b"), "deploy it")
    );
    let body = r#"{"model":"m","system":[{"type":"text","text":"first","type":"text"}],"messages":[{"role":"user","content":"hi"}]}"#;
    let e = extract(Protocol::Messages, body);
    assert_eq!(e.system.as_deref(), Some("first"));
    let out = parse(&e.with_shim(body.as_bytes(), "S").unwrap());
    assert_eq!(
        out["system"],
        json!([{"type": "text", "text": "first"}, {"type": "text", "text": "S"}]),
        "the shim joins the system"
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn over_long_session_ids_are_digested() {
    let long = "x".repeat(1000);
    let body = json!({"model": "m", "prompt_cache_key": long, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let e = extract(Protocol::ChatCompletions, &body);
    assert_eq!(e.conversation.source, ConversationSource::Native);
    assert!(e.conversation.id.starts_with("h:") && e.conversation.id.len() == 34);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn each_protocol_is_named_the_same_way_everywhere() {
    for protocol in Protocol::ALL {
        assert_eq!(Protocol::parse(protocol.as_str()), Some(protocol));
        assert_eq!(
            serde_json::to_value(protocol).unwrap(),
            json!(protocol.as_str())
        );
        assert!(protocol.path().starts_with("/v1/"));
    }
    assert_eq!(
        Protocol::ALL.map(Protocol::provider_name),
        ["chat_completions", "openai_responses", "anthropic_messages"]
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn direct_answers_decode_with_their_protocols_own_decoder() {
    use crate::call::{ModelEvent, StopReason};
    use crate::wire::stream::StreamDecoder;
    for protocol in Protocol::ALL {
        let answer = answer(protocol, true);
        let mut decoder = StreamDecoder::new(protocol);
        let mut events = Vec::new();
        decoder.feed(&answer.sse(), &mut |e| events.push(e.unwrap()));
        assert_eq!(
            decoder.end(),
            Ok(()),
            "{protocol:?} ends with its terminal event"
        );
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Deploys are frozen.", "{protocol:?}");
        assert!(events.contains(&ModelEvent::Stop(StopReason::EndTurn)));
        assert!(
            matches!(events.last(), Some(ModelEvent::Usage(u)) if *u == Default::default()),
            "{protocol:?}: zero usage last"
        );
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_usage_observer_and_the_decoder_read_usage_from_the_same_events() {
    use crate::call::{ModelEvent, Usage};
    use crate::wire::stream::StreamDecoder;
    use crate::wire::usage::UsageObserver;
    let streams = [
        (
            Protocol::Messages,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":3,\"output_tokens\":1}}}\n\n\
             event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n\
             event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            json!({"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 7}),
            Usage {
                input_tokens: 12,
                output_tokens: 7,
                cache_read_tokens: 3,
                cache_write_tokens: 0,
            },
        ),
        (
            Protocol::ChatCompletions,
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
             data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n\
             data: [DONE]\n\n",
            json!({"prompt_tokens": 9, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 2}}),
            Usage {
                input_tokens: 7,
                output_tokens: 4,
                cache_read_tokens: 2,
                cache_write_tokens: 0,
            },
        ),
        (
            Protocol::Responses,
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n\
             event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":20,\"output_tokens\":7,\"input_tokens_details\":{\"cached_tokens\":5}}}}\n\n",
            json!({"input_tokens": 20, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 5}}),
            Usage {
                input_tokens: 15,
                output_tokens: 7,
                cache_read_tokens: 5,
                cache_write_tokens: 0,
            },
        ),
    ];
    for (protocol, stream, raw, neutral) in streams {
        let mut observer = UsageObserver::new(protocol, true);
        let mut decoder = StreamDecoder::new(protocol);
        let mut events = Vec::new();
        for chunk in stream.as_bytes().chunks(5) {
            observer.feed(chunk);
            decoder.feed(chunk, &mut |e| events.push(e.unwrap()));
        }
        assert_eq!(
            observer.finish(),
            Some(raw.into()),
            "{protocol:?}: the raw usage, merged"
        );
        assert_eq!(
            events.last(),
            Some(&ModelEvent::Usage(neutral)),
            "{protocol:?}"
        );
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_repeated_decided_member_is_refused_in_every_protocol() {
    let refused = [
        (
            Protocol::ChatCompletions,
            r#"{"model":"x-contributor-1","model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            "/model",
        ),
        (
            Protocol::Messages,
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}"#,
            "/messages",
        ),
        (
            Protocol::Responses,
            r#"{"model":"m","input":"hi","instructions":"a","instructions":"b"}"#,
            "/instructions",
        ),
        (
            Protocol::Messages,
            r#"{"model":"m","stream":false,"stream":true,"messages":[]}"#,
            "/stream",
        ),
        (
            Protocol::ChatCompletions,
            r#"{"model":"m","messages":[],"tools":[],"tools":[{"type":"function","function":{"name":"x"}}]}"#,
            "/tools",
        ),
    ];
    for (protocol, body, pointer) in refused {
        let err =
            Envelope::from_request(protocol, body.as_bytes(), &HeaderFacts::default()).unwrap_err();
        assert_eq!(err.code, crate::problem::ProblemCode::InvalidJson, "{body}");
        assert_eq!(err.errors[0].pointer, pointer, "{body}");
    }
    // Members Herma does not decide on, and repeats inside a message, pass as they are.
    for (protocol, body) in [
        (
            Protocol::ChatCompletions,
            r#"{"model":"m","temperature":1,"temperature":0,"messages":[{"role":"user","content":"a","content":"b"}]}"#,
        ),
        (
            Protocol::Responses,
            r#"{"model":"m","input":"hi","top_p":1,"top_p":0.5}"#,
        ),
    ] {
        assert!(
            Envelope::from_request(protocol, body.as_bytes(), &HeaderFacts::default()).is_ok(),
            "{body}"
        );
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn direct_answers_carry_any_text_and_model_exactly() {
    let text = "line one\nline \"two\"\r\n\ttab \\ back\u{1}slash é 🚀 </script>";
    let model = "m\"odel\n";
    for protocol in Protocol::ALL {
        for stream_usage in [false, true] {
            let answer = DirectAnswer {
                model,
                text,
                ..answer(protocol, stream_usage)
            };
            let json: Value = serde_json::from_slice(&answer.json()).unwrap();
            assert_eq!(json["model"], model, "{protocol:?}");
            assert_eq!(
                crate::wire::answer::response_text(protocol, false, &answer.json(), usize::MAX),
                text,
                "{protocol:?}"
            );
            let sse = answer.sse();
            assert_eq!(
                crate::wire::answer::response_text(protocol, true, &sse, usize::MAX),
                text,
                "{protocol:?}"
            );
            // Every event is one `data:` line of JSON (or `[DONE]`), named as its `type` says.
            let body = String::from_utf8(sse).unwrap();
            for event in body.split_terminator("\n\n") {
                let data: Vec<_> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .collect();
                assert_eq!(data.len(), 1, "{event}");
                if data[0] != "[DONE]" {
                    let value: Value = serde_json::from_str(data[0]).unwrap();
                    if let Some(name) = event.strip_prefix("event: ").and_then(|e| e.lines().next())
                    {
                        assert_eq!(value["type"], name, "{event}");
                    }
                }
            }
        }
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn conversation_digests_are_the_leading_hex_of_the_sha256() {
    use sha2::{Digest, Sha256};
    for data in [
        "",
        "a",
        r#"{"role":"user","content":"hi"}"#,
        &"x".repeat(300),
    ] {
        let hex = hex::encode(Sha256::digest(data.as_bytes()));
        assert_eq!(
            first_message_conversation(Some(data)).id,
            format!("fm:{}", &hex[..16])
        );
        assert_eq!(
            native_conversation(format!("{data}{}", "s".repeat(300))).id,
            format!(
                "h:{}",
                &hex::encode(Sha256::digest(
                    format!("{data}{}", "s".repeat(300)).as_bytes()
                ))[..32]
            )
        );
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_chat_chunk_gives_its_first_choices_text_only_when_every_choice_reads() {
    let text = |data: &str| {
        answer::response_text(
            Protocol::ChatCompletions,
            true,
            format!("data: {data}\n\n").as_bytes(),
            100,
        )
    };
    assert_eq!(
        text(r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}"#),
        "a"
    );
    assert_eq!(
        text(r#"{"choices":[{"delta":{"content":"a"}},{"delta":7}]}"#),
        ""
    );
    assert_eq!(text(r#"{"choices":[{"delta":{"content":"a"}},3]}"#), "");
    assert_eq!(text(r#"{"choices":[]}"#), "");
    assert_eq!(text(r#"{"choices":null}"#), "");
    assert_eq!(text(r#"{"id":"x"}"#), "");
}

/// JSON texts made of `keys` and `scalars`, nested up to six deep (objects often repeat a key),
/// and now and then a byte added or the text cut: inputs for comparing a reading with
/// serde_json's.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn json_like(
    scalars: &[&'static str],
    keys: &[&'static str],
) -> impl proptest::strategy::Strategy<Value = String> + use<> {
    use proptest::prelude::*;
    let scalar = proptest::sample::select(scalars.to_vec()).prop_map(str::to_owned);
    let keys = proptest::sample::select(keys.to_vec());
    let value = scalar.prop_recursive(6, 48, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec((keys.clone(), inner), 0..5).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(key, value)| format!("\"{key}\": {value}"))
                    .collect();
                format!("{{{}}}", members.join(", "))
            }),
        ]
    });
    (
        value,
        any::<usize>(),
        proptest::sample::select(b" {}[]:,\"\\0n-.".to_vec()),
        0..6u8,
    )
        .prop_map(|(text, at, byte, change)| {
            let mut bytes = text.into_bytes();
            let at = at % (bytes.len() + 1);
            match change {
                0 => bytes.insert(at, byte),
                1 => bytes.truncate(at),
                _ => {}
            }
            String::from_utf8(bytes).unwrap_or_default()
        })
}
