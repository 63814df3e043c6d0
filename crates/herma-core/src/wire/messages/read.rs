//! Reading a Messages request: `system` (string or text blocks), `messages` with `tool_use`
//! and `tool_result` blocks, `tools`, `metadata.user_id`; and where a shim goes (a text block
//! at the end of `system`, after the harness's cache-marked blocks).

use std::borrow::Cow;

use crate::wire::raw::{
    DECIDED_MEMBERS, Layout, Obj, Raw, array_close, bounded, content_text, object_open, offset_in,
    push_unique, raw_bool, raw_objects, raw_str,
};
use crate::wire::{
    Envelope, Insertion, MAX_TOOL_NAMES, MAX_TOOL_RESULT_CHARS, MAX_TOOL_RESULTS, Piece, Protocol,
    Splice, first_message_conversation, native_conversation, paths,
};

// ---- where a shim goes ------------------------------------------------------------------

/// A `system` array with blocks: the shim is appended as its last block.
static APPEND_BLOCK: Splice = Splice {
    pieces: &[
        Piece::Json(",{\"type\":\"text\",\"text\":"),
        Piece::Shim,
        Piece::Json("}"),
    ],
    placement: "appended as the last block of `system`",
};

/// An empty `system` array: the shim is its only block.
static FIRST_BLOCK: Splice = Splice {
    pieces: &[
        Piece::Json("{\"type\":\"text\",\"text\":"),
        Piece::Shim,
        Piece::Json("}"),
    ],
    placement: "appended as the last block of `system`",
};

/// No `system`: the member is added right after the body's `{`, before the others.
static NEW_SYSTEM: Splice = Splice {
    pieces: &[
        Piece::Json("\"system\":[{\"type\":\"text\",\"text\":"),
        Piece::Shim,
        Piece::Json("}],"),
    ],
    placement: "as a new `system` block (the request had none)",
};

/// No `system` in an empty body object.
static ONLY_SYSTEM: Splice = Splice {
    pieces: &[
        Piece::Json("\"system\":[{\"type\":\"text\",\"text\":"),
        Piece::Shim,
        Piece::Json("}]"),
    ],
    placement: "as a new `system` block (the request had none)",
};

/// `system` given as a string: it becomes `[{text: original}, {text: shim}]`.
static WRAP_SYSTEM_STRING: Splice = Splice {
    pieces: &[
        Piece::Json("[{\"type\":\"text\",\"text\":"),
        Piece::Replaced,
        Piece::Json("},{\"type\":\"text\",\"text\":"),
        Piece::Shim,
        Piece::Json("}]"),
    ],
    placement: "as a second `system` block after the original system text",
};

/// `system: null`: it becomes `[{text: shim}]`.
static REPLACE_NULL_SYSTEM: Splice = Splice {
    pieces: &[
        Piece::Json("[{\"type\":\"text\",\"text\":"),
        Piece::Shim,
        Piece::Json("}]"),
    ],
    placement: "as the `system` block (the request's `system` was null)",
};

// ---- reading ------------------------------------------------------------------------------

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
        .filter(|s| !s.is_empty())
}

pub(super) fn read(body: &str) -> Result<Envelope, serde_json::Error> {
    let layout = Layout::of(body);
    let top = Obj::body(body, layout.as_ref())?;
    let parsed: Vec<(Cow<'_, str>, Option<Raw<'_>>, Raw<'_>)> = top
        .objects("messages")
        .into_iter()
        .map(|(m, raw)| (m.text("role").unwrap_or_default(), m.get("content"), raw))
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
        for (block, _) in raw_objects(*content) {
            match block.text("type").as_deref() {
                Some("tool_use") | Some("server_tool_use") => {
                    let name = block.str("name").unwrap_or_default();
                    if i >= window_start {
                        paths::from_tool_input(&mut found_paths, &name, block.get("input"));
                    }
                    push_unique(&mut tools_called, name, MAX_TOOL_NAMES);
                }
                Some("tool_result")
                    if i >= window_start && tool_results.len() < MAX_TOOL_RESULTS =>
                {
                    if let Some(text) = content_text(block.get("content"), &["text"]) {
                        tool_results.push(bounded(text, MAX_TOOL_RESULT_CHARS));
                    }
                }
                _ => {}
            }
        }
    }

    let mut tools_offered = Vec::new();
    for (tool, _) in top.objects("tools") {
        push_unique(
            &mut tools_offered,
            tool.str("name").unwrap_or_default(),
            MAX_TOOL_NAMES,
        );
    }

    let system_raw = top.get("system");
    let system = system_raw
        .and_then(|raw| raw_str(Some(raw)).or_else(|| content_text(Some(raw), &["text"])));

    let conversation = Obj::of(top.get("metadata"))
        .str("user_id")
        .and_then(|user_id| session_from_user_id(&user_id))
        .map(native_conversation)
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
        match system_raw {
            Some(raw) => {
                let start = offset_in(body, raw);
                let wrap = |splice| Insertion {
                    start,
                    end: start + raw.get().len(),
                    splice,
                };
                match raw.get().as_bytes().first() {
                    Some(b'"') => Some(wrap(&WRAP_SYSTEM_STRING)),
                    Some(b'n') => Some(wrap(&REPLACE_NULL_SYSTEM)),
                    Some(b'[') => array_close(body, raw).map(|(at, empty)| {
                        Insertion::at(at, if empty { &FIRST_BLOCK } else { &APPEND_BLOCK })
                    }),
                    // A `system` Herma cannot read: leave the request as it is.
                    _ => None,
                }
            }
            None => object_open(body).map(|(at, empty)| {
                Insertion::at(at, if empty { &ONLY_SYSTEM } else { &NEW_SYSTEM })
            }),
        }
    };

    Ok(Envelope {
        protocol: Protocol::Messages,
        model: top.str("model"),
        repeated_member: top.repeated(DECIDED_MEMBERS),
        stream: raw_bool(top.get("stream")).unwrap_or(false),
        stream_usage: false,
        system,
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
