//! Problems as HTTP responses: the one place Herma's API statuses are decided.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use herma_core::{Problem, ProblemCode};

/// The status of an MCP reply, by its JSON-RPC error code (`None` for a result). Malformed
/// messages and version problems are 400, an unknown method 404, a bad key 401; everything else,
/// including a tool that failed (`isError`), is a 200 carrying the JSON-RPC answer.
pub fn rpc_status_of(code: Option<i64>) -> StatusCode {
    use herma_app::mcp::codes;
    match code {
        Some(
            codes::PARSE_ERROR
            | codes::INVALID_REQUEST
            | codes::INVALID_PARAMS
            | codes::HEADER_MISMATCH
            | codes::UNSUPPORTED_PROTOCOL_VERSION,
        ) => StatusCode::BAD_REQUEST,
        Some(codes::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(codes::UNAUTHORIZED) => StatusCode::UNAUTHORIZED,
        _ => StatusCode::OK,
    }
}

/// The status of every problem code on Herma's own API.
pub fn status_of(code: ProblemCode) -> StatusCode {
    match code {
        ProblemCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ProblemCode::HarnessRequired
        | ProblemCode::InsufficientScope
        | ProblemCode::AdminRequired
        | ProblemCode::BuiltinProtected
        | ProblemCode::QuotaExceeded
        | ProblemCode::BrowserNavigationRefused
        | ProblemCode::EdgeAuthRequired
        | ProblemCode::ContributorTierRefused => StatusCode::FORBIDDEN,
        ProblemCode::VersionConflict => StatusCode::CONFLICT,
        ProblemCode::InvalidJson => StatusCode::BAD_REQUEST,
        ProblemCode::ValidationFailed => StatusCode::UNPROCESSABLE_ENTITY,
        ProblemCode::InvalidPath | ProblemCode::MalformedRequest => StatusCode::BAD_REQUEST,
        ProblemCode::UriTooLong => StatusCode::URI_TOO_LONG,
        ProblemCode::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        ProblemCode::NotFound => StatusCode::NOT_FOUND,
        ProblemCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ProblemCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ProblemCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ProblemCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        ProblemCode::ServerBusy => StatusCode::SERVICE_UNAVAILABLE,
        ProblemCode::UpstreamRequired => StatusCode::BAD_REQUEST,
        ProblemCode::UpstreamHostRefused => StatusCode::FORBIDDEN,
        ProblemCode::ProviderOperatorDisabled => StatusCode::SERVICE_UNAVAILABLE,
        ProblemCode::UpstreamUnreachable | ProblemCode::UpstreamRedirectRefused => {
            StatusCode::BAD_GATEWAY
        }
        ProblemCode::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        ProblemCode::RateLimited
        | ProblemCode::ConversationLimit
        | ProblemCode::BudgetExhausted => StatusCode::TOO_MANY_REQUESTS,
        ProblemCode::ConversationDisabled => StatusCode::NOT_FOUND,
        ProblemCode::InvalidProviderConfiguration
        | ProblemCode::OutputAllowanceRequired
        | ProblemCode::UnsupportedGenerationConfiguration => StatusCode::SERVICE_UNAVAILABLE,
        ProblemCode::ProviderGrantRequired => StatusCode::FORBIDDEN,
        ProblemCode::ConversationConflict => StatusCode::CONFLICT,
        ProblemCode::ConversationExpired => StatusCode::GONE,
        ProblemCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,

        ProblemCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ProblemCode::JevNotAPlanProvider => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// A problem on its way out as `application/problem+json`.
#[derive(Debug)]
pub struct ApiError(pub Problem);

impl From<Problem> for ApiError {
    fn from(problem: Problem) -> Self {
        Self(problem)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(self.0.code);
        let body = self.0.to_body(status.as_u16()).to_string();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.0.code == ProblemCode::Unauthorized {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"herma\""),
            );
        }
        limit_headers(&self.0, headers);
        response
    }
}

/// The seconds a client should wait before retrying, for the problems that say so: the
/// problem's `retry_after_seconds`, else one second.
pub fn retry_after(problem: &Problem) -> Option<u64> {
    match problem.code {
        ProblemCode::Unavailable => Some(1),
        ProblemCode::RateLimited | ProblemCode::ServerBusy => Some(
            problem
                .extension("retry_after_seconds")
                .and_then(|v| v.as_u64())
                .unwrap_or(1),
        ),
        _ => None,
    }
}

/// `Retry-After` for problems a retry resolves, and `Connection: close` for a request that did
/// not arrive in time (what is left of it is not worth waiting for). Both Herma's problem+json
/// and the proxied routes' protocol-shaped errors carry them.
pub fn limit_headers(problem: &Problem, headers: &mut axum::http::HeaderMap) {
    if let Some(value) =
        retry_after(problem).and_then(|s| HeaderValue::from_str(&s.to_string()).ok())
    {
        headers.insert(header::RETRY_AFTER, value);
    }
    if problem.code == ProblemCode::RequestTimeout {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_an_error_status() {
        for code in ProblemCode::ALL {
            let status = status_of(*code);
            assert!(
                status.is_client_error() || status.is_server_error(),
                "{code}"
            );
        }
        assert_eq!(
            status_of(ProblemCode::VersionConflict),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status_of(ProblemCode::BuiltinProtected),
            StatusCode::FORBIDDEN
        );
    }
}
