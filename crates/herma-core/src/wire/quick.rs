//! A quick reader for the small JSON events of a relayed stream, for the member that holds the
//! answer's text ([`WireProtocol::stream_text`](super::WireProtocol::stream_text)). serde_json
//! spends about twenty instructions a byte on a 200-byte event (a key's string, a skipped
//! member's frame, the `Vec` of choices), and a stream has one event a token. Chat's and
//! Messages' whole JSON answers are read by it too, for their texts and usage
//! ([`Scan::texts_and_usage`]).
//!
//! It reads a common subset of JSON exactly as serde_json reads it into the protocols' derived
//! structs, and answers "not sure" (`None`) at anything outside that subset: an escape in a key,
//! a `\u` escape in a text it returns, a number with a fraction or an exponent or of more than
//! 18 digits, nesting deeper than [`MAX_DEPTH`], a member a derived struct refuses (repeated,
//! or of a type it does not take, such as a struct written as an array) and anything that is
//! not JSON. The caller then reads the event or body with serde_json, as before: every text
//! returned is the one serde_json would have read.

use std::borrow::Cow;

/// Deeper values are left to serde_json (which skips ignored values without a limit).
const MAX_DEPTH: u32 = 64;

/// A cursor over one JSON text. Every method returns `None` when it is not sure (see the
/// module's documentation); a caller passes that on.
pub(super) struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after JSON's whitespace (serde_json's four), not taken.
    fn peek(&mut self) -> Option<u8> {
        while let Some(&byte) = self.bytes().get(self.at) {
            match byte {
                b' ' | b'\n' | b'\t' | b'\r' => self.at += 1,
                _ => return Some(byte),
            }
        }
        None
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Nothing but whitespace is left: the text was one value.
    pub(super) fn end(mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// Reads `data` as one value, by `read`: nothing but whitespace may follow it.
    pub(super) fn whole(data: &'a str, read: impl FnOnce(&mut Self) -> Option<()>) -> Option<()> {
        let mut scan = Self::new(data);
        read(&mut scan)?;
        scan.end()
    }

    /// An event's text, in its top-level member `name`, read by `read` (once; the event's other
    /// members are skipped), from after `lead` where the event begins with it
    /// ([`only_led`](Self::only_led)): the reading each protocol whose events open with other
    /// members shares.
    ///
    /// An event that is the last one whose text was a string without escapes but for that
    /// string ([`EventLead::same_but_text`]) is not read again: its text is that string's.
    /// That holds because `read` only keeps the text it returns, deciding nothing on it.
    pub(super) fn led_text(
        data: &'a str,
        name: &str,
        lead: &mut EventLead,
        mut read: impl FnMut(&mut Self) -> Option<Option<Cow<'a, str>>>,
    ) -> Option<Option<Cow<'a, str>>> {
        lead.reading = Reading::Other;
        if let Some((text, raw)) = lead.same_but_text(data) {
            lead.reading = Reading::SameShape(raw);
            return Some(Some(text));
        }
        let mut text = None;
        Self::whole(data, |scan| {
            scan.only_led(name, Some(&mut *lead), |scan| {
                text = read(scan)?;
                Some(())
            })
        })?;
        if let Some(Cow::Borrowed(raw)) = &text
            && lead.keep_shape(data, raw)
        {
            let (start, end) = lead.text_at;
            lead.reading = Reading::NewShape(start..end);
        }
        Some(text)
    }

    /// A whole answer body's texts and usage, as a derived struct of two defaulted members reads
    /// them: `list`, a sequence whose elements `element` reads (adding their texts to the
    /// list it is given), and `usage` (`Option<&RawValue>`: `null`, or any value's text), each
    /// at most once; other members skipped.
    pub(super) fn texts_and_usage(
        body: &'a str,
        list: &str,
        mut element: impl FnMut(&mut Self, &mut Vec<Cow<'a, str>>) -> Option<()>,
    ) -> Option<(Vec<Cow<'a, str>>, Option<&'a str>)> {
        let (mut texts, mut usage) = (Vec::new(), None);
        Self::whole(body, |scan| {
            scan.each_once([list, "usage"], |scan, named| match named {
                0 => scan.elements(|scan| element(scan, &mut texts)),
                _ => {
                    usage = scan.raw_unless_null()?;
                    Some(())
                }
            })
        })?;
        Some((texts, usage))
    }

    /// Reads an object whose members named in `names` are each read by `read` (given the
    /// name's index), at most once (a derived struct refuses a repeated member), and whose
    /// other members are skipped.
    pub(super) fn each_once<const N: usize>(
        &mut self,
        names: [&str; N],
        mut read: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        let mut seen = [false; N];
        self.members(|scan, key| {
            let Some(named) = names.iter().position(|name| *name == key) else {
                return scan.skip();
            };
            if std::mem::replace(&mut seen[named], true) {
                return None;
            }
            read(scan, named)
        })
    }

    /// A value read as `Option<&RawValue>`: nothing for `null`, else the value's own text.
    fn raw_unless_null(&mut self) -> Option<Option<&'a str>> {
        if self.null()? {
            return Some(None);
        }
        // `null` looked past the white space: the value starts here.
        let start = self.at;
        self.skip()?;
        self.text.get(start..self.at).map(Some)
    }

    /// Reads an object, handing each member's key to `member`, which reads its value.
    pub(super) fn members(
        &mut self,
        mut member: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.sequence(b'{', b'}', |scan| scan.member(&mut member))
    }

    /// One member: its key (without an escape), the colon, and its value, read by `value`.
    fn member(&mut self, value: &mut impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'"')?;
        let (key, escaped) = self.string()?;
        if escaped {
            return None;
        }
        self.eat(b':')?;
        value(self, key)
    }

    /// Reads an object whose member `name` is read by `read`, once (a derived struct refuses a
    /// repeated member), and whose other members are skipped.
    pub(super) fn only(
        &mut self,
        name: &str,
        read: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.only_led(name, None, read)
    }

    /// [`only`](Self::only), for an object that opens the text, resuming after `lead` when the
    /// text begins with it: the object's opening and the members skipped before `name` in the
    /// last text read this way, each of the same stream's events repeats them (Chat's id,
    /// object, creation time and model; Messages' type and index). A reading depends only on
    /// the bytes read, so after the same bytes it is where the last one was there: inside the
    /// object, `name` not yet met, at a member. The lead then kept is this text's.
    fn only_led(
        &mut self,
        name: &str,
        lead: Option<&mut EventLead>,
        mut read: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        let opens = self.at == 0;
        let resumed = match lead.as_deref() {
            Some(lead) if opens && lead.begins(self.bytes()) => Some(lead.bytes.len()),
            _ => None,
        };
        let mut seen = false;
        // Whether members were skipped before `name`, and where `name`'s member starts then.
        let (mut skipped, mut named_at) = (resumed.is_some(), None);
        let mut item = |scan: &mut Self| {
            let start = scan.at;
            scan.member(&mut |scan, key| {
                if key != name {
                    skipped |= !seen;
                    return scan.skip();
                }
                if std::mem::replace(&mut seen, true) {
                    return None;
                }
                named_at = skipped.then_some(start);
                read(scan)
            })
        };
        match resumed {
            Some(after) => {
                self.at = after;
                self.items(b'}', &mut item)?;
            }
            None => self.sequence(b'{', b'}', item)?,
        }
        if let Some(lead) = lead.filter(|_| opens) {
            lead.keep(self.bytes(), named_at, resumed);
        }
        Some(())
    }

    /// Reads an array, `element` reading each of its values.
    pub(super) fn elements(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.sequence(b'[', b']', element)
    }

    /// `open`, items read by `item` and separated by commas, `close`.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(open)?;
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        self.items(close, &mut item)
    }

    /// A sequence's items from one (after its opening or a comma) to its `close`.
    fn items(&mut self, close: u8, item: &mut impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                byte if byte == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Skips a value (serde_json's `IgnoredAny`).
    pub(super) fn skip(&mut self) -> Option<()> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.string().map(drop)
            }
            b'{' if depth < MAX_DEPTH => self.members(|scan, _| scan.skip_at(depth + 1)),
            b'[' if depth < MAX_DEPTH => self.elements(|scan| scan.skip_at(depth + 1)),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    /// `null`, read; `false` (nothing read) for any other value: an `Option`'s reading.
    pub(super) fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }

    /// A value read as [`answer::Text`](super::answer::Text) reads it: a string's text, and
    /// nothing for any other value.
    pub(super) fn text(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.peek()? != b'"' {
            self.skip()?;
            return Some(None);
        }
        self.at += 1;
        let (raw, escaped) = self.string()?;
        if !escaped {
            return Some(Some(Cow::Borrowed(raw)));
        }
        unescape(raw).map(|text| Some(Cow::Owned(text)))
    }

    /// An optional struct of one text member `name` (`Option<struct { name: Text }>`): `null`,
    /// or an object whose `name` is read as [`text`](Self::text), once.
    pub(super) fn text_in(&mut self, name: &str) -> Option<Option<Cow<'a, str>>> {
        if self.null()? {
            return Some(None);
        }
        let mut text = None;
        self.only(name, |scan| {
            text = scan.text()?;
            Some(())
        })?;
        Some(text)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes().get(self.at..)?.starts_with(word);
        found.then(|| self.at += word.len())
    }

    /// An integer of at most 18 digits, without a leading zero; a fraction or an exponent is
    /// left to serde_json (as a text's number, it may be out of a float's range).
    fn integer(&mut self) -> Option<()> {
        let bytes = self.bytes();
        if bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let digits = self.at;
        while bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let count = self.at - digits;
        if count == 0 || count > 18 || (count > 1 && bytes[digits] == b'0') {
            return None;
        }
        match bytes.get(self.at) {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(()),
        }
    }

    /// A string's raw text, its opening quote read, and whether it holds an escape. Escapes
    /// are checked as serde_json checks a skipped string's (a `\u` needs four hex digits).
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let bytes = self.bytes();
        let start = self.at;
        let mut at = start;
        let mut escaped = false;
        loop {
            // The next stop, eight bytes at a time.
            at = crate::json::plain(bytes, at);
            match *bytes.get(at)? {
                b'"' => {
                    let raw = self.text.get(start..at)?;
                    self.at = at + 1;
                    return Some((raw, escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *bytes.get(at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                        b'u' => {
                            let hex = bytes.get(at + 2..at + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            at += 6;
                        }
                        _ => return None,
                    }
                }
                // A raw control character.
                _ => return None,
            }
        }
    }
}

/// What [`Scan::led_text`] keeps of the events it read, for the next event of the same stream
/// (held by whoever reads a stream's events, one after another):
///
/// - the opening of the last event read, up to its member read, when members were skipped
///   before it: where the next event, beginning with the same bytes, is read from;
/// - the last event whose text was a string without escapes, and where that string was in it
///   (its shape): an event that differs from it only in that string is not read again.
#[derive(Clone, Debug, Default)]
pub struct EventLead {
    bytes: Vec<u8>,
    shape: Vec<u8>,
    /// Where the text's raw string (between its quotes) is in `shape`.
    text_at: (usize, usize),
    /// What the last reading found of its event's shape.
    reading: Reading,
}

/// What [`Scan::led_text`] found of an event's shape ([`EventLead::take_reading`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Neither of the others: the event was not read by [`Scan::led_text`], or read without
    /// being kept as the shape (which is left as it was).
    #[default]
    Other,
    /// Read whole, and kept as the shape the next events are compared with: a JSON object
    /// whose text is a string value without escapes, at this range of the event (between its
    /// quotes).
    NewShape(std::ops::Range<usize>),
    /// The kept shape but for its text's string, whose raw text (between its quotes) is at
    /// this range of the event: every byte before the string's opening quote and from its
    /// closing quote on is the shape's.
    SameShape(std::ops::Range<usize>),
}

impl EventLead {
    /// The text of `data` when it is the last shape but for its text's string: the same bytes
    /// up to the string's opening quote, a string (checked as [`Scan::string`] checks it), and
    /// the same bytes from its closing quote on. A reading depends only on the bytes read, and
    /// the readings never look at the text they return, only keep it: up to the string the
    /// reading of `data` is where the shape's reading was, and from its closing quote on it
    /// reads the same bytes in the same state, which the shape's reading read through to its
    /// end; so it returns this string's text. `None` when `data` is not such an event, or its
    /// string is outside the quick reader's subset (then it is read as any other).
    fn same_but_text<'d>(&self, data: &'d str) -> Option<(Cow<'d, str>, std::ops::Range<usize>)> {
        let (start, end) = self.text_at;
        if self.shape.is_empty() || data.as_bytes().get(..start)? != self.shape.get(..start)? {
            return None;
        }
        let mut scan = Scan {
            text: data,
            at: start,
        };
        let (raw, escaped) = scan.string()?;
        // `scan.at` is past the closing quote, as `end + 1` is in the shape.
        if data.as_bytes().get(scan.at..)? != self.shape.get(end + 1..)? {
            return None;
        }
        let at = start..scan.at - 1;
        if !escaped {
            return Some((Cow::Borrowed(raw), at));
        }
        Some((Cow::Owned(unescape(raw)?), at))
    }

    /// Keeps `data`, read whole, as the shape, its text being `raw`, a string's raw text
    /// borrowed from it; whether it was kept (else the shape is left as it was).
    fn keep_shape(&mut self, data: &str, raw: &str) -> bool {
        let Some(start) = (raw.as_ptr() as usize).checked_sub(data.as_ptr() as usize) else {
            return false;
        };
        let end = start + raw.len();
        // A string's raw text, between its quotes, within `data`.
        if start == 0 || data.as_bytes().get(start - 1) != Some(&b'"') {
            return false;
        }
        if data.as_bytes().get(end) != Some(&b'"') {
            return false;
        }
        self.shape.clear();
        self.shape.extend_from_slice(data.as_bytes());
        self.text_at = (start, end);
        true
    }

    /// The kept shape's bytes up to its text's string (its opening quote last) and from the
    /// string's closing quote on.
    pub(crate) fn around_text(&self) -> Option<(&[u8], &[u8])> {
        let (start, end) = self.text_at;
        if self.shape.is_empty() {
            return None;
        }
        Some((self.shape.get(..start)?, self.shape.get(end..)?))
    }

    /// What the last reading found of its event's shape, taken (an event read otherwise, as
    /// Responses' are, leaves [`Reading::Other`]).
    pub(crate) fn take_reading(&mut self) -> Reading {
        std::mem::take(&mut self.reading)
    }

    /// `text` begins with the lead (none begins with an empty one).
    fn begins(&self, text: &[u8]) -> bool {
        !self.bytes.is_empty() && text.starts_with(&self.bytes)
    }

    /// Keeps `text` up to `end` (nothing without one); `resumed`, the length of the lead it
    /// began with (then the bytes up to there are the same, and only the rest is copied).
    fn keep(&mut self, text: &[u8], end: Option<usize>, resumed: Option<usize>) {
        let Some(end) = end else {
            self.bytes.clear();
            return;
        };
        let same = resumed.filter(|&len| len <= end).unwrap_or(0);
        self.bytes.truncate(same);
        self.bytes.extend_from_slice(&text[same..end]);
    }
}

/// A string's text with its short escapes decoded; a `\u` escape is left to serde_json (which
/// refuses a lone surrogate in a text it returns).
fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        out.push_str(rest.get(..at)?);
        out.push(match *rest.as_bytes().get(at + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => return None,
        });
        rest = rest.get(at + 2..)?;
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::{chat, messages, responses};
    use super::*;

    type Reading = for<'d> fn(&'d str) -> Option<Cow<'d, str>>;
    type Quick = for<'d> fn(&'d str, &mut EventLead) -> Option<Option<Cow<'d, str>>>;

    /// Each protocol's serde_json reading and quick reading of an event's text.
    const READERS: [(&str, Reading, Quick); 3] = [
        ("chat", chat::event_text, chat::quick_event_text),
        ("messages", messages::event_text, messages::quick_event_text),
        (
            "responses",
            responses::event_text,
            responses::quick_event_text,
        ),
    ];

    /// Where the quick reader answers, it answers as serde_json does.
    fn agrees(data: &str) -> Vec<Option<Option<String>>> {
        READERS
            .iter()
            .map(|(name, serde, quick)| {
                let quick = quick(data, &mut EventLead::default()).map(|t| t.map(Cow::into_owned));
                if let Some(text) = &quick {
                    let expected = serde(data).map(Cow::into_owned);
                    assert_eq!(text, &expected, "{name} reads {data:?}");
                }
                quick
            })
            .collect()
    }

    /// Each protocol's quick reading (checked against serde_json's): `None` where not sure.
    fn quick(data: &str) -> [Option<Option<String>>; 3] {
        let readings = agrees(data);
        std::array::from_fn(|i| readings[i].clone())
    }

    /// A text read quickly.
    fn text(text: &str) -> Option<Option<String>> {
        Some(Some(text.to_owned()))
    }

    /// Read quickly: no text.
    const NONE: Option<Option<String>> = Some(None);

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_events_upstreams_send_are_read_quickly() {
        let chat = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1796000000,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"w0 "},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        assert_eq!(quick(chat), [text("w0 "), NONE, NONE]);
        let messages = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello\n\"there\"\t\\ /\/"}}"#;
        assert_eq!(
            quick(messages),
            [NONE, text("Hello\n\"there\"\t\\ //"), NONE]
        );
        // Messages reads `delta` as a struct: a string there is refused, by serde_json.
        let responses = " {\"type\" : \"response.output_text.delta\", \"sequence_number\": 4, \"item_id\": \"msg_1\", \"output_index\": 0, \"content_index\": 0, \"delta\": \"caf\u{e9} \", \"logprobs\": [] }\r\n";
        assert_eq!(quick(responses), [NONE, None, text("caf\u{e9} ")]);
        // Only the first choice's delta; a message beside it is read and left.
        let choices = r#"{"choices":[{"delta":null,"message":{"content":"m"}},{"delta":{"content":"second"}}]}"#;
        assert_eq!(quick(choices), [NONE, NONE, NONE]);
        let choices = r#"{"choices":[{"delta":{"content":"first","role":"assistant"}},{"delta":{"content":"second"}}]}"#;
        assert_eq!(quick(choices), [text("first"), NONE, NONE]);
        // A text member that is not a string is no text; ignored members of every kind.
        let other = r#"{"delta":{"text":[1,{"a":"\u00e9"}]},"x":[-0,true,false,null,{"b":[]}],"choices":[]}"#;
        assert_eq!(quick(other), [NONE, NONE, NONE]);
        let kind = r#"{"type":"response.output_text.delta","delta":{"text":"no"}}"#;
        assert_eq!(quick(kind), [NONE, text("no"), NONE]);
        let escaped_kind = r#"{"type":"response\/output_text.delta","delta":"x"}"#;
        assert_eq!(quick(escaped_kind), [NONE, None, NONE]);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn outside_its_subset_it_leaves_the_event_to_serde_json() {
        // A text with a `\u` escape (a lone surrogate is refused in a text returned).
        let chat = r#"{"choices":[{"delta":{"content":"\u00e9"}}]}"#;
        assert_eq!(quick(chat), [None, NONE, NONE]);
        let messages = r#"{"delta":{"text":"\ud800"}}"#;
        assert_eq!(quick(messages), [NONE, None, NONE]);
        let responses = r#"{"type":"response.output_text\u002edelta","delta":"x"}"#;
        assert_eq!(quick(responses), [NONE, None, None]);
        for data in [
            // A key with an escape.
            r#"{"d\u0065lta":{"text":"x"},"ch\u006fices":[],"typ\u0065":"x"}"#,
            // A repeated member the structs read.
            r#"{"delta":null,"delta":null,"choices":[],"choices":[],"type":1,"type":2}"#,
            // Numbers with a fraction or an exponent, or too long.
            r#"{"n":1.5,"delta":null}"#,
            r#"{"n":1e400,"choices":[]}"#,
            r#"{"n":1234567890123456789,"type":null}"#,
            // Not JSON: control character, bad escape, leading zero, trailing comma, trailing
            // text, a bare minus, a cut text, nothing.
            "{\"a\":\"tab\there\",\"delta\":null,\"choices\":[],\"type\":1}",
            r#"{"a":"\q"}"#,
            r#"{"a":01}"#,
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":1} x"#,
            r#"{"a":-}"#,
            r#"{"a":"cut"#,
            "",
            // Not an object.
            r#"["x"]"#,
            "null",
        ] {
            assert_eq!(quick(data), [None, None, None], "{data:?}");
        }
        // A repeated member inside the structs, where the text would have been read.
        let chat = r#"{"choices":[{"delta":{"content":"a"},"delta":{"content":"b"}}]}"#;
        assert_eq!(quick(chat), [None, NONE, NONE]);
        let chat = r#"{"choices":[{"delta":{"content":"a"},"message":null,"message":null}]}"#;
        assert_eq!(quick(chat), [None, NONE, NONE]);
        let chat = r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#;
        assert_eq!(quick(chat), [None, NONE, NONE]);
        let messages = r#"{"delta":{"text":"a","text":"b"}}"#;
        assert_eq!(quick(messages), [NONE, None, NONE]);
        let responses = r#"{"type":"response.output_text.delta","delta":"a","delta":"b"}"#;
        assert_eq!(quick(responses), [NONE, None, None]);
        // A struct written as an array (serde_json reads it by position).
        let chat = r#"{"choices":[[{"content":"x"}]]}"#;
        assert_eq!(quick(chat), [None, NONE, NONE]);
        let messages = r#"{"delta":["x"]}"#;
        assert_eq!(quick(messages), [NONE, None, NONE]);
        // Nesting deeper than the limit.
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(70), "]".repeat(70));
        assert_eq!(quick(&deep), [None, None, None]);
        let shallow = format!("{{\"a\":{}1{}}}", "[".repeat(60), "]".repeat(60));
        assert_eq!(quick(&shallow), [NONE, NONE, NONE]);
    }

    /// Each protocol's reading of `events` in order, with one lead, against each read alone.
    fn led(events: &[&str]) -> Vec<[Option<Option<String>>; 3]> {
        let mut leads: [EventLead; 3] = Default::default();
        events
            .iter()
            .map(|data| {
                let alone = quick(data);
                std::array::from_fn(|i| {
                    let reading =
                        (READERS[i].2)(data, &mut leads[i]).map(|text| text.map(Cow::into_owned));
                    assert_eq!(
                        reading, alone[i],
                        "{} reads {data:?} after a lead",
                        READERS[i].0
                    );
                    reading
                })
            })
            .collect()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_streams_events_are_read_after_the_opening_they_repeat() {
        let chat = |text: &str| {
            format!(
                r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#
            )
        };
        let (first, second) = (chat("w0 "), chat("w1 "));
        let mut lead = EventLead::default();
        assert_eq!(
            chat::quick_event_text(&first, &mut lead),
            Some(Some("w0 ".into()))
        );
        // The opening up to `choices`, its comma included, is kept.
        let opening = &first[..first.find(r#""choices""#).unwrap()];
        assert_eq!(lead.bytes, opening.as_bytes());
        assert_eq!(
            chat::quick_event_text(&second, &mut lead),
            Some(Some("w1 ".into()))
        );
        assert_eq!(lead.bytes, opening.as_bytes());
        // Read after the lead, not from the start: bytes the reader would refuse (a leading
        // zero) are passed over when the lead holds them.
        let odd = r#"{"n":01,"choices":[{"delta":{"content":"x"}}]}"#;
        assert_eq!(chat::quick_event_text(odd, &mut EventLead::default()), None);
        let mut lead = EventLead {
            bytes: br#"{"n":01,"#.to_vec(),
            ..EventLead::default()
        };
        assert_eq!(
            chat::quick_event_text(odd, &mut lead),
            Some(Some("x".into()))
        );
        // An event that begins otherwise is read from the start, and its opening kept.
        let messages =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#;
        let mut lead = EventLead::default();
        assert_eq!(
            messages::quick_event_text(messages, &mut lead),
            Some(Some("a".into()))
        );
        assert_eq!(lead.bytes, br#"{"type":"content_block_delta","index":0,"#);
        let stop = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#;
        assert_eq!(messages::quick_event_text(stop, &mut lead), Some(None));
        assert_eq!(lead.bytes, br#"{"type":"message_delta","#);
        // Nothing skipped before the member, or no such member: no lead.
        let first_member = r#"{"delta":{"text":"b"},"index":0}"#;
        assert_eq!(
            messages::quick_event_text(first_member, &mut lead),
            Some(Some("b".into()))
        );
        assert!(lead.bytes.is_empty());
        let without = r#"{"type":"ping","index":0}"#;
        lead.bytes = br#"{"type":"ping","#.to_vec();
        assert_eq!(messages::quick_event_text(without, &mut lead), Some(None));
        assert!(lead.bytes.is_empty());
        // A sequence: each reading is the reading alone, whatever the lead.
        led(&[
            &first,
            &second,
            messages,
            stop,
            &first,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","usage":{"total_tokens":3}}"#,
            &first,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"delta":{"content":"a"},"delta":null}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","#,
            &second,
        ]);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn an_event_the_same_but_for_its_text_is_not_read_again() {
        let chat = |text: &str, rest: &str| {
            format!(
                r#"{{"id":"c","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"{text}"}}{rest}}}]}}"#
            )
        };
        let first = chat("w0 ", "");
        let mut lead = EventLead::default();
        assert_eq!(
            chat::quick_event_text(&first, &mut lead),
            Some(Some("w0 ".into()))
        );
        // The event is kept as the shape, with where its text's string is.
        let at = first.find("w0 ").unwrap();
        assert_eq!(lead.shape, first.as_bytes());
        assert_eq!(lead.text_at, (at, at + 3));
        // An event of that shape is not read: a shape holding bytes the reader refuses (a
        // leading zero) gives its text all the same.
        let odd =
            |text: &str| format!(r#"{{"n":01,"choices":[{{"delta":{{"content":"{text}"}}}}]}}"#);
        let x = odd("x");
        let mut shaped = EventLead::default();
        let x_at = x.find("x\"").unwrap();
        shaped.keep_shape(&x, &x[x_at..x_at + 1]);
        assert_eq!(shaped.text_at, (x_at, x_at + 1));
        assert_eq!(
            chat::quick_event_text(&odd("yz"), &mut EventLead::default()),
            None
        );
        assert_eq!(
            chat::quick_event_text(&odd("yz"), &mut shaped),
            Some(Some("yz".into()))
        );
        // Every reading is the event's own, whatever the shape: texts with escapes (not kept
        // as the shape), a `\u` escape and a raw tab (outside the subset), another tail, a
        // tail the reader refuses (a repeated member), another key of the same length before
        // the text, trailing text, events cut inside and before the text.
        let other_key = first.replace("content", "contenu").replace("w0 ", "w4");
        let trailing = format!("{} x", chat("w5", ""));
        let readings = led(&[
            &first,
            &chat("w6", ""),
            &chat(r"w1\n", ""),
            &chat(r#"a\"b"#, ""),
            &chat(r"\u00e9", ""),
            &chat("w\t", ""),
            &chat("", ""),
            &chat("w2", r#","finish_reason":null"#),
            &first,
            &chat("w3", r#","delta":null"#),
            &other_key,
            &trailing,
            &first[..at + 2],
            &first[..at],
            &chat("w7", ""),
        ]);
        let chats: Vec<_> = readings.iter().map(|reading| reading[0].clone()).collect();
        let expected = [
            text("w0 "),
            text("w6"),
            text("w1\n"),
            text("a\"b"),
            None,
            None,
            text(""),
            text("w2"),
            text("w0 "),
            None,
            NONE,
            None,
            None,
            None,
            text("w7"),
        ];
        assert_eq!(chats, expected);
        // The escaped texts left the shape as it was.
        assert_eq!(
            chat::quick_event_text(&first, &mut lead),
            Some(Some("w0 ".into()))
        );
        assert_eq!(
            chat::quick_event_text(&chat(r"w1\n", ""), &mut lead),
            Some(Some("w1\n".into()))
        );
        assert_eq!(lead.shape, first.as_bytes());
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn where_it_is_sure_it_reads_as_serde_json(data in event_like()) {
            agrees(&data);
        }

        #[test]
        fn a_lead_changes_no_reading(events in proptest::collection::vec(stream_event(), 1..12)) {
            led(&events.iter().map(String::as_str).collect::<Vec<_>>());
        }

        #[test]
        fn a_shape_changes_no_reading(events in shaped_stream()) {
            led(&events.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }

    /// Events of one stream that differ mostly in one value: a frame, each protocol's member
    /// that holds the text among others (or another member), filled with values of every kind
    /// (strings plain, escaped or refused, other values, a cut string), some events cut short.
    #[cfg(not(target_arch = "wasm32"))]
    fn shaped_stream() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
        use proptest::prelude::*;
        let frames = [
            r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":$}}]}"#,
            r#"{"id":"c","created":1,"choices":[{"delta":{"content":$},"finish_reason":null}],"usage":null}"#,
            r#"{"choices":[{"delta":{"content":$}},{"delta":{"content":$}}]}"#,
            r#"{"choices":[{"message":{"content":$},"delta":{"content":"m"}}]}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":$}}"#,
            r#" {"delta":{"text":$},"delta":null} "#,
            r#"{"type":"response.output_text.delta","item_id":"i","delta":$}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"n":$}"#,
        ];
        let values = [
            r#""w""#,
            r#""""#,
            r#""a b c d e f g h i""#,
            r#""\n""#,
            r#""q\"""#,
            r#""\/\\""#,
            r#""\u00e9""#,
            "\"tab\there\"",
            r#""\x""#,
            "null",
            "7",
            r#"{"content":"x"}"#,
            r#""cut"#,
        ];
        (
            proptest::sample::select(frames.to_vec()),
            proptest::collection::vec(
                (
                    proptest::sample::select(values.to_vec()),
                    prop_oneof![6 => Just(None), 1 => (0usize..120).prop_map(Some)],
                ),
                1..12,
            ),
        )
            .prop_map(|(frame, events)| {
                events
                    .into_iter()
                    .map(|(value, cut)| {
                        let mut event = frame.replacen('$', value, 1).replace('$', r#""b""#);
                        if let Some(cut) = cut {
                            event.truncate(cut.min(event.len()));
                        }
                        event
                    })
                    .collect()
            })
    }

    /// Events of a stream, made of members that recur (so that events begin alike), some cut
    /// short or with white space around the object.
    #[cfg(not(target_arch = "wasm32"))]
    fn stream_event() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let members = [
            r#""id":"chatcmpl-1""#,
            r#""object":"chat.completion.chunk""#,
            r#""created":1"#,
            r#""created":17"#,
            r#""model":"m""#,
            r#""type":"content_block_delta""#,
            r#""type":"response.output_text.delta""#,
            r#""index":0"#,
            r#""n":01"#,
            r#""x":1.5"#,
            r#" "ws" : [ true , null ] "#,
            r#""choices":[{"delta":{"content":"a"}}]"#,
            r#""choices":[{"index":0,"delta":{"content":"b\n"}}]"#,
            r#""choices":[]"#,
            r#""choices":null"#,
            r#""delta":{"text":"t"}"#,
            r#""delta":"u""#,
            r#""delta":null"#,
            r#""d\u0065lta":1"#,
            r#""usage":null"#,
        ];
        (
            proptest::collection::vec(proptest::sample::select(members.to_vec()), 0..7),
            prop_oneof![3 => Just(""), 1 => Just(" ")],
            prop_oneof![4 => Just(None), 1 => (0usize..200).prop_map(Some)],
        )
            .prop_map(|(members, space, cut)| {
                let mut event = format!("{space}{{{}}}{space}", members.join(","));
                if let Some(cut) = cut {
                    event.truncate(cut.min(event.len()));
                }
                event
            })
    }

    /// JSON texts made of the members the readings look for, with values of every kind
    /// (numbers and strings serde_json refuses or reads apart).
    #[cfg(not(target_arch = "wasm32"))]
    fn event_like() -> impl proptest::strategy::Strategy<Value = String> {
        let scalars = [
            "null",
            "nul",
            "true",
            "false",
            "0",
            "-0",
            "18",
            "-3",
            "007",
            "1.5",
            "1e400",
            "123456789012345678901234",
            r#""text""#,
            r#""response.output_text.delta""#,
            r#""response.output_text\u002edelta""#,
            r#""esc \"q\" \n \/ \t \\""#,
            r#""caf\u00e9""#,
            r#""lone \ud800""#,
            r#""bad \x""#,
            "\"raw\ttab\"",
            r#""d\u0065lta""#,
        ];
        let keys = [
            "choices",
            "delta",
            "message",
            "content",
            "text",
            "type",
            "index",
            "other",
            "d\\u0065lta",
        ];
        super::super::tests::json_like(&scalars, &keys)
    }
}
