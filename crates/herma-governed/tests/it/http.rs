//! The real single-dispatch clients against local servers speaking each provider's exact wire
//! format: what is sent, how streams are read, and that a failure is never retried.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use herma_core::call::{Msg, ToolChoice};
use herma_governed::{
    Outcome, OutputContract, SingleCallConfig, SingleCallRunner, StructuredCallRunner,
    StructuredConfig, StructuredRun, TextRun, ViewState,
};
use herma_providers::single::{ClientTimeouts, SingleDispatchClient};
use serde_json::{Value, json};

use crate::step::extract_tool;
use crate::support::*;

#[derive(Clone)]
enum Reply {
    Sse(String),
    Status(u16, Option<&'static str>),
}

#[derive(Clone, Default)]
struct Provider {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<(String, HeaderMap, Value)>>>,
}

async fn answer(
    State(p): State<Provider>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    p.requests
        .lock()
        .unwrap()
        .push((uri.path().to_owned(), headers, json));
    match p.replies.lock().unwrap().pop_front() {
        Some(Reply::Sse(body)) => ([("content-type", "text/event-stream")], body).into_response(),
        Some(Reply::Status(status, request_id)) => {
            let mut response = (
                StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
                .into_response();
            if let Some(id) = request_id {
                response
                    .headers_mut()
                    .insert("request-id", id.parse().unwrap());
            }
            response
        }
        None => StatusCode::NOT_IMPLEMENTED.into_response(),
    }
}

impl Provider {
    async fn start() -> (Self, String) {
        let provider = Self::default();
        let app = Router::new().fallback(answer).with_state(provider.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (provider, url)
    }

    fn reply(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }

    fn requests(&self) -> Vec<(String, HeaderMap, Value)> {
        self.requests.lock().unwrap().clone()
    }
}

fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| {
            if name.is_empty() {
                format!("data: {data}\n\n")
            } else {
                format!("event: {name}\ndata: {data}\n\n")
            }
        })
        .collect()
}

fn anthropic_tool_stream() -> String {
    sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_01XYZ", "type": "message", "role": "assistant", "content": [], "model": "claude-test", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 410, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "extract_record", "input": {}}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"name\": "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "\"Ada\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 22}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

fn structured(url: &str) -> StructuredCallRunner {
    let client =
        SingleDispatchClient::anthropic_messages(url, "sk-ant-test", ClientTimeouts::default())
            .unwrap();
    let ports = herma_governed::ports::GovernedPorts::uniform(Arc::new(
        herma_store::MemoryGovernedStore::new(),
    ));
    let mut config = StructuredConfig::new(
        ports,
        Arc::new(client),
        "claude-test",
        vec![extract_tool()],
        Some(ToolChoice::Tool {
            name: "extract_record".into(),
        }),
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    config.prices = prices();
    config.clock = clock();
    config.temperature = Some(0.0);
    StructuredCallRunner::new(config).unwrap()
}

fn structured_run(key: &str) -> StructuredRun {
    StructuredRun {
        scope: herma_core::CallerScope::system_builtin(),
        session_id: "s".into(),
        operation_key: key.into(),
        input_revision: "r1".into(),
        intent: "extract".into(),
        load_input: Box::new(|| Box::pin(async { Ok(vec![Msg::user("Ada Lovelace")]) })),
        cancel: None,
    }
}

#[tokio::test]
async fn anthropic_messages_over_http_forced_tool_extraction() {
    let (provider, url) = Provider::start().await;
    provider.reply(Reply::Sse(anthropic_tool_stream()));
    let runner = structured(&url);
    let outcome = runner.run(structured_run("invoice-1")).await.unwrap();
    assert_eq!(outcome.view.state, ViewState::Completed);
    let step = outcome.view.envelope().unwrap().step.clone().unwrap();
    assert_eq!(step.tool_calls[0].input, json!({"name": "Ada"}));
    assert_eq!(
        outcome.view.receipt.unwrap().amount_micros,
        410 * 3 + 22 * 15
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let (path, headers, body) = &requests[0];
    assert_eq!(path, "/v1/messages");
    assert_eq!(headers["x-api-key"], "sk-ant-test");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    let call_id = headers["x-herma-call-id"].to_str().unwrap();
    assert!(call_id.starts_with("call_") && !call_id.contains("invoice"));
    assert_eq!(headers["x-herma-attempt"], "1");
    assert_eq!(
        outcome_call_id(&runner, "invoice-1").await,
        call_id,
        "the journal and the provider see the same call id"
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "extract_record"})
    );
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["temperature"], json!(0.0));
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "Ada Lovelace"}])
    );
    assert_eq!(
        body["tools"][0]["input_schema"],
        extract_tool().input_schema
    );
}

async fn outcome_call_id(runner: &StructuredCallRunner, key: &str) -> String {
    let view = runner
        .read(&herma_core::CallerScope::system_builtin(), key)
        .await
        .unwrap()
        .unwrap();
    view.record.unwrap().meta.call_id
}

#[tokio::test]
async fn a_provider_failure_is_sent_once_and_never_retried() {
    let (provider, url) = Provider::start().await;
    // A rejection with a reference and nothing else: the pre-stream proof, settled at zero.
    provider.reply(Reply::Status(529, Some("req_011")));
    // The same without a reference: unknown, an operator reconciles.
    provider.reply(Reply::Status(500, None));
    provider.reply(Reply::Sse(anthropic_tool_stream()));
    let runner = structured(&url);
    let proven = runner.run(structured_run("a")).await.unwrap();
    assert_eq!(proven.view.state, ViewState::Completed);
    assert_eq!(
        proven.view.envelope().unwrap().outcome,
        Outcome::Unavailable
    );
    assert_eq!(proven.view.receipt.unwrap().amount_micros, 0);
    assert_eq!(provider.requests().len(), 1, "no retry after 529");
    let unknown = runner.run(structured_run("b")).await.unwrap();
    assert_eq!(unknown.view.state, ViewState::ReconciliationRequired);
    assert_eq!(provider.requests().len(), 2, "no retry after 500");
}

#[tokio::test]
async fn an_attested_context_rejection_over_http_settles_at_zero() {
    let (provider, url) = Provider::start().await;
    provider.reply(Reply::Sse(sse(&[
        ("message_start", json!({"type": "message_start", "message": {"id": "msg_ctx", "usage": {"input_tokens": 199_000, "output_tokens": 0}}})),
        ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "model_context_window_exceeded"}, "usage": {"output_tokens": 0}})),
        ("message_stop", json!({"type": "message_stop"})),
    ])));
    let outcome = structured(&url).run(structured_run("ctx")).await.unwrap();
    let envelope = outcome.view.envelope().unwrap();
    assert_eq!(envelope.outcome, Outcome::Refused);
    assert_eq!(envelope.refusal.as_deref(), Some("context_window_exceeded"));
    assert_eq!(outcome.view.receipt.unwrap().amount_micros, 0);
}

fn text_runner(client: SingleDispatchClient, output: Option<OutputContract>) -> SingleCallRunner {
    let ports = herma_governed::ports::GovernedPorts::uniform(Arc::new(
        herma_store::MemoryGovernedStore::new(),
    ));
    let mut config = SingleCallConfig::new(
        ports,
        Arc::new(client),
        "gpt-test",
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    config.system = Some("Be brief.".into());
    config.prices = prices();
    config.clock = clock();
    config.temperature = Some(0.4);
    config.output = output;
    config.deadline = Duration::from_secs(20);
    SingleCallRunner::new(config).unwrap()
}

fn text_run(key: &str) -> TextRun {
    TextRun {
        scope: herma_core::CallerScope::system_builtin(),
        session_id: "s".into(),
        operation_key: key.into(),
        input_revision: "r1".into(),
        intent: "answer".into(),
        cancel: None,
        tool_choice: None,
        load_input: Box::new(|| {
            Box::pin(async {
                Ok(vec![
                    Msg::user("hi"),
                    Msg::assistant("hello"),
                    Msg::user("status?"),
                ])
            })
        }),
    }
}

#[tokio::test]
async fn openai_responses_over_http_text_answer() {
    let (provider, url) = Provider::start().await;
    provider.reply(Reply::Sse(sse(&[
        ("response.created", json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_abc", "status": "in_progress"}})),
        ("response.output_item.added", json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}})),
        ("response.output_text.delta", json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "All "})),
        ("response.output_text.delta", json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "green."})),
        ("response.output_item.done", json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "All green."}]}})),
        ("response.completed", json!({"type": "response.completed", "response": {"id": "resp_abc", "status": "completed", "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 4}}})),
    ])));
    let client = SingleDispatchClient::openai_responses(
        &format!("{url}/v1"),
        "sk-test",
        ClientTimeouts::default(),
    )
    .unwrap();
    let outcome = text_runner(client, None).run(text_run("t")).await.unwrap();
    let envelope = outcome.view.envelope().unwrap();
    assert_eq!(envelope.text.as_deref(), Some("All green."));
    // 20 fresh input tokens, 100 cached, 4 output.
    assert_eq!(
        outcome.view.receipt.unwrap().amount_micros,
        20 * 3 + 100 * 3 / 10 + 4 * 15
    );
    let (path, headers, body) = provider.requests()[0].clone();
    assert_eq!(path, "/v1/responses");
    assert_eq!(headers["authorization"], "Bearer sk-test");
    assert_eq!(body["instructions"], json!("Be brief."));
    assert_eq!(
        body["input"][1],
        json!({"role": "assistant", "content": "hello"})
    );
    assert_eq!(body["store"], json!(false));
    assert_eq!(body["temperature"], json!(0.4));
    assert!(body.get("tools").is_none());
}

#[tokio::test]
async fn chat_completions_over_http_native_json_output() {
    let (provider, url) = Provider::start().await;
    let chunks = [
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "{\"status\":"}, "finish_reason": null}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " \"ok\"}"}, "finish_reason": null}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 6, "total_tokens": 36}}),
    ];
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    provider.reply(Reply::Sse(body));
    let client =
        SingleDispatchClient::chat_completions(&url, "sk-test", ClientTimeouts::default()).unwrap();
    let contract = OutputContract {
        name: "status".into(),
        schema: json!({"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}),
        validate: Arc::new(|v| v.get("status").is_some_and(Value::is_string)),
    };
    let outcome = text_runner(client, Some(contract))
        .run(text_run("j"))
        .await
        .unwrap();
    assert_eq!(
        outcome.view.envelope().unwrap().json,
        Some(json!({"status": "ok"}))
    );
    let (path, _, body) = provider.requests()[0].clone();
    assert_eq!(path, "/chat/completions");
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(body["response_format"]["type"], json!("json_schema"));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}
