//! Herma's own errors on the proxied routes, in each protocol's error shape so the official
//! SDKs raise their usual exceptions. The `code` is the same as on Herma's own API.

use serde_json::{Value, json};

use super::Protocol;
use crate::problem::{Problem, ProblemCode};

/// Anthropic's `error.type` for a problem.
fn anthropic_type(code: ProblemCode) -> &'static str {
    use ProblemCode::*;
    match code {
        Unauthorized => "authentication_error",
        HarnessRequired
        | InsufficientScope
        | AdminRequired
        | BuiltinProtected
        | BrowserNavigationRefused
        | EdgeAuthRequired
        | ContributorTierRefused
        | UpstreamHostRefused => "permission_error",
        NotFound => "not_found_error",
        PayloadTooLarge => "request_too_large",
        ProviderOperatorDisabled | Unavailable => "overloaded_error",
        Internal | UpstreamUnreachable | UpstreamRedirectRefused | UpstreamTimeout => "api_error",
        _ => "invalid_request_error",
    }
}

/// OpenAI's `error.type` for a problem.
fn openai_type(code: ProblemCode) -> &'static str {
    use ProblemCode::*;
    match code {
        Unauthorized => "authentication_error",
        HarnessRequired
        | InsufficientScope
        | AdminRequired
        | BuiltinProtected
        | BrowserNavigationRefused
        | EdgeAuthRequired
        | ContributorTierRefused
        | UpstreamHostRefused => "permission_error",
        NotFound => "not_found_error",
        Internal
        | Unavailable
        | ProviderOperatorDisabled
        | UpstreamUnreachable
        | UpstreamRedirectRefused
        | UpstreamTimeout => "server_error",
        _ => "invalid_request_error",
    }
}

/// The error body for `problem` on a `protocol` route.
pub fn body(protocol: Protocol, problem: &Problem) -> Value {
    let param = problem
        .errors
        .first()
        .map(|e| e.pointer.clone())
        .filter(|p| !p.is_empty());
    match protocol {
        Protocol::Messages => json!({
            "type": "error",
            "error": {"type": anthropic_type(problem.code), "message": problem.detail, "code": problem.code.as_str()}
        }),
        Protocol::ChatCompletions | Protocol::Responses => json!({
            "error": {
                "message": problem.detail,
                "type": openai_type(problem.code),
                "param": param,
                "code": problem.code.as_str()
            }
        }),
    }
}
