//! The support matrix and the request encoders of the three protocols.

use serde_json::json;

use super::*;
use crate::wire::Protocol;

fn request(
    tools: Vec<ToolSpec>,
    choice: Option<ToolChoice>,
    temperature: Option<f64>,
) -> ModelRequest {
    ModelRequest {
        system: None,
        messages: vec![Msg::user("hi")],
        tools,
        output: None,
        call: None,
        controls: Controls {
            model: "m".into(),
            max_tokens: 100,
            temperature,
            tool_choice: choice,
            cache: None,
        },
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_support_matrix_refuses_before_any_network_access() {
    let tool = ToolSpec {
        name: "extract".into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
    };
    for protocol in [
        Protocol::Responses,
        Protocol::Messages,
        Protocol::ChatCompletions,
    ] {
        assert!(protocol.validate(&request(vec![], None, Some(0.5))).is_ok());
        assert_eq!(
            protocol
                .validate(&request(vec![], Some(ToolChoice::Auto), None))
                .unwrap_err()
                .field,
            "controls.tool_choice"
        );
        assert!(
            protocol
                .validate(&request(
                    vec![tool.clone()],
                    Some(ToolChoice::Tool {
                        name: "extract".into()
                    }),
                    None
                ))
                .is_ok()
        );
        assert!(
            protocol
                .validate(&request(
                    vec![tool.clone()],
                    Some(ToolChoice::Tool {
                        name: "other".into()
                    }),
                    None
                ))
                .is_err()
        );
        assert_eq!(
            protocol
                .validate(&request(vec![], None, Some(f64::NAN)))
                .unwrap_err()
                .field,
            "controls.temperature"
        );
    }
    assert!(
        Protocol::Messages
            .validate(&request(vec![], None, Some(1.5)))
            .is_err()
    );
    assert!(
        Protocol::Responses
            .validate(&request(vec![], None, Some(1.5)))
            .is_ok()
    );
    let mut cached = request(vec![], None, None);
    cached.controls.cache = Some(false);
    assert!(Protocol::Messages.validate(&cached).is_ok());
    assert_eq!(
        Protocol::Responses.validate(&cached).unwrap_err().field,
        "controls.cache"
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn requests_carry_controls_in_each_wire_format() {
    let tool = ToolSpec {
        name: "extract".into(),
        description: "d".into(),
        input_schema: json!({"type": "object"}),
    };
    let r = request(
        vec![tool],
        Some(ToolChoice::Tool {
            name: "extract".into(),
        }),
        Some(0.2),
    );
    let a = Protocol::Messages.encode(&r);
    assert_eq!(a["tool_choice"], json!({"type": "tool", "name": "extract"}));
    assert_eq!(a["temperature"], json!(0.2));
    assert_eq!(a["stream"], json!(true));
    let o = Protocol::Responses.encode(&r);
    assert_eq!(
        o["tool_choice"],
        json!({"type": "function", "name": "extract"})
    );
    assert_eq!(o["max_output_tokens"], json!(100));
    let c = Protocol::ChatCompletions.encode(&r);
    assert_eq!(
        c["tool_choice"],
        json!({"type": "function", "function": {"name": "extract"}})
    );
    assert_eq!(c["stream_options"], json!({"include_usage": true}));
}
