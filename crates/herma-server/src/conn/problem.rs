//! hyper's own error answers as problems.
//!
//! hyper answers a request head it cannot parse by itself, before any route runs: a URI over
//! 64 KiB (414), a head over its buffer or with too many headers (431), a malformed request
//! line or header (400) — each with an empty body. [`ProblemIo`] turns that answer, when it is
//! the first thing written on a connection, into the same status with an
//! `application/problem+json` body, so every error Herma's own server originates is a problem.
//! Only an exact hyper error head (status line, `connection: close`, `content-length: 0`,
//! `date`, nothing else) is rewritten; anything else is written as it is, byte for byte. A parse
//! error on a later request of a kept-alive connection keeps hyper's empty answer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use herma_core::{Problem, ProblemCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::status_of;

enum Write {
    /// Nothing written yet: the first write is inspected.
    First,
    /// Writing a problem in place of hyper's empty error answer of `reported` bytes.
    Replacing {
        bytes: Vec<u8>,
        written: usize,
        reported: usize,
    },
    /// Everything else goes through untouched.
    Through,
}

/// A connection whose first write, when it is hyper's own error answer, becomes problem+json.
pub struct ProblemIo<T> {
    inner: T,
    write: Write,
}

impl<T> ProblemIo<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            write: Write::First,
        }
    }
}

/// hyper's automatic answers to unparseable heads, by status.
fn parse_error_code(status: u16) -> Option<ProblemCode> {
    match status {
        400 => Some(ProblemCode::MalformedRequest),
        414 => Some(ProblemCode::UriTooLong),
        431 => Some(ProblemCode::HeadersTooLarge),
        _ => None,
    }
}

fn parse_error_detail(code: ProblemCode) -> &'static str {
    match code {
        ProblemCode::UriTooLong => "the request URI is longer than 65534 bytes",
        ProblemCode::HeadersTooLarge => {
            "the request head is larger than the server's buffer or has too many headers"
        }
        _ => "the request line or a header is not valid HTTP/1.1",
    }
}

/// The problem response to write instead of `head`, when `head` is exactly one of hyper's
/// automatic error heads: `HTTP/1.1 <status> <reason>`, `connection: close`,
/// `content-length: 0`, `date: …`.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?.strip_suffix("\r\n\r\n")?;
    let mut lines = rest.split("\r\n");
    let status_line = lines.next()?;
    let status: u16 = status_line.get(..3)?.parse().ok()?;
    let code = parse_error_code(status)?;
    let (mut length, mut date) = (false, None);
    for line in lines {
        let (name, value) = line.split_once(": ")?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" if value == "0" => length = true,
            "connection" if value == "close" => {}
            "date" => date = Some(value),
            _ => return None,
        }
    }
    if !length || status_of(code).as_u16() != status {
        return None;
    }
    Some(closing_answer(
        status_line,
        &Problem::new(code, parse_error_detail(code)),
        date,
    ))
}

/// A whole HTTP/1.1 answer that ends its connection: `status_line` (`408 Request Timeout`)
/// and `problem` as problem+json, for answers written below hyper.
pub(super) fn closing_answer(status_line: &str, problem: &Problem, date: Option<&str>) -> Vec<u8> {
    let status = status_of(problem.code).as_u16();
    let body = problem.to_body(status).to_string();
    let mut out = format!(
        "HTTP/1.1 {status_line}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\nx-content-type-options: nosniff\r\n",
        body.len()
    );
    if let Some(date) = date {
        out.push_str(&format!("date: {date}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

impl<T: AsyncWrite + Unpin> ProblemIo<T> {
    /// Finishes writing a replacement; `Ready(Some(n))` reports the `n` bytes hyper gave.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>> {
        let Write::Replacing {
            bytes,
            written,
            reported,
        } = &mut self.write
        else {
            return Poll::Ready(Ok(None));
        };
        while *written < bytes.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        let reported = *reported;
        self.write = Write::Through;
        Poll::Ready(Ok(Some(reported)))
    }

    /// Decides on the first write: a replacement or straight through.
    fn first(&mut self, data: &[u8]) {
        if matches!(self.write, Write::First) {
            self.write = match replacement(data) {
                Some(bytes) => Write::Replacing {
                    bytes,
                    written: 0,
                    reported: data.len(),
                },
                None => Write::Through,
            };
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ProblemIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ProblemIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.first(buf);
        if let Some(reported) = ready!(this.drive(cx))? {
            return Poll::Ready(Ok(reported));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if matches!(this.write, Write::First) {
            let data: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            this.first(&data);
        }
        if let Some(reported) = ready!(this.drive(cx))? {
            return Poll::Ready(Ok(reported));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drive(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drive(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_exact_error_heads_are_replaced() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 08:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(head).unwrap()).unwrap();
        let (head_out, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head_out.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(head_out.contains("content-type: application/problem+json"));
        assert!(head_out.contains(&format!("content-length: {}", body.len())));
        assert!(head_out.contains("date: Tue, 01 Dec 2026 08:00:00 GMT"));
        let problem = herma_core::json::parse_strict(body.as_bytes()).unwrap();
        assert_eq!(problem["code"], "headers_too_large");
        assert_eq!(problem["status"], 431);

        for untouched in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 414 URI Too Long\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\nbody",
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert!(replacement(untouched).is_none(), "{untouched:?}");
        }
    }
}
