//! A governed request as Chat Completions JSON.

use serde_json::{Map, Value, json};

use crate::call::{ModelRequest, ToolChoice};

pub(super) fn encode(request: &ModelRequest) -> Value {
    let c = &request.controls;
    let mut body = Map::new();
    body.insert("model".into(), json!(c.model));
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.extend(
        request
            .messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.text})),
    );
    body.insert("messages".into(), Value::Array(messages));
    body.insert("max_tokens".into(), json!(c.max_tokens));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &c.tool_choice {
        body.insert(
            "tool_choice".into(),
            match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Any => json!("required"),
                ToolChoice::Tool { name } => {
                    json!({"type": "function", "function": {"name": name}})
                }
            },
        );
    }
    if let Some(output) = &request.output {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": output.name, "schema": output.schema, "strict": true}}),
        );
    }
    if let Some(t) = c.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}
