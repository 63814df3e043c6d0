//! Extractors: the gate's header facts, strict query strings and strict JSON bodies, all
//! refusing with problem+json; bodies are read within their route's size limit (a declared
//! `Content-Length` over it is refused unread) and under `crate::limits`.

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use herma_app::gate::Gate;
use herma_core::gate::{GateRequest, Principal, Requirement};
use herma_core::{FieldError, Problem, ProblemCode, json};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::AppState;
use crate::error::ApiError;
use crate::limits::BodyRefusal;

pub const HARNESS_HEADER: &str = "x-herma-harness";

// The gate's headers as names: a lookup by `&str` parses and lowercases the name each time.
const HARNESS: HeaderName = HeaderName::from_static(HARNESS_HEADER);
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const SEC_FETCH_MODE: HeaderName = HeaderName::from_static("sec-fetch-mode");
const SEC_FETCH_DEST: HeaderName = HeaderName::from_static("sec-fetch-dest");

/// Whether the request says its body is JSON (`application/json`, parameters allowed).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// One path segment (a record, receipt or key id), percent-decoded. A segment that does not
/// decode to UTF-8 (`%FF`) is refused as `invalid_path` problem+json, not axum's plain text.
pub struct PathId(pub String);

impl FromRequestParts<AppState> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let parsed = axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| {
                Problem::new(
                    ProblemCode::InvalidPath,
                    format!("the path's id cannot be read: {}", rejection.body_text()),
                )
            });
        match parsed {
            Ok(axum::extract::Path(id)) => Ok(Self(id)),
            Err(problem) => Err(caller_first(parts, state, problem).await),
        }
    }
}

/// Every route with a path id or a query string needs a key: a caller who presents no valid
/// credential learns that first, never which parameters or ids the route takes (its
/// `problem` is for authenticated callers only).
async fn caller_first(parts: &Parts, state: &AppState, problem: Problem) -> ApiError {
    match GateRead::of(&parts.headers)
        .authenticate(&state.app.gate)
        .await
    {
        Ok(_) => ApiError(problem),
        Err(refused) => ApiError(refused),
    }
}

/// The request headers the gate reads, kept so admission can happen inside the handler (where
/// the requirement may depend on the query, e.g. built-in writes need an admin).
pub struct GateFacts(HeaderMap);

impl<S: Send + Sync> FromRequestParts<S> for GateFacts {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(parts.headers.clone()))
    }
}

impl GateFacts {
    /// What the gate reads ([`GateRead::of`] the headers).
    pub fn read(&self) -> GateRead<'_> {
        GateRead::of(&self.0)
    }

    /// Who the credential is, with no requirement to meet ([`GateRead::authenticate`]).
    pub async fn authenticate(&self, state: &AppState) -> Result<Principal, ApiError> {
        Ok(self.read().authenticate(&state.app.gate).await?)
    }

    pub async fn admit(
        &self,
        state: &AppState,
        requirement: Requirement,
    ) -> Result<Principal, ApiError> {
        let read = self.read();
        read.repeated()?;
        Ok(state
            .app
            .gate
            .admit(&read.request, requirement, read.harness)
            .await?)
    }
}

/// The gate's headers as one pass over them found them ([`GateRead::of`]).
pub struct GateRead<'a> {
    pub request: GateRequest<'a>,
    pub harness: Option<&'a str>,
    /// How many values `Authorization`, `x-api-key` and `x-herma-harness` had.
    counts: [u32; 3],
}

impl<'a> GateRead<'a> {
    /// What the gate reads, in one pass over the headers (nine lookups by name, each hashing
    /// it, cost about 1,300 instructions a request): each header's first value, as `get`
    /// gives it, and which credential or attestation header came more than once.
    pub fn of(headers: &'a HeaderMap) -> Self {
        let mut read = GateRead {
            request: GateRequest::default(),
            harness: None,
            counts: [0; 3],
        };
        fn text(value: &HeaderValue) -> Option<&str> {
            value.to_str().ok()
        }
        // A name's values come one after the other, its first first.
        let mut last: Option<&HeaderName> = None;
        for (name, value) in headers {
            let first = last != Some(name);
            last = Some(name);
            let request = &mut read.request;
            if *name == header::AUTHORIZATION {
                read.counts[0] += 1;
                if first {
                    request.authorization = text(value);
                }
            } else if *name == header::COOKIE {
                request.has_cookie = true;
            } else if !first {
                if *name == X_API_KEY {
                    read.counts[1] += 1;
                } else if *name == HARNESS {
                    read.counts[2] += 1;
                }
            } else if *name == X_API_KEY {
                read.counts[1] += 1;
                request.x_api_key = text(value);
            } else if *name == HARNESS {
                read.counts[2] += 1;
                read.harness = text(value);
            } else if *name == SEC_FETCH_MODE {
                request.sec_fetch_mode = text(value);
            } else if *name == SEC_FETCH_DEST {
                request.sec_fetch_dest = text(value);
            }
        }
        read
    }

    /// Who the credential is, with no requirement to meet; a credential or harness header
    /// sent twice is refused first, as [`GateFacts::admit`] refuses it.
    pub async fn authenticate(&self, gate: &Gate) -> Result<Principal, Problem> {
        self.repeated()?;
        gate.authenticate(&self.request).await
    }

    /// A credential or attestation header sent more than once is ambiguous (which one counts
    /// depends on who reads it): refused before anything else, the first of those three named.
    pub fn repeated(&self) -> Result<(), Problem> {
        let names = [&header::AUTHORIZATION, &X_API_KEY, &HARNESS];
        match names.iter().zip(self.counts).find(|(_, count)| *count > 1) {
            Some((name, _)) => Err(Problem::new(
                ProblemCode::MalformedRequest,
                format!("the {name} header is sent more than once; send it once"),
            )),
            None => Ok(()),
        }
    }
}

/// A query string decoded strictly: unknown parameters and bad values are `validation_failed`.
pub struct StrictQuery<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let parsed = Query::<T>::try_from_uri(&parts.uri).map_err(|e| {
            Problem::validation(vec![FieldError::new(
                "",
                format!(
                    "query string: {}",
                    e.body_text()
                        .trim_start_matches("Failed to deserialize query string: ")
                ),
            )])
        });
        match parsed {
            Ok(Query(q)) => Ok(Self(q)),
            Err(problem) => Err(caller_first(parts, state, problem).await),
        }
    }
}

/// Reads a JSON body of at most `limit` bytes and parses it strictly (duplicate keys, depth).
pub async fn read_json(headers: &HeaderMap, body: Body, limit: usize) -> Result<Value, ApiError> {
    if let Some(content_type) = header_str(headers, &header::CONTENT_TYPE) {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError(Problem::new(
                ProblemCode::UnsupportedMediaType,
                format!("Content-Type `{essence}` is not JSON; send application/json"),
            )));
        }
    }
    let bytes = read_body(body, limit).await?;
    Ok(json::parse_strict(&bytes)?)
}

/// The whole body, at most `limit` bytes, refused as problem+json ([`read_limited`]).
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    read_limited(body, limit).await.map_err(ApiError)
}

/// The whole body, at most `limit` bytes. A declared `Content-Length` over the limit is
/// `payload_too_large` before a byte is read, as is a body that grows past it; the body guard's
/// refusals (`crate::limits`: the read timeout, the memory budget) keep their problem; a body
/// that breaks off is `invalid_json`. The proxied routes render the problem in their protocol's
/// shape.
pub async fn read_limited(body: Body, limit: usize) -> Result<Bytes, Problem> {
    let too_large = |declared: Option<u64>| {
        let detail = match declared {
            Some(n) => format!("the body is declared as {n} bytes; at most {limit} are accepted"),
            None => format!("the body is larger than {limit} bytes"),
        };
        Problem::new(ProblemCode::PayloadTooLarge, detail).with("max_bytes", limit)
    };
    let hint = body.size_hint();
    if usize::try_from(hint.lower()).map_or(true, |declared| declared > limit) {
        return Err(too_large(Some(hint.lower())));
    }
    // A declared length is within the limit: room for it once, not by doubling.
    let mut buffered = Vec::with_capacity(usize::try_from(hint.lower()).unwrap_or_default());
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| match BodyRefusal::find(&err) {
            Some(refusal) => refusal.problem(),
            None => Problem::new(ProblemCode::InvalidJson, "the body could not be read"),
        })?;
        if let Ok(data) = frame.into_data() {
            if buffered.len() + data.len() > limit {
                return Err(too_large(None));
            }
            buffered.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buffered))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate's headers read a lookup each, as before [`GateFacts::read`].
    fn by_lookups(headers: &HeaderMap) -> (String, Option<String>, Option<String>) {
        let request = GateRequest {
            authorization: header_str(headers, &header::AUTHORIZATION),
            x_api_key: header_str(headers, &X_API_KEY),
            has_cookie: headers.contains_key(header::COOKIE),
            sec_fetch_mode: header_str(headers, &SEC_FETCH_MODE),
            sec_fetch_dest: header_str(headers, &SEC_FETCH_DEST),
        };
        let repeated = [&header::AUTHORIZATION, &X_API_KEY, &HARNESS]
            .into_iter()
            .find(|name| headers.get_all(*name).iter().nth(1).is_some())
            .map(|name| format!("the {name} header is sent more than once; send it once"));
        let harness = header_str(headers, &HARNESS).map(str::to_owned);
        (format!("{request:?}"), harness, repeated)
    }

    fn one_pass(headers: &HeaderMap) -> (String, Option<String>, Option<String>) {
        let read = GateRead::of(headers);
        let repeated = read.repeated().err().map(|problem| problem.detail);
        // The extractor reads the same.
        let facts = GateFacts(headers.clone());
        assert_eq!(
            format!("{:?}", facts.read().request),
            format!("{:?}", read.request)
        );
        let harness = read.harness.map(str::to_owned);
        (format!("{:?}", read.request), harness, repeated)
    }

    const NAMES: [&str; 8] = [
        "authorization",
        "x-api-key",
        "x-herma-harness",
        "cookie",
        "sec-fetch-mode",
        "sec-fetch-dest",
        "content-type",
        "x-other",
    ];

    fn value(index: u8) -> HeaderValue {
        match index % 4 {
            0 => HeaderValue::from_static("Bearer hmk_a"),
            1 => HeaderValue::from_static("claude-code"),
            2 => HeaderValue::from_bytes(b"caf\xe9").expect("a header value"),
            _ => HeaderValue::from_static(""),
        }
    }

    #[test]
    fn one_pass_reads_what_a_lookup_each_read() {
        let mut headers = HeaderMap::new();
        assert_eq!(one_pass(&headers), by_lookups(&headers));
        for (index, name) in NAMES.iter().enumerate() {
            headers.append(*name, value(index as u8));
            assert_eq!(one_pass(&headers), by_lookups(&headers), "{headers:?}");
        }
        for name in NAMES {
            let mut twice = headers.clone();
            twice.append(name, value(2));
            assert_eq!(one_pass(&twice), by_lookups(&twice), "{twice:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn one_pass_reads_what_a_lookup_each_reads_in_any_headers(
            sent in proptest::collection::vec((0..NAMES.len(), 0u8..4), 0..12),
        ) {
            let mut headers = HeaderMap::new();
            for (name, index) in sent {
                headers.append(NAMES[name], value(index));
            }
            proptest::prop_assert_eq!(one_pass(&headers), by_lookups(&headers));
        }
    }
}
