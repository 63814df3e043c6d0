//! What a provider's generation JSON (`HERMA_CONVERSATION_<PROVIDER>_GENERATION`) may hold.
//!
//! Native settings survive untouched (Ollama `think` and `options.num_ctx`, Anthropic `thinking`
//! and `output_config`, sampling where the provider takes it). Generation JSON cannot replace
//! what Herma owns in a turn: the model, the inputs, the tools, storage and background controls,
//! routing, or the output allowance — naming one is `invalid_provider_configuration`. Settings
//! this proposal-only profile cannot account for (several outputs, opaque prompts, speed or
//! region tiers, another service tier) are `unsupported_generation_configuration`.

use serde_json::{Map, Value};

use crate::upstream::Provider;

/// Members Herma sets itself, for every provider.
const OWNED: &[&str] = &[
    "model",
    "messages",
    "input",
    "instructions",
    "system",
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "parallel_tool_calls",
    "stream",
    "stream_options",
    "store",
    "background",
    "previous_response_id",
    "conversation",
    "max_tokens",
    "max_output_tokens",
    "max_completion_tokens",
    "response_format",
    "format",
];

/// Members only OpenRouter reads that would change routing, models, plugins or inputs.
const OPENROUTER_OWNED: &[&str] = &[
    "provider",
    "models",
    "route",
    "plugins",
    "preset",
    "transforms",
    "web_search_options",
];

/// Members no provider may carry in a managed turn.
const UNSUPPORTED: &[&str] = &["best_of", "prompt", "prompt_id", "speed", "inference_geo"];

/// The service tier a provider's turns always send, when it has one.
pub fn forced_service_tier(provider: Provider) -> Option<&'static str> {
    match provider {
        Provider::Openai => Some("default"),
        Provider::Anthropic => Some("standard_only"),
        Provider::Meta | Provider::Ollama | Provider::Openrouter => None,
    }
}

/// What is wrong with one provider's generation JSON, split by the outcome each part maps to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerationFindings {
    /// Members that would replace what Herma owns (`invalid_provider_configuration`).
    pub owned: Vec<String>,
    /// Members this profile cannot account for (`unsupported_generation_configuration`).
    pub unsupported: Vec<String>,
}

/// Checks `generation` for `provider`; member paths are dotted (`options.num_predict`).
pub fn check(provider: Provider, generation: &Map<String, Value>) -> GenerationFindings {
    let mut found = GenerationFindings::default();
    for (name, value) in generation {
        let owned = OWNED.contains(&name.as_str())
            || (provider == Provider::Openrouter && OPENROUTER_OWNED.contains(&name.as_str()));
        if owned {
            found.owned.push(name.clone());
            continue;
        }
        match name.as_str() {
            "options" if provider == Provider::Ollama => {
                if value.get("num_predict").is_some() {
                    found.owned.push("options.num_predict".into());
                }
                if !value.is_object() {
                    found.owned.push("options".into());
                }
            }
            "text" if provider == Provider::Openai && value.get("format").is_some() => {
                found.owned.push("text.format".into());
            }
            "n" => {
                let one = value.as_u64() == Some(1) && value.is_u64();
                let chat = matches!(provider, Provider::Meta | Provider::Openrouter);
                if !(one && chat) {
                    found.unsupported.push("n".into());
                }
            }
            "service_tier" => {
                let forced = forced_service_tier(provider);
                if forced.is_none() || value.as_str() != forced {
                    found.unsupported.push("service_tier".into());
                }
            }
            other if UNSUPPORTED.contains(&other) => found.unsupported.push(other.to_owned()),
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(raw: &str) -> Map<String, Value> {
        match serde_json::from_str(raw).unwrap() {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn native_settings_survive() {
        for (provider, raw) in [
            (
                Provider::Ollama,
                r#"{"think":true,"options":{"num_ctx":524288,"temperature":0.4},"keep_alive":"5m"}"#,
            ),
            (
                Provider::Anthropic,
                r#"{"thinking":{"type":"enabled","budget_tokens":2048},"output_config":{"effort":"high"},"service_tier":"standard_only"}"#,
            ),
            (
                Provider::Openai,
                r#"{"reasoning":{"effort":"low"},"text":{"verbosity":"low"},"service_tier":"default"}"#,
            ),
            (Provider::Meta, r#"{"n":1,"temperature":0.2}"#),
            (Provider::Openrouter, r#"{"n":1,"top_p":0.9}"#),
        ] {
            assert_eq!(
                check(provider, &object(raw)),
                GenerationFindings::default(),
                "{raw}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn what_herma_owns_cannot_be_replaced() {
        for (provider, raw, member) in [
            (Provider::Meta, r#"{"model":"x"}"#, "model"),
            (Provider::Openai, r#"{"store":true}"#, "store"),
            (Provider::Openai, r#"{"background":true}"#, "background"),
            (
                Provider::Openai,
                r#"{"text":{"format":{"type":"json_object"}}}"#,
                "text.format",
            ),
            (Provider::Anthropic, r#"{"max_tokens":5}"#, "max_tokens"),
            (Provider::Anthropic, r#"{"system":"x"}"#, "system"),
            (
                Provider::Ollama,
                r#"{"options":{"num_predict":5}}"#,
                "options.num_predict",
            ),
            (Provider::Ollama, r#"{"format":"json"}"#, "format"),
            (
                Provider::Openrouter,
                r#"{"provider":{"only":["x"]}}"#,
                "provider",
            ),
            (
                Provider::Openrouter,
                r#"{"plugins":[{"id":"web"}]}"#,
                "plugins",
            ),
            (Provider::Openrouter, r#"{"models":["a","b"]}"#, "models"),
            (Provider::Meta, r#"{"tools":[]}"#, "tools"),
        ] {
            let found = check(provider, &object(raw));
            assert_eq!(found.owned, [member], "{raw}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn what_a_turn_cannot_account_for_is_unsupported() {
        for (provider, raw, member) in [
            (Provider::Meta, r#"{"n":2}"#, "n"),
            (Provider::Meta, r#"{"n":1.0}"#, "n"),
            (Provider::Openai, r#"{"n":1}"#, "n"),
            (Provider::Openrouter, r#"{"best_of":2}"#, "best_of"),
            (Provider::Openai, r#"{"prompt":{"id":"p"}}"#, "prompt"),
            (Provider::Openai, r#"{"prompt_id":"p"}"#, "prompt_id"),
            (Provider::Anthropic, r#"{"speed":"fast"}"#, "speed"),
            (
                Provider::Anthropic,
                r#"{"inference_geo":"us"}"#,
                "inference_geo",
            ),
            (
                Provider::Openai,
                r#"{"service_tier":"priority"}"#,
                "service_tier",
            ),
            (
                Provider::Openai,
                r#"{"service_tier":"auto"}"#,
                "service_tier",
            ),
            (
                Provider::Anthropic,
                r#"{"service_tier":"auto"}"#,
                "service_tier",
            ),
            (
                Provider::Meta,
                r#"{"service_tier":"default"}"#,
                "service_tier",
            ),
        ] {
            let found = check(provider, &object(raw));
            assert_eq!(found.unsupported, [member], "{raw}");
            assert!(found.owned.is_empty(), "{raw}");
        }
    }
}
