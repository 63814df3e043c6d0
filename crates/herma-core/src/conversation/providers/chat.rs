//! Chat Completions, as Meta Muse (`api.meta.ai`) and OpenRouter (`openrouter.ai`) take it:
//! `max_tokens` is the allowance; Meta's effort is `reasoning_effort`, OpenRouter's is
//! `reasoning.effort`; OpenRouter is pinned to the one configured underlying provider with its
//! gateway fallbacks off. The reply is one choice whose `message` holds the text and the
//! `tool_calls` (arguments as the model's JSON text); OpenRouter names the provider that served.

use serde_json::{Map, Value, json};

use super::read::{
    Events, Read, object, opt_array, opt_object, opt_str, opt_u64, req_array, req_object, req_str,
    req_u64, shape, unspecified_stop,
};
use super::{
    Reply, TurnRequest, chat_messages, function_tools, insert_reasoning, insert_tools,
    merge_generation,
};
use crate::call::Usage;
use crate::conversation::config::ProviderConfig;
use crate::upstream::Provider;
use crate::wire::chat::stop_reason;

pub(super) fn encode(config: &ProviderConfig, request: &TurnRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("messages".into(), chat_messages(request));
    insert_tools(
        &mut body,
        function_tools(&request.tools),
        Some(json!("auto")),
    );
    body.insert("max_tokens".into(), json!(config.allowance));
    if config.provider == Provider::Openrouter {
        insert_reasoning(&mut body, config, "reasoning", |e| json!({"effort": e}));
        body.insert("provider".into(), routing(config));
    } else {
        insert_reasoning(&mut body, config, "reasoning_effort", |e| json!(e));
    }
    merge_generation(&mut body, &config.generation);
    body
}

/// OpenRouter's routing: only the configured slug, no fallbacks, every parameter honoured, no
/// data collection. A configuration without a slug (never resolved so) sends `""`, which no
/// provider matches: it fails closed rather than routing freely.
fn routing(config: &ProviderConfig) -> Value {
    let slug = config.routing_provider.as_deref().unwrap_or_default();
    json!({
        "only": [slug],
        "order": [slug],
        "allow_fallbacks": false,
        "require_parameters": true,
        "data_collection": "deny",
    })
}

pub(super) fn decode(body: &Value, provider: Provider) -> Read<Reply> {
    let root = object(body, "(root)")?;
    let mut events = Events::default();
    events.reference = opt_str(root, "id")?.map(str::to_owned);
    let [choice] = req_array(root, "choices")? else {
        return Err(shape("choices", "an array of exactly one choice"));
    };
    let choice = object(choice, "choices")?;
    let message = req_object(choice, "message")?;
    events.text = opt_str(message, "content")?.unwrap_or_default().to_owned();
    for call in opt_array(message, "tool_calls")? {
        let call = object(call, "tool_calls")?;
        let function = req_object(call, "function")?;
        let arguments = req_str(function, "arguments")?.to_owned();
        events.call(req_str(call, "id")?, req_str(function, "name")?, arguments);
    }
    let stop = opt_str(choice, "finish_reason")?.map_or_else(unspecified_stop, stop_reason);
    let usage = opt_object(root, "usage")?.map(usage).transpose()?;
    let reported_provider = match provider {
        Provider::Openrouter => opt_str(root, "provider")?,
        _ => None,
    };
    Ok(events.finish(stop, usage, opt_str(root, "model")?, reported_provider))
}

/// `prompt_tokens` counts cached tokens too; the neutral `input_tokens` does not.
fn usage(usage: &Map<String, Value>) -> Read<Usage> {
    let prompt = req_u64(usage, "prompt_tokens")?;
    let cached = match opt_object(usage, "prompt_tokens_details")? {
        Some(details) => opt_u64(details, "cached_tokens")?.unwrap_or(0),
        None => 0,
    };
    Ok(Usage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: req_u64(usage, "completion_tokens")?,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    })
}
