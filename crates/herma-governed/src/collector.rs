//! Reading one provider stream into a step: neutral text, tool calls, reasoning, provider
//! blocks, the stop and the order they came in — or the first reason the output is invalid.
//!
//! The collector is pure: it is fed [`ModelEvent`]s and says whether to keep reading.

use herma_core::call::{ModelEvent, StopReason, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a call's output is invalid: the first check the collector refused. A closed set that
/// never carries content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidReason {
    /// Text, tool-call and provider-block JSON passed `max_output_chars`.
    OutputChars,
    /// A reasoning block passed `max_output_chars`, or reasoning looped.
    ReasoningChars,
    /// Text that cannot be the output: not JSON under a JSON contract, refused by the
    /// validator, or carrying a NUL.
    TextMalformed,
    /// A tool call where none may be, or one without a name or naming an unknown tool.
    ToolCall,
    /// A reasoning or provider block that is not a JSON object with a `type`.
    BlockMalformed,
    /// A second stop, or content after the stop.
    StopConflict,
    /// An event the call's mode does not accept.
    EventType,
}

impl InvalidReason {
    pub const ALL: [Self; 7] = [
        Self::OutputChars,
        Self::ReasoningChars,
        Self::TextMalformed,
        Self::ToolCall,
        Self::BlockMalformed,
        Self::StopConflict,
        Self::EventType,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::OutputChars => "output_chars",
            Self::ReasoningChars => "reasoning_chars",
            Self::TextMalformed => "text_malformed",
            Self::ToolCall => "tool_call",
            Self::BlockMalformed => "block_malformed",
            Self::StopConflict => "stop_conflict",
            Self::EventType => "event_type",
        }
    }
}

/// The largest `max_output_chars` a runner accepts.
pub const MAX_OUTPUT_CHARS_CEILING: usize = 1_000_000;

/// One tool call as the step keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepToolCall {
    pub id: String,
    pub name: String,
    /// The parsed arguments; `{}` when they were not a JSON object.
    pub input: Value,
    /// The model's arguments were not a JSON object: `input` is empty and must not be used.
    pub malformed: bool,
}

/// Where each piece came, in stream order. Text ranges are UTF-16 offsets into `Step::text`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OrderEntry {
    Text { start: usize, end: usize },
    ToolCall { index: usize },
    Reasoning { index: usize },
    ProviderBlock { index: usize },
}

/// A model step: backstage data for the adopting loop, not a public reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub text: String,
    pub tool_calls: Vec<StepToolCall>,
    pub reasoning: Vec<Value>,
    pub provider_blocks: Vec<Value>,
    pub stop: Option<StopReason>,
    pub order: Vec<OrderEntry>,
}

/// What a collector accepts.
#[derive(Clone, Debug)]
pub struct CollectorLimits {
    /// Tool calls are allowed (the step runner) or refused (the text runner).
    pub tools: Option<Vec<String>>,
    /// Provider blocks are allowed.
    pub provider_blocks: bool,
    pub max_output_chars: usize,
    pub max_consecutive_reasoning: Option<u32>,
}

/// Whether to keep reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    /// A reasoning loop was detected: stop reading now.
    Cut,
}

#[derive(Debug)]
pub struct Collector {
    limits: CollectorLimits,
    step: Step,
    utf16_len: usize,
    output_chars: usize,
    consecutive_reasoning: u32,
    invalid: Option<InvalidReason>,
    loop_cut: bool,
    stops: u32,
    content: bool,
    reference: Option<String>,
    usage: Option<Usage>,
}

impl Collector {
    pub fn new(limits: CollectorLimits) -> Self {
        Self {
            limits,
            step: Step::default(),
            utf16_len: 0,
            output_chars: 0,
            consecutive_reasoning: 0,
            invalid: None,
            loop_cut: false,
            stops: 0,
            content: false,
            reference: None,
            usage: None,
        }
    }

    fn refuse(&mut self, reason: InvalidReason) {
        self.invalid.get_or_insert(reason);
    }

    fn count(&mut self, chars: usize, reason: InvalidReason) {
        self.output_chars = self.output_chars.saturating_add(chars);
        if self.output_chars > self.limits.max_output_chars {
            self.refuse(reason);
        }
    }

    fn content_arrives(&mut self) {
        self.content = true;
        if self.stops > 0 {
            self.refuse(InvalidReason::StopConflict);
        }
    }

    pub fn feed(&mut self, event: ModelEvent) -> Next {
        match event {
            ModelEvent::Reference(id) => {
                self.reference.get_or_insert_with(|| bounded(&id, 256));
            }
            ModelEvent::Usage(usage) => {
                self.usage = Some(usage);
            }
            ModelEvent::Stop(stop) => {
                self.stops += 1;
                if self.stops > 1 {
                    self.refuse(InvalidReason::StopConflict);
                } else {
                    self.step.stop = Some(match stop {
                        StopReason::Other(name) => StopReason::Other(bounded(&name, 64)),
                        known => known,
                    });
                }
            }
            ModelEvent::TextDelta(text) => {
                self.content_arrives();
                self.consecutive_reasoning = 0;
                if text.contains('\0') {
                    self.refuse(InvalidReason::TextMalformed);
                }
                self.count(text.chars().count(), InvalidReason::OutputChars);
                if self.invalid.is_none() {
                    let start = self.utf16_len;
                    self.utf16_len += text.encode_utf16().count();
                    self.step.text.push_str(&text);
                    match self.step.order.last_mut() {
                        Some(OrderEntry::Text { end, .. }) => *end = self.utf16_len,
                        _ => self.step.order.push(OrderEntry::Text {
                            start,
                            end: self.utf16_len,
                        }),
                    }
                }
            }
            ModelEvent::ToolCall {
                id,
                name,
                arguments,
            } => {
                self.content_arrives();
                self.consecutive_reasoning = 0;
                let known = match &self.limits.tools {
                    None => false,
                    Some(tools) => tools.iter().any(|t| t == &name),
                };
                if !known || id.is_empty() {
                    self.refuse(InvalidReason::ToolCall);
                }
                self.count(
                    name.chars().count() + arguments.chars().count(),
                    InvalidReason::OutputChars,
                );
                if self.invalid.is_none() {
                    let (input, malformed) = match serde_json::from_str::<Value>(&arguments) {
                        Ok(Value::Object(map)) => (Value::Object(map), false),
                        _ => (Value::Object(Default::default()), true),
                    };
                    self.step.order.push(OrderEntry::ToolCall {
                        index: self.step.tool_calls.len(),
                    });
                    self.step.tool_calls.push(StepToolCall {
                        id,
                        name,
                        input,
                        malformed,
                    });
                }
            }
            ModelEvent::Reasoning(block) => {
                self.content_arrives();
                if !is_block(&block) {
                    self.refuse(InvalidReason::BlockMalformed);
                }
                self.count(
                    block.to_string().chars().count(),
                    InvalidReason::ReasoningChars,
                );
                self.consecutive_reasoning += 1;
                if let Some(limit) = self.limits.max_consecutive_reasoning
                    && self.consecutive_reasoning > limit
                {
                    self.refuse(InvalidReason::ReasoningChars);
                    self.loop_cut = true;
                    return Next::Cut;
                }
                if self.invalid.is_none() {
                    self.step.order.push(OrderEntry::Reasoning {
                        index: self.step.reasoning.len(),
                    });
                    self.step.reasoning.push(block);
                }
            }
            ModelEvent::ProviderBlock(block) => {
                // Only text and tool calls break a run of reasoning.
                self.content_arrives();
                if !self.limits.provider_blocks {
                    self.refuse(InvalidReason::EventType);
                } else if !is_block(&block) {
                    self.refuse(InvalidReason::BlockMalformed);
                }
                self.count(
                    block.to_string().chars().count(),
                    InvalidReason::OutputChars,
                );
                if self.invalid.is_none() {
                    self.step.order.push(OrderEntry::ProviderBlock {
                        index: self.step.provider_blocks.len(),
                    });
                    self.step.provider_blocks.push(block);
                }
            }
        }
        Next::Continue
    }

    pub fn finish(self) -> Collected {
        Collected {
            step: self.step,
            invalid: self.invalid,
            loop_cut: self.loop_cut,
            stops: self.stops,
            content: self.content,
            reference: self.reference,
            usage: self.usage,
        }
    }
}

/// Provider-supplied identifiers as kept: no control characters, bounded.
fn bounded(text: &str, max: usize) -> String {
    text.chars().filter(|c| !c.is_control()).take(max).collect()
}

fn is_block(block: &Value) -> bool {
    block
        .as_object()
        .is_some_and(|o| o.get("type").is_some_and(Value::is_string))
}

/// What a stream amounted to.
#[derive(Clone, Debug, PartialEq)]
pub struct Collected {
    pub step: Step,
    pub invalid: Option<InvalidReason>,
    pub loop_cut: bool,
    pub stops: u32,
    /// Any content event arrived (even one the collector refused).
    pub content: bool,
    pub reference: Option<String>,
    pub usage: Option<Usage>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step_limits() -> CollectorLimits {
        CollectorLimits {
            tools: Some(vec!["extract".into()]),
            provider_blocks: true,
            max_output_chars: 1_000,
            max_consecutive_reasoning: Some(2),
        }
    }

    fn feed(limits: CollectorLimits, events: Vec<ModelEvent>) -> Collected {
        let mut c = Collector::new(limits);
        for e in events {
            if c.feed(e) == Next::Cut {
                break;
            }
        }
        c.finish()
    }

    fn text(t: &str) -> ModelEvent {
        ModelEvent::TextDelta(t.into())
    }

    #[test]
    fn adjacent_text_coalesces_and_ranges_are_utf16() {
        let got = feed(
            step_limits(),
            vec![
                text("a😀"),
                text("b"),
                ModelEvent::Reasoning(json!({"type": "thinking", "thinking": "x"})),
                text("é"),
                ModelEvent::ToolCall {
                    id: "1".into(),
                    name: "extract".into(),
                    arguments: "{\"k\":1}".into(),
                },
                ModelEvent::ProviderBlock(json!({"type": "web_search_tool_result"})),
                ModelEvent::Stop(StopReason::ToolUse),
            ],
        );
        assert_eq!(got.invalid, None);
        assert_eq!(got.step.text, "a😀bé");
        assert_eq!(
            got.step.order,
            vec![
                OrderEntry::Text { start: 0, end: 4 },
                OrderEntry::Reasoning { index: 0 },
                OrderEntry::Text { start: 4, end: 5 },
                OrderEntry::ToolCall { index: 0 },
                OrderEntry::ProviderBlock { index: 0 },
            ]
        );
        assert_eq!(got.step.tool_calls[0].input, json!({"k": 1}));
        assert_eq!(got.step.stop, Some(StopReason::ToolUse));
    }

    #[test]
    fn malformed_arguments_keep_an_empty_input_and_a_marker() {
        let got = feed(
            step_limits(),
            vec![ModelEvent::ToolCall {
                id: "1".into(),
                name: "extract".into(),
                arguments: "{\"secret\": tru".into(),
            }],
        );
        assert_eq!(got.invalid, None);
        assert!(got.step.tool_calls[0].malformed);
        assert_eq!(got.step.tool_calls[0].input, json!({}));
        assert!(!format!("{:?}", got.step).contains("secret"));
    }

    #[test]
    fn each_invalid_reason_is_the_first_refusal() {
        let tool = |name: &str| ModelEvent::ToolCall {
            id: "1".into(),
            name: name.into(),
            arguments: "{}".into(),
        };
        let cases: Vec<(CollectorLimits, Vec<ModelEvent>, InvalidReason)> = vec![
            (
                CollectorLimits {
                    max_output_chars: 3,
                    ..step_limits()
                },
                vec![text("abcd"), tool("nope")],
                InvalidReason::OutputChars,
            ),
            (
                CollectorLimits {
                    max_output_chars: 10,
                    ..step_limits()
                },
                vec![ModelEvent::Reasoning(
                    json!({"type": "reasoning", "encrypted_content": "0123456789"}),
                )],
                InvalidReason::ReasoningChars,
            ),
            (
                step_limits(),
                vec![text("a\0b")],
                InvalidReason::TextMalformed,
            ),
            (
                step_limits(),
                vec![tool("unknown")],
                InvalidReason::ToolCall,
            ),
            (
                step_limits(),
                vec![ModelEvent::ProviderBlock(json!(["not", "an", "object"]))],
                InvalidReason::BlockMalformed,
            ),
            (
                step_limits(),
                vec![
                    ModelEvent::Stop(StopReason::EndTurn),
                    ModelEvent::Stop(StopReason::MaxTokens),
                ],
                InvalidReason::StopConflict,
            ),
            (
                CollectorLimits {
                    tools: None,
                    provider_blocks: false,
                    ..step_limits()
                },
                vec![
                    ModelEvent::ProviderBlock(json!({"type": "x"})),
                    tool("extract"),
                ],
                InvalidReason::EventType,
            ),
        ];
        for (limits, events, reason) in cases {
            let got = feed(limits, events);
            assert_eq!(got.invalid, Some(reason));
            assert!(got.step.text.is_empty() || reason == InvalidReason::OutputChars);
        }
    }

    #[test]
    fn a_reasoning_loop_is_cut_on_the_first_event_past_the_limit() {
        let mut c = Collector::new(step_limits());
        let r = || ModelEvent::Reasoning(json!({"type": "thinking"}));
        assert_eq!(c.feed(r()), Next::Continue);
        assert_eq!(c.feed(r()), Next::Continue);
        assert_eq!(c.feed(text("t")), Next::Continue);
        assert_eq!(c.feed(r()), Next::Continue);
        assert_eq!(c.feed(r()), Next::Continue);
        assert_eq!(c.feed(r()), Next::Cut);
        let got = c.finish();
        assert!(got.loop_cut);
        // Provider blocks do not break a run of reasoning: only text and tool calls do.
        let mut c = Collector::new(step_limits());
        let block = || ModelEvent::ProviderBlock(json!({"type": "web_search_tool_result"}));
        assert_eq!(c.feed(r()), Next::Continue);
        assert_eq!(c.feed(block()), Next::Continue);
        assert_eq!(c.feed(r()), Next::Continue);
        assert_eq!(c.feed(block()), Next::Continue);
        assert_eq!(c.feed(r()), Next::Cut);
        assert_eq!(got.invalid, Some(InvalidReason::ReasoningChars));
    }
}
