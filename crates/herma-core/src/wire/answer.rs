//! The answer's text, read back from a relayed response (JSON or SSE) for entity memory. A
//! JSON answer's is read by the memory worker, or where the answer ends, in the same reading
//! as its usage ([`UsageObserver::finish_with_text`](super::usage::UsageObserver::finish_with_text));
//! a relayed stream's as its events pass, from each event the usage observer reads
//! ([`StreamText`]), so the stream is not split into events again nor its events kept. Where
//! the text is in an event or a body is the protocol's knowledge
//! ([`WireProtocol::stream_text`](super::WireProtocol::stream_text),
//! [`WireProtocol::body_text`](super::WireProtocol::body_text)): each reads only the members
//! that hold text, borrowing them, and skips the rest of the JSON unparsed (an event through
//! the quick reader of `wire::quick` where it is sure, else serde_json).

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use serde_json::value::RawValue;

use super::quick::Reading;
use super::sse::Reader;
use super::{EventLead, Protocol, WireProtocol};

/// A member read for its text: a string, or nothing when it is anything else (a shape Herma
/// does not know yields no text rather than failing the whole event).
#[derive(Debug, Default)]
pub(super) struct Text<'a>(pub(super) Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'a>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Text<'a>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        deserializer.deserialize_any(TextVisitor(std::marker::PhantomData))
    }
}

/// What a protocol reads of a whole answer body for its texts (the rest is skipped unparsed).
pub(super) trait BodyTexts<'a>: Deserialize<'a> {
    /// The texts, in order.
    fn push_texts(self, push: &mut dyn FnMut(&str));
}

/// A [`BodyTexts`] shape that reads the body's `usage` beside the texts, in one derived struct.
pub(super) trait BodyTextsAndUsage<'a>: BodyTexts<'a> {
    fn usage(&self) -> Option<&'a RawValue>;
}

/// [`WireProtocol::body_text`](super::WireProtocol::body_text) of a body read as `T`.
pub(super) fn body_text<'a, T: BodyTexts<'a>>(body: &'a [u8], push: &mut dyn FnMut(&str)) {
    if let Some(read) = read::<T>(body) {
        read.push_texts(push);
    }
}

/// The texts and usage of a body read by the quick reader (`wire::quick`), `None` where it is
/// not sure.
pub(super) type QuickBody = for<'a> fn(&'a str) -> Option<(Vec<Cow<'a, str>>, Option<&'a str>)>;

/// [`WireProtocol::body_usage_and_text`](super::WireProtocol::body_usage_and_text) of a body
/// read as `T`, by `quick` where it is sure (it reads a body as serde_json reads it into `T`),
/// else by serde_json: nothing is pushed unless the whole body read.
pub(super) fn body_usage_and_text<'a, T: BodyTextsAndUsage<'a>>(
    body: &'a [u8],
    push: &mut dyn FnMut(&str),
    quick: Option<QuickBody>,
) -> Option<Option<&'a str>> {
    if let Some(quick) = quick
        && let Some(text) = crate::utf8::str(body)
        && let Some((texts, usage)) = quick(text)
    {
        for text in &texts {
            push(text);
        }
        return Some(usage);
    }
    let read = read::<T>(body)?;
    let usage = read.usage().map(RawValue::get);
    read.push_texts(push);
    Some(usage)
}

/// `data` read as `T`, when it is JSON of that shape.
pub(super) fn read<'d, T: Deserialize<'d>>(data: &'d [u8]) -> Option<T> {
    // Read from bytes, serde_json checks every string it decodes (each key) as UTF-8; text
    // checked once as a whole it does not check again. Same reading, same result.
    match crate::utf8::str(data) {
        Some(text) => serde_json::from_str(text).ok(),
        None => serde_json::from_slice(data).ok(),
    }
}

/// [`read`] for text already known to be UTF-8 (an SSE event's data): its strings are not
/// checked again.
pub(super) fn read_str<'d, T: Deserialize<'d>>(data: &'d str) -> Option<T> {
    serde_json::from_str(data).ok()
}

/// The first `max` characters of `text` (where [`response_text`] would stop).
pub fn first_chars(text: &str, max: usize) -> &str {
    // A text of no more bytes than `max` has no more characters either.
    if text.len() <= max {
        return text;
    }
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// An answer's texts joined, up to a number of characters.
#[derive(Clone, Debug, Default)]
pub struct AnswerText {
    out: String,
    /// Counted as it grows: recounting per delta would be quadratic in a long stream.
    chars: usize,
    max: usize,
}

impl AnswerText {
    /// Empty, keeping up to `max` characters.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            ..Self::default()
        }
    }

    /// Adds `text`, as much of it as there is room for.
    pub fn push(&mut self, text: &str) {
        let room = self.max.saturating_sub(self.chars);
        // A text of no more bytes than there is room for characters fits whole (a character
        // is at least a byte): copied at once, its characters counted without being pushed.
        if text.len() <= room {
            self.out.push_str(text);
            self.chars += text.chars().count();
            return;
        }
        let before = self.out.len();
        self.out.extend(text.chars().take(room));
        self.chars += self.out[before..].chars().count();
    }

    /// [`push`](Self::push) for ASCII bytes, each a character (no UTF-8 check, no count).
    fn push_ascii(&mut self, text: &[u8]) {
        let take = text.len().min(self.max.saturating_sub(self.chars));
        self.out
            .extend(text.iter().take(take).map(|&byte| char::from(byte)));
        self.chars += take;
    }

    /// It holds `max` characters: [`push`](Self::push) adds nothing more.
    pub fn is_full(&self) -> bool {
        self.chars >= self.max
    }

    pub fn into_string(self) -> String {
        self.out
    }
}

/// The assistant text of a response body, up to `max` characters.
pub fn response_text(protocol: Protocol, streaming: bool, body: &[u8], max: usize) -> String {
    let mut out = AnswerText::new(max);
    let wire = protocol.wire();
    if streaming {
        let mut reader = Reader::default();
        let mut lead = EventLead::default();
        reader.feed(body, &mut |event| {
            push_event_text(wire, &event.data, &mut lead, &mut out)
        });
    } else {
        wire.body_text(body, &mut |text| out.push(text));
    }
    out.into_string()
}

/// Adds a stream event's text (its `data`) to `out`; `lead` is the stream's.
fn push_event_text(
    wire: &dyn WireProtocol,
    data: &str,
    lead: &mut EventLead,
    out: &mut AnswerText,
) {
    // Once full, a text takes nothing more: the rest of the events are not read.
    if out.is_full() {
        return;
    }
    if let Some(text) = wire.stream_text(data, lead) {
        out.push(&text);
    }
}

/// A relayed stream's answer text, read as its events pass: the text of the events that end
/// within the stream's first `max_bytes` bytes, up to `max_chars` characters, which is what
/// [`response_text`] finds in those bytes. Read this way, the stream is neither kept nor split
/// into events a second time; the usage observer hands it each event it reads
/// ([`UsageObserver::feed_reading`](super::usage::UsageObserver::feed_reading)).
#[derive(Clone, Debug)]
pub struct StreamText {
    protocol: Protocol,
    lead: EventLead,
    text: AnswerText,
    /// The stream's bytes still to be read for events.
    room: usize,
    /// The shape the lead keeps ([`Reading::NewShape`]) is known to carry no usage: the usage
    /// observer's, kept here beside the shape it is about.
    pub(super) plain_shape: bool,
    /// Where the kept shape is plain, was its event's only data line and did not end the
    /// stream: the bytes that framed it before its data (its `event:` line, `data: `). An
    /// event framed so, of that shape but for its text, is read without the SSE reader
    /// ([`UsageObserver::feed_reading`](super::usage::UsageObserver::feed_reading)).
    pub(super) frame: Option<Vec<u8>>,
}

impl StreamText {
    pub fn new(protocol: Protocol, max_bytes: usize, max_chars: usize) -> Self {
        Self {
            protocol,
            lead: EventLead::default(),
            text: AnswerText::new(max_chars),
            room: max_bytes,
            plain_shape: false,
            frame: None,
        }
    }

    /// Splits `chunk`, the stream's next bytes, into the part still read for events and the
    /// rest, counting the first as read.
    pub(super) fn take_room<'c>(&mut self, chunk: &'c [u8]) -> (&'c [u8], &'c [u8]) {
        let (within, beyond) = chunk.split_at(chunk.len().min(self.room));
        self.room -= within.len();
        (within, beyond)
    }

    /// Adds the text of an event (its `data`); what the reading found of the event's shape.
    pub(super) fn read(&mut self, data: &str) -> Reading {
        push_event_text(self.protocol.wire(), data, &mut self.lead, &mut self.text);
        self.lead.take_reading()
    }

    /// The kept shape's bytes around its text ([`EventLead::around_text`]).
    pub(super) fn around_text(&self) -> Option<(&[u8], &[u8])> {
        self.lead.around_text()
    }

    /// Adds the text of an event of the kept shape read without the reader: `raw`, a string's
    /// bytes without escapes; `None`, adding nothing, where they are not UTF-8. Text deltas
    /// are mostly a few ASCII bytes: those are added without the UTF-8 check.
    pub(super) fn push_raw(&mut self, raw: &[u8]) -> Option<()> {
        if raw.is_ascii() {
            self.text.push_ascii(raw);
        } else {
            self.text.push(crate::utf8::str(raw)?);
        }
        Some(())
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;
    use crate::wire::direct::DirectAnswer;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn text_is_read_back_from_every_protocol_and_shape() {
        for protocol in Protocol::ALL {
            let answer = DirectAnswer {
                protocol,
                model: "m",
                text: "see src/lib.rs",
                id_hex: "1",
                created: Timestamp::default(),
                stream_usage: false,
            };
            assert_eq!(
                response_text(protocol, false, &answer.json(), 100),
                "see src/lib.rs"
            );
            assert_eq!(
                response_text(protocol, true, &answer.sse(), 100),
                "see src/lib.rs"
            );
            assert_eq!(response_text(protocol, true, &answer.sse(), 3), "see");
        }
        assert_eq!(response_text(Protocol::Messages, false, b"garbage", 10), "");
    }

    /// A direct answer's text bounded as reading its rendered answer back would bound it.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn first_chars_stops_where_reading_the_answer_back_stops() {
        for text in ["", "abc", "héllo wörld 🚀🚀", &"é".repeat(100)] {
            for max in [0, 1, 3, 5, 12, 99, 100, 1000] {
                let answer = DirectAnswer {
                    protocol: Protocol::Messages,
                    model: "m",
                    text,
                    id_hex: "1",
                    created: Timestamp::default(),
                    stream_usage: false,
                };
                assert_eq!(
                    first_chars(text, max),
                    response_text(Protocol::Messages, false, &answer.json(), max),
                    "{text:?} at {max}"
                );
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_text_stops_at_max_characters_across_deltas() {
        let delta = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"abcé"}}"#;
        let body = format!("event: content_block_delta\ndata: {delta}\n\n").repeat(1000);
        let text = response_text(Protocol::Messages, true, body.as_bytes(), 10);
        assert_eq!(text, "abcéabcéab");
        let all = response_text(Protocol::Messages, true, body.as_bytes(), usize::MAX);
        assert_eq!(all.chars().count(), 4000);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn only_string_members_give_text_and_escapes_are_decoded() {
        let chat = |delta: &str| {
            format!(
                r#"data: {{"id":"c","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#
            )
        };
        let body = [
            chat(r#"{"role":"assistant","content":null}"#),
            chat(r#"{"content":"line\none \u00e9 "}"#),
            chat(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}"#),
            chat(r#"{"content":["not","text"]}"#),
            chat(r#"{"content":"src/lib.rs"}"#),
            "data: [DONE]".to_owned(),
        ]
        .join("\n\n")
            + "\n\n";
        assert_eq!(
            response_text(Protocol::ChatCompletions, true, body.as_bytes(), 100),
            "line\none é src/lib.rs"
        );
        let messages = concat!(
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\\"quoted\\\"\"}}\n\n",
        );
        assert_eq!(
            response_text(Protocol::Messages, true, messages.as_bytes(), 100),
            "\"quoted\""
        );
        let responses = concat!(
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"kept\"}\n\n",
            "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"skipped\"}\n\n",
        );
        assert_eq!(
            response_text(Protocol::Responses, true, responses.as_bytes(), 100),
            "kept"
        );
        // Whole bodies: every string text in order; other shapes give none, not a failure.
        let body = br#"{"choices":[{"message":{"content":"a"}},{"message":{"content":7}},{"message":{"content":"b"}}]}"#;
        assert_eq!(
            response_text(Protocol::ChatCompletions, false, body, 100),
            "ab"
        );
        let body = br#"{"output":[{"type":"reasoning"},{"content":[{"type":"output_text","text":"x"},{"text":{"y":1}}]}]}"#;
        assert_eq!(response_text(Protocol::Responses, false, body, 100), "x");
        let body = br#"{"content":[{"type":"tool_use","input":{}},{"type":"text","text":"t"}]}"#;
        assert_eq!(response_text(Protocol::Messages, false, body, 100), "t");
    }
}
