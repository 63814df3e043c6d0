//! One pass over a proxied body that checks it is JSON and notes where each of its objects and
//! arrays closes, so that the walkers step over a nested value without reading it again.
//!
//! The check is serde_json's for a value it skips (which is how it reads every member Herma
//! keeps as raw text): the JSON grammar, strings free of raw control characters, escapes that
//! JSON has, `\u` with four hex digits, nothing but whitespace after the value and no limit on
//! nesting. What serde_json decodes rather than skips — the top-level keys, where a lone
//! surrogate escape is refused — the walkers decode with serde_json itself. A body this pass
//! refuses is read by serde_json as before (which then names what is wrong), so the pass only
//! ever has to agree with serde_json on what it accepts.

use super::skip_space;

/// Where each object and array of a checked JSON text closes, by where it opens.
#[derive(Debug)]
pub(crate) struct Layout<'a> {
    text: &'a str,
    /// Offsets of the noted `{` and `[`, ascending (the order they open in).
    opens: Vec<u32>,
    /// Offset of the matching `}` or `]`, beside each of `opens`.
    closes: Vec<u32>,
}

/// At most one container noted per this many bytes of body (or [`ALWAYS_NOTED`]): a large body
/// of nothing but brackets costs its noted positions about half its own size, and the pass's
/// stacks about three quarters more (serde_json's own skipping holds one byte per open level,
/// up to half); containers past the budget are walked as before.
const BYTES_PER_NOTE: usize = 16;
/// Containers any body may have noted.
const ALWAYS_NOTED: usize = 64;
/// Containers open at once that the walk makes room for at its start (more are fine: its
/// stacks grow).
const NESTING_ROOM: usize = 16;

impl<'a> Layout<'a> {
    /// The layout of `text` if it is one JSON value as serde_json would skip it; `None` when it
    /// is not (or is too large for 32-bit offsets).
    pub(crate) fn of(text: &'a str) -> Option<Layout<'a>> {
        let bytes = text.as_bytes();
        u32::try_from(bytes.len()).ok()?;
        let budget = (bytes.len() / BYTES_PER_NOTE).max(ALWAYS_NOTED);
        let mut layout = Layout {
            text,
            opens: Vec::with_capacity(ALWAYS_NOTED),
            closes: Vec::with_capacity(ALWAYS_NOTED),
        };
        // Whether each open container is an object, innermost last; and which of `opens` the
        // noted ones among them are (always the outermost: noting stops for good at `budget`).
        // Room for the nesting of any request a harness sends, so neither grows on the way.
        let mut objects: Vec<bool> = Vec::with_capacity(NESTING_ROOM);
        let mut noted: Vec<u32> = Vec::with_capacity(NESTING_ROOM);
        let mut at = skip_space(bytes, 0);
        'value: loop {
            // `at` is where a value starts.
            let mut end = match *bytes.get(at)? {
                open @ (b'{' | b'[') => {
                    let object = open == b'{';
                    objects.push(object);
                    if layout.opens.len() < budget {
                        noted.push(layout.opens.len() as u32);
                        layout.opens.push(at as u32);
                        layout.closes.push(0);
                    }
                    at = skip_space(bytes, at + 1);
                    let close = if object { b'}' } else { b']' };
                    if bytes.get(at) != Some(&close) {
                        at = if object { key(bytes, at)? } else { at };
                        continue 'value;
                    }
                    layout.close(&mut objects, &mut noted, at);
                    at + 1
                }
                b'"' => string_end(bytes, at)?,
                b't' => literal(bytes, at, b"true")?,
                b'f' => literal(bytes, at, b"false")?,
                b'n' => literal(bytes, at, b"null")?,
                b'-' | b'0'..=b'9' => number_end(bytes, at)?,
                _ => return None,
            };
            // After a value: a separator, or the close of what holds it.
            loop {
                end = skip_space(bytes, end);
                let Some(&object) = objects.last() else {
                    return (end == bytes.len()).then_some(layout);
                };
                match (*bytes.get(end)?, object) {
                    (b',', true) => {
                        at = key(bytes, skip_space(bytes, end + 1))?;
                        continue 'value;
                    }
                    (b',', false) => {
                        at = skip_space(bytes, end + 1);
                        continue 'value;
                    }
                    (b'}', true) | (b']', false) => {
                        layout.close(&mut objects, &mut noted, end);
                        end += 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// The innermost open container closes at `at`.
    fn close(&mut self, objects: &mut Vec<bool>, noted: &mut Vec<u32>, at: usize) {
        if noted.len() == objects.len()
            && let Some(index) = noted.pop()
            && let Some(close) = self.closes.get_mut(index as usize)
        {
            *close = at as u32;
        }
        objects.pop();
    }

    /// Whether this is the layout of `text` (the same text, not an equal one).
    pub(crate) fn is_of(&self, text: &str) -> bool {
        std::ptr::eq(self.text, text)
    }

    /// Where the container that opens at `at` in `part` (a slice of the text this layout is of)
    /// closes, as an offset in `part`; `None` when it was not noted.
    pub(crate) fn close_of(&self, part: &str, at: usize) -> Option<usize> {
        let base = (part.as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        if base + part.len() > self.text.len() {
            return None;
        }
        let open = u32::try_from(base + at).ok()?;
        let index = self.opens.binary_search(&open).ok()?;
        (*self.closes.get(index)? as usize).checked_sub(base)
    }
}

/// An object key at `at` and its colon: where the member's value starts.
fn key(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let at = skip_space(bytes, string_end(bytes, at)?);
    (bytes.get(at) == Some(&b':')).then(|| skip_space(bytes, at + 1))
}

fn literal(bytes: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    (bytes.get(at..at + word.len())? == word).then_some(at + word.len())
}

/// The first position at or after `at` that is not an ASCII digit.
fn digits(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

/// Just past the number at `at`: `-`, then `0` or digits not starting with `0`, then an
/// optional fraction and exponent, each with at least one digit. (A digit after a leading `0`
/// is left for the caller, which refuses it as serde_json does.)
fn number_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    at = match *bytes.get(at)? {
        b'0' => at + 1,
        b'1'..=b'9' => digits(bytes, at + 1),
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        let end = digits(bytes, at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = digits(bytes, at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

/// Just past the string that opens at `at` (a `"`), checked: no raw control character, and
/// only JSON's escapes.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut at = at + 1;
    loop {
        at = crate::json::plain(bytes, at);
        match *bytes.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => match *bytes.get(at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                b'u' if bytes.get(at + 2..at + 6)?.iter().all(u8::is_ascii_hexdigit) => at += 6,
                _ => return None,
            },
            // A raw control character.
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json says of `text` when it skips it as a value.
    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    fn agrees(text: &str) {
        assert_eq!(Layout::of(text).is_some(), serde_accepts(text), "{text:?}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn accepts_what_serde_json_accepts_and_nothing_else() {
        for text in [
            "{}",
            "[]",
            " {} ",
            "{ }",
            "[ ]",
            "1",
            "-0",
            "0.5",
            "-1.25e+10",
            "1E5",
            "1e-0",
            "true",
            "false",
            "null",
            "\"\"",
            "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\uD800\"",
            r#"{"a":[1,{"b":null}],"c":"x"}"#,
            "[[[[[]]]]]",
            "{\"a\":{}}",
            "[1,[2,[3]]]",
            "\"naïve ☃ 🙂\"",
            "\t\n\r 7 \t\n\r",
            // Refused.
            "",
            " ",
            "{",
            "}",
            "[",
            "]",
            "{]",
            "[}",
            "[1,]",
            "{\"a\":1,}",
            "[,1]",
            "{,}",
            "{\"a\"}",
            "{\"a\" 1}",
            "{a:1}",
            "{1:1}",
            "01",
            "-",
            "-a",
            "1.",
            ".5",
            "1e",
            "1e+",
            "+1",
            "tru",
            "truex",
            "nul",
            "nulll",
            "True",
            "\"",
            "\"abc",
            "\"a\\x\"",
            "\"\\u12\"",
            "\"\\u12g4\"",
            "\"tab\there\"",
            "\"nl\nhere\"",
            "\"\u{1f}\"",
            "{} {}",
            "[] x",
            "1 2",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
            "\u{feff}{}",
            "[\"a\",]",
            "{\"a\":[}",
            "[{]}",
            "\"\\\"",
        ] {
            agrees(text);
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn notes_where_each_container_closes() {
        let text = r#" {"a" : [1, {"b": "[{]}"}, []], "c": {}} "#;
        let layout = Layout::of(text).expect("valid");
        for (at, byte) in text.bytes().enumerate() {
            if byte == b'{' || byte == b'[' {
                // Brackets inside the string are not containers.
                if text[..at].matches('"').count() % 2 == 1 {
                    assert_eq!(layout.close_of(text, at), None);
                    continue;
                }
                let close = layout.close_of(text, at).expect("noted");
                let value: serde_json::Value =
                    serde_json::from_str(&text[at..=close]).expect("a whole value");
                assert!(value.is_object() || value.is_array());
            }
        }
        // Offsets are taken within a slice of the text.
        let inner = &text[8..];
        assert_eq!(
            layout.close_of(inner, 0).map(|c| &inner[..=c]),
            Some(r#"[1, {"b": "[{]}"}, []]"#)
        );
        // A text that is not the layout's is not looked up.
        let other = String::from(text);
        assert_eq!(layout.close_of(&other, 1), None);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_body_of_brackets_notes_a_bounded_number_of_them() {
        let depth = 10_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let layout = Layout::of(&text).expect("serde_json skips any depth");
        assert!(serde_accepts(&text));
        assert_eq!(layout.opens.len(), text.len() / BYTES_PER_NOTE);
        // The outermost are noted, the rest are not.
        assert_eq!(layout.close_of(&text, 0), Some(text.len() - 1));
        assert_eq!(layout.close_of(&text, depth - 1), None);
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn agrees_with_serde_json_on_json_like_text(text in "[ \t\n{}\\[\\]:,\"\\\\a-fnrtu0-9.eE+\\-\u{1}é]{0,48}") {
            agrees(&text);
        }

        #[test]
        fn agrees_with_serde_json_on_json_with_one_byte_changed(
            value in super::super::tests::json_value(),
            pretty: bool,
            at in proptest::num::usize::ANY,
            byte in proptest::sample::select(b" \t\n{}[]:,\"\\aeflnrstu019.+-E\x01\x7f".to_vec()),
            remove: bool,
        ) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).expect("serializes")
            } else {
                serde_json::to_string(&value).expect("serializes")
            };
            agrees(&text);
            let mut bytes = text.into_bytes();
            let at = at % (bytes.len() + 1);
            if remove && at < bytes.len() {
                bytes.remove(at);
            } else {
                bytes.insert(at, byte);
            }
            if let Ok(text) = String::from_utf8(bytes) {
                agrees(&text);
            }
        }
    }
}
