//! Reading a Responses request: `instructions`, `input` (a string or items: messages,
//! `function_call`, `function_call_output`, `custom_tool_call`, `local_shell_call`,
//! `additional_tools`, …), `tools`, `prompt_cache_key`; and where a shim goes (a developer item
//! just before the latest user item).

use std::borrow::Cow;

use crate::wire::chat::tool_name as chat_tool_name;
use crate::wire::raw::{
    DECIDED_MEMBERS, Layout, Obj, Raw, bounded, content_text, joined_lines, offset_in, push_unique,
    raw_bool, raw_objects, raw_str,
};
use crate::wire::{
    Conversation, ConversationSource, Envelope, Insertion, MAX_TOOL_NAMES, MAX_TOOL_RESULT_CHARS,
    MAX_TOOL_RESULTS, Piece, Protocol, Splice, first_message_conversation, native_conversation,
    paths,
};

// ---- where a shim goes ------------------------------------------------------------------

/// The developer item a shim becomes, opened and closed around the shim.
const DEVELOPER_OPEN: &str =
    "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":";
const DEVELOPER_CLOSE: &str = "}]}";

/// A developer item inserted before the latest user item.
static DEVELOPER_ITEM: Splice = Splice {
    pieces: &[
        Piece::Json(DEVELOPER_OPEN),
        Piece::Shim,
        Piece::Json(DEVELOPER_CLOSE),
        Piece::Json(","),
    ],
    placement: "as a developer item just before the latest user item in `input`",
};

/// `input` given as a string: it becomes `[developer item, user message]`.
static WRAP_INPUT_STRING: Splice = Splice {
    pieces: &[
        Piece::Json("["),
        Piece::Json(DEVELOPER_OPEN),
        Piece::Shim,
        Piece::Json(DEVELOPER_CLOSE),
        Piece::Json(",{\"type\":\"message\",\"role\":\"user\",\"content\":"),
        Piece::Replaced,
        Piece::Json("}]"),
    ],
    placement: "as a developer item before the user's input",
};

// ---- reading ------------------------------------------------------------------------------

fn text_of(content: Option<Raw<'_>>) -> Option<String> {
    content_text(content, &["input_text", "text", "output_text"])
}

/// A Responses tool's name: `name` (function and custom tools), else its `type` (`web_search`).
fn tool_name(tool: &Obj<'_>) -> String {
    chat_tool_name(tool)
        .or_else(|| tool.str("type"))
        .unwrap_or_default()
}

pub(super) fn read(body: &str) -> Result<Envelope, serde_json::Error> {
    let layout = Layout::of(body);
    let top = Obj::body(body, layout.as_ref())?;
    let mut tools_offered = Vec::new();
    for (tool, _) in top.objects("tools") {
        push_unique(&mut tools_offered, tool_name(&tool), MAX_TOOL_NAMES);
    }

    let mut envelope = Envelope {
        protocol: Protocol::Responses,
        model: top.str("model"),
        repeated_member: top.repeated(DECIDED_MEMBERS),
        stream: raw_bool(top.get("stream")).unwrap_or(false),
        stream_usage: false,
        system: top.str("instructions"),
        user_text: String::new(),
        tools_offered,
        tools_called: Vec::new(),
        tool_results: Vec::new(),
        paths: Vec::new(),
        conversation: Conversation {
            id: String::new(),
            source: ConversationSource::None,
        },
        turn: 1,
        insertion: None,
    };

    let input = top.get("input");
    if let Some(raw) = input.filter(|raw| raw.get().starts_with('"')) {
        // A string input is one user message.
        let start = offset_in(body, raw);
        envelope.insertion = Some(Insertion {
            start,
            end: start + raw.get().len(),
            splice: &WRAP_INPUT_STRING,
        });
        envelope.conversation = first_message_conversation(Some(raw.get()));
        envelope.user_text = raw_str(Some(raw)).unwrap_or_default();
    } else {
        let parsed: Vec<(Cow<'_, str>, Cow<'_, str>, Obj<'_>, Raw<'_>)> = raw_objects(input)
            .into_iter()
            .map(|(item, raw)| {
                (
                    item.text("type").unwrap_or(Cow::Borrowed("message")),
                    item.text("role").unwrap_or_default(),
                    item,
                    raw,
                )
            })
            .collect();
        let mut window_start = 0;
        let mut last_user = None;
        for (i, (kind, role, item, _)) in parsed.iter().enumerate().rev() {
            if kind == "message" && role == "user" {
                last_user.get_or_insert(i);
                if let Some(text) = text_of(item.get("content")) {
                    envelope.user_text = text;
                    window_start = i;
                    break;
                }
            }
        }
        let mut system_parts: Vec<String> = envelope.system.take().into_iter().collect();
        for (i, (kind, role, item, _)) in parsed.iter().enumerate() {
            let in_window = i >= window_start;
            match &**kind {
                "message" if role == "system" || role == "developer" => {
                    system_parts.extend(text_of(item.get("content")))
                }
                "function_call" | "custom_tool_call" => {
                    let name = item.str("name").unwrap_or_default();
                    if in_window {
                        paths::from_tool_arguments(
                            &mut envelope.paths,
                            &name,
                            item.get("arguments").or(item.get("input")),
                        );
                    }
                    push_unique(&mut envelope.tools_called, name, MAX_TOOL_NAMES);
                }
                "local_shell_call" => {
                    if in_window {
                        paths::from_tool_input(
                            &mut envelope.paths,
                            "local_shell",
                            item.get("action"),
                        );
                    }
                    push_unique(
                        &mut envelope.tools_called,
                        "local_shell".into(),
                        MAX_TOOL_NAMES,
                    );
                }
                "function_call_output" | "custom_tool_call_output" | "local_shell_call_output"
                    if in_window && envelope.tool_results.len() < MAX_TOOL_RESULTS =>
                {
                    if let Some(text) = item.str("output").or_else(|| text_of(item.get("output"))) {
                        envelope
                            .tool_results
                            .push(bounded(text, MAX_TOOL_RESULT_CHARS));
                    }
                }
                "additional_tools" => {
                    for (tool, _) in item.objects("tools") {
                        push_unique(
                            &mut envelope.tools_offered,
                            tool_name(&tool),
                            MAX_TOOL_NAMES,
                        );
                    }
                }
                _ => {}
            }
        }
        envelope.system = joined_lines(system_parts);
        // Each model response is a run of output items between inputs.
        let mut responses = 0;
        let mut in_output = false;
        for (kind, role, _, _) in &parsed {
            let output = matches!(
                &**kind,
                "function_call"
                    | "custom_tool_call"
                    | "local_shell_call"
                    | "reasoning"
                    | "web_search_call"
            ) || (kind == "message" && role == "assistant");
            if output && !in_output {
                responses += 1;
            }
            in_output = output;
        }
        envelope.turn = 1 + responses;
        envelope.conversation = first_message_conversation(
            parsed
                .iter()
                .find(|(kind, role, _, _)| kind == "message" && role == "user")
                .map(|(_, _, _, raw)| raw.get()),
        );
        envelope.insertion =
            last_user.map(|i| Insertion::at(offset_in(body, parsed[i].3), &DEVELOPER_ITEM));
    }
    if let Some(key) = top.str("prompt_cache_key").filter(|k| !k.is_empty()) {
        envelope.conversation = native_conversation(key);
    }
    Ok(envelope)
}
