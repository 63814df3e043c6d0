//! OpenAI Responses (`api.openai.com`): the system prompt as `instructions`, the transcript as
//! `input` messages, flat function tools with `strict: false` (the portable contracts keep their
//! optional fields; Herma validates every proposal locally), the allowance as
//! `max_output_tokens`, no storage, no background run, `service_tier: "default"` (standard
//! pricing; omitting it would mean `auto`). The reply's `status` decides first: `queued` and
//! `in_progress` (and `failed` or `cancelled`, which say nothing of what was charged) are
//! uncertain; `completed` and `incomplete` are read, taking only completed `function_call` items.

use serde_json::{Map, Value, json};

use super::read::{
    Events, Read, object, opt_array, opt_object, opt_str, opt_u64, req_array, req_str, req_u64,
    shape,
};
use super::{Reply, TurnRequest, insert_reasoning, insert_tools, merge_generation};
use crate::call::{StopReason, Usage};
use crate::conversation::config::ProviderConfig;

pub(super) fn encode(config: &ProviderConfig, request: &TurnRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("instructions".into(), json!(request.system));
    let input = request
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.text}))
        .collect();
    body.insert("input".into(), Value::Array(input));
    let tools = request
        .tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": false,
            })
        })
        .collect();
    insert_tools(&mut body, Value::Array(tools), Some(json!("auto")));
    body.insert("max_output_tokens".into(), json!(config.allowance));
    body.insert("store".into(), json!(false));
    body.insert("background".into(), json!(false));
    if let Some(tier) = config.service_tier() {
        body.insert("service_tier".into(), json!(tier));
    }
    insert_reasoning(&mut body, config, "reasoning", |e| json!({"effort": e}));
    merge_generation(&mut body, &config.generation);
    body
}

pub(super) fn decode(body: &Value) -> Read<Reply> {
    let root = object(body, "(root)")?;
    let status = req_str(root, "status")?;
    match status {
        "completed" | "incomplete" => {}
        "queued" | "in_progress" => {
            return Ok(uncertain(
                "the response is still queued or in progress; it is never polled",
            ));
        }
        "failed" | "cancelled" => {
            return Ok(uncertain(
                "the response failed or was cancelled after it was accepted; what it generated and charged is unknown",
            ));
        }
        _ => return Err(shape("status", "a known response status")),
    }
    let mut events = Events::default();
    events.reference = opt_str(root, "id")?.map(str::to_owned);
    let mut refused = false;
    for item in req_array(root, "output")? {
        let item = object(item, "output")?;
        match req_str(item, "type")? {
            "message" => {
                for part in opt_array(item, "content")? {
                    let part = object(part, "content")?;
                    match req_str(part, "type")? {
                        "output_text" => events.text.push_str(req_str(part, "text")?),
                        "refusal" => refused = true,
                        _ => {}
                    }
                }
            }
            "function_call" if opt_str(item, "status")? == Some("completed") => {
                let arguments = req_str(item, "arguments")?.to_owned();
                events.call(req_str(item, "call_id")?, req_str(item, "name")?, arguments);
            }
            // Reasoning items, unfinished calls and anything else carry no proposal.
            _ => {}
        }
    }
    let stop = if status == "incomplete" {
        let details = opt_object(root, "incomplete_details")?;
        match details.map(|d| opt_str(d, "reason")).transpose()?.flatten() {
            Some("max_output_tokens") => StopReason::MaxTokens,
            Some("content_filter") => StopReason::Refusal,
            Some(other) => StopReason::Other(other.to_owned()),
            None => StopReason::Other("incomplete".to_owned()),
        }
    } else if refused {
        StopReason::Refusal
    } else if events.has_calls() {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    let usage = opt_object(root, "usage")?.map(usage).transpose()?;
    Ok(events.finish(stop, usage, opt_str(root, "model")?, None))
}

fn uncertain(reason: &str) -> Reply {
    Reply::Uncertain {
        reason: reason.to_owned(),
    }
}

/// `input_tokens` counts cached tokens too; the neutral `input_tokens` does not.
fn usage(usage: &Map<String, Value>) -> Read<Usage> {
    let input = req_u64(usage, "input_tokens")?;
    let cached = match opt_object(usage, "input_tokens_details")? {
        Some(details) => opt_u64(details, "cached_tokens")?.unwrap_or(0),
        None => 0,
    };
    Ok(Usage {
        input_tokens: input.saturating_sub(cached),
        output_tokens: req_u64(usage, "output_tokens")?,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    })
}
