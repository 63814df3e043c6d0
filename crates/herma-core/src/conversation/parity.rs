//! Runs the shared fixtures of `parity/conversation_settings.json`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::config::{Pricing, ProviderConfig};
use crate::money::fits;
use crate::settings::ConversationEnv;
use crate::upstream::Provider;

const SETTINGS: &str = include_str!("../../../../parity/conversation_settings.json");

fn fixtures() -> Value {
    crate::json::parse_strict(SETTINGS.as_bytes()).expect("the fixture parses strictly")
}

fn env(case: &Value) -> ConversationEnv {
    let map: BTreeMap<String, String> = case["env"]
        .as_object()
        .expect("env")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_owned()))
        .collect();
    ConversationEnv::new(map)
}

/// The configuration as the fixture spells it.
fn spelled(config: &ProviderConfig) -> Value {
    let mut out = serde_json::json!({
        "model": config.model,
        "allowance": config.allowance,
        "destination": config.destination.url(),
    });
    match config.pricing {
        Pricing::Metered {
            tariff,
            budget_micros,
        } => {
            out["input_picos_per_token"] = tariff.input_picos_per_token.into();
            out["output_picos_per_token"] = tariff.output_picos_per_token.into();
            out["budget_micros"] = budget_micros.into();
        }
        Pricing::Calls { per_day } => out["calls_per_day"] = per_day.into(),
    }
    if let Some(reasoning) = &config.reasoning {
        out["reasoning"] = reasoning.as_str().into();
    }
    if let Some(version) = config.anthropic_version {
        out["anthropic_version"] = version.into();
    }
    if let Some(slug) = &config.routing_provider {
        out["routing_provider"] = slug.as_str().into();
    }
    out
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn settings_fixtures_resolve_as_stated() {
    let fixtures = fixtures();
    let cases = fixtures["settings"].as_array().expect("settings");
    assert!(cases.len() >= 30);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let provider = Provider::parse(case["provider"].as_str().expect("provider")).expect(name);
        let resolved = ProviderConfig::resolve(&env(case), provider);
        match (&case["code"], resolved) {
            (Value::String(code), Err(problem)) => {
                assert_eq!(problem.code.as_str(), code, "{name}: {problem:?}");
            }
            (Value::String(code), Ok(config)) => panic!("{name}: expected {code}, got {config:?}"),
            (_, Err(problem)) => panic!("{name}: {problem:?}"),
            (_, Ok(config)) => {
                assert_eq!(spelled(&config), case["config"], "{name}");
                for r in case["reservations"].as_array().into_iter().flatten() {
                    let got = config.reservation(r["input_bytes"].as_u64().expect("bytes"));
                    assert_eq!(Some(got.tokens), r["tokens"].as_u64(), "{name}");
                    assert_eq!(got.micros, r["micros"].as_u64(), "{name}");
                }
            }
        }
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn admission_fixtures_hold_exactly_at_the_ceiling() {
    let fixtures = fixtures();
    for case in fixtures["admission"].as_array().expect("admission") {
        let n = |field: &str| case[field].as_u64().expect(field);
        assert_eq!(
            fits(n("spent"), n("amount"), n("ceiling")),
            case["admitted"].as_bool().expect("admitted"),
            "{}",
            case["name"]
        );
    }
}
