//! What a slow or greedy client can hold (issue 17, findings 1 and 2): the head, body and idle
//! timeouts, the connection cap, refusal of a declared `Content-Length` over the limit before
//! the body, and the memory budget of bodies in flight. Raw TCP clients, so each test controls
//! exactly what reaches the server and when; every outcome is asserted, never an elapsed time
//! (a generous guard only turns a hang into a failure).

use std::time::Duration;

use futures_util::StreamExt;
use herma_test_support::mock_upstream::{MockUpstream, TEXT};
use herma_test_support::{Backend, TestApp, spawn_app};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for something that must happen before it calls the server hung.
const GUARD: Duration = Duration::from_secs(30);

/// An answer as it arrived: status, lower-cased head lines and the body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn parse(bytes: &[u8]) -> Self {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
        Self {
            status: head[9..12].parse().expect("a status"),
            head: head.to_ascii_lowercase(),
            body: body.to_owned(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(": "))
        })
    }

    fn json(&self) -> Value {
        herma_core::json::parse_strict(self.body.as_bytes()).expect("a strict JSON body")
    }

    /// A problem+json answer with `status` and `code`; returns the problem.
    fn problem(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "{}\n{}", self.head, self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.head
        );
        let problem = self.json();
        assert_eq!(problem["code"], code, "{problem}");
        assert_eq!(problem["status"], status);
        problem
    }
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.addr).await.unwrap()
}

/// Everything the server sends until it closes the connection.
async fn until_closed(tcp: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    tokio::time::timeout(GUARD, async {
        let mut buf = [0u8; 8192];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server closed the connection");
    all
}

/// Reads one answer off a kept-alive connection: its head, then `content-length` bytes.
async fn one_answer(tcp: &mut TcpStream) -> Answer {
    tokio::time::timeout(GUARD, async {
        let mut bytes = Vec::new();
        let mut byte = [0u8; 1];
        while !bytes.ends_with(b"\r\n\r\n") {
            assert_eq!(
                tcp.read(&mut byte).await.unwrap(),
                1,
                "the head ended early"
            );
            bytes.push(byte[0]);
        }
        let head = Answer::parse(&bytes);
        let length: usize = head.header("content-length").unwrap().parse().unwrap();
        let mut body = vec![0u8; length];
        tcp.read_exact(&mut body).await.unwrap();
        bytes.extend_from_slice(&body);
        Answer::parse(&bytes)
    })
    .await
    .expect("an answer")
}

/// Reads the interim `100 Continue` hyper sends when a handler starts reading the body.
async fn expect_continue(tcp: &mut TcpStream) {
    let mut interim = vec![0u8; b"HTTP/1.1 100 Continue\r\n\r\n".len()];
    tokio::time::timeout(GUARD, tcp.read_exact(&mut interim))
        .await
        .expect("an interim answer")
        .unwrap();
    assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n");
}

fn post_head(path: &str, key: &str, length: usize, expect_continue: bool) -> String {
    let expect = if expect_continue {
        "expect: 100-continue\r\n"
    } else {
        ""
    };
    format!(
        "POST {path} HTTP/1.1\r\nhost: herma\r\nauthorization: Bearer {key}\r\nx-api-key: {key}\r\nanthropic-version: 2023-06-01\r\nx-herma-harness: claude-code\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n{expect}\r\n"
    )
}

/// A request body of exactly `length` bytes: a JSON object padded with spaces.
fn padded_json(length: usize) -> Vec<u8> {
    let mut body = br#"{"id": "padded"}"#.to_vec();
    body.resize(length, b' ');
    body
}

#[tokio::test]
async fn a_trickled_head_is_answered_408_problem_json_and_closed() {
    let app = spawn_app(Backend::Memory, &[("HERMA_HEADER_READ_TIMEOUT_MS", "1000")]).await;
    let tcp = connect(&app).await;
    let (mut reader, mut writer) = tcp.into_split();
    // A header byte every 100 ms, for as long as the server listens: each byte is progress,
    // none completes the head.
    let trickle = tokio::spawn(async move {
        if writer
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
            .await
            .is_err()
        {
            return;
        }
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b"a").await.is_err() {
                return;
            }
        }
    });
    let mut all = Vec::new();
    tokio::time::timeout(GUARD, reader.read_to_end(&mut all))
        .await
        .expect("the server closed the trickling connection")
        .ok();
    trickle.abort();
    let answer = Answer::parse(&all);
    let problem = answer.problem(408, "request_timeout");
    assert_eq!(problem["limit"], "HERMA_HEADER_READ_TIMEOUT_MS");
    assert_eq!(answer.header("connection"), Some("close"));
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_without_an_answer() {
    let app = spawn_app(Backend::Memory, &[("HERMA_HEADER_READ_TIMEOUT_MS", "1000")]).await;
    let mut tcp = connect(&app).await;
    assert!(until_closed(&mut tcp).await.is_empty());
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_silently_after_the_idle_timeout() {
    let app = spawn_app(Backend::Memory, &[("HERMA_KEEP_ALIVE_TIMEOUT_MS", "1000")]).await;
    let mut tcp = connect(&app).await;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = one_answer(&mut tcp).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.header("connection"), None, "kept alive");
    // Nothing more is sent: the connection is closed, with no unsolicited answer.
    assert!(until_closed(&mut tcp).await.is_empty());
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_on_herma_api_and_in_the_protocol_shape_on_the_proxy() {
    let app = spawn_app(Backend::Memory, &[("HERMA_BODY_READ_TIMEOUT_MS", "1000")]).await;
    let key = app.key("route,configure", Some("claude-code")).await;

    // Herma's own API: 10 of 100 declared bytes, then nothing.
    let mut tcp = connect(&app).await;
    tcp.write_all(post_head("/v1/provisions", &key, 100, false).as_bytes())
        .await
        .unwrap();
    tcp.write_all(b"{\"id\": \"p\"").await.unwrap();
    let answer = Answer::parse(&until_closed(&mut tcp).await);
    let problem = answer.problem(408, "request_timeout");
    assert_eq!(problem["limit"], "HERMA_BODY_READ_TIMEOUT_MS");
    assert_eq!(answer.header("connection"), Some("close"));

    // A chunked body on a proxied route: one chunk, then nothing.
    let mut tcp = connect(&app).await;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: herma\r\nx-api-key: {key}\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{{\"mod\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let answer = Answer::parse(&until_closed(&mut tcp).await);
    assert_eq!(answer.status, 408, "{}", answer.body);
    let error = answer.json();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["code"], "request_timeout", "{error}");
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_before_any_body_byte() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;

    // Only the head is sent: the answer comes without the server waiting for a body.
    let mut tcp = connect(&app).await;
    tcp.write_all(post_head("/v1/provisions", &key, 50 * 1024 * 1024, false).as_bytes())
        .await
        .unwrap();
    let answer = Answer::parse(&until_closed(&mut tcp).await);
    let problem = answer.problem(413, "payload_too_large");
    assert_eq!(problem["max_bytes"], 1024 * 1024);

    let mut tcp = connect(&app).await;
    tcp.write_all(post_head("/v1/chat/completions", &key, 1 << 30, false).as_bytes())
        .await
        .unwrap();
    let answer = Answer::parse(&until_closed(&mut tcp).await);
    assert_eq!(answer.status, 413, "{}", answer.body);
    let error = answer.json();
    assert_eq!(error["error"]["code"], "payload_too_large", "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
}

#[tokio::test]
async fn past_the_connection_cap_a_connection_gets_503_with_retry_after_until_a_slot_frees() {
    let app = spawn_app(
        Backend::Memory,
        &[
            ("HERMA_MAX_CONNECTIONS", "2"),
            // The two held connections must not time out while the test runs.
            ("HERMA_HEADER_READ_TIMEOUT_MS", "600000"),
        ],
    )
    .await;
    let mut first = connect(&app).await;
    let _second = connect(&app).await;

    let mut third = connect(&app).await;
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = Answer::parse(&until_closed(&mut third).await);
    let problem = answer.problem(503, "server_busy");
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(problem["retry_after_seconds"], 1);
    assert_eq!(problem["limit"], "HERMA_MAX_CONNECTIONS");

    // The first connection is served, and its slot is free once it has closed.
    first
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(Answer::parse(&until_closed(&mut first).await).status, 200);
    let mut fourth = connect(&app).await;
    fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(Answer::parse(&until_closed(&mut fourth).await).status, 200);
}

#[tokio::test]
async fn the_body_budget_refuses_a_concurrent_body_with_503_and_takes_one_again_when_freed() {
    let app = spawn_app(
        Backend::Memory,
        &[
            ("HERMA_MAX_BODY_BYTES", "40000"),
            ("HERMA_PROXY_MAX_BODY_BYTES", "40000"),
            ("HERMA_BODY_BUDGET_BYTES", "50000"),
        ],
    )
    .await;
    let key = app.key("route,configure", Some("claude-code")).await;

    // A proxied body of 30 000 declared bytes: hyper's `100 Continue` says the handler is
    // reading it, so its reservation is held.
    let mut holder = connect(&app).await;
    holder
        .write_all(post_head("/v1/messages", &key, 30_000, true).as_bytes())
        .await
        .unwrap();
    expect_continue(&mut holder).await;

    // Another 30 000 bytes do not fit the 50 000-byte budget, on any route that buffers.
    for path in ["/v1/provisions", "/v1/chat/completions"] {
        let mut refused = connect(&app).await;
        refused
            .write_all(post_head(path, &key, 30_000, true).as_bytes())
            .await
            .unwrap();
        let answer = Answer::parse(&until_closed(&mut refused).await);
        assert_eq!(answer.status, 503, "{path}: {}", answer.body);
        assert_eq!(answer.header("retry-after"), Some("1"), "{path}");
        let body = answer.json();
        let code = if path == "/v1/provisions" {
            answer.problem(503, "server_busy")["code"].clone()
        } else {
            body["error"]["code"].clone()
        };
        assert_eq!(code, "server_busy", "{path}: {body}");
    }

    // The first body arrives and is answered (it is no valid request; what matters is that it
    // was read): the handler is done, its reservation given back.
    holder.write_all(&padded_json(30_000)).await.unwrap();
    let answer = one_answer(&mut holder).await;
    assert_ne!(answer.status, 503, "{}", answer.body);

    let mut again = connect(&app).await;
    again
        .write_all(post_head("/v1/provisions", &key, 30_000, true).as_bytes())
        .await
        .unwrap();
    expect_continue(&mut again).await;
    again.write_all(&padded_json(30_000)).await.unwrap();
    let answer = one_answer(&mut again).await;
    assert_ne!(answer.status, 503, "{}", answer.body);
}

#[tokio::test]
async fn an_sse_response_outlives_every_request_timeout() {
    let app = spawn_app(
        Backend::Memory,
        &[
            ("HERMA_HEADER_READ_TIMEOUT_MS", "300"),
            ("HERMA_BODY_READ_TIMEOUT_MS", "300"),
            ("HERMA_KEEP_ALIVE_TIMEOUT_MS", "300"),
        ],
    )
    .await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .header("X-Upstream-Base-Url", mock.url())
        .header("x-mock-scenario", "hold")
        .json(
            &serde_json::json!({"model": "m", "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let first = String::from_utf8(stream.next().await.unwrap().unwrap().to_vec()).unwrap();
    // The stream is silent for several times every timeout, then goes on to its end.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    mock.release();
    let mut all = first;
    while let Some(chunk) = tokio::time::timeout(GUARD, stream.next()).await.unwrap() {
        all.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(all.contains("message_stop"), "{all}");
    let mut text = String::new();
    let mut reader = herma_core::wire::sse::Reader::default();
    reader.feed(all.as_bytes(), &mut |event| {
        if let Ok(v) = serde_json::from_str::<Value>(&event.data)
            && let Some(delta) = v["delta"]["text"].as_str()
        {
            text.push_str(delta);
        }
    });
    assert_eq!(text, TEXT);
}

#[tokio::test]
async fn shutdown_waits_for_a_streaming_response_to_finish() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route", None).await;
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .header("X-Upstream-Base-Url", mock.url())
        .header("x-mock-scenario", "hold")
        .json(
            &serde_json::json!({"model": "m", "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut all = String::from_utf8(stream.next().await.unwrap().unwrap().to_vec()).unwrap();

    let stopping = tokio::spawn(app.stop());
    // However long it is given, the server does not stop under an unfinished stream.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stopping.is_finished(), "stopped with a stream in flight");
    mock.release();
    while let Some(chunk) = tokio::time::timeout(GUARD, stream.next()).await.unwrap() {
        all.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(all.contains("message_stop"), "{all}");
    tokio::time::timeout(GUARD, stopping)
        .await
        .expect("the server stopped once the stream ended")
        .unwrap();
}
