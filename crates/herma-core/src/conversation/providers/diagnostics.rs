//! What an attempt record keeps of a provider's error body: allowlisted tokens and a normalized
//! reason, never the provider's words.
//!
//! At most the first [`MAX_ERROR_BODY_BYTES`] are read, strictly; a body cut there mid-JSON, or
//! malformed, unreadable or of an unknown shape, yields no values and a reason from the status
//! alone. The error object is `error` at the top level — OpenAI, Meta and OpenRouter
//! (`{"error":{"type","code","param",…}}`) and Anthropic (`{"type":"error","error":{"type",…}}`)
//! alike; Ollama's `{"error":"text"}` has none. From it only `type`, `code` and `param` are
//! read, and each is copied only when it is one of the closed lists below. Messages, metadata,
//! headers, request or account ids, echoed input and credentials are never copied. OpenRouter's
//! numeric `code` (the HTTP status again) is not a token and is not copied.
//!
//! The lists follow the official error guides of OpenAI, Anthropic and OpenRouter; a token they
//! add later stays out (its status still classifies the attempt) until it is listed here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How much of an error body is read.
pub const MAX_ERROR_BODY_BYTES: usize = 16 * 1024;

/// Error `type`s copied.
const TYPES: &[&str] = &[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
    "timeout_error",
    "server_error",
    "insufficient_quota",
    "billing_error",
    "request_too_large",
    "tokens",
    "requests",
];

/// Error `code`s copied.
const CODES: &[&str] = &[
    "model_not_found",
    "unsupported_parameter",
    "unsupported_value",
    "unknown_parameter",
    "invalid_value",
    "missing_required_parameter",
    "context_length_exceeded",
    "insufficient_quota",
    "billing_hard_limit_reached",
    "billing_not_active",
    "rate_limit_exceeded",
    "invalid_api_key",
    "server_error",
];

/// `param`s copied: the request's own members and their known children. Another path whose
/// first segment (before `.` or `[`) is listed is copied as that segment only, so
/// `tools[2].parameters.properties.x` is kept as `tools`.
const PARAMS: &[&str] = &[
    "model",
    "messages",
    "input",
    "instructions",
    "system",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_output_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "reasoning",
    "reasoning.effort",
    "reasoning.summary",
    "service_tier",
    "store",
    "background",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "n",
    "stop",
    "stop_sequences",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "logprobs",
    "top_logprobs",
    "response_format",
    "text",
    "text.verbosity",
    "verbosity",
    "truncation",
    "include",
    "metadata",
    "user",
    "thinking",
    "thinking.type",
    "thinking.budget_tokens",
    "output_config",
    "output_config.effort",
    "provider",
    "options",
    "think",
    "keep_alive",
];

/// What the provider's error says, normalized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosticReason {
    /// A parameter or value the model or provider does not take.
    UnsupportedParameter,
    /// The model does not exist or is not available to this account.
    ModelUnavailable,
    /// Credits, billing or quota are exhausted (also any 402).
    CreditOrQuotaExhausted,
    Unknown,
}

/// Provider-reported evidence about a refused attempt: not an established root cause, and no
/// permission to retry, refund or fail over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderDiagnostics {
    pub error_type: Option<String>,
    pub error_code: Option<String>,
    pub param: Option<String>,
    pub reason: DiagnosticReason,
}

/// The diagnostics of an error reply with `status` and `body`.
pub fn diagnose(status: u16, body: &[u8]) -> ProviderDiagnostics {
    let read = body.get(..MAX_ERROR_BODY_BYTES).unwrap_or(body);
    let parsed = crate::json::parse_strict(read).ok();
    let error = parsed
        .as_ref()
        .and_then(|root| root.get("error"))
        .and_then(Value::as_object);
    let token = |key: &str| error.and_then(|e| e.get(key)).and_then(Value::as_str);
    let error_type = token("type").filter(|t| TYPES.contains(t));
    let error_code = token("code").filter(|c| CODES.contains(c));
    let param = token("param").and_then(allowed_param);
    ProviderDiagnostics {
        reason: classify(status, error_type, error_code),
        error_type: error_type.map(str::to_owned),
        error_code: error_code.map(str::to_owned),
        param: param.map(str::to_owned),
    }
}

fn allowed_param(param: &str) -> Option<&str> {
    if PARAMS.contains(&param) {
        return Some(param);
    }
    let root = param.split(['.', '[']).next()?;
    PARAMS.contains(&root).then_some(root)
}

fn classify(status: u16, error_type: Option<&str>, error_code: Option<&str>) -> DiagnosticReason {
    let unsupported = matches!(
        error_code,
        Some("unsupported_parameter" | "unsupported_value" | "unknown_parameter")
    );
    let model = error_code == Some("model_not_found")
        || (status == 404 && error_type == Some("not_found_error"));
    let credit = status == 402
        || matches!(
            error_code,
            Some("insufficient_quota" | "billing_hard_limit_reached" | "billing_not_active")
        )
        || matches!(error_type, Some("insufficient_quota" | "billing_error"));
    if unsupported {
        DiagnosticReason::UnsupportedParameter
    } else if model {
        DiagnosticReason::ModelUnavailable
    } else if credit {
        DiagnosticReason::CreditOrQuotaExhausted
    } else {
        DiagnosticReason::Unknown
    }
}
