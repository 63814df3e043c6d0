//! Anthropic Messages: `system` (string or text blocks), `messages` with `tool_use` and
//! `tool_result` blocks, `tools`, `metadata.user_id`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    Conversation, Envelope, InsertKind, Insertion, MAX_TOOL_NAMES, MAX_TOOL_RESULT_CHARS,
    MAX_TOOL_RESULTS, Present, Protocol, WrapKind, array_close, bounded,
    first_message_conversation, object_open, offset_in, paths, push_unique, raw_array, raw_bool,
    raw_object, raw_str,
};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Top<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    stream: Option<&'a RawValue>,
    #[serde(borrow)]
    system: Present<'a>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Message<'a> {
    #[serde(borrow)]
    role: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Block<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Option<&'a RawValue>,
    #[serde(borrow)]
    pub text: Option<&'a RawValue>,
    #[serde(borrow)]
    pub name: Option<&'a RawValue>,
    #[serde(borrow)]
    pub input: Option<&'a RawValue>,
    #[serde(borrow)]
    pub content: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Named<'a> {
    #[serde(borrow)]
    name: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Metadata<'a> {
    #[serde(borrow)]
    user_id: Option<&'a RawValue>,
}

/// Text of a string-or-blocks content: the string, or the `text` blocks joined.
pub(crate) fn content_text(content: Option<&RawValue>, text_types: &[&str]) -> Option<String> {
    let content = content?;
    if let Some(text) = raw_str(Some(content)) {
        return Some(text);
    }
    let mut parts = Vec::new();
    for block in raw_array(Some(content)) {
        let block: Block<'_> = raw_object(block);
        let kind = raw_str(block.kind).unwrap_or_default();
        if text_types.contains(&kind.as_str())
            && let Some(text) = raw_str(block.text)
        {
            parts.push(text);
        }
    }
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// The session id inside Claude Code's `metadata.user_id`, which is a JSON string embedding
/// device and session ids (older versions: `user_…_account_…_session_<uuid>`).
fn session_from_user_id(user_id: &str) -> Option<String> {
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(user_id) {
        return map
            .get("session_id")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
    }
    user_id
        .rsplit_once("_session_")
        .map(|(_, s)| s.to_owned())
        .filter(|s| !s.is_empty() && s.len() <= 128)
}

pub(crate) fn extract(body: &str) -> Result<Envelope, serde_json::Error> {
    let top: Top<'_> = serde_json::from_str(body)?;
    let messages = raw_array(top.messages);
    let parsed: Vec<(String, Option<&RawValue>, &RawValue)> = messages
        .iter()
        .map(|raw| {
            let m: Message<'_> = raw_object(raw);
            (raw_str(m.role).unwrap_or_default(), m.content, *raw)
        })
        .collect();

    // The latest user turn: the last user message carrying text (not only tool results).
    let mut user_text = String::new();
    let mut window_start = 0;
    for (i, (role, content, _)) in parsed.iter().enumerate().rev() {
        if role == "user"
            && let Some(text) = content_text(*content, &["text"])
        {
            user_text = text;
            window_start = i;
            break;
        }
    }

    let mut tools_called = Vec::new();
    let mut tool_results = Vec::new();
    let mut found_paths = Vec::new();
    for (i, (_, content, _)) in parsed.iter().enumerate() {
        for block in raw_array(*content) {
            let block: Block<'_> = raw_object(block);
            match raw_str(block.kind).as_deref() {
                Some("tool_use") | Some("server_tool_use") => {
                    let name = raw_str(block.name).unwrap_or_default();
                    if i >= window_start {
                        paths::from_tool_input(&mut found_paths, &name, block.input);
                    }
                    push_unique(&mut tools_called, name, MAX_TOOL_NAMES);
                }
                Some("tool_result")
                    if i >= window_start && tool_results.len() < MAX_TOOL_RESULTS =>
                {
                    if let Some(text) = content_text(block.content, &["text"]) {
                        tool_results.push(bounded(text, MAX_TOOL_RESULT_CHARS));
                    }
                }
                _ => {}
            }
        }
    }

    let mut tools_offered = Vec::new();
    for tool in raw_array(top.tools) {
        let tool: Named<'_> = raw_object(tool);
        push_unique(
            &mut tools_offered,
            raw_str(tool.name).unwrap_or_default(),
            MAX_TOOL_NAMES,
        );
    }

    let system = match top.system.0 {
        Some(raw) => raw_str(Some(raw)).or_else(|| content_text(Some(raw), &["text"])),
        None => None,
    };

    let conversation = top
        .metadata
        .map(raw_object::<Metadata<'_>>)
        .and_then(|m| raw_str(m.user_id))
        .and_then(|user_id| session_from_user_id(&user_id))
        .map(|id| Conversation {
            id,
            source: super::ConversationSource::Native,
        })
        .unwrap_or_else(|| {
            first_message_conversation(
                parsed
                    .iter()
                    .find(|(role, _, _)| role == "user")
                    .map(|(_, _, raw)| raw.get()),
            )
        });

    let insertion = if parsed.is_empty() {
        None
    } else {
        match top.system.0 {
            Some(raw) => {
                let start = offset_in(body, raw);
                let end = start + raw.get().len();
                match raw.get().as_bytes().first() {
                    Some(b'"') => Some(Insertion::WrapString {
                        start,
                        end,
                        kind: WrapKind::AnthropicSystemString,
                    }),
                    Some(b'n') => Some(Insertion::WrapString {
                        start,
                        end,
                        kind: WrapKind::AnthropicSystemNull,
                    }),
                    Some(b'[') => array_close(body, raw).map(|(at, empty)| Insertion::At {
                        at,
                        kind: InsertKind::SystemBlockAppend { first: empty },
                    }),
                    // A `system` Herma cannot read: leave the request as it is.
                    _ => None,
                }
            }
            None => object_open(body).map(|(at, empty)| Insertion::At {
                at,
                kind: InsertKind::SystemMember {
                    first_member: empty,
                },
            }),
        }
    };

    Ok(Envelope {
        protocol: Protocol::Messages,
        model: raw_str(top.model),
        stream: raw_bool(top.stream).unwrap_or(false),
        stream_usage: false,
        system,
        user_text,
        tools_offered,
        tools_called,
        tool_results,
        paths: found_paths,
        conversation,
        insertion,
    })
}
