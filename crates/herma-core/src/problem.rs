//! RFC 9457 problem details: the one error vocabulary of Herma's own API.
//!
//! The core names each problem with a stable `code` and `type` URI; the transports decide the
//! HTTP status (`herma-server` maps every [`ProblemCode`] in one match).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Base of every problem `type` URI. Stable: clients may match on the full URI or on `code`.
pub const PROBLEM_TYPE_BASE: &str = "https://herma.dev/problems/";

macro_rules! problem_codes {
    ($($variant:ident => $code:literal, $title:literal;)*) => {
        /// A machine-readable problem code. The `code` member of every problem body.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum ProblemCode {
            $(#[doc = $title] $variant,)*
        }

        impl ProblemCode {
            /// Every code, in declaration order (documentation and tests iterate it).
            pub const ALL: &'static [ProblemCode] = &[$(ProblemCode::$variant,)*];

            /// The snake_case code, e.g. `version_conflict`.
            pub const fn as_str(self) -> &'static str {
                match self { $(ProblemCode::$variant => $code,)* }
            }

            /// A short, human-readable summary that does not change between occurrences.
            pub const fn title(self) -> &'static str {
                match self { $(ProblemCode::$variant => $title,)* }
            }
        }
    };
}

problem_codes! {
    Unauthorized => "unauthorized", "A valid Herma key is required";
    HarnessRequired => "harness_required", "This operation needs an X-Herma-Harness header matching the key's harness";
    InsufficientScope => "insufficient_scope", "The key does not carry the scope this operation needs";
    AdminRequired => "admin_required", "This operation needs the bootstrap token or an admin key";
    BuiltinProtected => "builtin_protected", "System built-in records can only be changed by an admin";
    BrowserNavigationRefused => "browser_navigation_refused", "API routes refuse browser navigation and cookie authentication";
    EdgeAuthRequired => "edge_auth_required", "Requests must come through the configured edge";
    ContributorTierRefused => "contributor_tier_refused", "Contributor-tier models are refused";
    VersionConflict => "version_conflict", "The record changed since the version you read";
    InvalidJson => "invalid_json", "The body is not acceptable JSON";
    ValidationFailed => "validation_failed", "The request does not satisfy the schema";
    InvalidPath => "invalid_path", "The request path cannot be read";
    MalformedRequest => "malformed_request", "The request is not valid HTTP";
    UriTooLong => "uri_too_long", "The request URI exceeds the size limit";
    HeadersTooLarge => "headers_too_large", "The request headers exceed the size limit";
    NotFound => "not_found", "No such resource";
    MethodNotAllowed => "method_not_allowed", "This route does not accept that method";
    UnsupportedMediaType => "unsupported_media_type", "The body must be application/json";
    PayloadTooLarge => "payload_too_large", "The body exceeds the size limit";
    RequestTimeout => "request_timeout", "The request was not received in time";
    ServerBusy => "server_busy", "Herma is at a connection or memory limit; try again shortly";
    QuotaExceeded => "quota_exceeded", "This caller's stored records are at a quota the operator set";
    UpstreamRequired => "upstream_required", "No upstream is configured for this request";
    UpstreamHostRefused => "upstream_host_refused", "The upstream host is not on the allowlist";
    ProviderOperatorDisabled => "provider_operator_disabled", "The operator has paused this provider";
    UpstreamUnreachable => "upstream_unreachable", "The upstream could not be reached";
    UpstreamRedirectRefused => "upstream_redirect_refused", "The upstream answered with a redirect, which Herma never follows";
    UpstreamTimeout => "upstream_timeout", "The upstream did not answer in time";
    RateLimited => "rate_limited", "Too many requests from this address; try again later";
    ConversationDisabled => "conversation_disabled", "Typed conversations are not enabled on this server (HERMA_CONVERSATION_ENABLED)";
    InvalidProviderConfiguration => "invalid_provider_configuration", "The operator's configuration for this provider is invalid";
    OutputAllowanceRequired => "output_allowance_required", "The operator has not configured an output allowance for this provider";
    UnsupportedGenerationConfiguration => "unsupported_generation_configuration", "The operator's generation settings ask for what a managed turn cannot account for";
    ProviderGrantRequired => "provider_grant_required", "The operator has not granted this caller this provider and model";
    ConversationConflict => "conversation_conflict", "The conversation cannot take this turn as sent";
    ConversationExpired => "conversation_expired", "The conversation no longer accepts turns";
    ConversationLimit => "conversation_limit", "The caller has reached a conversation limit; try again later";
    BudgetExhausted => "budget_exhausted", "A spending ceiling would be exceeded by this turn";
    Internal => "internal", "Herma failed to complete the request";

    Unavailable => "unavailable", "A dependency of Herma is unavailable";
    JevNotAPlanProvider => "jev_not_a_plan_provider", "Jev produces typed decisions and cannot be a provider plan choice";
}

impl ProblemCode {
    /// The stable `type` URI of this problem.
    pub fn type_uri(self) -> String {
        format!("{PROBLEM_TYPE_BASE}{}", self.as_str())
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One field-level error: a JSON pointer (RFC 6901) into the request and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldError {
    /// JSON pointer to the offending member, e.g. `/triggers/keywords/3`. Empty for the whole body.
    pub pointer: String,
    /// What is wrong with it.
    pub detail: String,
}

impl FieldError {
    pub fn new(pointer: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            detail: detail.into(),
        }
    }
}

/// A problem, before a transport gives it a status and renders it.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub code: ProblemCode,
    pub detail: String,
    pub errors: Vec<FieldError>,
    /// Extension members (RFC 9457 §3.2), e.g. `current_version` on a version conflict.
    pub extensions: Vec<(String, Value)>,
}

impl Problem {
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            errors: Vec::new(),
            extensions: Vec::new(),
        }
    }

    /// A `validation_failed` problem listing every field error.
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let detail = match errors.as_slice() {
            [one] if one.pointer.is_empty() => one.detail.clone(),
            [one] => format!("{}: {}", one.pointer, one.detail),
            many => format!("{} fields are invalid", many.len()),
        };
        Self {
            errors,
            ..Self::new(ProblemCode::ValidationFailed, detail)
        }
    }

    /// A `version_conflict` problem carrying the version the record has now (absent if deleted).
    pub fn version_conflict(expected: u64, current: Option<u64>) -> Self {
        let detail = match current {
            Some(current) => {
                format!("expected_version {expected} is stale; the current version is {current}")
            }
            None => format!("expected_version {expected} is stale; the record no longer exists"),
        };
        Self::new(ProblemCode::VersionConflict, detail)
            .with("expected_version", expected)
            .with("current_version", current)
    }

    pub fn not_found(what: &str, id: &str) -> Self {
        Self::new(
            ProblemCode::NotFound,
            format!("{what} `{id}` was not found"),
        )
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        let value = value.into();
        match self.extensions.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.extensions.push((key.to_owned(), value)),
        }
        self
    }

    /// The extension member `key`, if set.
    pub fn extension(&self, key: &str) -> Option<&Value> {
        self.extensions
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Adds an extension member (RFC 9457 §3.2).
    pub fn with_extension(mut self, name: &str, value: Value) -> Self {
        self.extensions.push((name.to_owned(), value));
        self
    }

    pub fn with_pointer(mut self, pointer: impl Into<String>) -> Self {
        let pointer = pointer.into();
        let detail = self.detail.clone();
        self.errors.push(FieldError::new(pointer, detail));
        self
    }

    /// The RFC 9457 body. `status` is supplied by the transport that chose it.
    pub fn to_body(&self, status: u16) -> Value {
        let mut body = Map::new();
        body.insert("type".into(), self.code.type_uri().into());
        body.insert("title".into(), self.code.title().into());
        body.insert("status".into(), status.into());
        body.insert("detail".into(), self.detail.clone().into());
        body.insert("code".into(), self.code.as_str().into());
        if !self.errors.is_empty() {
            body.insert(
                "errors".into(),
                serde_json::to_value(&self.errors).unwrap_or(Value::Null),
            );
        }
        for (key, value) in &self.extensions {
            body.entry(key.clone()).or_insert_with(|| value.clone());
        }
        Value::Object(body)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

impl std::error::Error for Problem {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn codes_are_unique_and_snake_case() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ProblemCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate {code}");
            assert!(
                code.as_str()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_')
            );
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, Value::String(code.as_str().into()));
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn version_conflict_body_carries_both_versions() {
        let body = Problem::version_conflict(3, Some(5)).to_body(409);
        assert_eq!(body["type"], "https://herma.dev/problems/version_conflict");
        assert_eq!(body["code"], "version_conflict");
        assert_eq!(body["status"], 409);
        assert_eq!(body["expected_version"], 3);
        assert_eq!(body["current_version"], 5);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn extensions_never_override_standard_members() {
        let body = Problem::new(ProblemCode::NotFound, "x")
            .with("type", "evil")
            .to_body(404);
        assert_eq!(body["type"], "https://herma.dev/problems/not_found");
    }
}
