//! Reading a Chat Completions request: `messages` with `system`/`developer` roles, assistant
//! `tool_calls` and `tool` results, `tools[].function.name`; and where a shim goes (a system
//! message just before the latest user message).

use std::borrow::Cow;

use crate::wire::raw::{
    DECIDED_MEMBERS, Layout, Obj, Raw, bounded, content_text, joined_lines, offset_in, push_unique,
    raw_bool,
};
use crate::wire::{
    Envelope, Insertion, MAX_TOOL_NAMES, MAX_TOOL_RESULT_CHARS, MAX_TOOL_RESULTS, Piece, Protocol,
    Splice, first_message_conversation, native_conversation, paths,
};

/// A system message inserted before the latest user message.
static SYSTEM_MESSAGE: Splice = Splice {
    pieces: &[
        Piece::Json("{\"role\":\"system\",\"content\":"),
        Piece::Shim,
        Piece::Json("},"),
    ],
    placement: "as a system message just before the latest user message",
};

/// Text parts of a chat `content` (a string, or parts of type `text`).
fn text_of(content: Option<Raw<'_>>) -> Option<String> {
    content_text(content, &["text", "input_text"])
}

/// The name of a tool definition: `function.name`, `custom.name` or `name`.
pub(in crate::wire) fn tool_name(tool: &Obj<'_>) -> Option<String> {
    tool.get("function")
        .or(tool.get("custom"))
        .map(|f| Obj::of(Some(f)))
        .and_then(|f| f.str("name"))
        .or_else(|| tool.str("name"))
}

pub(super) fn read(body: &str) -> Result<Envelope, serde_json::Error> {
    let layout = Layout::of(body);
    let top = Obj::body(body, layout.as_ref())?;
    let parsed: Vec<(Cow<'_, str>, Obj<'_>, Raw<'_>)> = top
        .objects("messages")
        .into_iter()
        .map(|(m, raw)| (m.text("role").unwrap_or_default(), m, raw))
        .collect();

    let mut system_parts = Vec::new();
    let mut user_text = String::new();
    let mut window_start = 0;
    let mut last_user = None;
    for (i, (role, m, _)) in parsed.iter().enumerate().rev() {
        if role == "user" {
            last_user.get_or_insert(i);
            if let Some(text) = text_of(m.get("content")) {
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
        match &**role {
            "system" | "developer" => system_parts.extend(text_of(m.get("content"))),
            "assistant" => {
                for (call, _) in m.objects("tool_calls") {
                    let Some(function) = call.get("function").or(call.get("custom")) else {
                        continue;
                    };
                    let function = Obj::of(Some(function));
                    let name = function.str("name").unwrap_or_default();
                    if i >= window_start {
                        paths::from_tool_arguments(
                            &mut found_paths,
                            &name,
                            function.get("arguments").or(function.get("input")),
                        );
                    }
                    push_unique(&mut tools_called, name, MAX_TOOL_NAMES);
                }
            }
            "tool" if i >= window_start && tool_results.len() < MAX_TOOL_RESULTS => {
                if let Some(text) = text_of(m.get("content")) {
                    tool_results.push(bounded(text, MAX_TOOL_RESULT_CHARS));
                }
            }
            _ => {}
        }
    }

    let mut tools_offered = Vec::new();
    for (tool, _) in top
        .objects("tools")
        .into_iter()
        .chain(top.objects("functions"))
    {
        push_unique(
            &mut tools_offered,
            tool_name(&tool).unwrap_or_default(),
            MAX_TOOL_NAMES,
        );
    }

    let conversation = top
        .str("prompt_cache_key")
        .filter(|k| !k.is_empty())
        .map(native_conversation)
        .unwrap_or_else(|| {
            first_message_conversation(
                parsed
                    .iter()
                    .find(|(r, _, _)| r == "user")
                    .map(|(_, _, raw)| raw.get()),
            )
        });

    let insertion = last_user.map(|i| Insertion::at(offset_in(body, parsed[i].2), &SYSTEM_MESSAGE));

    Ok(Envelope {
        protocol: Protocol::ChatCompletions,
        model: top.str("model"),
        repeated_member: top.repeated(DECIDED_MEMBERS),
        stream: raw_bool(top.get("stream")).unwrap_or(false),
        stream_usage: raw_bool(Obj::of(top.get("stream_options")).get("include_usage"))
            .unwrap_or(false),
        system: joined_lines(system_parts),
        user_text,
        tools_offered,
        tools_called,
        tool_results,
        paths: found_paths,
        conversation,
        turn: 1 + parsed
            .iter()
            .filter(|(role, _, _)| role == "assistant")
            .count() as u64,
        insertion,
    })
}
