//! OpenAI Chat Completions: `messages` with `system`/`developer` roles, assistant
//! `tool_calls` and `tool` results, `tools[].function.name`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::messages::content_text;
use super::{
    Conversation, ConversationSource, Envelope, InsertKind, Insertion, MAX_TOOL_NAMES,
    MAX_TOOL_RESULT_CHARS, MAX_TOOL_RESULTS, Protocol, bounded, first_message_conversation,
    offset_in, paths, push_unique, raw_array, raw_bool, raw_object, raw_str,
};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Top<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    stream: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
    #[serde(borrow)]
    functions: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt_cache_key: Option<&'a RawValue>,
    #[serde(borrow)]
    stream_options: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamOptions<'a> {
    #[serde(borrow)]
    include_usage: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Message<'a> {
    #[serde(borrow)]
    role: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ToolCall<'a> {
    #[serde(borrow)]
    function: Option<&'a RawValue>,
    #[serde(borrow)]
    custom: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Function<'a> {
    #[serde(borrow)]
    pub name: Option<&'a RawValue>,
    #[serde(borrow)]
    pub arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    pub input: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Tool<'a> {
    #[serde(borrow)]
    function: Option<&'a RawValue>,
    #[serde(borrow)]
    custom: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
}

/// Text parts of a chat `content` (a string, or parts of type `text`).
fn text_of(content: Option<&RawValue>) -> Option<String> {
    content_text(content, &["text", "input_text"])
}

pub(crate) fn extract(body: &str) -> Result<Envelope, serde_json::Error> {
    let top: Top<'_> = serde_json::from_str(body)?;
    let messages = raw_array(top.messages);
    let parsed: Vec<(String, Message<'_>, &RawValue)> = messages
        .iter()
        .map(|raw| {
            let m: Message<'_> = raw_object(raw);
            (raw_str(m.role).unwrap_or_default(), m, *raw)
        })
        .collect();

    let mut system_parts = Vec::new();
    let mut user_text = String::new();
    let mut window_start = 0;
    let mut last_user = None;
    for (i, (role, m, _)) in parsed.iter().enumerate().rev() {
        if role == "user" {
            last_user.get_or_insert(i);
            if let Some(text) = text_of(m.content) {
                user_text = text;
                window_start = i;
                break;
            }
        }
    }
    let mut tools_called = Vec::new();
    let mut tool_results = Vec::new();
    let mut found_paths = Vec::new();
    for (i, (role, m, _)) in parsed.iter().enumerate() {
        match role.as_str() {
            "system" | "developer" => system_parts.extend(text_of(m.content)),
            "assistant" => {
                for call in raw_array(m.tool_calls) {
                    let call: ToolCall<'_> = raw_object(call);
                    let Some(f) = call.function.or(call.custom) else {
                        continue;
                    };
                    let f: Function<'_> = raw_object(f);
                    let name = raw_str(f.name).unwrap_or_default();
                    if i >= window_start {
                        paths::from_tool_arguments(
                            &mut found_paths,
                            &name,
                            f.arguments.or(f.input),
                        );
                    }
                    push_unique(&mut tools_called, name, MAX_TOOL_NAMES);
                }
            }
            "tool" if i >= window_start && tool_results.len() < MAX_TOOL_RESULTS => {
                if let Some(text) = text_of(m.content) {
                    tool_results.push(bounded(text, MAX_TOOL_RESULT_CHARS));
                }
            }
            _ => {}
        }
    }

    let mut tools_offered = Vec::new();
    for tool in raw_array(top.tools)
        .into_iter()
        .chain(raw_array(top.functions))
    {
        let t: Tool<'_> = raw_object(tool);
        let name = match t.function.or(t.custom) {
            Some(f) => raw_str(raw_object::<Function<'_>>(f).name),
            None => raw_str(t.name),
        };
        push_unique(&mut tools_offered, name.unwrap_or_default(), MAX_TOOL_NAMES);
    }

    let conversation = raw_str(top.prompt_cache_key)
        .filter(|k| !k.is_empty())
        .map(|id| Conversation {
            id,
            source: ConversationSource::Native,
        })
        .unwrap_or_else(|| {
            first_message_conversation(
                parsed
                    .iter()
                    .find(|(r, _, _)| r == "user")
                    .map(|(_, _, raw)| raw.get()),
            )
        });

    let insertion = last_user.map(|i| Insertion::At {
        at: offset_in(body, parsed[i].2),
        kind: InsertKind::ChatSystemMessage,
    });

    Ok(Envelope {
        protocol: Protocol::ChatCompletions,
        model: raw_str(top.model),
        stream: raw_bool(top.stream).unwrap_or(false),
        stream_usage: top
            .stream_options
            .map(raw_object::<StreamOptions<'_>>)
            .and_then(|o| raw_bool(o.include_usage))
            .unwrap_or(false),
        system: (!system_parts.is_empty()).then(|| system_parts.join("\n")),
        user_text,
        tools_offered,
        tools_called,
        tool_results,
        paths: found_paths,
        conversation,
        insertion,
    })
}
