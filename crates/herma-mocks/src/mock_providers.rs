//! Local stand-ins for the five typed-conversation providers, each on its own path and in its
//! own non-streaming wire format: Meta and OpenRouter Chat Completions
//! (`/v1/chat/completions`, `/api/v1/chat/completions`), Ollama's native `/api/chat`, OpenAI
//! Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`).
//!
//! A test scripts the next answers ([`Answer`]: a tool call, text, a rate limit with
//! `Retry-After` and the provider's reset headers, 402, 202, a `queued` Responses body, a
//! malformed or duplicate-field body, the provider's own error bodies, a stall) and reads back
//! every request it received, byte for byte — so it counts model calls.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// The operator key the mocks accept.
pub const KEY: &str = "sk-mock-provider-key";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Meta,
    Ollama,
    Openai,
    Anthropic,
    Openrouter,
}

impl Kind {
    pub fn path(self) -> &'static str {
        match self {
            Kind::Meta => "/v1/chat/completions",
            Kind::Ollama => "/api/chat",
            Kind::Openai => "/v1/responses",
            Kind::Anthropic => "/v1/messages",
            Kind::Openrouter => "/api/v1/chat/completions",
        }
    }
}

/// What the mock answers next.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A call of `name` with `arguments`.
    ToolCall { name: String, arguments: Value },
    /// Plain text.
    Text(String),
    /// 429 with `Retry-After` seconds and the provider's reset headers.
    RateLimited { retry_after: u64 },
    /// 402 Payment Required in the provider's error shape.
    PaymentRequired,
    /// 202 Accepted with a body that looks like success.
    Accepted,
    /// A Responses body whose `status` is `queued`.
    Queued,
    /// A 200 body that is not JSON.
    Malformed,
    /// A 200 body with a duplicate member.
    DuplicateField,
    /// This status with the provider's error body (type and code given; the message echoes
    /// input and a fake key, which Herma must never copy).
    Error {
        status: u16,
        error_type: String,
        code: String,
    },
    /// No answer for this long, then text.
    Stall(Duration),
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request is JSON")
    }
}

#[derive(Default)]
struct Script {
    answers: std::collections::VecDeque<Answer>,
    received: Vec<Received>,
}

#[derive(Clone)]
struct Shared {
    kind: Kind,
    script: Arc<Mutex<Script>>,
}

pub struct MockProvider {
    pub addr: SocketAddr,
    pub kind: Kind,
    script: Arc<Mutex<Script>>,
    _server: tokio::task::JoinHandle<()>,
}

impl MockProvider {
    pub async fn start(kind: Kind) -> Self {
        Self::start_on(kind, 0).await
    }

    /// On a chosen loopback port (0: any free one).
    pub async fn start_on(kind: Kind, port: u16) -> Self {
        let script = Arc::new(Mutex::new(Script::default()));
        let shared = Shared {
            kind,
            script: script.clone(),
        };
        let app = Router::new()
            .route(kind.path(), post(answer))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind mock provider");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            kind,
            script,
            _server: server,
        }
    }

    /// The origin to point `HERMA_CONVERSATION_<PROVIDER>_BASE_URL` at.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues the next answers (after them: a short clarifying text).
    pub fn answer(&self, answers: impl IntoIterator<Item = Answer>) {
        self.script.lock().expect("lock").answers.extend(answers);
    }

    /// Every request received, in order.
    pub fn received(&self) -> Vec<Received> {
        self.script.lock().expect("lock").received.clone()
    }

    /// How many requests arrived (model calls).
    pub fn calls(&self) -> usize {
        self.script.lock().expect("lock").received.len()
    }
}

fn authorized(kind: Kind, headers: &HeaderMap) -> bool {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    match kind {
        Kind::Anthropic => value("x-api-key") == Some(KEY) && value("anthropic-version").is_some(),
        _ => value("authorization") == Some(&format!("Bearer {KEY}")),
    }
}

async fn answer(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let next = {
        let mut script = shared.script.lock().expect("lock");
        script.received.push(Received {
            headers: headers.clone(),
            body: body.clone(),
        });
        script.answers.pop_front()
    };
    let kind = shared.kind;
    if !authorized(kind, &headers) {
        return error(kind, 401, "authentication_error", "invalid_api_key");
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let input_tokens = (body.len() / 4) as u64;
    match next.unwrap_or_else(|| Answer::Text("Which document should I use?".into())) {
        Answer::ToolCall { name, arguments } => {
            ok(kind, &request, input_tokens, Reply::Tool(name, arguments))
        }
        Answer::Text(text) => ok(kind, &request, input_tokens, Reply::Text(text)),
        Answer::Stall(wait) => {
            tokio::time::sleep(wait).await;
            ok(kind, &request, input_tokens, Reply::Text("late".into()))
        }
        Answer::RateLimited { retry_after } => {
            let mut response = error(kind, 429, "rate_limit_error", "rate_limit_exceeded");
            let headers = response.headers_mut();
            headers.insert(
                "retry-after",
                retry_after.to_string().parse().expect("value"),
            );
            match kind {
                Kind::Anthropic => {
                    headers.insert(
                        "anthropic-ratelimit-requests-reset",
                        "2026-12-01T12:00:30Z".parse().expect("value"),
                    );
                }
                _ => {
                    headers.insert("x-ratelimit-reset-requests", "30s".parse().expect("value"));
                }
            }
            response
        }
        Answer::PaymentRequired => error(kind, 402, "billing_error", "insufficient_quota"),
        Answer::Accepted => {
            let mut response = ok(kind, &request, input_tokens, Reply::Text("later".into()));
            *response.status_mut() = StatusCode::ACCEPTED;
            response
        }
        Answer::Queued => raw(
            200,
            json!({"id": "resp_queued", "object": "response", "status": "queued", "output": []})
                .to_string(),
        ),
        Answer::Malformed => raw(200, "{\"id\": \"x\", \"choices\": [".to_owned()),
        Answer::DuplicateField => {
            let body = ok_body(kind, &request, input_tokens, Reply::Text("dup".into())).to_string();
            // The same member twice at the top level.
            let duplicated = body.replacen('{', "{\"model\":\"first\",", 1);
            raw(200, duplicated)
        }
        Answer::Error {
            status,
            error_type,
            code,
        } => error(kind, status, &error_type, &code),
    }
}

enum Reply {
    Tool(String, Value),
    Text(String),
}

fn raw(status: u16, body: String) -> Response {
    (
        StatusCode::from_u16(status).expect("status"),
        [
            ("content-type", "application/json"),
            ("request-id", "req_mock_1"),
        ],
        body,
    )
        .into_response()
}

fn ok(kind: Kind, request: &Value, input_tokens: u64, reply: Reply) -> Response {
    raw(200, ok_body(kind, request, input_tokens, reply).to_string())
}

fn ok_body(kind: Kind, request: &Value, input_tokens: u64, reply: Reply) -> Value {
    let model = request["model"].as_str().unwrap_or("unknown").to_owned();
    let output_tokens = 20;
    match kind {
        Kind::Meta | Kind::Openrouter => {
            let message = match reply {
                Reply::Tool(name, arguments) => json!({
                    "role": "assistant", "content": null,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}],
                }),
                Reply::Text(text) => json!({"role": "assistant", "content": text}),
            };
            let finish = if message.get("tool_calls").is_some() {
                "tool_calls"
            } else {
                "stop"
            };
            let mut body = json!({
                "id": "chatcmpl-mock1", "object": "chat.completion", "created": 1_796_000_000, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens, "total_tokens": input_tokens + output_tokens},
            });
            if kind == Kind::Openrouter {
                body["provider"] =
                    json!(request["provider"]["only"][0].as_str().unwrap_or("unknown"));
            }
            body
        }
        Kind::Ollama => {
            let message = match reply {
                Reply::Tool(name, arguments) => json!({
                    "role": "assistant", "content": "",
                    "tool_calls": [{"function": {"name": name, "arguments": arguments}}],
                }),
                Reply::Text(text) => json!({"role": "assistant", "content": text}),
            };
            json!({
                "model": model, "created_at": "2026-12-01T12:00:00Z", "message": message,
                "done": true, "done_reason": "stop",
                "prompt_eval_count": input_tokens, "eval_count": output_tokens,
            })
        }
        Kind::Openai => {
            let output = match reply {
                Reply::Tool(name, arguments) => json!([{
                    "type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name,
                    "arguments": arguments.to_string(), "status": "completed",
                }]),
                Reply::Text(text) => json!([{
                    "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }]),
            };
            json!({
                "id": "resp_mock1", "object": "response", "created_at": 1_796_000_000, "status": "completed",
                "model": model, "output": output,
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens},
            })
        }
        Kind::Anthropic => {
            let (content, stop) = match reply {
                Reply::Tool(name, arguments) => (
                    json!([{"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}]),
                    "tool_use",
                ),
                Reply::Text(text) => (json!([{"type": "text", "text": text}]), "end_turn"),
            };
            json!({
                "id": "msg_mock1", "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
            })
        }
    }
}

/// The provider's own error body. Its message echoes input and a fake key: Herma may keep only
/// allowlisted type and code values.
fn error(kind: Kind, status: u16, error_type: &str, code: &str) -> Response {
    let message = "echoed user input: SECRET-PROMPT sk-live-leaked-key-123";
    let body = match kind {
        Kind::Anthropic => {
            json!({"type": "error", "error": {"type": error_type, "message": message}})
        }
        Kind::Ollama => json!({"error": message}),
        Kind::Meta | Kind::Openai | Kind::Openrouter => json!({
            "error": {"message": message, "type": error_type, "code": code, "param": null},
        }),
    };
    raw(status, body.to_string())
}
