//! The answer's text, read back from a relayed response (JSON or SSE) for entity memory. Runs
//! after the response is done, never on the request path. Where the text is in an event or a
//! body is the protocol's knowledge
//! ([`WireProtocol::stream_text`](super::WireProtocol::stream_text),
//! [`WireProtocol::body_text`](super::WireProtocol::body_text)).

use serde_json::Value;

use super::Protocol;
use super::sse::Reader;

/// The assistant text of a response body, up to `max` characters.
pub fn response_text(protocol: Protocol, streaming: bool, body: &[u8], max: usize) -> String {
    let mut out = String::new();
    // Counted as it grows: recounting per delta would be quadratic in a long stream.
    let mut chars = 0usize;
    let mut push = |text: &str| {
        let room = max.saturating_sub(chars);
        let before = out.len();
        out.extend(text.chars().take(room));
        chars += out[before..].chars().count();
    };

    let wire = protocol.wire();
    if streaming {
        let mut reader = Reader::default();
        reader.feed(body, &mut |event| {
            if let Ok(data) = serde_json::from_str::<Value>(&event.data)
                && let Some(text) = wire.stream_text(&data)
            {
                push(text);
            }
        });
    } else if let Ok(data) = serde_json::from_slice::<Value>(body) {
        wire.body_text(&data, &mut push);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;
    use crate::wire::direct::DirectAnswer;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn text_is_read_back_from_every_protocol_and_shape() {
        for protocol in Protocol::ALL {
            let answer = DirectAnswer {
                protocol,
                model: "m",
                text: "see src/lib.rs",
                id_hex: "1",
                created: Timestamp::default(),
                stream_usage: false,
            };
            assert_eq!(
                response_text(protocol, false, answer.json().to_string().as_bytes(), 100),
                "see src/lib.rs"
            );
            assert_eq!(
                response_text(protocol, true, &answer.sse(), 100),
                "see src/lib.rs"
            );
            assert_eq!(response_text(protocol, true, &answer.sse(), 3), "see");
        }
        assert_eq!(response_text(Protocol::Messages, false, b"garbage", 10), "");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_text_stops_at_max_characters_across_deltas() {
        let delta = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"abcé"}}"#;
        let body = format!("event: content_block_delta\ndata: {delta}\n\n").repeat(1000);
        let text = response_text(Protocol::Messages, true, body.as_bytes(), 10);
        assert_eq!(text, "abcéabcéab");
        let all = response_text(Protocol::Messages, true, body.as_bytes(), usize::MAX);
        assert_eq!(all.chars().count(), 4000);
    }
}
