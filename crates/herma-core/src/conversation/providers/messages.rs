//! Anthropic Messages (`api.anthropic.com`): the key as `x-api-key` with the configured
//! `anthropic-version` (headers, [`super::encode`]), the allowance as `max_tokens`, a top-level
//! `system`, `input_schema` tools, `service_tier: "standard_only"` always; native `thinking` and
//! `output_config` come through generation JSON untouched. The reply's `text` blocks are the text
//! and its `tool_use` blocks the calls, their `input` re-serialized compactly; usage includes the
//! cache reads and writes.

use serde_json::{Map, Value, json};

use super::read::{
    Events, Read, object, opt_object, opt_str, opt_u64, req_array, req_str, req_u64, required,
    shape, unspecified_stop,
};
use super::{Reply, TurnRequest, insert_tools, merge_generation};
use crate::call::Usage;
use crate::conversation::config::ProviderConfig;
use crate::wire::messages::stop_reason;

pub(super) fn encode(config: &ProviderConfig, request: &TurnRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("max_tokens".into(), json!(config.allowance));
    body.insert("system".into(), json!(request.system));
    let messages = request
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.text}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    let tools = request
        .tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
            })
        })
        .collect();
    insert_tools(
        &mut body,
        Value::Array(tools),
        Some(json!({"type": "auto"})),
    );
    if let Some(tier) = config.service_tier() {
        body.insert("service_tier".into(), json!(tier));
    }
    merge_generation(&mut body, &config.generation);
    body
}

pub(super) fn decode(body: &Value) -> Read<Reply> {
    let root = object(body, "(root)")?;
    if opt_str(root, "type")?.is_some_and(|t| t != "message") {
        return Err(shape("type", "`message`"));
    }
    let mut events = Events::default();
    events.reference = opt_str(root, "id")?.map(str::to_owned);
    for block in req_array(root, "content")? {
        let block = object(block, "content")?;
        match req_str(block, "type")? {
            "text" => events.text.push_str(req_str(block, "text")?),
            "tool_use" => {
                let input = object(required(block, "input")?, "input")?;
                events.call(
                    req_str(block, "id")?,
                    req_str(block, "name")?,
                    Value::Object(input.clone()).to_string(),
                );
            }
            // Thinking blocks and anything else carry no proposal.
            _ => {}
        }
    }
    let stop = opt_str(root, "stop_reason")?.map_or_else(unspecified_stop, stop_reason);
    let usage = opt_object(root, "usage")?.map(usage).transpose()?;
    Ok(events.finish(stop, usage, opt_str(root, "model")?, None))
}

/// Anthropic's `input_tokens` already excludes the cache reads and writes.
fn usage(usage: &Map<String, Value>) -> Read<Usage> {
    Ok(Usage {
        input_tokens: req_u64(usage, "input_tokens")?,
        output_tokens: req_u64(usage, "output_tokens")?,
        cache_read_tokens: opt_u64(usage, "cache_read_input_tokens")?.unwrap_or(0),
        cache_write_tokens: opt_u64(usage, "cache_creation_input_tokens")?.unwrap_or(0),
    })
}
