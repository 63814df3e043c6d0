//! A local stand-in for a small-model endpoint, in the OpenAI wire format — `POST
//! /v1/chat/completions` (the tier-3 classifier) and `POST /v1/embeddings` (a remote tier-2
//! model) — and in Ollama's — `POST /api/chat` and `POST /api/embed`. Tests choose how the
//! classifier answers; every call is counted.
//!
//! Embeddings are deterministic 16-value unit vectors built from the words of each text, so
//! texts sharing words are similar and others are not — enough to exercise the remote path.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// How the classifier answers one call.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A chat completion whose message content is this text (typed or not).
    Content(String),
    /// 429 with `retry-after` seconds, in OpenAI's error shape.
    RateLimited(u64),
    /// Answers only after this long (longer than Herma's timeout: a timeout).
    Slow(Duration, String),
    /// A non-JSON body with status 200.
    Garbage,
}

impl Reply {
    /// `{"apply": apply, "confidence": confidence}` as the model's content.
    pub fn decision(apply: bool, confidence: f64) -> Self {
        Reply::Content(json!({"apply": apply, "confidence": confidence}).to_string())
    }
}

#[derive(Clone)]
struct Shared {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    default: Arc<Mutex<Reply>>,
    chat_calls: Arc<AtomicUsize>,
    embed_calls: Arc<AtomicUsize>,
    last_chat: Arc<Mutex<Option<Value>>>,
}

pub struct MockModels {
    pub addr: SocketAddr,
    shared: Shared,
    _server: tokio::task::JoinHandle<()>,
}

impl MockModels {
    /// Starts the mock; the classifier answers `default` unless a queued reply comes first.
    pub async fn start(default: Reply) -> Self {
        let shared = Shared {
            replies: Arc::default(),
            default: Arc::new(Mutex::new(default)),
            chat_calls: Arc::default(),
            embed_calls: Arc::default(),
            last_chat: Arc::default(),
        };
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind mock models");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            shared,
            _server: server,
        }
    }

    /// The OpenAI-style base URL, as `HERMA_MICROMODEL_URL` or `HERMA_EMBED_URL` takes it.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Ollama-style base URL.
    pub fn ollama_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next calls answer these, in order.
    pub fn queue(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.replies.lock().expect("lock").extend(replies);
    }

    pub fn set_default(&self, reply: Reply) {
        *self.shared.default.lock().expect("lock") = reply;
    }

    pub fn chat_calls(&self) -> usize {
        self.shared.chat_calls.load(Ordering::SeqCst)
    }

    pub fn embed_calls(&self) -> usize {
        self.shared.embed_calls.load(Ordering::SeqCst)
    }

    /// The last classifier request body.
    pub fn last_chat(&self) -> Option<Value> {
        self.shared.last_chat.lock().expect("lock").clone()
    }
}

/// A deterministic unit vector of `text`'s lowercase words.
pub fn word_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; 16];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = word.to_lowercase().bytes().fold(2166136261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16777619)
        });
        v[(h % 16) as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    } else {
        v[0] = 1.0;
    }
    v
}

async fn handle(
    State(shared): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let json_reply = |status: StatusCode, value: Value| {
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response()
    };
    if headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() != b"Bearer sk-mock")
    {
        return json_reply(
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": "bad key", "type": "invalid_request_error"}}),
        );
    }
    let path = uri.path();
    let ollama = path.starts_with("/api/");
    match path {
        "/v1/embeddings" | "/api/embed" => {
            shared.embed_calls.fetch_add(1, Ordering::SeqCst);
            let inputs: Vec<String> = match &request["input"] {
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            };
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": word_vector(t)}))
                .collect();
            if ollama {
                let embeddings: Vec<Vec<f32>> = inputs.iter().map(|t| word_vector(t)).collect();
                return json_reply(
                    StatusCode::OK,
                    json!({"model": request["model"], "embeddings": embeddings, "total_duration": 1000, "prompt_eval_count": 4}),
                );
            }
            json_reply(
                StatusCode::OK,
                json!({"object": "list", "data": data, "model": request["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}),
            )
        }
        "/v1/chat/completions" | "/api/chat" => {
            shared.chat_calls.fetch_add(1, Ordering::SeqCst);
            *shared.last_chat.lock().expect("lock") = Some(request.clone());
            let reply = shared
                .replies
                .lock()
                .expect("lock")
                .pop_front()
                .unwrap_or_else(|| shared.default.lock().expect("lock").clone());
            let completion = |content: &str| {
                if ollama {
                    return json!({
                        "model": request["model"], "created_at": "2026-11-30T00:00:00Z",
                        "message": {"role": "assistant", "content": content},
                        "done": true, "done_reason": "stop", "eval_count": 9
                    });
                }
                json!({
                    "id": "chatcmpl-mock", "object": "chat.completion", "created": 1_796_000_000,
                    "model": request["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}
                })
            };
            match reply {
                Reply::Content(content) => json_reply(StatusCode::OK, completion(&content)),
                Reply::Slow(after, content) => {
                    tokio::time::sleep(after).await;
                    json_reply(StatusCode::OK, completion(&content))
                }
                Reply::RateLimited(seconds) => (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        (header::CONTENT_TYPE, "application/json".to_owned()),
                        (header::RETRY_AFTER, seconds.to_string()),
                    ],
                    json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}).to_string(),
                )
                    .into_response(),
                Reply::Garbage => (StatusCode::OK, "<html>not json</html>").into_response(),
            }
        }
        _ => json_reply(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": "unknown path", "type": "invalid_request_error"}}),
        ),
    }
}
