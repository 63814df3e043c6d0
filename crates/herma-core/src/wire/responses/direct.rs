//! A direct answer as the Responses API would have sent it.

use serde::Serialize;

use crate::wire::direct::{DirectAnswer, Empty, Id, NONE, write_json, write_json_event};

pub(super) fn json(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    let part = [output_text(answer.text)];
    let output = [output_message(answer, "completed", &part)];
    write_json(out, &response(answer, "completed", &output));
}

pub(super) fn sse(answer: &DirectAnswer<'_>, out: &mut Vec<u8>) {
    let item_id = answer.id("msg_");
    let part = [output_text(answer.text)];
    let done = [output_message(answer, "completed", &part)];
    let mut sequence_number = 0;
    let mut event = |out: &mut Vec<u8>, kind: &'static str, body: Body<'_>| {
        write_json_event(
            out,
            Some(kind),
            &Event {
                kind,
                sequence_number,
                body,
            },
        );
        sequence_number += 1;
    };
    let in_progress = response(answer, "in_progress", &[]);
    event(
        out,
        "response.created",
        Body::Response {
            response: &in_progress,
        },
    );
    event(
        out,
        "response.in_progress",
        Body::Response {
            response: &in_progress,
        },
    );
    event(
        out,
        "response.output_item.added",
        Body::Item {
            output_index: 0,
            item: &output_message(answer, "in_progress", &[]),
        },
    );
    event(
        out,
        "response.content_part.added",
        Body::Part {
            item_id,
            output_index: 0,
            content_index: 0,
            part: &output_text(""),
        },
    );
    event(
        out,
        "response.output_text.delta",
        Body::Delta {
            item_id,
            output_index: 0,
            content_index: 0,
            delta: answer.text,
            logprobs: NONE,
        },
    );
    event(
        out,
        "response.output_text.done",
        Body::Text {
            item_id,
            output_index: 0,
            content_index: 0,
            text: answer.text,
            logprobs: NONE,
        },
    );
    event(
        out,
        "response.content_part.done",
        Body::Part {
            item_id,
            output_index: 0,
            content_index: 0,
            part: &part[0],
        },
    );
    event(
        out,
        "response.output_item.done",
        Body::Item {
            output_index: 0,
            item: &done[0],
        },
    );
    event(
        out,
        "response.completed",
        Body::Response {
            response: &response(answer, "completed", &done),
        },
    );
}

fn output_text(text: &str) -> OutputText<'_> {
    OutputText {
        kind: "output_text",
        text,
        annotations: NONE,
        logprobs: NONE,
    }
}

/// The answer's message item; its content is given only once it is `completed`.
fn output_message<'a>(
    answer: &'a DirectAnswer<'a>,
    status: &'static str,
    content: &'a [OutputText<'a>],
) -> OutputMessage<'a> {
    OutputMessage {
        id: answer.id("msg_"),
        kind: "message",
        status,
        role: "assistant",
        content,
    }
}

fn response<'a>(
    answer: &'a DirectAnswer<'a>,
    status: &'static str,
    output: &'a [OutputMessage<'a>],
) -> Response<'a> {
    Response {
        id: answer.id("resp_"),
        object: "response",
        created_at: answer.seconds(),
        status,
        background: false,
        error: (),
        incomplete_details: (),
        instructions: (),
        max_output_tokens: (),
        model: answer.model,
        output,
        parallel_tool_calls: true,
        previous_response_id: (),
        reasoning: Reasoning {
            effort: (),
            summary: (),
        },
        store: false,
        temperature: (),
        text: TextConfig {
            format: Format { kind: "text" },
        },
        tool_choice: "auto",
        tools: NONE,
        top_p: (),
        truncation: "disabled",
        usage: (status == "completed").then(Usage::default),
        user: (),
        metadata: Empty {},
    }
}

// `()` is JSON's `null`, `NONE` its `[]`; members in the API's order.

/// An event: its `type` and `sequence_number` first, then its own members.
#[derive(Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sequence_number: u32,
    #[serde(flatten)]
    body: Body<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Body<'a> {
    Response {
        response: &'a Response<'a>,
    },
    Item {
        output_index: u32,
        item: &'a OutputMessage<'a>,
    },
    Part {
        item_id: Id<'a>,
        output_index: u32,
        content_index: u32,
        part: &'a OutputText<'a>,
    },
    Delta {
        item_id: Id<'a>,
        output_index: u32,
        content_index: u32,
        delta: &'a str,
        logprobs: [(); 0],
    },
    Text {
        item_id: Id<'a>,
        output_index: u32,
        content_index: u32,
        text: &'a str,
        logprobs: [(); 0],
    },
}

#[derive(Serialize)]
struct Response<'a> {
    id: Id<'a>,
    object: &'static str,
    created_at: i64,
    status: &'static str,
    background: bool,
    error: (),
    incomplete_details: (),
    instructions: (),
    max_output_tokens: (),
    model: &'a str,
    output: &'a [OutputMessage<'a>],
    parallel_tool_calls: bool,
    previous_response_id: (),
    reasoning: Reasoning,
    store: bool,
    temperature: (),
    text: TextConfig,
    tool_choice: &'static str,
    tools: [(); 0],
    top_p: (),
    truncation: &'static str,
    /// `null` until the response is completed.
    usage: Option<Usage>,
    user: (),
    metadata: Empty,
}

#[derive(Serialize)]
struct OutputMessage<'a> {
    id: Id<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
    status: &'static str,
    role: &'static str,
    content: &'a [OutputText<'a>],
}

#[derive(Serialize)]
struct OutputText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    annotations: [(); 0],
    logprobs: [(); 0],
}

#[derive(Serialize)]
struct Reasoning {
    effort: (),
    summary: (),
}

#[derive(Serialize)]
struct TextConfig {
    format: Format,
}

#[derive(Serialize)]
struct Format {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// Zero usage, every member OpenAI reports.
#[derive(Default, Serialize)]
struct Usage {
    input_tokens: u32,
    input_tokens_details: InputDetails,
    output_tokens: u32,
    output_tokens_details: OutputDetails,
    total_tokens: u32,
}

#[derive(Default, Serialize)]
struct InputDetails {
    cached_tokens: u32,
}

#[derive(Default, Serialize)]
struct OutputDetails {
    reasoning_tokens: u32,
}
