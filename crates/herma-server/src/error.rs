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
        match self.0.code {
            ProblemCode::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"herma\""),
                );
            }
            ProblemCode::Unavailable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ProblemCode::RateLimited => {
                let seconds = self
                    .0
                    .extension("retry_after_seconds")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(1);
                if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                    headers.insert(header::RETRY_AFTER, value);
                }
            }

            _ => {}
        }
        response
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
