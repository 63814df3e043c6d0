//! Ollama Cloud's native `/api/chat` (`ollama.com`): `stream: false` stated, explicit function
//! schemas (Ollama Cloud has no structured outputs), the allowance as `options.num_predict`
//! beside the operator's native options (`num_ctx`, `temperature`, …) and members (`think`,
//! `keep_alive`). The reply is one finished `message`; tool calls carry their arguments as a
//! JSON object, re-serialized compactly, and an id is synthesized (`call_<n>`) when none is
//! given; usage is `prompt_eval_count` / `eval_count`.

use serde_json::{Map, Value, json};

use super::read::{
    Events, Read, object, opt_array, opt_str, opt_u64, req_object, req_str, required, shape,
    unspecified_stop,
};
use super::{Reply, TurnRequest, chat_messages, function_tools, insert_tools, merge_generation};
use crate::call::{StopReason, Usage};
use crate::conversation::config::ProviderConfig;

pub(super) fn encode(config: &ProviderConfig, request: &TurnRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("messages".into(), chat_messages(request));
    // `/api/chat` has no tool choice: a model there calls a tool or answers.
    insert_tools(&mut body, function_tools(&request.tools), None);
    body.insert("stream".into(), json!(false));
    let mut options = Map::new();
    options.insert("num_predict".into(), json!(config.allowance));
    if let Some(Value::Object(native)) = config.generation.get("options") {
        merge_generation(&mut options, native);
    }
    body.insert("options".into(), Value::Object(options));
    merge_generation(&mut body, &config.generation);
    body
}

pub(super) fn decode(body: &Value) -> Read<Reply> {
    let root = object(body, "(root)")?;
    if required(root, "done")? != &Value::Bool(true) {
        return Err(shape("done", "true (a finished, non-streaming reply)"));
    }
    let message = req_object(root, "message")?;
    let mut events = Events::default();
    events.text = opt_str(message, "content")?.unwrap_or_default().to_owned();
    for (index, call) in opt_array(message, "tool_calls")?.iter().enumerate() {
        let call = object(call, "tool_calls")?;
        let function = req_object(call, "function")?;
        let arguments = object(required(function, "arguments")?, "arguments")?;
        let id = opt_str(call, "id")?.map_or_else(|| format!("call_{index}"), str::to_owned);
        events.call(
            &id,
            req_str(function, "name")?,
            Value::Object(arguments.clone()).to_string(),
        );
    }
    // Ollama says `stop` after a tool call too.
    let stop = match opt_str(root, "done_reason")? {
        Some("stop") if events.has_calls() => StopReason::ToolUse,
        Some("stop") => StopReason::EndTurn,
        Some("length") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_owned()),
        None => unspecified_stop(),
    };
    Ok(events.finish(stop, usage(root)?, opt_str(root, "model")?, None))
}

/// Usage when either count is reported; Ollama leaves `prompt_eval_count` out when the whole
/// prompt came from its cache, so a missing count is 0.
fn usage(root: &Map<String, Value>) -> Read<Option<Usage>> {
    let input = opt_u64(root, "prompt_eval_count")?;
    let output = opt_u64(root, "eval_count")?;
    if input.is_none() && output.is_none() {
        return Ok(None);
    }
    Ok(Some(Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cache_read_tokens: 0,
        cache_write_tokens: 0,
    }))
}
