//! A governed request as Messages JSON.

use serde_json::{Map, Value, json};

use crate::call::{ModelRequest, ToolChoice};

pub(super) fn encode(request: &ModelRequest) -> Value {
    let c = &request.controls;
    let mut body = Map::new();
    body.insert("model".into(), json!(c.model));
    if let Some(system) = &request.system {
        if c.cache == Some(true) {
            body.insert(
                "system".into(),
                json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]),
            );
        } else {
            body.insert("system".into(), json!(system));
        }
    }
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.text}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    body.insert("max_tokens".into(), json!(c.max_tokens));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &c.tool_choice {
        body.insert(
            "tool_choice".into(),
            match choice {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Any => json!({"type": "any"}),
                ToolChoice::Tool { name } => json!({"type": "tool", "name": name}),
            },
        );
    }
    if let Some(t) = c.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}
