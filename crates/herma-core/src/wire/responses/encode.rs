//! A governed request as Responses JSON: nothing stored, reasoning returned encrypted.

use serde_json::{Map, Value, json};

use crate::call::{ModelRequest, ToolChoice};

pub(super) fn encode(request: &ModelRequest) -> Value {
    let c = &request.controls;
    let mut body = Map::new();
    body.insert("model".into(), json!(c.model));
    if let Some(system) = &request.system {
        body.insert("instructions".into(), json!(system));
    }
    let input: Vec<Value> = request
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.text}))
        .collect();
    body.insert("input".into(), Value::Array(input));
    body.insert("max_output_tokens".into(), json!(c.max_tokens));
    body.insert("store".into(), json!(false));
    // Without stored responses, reasoning comes back only as encrypted content.
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.input_schema}))
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
                ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
            },
        );
    }
    if let Some(output) = &request.output {
        body.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": output.name, "schema": output.schema, "strict": true}}),
        );
    }
    if let Some(t) = c.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}
