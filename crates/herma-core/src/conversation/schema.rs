//! The JSON Schemas `GET /api/conversation-schema` serves: the turn body, the work contract and
//! the turn response. They describe shapes; the portable profile
//! ([`super::contract`]) and [`super::turn::TurnBody::validate`] add the runtime bounds.

use serde_json::{Value, json};

use super::contract::{CATEGORIES, MAX_DESCRIPTION_CHARS, MAX_OPERATION_ID_CHARS};
use super::turn::{MAX_CONTEXT_REFS, MAX_MESSAGE_CHARS};
use crate::caller::MAX_ID_LEN;
use crate::upstream::Provider;

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

fn id(description: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": MAX_ID_LEN, "description": description})
}

/// The turn body.
pub fn turn() -> Value {
    let providers: Vec<&str> = Provider::ALL.into_iter().map(Provider::as_str).collect();
    json!({
        "$schema": DIALECT,
        "title": "Conversation turn",
        "type": "object",
        "properties": {
            "conversation_id": id("The caller's conversation id; a new id starts a conversation."),
            "request_id": id("The caller's id for this turn; repeating it with the same input replays the stored answer."),
            "expected_version": {"type": "integer", "minimum": 0, "description": "The version the previous answer returned (0 for a new conversation)."},
            "message": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS},
            "context_refs": {"type": "array", "items": id("A context entry visible to the caller."), "maxItems": MAX_CONTEXT_REFS, "uniqueItems": true},
            "provider": {"enum": providers},
            "provider_plan_ref": id("A provider plan: not available on this server yet."),
        },
        "required": ["conversation_id", "request_id", "expected_version", "message", "context_refs", "provider"],
        "additionalProperties": false,
    })
}

/// A context entry's `schema_or_body.work_contract`.
pub fn work_contract() -> Value {
    json!({
        "$schema": DIALECT,
        "title": "Work contract",
        "type": "object",
        "properties": {
            "operation_id": {"type": "string", "pattern": format!("^[A-Za-z][A-Za-z0-9_]{{0,{}}}$", MAX_OPERATION_ID_CHARS - 1)},
            "category_id": {"enum": CATEGORIES},
            "description": {"type": "string", "minLength": 1, "maxLength": MAX_DESCRIPTION_CHARS},
            "input_schema": {"type": "object", "description": "A JSON Schema in Herma's portable profile (docs/conversations.md)."},
        },
        "required": ["operation_id", "category_id", "description", "input_schema"],
        "additionalProperties": false,
    })
}

/// A turn's answer.
pub fn response() -> Value {
    json!({
        "$schema": DIALECT,
        "title": "Conversation turn answer",
        "type": "object",
        "properties": {
            "conversation_id": {"type": "string"},
            "request_id": {"type": "string"},
            "version": {"type": "integer", "minimum": 1, "description": "Send it as expected_version on the next turn."},
            "status": {"enum": ["clarify", "ready", "blocked"]},
            "executed": {"const": false},
            "message": {"type": "string"},
            "errors": {"type": "array", "items": {"type": "object", "properties": {"pointer": {"type": "string"}, "detail": {"type": "string"}}, "required": ["pointer", "detail"]}},
            "proposal": {
                "type": "object",
                "properties": {
                    "operation_id": {"type": "string"},
                    "category_id": {"enum": CATEGORIES},
                    "arguments": {"type": "object", "description": "Validated against the contract's input_schema."},
                },
                "required": ["operation_id", "category_id", "arguments"],
            },
            "reason": {"type": "string", "description": "Why a blocked turn has no proposal (docs/conversations.md lists the codes)."},
            "attempts": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["conversation_id", "request_id", "version", "status", "executed", "message", "attempts"],
    })
}

/// Everything the route serves.
pub fn all() -> Value {
    json!({
        "turn": turn(),
        "work_contract": work_contract(),
        "response": response(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::turn::TurnBody;

    fn keys(schema: &Value) -> Vec<String> {
        let mut keys: Vec<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_turn_schema_names_exactly_the_body_fields() {
        let body: TurnBody = crate::json::from_slice(
            br#"{"conversation_id":"c","request_id":"r","expected_version":0,"message":"m","context_refs":[],"provider":"meta","provider_plan_ref":"p"}"#,
        )
        .unwrap();
        let value = serde_json::to_value(&body).unwrap();
        let mut fields: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        fields.sort();
        assert_eq!(keys(&turn()), fields);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_contract_schema_names_exactly_the_contract_fields() {
        let contract = json!({"operation_id":"op","category_id":"planning","description":"d","input_schema":{"type":"object","properties":{},"additionalProperties":false}});
        assert!(crate::conversation::contract::parse_work_contract(&contract).is_ok());
        let mut fields: Vec<String> = contract.as_object().unwrap().keys().cloned().collect();
        fields.sort();
        assert_eq!(keys(&work_contract()), fields);
    }
}
