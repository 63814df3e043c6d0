//! The shared wire cases of `parity/conversation_providers.json`, and the limits and tables
//! around them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::*;
use crate::conversation::config::ProviderConfig;
use crate::settings::ConversationEnv;

const CASES: &str = include_str!("../../../../../parity/conversation_providers.json");

fn fixtures() -> Value {
    crate::json::parse_strict(CASES.as_bytes()).expect("the fixture parses strictly")
}

fn provider(case: &Value) -> Provider {
    Provider::parse(case["provider"].as_str().expect("provider")).expect("a provider")
}

fn config(case: &Value) -> ProviderConfig {
    let env: BTreeMap<String, String> = case["env"]
        .as_object()
        .expect("env")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_owned()))
        .collect();
    ProviderConfig::resolve(&ConversationEnv::new(env), provider(case))
        .unwrap_or_else(|p| panic!("{}: {p:?}", case["name"]))
}

fn pairs(value: &Value) -> Vec<(String, String)> {
    value
        .as_array()
        .expect("headers")
        .iter()
        .map(|pair| {
            let s = |i: usize| pair[i].as_str().expect("header part").to_owned();
            (s(0), s(1))
        })
        .collect()
}

/// A reply as the fixture spells it.
fn spelled(reply: &Reply) -> Value {
    match reply {
        Reply::Completed {
            events,
            reported_model,
            reported_provider,
        } => json!({
            "outcome": reply.outcome(),
            "events": events.iter().map(spelled_event).collect::<Vec<_>>(),
            "reported_model": reported_model,
            "reported_provider": reported_provider,
        }),
        Reply::Uncertain { .. } | Reply::Invalid { .. } => json!({"outcome": reply.outcome()}),
        Reply::Rejected {
            status,
            outcome,
            diagnostics,
            retry_after_seconds,
            reference,
        } => json!({
            "outcome": outcome,
            "status": status,
            "diagnostics": diagnostics,
            "retry_after_seconds": retry_after_seconds,
            "reference": reference,
        }),
    }
}

fn spelled_event(event: &ModelEvent) -> Value {
    match event {
        ModelEvent::Reference(id) => json!({"reference": id}),
        ModelEvent::TextDelta(text) => json!({"text": text}),
        ModelEvent::ToolCall {
            id,
            name,
            arguments,
        } => json!({"tool_call": {"id": id, "name": name, "arguments": arguments}}),
        ModelEvent::Stop(stop) => json!({"stop": stop}),
        ModelEvent::Usage(usage) => json!({"usage": usage}),
        ModelEvent::Reasoning(_) | ModelEvent::ProviderBlock(_) => {
            panic!("a turn reply emits no {event:?}")
        }
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn request_fixtures_are_the_exact_bytes_sent() {
    let fixtures = fixtures();
    let cases = fixtures["requests"].as_array().expect("requests");
    let mut seen = BTreeSet::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let config = config(case);
        let turn = &fixtures["turns"][case["turn"].as_str().expect("turn")];
        let turn: TurnRequest = serde_json::from_value(turn.clone()).expect(name);
        let sent = encode(&config, &turn);
        assert_eq!(sent.url, case["url"], "{name}");
        let headers: Vec<(String, String)> = sent
            .headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        assert_eq!(headers, pairs(&case["headers"]), "{name}");
        assert_eq!(json!(sent.credential), case["credential"], "{name}");
        let body = String::from_utf8(sent.body.clone()).expect("UTF-8");
        assert_eq!(body, case["body"].as_str().expect("body"), "{name}");
        assert!(check_request_size(&sent).is_ok(), "{name}");
        seen.insert(config.provider.as_str());
    }
    assert_eq!(
        seen.len(),
        Provider::ALL.len(),
        "every provider has request cases"
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn reply_fixtures_read_as_stated() {
    let fixtures = fixtures();
    let cases = fixtures["replies"].as_array().expect("replies");
    let mut seen = BTreeSet::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let status = u16::try_from(case["status"].as_u64().expect("status")).expect("u16");
        let mut body = case["body"].as_str().expect("body").as_bytes().to_vec();
        if let Some(size) = case["pad_to_bytes"].as_u64() {
            body.resize(usize::try_from(size).expect("size"), b' ');
        }
        let reply = decode(provider(case), status, &pairs(&case["headers"]), &body);
        assert_eq!(spelled(&reply), case["reply"], "{name}: {reply:?}");
        if let Reply::Rejected { diagnostics, .. } = &reply {
            let shown = format!("{diagnostics:?} {reply:?}");
            for secret in case["must_not_contain"].as_array().into_iter().flatten() {
                let secret = secret.as_str().expect("string");
                assert!(!shown.contains(secret), "{name}: {shown} shows {secret}");
            }
        }
        seen.insert((
            case["provider"].as_str().expect("provider"),
            reply.outcome().as_str(),
        ));
    }
    for provider in Provider::ALL {
        for outcome in [
            AttemptOutcome::Completed,
            AttemptOutcome::ProviderOutcomeUncertain,
            AttemptOutcome::ProviderInvalidResponse,
            AttemptOutcome::ProviderRateLimited,
        ] {
            assert!(
                seen.contains(&(provider.as_str(), outcome.as_str())),
                "{} has no {outcome} reply case",
                provider.as_str()
            );
        }
    }
}

fn request_of(bytes: usize) -> ProviderRequest {
    ProviderRequest {
        url: String::new(),
        headers: Vec::new(),
        credential: CredentialStyle::Bearer,
        body: vec![b' '; bytes],
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_request_exactly_at_32_kib_is_sent_and_one_byte_more_is_413() {
    assert!(check_request_size(&request_of(MAX_REQUEST_BYTES)).is_ok());
    let refused = check_request_size(&request_of(MAX_REQUEST_BYTES + 1)).unwrap_err();
    assert_eq!(refused.code, ProblemCode::PayloadTooLarge);
    assert!(
        refused
            .extensions
            .contains(&("limit_bytes".into(), json!(32768)))
    );
    assert!(
        refused
            .extensions
            .contains(&("request_bytes".into(), json!(32769)))
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_long_transcript_is_measured_as_the_encoded_body() {
    let env = ConversationEnv::new(BTreeMap::from([(
        "HERMA_CONVERSATION_OLLAMA_MAX_OUTPUT".to_owned(),
        "64".to_owned(),
    )]));
    let config = ProviderConfig::resolve(&env, Provider::Ollama).unwrap();
    // Quotes are escaped on the wire, so 11,000 of them are 22,000 bytes each message.
    let turn = TurnRequest {
        system: "s".into(),
        messages: vec![Msg::user("\"".repeat(11_000)); 2],
        tools: Vec::new(),
    };
    let sent = encode(&config, &turn);
    assert!(sent.body.len() > MAX_REQUEST_BYTES);
    assert_eq!(
        check_request_size(&sent).unwrap_err().code,
        ProblemCode::PayloadTooLarge
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn an_error_body_is_read_only_to_16_kib() {
    let padded = |fill: usize| {
        format!(
            r#"{{"error":{{"type":"billing_error","code":"model_not_found","message":"{}"}}}}"#,
            "x".repeat(fill)
        )
    };
    let within = padded(100);
    let found = diagnose(404, within.as_bytes());
    assert_eq!(found.error_type.as_deref(), Some("billing_error"));
    assert_eq!(found.reason, DiagnosticReason::ModelUnavailable);
    // Cut mid-JSON at 16 KiB: nothing is copied, the status alone classifies.
    let cut = padded(MAX_ERROR_BODY_BYTES);
    for (status, reason) in [
        (404, DiagnosticReason::Unknown),
        (402, DiagnosticReason::CreditOrQuotaExhausted),
    ] {
        assert_eq!(
            diagnose(status, cut.as_bytes()),
            ProviderDiagnostics {
                error_type: None,
                error_code: None,
                param: None,
                reason,
            }
        );
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn rejection_outcomes_follow_the_status() {
    for (status, outcome) in [
        (400, AttemptOutcome::ProviderRejected),
        (401, AttemptOutcome::ProviderRejected),
        (403, AttemptOutcome::ProviderRejected),
        (404, AttemptOutcome::ProviderRejected),
        (413, AttemptOutcome::ProviderRejected),
        (402, AttemptOutcome::ProviderPaymentRequired),
        (429, AttemptOutcome::ProviderRateLimited),
        (503, AttemptOutcome::ProviderUnavailable),
        (529, AttemptOutcome::ProviderUnavailable),
        (500, AttemptOutcome::ProviderOutcomeUncertain),
        (502, AttemptOutcome::ProviderOutcomeUncertain),
        (504, AttemptOutcome::ProviderOutcomeUncertain),
        (599, AttemptOutcome::ProviderOutcomeUncertain),
        (301, AttemptOutcome::ProviderOutcomeUncertain),
        (100, AttemptOutcome::ProviderOutcomeUncertain),
    ] {
        assert_eq!(AttemptOutcome::for_rejection(status), outcome, "{status}");
        let reply = decode(Provider::Meta, status, &[], b"");
        assert_eq!(reply.outcome(), outcome, "{status}");
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn outcomes_are_a_closed_snake_case_list_with_known_zero_charges() {
    let zero = [
        "provider_not_configured",
        "provider_rejected",
        "provider_rate_limited",
        "provider_payment_required",
        "provider_unavailable",
        "provider_budget_denied",
        "caller_budget_denied",
        "provider_operator_disabled",
        "provider_identity_cooldown",
    ];
    for outcome in AttemptOutcome::ALL {
        assert_eq!(json!(outcome), json!(outcome.as_str()));
        let back: AttemptOutcome = serde_json::from_value(json!(outcome.as_str())).unwrap();
        assert_eq!(back, outcome);
        assert_eq!(
            outcome.charge_known_zero(),
            zero.contains(&outcome.as_str()),
            "{outcome}"
        );
    }
    let names: BTreeSet<_> = AttemptOutcome::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(names.len(), 13);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_credential_style_follows_the_provider_and_never_prints() {
    let key = Secret::new("sk-live-FAKEKEY");
    for provider in Provider::ALL {
        let style = CredentialStyle::for_provider(provider);
        let value = style.header_value(&key);
        assert_eq!(format!("{value:?}"), "[redacted]");
        match provider {
            Provider::Anthropic => {
                assert_eq!(style.header_name(), "x-api-key");
                assert_eq!(value.expose(), "sk-live-FAKEKEY");
            }
            _ => {
                assert_eq!(style.header_name(), "authorization");
                assert_eq!(value.expose(), "Bearer sk-live-FAKEKEY");
            }
        }
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn invalid_and_uncertain_reasons_never_copy_the_body() {
    let secret = "sk-live-FAKEKEY0123456789abcdef";
    for (provider, status, body) in [
        (
            Provider::Meta,
            200,
            format!(r#"{{"{secret}":1,"{secret}":2}}"#),
        ),
        (Provider::Openai, 200, format!(r#"{{"status":"{secret}"}}"#)),
        (
            Provider::Anthropic,
            200,
            format!(r#"{{"type":"{secret}"}}"#),
        ),
        (Provider::Ollama, 202, format!(r#"{{"error":"{secret}"}}"#)),
        (Provider::Openrouter, 200, secret.to_owned()),
    ] {
        let reply = decode(provider, status, &[], body.as_bytes());
        assert!(
            !format!("{reply:?}").contains(secret),
            "{provider:?}: {reply:?}"
        );
    }
}

// Native only: proptest forks and times out with processes.
#[cfg(not(target_arch = "wasm32"))]
proptest::proptest! {
    #[test]
    fn decode_never_panics(
        bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
        status in 0u16..1000,
        which in 0usize..5,
    ) {
        let provider = Provider::ALL[which];
        let _ = decode(provider, status, &[("retry-after".into(), "5".into())], &bytes);
        let _ = decode(provider, 200, &[], &bytes);
    }
}
