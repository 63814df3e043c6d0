//! A local stand-in for the model providers, speaking each real wire format: Anthropic
//! Messages, OpenAI Chat Completions and Responses — JSON and SSE, text, thinking, tool calls,
//! usage, error bodies and error events, rate limits, redirects. It records every request it
//! receives, so tests can check exactly what Herma sent.
//!
//! A request picks its behaviour with the `x-mock-scenario` header (Herma forwards unknown
//! headers): `text` (default), `tools` (thinking/reasoning plus a tool call), `rate_limit`
//! (429 in the provider's shape), `error_event` (a stream that fails midway), `redirect`
//! (a 307), `hold` (a stream that stops after its first event until `release()`), `slow`
//! (`x-mock-chunks` chunks, `x-mock-gap-ms` apart).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// What the mock received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Recorded {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Default)]
struct Shared {
    /// Benchmarks turn recording off so memory stays flat under load.
    record: bool,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    hold: Arc<Notify>,
    /// Streams whose reader went away before the end (the downstream closed the connection).
    cancelled: Arc<std::sync::atomic::AtomicUsize>,
}

pub struct MockUpstream {
    pub addr: SocketAddr,
    shared: Shared,
    _server: tokio::task::JoinHandle<()>,
}

pub const TEXT: &str = "Hello from the mock upstream.";

impl MockUpstream {
    pub async fn start() -> Self {
        Self::start_with(true).await
    }

    /// `record: false` keeps nothing per request (for load tests).
    pub async fn start_with(record: bool) -> Self {
        let shared = Shared {
            record,
            ..Shared::default()
        };
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind mock");
        let addr = listener.local_addr().expect("addr");
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            shared,
            _server: server,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .recorded
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// How many streams were abandoned by their reader before they ended.
    pub fn cancelled_streams(&self) -> usize {
        self.shared
            .cancelled
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Lets every `hold` stream continue past its first event.
    pub fn release(&self) {
        self.shared.hold.notify_waiters();
    }
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = Recorded {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.clone(),
    };
    if shared.record
        && let Ok(mut r) = shared.recorded.lock()
    {
        r.push(recorded);
    }
    let scenario = headers
        .get("x-mock-scenario")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("text")
        .to_owned();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = request["model"].as_str().unwrap_or("mock-model").to_owned();
    let stream = request["stream"].as_bool().unwrap_or(false);
    let path = uri.path();
    let anthropic = path.ends_with("/messages") || path.ends_with("/count_tokens");

    if scenario == "redirect" {
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, "http://127.0.0.1:9/elsewhere")],
        )
            .into_response();
    }
    if scenario == "rate_limit" {
        return if anthropic {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "7"), ("request-id", "req_mock_429"), ("anthropic-ratelimit-requests-remaining", "0")],
                axum::Json(json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}})),
            )
                .into_response()
        } else {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after-ms", "7000"), ("x-ratelimit-remaining-requests", "0"), ("x-request-id", "req_mock_429")],
                axum::Json(json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "param": null, "code": "rate_limit_exceeded"}})),
            )
                .into_response()
        };
    }
    if scenario == "spoof" {
        // An upstream trying to pass off its own receipt header.
        return (
            [("x-herma-receipt", "rcpt_forged")],
            axum::Json(Kind::Chat.json(&model, false)),
        )
            .into_response();
    }
    if path.ends_with("/models") {
        return axum::Json(json!({"object": "list", "data": [{"id": "mock-model", "object": "model", "created": 1, "owned_by": "mock"}]})).into_response();
    }
    if path.ends_with("/count_tokens") {
        return axum::Json(json!({"input_tokens": 42})).into_response();
    }
    let tools = scenario == "tools";
    let kind = if anthropic {
        Kind::Messages
    } else if path.ends_with("/responses") {
        Kind::Responses
    } else {
        Kind::Chat
    };
    if !stream {
        return axum::Json(kind.json(&model, tools)).into_response();
    }
    let include_usage = request["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let events = kind.events(&model, tools, include_usage);
    let chunks: usize = headers
        .get("x-mock-chunks")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let gap = headers
        .get("x-mock-gap-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .map(Duration::from_millis);
    let mut events = if chunks > 0 {
        kind.many_deltas(&model, chunks)
    } else {
        events
    };
    if scenario == "cut" {
        // The connection closes cleanly halfway: no protocol-level end.
        events.truncate(events.len() / 2);
    }
    let hold = (scenario == "hold").then(|| shared.hold.clone());
    let fail_midway = scenario == "error_event";
    let stream = async_stream(
        events,
        hold,
        gap,
        fail_midway,
        kind,
        shared.cancelled.clone(),
    );
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("request-id", "req_mock_stream")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Sends the events one by one (each its own chunk), optionally pausing.
fn async_stream(
    events: Vec<String>,
    hold: Option<Arc<Notify>>,
    gap: Option<Duration>,
    fail_midway: bool,
    kind: Kind,
    cancelled: Arc<std::sync::atomic::AtomicUsize>,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let half = events.len() / 2;
        for (i, event) in events.into_iter().enumerate() {
            if fail_midway && i == half {
                let _ = tx.send(Bytes::from(kind.error_event())).await;
                return;
            }
            if tx.send(Bytes::from(event)).await.is_err() {
                cancelled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return;
            }
            if i == 0
                && let Some(hold) = &hold
            {
                hold.notified().await;
            }
            if let Some(gap) = gap {
                tokio::time::sleep(gap).await;
            }
        }
    });
    futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|b| (Ok(b), rx)) },
    )
}

#[derive(Clone, Copy)]
enum Kind {
    Messages,
    Chat,
    Responses,
}

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

const PIECES: [&str; 4] = ["Hello ", "from the ", "mock ", "upstream."];

impl Kind {
    fn error_event(self) -> String {
        match self {
            Kind::Messages => sse(
                Some("error"),
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
            Kind::Chat => sse(
                None,
                &json!({"error": {"message": "The server had an error", "type": "server_error", "param": null, "code": null}}),
            ),
            Kind::Responses => sse(
                Some("error"),
                &json!({"type": "error", "code": "server_error", "message": "The server had an error", "param": null, "sequence_number": 3}),
            ),
        }
    }

    fn json(self, model: &str, tools: bool) -> Value {
        match self {
            Kind::Messages => {
                let mut content = vec![];
                if tools {
                    content.push(json!({"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQBCkYIARgCIkD"}));
                }
                content.push(json!({"type": "text", "text": TEXT}));
                if tools {
                    content.push(json!({"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {"city": "Paris"}}));
                }
                json!({
                    "id": "msg_mock_1", "type": "message", "role": "assistant", "model": model, "content": content,
                    "stop_reason": if tools { "tool_use" } else { "end_turn" }, "stop_sequence": null,
                    "usage": {"input_tokens": 11, "output_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 3}
                })
            }
            Kind::Chat => {
                let mut message = json!({"role": "assistant", "content": TEXT, "refusal": null});
                if tools {
                    message["tool_calls"] = json!([{"id": "call_mock_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]);
                }
                json!({
                    "id": "chatcmpl-mock1", "object": "chat.completion", "created": 1_796_000_000, "model": model,
                    "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": if tools { "tool_calls" } else { "stop" }}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                    "system_fingerprint": "fp_mock"
                })
            }
            Kind::Responses => {
                let mut output = vec![];
                if tools {
                    output.push(json!({"type": "reasoning", "id": "rs_mock_1", "summary": [{"type": "summary_text", "text": "Weather lookup."}]}));
                }
                output.push(json!({"type": "message", "id": "msg_mock_1", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": TEXT, "annotations": [], "logprobs": []}]}));
                if tools {
                    output.push(json!({"type": "function_call", "id": "fc_mock_1", "call_id": "call_mock_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}));
                }
                responses_object(model, "completed", output)
            }
        }
    }

    fn events(self, model: &str, tools: bool, include_usage: bool) -> Vec<String> {
        match self {
            Kind::Messages => {
                let mut out = vec![sse(
                    Some("message_start"),
                    &json!({"type": "message_start", "message": {"id": "msg_mock_1", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 11, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 3}}}),
                )];
                let mut index = 0;
                if tools {
                    out.push(sse(Some("content_block_start"), &json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
                    out.push(sse(Some("content_block_delta"), &json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": "The user wants the weather."}})));
                    out.push(sse(Some("content_block_delta"), &json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": "EqQBCkYIARgCIkD"}})));
                    out.push(sse(
                        Some("content_block_stop"),
                        &json!({"type": "content_block_stop", "index": index}),
                    ));
                    index += 1;
                }
                out.push(sse(Some("content_block_start"), &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
                out.push(sse(Some("ping"), &json!({"type": "ping"})));
                for piece in PIECES {
                    out.push(sse(Some("content_block_delta"), &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})));
                }
                out.push(sse(
                    Some("content_block_stop"),
                    &json!({"type": "content_block_stop", "index": index}),
                ));
                if tools {
                    index += 1;
                    out.push(sse(Some("content_block_start"), &json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {}}})));
                    for part in ["{\"city\": ", "\"Paris\"}"] {
                        out.push(sse(Some("content_block_delta"), &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}})));
                    }
                    out.push(sse(
                        Some("content_block_stop"),
                        &json!({"type": "content_block_stop", "index": index}),
                    ));
                }
                out.push(sse(Some("message_delta"), &json!({"type": "message_delta", "delta": {"stop_reason": if tools { "tool_use" } else { "end_turn" }, "stop_sequence": null}, "usage": {"output_tokens": 7}})));
                out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
                out
            }
            Kind::Chat => {
                // With `include_usage`, OpenAI puts `"usage": null` in every chunk before the
                // last one, which carries the usage and no choices.
                let chunk = |delta: Value, finish: Value| {
                    let mut chunk = json!({"id": "chatcmpl-mock1", "object": "chat.completion.chunk", "created": 1_796_000_000, "model": model, "system_fingerprint": "fp_mock", "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
                    if include_usage {
                        chunk["usage"] = Value::Null;
                    }
                    chunk
                };
                let mut out = vec![sse(
                    None,
                    &chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                )];
                for piece in PIECES {
                    out.push(sse(None, &chunk(json!({"content": piece}), Value::Null)));
                }
                if tools {
                    out.push(sse(None, &chunk(json!({"tool_calls": [{"index": 0, "id": "call_mock_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}), Value::Null)));
                    for part in ["{\"city\":", "\"Paris\"}"] {
                        out.push(sse(None, &chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}), Value::Null)));
                    }
                }
                out.push(sse(
                    None,
                    &chunk(json!({}), json!(if tools { "tool_calls" } else { "stop" })),
                ));
                if include_usage {
                    let mut usage = chunk(json!({}), Value::Null);
                    usage["choices"] = json!([]);
                    usage["usage"] =
                        json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18});
                    out.push(sse(None, &usage));
                }
                out.push("data: [DONE]\n\n".to_owned());
                out
            }
            Kind::Responses => {
                let mut seq = 0;
                let mut out = Vec::new();
                let mut push = |kind: &str, mut data: Value| {
                    data["type"] = json!(kind);
                    data["sequence_number"] = json!(seq);
                    seq += 1;
                    out.push(sse(Some(kind), &data));
                };
                push(
                    "response.created",
                    json!({"response": responses_object(model, "in_progress", vec![])}),
                );
                push(
                    "response.in_progress",
                    json!({"response": responses_object(model, "in_progress", vec![])}),
                );
                let mut output_index = 0;
                if tools {
                    let item = json!({"type": "reasoning", "id": "rs_mock_1", "summary": []});
                    push(
                        "response.output_item.added",
                        json!({"output_index": output_index, "item": item}),
                    );
                    push(
                        "response.output_item.done",
                        json!({"output_index": output_index, "item": {"type": "reasoning", "id": "rs_mock_1", "summary": [{"type": "summary_text", "text": "Weather lookup."}]}}),
                    );
                    output_index += 1;
                }
                push(
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": {"type": "message", "id": "msg_mock_1", "status": "in_progress", "role": "assistant", "content": []}}),
                );
                push(
                    "response.content_part.added",
                    json!({"item_id": "msg_mock_1", "output_index": output_index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                );
                for piece in PIECES {
                    push(
                        "response.output_text.delta",
                        json!({"item_id": "msg_mock_1", "output_index": output_index, "content_index": 0, "delta": piece, "logprobs": []}),
                    );
                }
                push(
                    "response.output_text.done",
                    json!({"item_id": "msg_mock_1", "output_index": output_index, "content_index": 0, "text": TEXT, "logprobs": []}),
                );
                let part =
                    json!({"type": "output_text", "text": TEXT, "annotations": [], "logprobs": []});
                push(
                    "response.content_part.done",
                    json!({"item_id": "msg_mock_1", "output_index": output_index, "content_index": 0, "part": part}),
                );
                push(
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": {"type": "message", "id": "msg_mock_1", "status": "completed", "role": "assistant", "content": [part]}}),
                );
                if tools {
                    output_index += 1;
                    push(
                        "response.output_item.added",
                        json!({"output_index": output_index, "item": {"type": "function_call", "id": "fc_mock_1", "call_id": "call_mock_1", "name": "get_weather", "arguments": "", "status": "in_progress"}}),
                    );
                    push(
                        "response.function_call_arguments.delta",
                        json!({"item_id": "fc_mock_1", "output_index": output_index, "delta": "{\"city\":\"Paris\"}"}),
                    );
                    push(
                        "response.function_call_arguments.done",
                        json!({"item_id": "fc_mock_1", "output_index": output_index, "arguments": "{\"city\":\"Paris\"}"}),
                    );
                    push(
                        "response.output_item.done",
                        json!({"output_index": output_index, "item": {"type": "function_call", "id": "fc_mock_1", "call_id": "call_mock_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}}),
                    );
                }
                push(
                    "response.completed",
                    json!({"response": Kind::Responses.json(model, tools)}),
                );
                out
            }
        }
    }

    /// A long stream of `n` one-word deltas (for streaming benchmarks and pacing tests).
    fn many_deltas(self, model: &str, n: usize) -> Vec<String> {
        let mut events = self.events(model, false, true);
        // Replace the delta events with `n` small ones, keeping the frame around them.
        let is_delta = |e: &String| {
            e.contains("text_delta")
                || e.contains("output_text.delta")
                || (e.contains("\"content\":\"")
                    && e.contains("chat.completion.chunk")
                    && !e.contains("\"role\""))
        };
        let first = events.iter().position(is_delta).unwrap_or(1);
        events.retain(|e| !is_delta(e));
        let deltas: Vec<String> = (0..n)
            .map(|i| match self {
                Kind::Messages => sse(Some("content_block_delta"), &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": format!("w{i} ")}})),
                Kind::Chat => sse(None, &json!({"id": "chatcmpl-mock1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [{"index": 0, "delta": {"content": format!("w{i} ")}, "logprobs": null, "finish_reason": null}]})),
                Kind::Responses => sse(Some("response.output_text.delta"), &json!({"type": "response.output_text.delta", "sequence_number": 4 + i, "item_id": "msg_mock_1", "output_index": 0, "content_index": 0, "delta": format!("w{i} "), "logprobs": []})),
            })
            .collect();
        events.splice(first..first, deltas);
        events
    }
}

fn responses_object(model: &str, status: &str, output: Vec<Value>) -> Value {
    json!({
        "id": "resp_mock_1", "object": "response", "created_at": 1_796_000_000, "status": status, "background": false,
        "error": null, "incomplete_details": null, "instructions": null, "max_output_tokens": null, "model": model,
        "output": output, "parallel_tool_calls": true, "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null}, "store": false, "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
        "usage": if status == "completed" { json!({"input_tokens": 11, "input_tokens_details": {"cached_tokens": 3}, "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 18}) } else { Value::Null },
        "user": null, "metadata": {}
    })
}
