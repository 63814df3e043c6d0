//! Server-sent events: framing events Herma writes, and an incremental reader for the events
//! Herma relays (it only watches them; the bytes pass through unchanged).

/// Appends one event to `out`: an optional `event:` line, `data:` lines, a blank line.
pub fn write_event(out: &mut Vec<u8>, event: Option<&str>, data: &str) {
    write_name(out, event);
    for line in data.split('\n') {
        out.extend_from_slice(DATA_LINE);
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// How a data line Herma writes begins (the reader takes the space after the colon away).
pub(crate) const DATA_LINE: &[u8] = b"data: ";

/// Appends an event's `event:` line, where it has a name.
pub(crate) fn write_name(out: &mut Vec<u8>, event: Option<&str>) {
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
}

/// One parsed event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub event: Option<String>,
    pub data: String,
}

/// Reads events from chunks as they arrive, across arbitrary chunk boundaries, and lends each
/// one to the caller (its buffers are reused for the next). Lines are
/// bounded: a line longer than `max_line` is dropped rather than buffered without limit.
#[derive(Debug)]
pub struct Reader {
    line: Vec<u8>,
    current: Event,
    has_data: bool,
    skipping: bool,
    /// The current event grew past `max_line`: it is dropped at its end.
    oversized: bool,
    max_line: usize,
    /// The last event name's buffer, kept for the next: most events of a stream are named.
    spare_name: String,
}

impl Default for Reader {
    fn default() -> Self {
        Self::new(1024 * 1024)
    }
}

impl Reader {
    pub fn new(max_line: usize) -> Self {
        Self {
            line: Vec::new(),
            current: Event::default(),
            has_data: false,
            oversized: false,
            skipping: false,
            max_line,
            spare_name: String::new(),
        }
    }

    /// Nothing of a line or of an event is held: the next bytes begin an event's first line.
    pub fn between_events(&self) -> bool {
        self.line.is_empty()
            && !self.skipping
            && !self.has_data
            && !self.oversized
            && self.current.event.is_none()
    }

    /// The longest line read (a longer one is dropped).
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Feeds a chunk; calls `on_event` for every event it completes. Works a line at a time
    /// (a relayed stream passes through here chunk by chunk, so this is on every stream's path).
    pub fn feed(&mut self, mut chunk: &[u8], on_event: &mut dyn FnMut(&Event)) {
        // Nothing left (most chunks end with a line's end) adds nothing to the line.
        while !chunk.is_empty() {
            let end = memchr::memchr(b'\n', chunk);
            if let Some(at) = end
                && self.line.is_empty()
                && !self.skipping
            {
                // The whole line is in this chunk (the common case): read where it lies.
                let line = &chunk[..at];
                // A line longer than `max_line` is dropped whole, as below.
                if line.len() <= self.max_line {
                    self.line_done(line.strip_suffix(b"\r").unwrap_or(line), on_event);
                }
                chunk = &chunk[at + 1..];
                continue;
            }
            let segment = end.map_or(chunk, |at| &chunk[..at]);
            if !self.skipping {
                // A line longer than `max_line` is dropped whole.
                if self.line.len() + segment.len() > self.max_line {
                    self.line.clear();
                    self.skipping = true;
                } else {
                    self.line.extend_from_slice(segment);
                }
            }
            let Some(at) = end else { return };
            if !self.skipping {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.line_done(&line, on_event);
                self.line = line;
                self.line.clear();
            }
            self.skipping = false;
            chunk = &chunk[at + 1..];
        }
    }

    fn line_done(&mut self, line: &[u8], on_event: &mut dyn FnMut(&Event)) {
        if line.is_empty() {
            if !self.oversized && (self.has_data || self.current.event.is_some()) {
                on_event(&self.current);
            }
            // The name's and the data's buffers are kept for the next event.
            if let Some(name) = self.current.event.take() {
                self.spare_name = name;
            }
            self.current.data.clear();
            self.has_data = false;
            self.oversized = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        // A `data` line (most of a stream's lines) is its field's name without a search.
        let (field, value) = match line.strip_prefix(b"data:") {
            Some(value) => (&line[..4], value),
            None => match memchr::memchr(b':', line) {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &b""[..]),
            },
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        // The common case, valid UTF-8, through the SIMD check.
        let value = match crate::utf8::str(value) {
            Some(text) => std::borrow::Cow::Borrowed(text),
            None => String::from_utf8_lossy(value),
        };
        match field {
            b"event" => {
                let mut name = self
                    .current
                    .event
                    .take()
                    .unwrap_or_else(|| std::mem::take(&mut self.spare_name));
                name.clear();
                name.push_str(&value);
                self.current.event = Some(name);
            }
            b"data" => {
                if self.oversized || self.current.data.len() + value.len() > self.max_line {
                    // An event is bounded like a line: many data lines cannot grow it forever.
                    self.oversized = true;
                    self.current.data = String::new();
                    return;
                }
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(&value);
                self.has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(chunks: &[&[u8]]) -> Vec<Event> {
        let mut reader = Reader::default();
        let mut events = Vec::new();
        for chunk in chunks {
            reader.feed(chunk, &mut |e| events.push(e.clone()));
        }
        events
    }

    /// `stream`'s events read whole, after checking that reading it a byte at a time finds
    /// the same.
    fn read_in_any_chunks(stream: &[u8]) -> Vec<Event> {
        let whole = read_all(&[stream]);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(read_all(&bytes), whole);
        whole
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn events_survive_any_chunking() {
        let mut stream = Vec::new();
        write_event(&mut stream, Some("message_start"), "{\"a\":1}");
        write_event(&mut stream, None, "line one\nline two");
        stream.extend_from_slice(b": comment\r\ndata: [DONE]\r\n\r\n");
        let whole = read_in_any_chunks(&stream);
        assert_eq!(whole.len(), 3);
        assert_eq!(
            whole[0],
            Event {
                event: Some("message_start".into()),
                data: "{\"a\":1}".into()
            }
        );
        assert_eq!(whole[1].data, "line one\nline two");
        assert_eq!(whole[2].data, "[DONE]");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn each_event_has_its_own_name_or_none() {
        // The name's buffer is reused: a shorter name after a longer one, an unnamed event
        // after a named one, and an event named twice (the last line wins) each read alone.
        let stream = b"event: content_block_delta\ndata: 1\n\nevent: ping\ndata: 2\n\n\
            data: 3\n\nevent: first\nevent: second\ndata: 4\n\nevent: end\n\n";
        let names: Vec<_> = read_all(&[stream])
            .into_iter()
            .map(|e| (e.event, e.data))
            .collect();
        let expected = [
            (Some("content_block_delta"), "1"),
            (Some("ping"), "2"),
            (None, "3"),
            (Some("second"), "4"),
            (Some("end"), ""),
        ]
        .map(|(name, data)| (name.map(String::from), data.to_owned()));
        assert_eq!(names, expected);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn bytes_that_are_not_utf8_read_as_replacement_characters() {
        let stream = b"event: na\xefve\ndata: caf\xc3\xa9 \xff\xfe end\ndata: \xe2\x82\n\n";
        let events = read_in_any_chunks(stream);
        assert_eq!(
            events,
            [Event {
                event: Some("na\u{FFFD}ve".into()),
                data: "caf\u{e9} \u{FFFD}\u{FFFD} end\n\u{FFFD}".into()
            }]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_lines_field_is_up_to_its_first_colon_and_one_space_is_dropped() {
        let stream = b"data:x\ndata:  y\ndatax: z\ndata\ndata: a:b\nevent:e\n: data: c\nid: 1\n\n";
        let events = read_in_any_chunks(stream);
        assert_eq!(
            events,
            [Event {
                event: Some("e".into()),
                data: "x\n y\n\na:b".into()
            }]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn events_of_many_data_lines_are_bounded_too() {
        let mut reader = Reader::new(16);
        let mut events = Vec::new();
        reader.feed(
            b"data: 0123456789\ndata: 0123456789\ndata: x\n\ndata: ok\n\n",
            &mut |e| events.push(e.clone()),
        );
        assert_eq!(
            events,
            vec![Event {
                event: None,
                data: "ok".into()
            }]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn overlong_lines_are_dropped_not_buffered() {
        let mut reader = Reader::new(8);
        let mut events = Vec::new();
        reader.feed(b"data: 0123456789abcdef\n\ndata: ok\n\n", &mut |e| {
            events.push(e.clone())
        });
        assert_eq!(
            events,
            vec![Event {
                event: None,
                data: "ok".into()
            }]
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_line_of_exactly_the_limit_is_kept_one_byte_more_is_dropped_in_any_chunking() {
        // `data: 12` is 8 bytes, `data: 123` 9.
        let stream = b"data: 12\n\ndata: 123\n\ndata: ok\n\n";
        for size in 1..=stream.len() {
            let mut reader = Reader::new(8);
            let mut events = Vec::new();
            for chunk in stream.chunks(size) {
                reader.feed(chunk, &mut |e| events.push(e.data.clone()));
            }
            assert_eq!(events, ["12", "ok"], "chunks of {size}");
        }
    }
}
