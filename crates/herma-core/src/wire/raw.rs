//! Lenient readers over raw JSON: proxied bodies are read through borrowed raw values, never
//! refusing a shape Herma does not expect (what is not understood reads as absent).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// A JSON object's members as raw values, read leniently: a repeated key keeps its last value
/// (what most upstream JSON parsers do, so Herma reads the request the way the model's API
/// will), and anything that is not an object reads as empty.
#[derive(Debug, Default)]
pub(crate) struct Obj<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

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
                    members.push((key, value));
                }
                Ok(Obj(members))
            }
        }
        deserializer.deserialize_map(ObjVisitor(std::marker::PhantomData))
    }
}

impl<'a> Obj<'a> {
    /// The members of `text` if it is a JSON object; `None` if it is not JSON at all.
    pub(crate) fn parse(text: &'a str) -> Option<Obj<'a>> {
        serde_json::from_str(text).ok()
    }

    /// The members of `raw` if it is an object, else none.
    pub(crate) fn of(raw: Option<&'a RawValue>) -> Obj<'a> {
        match raw {
            Some(raw) if raw.get().starts_with('{') => {
                serde_json::from_str(raw.get()).unwrap_or_default()
            }
            _ => Obj::default(),
        }
    }

    /// The last value given for `key` (JSON `null` included).
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    pub(crate) fn str(&self, key: &str) -> Option<String> {
        raw_str(self.get(key))
    }

    /// The first of `names` given more than once: a body whose decided members are ambiguous
    /// (Herma would read the last value, an upstream might read the first).
    pub(crate) fn repeated(&self, names: &[&str]) -> Option<String> {
        names
            .iter()
            .find(|name| self.0.iter().filter(|(k, _)| k == *name).nth(1).is_some())
            .map(|name| (*name).to_owned())
    }

    pub(crate) fn array(&self, key: &str) -> Vec<&'a RawValue> {
        raw_array(self.get(key))
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
pub(crate) fn offset_in(body: &str, raw: &RawValue) -> usize {
    (raw.get().as_ptr() as usize).saturating_sub(body.as_ptr() as usize)
}

pub(crate) fn raw_str(raw: Option<&RawValue>) -> Option<String> {
    let raw = raw?;
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str(raw.get())
        .ok()
        .or_else(|| unescape_lossy(raw.get()))
}

pub(crate) fn raw_bool(raw: Option<&RawValue>) -> Option<bool> {
    match raw?.get() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The elements of a raw array (empty when it is not one).
pub(crate) fn raw_array(raw: Option<&RawValue>) -> Vec<&RawValue> {
    match raw {
        Some(raw) if raw.get().starts_with('[') => {
            serde_json::from_str(raw.get()).unwrap_or_default()
        }
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
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
    }
    text
}

/// The position just after the body's opening `{`, and whether the object is empty.
pub(crate) fn object_open(body: &str) -> Option<(usize, bool)> {
    let start = body.find('{')? + 1;
    let rest = body[start..].trim_start();
    Some((start, rest.starts_with('}')))
}

/// The position of the closing `]` of a raw array, and whether the array is empty.
pub(crate) fn array_close(body: &str, raw: &RawValue) -> Option<(usize, bool)> {
    let start = offset_in(body, raw);
    let text = raw.get();
    let close = text.rfind(']')?;
    let empty = text[1..close].trim().is_empty();
    Some((start + close, empty))
}

/// Text of a string-or-blocks content: the string, or the blocks of `text_types` joined.
pub(crate) fn content_text(content: Option<&RawValue>, text_types: &[&str]) -> Option<String> {
    let content = content?;
    if let Some(text) = raw_str(Some(content)) {
        return Some(text);
    }
    let parts: Vec<String> = raw_array(Some(content))
        .into_iter()
        .map(|block| Obj::of(Some(block)))
        .filter(|block| {
            block
                .str("type")
                .is_some_and(|kind| text_types.contains(&kind.as_str()))
        })
        .filter_map(|block| block.str("text"))
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}
