//! The text log's field formatter: `tracing-subscriber`'s [`DefaultFields`] text, with the
//! common field written directly.
//!
//! Every request opens a span whose three fields (`id`, `method`, `path`) the text log formats
//! when the span is created. `DefaultFields` writes each as `name=value` through one `write!`
//! of three arguments, two of them styles that write nothing without colours, which costs
//! about 1,200 instructions a field. [`PlainFields`] writes the same characters with
//! `write_str` and one `write!` for the value, and leaves everything else to `DefaultFields`'
//! own visitor, one field at a time: the `message` field, raw identifiers (`r#type`), `log.`
//! metadata, strings and errors (which it quotes and lists its own way), and all of it when the
//! writer colours its output. The tests compare the two over every kind of field.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultFields, DefaultVisitor, Writer};

/// [`DefaultFields`]' output, for a writer with or without colours.
#[derive(Debug, Default)]
pub struct PlainFields;

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        if writer.has_ansi_escapes() {
            return DefaultFields::new().format_fields(writer, fields);
        }
        let mut visitor = PlainVisitor {
            writer,
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PlainVisitor<'a> {
    writer: Writer<'a>,
    /// Nothing written yet: no space before the next field.
    is_empty: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Hands one field to `DefaultFields`' visitor, continuing where this one is.
    fn delegate(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.result = visitor.finish();
        // It writes every field but `log.` metadata (which it skips), with a space before it
        // when something came before.
        if !field.name().starts_with("log.") {
            self.is_empty = false;
        }
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.delegate(field, |v| v.record_str(field, value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if name == "message" || name.starts_with("r#") || name.starts_with("log.") {
            self.delegate(field, |v| v.record_debug(field, value));
            return;
        }
        if self.result.is_err() {
            return;
        }
        self.result = (|| {
            if !std::mem::replace(&mut self.is_empty, false) {
                self.writer.write_char(' ')?;
            }
            self.writer.write_str(name)?;
            self.writer.write_char('=')?;
            write!(self.writer, "{value:?}")
        })();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[derive(Debug)]
    struct Failure(Option<Box<Failure>>);

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(if self.0.is_some() { "outer" } else { "inner" })
        }
    }

    impl std::error::Error for Failure {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.0.as_deref().map(|e| e as _)
        }
    }

    /// Spans and events with every kind of field, as the log writes them.
    fn emit() {
        let span = tracing::info_span!(
            "request",
            id = %"0f1e2d3c",
            method = %"POST",
            path = %"/v1/messages"
        );
        let _entered = span.enter();
        let error = Failure(Some(Box::new(Failure(None))));
        tracing::info!(
            latency = %"3 ms",
            status = 200u16,
            count = -4i64,
            big = 1u128 << 100,
            ratio = 0.5f64,
            ok = true,
            quoted = "a \"str\"",
            debug = ?vec!["x"],
            r#type = "raw",
            "finished processing request"
        );
        tracing::warn!(
            error = &error as &(dyn std::error::Error + 'static),
            "with sources"
        );
        tracing::warn!(
            error = &Failure(None) as &(dyn std::error::Error + 'static),
            "without"
        );
        tracing::info!("message only, with \u{1b}[31m an escape");
        tracing::info!(message = %"a message field", after = 1);
        tracing::info!(empty = tracing::field::Empty, after = 2);
        // `log.` metadata (from the `log` crate's records) is not written, and no space is.
        tracing::info!(log.target = "x", after = 3);
        tracing::info!(before = 4, log.line = 12u64, after = 5);
        tracing::info_span!("nested", r#in = %"raw", plain = 7).in_scope(|| {
            tracing::error!(target: "tower_http::trace::on_failure", classification = %format_args!("Status code: {}", 500), "response failed");
        });
    }

    fn logged<N>(fields: N, ansi: bool) -> String
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buffer.clone())
            .with_ansi(ansi)
            .without_time()
            .fmt_fields(fields)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn the_log_reads_as_default_fields_writes_it() {
        for ansi in [false, true] {
            let plain = logged(PlainFields, ansi);
            let default = logged(DefaultFields::new(), ansi);
            assert_eq!(plain, default, "ansi: {ansi}");
        }
        // And it is the text a reader sees: the span's fields, the event's in order.
        let plain = logged(PlainFields, false);
        assert!(
            plain.contains(
                "request{id=0f1e2d3c method=POST path=/v1/messages}: herma_cli::log_fields::tests: \
                 finished processing request latency=3 ms status=200 count=-4"
            ),
            "{plain}"
        );
        assert!(plain.contains("quoted=\"a \\\"str\\\"\" debug=[\"x\"] type=\"raw\""));
        assert!(
            plain.contains("error=outer error.sources=[inner]"),
            "{plain}"
        );
        assert!(plain.contains("nested{in=raw plain=7}"), "{plain}");
        assert!(plain.contains("tests: after=3\n"), "{plain}");
        assert!(plain.contains("tests: before=4 after=5\n"), "{plain}");
    }
}
