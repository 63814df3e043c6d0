//! File paths a request touches: named in tool inputs (reads, writes, edits, patches, shell
//! commands) and mentioned in the user's text. Path-glob triggers match against these.

use super::raw::Raw;
use serde_json::Value;

pub const MAX_PATHS: usize = 64;
pub const MAX_PATH_CHARS: usize = 512;

/// Tool-input members that hold a path (Claude Code, Codex, opencode and common MCP tools).
const PATH_KEYS: [&str; 10] = [
    "file_path",
    "path",
    "filePath",
    "notebook_path",
    "filename",
    "file",
    "target_file",
    "paths",
    "files",
    "workdir",
];
/// Members that hold free text worth scanning: shell commands and patches.
const TEXT_KEYS: [&str; 5] = ["command", "cmd", "patch", "input", "diff"];

fn push(paths: &mut Vec<String>, candidate: &str) {
    let candidate = candidate.trim();
    let candidate = candidate.strip_prefix("./").unwrap_or(candidate);
    if candidate.is_empty() || candidate.len() > MAX_PATH_CHARS || paths.len() >= MAX_PATHS {
        return;
    }
    if candidate.contains("://") || candidate.contains('\n') {
        return;
    }
    if !paths.iter().any(|p| p == candidate) {
        paths.push(candidate.to_owned());
    }
}

/// Paths in a structured tool input (`tool_use.input`, `local_shell_call.action`).
pub(crate) fn from_tool_input(paths: &mut Vec<String>, _tool: &str, input: Option<Raw<'_>>) {
    let Some(input) = input else { return };
    if let Ok(value) = serde_json::from_str::<Value>(input.get()) {
        walk(paths, &value, 0);
    }
}

/// Paths in function-call `arguments` (a JSON string holding JSON) or a free-form custom tool
/// input (for example a Codex `apply_patch` body).
pub(crate) fn from_tool_arguments(paths: &mut Vec<String>, tool: &str, arguments: Option<Raw<'_>>) {
    let Some(arguments) = arguments else { return };
    match serde_json::from_str::<Value>(arguments.get()) {
        Ok(Value::String(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(value @ Value::Object(_)) => walk(paths, &value, 0),
            _ => scan_free_text(paths, &text),
        },
        Ok(value) => walk(paths, &value, 0),
        Err(_) => {}
    }
    let _ = tool;
}

fn walk(paths: &mut Vec<String>, value: &Value, depth: usize) {
    if depth > 8 || paths.len() >= MAX_PATHS {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match v {
                    Value::String(s) if PATH_KEYS.contains(&key.as_str()) => push(paths, s),
                    Value::String(s) if TEXT_KEYS.contains(&key.as_str()) => {
                        scan_free_text(paths, s)
                    }
                    Value::Array(items)
                        if PATH_KEYS.contains(&key.as_str())
                            || TEXT_KEYS.contains(&key.as_str()) =>
                    {
                        // `paths: [...]`, or a command given as argv (`["cat", "src/a.rs"]`).
                        for item in items {
                            if let Value::String(s) = item {
                                if PATH_KEYS.contains(&key.as_str()) {
                                    push(paths, s);
                                } else {
                                    add_text_paths(paths, s);
                                }
                            }
                        }
                    }
                    other => walk(paths, other, depth + 1),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| walk(paths, v, depth + 1)),
        _ => {}
    }
}

/// Patches name their files on header lines; anything else is scanned as text.
fn scan_free_text(paths: &mut Vec<String>, text: &str) {
    for line in text.lines() {
        let line = line.trim_end();
        let header = [
            "*** Update File: ",
            "*** Add File: ",
            "*** Delete File: ",
            "*** Move to: ",
        ]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix))
        .or_else(|| {
            ["+++ ", "--- "]
                .iter()
                .find_map(|prefix| line.strip_prefix(prefix))
                .map(|rest| rest.split('\t').next().unwrap_or(rest))
                .filter(|rest| *rest != "/dev/null")
                .map(|rest| {
                    rest.strip_prefix("a/")
                        .or_else(|| rest.strip_prefix("b/"))
                        .unwrap_or(rest)
                })
        });
        match header {
            Some(path) => push(paths, path),
            None => add_text_paths(paths, line),
        }
    }
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '~' | '@' | '+')
}

/// Path-like tokens in prose: `src/lib.rs`, `./Cargo.toml`, `/etc/hosts`, `main.tf`. A token is
/// a run of path characters ([`is_path_char`]); only one holding a `/` or a `.` can look like a
/// path, so the text is searched for those two bytes and only the tokens around them are read
/// (the rest of the text is not decoded character by character). The tokens read are the ones
/// splitting the whole text would find with a `/` or a `.` in them, in the same order.
pub fn add_text_paths(paths: &mut Vec<String>, text: &str) {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(found) = bytes
        .get(from..)
        .and_then(|rest| memchr::memchr2(b'/', b'.', rest))
    {
        if paths.len() >= MAX_PATHS {
            return;
        }
        // An ASCII byte: a character boundary, and a path character.
        let at = from + found;
        let (before, after) = text.split_at(at);
        // The run of path characters holding it. The last token ended at a character that is
        // not one (or this is the first), so the run does not reach back into it.
        let start = before
            .char_indices()
            .rev()
            .take_while(|&(_, c)| is_path_char(c))
            .last()
            .map_or(at, |(i, _)| i);
        let end = after
            .char_indices()
            .find(|&(_, c)| !is_path_char(c))
            .map_or(text.len(), |(i, _)| at + i);
        add_token_path(paths, text.get(start..end).unwrap_or_default());
        from = end;
    }
}

/// Adds `token`, a run of path characters, when it looks like a path.
fn add_token_path(paths: &mut Vec<String>, token: &str) {
    let token = token.trim_end_matches(['.', '-']).trim_start_matches(['-']);
    if token.len() < 3 || is_slash_command(token) {
        return;
    }
    if looks_like_path(token) {
        push(paths, token);
    }
}

/// A harness slash command in prose (`/herma`, `/review`, `/compact`): one segment after a
/// leading slash, no extension. Not a file path; real absolute paths in prose have at least two
/// segments (`/etc/hosts`) or an extension (`/notes.md`).
fn is_slash_command(token: &str) -> bool {
    token
        .strip_prefix('/')
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(['/', '.']))
}

fn looks_like_path(token: &str) -> bool {
    if token.contains('/') {
        // At least one segment with a letter, and not only slashes and dots.
        return token
            .split('/')
            .any(|seg| seg.chars().any(char::is_alphabetic))
            && !token.contains("//");
    }
    // A dotfile: `.env`, `.gitignore`.
    if let Some(rest) = token.strip_prefix('.') {
        return rest.len() >= 2
            && rest.starts_with(|c: char| c.is_ascii_alphabetic())
            && rest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    }
    // A bare file name: a stem with a letter and a short extension with a letter
    // (`main.tf`, `foo.test.ts`; not `1.2.3`, `v1.2.3` or `e.g`).
    match token.rsplit_once('.') {
        Some((stem, ext)) => {
            stem.chars().any(char::is_alphabetic)
                && (stem.len() >= 2 || ext.len() >= 2)
                && (1..=10).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn text_paths(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        add_text_paths(&mut out, text);
        // Every token read, as splitting the whole text reads them, finds the same.
        let mut split = Vec::new();
        for token in text.split(|c: char| !is_path_char(c)) {
            if split.len() >= MAX_PATHS {
                break;
            }
            add_token_path(&mut split, token);
        }
        assert_eq!(out, split, "{text:?}");
        out
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn prose_mentions() {
        assert_eq!(
            text_paths(
                "Fix the bug in src/lib.rs and ./Cargo.toml, then check /etc/hosts and main.tf."
            ),
            ["src/lib.rs", "Cargo.toml", "/etc/hosts", "main.tf"]
        );
        assert!(
            text_paths("version 1.2.3 or v1.2.3, e.g. this, see https://example.com/x.html")
                .is_empty()
        );
        assert_eq!(
            text_paths("never commit .env or foo.test.ts"),
            [".env", "foo.test.ts"]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn tool_inputs_and_patches() {
        let mut out = Vec::new();
        let input = RawValue::from_string(
            r#"{"file_path":"/repo/src/a.rs","command":"cat docs/b.md | head"}"#.into(),
        )
        .unwrap();
        from_tool_input(&mut out, "Read", Some(Raw::from(&*input)));
        let args = RawValue::from_string(
            serde_json::to_string(r#"{"paths":["x/y.py"],"cmd":["rg","foo","lib/z.ts"]}"#).unwrap(),
        )
        .unwrap();
        from_tool_arguments(&mut out, "shell", Some(Raw::from(&*args)));
        let patch =
            "*** Begin Patch\n*** Update File: crates/core/src/x.rs\n@@\n-a\n+b\n*** End Patch";
        let freeform = RawValue::from_string(serde_json::to_string(patch).unwrap()).unwrap();
        from_tool_arguments(&mut out, "apply_patch", Some(Raw::from(&*freeform)));
        let diff =
            RawValue::from_string(r#"{"diff":"--- a/old.txt\n+++ b/new.txt\n"}"#.into()).unwrap();
        from_tool_input(&mut out, "Edit", Some(Raw::from(&*diff)));
        assert_eq!(
            out,
            [
                "/repo/src/a.rs",
                "docs/b.md",
                "x/y.py",
                "lib/z.ts",
                "crates/core/src/x.rs",
                "old.txt",
                "new.txt"
            ]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn slash_commands_are_not_paths() {
        assert!(text_paths("/herma").is_empty());
        assert!(text_paths("/review the change, then /compact").is_empty());
        assert_eq!(
            text_paths("/herma where is /etc/hosts and /notes.md"),
            ["/etc/hosts", "/notes.md"]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn bounded() {
        let many: String = (0..500).map(|i| format!("f{i}.rs ")).collect();
        assert_eq!(text_paths(&many).len(), MAX_PATHS);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn tokens_around_slashes_and_dots_are_the_ones_splitting_finds() {
        for text in [
            "",
            ".",
            "/",
            "a.b",
            "..//..",
            "-./x.rs-",
            "see é/日本.md, ./a/b.c; ~/x@y+z.tar.gz and --v1.2.3",
            "trailing dot. then x.y.",
            "/etc/hosts/",
            "naïve café/crème.txt",
            "no candidates here at all",
        ] {
            text_paths(text);
        }
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn any_text_gives_what_splitting_it_gives(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "src", "lib", "rs", "é", "日本", "1", "v2", "/", ".", "..", "./",
                    "-", "_", "~", "@", "+", " ", ",", ":", "\n", "//", "://", "\t",
                ]),
                0..40,
            ),
        ) {
            text_paths(&parts.concat());
        }
    }
}
