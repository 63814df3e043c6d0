//! The SSE framer Herma reads every relayed stream with (`wire::sse::Reader`), on any bytes.
//!
//! Invariants: the events are the same however the bytes are cut into chunks, with the default
//! line limit and with small ones; with the default limit they are what a plain line-by-line
//! reading of the stream gives; and an event never holds more than its limit, however many
//! `data:` lines it has.

#![no_main]

use herma_core::wire::sse::{Event, Reader};
use herma_fuzz::chunkings;
use libfuzzer_sys::fuzz_target;

fn read(reader: Reader, chunks: &[&[u8]]) -> Vec<Event> {
    let mut reader = reader;
    let mut events = Vec::new();
    for chunk in chunks {
        reader.feed(chunk, &mut |e| events.push(e.clone()));
    }
    events
}

/// The stream read line by line, every line complete: `\n` ends a line (a `\r` before it is
/// dropped), a blank line ends an event that has data or a name, `:` starts a comment, and a
/// field's value loses one leading space.
fn by_lines(bytes: &[u8]) -> Vec<Event> {
    let mut events = Vec::new();
    let mut current = Event::default();
    let mut has_data = false;
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    lines.pop(); // the unterminated rest
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if has_data || current.event.is_some() {
                events.push(std::mem::take(&mut current));
            }
            current = Event::default();
            has_data = false;
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => (
                &line[..i],
                line[i + 1..].strip_prefix(b" ").unwrap_or(&line[i + 1..]),
            ),
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => current.event = Some(value.into_owned()),
            b"data" => {
                if has_data {
                    current.data.push('\n');
                }
                current.data.push_str(&value);
                has_data = true;
            }
            _ => {}
        }
    }
    events
}

fuzz_target!(|data: &[u8]| {
    let cuts = chunkings(data);
    let whole = read(Reader::default(), &cuts[0]);
    for chunks in &cuts[1..] {
        assert_eq!(
            read(Reader::default(), chunks),
            whole,
            "chunking changed the events"
        );
    }
    assert_eq!(
        whole,
        by_lines(data),
        "the framer disagrees with a line-by-line reading"
    );

    for max_line in [8, 64] {
        let whole = read(Reader::new(max_line), &cuts[0]);
        for chunks in &cuts[1..] {
            assert_eq!(
                read(Reader::new(max_line), chunks),
                whole,
                "chunking changed the events"
            );
        }
        for event in &whole {
            // `data:` values up to the limit, joined by the line breaks between them.
            assert!(
                event.data.len() <= max_line + 1,
                "an event outgrew its limit"
            );
            // A name is one line, of at most the limit in bytes (each byte that is not UTF-8
            // reads as one U+FFFD, so count characters).
            assert!(
                event
                    .event
                    .as_ref()
                    .is_none_or(|e| e.chars().count() <= max_line)
            );
        }
    }
});
