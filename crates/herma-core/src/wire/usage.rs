//! Watching a relayed response for the token usage the upstream reports, without changing or
//! holding back a byte: SSE events are read as they pass; a JSON body is kept (bounded) and
//! read at the end. Where the usage is in an event or a body is the protocol's knowledge
//! ([`WireProtocol::event_usage`](super::WireProtocol::event_usage),
//! [`WireProtocol::body_usage`](super::WireProtocol::body_usage)); the raw usage objects are
//! kept as the upstream sent them, merged.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::Protocol;
use super::answer::{AnswerText, StreamText, response_text};
use super::quick::Reading;
use super::sse::{DATA_LINE, Event, Reader};

/// A response body read only for its `usage` member.
#[derive(Deserialize)]
struct UsageOnly<'a> {
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

/// The top-level `usage` member of a JSON object body (where all three protocols put it).
pub(crate) fn top_level(body: &[u8]) -> Option<&str> {
    super::answer::read::<UsageOnly<'_>>(body)?
        .usage
        .map(RawValue::get)
}

/// A receipt's token usage: the object the upstream reported (merged, less its top-level
/// nulls), kept as the compact JSON serde_json writes for it, which is the text the receipt's
/// canonical JSON holds. Equal when their texts are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage(Box<str>);

impl Usage {
    /// `value` as serde_json writes it.
    pub fn new(value: &Value) -> Self {
        Self(value.to_string().into())
    }

    /// `json`, a value as serde_json writes it (the caller's promise: [`written_as_read`]
    /// checks it).
    fn written(json: String) -> Self {
        Self(json.into())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Value> for Usage {
    fn from(value: Value) -> Self {
        Self::new(&value)
    }
}

impl Serialize for Usage {
    /// Its text as it is, for serde_json's writer; as the value it holds for any other.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_str::<&RawValue>(&self.0) {
            Ok(raw) => raw.serialize(serializer),
            Err(err) => Err(serde::ser::Error::custom(err)),
        }
    }
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(|value| Self::new(&value))
    }
}

/// Largest JSON body kept for reading usage; larger bodies are relayed but not read.
pub const MAX_OBSERVED_JSON: usize = 4 * 1024 * 1024;

#[derive(Debug)]
pub struct UsageObserver {
    protocol: Protocol,
    streaming: bool,
    reader: Reader,
    json: Vec<u8>,
    overflowed: bool,
    usage: Option<Map<String, Value>>,
    /// The protocol's last event of a stream arrived ([`ends_stream`]).
    ended: bool,
}

/// Whether `event` is the protocol's last event of a complete stream: Chat Completions'
/// `data: [DONE]`, Responses' `response.completed`, `response.incomplete` or `response.failed`,
/// Messages' `message_stop`. A stream whose body ends before it was cut short.
pub fn ends_stream(protocol: Protocol, event: &super::sse::Event) -> bool {
    let name = event.event.as_deref();
    match protocol {
        // An object's closing brace, which trimming keeps, ends most events: no `[DONE]`.
        Protocol::ChatCompletions => !event.data.ends_with('}') && event.data.trim() == "[DONE]",
        Protocol::Responses => matches!(
            name,
            Some("response.completed" | "response.incomplete" | "response.failed")
        ),
        Protocol::Messages => name == Some("message_stop"),
    }
}

impl UsageObserver {
    /// `streaming`: the response is `text/event-stream`.
    pub fn new(protocol: Protocol, streaming: bool) -> Self {
        Self {
            protocol,
            streaming,
            reader: Reader::default(),
            json: Vec::new(),
            overflowed: false,
            usage: None,
            ended: false,
        }
    }

    /// A JSON body, or a stream whose last event arrived: the body that ended was whole.
    pub fn ended(&self) -> bool {
        !self.streaming || self.ended
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.feed_with(chunk, &mut |_| None);
    }

    /// [`feed`](Self::feed) for a stream, adding to `text` the text of the events it has room
    /// for. The events' shapes that reading finds spare the usage filter where they can
    /// ([`carries_by_shape`]), and events of a plain shape but for their text are read
    /// without the SSE reader where they are framed as it was ([`Self::same_shape_event`]).
    pub fn feed_reading(&mut self, chunk: &[u8], text: &mut StreamText) {
        let (mut within, beyond) = text.take_room(chunk);
        while !within.is_empty() {
            if let Some(rest) = self.same_shape_event(within, text) {
                within = rest;
                continue;
            }
            // The reader reads up to the next blank line, where the next event may be of the
            // shape; all of it where there is no shape to compare events with.
            let end = match text.frame {
                Some(_) => blank_line_end(within).unwrap_or(within.len()),
                None => within.len(),
            };
            let (read, rest) = within.split_at(end);
            let protocol = self.protocol;
            self.feed_with(read, &mut |event| {
                let reading = text.read(&event.data);
                let new = matches!(reading, Reading::NewShape(_));
                let known = carries_by_shape(&event.data, reading, &mut text.plain_shape);
                if new {
                    text.frame = frame(protocol, event, text.plain_shape);
                }
                known
            });
            within = rest;
        }
        if !beyond.is_empty() {
            self.feed(beyond);
        }
    }

    /// An event at the start of `chunk` that is `text`'s kept shape but for its text's string,
    /// framed as the shape's event was ([`StreamText::frame`]) and ended by a blank line, read
    /// without the reader: its text added, the rest of the chunk returned. The reader, between
    /// events, would read it as one event whose data is the line's after `data: `, and leave
    /// itself as it was: so the event is the shape's but for a string without escapes (where
    /// [`json::plain`](crate::json::plain) stops, the shape's closing quote must follow),
    /// which the reading of [`StreamText::read`] takes as its text without reading the rest
    /// ([`Reading::SameShape`]). It is UTF-8 where the string is (the shape's bytes are), has
    /// the shape's name and so does not end the stream, and carries no usage when its string
    /// names none ([`carries_by_shape`]). `None` where any of that does not hold: the reader
    /// reads the event.
    fn same_shape_event<'c>(&self, chunk: &'c [u8], text: &mut StreamText) -> Option<&'c [u8]> {
        let frame = text.frame.as_deref()?;
        if !self.streaming || !self.reader.between_events() {
            return None;
        }
        let (before, after) = text.around_text()?;
        let line = chunk.strip_prefix(frame)?;
        let from_text = line.strip_prefix(before)?;
        let (raw, rest) = from_text.split_at(crate::json::plain(from_text, 0));
        let rest = rest.strip_prefix(after)?.strip_prefix(b"\n\n")?;
        // The data line's length, `data: ` and all (a longer one the reader drops).
        let line_len = DATA_LINE.len() + before.len() + raw.len() + after.len();
        if line_len > self.reader.max_line() || names_usage(raw) {
            return None;
        }
        text.push_raw(raw)?;
        Some(rest)
    }

    /// [`feed`](Self::feed), handing each event of a stream to `on_event` once read, which
    /// may answer whether the event may carry a usage ([`may_carry_usage`]).
    fn feed_with(&mut self, chunk: &[u8], on_event: &mut dyn FnMut(&Event) -> Option<bool>) {
        if self.streaming {
            let (protocol, wire) = (self.protocol, self.protocol.wire());
            let (usage, ended) = (&mut self.usage, &mut self.ended);
            self.reader.feed(chunk, &mut |event| {
                let known = on_event(event);
                if ends_stream(protocol, event) {
                    *ended = true;
                }
                // Cheap filter first: most events carry no usage.
                if !known.unwrap_or_else(|| may_carry_usage(&event.data)) {
                    return;
                }
                if let Some(raw) = wire.event_usage(&event.data)
                    && let Ok(found) = serde_json::from_str::<Map<String, Value>>(raw)
                {
                    merge(usage, found);
                }
            });
        } else if !self.overflowed {
            if self.json.len() + chunk.len() > MAX_OBSERVED_JSON {
                self.overflowed = true;
                self.json = Vec::new();
            } else {
                self.json.extend_from_slice(chunk);
            }
        }
    }

    /// The usage reported, if any (Anthropic's `message_start` and `message_delta` are merged).
    pub fn finish(self) -> Option<Usage> {
        let raw = if self.whole_object() {
            self.protocol.wire().body_usage(&self.json)
        } else {
            None
        };
        with_raw(self.usage, raw)
    }

    /// [`finish`](Self::finish), and for a JSON body of at most `max_body` bytes also its
    /// answer text up to `max_chars` characters (what [`response_text`] reads in it): both in
    /// one reading of the body where it allows
    /// ([`body_usage_and_text`](super::WireProtocol::body_usage_and_text)), else apart. No
    /// text for a stream, or a body too large to have been kept whole.
    pub fn finish_with_text(
        self,
        max_chars: usize,
        max_body: usize,
    ) -> (Option<Usage>, Option<String>) {
        if self.streaming || self.overflowed || self.json.len() > max_body {
            return (self.finish(), None);
        }
        let wire = self.protocol.wire();
        if self.whole_object() {
            let mut text = AnswerText::new(max_chars);
            if let Some(raw) = wire.body_usage_and_text(&self.json, &mut |t| text.push(t)) {
                return (with_raw(self.usage, raw), Some(text.into_string()));
            }
        }
        let text = response_text(self.protocol, false, &self.json, max_chars);
        (self.finish(), Some(text))
    }

    /// A JSON body, kept whole, that is an object (where all three protocols put the usage).
    fn whole_object(&self) -> bool {
        !self.streaming && !self.overflowed && self.json.trim_ascii_start().first() == Some(&b'{')
    }
}

/// Whether an event's data may carry a usage object: it names `usage` other than as a
/// `"usage":null` member. Chat Completions with `include_usage` puts that member in every
/// chunk, and a null usage has nothing to merge. Inside a JSON string the quotes are escaped
/// (`\"usage\":null`), so an unescaped `"usage":null` is always a member.
fn may_carry_usage(data: &str) -> bool {
    let bytes = data.as_bytes();
    // Searched from each place on (`find_iter` copies the searcher into its iterator: a
    // memcpy on every event of every stream).
    let mut from = 0;
    while let Some(found) = bytes.get(from..).and_then(|rest| USAGE.find(rest)) {
        let at = from + found;
        if !(bytes[..at].ends_with(b"\"") && bytes[at + USAGE_NAME.len()..].starts_with(b"\":null"))
        {
            return true;
        }
        from = at + USAGE_NAME.len();
    }
    false
}

const USAGE_NAME: &str = "usage";

/// Built once: `str::match_indices` set up a two-way searcher on every event.
static USAGE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(USAGE_NAME));

/// The frame of `event`, just read and kept as the shape ([`StreamText::frame`]): its name's
/// line, if any, and `data: `, where the shape is plain (`plain_shape`), did not end the
/// stream and has no line break in its data or name (so it was one data line, and the frame
/// written back is read as the same name and data).
fn frame(protocol: Protocol, event: &Event, plain_shape: bool) -> Option<Vec<u8>> {
    let breaks = |text: &str| memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some();
    if !plain_shape || ends_stream(protocol, event) || breaks(&event.data) {
        return None;
    }
    if event.event.as_deref().is_some_and(breaks) {
        return None;
    }
    // As the reader's own events are written ([`super::sse::write_event`]).
    let mut frame = Vec::new();
    super::sse::write_name(&mut frame, event.event.as_deref());
    frame.extend_from_slice(DATA_LINE);
    Some(frame)
}

/// Where the first blank line in `bytes` (`\n\n`) ends.
fn blank_line_end(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(found) = bytes
        .get(from..)
        .and_then(|rest| memchr::memchr(b'\n', rest))
    {
        let at = from + found;
        if bytes.get(at + 1) == Some(&b'\n') {
            return Some(at + 2);
        }
        from = at + 1;
    }
    None
}

/// `raw` holds `usage`. Text deltas are short: they are read a byte at a time, longer texts
/// by the searcher.
fn names_usage(raw: &[u8]) -> bool {
    if raw.len() > 64 {
        return USAGE.find(raw).is_some();
    }
    let name = USAGE_NAME.as_bytes();
    if raw.len() < name.len() {
        return false;
    }
    raw.iter()
        .enumerate()
        .any(|(at, &byte)| byte == name[0] && raw[at..].starts_with(name))
}

/// [`may_carry_usage`] for `data`, answered from its shape where that is sure; `None` where
/// the filter must read it. `plain_shape` says whether the shape the reading keeps is known to
/// carry no usage, and is set where the reading keeps a new one.
///
/// An event that is the kept shape but for its text's string ([`Reading::SameShape`]) has
/// the shape's bytes before the string's opening quote and from its closing quote on. Every
/// `usage` in it is in those bytes or in the string (it holds no quote, and both quotes
/// bound the string). One in the bytes before the string reads the same bytes around it as
/// in the shape, as long as it does not end just before the opening quote (that is ruled
/// out when the shape is kept); one from the closing quote on too. So when the shape made the
/// filter say no, and the string holds no `usage`, the filter says no for the event.
fn carries_by_shape(data: &str, reading: Reading, plain_shape: &mut bool) -> Option<bool> {
    match reading {
        Reading::SameShape(raw) => {
            let plain = *plain_shape
                && data
                    .get(raw)
                    .is_some_and(|raw| !names_usage(raw.as_bytes()));
            plain.then_some(false)
        }
        Reading::NewShape(raw) => {
            let carries = may_carry_usage(data);
            let before = data
                .as_bytes()
                .get(..raw.start.saturating_sub(1))
                .unwrap_or_default();
            *plain_shape = !carries && !before.ends_with(USAGE_NAME.as_bytes());
            Some(carries)
        }
        Reading::Other => None,
    }
}

/// The usage the events reported (`found`) with the members of `raw`, a body's usage, added
/// when it is an object.
fn with_raw(mut found: Option<Map<String, Value>>, raw: Option<&str>) -> Option<Usage> {
    // A JSON body's usage alone (events carry none): written as read where that is sure.
    if found.is_none()
        && let Some(written) = raw.and_then(written_as_read)
    {
        return Some(Usage::written(written));
    }
    if let Some(map) = raw.and_then(|raw| serde_json::from_str::<Map<String, Value>>(raw).ok()) {
        merge(&mut found, map);
    }
    found.map(|usage| Usage::new(&Value::Object(usage)))
}

/// Deepest object [`written_as_read`] writes; deeper usages are read into a map.
const MAX_USAGE_DEPTH: u32 = 4;

/// The most members an object of [`written_as_read`] may have.
const MAX_USAGE_MEMBERS: usize = 16;

/// `raw`, a JSON object, as serde_json writes it once read into a map with its top-level nulls
/// dropped (a usage alone, [`merge`]'s first), without reading it into one: compact, in the
/// same order. Where that is not sure, `None`: a key or a string with an escape (serde_json
/// writes its own), a repeated key (a map keeps one), a number with a sign, a fraction or an
/// exponent or of more than 18 digits (serde_json may write it otherwise), an array, nesting
/// past [`MAX_USAGE_DEPTH`] or more than [`MAX_USAGE_MEMBERS`] members, and anything that is
/// not JSON; the caller then reads it with serde_json.
fn written_as_read(raw: &str) -> Option<String> {
    let mut copy = Copy {
        text: raw,
        bytes: raw.as_bytes(),
        at: 0,
        out: String::with_capacity(raw.len()),
    };
    copy.object(0)?;
    copy.space();
    (copy.at == raw.len()).then_some(copy.out)
}

/// [`written_as_read`]'s cursor: the text read and what is written of it.
struct Copy<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    out: String,
}

impl<'a> Copy<'a> {
    /// Past JSON's white space.
    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after white space is `byte`: taken.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.space();
        (self.bytes.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    /// An object at `depth` (0: the usage, whose null members are dropped).
    fn object(&mut self, depth: u32) -> Option<()> {
        self.eat(b'{')?;
        self.out.push('{');
        let mut keys: [&str; MAX_USAGE_MEMBERS] = [""; MAX_USAGE_MEMBERS];
        let (mut count, mut written) = (0, false);
        self.space();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            self.out.push('}');
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let key = self.plain()?;
            if count == MAX_USAGE_MEMBERS || keys[..count].contains(&key) {
                return None;
            }
            keys[count] = key;
            count += 1;
            self.eat(b':')?;
            self.space();
            if depth == 0 && self.literal("null") {
                // Dropped, as a usage's top-level nulls are.
            } else {
                if std::mem::replace(&mut written, true) {
                    self.out.push(',');
                }
                self.out.push('"');
                self.out.push_str(key);
                self.out.push_str("\":");
                self.value(depth)?;
            }
            self.space();
            match self.bytes.get(self.at)? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    self.out.push('}');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A member's value, written.
    fn value(&mut self, depth: u32) -> Option<()> {
        match *self.bytes.get(self.at)? {
            b'"' => {
                self.at += 1;
                let text = self.plain()?;
                self.out.push('"');
                self.out.push_str(text);
                self.out.push('"');
                Some(())
            }
            b'{' if depth + 1 < MAX_USAGE_DEPTH => self.object(depth + 1),
            b't' | b'f' | b'n' => {
                let word = ["true", "false", "null"]
                    .into_iter()
                    .find(|word| self.literal(word))?;
                self.out.push_str(word);
                Some(())
            }
            b'0'..=b'9' => {
                let start = self.at;
                while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
                    self.at += 1;
                }
                let digits = self.at - start;
                let leading_zero = digits > 1 && self.bytes[start] == b'0';
                if digits > 18 || leading_zero {
                    return None;
                }
                if let Some(b'.' | b'e' | b'E') = self.bytes.get(self.at) {
                    return None;
                }
                self.out.push_str(self.text.get(start..self.at)?);
                Some(())
            }
            _ => None,
        }
    }

    /// `word` is next: taken.
    fn literal(&mut self, word: &str) -> bool {
        let found = self
            .bytes
            .get(self.at..)
            .is_some_and(|rest| rest.starts_with(word.as_bytes()));
        if found {
            self.at += word.len();
        }
        found
    }

    /// A string's text, its opening quote read: `None` at an escape or a control character.
    fn plain(&mut self) -> Option<&'a str> {
        let start = self.at;
        self.at = crate::json::plain(self.bytes, start);
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        self.text.get(start..self.at - 1)
    }
}

/// Adds `from`'s non-null members to what was found before (the first usage found is taken
/// as it is, less its nulls).
fn merge(into: &mut Option<Map<String, Value>>, mut from: Map<String, Value>) {
    match into {
        None => {
            from.retain(|_, value| !value.is_null());
            *into = Some(from);
        }
        Some(target) => {
            for (key, value) in from {
                if !value.is_null() {
                    target.insert(key, value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn chat_ends_at_done_in_any_white_space_and_nowhere_else() {
        let event = |data: &str| Event {
            event: None,
            data: data.into(),
        };
        for data in ["[DONE]", " [DONE]", "[DONE]\u{a0}", "\t[DONE] "] {
            assert!(
                ends_stream(Protocol::ChatCompletions, &event(data)),
                "{data:?}"
            );
        }
        for data in ["{\"x\":\"[DONE]\"}", "[DONE]}", "[DONE", "", "{}"] {
            assert!(
                !ends_stream(Protocol::ChatCompletions, &event(data)),
                "{data:?}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_stream_is_whole_only_once_its_protocols_last_event_arrived() {
        let cases = [
            (
                Protocol::ChatCompletions,
                "data: {\"choices\":[]}\n\n",
                "data: [DONE]\n\n",
            ),
            (
                Protocol::Responses,
                "event: response.output_text.delta\ndata: {\"delta\":\"hi\"}\n\n",
                "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n",
            ),
            (
                Protocol::Messages,
                "event: content_block_delta\ndata: {\"delta\":{\"text\":\"hi\"}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            ),
        ];
        for (protocol, middle, last) in cases {
            let mut o = UsageObserver::new(protocol, true);
            o.feed(middle.as_bytes());
            assert!(!o.ended(), "{protocol:?}");
            for chunk in last.as_bytes().chunks(5) {
                o.feed(chunk);
            }
            assert!(o.ended(), "{protocol:?}");
        }
        // A JSON body is whole when it ends (its length is the transport's to check).
        assert!(UsageObserver::new(Protocol::Messages, false).ended());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn messages_usage_merges_start_and_delta() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n\
                      event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n\
                      event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n";
        let mut o = UsageObserver::new(Protocol::Messages, true);
        for chunk in stream.as_bytes().chunks(7) {
            o.feed(chunk);
        }
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"input_tokens": 12, "output_tokens": 7}).into())
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn responses_and_chat_streams_and_json_bodies() {
        let mut o = UsageObserver::new(Protocol::Responses, true);
        o.feed(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"total_tokens\":9}}}\n\n");
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"total_tokens": 9}).into())
        );
        let mut o = UsageObserver::new(Protocol::ChatCompletions, true);
        o.feed(b"data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\ndata: [DONE]\n\n");
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"total_tokens": 3}).into())
        );
        let mut o = UsageObserver::new(Protocol::ChatCompletions, false);
        o.feed(b"{\"id\":\"x\",\"usage\":{\"prompt_tokens\":");
        o.feed(b"4}}");
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"prompt_tokens": 4}).into())
        );
        let mut o = UsageObserver::new(Protocol::Messages, false);
        o.feed(b"not json");
        assert_eq!(o.finish(), None);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn only_the_usage_of_an_event_is_decoded() {
        // A text a strict decoder refuses (a lone surrogate) does not hide the usage beside it.
        let mut o = UsageObserver::new(Protocol::ChatCompletions, true);
        o.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"\\ud800\"}}],\"usage\":{\"total_tokens\":3}}\n\n");
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"total_tokens": 3}).into())
        );
        // Events that are not JSON, or whose usage is not an object, report none.
        let mut o = UsageObserver::new(Protocol::Messages, true);
        o.feed(b"data: {\"usage\":\n\ndata: {\"usage\":null}\n\ndata: {\"message\":{\"usage\":[1]}}\n\n");
        assert_eq!(o.finish(), None);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn null_members_are_left_out_of_the_first_usage_and_of_later_ones() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":null,\"output_tokens\":1}}}\n\n\
                      event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":null,\"output_tokens\":7}}\n\n";
        let mut o = UsageObserver::new(Protocol::Messages, true);
        o.feed(stream.as_bytes());
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"input_tokens": 12, "output_tokens": 7}).into())
        );
        let mut o = UsageObserver::new(Protocol::ChatCompletions, false);
        o.feed(b"{\"usage\":{\"prompt_tokens\":4,\"completion_tokens_details\":null}}");
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"prompt_tokens": 4}).into())
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn only_events_naming_usage_other_than_as_null_are_read() {
        for (data, may) in [
            (r#"{"choices":[],"usage":null}"#, false),
            (r#"{"choices":[]}"#, false),
            (r#"{"a":{"usage":null},"usage":null}"#, false),
            (r#"{"choices":[],"usage":{"total_tokens":3}}"#, true),
            (r#"{"usage": null}"#, true),
            (r#"{"text":"\"usage\":null","usage":null}"#, true),
            (r#"{"my_usage":null}"#, true),
            (r#"{"a":{"usage":null},"usage":{"total_tokens":3}}"#, true),
        ] {
            assert_eq!(may_carry_usage(data), may, "{data}");
        }
        // A chat stream whose every chunk carries a null usage reports the last chunk's.
        let mut o = UsageObserver::new(Protocol::ChatCompletions, true);
        o.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":null\"}}],\"usage\":null}\n\n");
        o.feed(b"data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\ndata: [DONE]\n\n");
        assert_eq!(
            o.finish(),
            Some(serde_json::json!({"total_tokens": 3}).into())
        );
    }

    /// What a JSON body's observer gives with its text: the usage alone, and the text as
    /// memory would read it from the bytes (`None` where it is not to be read).
    fn apart(protocol: Protocol, body: &[u8], max_chars: usize) -> (Option<Usage>, String) {
        let mut observer = UsageObserver::new(protocol, false);
        observer.feed(body);
        let text = response_text(protocol, false, body, max_chars);
        (observer.finish(), text)
    }

    fn with_text(
        protocol: Protocol,
        body: &[u8],
        max_chars: usize,
        max_body: usize,
    ) -> (Option<Usage>, Option<String>) {
        let mut observer = UsageObserver::new(protocol, false);
        // In two chunks, as a body may arrive.
        let (first, rest) = body.split_at(body.len() / 2);
        observer.feed(first);
        observer.feed(rest);
        observer.finish_with_text(max_chars, max_body)
    }

    /// Every protocol's usage and text, read together, are what reading each apart gives.
    fn agrees(body: &[u8]) {
        for protocol in Protocol::ALL {
            for max_chars in [3, 1 << 16] {
                let (usage, text) = apart(protocol, body, max_chars);
                assert_eq!(
                    with_text(protocol, body, max_chars, body.len()),
                    (usage.clone(), Some(text)),
                    "{protocol:?} {}",
                    String::from_utf8_lossy(body)
                );
                // A body larger than what was kept whole is not read for its text.
                if !body.is_empty() {
                    assert_eq!(
                        with_text(protocol, body, max_chars, body.len() - 1),
                        (usage, None)
                    );
                }
            }
        }
    }

    /// The bodies upstreams send are read once, for both.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_json_answer_gives_its_usage_and_text_in_one_reading() {
        let usage = r#"{"prompt_tokens":11,"completion_tokens":7,"cached":null}"#;
        let bodies = [
            (
                Protocol::ChatCompletions,
                format!(
                    r#"{{"id":"c","choices":[{{"index":0,"message":{{"role":"assistant","content":"Hello \u00e9"}}}},
                    {{"index":1,"message":{{"content":null}}}},{{"message":{{"content":"two"}}}}],"usage":{usage}}}"#
                ),
                "Hello étwo",
            ),
            (
                Protocol::Messages,
                format!(
                    r#" {{"content":[{{"type":"text","text":"see src/lib.rs"}},{{"type":"tool_use","input":{{}}}}],"usage":{usage}}}"#
                ),
                "see src/lib.rs",
            ),
            (
                Protocol::Responses,
                format!(
                    r#"{{"output":[{{"content":[{{"text":"one"}},{{"text":"two"}}]}},{{"type":"reasoning"}}],"usage":{usage}}}"#
                ),
                "onetwo",
            ),
        ];
        for (protocol, body, text) in &bodies {
            let mut pushed = String::new();
            let read = protocol
                .wire()
                .body_usage_and_text(body.as_bytes(), &mut |t| pushed.push_str(t));
            assert_eq!(read, Some(Some(usage)), "{protocol:?}");
            assert_eq!(pushed, *text);
            let expected =
                Usage::from(serde_json::json!({"prompt_tokens": 11, "completion_tokens": 7}));
            assert_eq!(
                with_text(*protocol, body.as_bytes(), 100, 1 << 20),
                (Some(expected), Some((*text).to_owned()))
            );
            agrees(body.as_bytes());
        }
        // A stream's text is read from its events, by memory.
        let mut observer = UsageObserver::new(Protocol::ChatCompletions, true);
        observer.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n");
        assert_eq!(observer.finish_with_text(100, 1 << 20), (None, None));
    }

    /// Chat's and Messages' bodies are read by the quick reader where it is sure, as reading the
    /// usage and the texts apart (serde_json) reads them; elsewhere it leaves them to serde_json.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn answer_bodies_are_read_quickly_where_the_reader_is_sure() {
        use super::super::{chat, messages};
        use std::borrow::Cow;
        let usage = r#"{"prompt_tokens":3,"completion_tokens":2,"details":{"cached":0,"x":null}}"#;
        let chat_body = format!(
            r#" {{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"Hi \"there\"\n"}},"logprobs":null,"finish_reason":"stop"}},{{"index":1,"message":{{"content":null}},"delta":{{"content":"d"}}}},{{"message":null}},{{"message":{{"content":7}}}},{{"message":{{"content":"two"}}}}],"usage": {usage} }}"#
        );
        fn texts<'t>(texts: &[&'t str]) -> Vec<Cow<'t, str>> {
            texts.iter().map(|t| Cow::Borrowed(*t)).collect()
        }
        assert_eq!(
            chat::quick_body(&chat_body),
            Some((texts(&["Hi \"there\"\n", "two"]), Some(usage)))
        );
        let messages_body = format!(
            r#"{{"id":"msg_1","type":"message","role":"assistant","content":[{{"type":"text","text":"see src/lib.rs"}},{{"type":"tool_use","id":"t","name":"n","input":{{"a":[1,true]}}}},{{"type":"text","text":"b","text2":1}}],"stop_reason":"end_turn","usage":{usage}}}"#
        );
        assert_eq!(
            messages::quick_body(&messages_body),
            Some((texts(&["see src/lib.rs", "b"]), Some(usage)))
        );
        // A usage that is `null`, absent, or of another kind (its text, as serde_json's).
        assert_eq!(chat::quick_body(r#"{"usage":null}"#), Some((vec![], None)));
        assert_eq!(
            messages::quick_body(r#"{"content":[]}"#),
            Some((vec![], None))
        );
        assert_eq!(
            chat::quick_body(r#"{"usage": 7 }"#),
            Some((vec![], Some("7")))
        );
        assert_eq!(
            messages::quick_body(r#"{"usage":"x"}"#),
            Some((vec![], Some(r#""x""#)))
        );
        let mut bodies = vec![chat_body.clone(), messages_body.clone()];
        // Each body names both protocols' lists, so that each reader meets what it reads.
        for body in [
            // Repeated members the struct reads.
            r#"{"choices":[],"choices":[],"content":[],"content":[]}"#,
            r#"{"usage":{"a":1},"usage":null}"#,
            r#"{"choices":[{"message":null,"message":null}],"content":[{"text":"a","text":"b"}]}"#,
            // A `\u` escape in a text; a number with a fraction in the usage.
            r#"{"choices":[{"message":{"content":"\u00e9"}}],"content":[{"text":"\u00e9"}]}"#,
            r#"{"usage":{"cost":0.5}}"#,
            // Shapes serde_json reads otherwise or refuses: by position, `null` lists,
            // a message or a block that is not an object, trailing text, a cut body.
            r#"[[{"message":{"content":"p"}}],{"a":1}]"#,
            r#"{"choices":null,"content":null}"#,
            r#"{"choices":[{"message":"m"}],"content":[["t"]]}"#,
            r#"{"choices":[],"content":[]} x"#,
            r#"{"choices":[{"message":{"content":"cut"#,
        ] {
            assert_eq!(chat::quick_body(body), None, "{body}");
            assert_eq!(messages::quick_body(body), None, "{body}");
            bodies.push(body.to_owned());
        }
        for body in &bodies {
            agrees(body.as_bytes());
        }
    }

    /// Where the one reading fails, each is read apart: a usage that does not read leaves the
    /// texts, texts that do not read leave the usage, and a body that is not an object is read
    /// as before.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn where_the_one_reading_fails_each_is_read_apart() {
        for body in [
            r#"{"choices":[{"message":{"content":"kept"}}],"usage":{"a":1},"usage":{"a":2}}"#,
            r#"{"choices":[{"message":{"content":"a"}}],"choices":[],"usage":{"a":1}}"#,
            r#"{"content":null,"output":7,"usage":{"a":1}}"#,
            r#"{"choices":[{"message":{"content":"\ud800"}}],"usage":{"a":1}}"#,
            r#"[[{"message":{"content":"by position"}}],{"a":1}]"#,
            r#"{"choices":[{"message":{"content":"cut"#,
            "",
        ] {
            agrees(body.as_bytes());
        }
        // Bytes that are not UTF-8 inside a string are read as serde_json reads bytes.
        let mut body = br#"{"choices":[{"message":{"content":"ok"}}],"id":"x"#.to_vec();
        body.extend_from_slice(&[0xff, b'"', b'}']);
        agrees(&body);
        assert_eq!(
            apart(Protocol::ChatCompletions, &body, 100).1,
            "ok",
            "serde_json skips a string it does not decode without checking it"
        );
    }

    /// A usage alone as serde_json gives it: read into a map, its top-level nulls dropped,
    /// written.
    fn read_into_a_map(raw: &str) -> Option<Usage> {
        let mut map = serde_json::from_str::<Map<String, Value>>(raw).ok()?;
        map.retain(|_, value| !value.is_null());
        Some(Usage::new(&Value::Object(map)))
    }

    /// `raw`'s usage alone, where it is written as read: that is serde_json's.
    fn written_agrees(raw: &str) -> Option<String> {
        let written = written_as_read(raw);
        if let Some(written) = &written {
            assert_eq!(
                Some(Usage::written(written.clone())),
                read_into_a_map(raw),
                "{raw:?}"
            );
        }
        assert_eq!(with_raw(None, Some(raw)), read_into_a_map(raw), "{raw:?}");
        written
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_bodys_usage_is_written_as_read_where_that_is_serde_jsons_writing() {
        // The upstreams' usages: written as read.
        for (raw, written) in [
            (
                r#"{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}"#,
                r#"{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}"#,
            ),
            (
                r#"{ "prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29, "prompt_tokens_details": { "cached_tokens": 0, "audio_tokens": 0 }, "completion_tokens_details": { "reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0 } }"#,
                r#"{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}"#,
            ),
            (
                "{\n  \"input_tokens\": 2095,\n  \"cache_creation_input_tokens\": 0,\n  \"cache_read_input_tokens\": 0,\n  \"cache_creation\": {\"ephemeral_5m_input_tokens\": 0, \"ephemeral_1h_input_tokens\": 0},\n  \"output_tokens\": 503,\n  \"service_tier\": \"standard\",\n  \"server_tool_use\": null\n}",
                r#"{"input_tokens":2095,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":503,"service_tier":"standard"}"#,
            ),
            (
                r#"{"input_tokens":5,"output_tokens_details":{"reasoning_tokens":0,"x":null,"ok":true,"no":false},"n":null}"#,
                r#"{"input_tokens":5,"output_tokens_details":{"reasoning_tokens":0,"x":null,"ok":true,"no":false}}"#,
            ),
            (r#"{"a":null}"#, "{}"),
            ("{}", "{}"),
            (r#"{"é":"ü ☃"}"#, r#"{"é":"ü ☃"}"#),
        ] {
            assert_eq!(written_agrees(raw).as_deref(), Some(written), "{raw:?}");
        }
        // Elsewhere serde_json reads it (the same usage, or none).
        for raw in [
            r#"{"a":"\u00e9"}"#,
            r#"{"\u0061":1}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"a":null}"#,
            r#"{"d":{"a":1,"a":2}}"#,
            r#"{"a":-1}"#,
            r#"{"a":-0}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e2}"#,
            r#"{"a":1234567890123456789}"#,
            r#"{"a":[1,2]}"#,
            r#"{"a":{"b":{"c":{"d":{"e":1}}}}}"#,
            r#"{"a":01}"#,
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a":tru}"#,
            r#"{"a":nullx}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":1"#,
            "[1]",
            "null",
            "",
        ] {
            assert_eq!(written_agrees(raw), None, "{raw:?}");
        }
        let many = format!(
            "{{{}}}",
            (0..=MAX_USAGE_MEMBERS)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(written_agrees(&many), None);
        // Events' usages are merged into a map first.
        let merged = with_raw(
            serde_json::from_str(r#"{"input_tokens":3}"#).ok(),
            Some(r#"{"output_tokens":4,"input_tokens":null}"#),
        );
        assert_eq!(
            merged.unwrap().as_str(),
            r#"{"input_tokens":3,"output_tokens":4}"#
        );
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn a_usage_is_written_as_read_or_read_into_a_map(raw in usage_like()) {
            written_agrees(&raw);
        }

        #[test]
        fn usage_and_text_read_together_agree_with_reading_them_apart(text in answer_like()) {
            agrees(text.as_bytes());
        }

        #[test]
        fn text_read_chunk_by_chunk_agrees_with_reading_the_bytes_again(
            events in proptest::collection::vec(0..EVENTS.len(), 0..12),
            cuts in proptest::collection::vec(0..1200usize, 0..8),
            max_bytes in 0..1300usize,
            max in proptest::sample::select(vec![0, 3, 40, usize::MAX]),
        ) {
            let body: String = events.iter().map(|&i| EVENTS[i]).collect();
            let mut cuts = cuts;
            cuts.sort_unstable();
            reads_what_reading_again_finds(body.as_bytes(), &cuts, max_bytes, max);
        }
    }

    /// A stream's text, read from the events the observer reads chunk by chunk up to a number
    /// of bytes, is the text reading those bytes again gives.
    fn reads_what_reading_again_finds(body: &[u8], cuts: &[usize], max_bytes: usize, max: usize) {
        for protocol in Protocol::ALL {
            let mut observer = UsageObserver::new(protocol, true);
            let mut text = StreamText::new(protocol, max_bytes, max);
            let mut at = 0;
            for &cut in cuts.iter().chain([&body.len()]) {
                let cut = cut.clamp(at, body.len());
                observer.feed_reading(&body[at..cut], &mut text);
                at = cut;
            }
            let whole = &body[..max_bytes.min(body.len())];
            assert_eq!(
                text.text(),
                response_text(protocol, true, whole, max),
                "{protocol:?}, {max_bytes} bytes, {max} characters, cut at {cuts:?}"
            );
            // The usage is read from every byte, kept or not.
            let mut apart = UsageObserver::new(protocol, true);
            apart.feed(body);
            assert_eq!(observer.finish(), apart.finish());
        }
    }

    /// An event of the last kept shape but for its text is not searched for a usage when the
    /// shape held none and its text names none; otherwise it is left to the filter.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn events_of_a_shape_without_usage_are_not_searched_again() {
        let chat = |text: &str, usage: &str| {
            format!(
                r#"{{"id":"c","choices":[{{"index":0,"delta":{{"content":"{text}"}}}}],"usage":{usage}}}"#
            )
        };
        let mut text = StreamText::new(Protocol::ChatCompletions, usize::MAX, usize::MAX);
        let mut known = |data: &str| {
            let reading = text.read(data);
            let kind = std::mem::discriminant(&reading);
            (kind, carries_by_shape(data, reading, &mut text.plain_shape))
        };
        let new = std::mem::discriminant(&Reading::NewShape(0..0));
        let same = std::mem::discriminant(&Reading::SameShape(0..0));
        let other = std::mem::discriminant(&Reading::Other);
        // Read whole: the filter's answer, from reading it.
        assert_eq!(known(&chat("a", "null")), (new, Some(false)));
        assert_eq!(known(&chat("bc", "null")), (same, Some(false)));
        assert_eq!(known(&chat("the usage", "null")), (same, None));
        assert_eq!(known(&chat(r"x\n", "null")), (same, Some(false)));
        // A shape with a usage: its events are read by the filter.
        assert_eq!(known(&chat("a", r#"{"n":1}"#)), (new, Some(true)));
        assert_eq!(known(&chat("b", r#"{"n":1}"#)), (same, None));
        // An event not kept as the shape leaves the shape as it was.
        assert_eq!(known(r#"{"choices":[],"usage":null}"#), (other, None));
        assert_eq!(known(&chat("c", r#"{"n":1}"#)), (same, None));
        assert_eq!(known(&chat("d", "null")), (new, Some(false)));
        assert_eq!(known(&chat("e", "null")), (same, Some(false)));
        assert_eq!(text.text(), "abcthe usagex\nabcde");
    }

    /// Events framed as the kept shape's was, and of that shape but for their text, are read
    /// without the reader; any other is left to it.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn events_of_the_kept_shape_are_read_without_the_reader() {
        let delta = |text: &str| {
            format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
            )
        };
        let mut observer = UsageObserver::new(Protocol::Messages, true);
        let mut text = StreamText::new(Protocol::Messages, usize::MAX, usize::MAX);
        // No shape yet.
        let first = delta("a");
        assert_eq!(observer.same_shape_event(first.as_bytes(), &mut text), None);
        observer.feed_reading(first.as_bytes(), &mut text);
        let two = delta("bc") + &delta("d");
        let rest = observer.same_shape_event(two.as_bytes(), &mut text);
        assert_eq!(rest, Some(delta("d").as_bytes()));
        assert_eq!(text.text(), "abc");
        // Left to the reader: an escape, `usage`, another frame, CRLF, an event not ended, a
        // line longer than the reader reads.
        for other in [
            delta(r"e\n"),
            delta("a usage"),
            delta("f").replacen("event: content_block_delta\n", "", 1),
            delta("g").replace('\n', "\r\n"),
            delta("h").trim_end().to_owned(),
            delta(&"x".repeat(observer.reader.max_line())),
        ] {
            assert_eq!(observer.same_shape_event(other.as_bytes(), &mut text), None);
        }
        // Nor while the reader holds part of a line.
        observer.feed_reading(b"event: ping", &mut text);
        assert_eq!(
            observer.same_shape_event(delta("i").as_bytes(), &mut text),
            None
        );
        assert_eq!(text.text(), "abc");
    }

    /// Events of the three protocols' streams, text and not, with line ends of both kinds.
    /// Some follow an event of the same shape but for their text, which is read without the
    /// SSE reader where it is whole in a chunk: Messages' deltas (one with an escape, one
    /// with a character outside ASCII, one ended by CRLF), and Chat's, with a null usage (one
    /// with `usage` for its text) and then a usage, another event's usage between them, so
    /// that the last usage read is wrong where an event of a shape with a usage is passed
    /// over.
    const EVENTS: [&str; 19] = [
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w0 \"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"caf\\u00e9 src/lib.rs\"}}]}\r\n\r\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"see docs/a.md \"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"and src/b.rs \"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\\nb\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\u{e9}t\u{e9}\"}}\n\n",
        "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"crlf\"}}\r\n\r\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"\u{e9}t\u{e9} \"}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n",
        ": a comment\n\n",
        "data: line one\ndata: line two\n\n",
        "data: [DONE]\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w1 \"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w4 \"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"usage\"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w2\"}}],\"usage\":{\"completion_tokens\":1}}\n\n",
        "data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w3\"}}],\"usage\":{\"completion_tokens\":1}}\n\n",
    ];

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_streams_text_read_as_it_passes_is_what_reading_its_bytes_again_finds() {
        let body: String = EVENTS.concat().repeat(3);
        let body = body.as_bytes();
        for max_bytes in [
            0,
            1,
            40,
            41,
            42,
            250,
            body.len() - 1,
            body.len(),
            usize::MAX,
        ] {
            for max in [0, 5, usize::MAX] {
                reads_what_reading_again_finds(body, &[], max_bytes, max);
                reads_what_reading_again_finds(body, &[1, 7, 60, 61, 300], max_bytes, max);
                let bytes: Vec<usize> = (1..body.len()).collect();
                reads_what_reading_again_finds(body, &bytes, max_bytes, max);
                // Each event a chunk of its own, as upstreams send them.
                let ends: Vec<usize> = EVENTS
                    .iter()
                    .cycle()
                    .take(3 * EVENTS.len())
                    .scan(0, |end, event| {
                        *end += event.len();
                        Some(*end)
                    })
                    .collect();
                reads_what_reading_again_finds(body, &ends, max_bytes, max);
            }
        }
        // A longer stream, cut at a few places.
        let body: String = EVENTS.concat().repeat(60);
        let body = body.as_bytes();
        for max_bytes in [9000, body.len() / 2, usize::MAX] {
            for max in [5, usize::MAX] {
                reads_what_reading_again_finds(body, &[], max_bytes, max);
                reads_what_reading_again_finds(body, &[1, 700, 8193, 20000], max_bytes, max);
            }
        }
    }

    /// JSON texts made of the members the readings look for, with values of every kind
    /// (numbers serde_json refuses, strings with escapes it refuses, `null` where a sequence
    /// goes).
    #[cfg(not(target_arch = "wasm32"))]
    fn answer_like() -> impl proptest::strategy::Strategy<Value = String> {
        let scalars = [
            "null",
            "true",
            "0",
            "18",
            "-3",
            "1e400",
            r#""text""#,
            r#""esc \"q\" \n \u00e9""#,
            r#""lone \ud800""#,
        ];
        let keys = [
            "choices", "message", "delta", "content", "text", "output", "usage", "other",
        ];
        super::super::tests::json_like(&scalars, &keys)
    }

    /// Usage-like JSON texts: objects of token counts and details, with the values and keys
    /// that are written otherwise than read or refused.
    #[cfg(not(target_arch = "wasm32"))]
    fn usage_like() -> impl proptest::strategy::Strategy<Value = String> {
        let scalars = [
            "null",
            "true",
            "false",
            "0",
            "7",
            "18",
            "-3",
            "-0",
            "01",
            "1.5",
            "1e2",
            "123456789012345678",
            "1234567890123456789",
            r#""standard""#,
            r#""é \u00e9""#,
            r#""q\"q""#,
            r#""☃""#,
        ];
        let keys = [
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "details",
            "a\\u0062",
            "é",
        ];
        super::super::tests::json_like(&scalars, &keys)
    }
}
