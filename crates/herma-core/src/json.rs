//! Strict JSON for Herma's own API.
//!
//! [`parse_strict`] refuses duplicate object keys and nesting deeper than [`MAX_DEPTH`] with
//! `invalid_json`; [`decode`] turns a value into a typed request and reports the JSON pointer of
//! the first offending member with `validation_failed`. Proxied bodies never come through here:
//! they are read leniently and forwarded as they are. `plain`, the word-at-a-time scan for
//! what a JSON string cannot hold as written, is shared by the proxied bodies' layout pass and
//! the receipt's canonical writer.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::problem::{FieldError, Problem, ProblemCode};

/// Deepest nesting of arrays and objects accepted; the top-level container is depth 1.
pub const MAX_DEPTH: usize = 32;

/// Parses `bytes` as one JSON value, refusing duplicate keys and nesting deeper than 32.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, Problem> {
    let first_error = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let seed = Strict {
        depth: 0,
        path: None,
        first_error: &first_error,
    };
    let parsed = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(value) => Ok(value),
        Err(err) => {
            let (pointer, detail) = first_error
                .into_inner()
                .unwrap_or_else(|| (String::new(), describe_syntax_error(&err)));
            Err(Problem::new(ProblemCode::InvalidJson, detail.clone())
                .with_errors(vec![FieldError::new(pointer, detail)]))
        }
    }
}

/// Parses and decodes in one step.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    decode(parse_strict(bytes)?)
}

/// Decodes a parsed value into `T`, naming the offending member by JSON pointer. Types are not
/// coerced: a struct must be a JSON object (serde would otherwise accept an array positionally).
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<T, Problem> {
    serde_path_to_error::deserialize(Exact(value)).map_err(|err| {
        let mut pointer = path_to_pointer(err.path());
        let message = err.into_inner().to_string();
        let detail = if let Some((field, _)) = quoted_after(&message, "unknown field `") {
            // The path already ends at the unknown member; add it only if it does not.
            let segment = format!("/{}", escape_pointer_segment(field));
            if !pointer.ends_with(&segment) {
                pointer.push_str(&segment);
            }
            "unknown field".to_owned()
        } else if let Some((field, _)) = quoted_after(&message, "missing field `") {
            pointer.push('/');
            pointer.push_str(&escape_pointer_segment(field));
            "is required".to_owned()
        } else if let Some((variant, expected)) = quoted_after(&message, "unknown variant `") {
            let expected = expected.unwrap_or("a known value");
            format!("unknown value `{variant}`, expected {expected}")
        } else {
            message
        };
        Problem::validation(vec![FieldError::new(pointer, detail)])
    })
}

/// A deserializer over a [`Value`] that refuses the shapes serde would silently coerce.
struct Exact(Value);

impl<'de> de::IntoDeserializer<'de, serde_json::Error> for Exact {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for Exact {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = de::value::SeqDeserializer::new(items.into_iter().map(Exact));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(members) => {
                let mut map = de::value::MapDeserializer::new(
                    members.into_iter().map(|(k, v)| (k, Exact(v))),
                );
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
            scalar => scalar.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        if !self.0.is_object() {
            return Err(de::Error::invalid_type(
                unexpected(&self.0),
                &"a JSON object",
            ));
        }
        self.deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(Exact(other)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::String(variant) => visitor
                .visit_enum(de::IntoDeserializer::<serde_json::Error>::into_deserializer(variant)),
            other => Err(de::Error::invalid_type(unexpected(&other), &"a string")),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("a number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

impl Problem {
    pub fn with_errors(mut self, errors: Vec<FieldError>) -> Self {
        self.errors = errors;
        self
    }
}

/// Escapes one JSON pointer reference token (RFC 6901 §3).
pub fn escape_pointer_segment(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The name serde quotes after `prefix` (its messages are ``unknown field `NAME`, expected
/// …``, ``… `NAME`, there are no fields`` and ``missing field `NAME` ``), and what it expected
/// instead. A name is read up to serde's own text, not to its first backtick: a member name
/// the caller wrote may hold backticks (and even `` `, expected ``, which the list of expected
/// names never does).
fn quoted_after<'a>(message: &'a str, prefix: &str) -> Option<(&'a str, Option<&'a str>)> {
    let rest = message.strip_prefix(prefix)?;
    if let Some((name, expected)) = rest.rsplit_once("`, expected ") {
        return Some((name, Some(expected)));
    }
    ["`, there are no fields", "`, there are no variants", "`"]
        .into_iter()
        .find_map(|end| rest.strip_suffix(end))
        .map(|name| (name, None))
}

fn path_to_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut pointer = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => {
                pointer.push('/');
                pointer.push_str(&index.to_string());
            }
            Segment::Map { key } => {
                pointer.push('/');
                pointer.push_str(&escape_pointer_segment(key));
            }
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    pointer
}

fn describe_syntax_error(err: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match err.classify() {
        Category::Eof => format!(
            "the body ended early (line {}, column {})",
            err.line(),
            err.column()
        ),
        Category::Syntax | Category::Data | Category::Io => err.to_string(),
    }
}

/// A reversed linked list of path segments living on the parser's stack; it becomes a pointer
/// string only when an error is reported.
struct PathNode<'a> {
    parent: Option<&'a PathNode<'a>>,
    segment: Segment<'a>,
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn pointer_of(node: Option<&PathNode<'_>>) -> String {
    let mut segments = Vec::new();
    let mut cursor = node;
    while let Some(n) = cursor {
        segments.push(match n.segment {
            Segment::Key(key) => escape_pointer_segment(key),
            Segment::Index(index) => index.to_string(),
        });
        cursor = n.parent;
    }
    segments.iter().rev().fold(String::new(), |mut acc, s| {
        acc.push('/');
        acc.push_str(s);
        acc
    })
}

type FirstError = RefCell<Option<(String, String)>>;

#[derive(Clone, Copy)]
struct Strict<'a> {
    depth: usize,
    path: Option<&'a PathNode<'a>>,
    first_error: &'a FirstError,
}

impl Strict<'_> {
    fn fail<E: de::Error>(&self, pointer: String, detail: String) -> E {
        let message = format!("{detail} at `{pointer}`");
        self.first_error
            .borrow_mut()
            .get_or_insert((pointer, detail));
        E::custom(message)
    }

    fn enter<E: de::Error>(&self) -> Result<usize, E> {
        let depth = self.depth + 1;
        if depth > MAX_DEPTH {
            return Err(self.fail(
                pointer_of(self.path),
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(depth)
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| self.fail(pointer_of(self.path), "number out of range".into()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let mut items = Vec::new();
        loop {
            let node = PathNode {
                parent: self.path,
                segment: Segment::Index(items.len()),
            };
            let child = Strict {
                depth,
                path: Some(&node),
                first_error: self.first_error,
            };
            match seq.next_element_seed(child)? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let node = PathNode {
                    parent: self.path,
                    segment: Segment::Key(&key),
                };
                return Err(self.fail(pointer_of(Some(&node)), format!("duplicate key `{key}`")));
            }
            let value = {
                let node = PathNode {
                    parent: self.path,
                    segment: Segment::Key(&key),
                };
                map.next_value_seed(Strict {
                    depth,
                    path: Some(&node),
                    first_error: self.first_error,
                })?
            };
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// The first position at or after `at` holding `"`, `\` or a control character (or the end).
/// What a JSON string may hold as it is written: the layout pass checks strings with it, the
/// quick scan and the usage reader find their ends, the receipt's writer copies them.
///
/// Most strings (keys, roles, names) end within their first sixteen bytes, which are read a
/// word at a time, the first inline in the caller ([`stops`]). Where vector registers are sure
/// to be there (x86-64's SSE2, AArch64's NEON), a longer string is then skipped 64 bytes at a
/// time by a loop the compiler vectorises (on the harness's 1.4 KB system prompt, a third of
/// the word loop's instructions); the block that holds the stop is read by words again.
#[inline]
pub(crate) fn plain(bytes: &[u8], at: usize) -> usize {
    // The first word here, where callers inline it: most strings (keys, names, a stream's
    // text deltas) end in it.
    let Some(Ok(first)) = bytes.get(at..at + 8).map(<[u8; 8]>::try_from) else {
        return plain_words(bytes, at, usize::MAX).0;
    };
    let found = stops(u64::from_le_bytes(first));
    if found != 0 {
        return at + (found.trailing_zeros() / 8) as usize;
    }
    plain_after(bytes, at + 8)
}

/// [`plain`] past its first word: one more word, then blocks where there are vector
/// registers, then words again.
fn plain_after(bytes: &[u8], at: usize) -> usize {
    let (at, found) = plain_words(bytes, at, 1);
    if found {
        return at;
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    let at = plain_blocks(bytes, at);
    plain_words(bytes, at, usize::MAX).0
}

/// Past the 64-byte blocks from `at` on that hold no stop.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn plain_blocks(bytes: &[u8], mut at: usize) -> usize {
    while let Some(block) = bytes.get(at..at + 64) {
        // Folded over the block, not stopped at the first hit, so it compiles to vector
        // compares.
        if block
            .iter()
            .fold(false, |any, &byte| any | stops_plain(byte))
        {
            break;
        }
        at += 64;
    }
    at
}

/// Whether `byte` ends a run of bytes a JSON string holds as they are.
fn stops_plain(byte: u8) -> bool {
    (byte == b'"') | (byte == b'\\') | (byte < 0x20)
}

/// [`plain`]'s scan eight bytes at a time ([`stops`]), for at most `words` words and then (if
/// it got that far) byte by byte to the end: where it stopped, and whether a stop is there
/// (else the scan ran out of words, or reached the end).
fn plain_words(bytes: &[u8], mut at: usize, mut words: usize) -> (usize, bool) {
    while let Some(chunk) = bytes.get(at..at + 8) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        if words == 0 {
            return (at, false);
        }
        words -= 1;
        let found = stops(u64::from_le_bytes(chunk));
        if found != 0 {
            return (at + (found.trailing_zeros() / 8) as usize, true);
        }
        at += 8;
    }
    while let Some(&byte) = bytes.get(at) {
        if stops_plain(byte) {
            return (at, true);
        }
        at += 1;
    }
    (at, false)
}

/// The bytes of `word` that are `"`, `\` or below 0x20, as their high bits, all three tested
/// at once: the first such byte's bit is set, the bits of bytes before it are clear, and bytes
/// after it may be flagged falsely (a borrow).
#[inline]
fn stops(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    // A byte's high bit is set where it is zero (after the XORs) or below 0x20.
    (quote.wrapping_sub(ONES) & !quote
        | backslash.wrapping_sub(ONES) & !backslash
        | word.wrapping_sub(ONES * 0x20) & !word)
        & HIGHS
}

/// Whether no byte of `bytes` is a stop ([`plain`] over all of it). The slice ends where the
/// text does, so its last word is read overlapping the one before, and a text under eight
/// bytes as two overlapping halves, instead of byte by byte: the receipt's names and ids are
/// a few to a few dozen bytes. Longer texts go to [`plain`]'s blocks.
fn all_plain(bytes: &[u8]) -> bool {
    let len = bytes.len();
    let word = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|word| <[u8; 8]>::try_from(word).ok())
            .map_or(0, |word| stops(u64::from_le_bytes(word)))
    };
    let half = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|half| <[u8; 4]>::try_from(half).ok())
            .map_or(0, |half| u64::from(u32::from_le_bytes(half)))
    };
    match len {
        0..4 => bytes.iter().all(|&byte| !stops_plain(byte)),
        4..8 => stops(half(0) | half(len - 4) << 32) == 0,
        8..=64 => {
            let mut at = 0;
            while at + 8 < len {
                if word(at) != 0 {
                    return false;
                }
                at += 8;
            }
            word(len - 8) == 0
        }
        _ => plain(bytes, 0) == len,
    }
}

/// Appends `text` as a JSON string, exactly as serde_json writes it: copied whole between
/// quotes when [`plain`] finds nothing in it that needs an escape, else escaped by serde_json.
pub(crate) fn write_string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    if !all_plain(bytes) {
        write_serialized(out, text);
    } else {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
    }
}

/// Appends `texts` as a JSON array of strings ([`write_string`] each).
pub(crate) fn write_strings(out: &mut Vec<u8>, texts: &[String]) {
    out.push(b'[');
    for (i, text) in texts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, text);
    }
    out.push(b']');
}

/// Appends `true` or `false`.
pub(crate) fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

/// Appends `value` in decimal, as serde_json writes an unsigned integer.
pub(crate) fn write_unsigned(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `value % 10` is a single digit.
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `value` in decimal, as serde_json writes a signed integer.
pub(crate) fn write_signed(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_unsigned(out, value.unsigned_abs());
}

/// Appends what serde_json writes for `value` (nothing if it fails, which strings, numbers and
/// JSON values never do in memory).
pub(crate) fn write_serialized<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let start = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn accepts_ordinary_json() {
        let value = parse_strict(br#"{"a": [1, 2.5, "x", null, true, {"b": {}}]}"#).unwrap();
        assert_eq!(value["a"][5]["b"], Value::Object(Map::new()));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn duplicate_keys_are_invalid_json_with_pointer() {
        let err = parse_strict(br#"{"a": {"b": 1, "b": 2}}"#).unwrap_err();
        assert_eq!(err.code, ProblemCode::InvalidJson);
        assert_eq!(err.errors[0].pointer, "/a/b");
        assert!(err.detail.contains("duplicate key `b`"), "{}", err.detail);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn duplicate_keys_inside_arrays_are_found() {
        let err = parse_strict(br#"[{"x": 1}, {"y": 1, "y": 1}]"#).unwrap_err();
        assert_eq!(err.errors[0].pointer, "/1/y");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn depth_limit_is_32() {
        let ok = format!("{}{}", "[".repeat(32), "]".repeat(32));
        assert!(parse_strict(ok.as_bytes()).is_ok());
        let deep = format!("{}{}", "[".repeat(33), "]".repeat(33));
        let err = parse_strict(deep.as_bytes()).unwrap_err();
        assert_eq!(err.code, ProblemCode::InvalidJson);
        assert!(err.detail.contains("deeper than 32"));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn very_deep_input_is_refused_without_overflow() {
        let deep = "[".repeat(100_000);
        assert_eq!(
            parse_strict(deep.as_bytes()).unwrap_err().code,
            ProblemCode::InvalidJson
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn syntax_errors_and_trailing_garbage_are_invalid_json() {
        for body in [
            &b""[..],
            b"{",
            b"{\"a\":1} x",
            b"nul",
            b"{\"a\":01}",
            b"\xff",
        ] {
            let err = parse_strict(body).unwrap_err();
            assert_eq!(err.code, ProblemCode::InvalidJson, "{body:?}");
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        inner: Vec<Inner>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        count: u32,
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn decode_names_unknown_fields_by_pointer() {
        let err =
            from_slice::<Outer>(br#"{"name":"a","inner":[{"count":1},{"count":2,"extra":1}]}"#)
                .unwrap_err();
        assert_eq!(err.code, ProblemCode::ValidationFailed);
        assert_eq!(err.errors[0].pointer, "/inner/1/extra");
        assert_eq!(err.errors[0].detail, "unknown field");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_member_name_with_backticks_is_named_whole() {
        // Found by the `strict_json` fuzz target: the name was cut at its first backtick and
        // the pointer named a member that does not exist (`/a`b/a`).
        for name in ["a`b", "`", "x`, expected `y`", "``"] {
            let body = serde_json::to_vec(&json!({"name": "n", "inner": [], name: 1})).unwrap();
            let err = from_slice::<Outer>(&body).unwrap_err();
            let pointer = format!("/{}", escape_pointer_segment(name));
            assert_eq!(err.errors[0].pointer, pointer, "{name}");
            assert_eq!(err.errors[0].detail, "unknown field");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn an_unknown_value_with_backticks_is_quoted_whole() {
        #[derive(Debug, Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Kind {
            Noun,
            Verb,
        }
        let err = decode::<Kind>(json!("no`un, expected x")).unwrap_err();
        assert_eq!(
            err.errors[0].detail,
            "unknown value `no`un, expected x`, expected `noun` or `verb`"
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn decode_names_wrong_types_and_missing_fields() {
        let err = from_slice::<Outer>(br#"{"name":"a","inner":[{"count":"7"}]}"#).unwrap_err();
        assert_eq!(err.errors[0].pointer, "/inner/0/count");
        assert!(err.errors[0].detail.contains("invalid type"));
        let err = from_slice::<Outer>(br#"{"inner":[]}"#).unwrap_err();
        assert_eq!(err.errors[0].pointer, "/name");
        assert_eq!(err.errors[0].detail, "is required");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn structs_are_never_read_from_arrays() {
        let err = from_slice::<Outer>(br#"["a", []]"#).unwrap_err();
        assert_eq!(err.errors[0].pointer, "");
        assert!(
            err.errors[0].detail.contains("expected a JSON object"),
            "{}",
            err.errors[0].detail
        );
        let err = from_slice::<Outer>(br#"{"name":"a","inner":[[1]]}"#).unwrap_err();
        assert_eq!(err.errors[0].pointer, "/inner/0");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn numbers_are_not_coerced() {
        for body in [
            &br#"{"name":"a","inner":[{"count":1.5}]}"#[..],
            br#"{"name":"a","inner":[{"count":-1}]}"#,
            br#"{"name":"a","inner":[{"count":4294967296}]}"#,
            br#"{"name":1,"inner":[]}"#,
        ] {
            assert!(
                from_slice::<Outer>(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let ok: Outer = from_slice(br#"{"name":"a","inner":[{"count":7}]}"#).unwrap();
        assert_eq!(ok.inner[0].count, 7);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn pointer_segments_are_escaped() {
        let err = parse_strict(br#"{"a/b~c": {"k": 1, "k": 1}}"#).unwrap_err();
        assert_eq!(err.errors[0].pointer, "/a~1b~0c/k");
    }

    /// The first stop, byte by byte: what [`plain`] must find.
    #[cfg(not(target_arch = "wasm32"))]
    fn plain_by_bytes(bytes: &[u8], at: usize) -> usize {
        (at..bytes.len())
            .find(|&i| bytes[i] < 0x20 || bytes[i] == b'"' || bytes[i] == b'\\')
            .unwrap_or(bytes.len())
    }

    /// The word-at-a-time and block scans stop where a byte-by-byte one does, wherever in a
    /// word or a 64-byte block the byte sits (a 20-byte text is read by words only; in a
    /// 200-byte one a scan from the start reads two words, two blocks and the rest by words).
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn plain_stops_at_the_first_quote_backslash_or_control_character() {
        for (len, at) in (0..20)
            .map(|at| (20, at))
            .chain((0..200).map(|at| (200, at)))
        {
            for byte in 0..=u8::MAX {
                let mut text = vec![b'a'; len];
                text[at] = byte;
                let stops = byte < 0x20 || byte == b'"' || byte == b'\\';
                let expected = if stops { at } else { text.len() };
                assert_eq!(plain(&text, 0), expected, "byte {byte:#x} at {at}");
                // From a later start, too (at or before the byte).
                assert_eq!(plain(&text, at.min(3)), expected);
                // From just after it: a byte before the start stops nothing.
                for start in at + 1..(at + 9).min(len) {
                    assert_eq!(plain(&text, start), len, "{byte:#x} at {at}, from {start}");
                }
                // Whatever byte follows it (a borrow may flag a later byte, never an earlier).
                for next in [0u8, b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xff] {
                    let Some(after) = text.get_mut(at + 1) else {
                        break;
                    };
                    *after = next;
                    let next_stops = next < 0x20 || next == b'"' || next == b'\\';
                    let expected = match (stops, next_stops) {
                        (true, _) => at,
                        (false, true) => at + 1,
                        (false, false) => text.len(),
                    };
                    assert_eq!(
                        plain(&text, 0),
                        expected,
                        "{byte:#x} at {at}, then {next:#x}"
                    );
                }
            }
        }
    }

    /// A whole text is plain where a byte-by-byte scan finds no stop: every length up to
    /// past the block size, each byte value at each place, and after it each follower.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_text_is_all_plain_where_no_byte_stops() {
        let stops = |byte: u8| byte < 0x20 || byte == b'"' || byte == b'\\';
        for len in 0..=80 {
            assert!(all_plain(&vec![b'a'; len]));
            for at in 0..len {
                for byte in 0..=u8::MAX {
                    let mut text = vec![b'a'; len];
                    text[at] = byte;
                    assert_eq!(all_plain(&text), !stops(byte), "{byte:#x} at {at} of {len}");
                    if let Some(next) = text.get_mut(at + 1) {
                        *next = b'"';
                        assert!(
                            !all_plain(&text),
                            "{byte:#x} at {at} of {len}, then a quote"
                        );
                    }
                }
            }
        }
    }

    /// Texts of bytes that are plain `plain_weight` times in `plain_weight + 1`, any byte
    /// (a stop or not) otherwise.
    #[cfg(not(target_arch = "wasm32"))]
    fn mostly_plain(
        plain_weight: u32,
        len: std::ops::Range<usize>,
    ) -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            proptest::prop_oneof![
                plain_weight => 0x20u8..=0xff,
                1 => proptest::prelude::any::<u8>(),
            ],
            len,
        )
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Any text: plain as a whole where a byte-by-byte scan finds no stop.
        #[test]
        fn all_plain_answers_as_a_byte_by_byte_scan(
            text in mostly_plain(16, 0..200),
        ) {
            proptest::prop_assert_eq!(all_plain(&text), plain_by_bytes(&text, 0) == text.len());
        }

        /// Any text, mostly plain bytes with a few stops anywhere, from any start.
        #[test]
        fn plain_finds_what_a_byte_by_byte_scan_finds(
            text in mostly_plain(8, 0..400),
            start in 0usize..100,
        ) {
            // A start past the end is answered as itself.
            proptest::prop_assert_eq!(plain(&text, start), plain_by_bytes(&text, start).max(start));
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn integers_are_written_as_serde_json_writes_them() {
        for value in [0, 1, 9, 10, 99, 1_796_000_000, -1, -10, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            write_signed(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap(), "{value}");
        }
        for value in [0, 7, 100, u64::MAX] {
            let mut out = Vec::new();
            write_unsigned(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap(), "{value}");
        }
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = parse_strict(&bytes);
        }

        #[test]
        fn round_trips_values_without_duplicates(n in 0u64..1000, s in "[a-z]{0,12}") {
            let value = serde_json::json!({"n": n, "s": s, "list": [n, s]});
            let text = serde_json::to_vec(&value).unwrap();
            proptest::prop_assert_eq!(parse_strict(&text).unwrap(), value);
        }
    }
}
