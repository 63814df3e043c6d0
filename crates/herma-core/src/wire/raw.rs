//! Lenient readers over raw JSON: proxied bodies are read through borrowed raw values, never
//! refusing a shape Herma does not expect (what is not understood reads as absent).
//!
//! A body is checked once, as a whole, by [`Layout::of`] — which also notes where each of its
//! objects and arrays closes — and read through the walkers below, which only find where a
//! value ends (strings, brackets; a noted container in one step) and trust the text to be JSON.
//! That is why a [`Raw`] is only ever made from text that was checked. A body the layout
//! refuses is read by serde_json as before ([`Obj`]'s `Deserialize`), which then names what is
//! wrong.

mod layout;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

pub(crate) use layout::Layout;

/// A JSON value as written inside a checked body: a member's or an element's text, without the
/// whitespace around it, and the body's [`Layout`] when there is one. Made only from checked
/// text (or split from another `Raw`), so the walkers here may skip through it without checking
/// it again.
#[derive(Clone, Copy)]
pub(crate) struct Raw<'a> {
    text: &'a str,
    layout: Option<&'a Layout<'a>>,
}

impl<'a> Raw<'a> {
    /// The value's JSON text.
    pub(crate) fn get(self) -> &'a str {
        self.text
    }

    /// The same layout, over `text` (a part of this value).
    fn part(self, text: &'a str) -> Raw<'a> {
        Raw {
            text,
            layout: self.layout,
        }
    }
}

/// Two raw values are equal when their texts are.
impl PartialEq for Raw<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Raw<'_> {}

impl std::fmt::Debug for Raw<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Raw").field(&self.text).finish()
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Raw {
            text: raw.get(),
            layout: None,
        }
    }
}

/// A JSON object's members as raw values, read leniently: a repeated key keeps its last value
/// (what most upstream JSON parsers do, so Herma reads the request the way the model's API
/// will), and anything that is not an object reads as empty.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Obj<'a>(Vec<(Cow<'a, str>, Raw<'a>)>);

struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Obj<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for ObjVisitor<'a> {
            type Value = Obj<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Obj<'a>, A::Error> {
                let mut members = Vec::new();
                while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
                    let value: &'a RawValue = map.next_value()?;
                    members.push((key, Raw::from(value)));
                }
                Ok(Obj(members))
            }
        }
        deserializer.deserialize_map(ObjVisitor(std::marker::PhantomData))
    }
}

impl<'a> Obj<'a> {
    /// The members of a request body, checked whole by `layout` (made with [`Layout::of`] from
    /// `body`); without one (or with one of another text), or when the body is not an object
    /// Herma can read, serde_json reads it and says what is wrong.
    pub(crate) fn body(
        body: &'a str,
        layout: Option<&'a Layout<'a>>,
    ) -> Result<Obj<'a>, serde_json::Error> {
        if layout.is_some_and(|layout| layout.is_of(body)) {
            let raw = Raw { text: body, layout };
            let at = skip_space(body.as_bytes(), 0);
            if body.as_bytes().get(at) == Some(&b'{')
                && let Some((obj, _)) = object_at(raw, at)
            {
                return Ok(obj);
            }
        }
        serde_json::from_str(body)
    }

    /// The members of `text` if it is a JSON object; `None` if it is not JSON at all.
    pub(crate) fn parse(text: &'a str) -> Option<Obj<'a>> {
        serde_json::from_str(text).ok()
    }

    /// The members of `raw` if it is an object, else none.
    pub(crate) fn of(raw: Option<Raw<'a>>) -> Obj<'a> {
        match raw {
            Some(raw) if raw.text.starts_with('{') => {
                object_at(raw, 0).map(|(obj, _)| obj).unwrap_or_default()
            }
            _ => Obj::default(),
        }
    }

    /// The last value given for `key` (JSON `null` included).
    pub(crate) fn get(&self, key: &str) -> Option<Raw<'a>> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    pub(crate) fn str(&self, key: &str) -> Option<String> {
        raw_str(self.get(key))
    }

    /// A string member's text, borrowed from the body when it has no escapes: for names and
    /// kinds that are only compared.
    pub(crate) fn text(&self, key: &str) -> Option<Cow<'a, str>> {
        raw_text(self.get(key))
    }

    /// The first of `names` given more than once: a body whose decided members are ambiguous
    /// (Herma would read the last value, an upstream might read the first).
    pub(crate) fn repeated(&self, names: &[&str]) -> Option<String> {
        names
            .iter()
            .find(|name| self.0.iter().filter(|(k, _)| k == *name).nth(1).is_some())
            .map(|name| (*name).to_owned())
    }

    /// The elements of the array at `key`, each as an object ([`raw_objects`]).
    pub(crate) fn objects(&self, key: &str) -> Vec<(Obj<'a>, Raw<'a>)> {
        raw_objects(self.get(key))
    }
}

/// The top-level members Herma reads or decides on: given twice, a body is refused.
pub(crate) const DECIDED_MEMBERS: &[&str] = &[
    "model",
    "messages",
    "input",
    "system",
    "instructions",
    "tools",
    "stream",
    "stream_options",
    "metadata",
];

/// Decodes the body of a JSON string literal, replacing what strict decoding refuses (a lone
/// surrogate escape) with U+FFFD instead of giving up: Herma must read the text the model will.
fn unescape_lossy(literal: &str) -> Option<String> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    let mut pending_high: Option<u32> = None;
    while let Some(c) = chars.next() {
        if c != '\\' {
            if pending_high.take().is_some() {
                out.push('\u{FFFD}');
            }
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        if escaped != 'u' {
            if pending_high.take().is_some() {
                out.push('\u{FFFD}');
            }
            out.push(match escaped {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                'b' => '\u{8}',
                'f' => '\u{c}',
                other => other,
            });
            continue;
        }
        let hex: String = chars.by_ref().take(4).collect();
        let unit = u32::from_str_radix(&hex, 16).ok()?;
        match (pending_high.take(), unit) {
            (Some(high), 0xDC00..=0xDFFF) => {
                let code = 0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00);
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            (previous, 0xD800..=0xDBFF) => {
                if previous.is_some() {
                    out.push('\u{FFFD}');
                }
                pending_high = Some(unit);
            }
            (previous, unit) => {
                if previous.is_some() {
                    out.push('\u{FFFD}');
                }
                out.push(char::from_u32(unit).unwrap_or('\u{FFFD}'));
            }
        }
    }
    if pending_high.is_some() {
        out.push('\u{FFFD}');
    }
    Some(out)
}

/// Byte offset of a borrowed raw value inside `body`.
pub(crate) fn offset_in(body: &str, raw: Raw<'_>) -> usize {
    (raw.get().as_ptr() as usize).saturating_sub(body.as_ptr() as usize)
}

/// A string value's text (`None` for any other value).
pub(crate) fn raw_str(raw: Option<Raw<'_>>) -> Option<String> {
    raw_text(raw).map(Cow::into_owned)
}

/// A string value's text, borrowed unless it has escapes (`None` for any other value).
pub(crate) fn raw_text<'a>(raw: Option<Raw<'a>>) -> Option<Cow<'a, str>> {
    let literal = raw?.get();
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    // memchr's vector search: the body's long strings (a system prompt) are read here.
    if memchr::memchr(b'\\', inner.as_bytes()).is_none() {
        // No escapes: the text is what is written.
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str(literal)
        .ok()
        .or_else(|| unescape_lossy(literal))
        .map(Cow::Owned)
}

pub(crate) fn raw_bool(raw: Option<Raw<'_>>) -> Option<bool> {
    match raw?.get() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The elements of a raw array, each as an object (empty when it is not one) beside its text;
/// empty when `raw` is not an array.
pub(crate) fn raw_objects(raw: Option<Raw<'_>>) -> Vec<(Obj<'_>, Raw<'_>)> {
    match raw {
        Some(raw) if raw.text.starts_with('[') => split_objects(raw).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Pushes `name` unless present or the list is full.
pub(crate) fn push_unique(list: &mut Vec<String>, name: String, max: usize) {
    if list.len() < max && !name.is_empty() && !list.contains(&name) {
        list.push(name);
    }
}

/// Truncates to at most `max` characters on a char boundary.
pub(crate) fn bounded(mut text: String, max: usize) -> String {
    let cut = super::answer::first_chars(&text, max).len();
    text.truncate(cut);
    text
}

/// The position just after the body's opening `{`, and whether the object is empty.
pub(crate) fn object_open(body: &str) -> Option<(usize, bool)> {
    let start = body.find('{')? + 1;
    let rest = body[start..].trim_start();
    Some((start, rest.starts_with('}')))
}

/// The position of the closing `]` of a raw array, and whether the array is empty.
pub(crate) fn array_close(body: &str, raw: Raw<'_>) -> Option<(usize, bool)> {
    let start = offset_in(body, raw);
    let text = raw.get();
    let close = text.rfind(']')?;
    let empty = text[1..close].trim().is_empty();
    Some((start + close, empty))
}

/// Text of a string-or-blocks content: the string, or the blocks of `text_types` joined.
pub(crate) fn content_text(content: Option<Raw<'_>>, text_types: &[&str]) -> Option<String> {
    let content = content?;
    if let Some(text) = raw_str(Some(content)) {
        return Some(text);
    }
    let parts: Vec<String> = raw_objects(Some(content))
        .into_iter()
        .map(|(block, _)| block)
        .filter(|block| {
            block
                .text("type")
                .is_some_and(|kind| text_types.contains(&&*kind))
        })
        .filter_map(|block| block.str("text"))
        .collect();
    joined_lines(parts)
}

/// `parts` joined with newlines, none without any; a single part is kept as it is (a system
/// prompt is often one part of kilobytes, which joining would copy).
pub(crate) fn joined_lines(mut parts: Vec<String>) -> Option<String> {
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(parts.join("\n")),
    }
}

// ---- walking validated JSON ---------------------------------------------------------------

/// How far `string_end` looks byte by byte before it searches.
const SHORT_STRING: usize = 24;

/// The first position at or after `at` that is not JSON whitespace.
fn skip_space(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Just past the string literal that opens at `at` (a `"`).
fn string_end(text: &[u8], at: usize) -> Option<usize> {
    // Most strings in a request (keys, types, names) are short: a plain loop finds their end
    // before a vectorised search would have started.
    let start = at + 1;
    let head = text.get(start..)?;
    let mut from = start + head.len().min(SHORT_STRING);
    for (i, &byte) in head.iter().take(SHORT_STRING).enumerate() {
        match byte {
            b'"' => return Some(start + i + 1),
            b'\\' => {
                from = start + i;
                break;
            }
            _ => {}
        }
    }
    loop {
        let found = from + memchr::memchr2(b'"', b'\\', text.get(from..)?)?;
        if text[found] == b'\\' {
            from = found + 2;
        } else {
            return Some(found + 1);
        }
    }
}

/// Just past the value that starts at `at` in `raw`'s text: a container the layout noted in
/// one step, anything else by walking it.
fn value_end(raw: Raw<'_>, at: usize) -> Option<usize> {
    let text = raw.text.as_bytes();
    match *text.get(at)? {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            if let Some(close) = raw.layout.and_then(|layout| layout.close_of(raw.text, at)) {
                return Some(close + 1);
            }
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&byte) = text.get(i) {
                match byte {
                    b'"' => {
                        i = string_end(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        // A number, `true`, `false` or `null`.
        _ => {
            let rest = text.get(at..)?;
            Some(
                at + rest
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(rest.len()),
            )
        }
    }
}

/// An object key's text: borrowed unless it has escapes. `None` for a key serde_json would
/// not decode (a lone surrogate escape), which makes the whole object unreadable, as it was.
fn key_text(literal: &str) -> Option<Cow<'_, str>> {
    let inner = literal.get(1..literal.len().checked_sub(1)?)?;
    if inner.contains('\\') {
        serde_json::from_str(literal).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// The members of the checked object that opens at `at` in `raw`'s text, and the position just
/// past it.
fn object_at(raw: Raw<'_>, at: usize) -> Option<(Obj<'_>, usize)> {
    let text = raw.text;
    let bytes = text.as_bytes();
    let mut members = Vec::new();
    let mut at = skip_space(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Some((Obj(members), at + 1));
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(bytes, at)?;
        let key = key_text(text.get(at..key_end)?)?;
        at = skip_space(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(bytes, at + 1);
        let end = value_end(raw, at)?;
        members.push((key, raw.part(text.get(at..end)?)));
        at = skip_space(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_space(bytes, at + 1),
            Some(b'}') => return Some((Obj(members), at + 1)),
            _ => return None,
        }
    }
}

/// The elements of a checked array, each read as an object (empty when it is not one or cannot
/// be read) beside its text: one walk, where finding the elements and then reading each would
/// walk every element twice.
fn split_objects(raw: Raw<'_>) -> Option<Vec<(Obj<'_>, Raw<'_>)>> {
    let text = raw.text;
    let bytes = text.as_bytes();
    let mut items = Vec::new();
    let mut at = skip_space(bytes, 1);
    if bytes.get(at) == Some(&b']') {
        return Some(items);
    }
    loop {
        let read = match bytes.get(at) {
            Some(b'{') => object_at(raw, at),
            _ => None,
        };
        let (obj, end) = match read {
            Some(read) => read,
            None => (Obj::default(), value_end(raw, at)?),
        };
        items.push((obj, raw.part(text.get(at..end)?)));
        at = skip_space(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_space(bytes, at + 1),
            Some(b']') => return Some(items),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json reads in `text`, every object and array inside it too, as
    /// `(path, key or index, raw text)` — how `Obj::of` and `raw_array` read before the walkers.
    fn by_serde(text: &str, path: &str, out: &mut Vec<(String, String, String)>) {
        if text.starts_with('{') {
            let obj: Obj<'_> = serde_json::from_str(text).unwrap();
            for (key, value) in obj.0 {
                out.push((path.into(), key.to_string(), value.get().into()));
                by_serde(value.get(), &format!("{path}/{key}"), out);
            }
        } else if text.starts_with('[') {
            let items: Vec<&RawValue> = serde_json::from_str(text).unwrap();
            for (i, item) in items.into_iter().enumerate() {
                out.push((path.into(), i.to_string(), item.get().into()));
                by_serde(item.get(), &format!("{path}/{i}"), out);
            }
        }
    }

    /// The same through the walkers.
    fn by_walkers(raw: Raw<'_>, path: &str, out: &mut Vec<(String, String, String)>) {
        if raw.get().starts_with('{') {
            for (key, value) in Obj::of(Some(raw)).0 {
                out.push((path.into(), key.to_string(), value.get().into()));
                by_walkers(value, &format!("{path}/{key}"), out);
            }
        } else {
            for (i, (obj, item)) in raw_objects(Some(raw)).into_iter().enumerate() {
                // An element read in the array's walk is what reading it alone gives.
                assert_eq!(obj, Obj::of(Some(item)), "{}", item.get());
                out.push((path.into(), i.to_string(), item.get().into()));
                by_walkers(item, &format!("{path}/{i}"), out);
            }
        }
    }

    /// Walked with and without the text's layout, the text splits as serde_json reads it.
    fn assert_walked_as_serde_reads(text: &str) {
        let mut expected = Vec::new();
        by_serde(text, "", &mut expected);
        let top: &RawValue = serde_json::from_str(text).unwrap();
        let mut walked = Vec::new();
        by_walkers(Raw::from(top), "", &mut walked);
        assert_eq!(walked, expected, "{text}");
        let layout = Layout::of(text).expect("serde_json reads it");
        let mut walked = Vec::new();
        let with_layout = Raw {
            text: top.get(),
            layout: Some(&layout),
        };
        by_walkers(with_layout, "", &mut walked);
        assert_eq!(walked, expected, "{text}");
        if text.trim_start().starts_with('{') {
            let top = Obj::body(text, Some(&layout)).unwrap();
            assert_eq!(top, serde_json::from_str(text).unwrap(), "{text}");
        }
    }

    fn plain(text: &str) -> Raw<'_> {
        Raw { text, layout: None }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_walkers_split_values_exactly_as_serde_json_reads_them() {
        for text in [
            r#"{}"#,
            r#"[]"#,
            " { } ",
            "[ ]",
            r#"{"a":1,"b":-2.5e+3,"c":true,"d":false,"e":null,"f":"x","g":[],"h":{}}"#,
            "{ \"a\" :\t1 ,\n\"b\"\r\n: [ 1 , 2 ,[3,[4]],{\"c\":{}} ] , \"z\" : \"\" }",
            r#"{"quote \" in key":"a \"quoted\" value","back\\slash":"ends with \\","u\u00e9":"\ud83d\ude00"}"#,
            r#"{"braces in strings":"{[}]","nested":{"s":"]}","t":["}",{"u":"{"}]}}"#,
            r#"{"dup":1,"dup":2,"dup":{"dup":[1,1]}}"#,
            r#"[1,"two",{"three":3},[4],null,true,false,-0.0,1E2]"#,
            r#"{"über":"naïve ☃ text","emoji🙂":["🙂"]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"hi\nthere"},{"type":"tool_result","content":"{\"not\":\"json\"}"}]}]}"#,
        ] {
            assert_walked_as_serde_reads(text);
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_key_serde_json_would_not_decode_leaves_its_object_unread_as_before() {
        // An ignored value is not checked for lone surrogates, so this passes the body's
        // validation; serde_json refuses the key when the object itself is read.
        let body = r#"{"inner":{"ok":1,"bad\ud800key":2}}"#;
        let layout = Layout::of(body).unwrap();
        for top in [
            serde_json::from_str::<Obj<'_>>(body).unwrap(),
            Obj::body(body, Some(&layout)).unwrap(),
        ] {
            let inner = top.get("inner").unwrap();
            assert!(serde_json::from_str::<Obj<'_>>(inner.get()).is_err());
            assert_eq!(Obj::of(Some(inner)), Obj::default());
        }
        // In an array, the elements after it are read all the same.
        let body = r#"{"list":[{"bad\ud800key":2},{"ok":1}]}"#;
        let layout = Layout::of(body).unwrap();
        for top in [
            serde_json::from_str::<Obj<'_>>(body).unwrap(),
            Obj::body(body, Some(&layout)).unwrap(),
        ] {
            let list = top.objects("list");
            assert_eq!(list.len(), 2);
            assert_eq!(list[0].0, Obj::default());
            assert_eq!(list[0].1.get(), r#"{"bad\ud800key":2}"#);
            assert_eq!(raw_str(list[1].0.get("ok")), None);
            assert_eq!(list[1].0.get("ok").map(Raw::get), Some("1"));
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_layout_of_another_text_is_not_trusted() {
        let checked = r#"{"a":[1,2],"b":{}}"#;
        let layout = Layout::of(checked).unwrap();
        // Equal text elsewhere, and text that is not JSON: both read by serde_json.
        let copy = String::from(checked);
        assert_eq!(
            Obj::body(&copy, Some(&layout)).unwrap(),
            serde_json::from_str::<Obj<'_>>(&copy).unwrap()
        );
        let broken = r#"{"a":[1,2],"b":{}"#;
        assert!(Obj::body(broken, Some(&layout)).is_err());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_body_the_layout_cannot_read_is_refused_by_serde_json_with_its_reason() {
        for body in [
            // Checked, but a top-level key serde_json will not decode.
            r#"{"ok":1,"bad\ud800key":2}"#,
            // Checked, but not an object.
            "[1]",
            // Not JSON at all.
            r#"{"a":1,}"#,
            "{\"a\":\"tab\there\"}",
        ] {
            let layout = Layout::of(body);
            let read = Obj::body(body, layout.as_ref()).map(|_| ());
            let serde = serde_json::from_str::<Obj<'_>>(body).map(|_| ());
            assert_eq!(
                read.map_err(|e| e.to_string()),
                serde.map_err(|e| e.to_string()),
                "{body}"
            );
            assert!(Obj::body(body, layout.as_ref()).is_err(), "{body}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn strings_read_as_serde_json_reads_them() {
        for literal in [
            r#""plain""#,
            r#""""#,
            r#""esc\"aped\\ \n \t \u00e9 \ud83d\ude00""#,
            r#""lone \ud800 surrogate""#,
            r#""naïve ☃""#,
        ] {
            let expected = serde_json::from_str::<String>(literal)
                .ok()
                .or_else(|| unescape_lossy(literal));
            assert_eq!(raw_str(Some(plain(literal))), expected, "{literal}");
        }
        assert_eq!(raw_str(Some(plain("12"))), None);
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn walked_json_splits_as_serde_json_reads_it(value in json_value(), pretty: bool) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            if text.starts_with(['{', '[']) {
                assert_walked_as_serde_reads(&text);
            }
        }

        #[test]
        fn the_walkers_never_panic_on_text_that_is_not_json(text in "[{\\[][ -~\\\\\"{}\\[\\]:,]{0,64}") {
            let _ = Obj::of(Some(plain(&text)));
            let _ = raw_objects(Some(plain(&text)));
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let scalar = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
            "[\"\\\\{}\\[\\]:, a-z]{0,12}".prop_map(Value::String),
        ];
        scalar.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[\"\\\\{}\\[\\]:, a-z]{0,6}", inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }
}
