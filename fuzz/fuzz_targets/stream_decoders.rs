//! Each protocol's response-stream decoder (`wire::stream::StreamDecoder`) and the proxy's usage
//! observer (`wire::usage::UsageObserver`) on any bytes, read as a Messages, a Chat Completions
//! and a Responses stream in turn.
//!
//! Invariants: however the bytes are cut into chunks, a decoder emits the same events, finishes
//! at the same point and ends the same way, and an observer finds the same usage and the same
//! end; an error is the last thing a decoder emits, and it emits at most one.

#![no_main]

use herma_core::call::ModelEvent;
use herma_core::model::Usage;
use herma_core::wire::Protocol;
use herma_core::wire::stream::{StreamDecoder, StreamError};
use herma_core::wire::usage::UsageObserver;
use herma_fuzz::chunkings;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[derive(Debug, PartialEq)]
struct Decoded {
    out: Vec<Result<ModelEvent, StreamError>>,
    finished: bool,
    end: Result<(), StreamError>,
}

fn decode(protocol: Protocol, chunks: &[&[u8]]) -> Decoded {
    let mut decoder = StreamDecoder::new(protocol);
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk, &mut |item| out.push(item));
    }
    let finished = decoder.is_finished();
    let end = decoder.end();
    Decoded { out, finished, end }
}

fn observe(protocol: Protocol, streaming: bool, chunks: &[&[u8]]) -> (bool, Option<Usage>) {
    let mut observer = UsageObserver::new(protocol, streaming);
    for chunk in chunks {
        observer.feed(chunk);
    }
    (observer.ended(), observer.finish())
}

fuzz_target!(|data: &[u8]| {
    let cuts = chunkings(data);
    for protocol in Protocol::ALL {
        let whole = decode(protocol, &cuts[0]);
        let errors = whole.out.iter().filter(|item| item.is_err()).count();
        assert!(errors <= 1, "a decoder emits at most one error");
        if errors == 1 {
            assert!(
                whole.out.last().is_some_and(Result::is_err),
                "nothing follows an error"
            );
            assert!(whole.finished, "an error finishes the stream");
        }
        assert_eq!(
            whole.end.is_ok(),
            whole.finished,
            "the end is an error unless finished"
        );
        for chunks in &cuts[1..] {
            assert_eq!(
                decode(protocol, chunks),
                whole,
                "chunking changed what was decoded"
            );
        }
        for streaming in [true, false] {
            let seen = observe(protocol, streaming, &cuts[0]);
            for chunks in &cuts[1..] {
                assert_eq!(
                    observe(protocol, streaming, chunks),
                    seen,
                    "chunking changed the usage"
                );
            }
            if let (_, Some(usage)) = &seen {
                let value = serde_json::from_str::<Value>(usage.as_str());
                assert!(
                    value.is_ok_and(|value| value.is_object()),
                    "usage is an object's JSON"
                );
            }
        }
    }
});
