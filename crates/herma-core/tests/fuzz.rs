//! Property-based fuzzing of everything Herma reads from the network or the operator: the
//! strict JSON reader, each protocol's request extraction and shim splice, the SSE framer, the
//! usage observer and stream decoders, settings parsing and the portable schema profile.
//!
//! Each property runs `PROPTEST_CASES` cases (proptest's default, 256, in the test suite);
//! `PROPTEST_CASES=20000 cargo test -p herma-core --test fuzz --release` is the longer run whose
//! figures `docs/reliability.md` reports. Inputs are generated both as raw bytes and as JSON
//! shaped like the protocols' own (the member names Herma reads), so the generators reach the
//! code past the first parse error.

// Native only: proptest forks and times out with processes.
#![cfg(not(target_arch = "wasm32"))]
// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use herma_core::conversation::config::ProviderConfig;
use herma_core::conversation::contract::{parse_work_contract, validate_arguments};
use herma_core::json::parse_strict;
use herma_core::settings::{ConversationEnv, Settings};
use herma_core::upstream::Provider;
use herma_core::wire::sse::{Event, Reader};
use herma_core::wire::usage::UsageObserver;
use herma_core::wire::{Envelope, HeaderFacts, Protocol};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Member names the protocols and Herma's own documents use: a generated object mostly uses
/// these, so extraction gets past "no such member".
const KEYS: &[&str] = &[
    "model",
    "messages",
    "input",
    "system",
    "instructions",
    "tools",
    "stream",
    "role",
    "content",
    "type",
    "text",
    "name",
    "tool_calls",
    "function",
    "arguments",
    "tool_use",
    "tool_result",
    "tool_use_id",
    "id",
    "input_text",
    "output_text",
    "function_call",
    "function_call_output",
    "call_id",
    "output",
    "metadata",
    "user_id",
    "stream_options",
    "include_usage",
    "properties",
    "required",
    "items",
    "enum",
    "const",
    "anyOf",
    "minimum",
    "maxLength",
    "additionalProperties",
    "work_contract",
    "operation_id",
    "category_id",
    "description",
    "input_schema",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => "[a-z_]{0,8}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::sample::select(
            &[
                "user",
                "assistant",
                "system",
                "developer",
                "tool",
                "text",
                "tool_use",
                "tool_result",
                "function",
                "/herma",
                "deploy",
                "src/main.rs",
                "object",
                "string",
                "integer",
                "planning",
            ][..]
        )
        .prop_map(|s| json!(s)),
        "\\PC{0,24}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A message as one of the protocols writes it (content a string or a list of parts).
fn message() -> impl Strategy<Value = Value> {
    let role = prop::sample::select(&["user", "assistant", "system", "developer", "tool"][..]);
    let text = "\\PC{0,40}";
    let content = prop_oneof![
        text.prop_map(Value::String),
        prop::collection::vec(
            (
                prop::sample::select(&["text", "input_text", "tool_result", "image"][..]),
                text
            ),
            0..3
        )
        .prop_map(|parts| {
            Value::Array(
                parts
                    .into_iter()
                    .map(|(t, x)| json!({"type": t, "text": x}))
                    .collect(),
            )
        }),
    ];
    (role, content).prop_map(|(role, content)| json!({"role": role, "content": content}))
}

/// A request body shaped like `protocol`'s, with an arbitrary member sometimes added.
fn request(protocol: Protocol) -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(message(), 0..5),
        proptest::option::of("\\PC{0,30}"),
        any::<bool>(),
        proptest::option::of((key(), value())),
    )
        .prop_map(move |(messages, system, stream, extra)| {
            let mut body = match protocol {
                Protocol::ChatCompletions => json!({"model": "m", "messages": messages}),
                Protocol::Responses => json!({"model": "m", "input": messages}),
                Protocol::Messages => json!({"model": "m", "max_tokens": 16, "messages": messages}),
            };
            if let Some(system) = system {
                let member = match protocol {
                    Protocol::Responses => "instructions",
                    _ => "system",
                };
                body[member] = json!(system);
            }
            body["stream"] = json!(stream);
            if let Some((k, v)) = extra {
                body[k] = v;
            }
            body
        })
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop::sample::select(&Protocol::ALL[..])
}

/// Every string in `value`.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(members) => members.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

fn events(bytes: &[u8], chunks: &[usize]) -> Vec<(Option<String>, String)> {
    let mut reader = Reader::default();
    let mut out = Vec::new();
    let mut rest = bytes;
    for &size in chunks {
        let (now, later) = rest.split_at(size.min(rest.len()));
        reader.feed(now, &mut |e: &Event| {
            out.push((e.event.clone(), e.data.clone()))
        });
        rest = later;
    }
    reader.feed(rest, &mut |e: &Event| {
        out.push((e.event.clone(), e.data.clone()))
    });
    out
}

proptest! {
    // Failures are reported with their minimal input; nothing is written into the source tree.
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_strict_reader_never_panics_and_accepts_what_it_writes(v in value(), noise in prop::collection::vec(any::<u8>(), 0..64)) {
        let text = serde_json::to_vec(&v).unwrap();
        // What serde writes has no duplicate members and is within the depth limit here.
        prop_assert_eq!(parse_strict(&text).unwrap(), v);
        let _ = parse_strict(&noise);
        let mut cut = text.clone();
        cut.truncate(text.len() / 2);
        let _ = parse_strict(&cut);
    }

    #[test]
    fn extraction_never_panics_on_any_body(p in protocol(), v in value(), bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        let headers = HeaderFacts::default();
        let _ = Envelope::from_request(p, &serde_json::to_vec(&v).unwrap(), &headers);
        let _ = Envelope::from_request(p, &bytes, &headers);
    }

    #[test]
    fn a_shim_splices_into_valid_json_without_touching_what_comes_before(
        (p, body) in protocol().prop_flat_map(|p| (Just(p), request(p))),
        shim in "\\PC{1,40}",
    ) {
        let bytes = serde_json::to_vec(&body).unwrap();
        let headers = HeaderFacts::default();
        let Ok(envelope) = Envelope::from_request(p, &bytes, &headers) else {
            return Ok(());
        };
        let Some(insertion) = envelope.insertion else { return Ok(()) };
        let out = envelope.with_shim(&bytes, &shim).expect("a place for the shim is usable");
        prop_assert_eq!(&out[..insertion.start], &bytes[..insertion.start]);
        let parsed = parse_strict(&out).expect("the spliced body is strict JSON");
        let mut found = Vec::new();
        strings(&parsed, &mut found);
        prop_assert!(found.iter().any(|s| s.contains(&shim)), "the shim is in the body");
        let again = Envelope::from_request(p, &out, &headers).expect("the spliced body reads");
        prop_assert_eq!(again.user_text, envelope.user_text);
        prop_assert_eq!(again.model, envelope.model);
    }

    #[test]
    fn the_sse_framer_is_the_same_whatever_the_chunking(
        frames in prop::collection::vec((proptest::option::of("[a-z_.]{1,12}"), "[^\r\n]{0,30}"), 0..8),
        junk in prop::collection::vec(any::<u8>(), 0..64),
        chunks in prop::collection::vec(0usize..40, 0..12),
    ) {
        let mut bytes = Vec::new();
        for (event, data) in &frames {
            if let Some(event) = event {
                bytes.extend_from_slice(format!("event: {event}\n").as_bytes());
            }
            bytes.extend_from_slice(format!("data: {data}\n\n").as_bytes());
        }
        let whole = events(&bytes, &[]);
        prop_assert_eq!(events(&bytes, &chunks), whole.clone());
        let expected: Vec<String> = frames.iter().map(|(_, d)| d.clone()).collect();
        let seen: Vec<String> = whole.into_iter().map(|(_, d)| d).collect();
        prop_assert_eq!(seen, expected);
        bytes.extend_from_slice(&junk);
        let _ = events(&bytes, &chunks);
    }

    #[test]
    fn usage_observers_and_stream_decoders_never_panic(
        p in protocol(),
        events in prop::collection::vec((proptest::option::of(prop::sample::select(&[
            "message_start", "content_block_start", "content_block_delta", "content_block_stop",
            "message_delta", "message_stop", "error", "response.created", "response.output_text.delta",
            "response.output_item.added", "response.function_call_arguments.delta", "response.completed",
        ][..])), value()), 0..10),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut stream = Vec::new();
        for (event, data) in &events {
            if let Some(event) = event {
                stream.extend_from_slice(format!("event: {event}\n").as_bytes());
            }
            stream.extend_from_slice(format!("data: {data}\n\n").as_bytes());
        }
        for streaming in [true, false] {
            let mut observer = UsageObserver::new(p, streaming);
            observer.feed(&stream);
            observer.feed(&bytes);
            let _ = observer.ended();
            let _ = observer.finish();
        }
        let mut decoder = p.decoder();
        for (event, data) in &events {
            let event = Event { event: event.map(str::to_owned), data: data.to_string() };
            if decoder.on_event(&event, &mut |_| {}).is_err() {
                break;
            }
        }
    }

    #[test]
    fn settings_never_panic_on_any_values(
        values in prop::collection::vec((0usize..400, "\\PC{0,20}"), 0..12),
    ) {
        let names: Vec<String> = herma_core::settings::table::all().flat_map(|s| s.names()).collect();
        let map: BTreeMap<String, String> = values
            .into_iter()
            .map(|(i, v)| (names[i % names.len()].clone(), v))
            .collect();
        let _ = Settings::from_map(&map);
        let env = ConversationEnv::new(map);
        for provider in Provider::ALL {
            let _ = ProviderConfig::resolve(&env, provider);
        }
        let _ = herma_core::conversation::config::grants(&env);
    }

    #[test]
    fn the_portable_schema_profile_never_panics(schema in value(), args in value()) {
        let contract = json!({
            "operation_id": "op", "category_id": "planning", "description": "d",
            "input_schema": schema,
        });
        if let Ok(contract) = parse_work_contract(&contract) {
            let _ = validate_arguments(&contract, &args);
        }
        let _ = parse_work_contract(&args);
    }
}
