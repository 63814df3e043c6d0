//! The OpenAPI description: generated from the handlers' annotations, so it covers every route
//! by construction (every route is registered through `OpenApiRouter::routes`), then completed
//! by [`complete`] with what every route shares (the gate's, the body reader's and the
//! connection's refusals) so that each status a route can answer is documented on it.

use herma_core::ProblemCode;
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Herma",
        description = "Context-shimming middleware between coding harnesses and model APIs. \
            Herma's own API speaks JSON; errors are RFC 9457 `application/problem+json` with a stable `code`.",
    ),
    modifiers(&SecuritySchemes),
    components(schemas(ProblemBody, herma_core::problem::FieldError, herma_core::problem::ProblemCode)),
    tags(
        (name = "provisions", description = "Your rules: triggers and actions"),
        (name = "context", description = "Your context entries: nouns, verbs and details"),
        (name = "proxy", description = "Model traffic: the three wire protocols, and dry runs"),
                (name = "receipts", description = "What Herma did with a request"),
        (name = "insights", description = "Entity memory, rule outcomes, insights and candidate provisions"),


        (name = "admin", description = "Keys (bootstrap token or admin key)"),
                (name = "system", description = "Health, identity, this document"),
        (name = "public", description = "No key needed: the preview, discovery documents and MCP"),
        (name = "pages", description = "HTML pages for people: landing, playground, docs"),


    )
)]
pub struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("hmk_<key_id>_<secret>")
                    .description(Some(
                        "A Herma key, or the bootstrap admin token on /v1/admin routes",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key"))),
        );
    }
}

/// An RFC 9457 problem as Herma sends it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[allow(dead_code)] // documentation only: problems are rendered by `ApiError`
pub struct ProblemBody {
    /// A stable URI naming the problem type.
    #[schema(example = "https://herma.dev/problems/version_conflict")]
    pub r#type: String,
    #[schema(example = "The record changed since the version you read")]
    pub title: String,
    #[schema(example = 409)]
    pub status: u16,
    #[schema(example = "expected_version 1 is stale; the current version is 2")]
    pub detail: String,
    pub code: herma_core::problem::ProblemCode,
    /// Field-level errors, each with a JSON pointer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<herma_core::problem::FieldError>,
    /// On `version_conflict`: the version the record has now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_version: Option<u64>,
}

/// The harness attestation configure operations need (H02).
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct HarnessHeader {
    /// Must equal the harness the key was issued for, e.g. `claude-code`.
    #[param(rename = "X-Herma-Harness", example = "claude-code")]
    pub harness: Option<String>,
}

const PROBLEM_JSON: &str = "application/problem+json";
const PROBLEM_REF: &str = "#/components/schemas/ProblemBody";

/// The routes that speak a model provider's wire protocol: their own errors come in that
/// protocol's shape (`application/json`), and what the upstream answers is relayed as it is.
const PROXIED: [&str; 5] = [
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/models",
];

/// A record version in a query (`expected_version`) is at most `i64::MAX`, what the stores keep;
/// written here so the document is the same on every target.
fn bound_versions(operation: &mut Value) {
    let Some(parameters) = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for parameter in parameters {
        if parameter["name"] == "expected_version"
            && let Some(schema) = parameter.get_mut("schema").and_then(Value::as_object_mut)
        {
            schema.insert("maximum".into(), Value::from(i64::MAX));
        }
    }
}

/// Completes the generated document with what the handlers' annotations leave implicit:
/// - problems are `application/problem+json`, and their `type` is one of the documented URIs;
/// - every operation lists the refusals it shares with others: the gate's (a key is needed,
///   credentials sent once), the body reader's (strict JSON, its size and media type), the
///   query and path readers', and the connection's (a head or body too slow, the server busy);
/// - a stored record (`allOf` of a closed spec and the stored fields) is written out as one
///   closed object, since `additionalProperties: false` in a part of `allOf` refuses the
///   other parts' members;
/// - a record version in a query is bounded by `i64::MAX` ([`bound_versions`]).
pub fn complete(doc: &mut Value) {
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for operation in item.values_mut() {
                bound_versions(operation);
                if PROXIED.contains(&path.as_str()) {
                    complete_proxied(operation);
                } else {
                    complete_operation(operation);
                }
            }
        }
    }
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        let types: Vec<Value> = ProblemCode::ALL
            .iter()
            .map(|code| Value::String(code.type_uri()))
            .collect();
        schemas.insert("ProtocolError".into(), protocol_error_schema());
        if let Some(problem_type) = schemas
            .get_mut("ProblemBody")
            .and_then(|s| s.pointer_mut("/properties/type"))
            .and_then(Value::as_object_mut)
        {
            problem_type.insert("enum".into(), Value::Array(types));
        }
    }
    flatten_closed_all_of(doc);
}

fn problem_content() -> Value {
    json!({ PROBLEM_JSON: {"schema": {"$ref": PROBLEM_REF}} })
}

/// The statuses an operation shares with others, each with the problem codes behind it.
fn shared_refusals(operation: &Value) -> Vec<(&'static str, &'static str)> {
    let has = |location: &str| {
        operation["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == location))
    };
    let keyed = operation.get("security").is_some();
    let body = operation.get("requestBody").is_some();
    let mut refusals = Vec::new();
    if keyed {
        refusals.push(("400", "`malformed_request`: `Authorization`, `x-api-key` or `X-Herma-Harness` sent more than once"));
        refusals.push((
            "401",
            "`unauthorized`: no valid Herma key (or bootstrap token) was presented",
        ));
        refusals.push(("403", "`insufficient_scope`, `harness_required` or `admin_required`: the key may not do this; `browser_navigation_refused`: a browser navigation or a cookie-only request"));
    }
    if body {
        refusals.push(("400", "`invalid_json`: the body is not strict JSON (malformed, duplicate keys, nested deeper than 32)"));
        refusals.push((
            "413",
            "`payload_too_large`: the body is over `HERMA_MAX_BODY_BYTES`",
        ));
        refusals.push((
            "415",
            "`unsupported_media_type`: the body is not sent as JSON",
        ));
        refusals.push(("422", "`validation_failed`: the body does not match its schema or has invalid values (`errors[].pointer` names each field)"));
    }
    if has("path") {
        refusals.push((
            "400",
            "`invalid_path`: the path's id is not UTF-8 once percent-decoded",
        ));
    }
    if has("query") {
        refusals.push((
            "422",
            "`validation_failed`: an unknown query parameter or an invalid value",
        ));
    }
    refusals.push((
        "403",
        "`edge_auth_required`: `HERMA_EDGE_SECRET` is set and `x-edge-auth` does not match",
    ));
    refusals.push((
        "408",
        "`request_timeout`: the request head or body did not arrive in time",
    ));
    refusals.push(("503", "`server_busy`: the connection cap or the request-body memory budget is reached; retry after `Retry-After`"));
    refusals
}

fn complete_operation(operation: &mut Value) {
    let refusals = shared_refusals(operation);
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    // Problems the annotations describe are sent as problem+json.
    for response in responses.values_mut() {
        let Some(content) = response.get_mut("content").and_then(Value::as_object_mut) else {
            continue;
        };
        let is_problem = content
            .get("application/json")
            .is_some_and(|media| media.pointer("/schema/$ref") == Some(&Value::from(PROBLEM_REF)));
        if is_problem && let Some(media) = content.shift_remove("application/json") {
            content.insert(PROBLEM_JSON.into(), media);
        }
    }
    for (status, meaning) in refusals {
        match responses.get_mut(status) {
            Some(response) => {
                let Some(response) = response.as_object_mut() else {
                    continue;
                };
                // A JSON-RPC or protocol-shaped answer of the same status stays documented
                // beside the problem.
                let content = response
                    .entry("content")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(content) = content.as_object_mut() {
                    content
                        .entry(PROBLEM_JSON)
                        .or_insert_with(|| json!({"schema": {"$ref": PROBLEM_REF}}));
                }
                if let Some(description) = response.get_mut("description") {
                    let text = description.as_str().unwrap_or_default();
                    if !text.contains(meaning) {
                        let joined = if text.is_empty() {
                            meaning.to_owned()
                        } else {
                            format!("{text}; {meaning}")
                        };
                        *description = Value::String(joined);
                    }
                }
            }
            None => {
                responses.insert(
                    status.into(),
                    json!({"description": meaning, "content": problem_content()}),
                );
            }
        }
    }
}

/// The proxied routes: Herma's own refusals in the protocol's error shape, anything else the
/// upstream's answer.
fn complete_proxied(operation: &mut Value) {
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let shape =
        json!({"application/json": {"schema": {"$ref": "#/components/schemas/ProtocolError"}}});
    for (status, meaning) in [
        (
            "400",
            "`upstream_required` (no upstream is named or configured), `malformed_request` (a credential or upstream header sent twice with different values) or a body Herma cannot read",
        ),
        ("401", "`unauthorized`: no valid Herma key"),
        (
            "403",
            "`insufficient_scope`, `contributor_tier_refused`, `upstream_host_refused`, `browser_navigation_refused` or `edge_auth_required`",
        ),
        (
            "408",
            "`request_timeout`: the request head or body did not arrive in time",
        ),
        (
            "413",
            "`payload_too_large`: the body is over `HERMA_PROXY_MAX_BODY_BYTES`",
        ),
        (
            "415",
            "`unsupported_media_type`: a body not sent as `application/json`",
        ),
        (
            "502",
            "`upstream_unreachable` or `upstream_redirect_refused`",
        ),
        (
            "503",
            "`server_busy`: the connection cap or the request-body memory budget is reached; retry after `Retry-After`",
        ),
        (
            "504",
            "`upstream_timeout`: the upstream sent no response head in time",
        ),
    ] {
        let response = responses
            .entry(status)
            .or_insert_with(|| json!({"description": ""}));
        if let Some(response) = response.as_object_mut() {
            let description = response
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let description = if description.is_empty() {
                format!("Herma's refusal in the protocol's error shape: {meaning}")
            } else {
                format!("{description}; in the protocol's error shape: {meaning}")
            };
            response.insert("description".into(), Value::String(description));
            response.insert("content".into(), shape.clone());
        }
    }
    responses.entry("default").or_insert_with(|| {
        json!({"description": "Any other status is the upstream's own answer, relayed as it is"})
    });
}

/// `allOf: [{$ref: Spec}, {stored fields}]` where `Spec` is closed becomes one closed object
/// with the members of both, wherever it appears (a component or inlined, as in a listing).
fn flatten_closed_all_of(doc: &mut Value) {
    let schemas = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    flatten_within(doc, &schemas);
}

fn flatten_within(value: &mut Value, schemas: &Map<String, Value>) {
    if let Some(flat) = flattened(value, schemas) {
        *value = flat;
    }
    match value {
        Value::Object(members) => members
            .values_mut()
            .for_each(|v| flatten_within(v, schemas)),
        Value::Array(items) => items.iter_mut().for_each(|v| flatten_within(v, schemas)),
        _ => {}
    }
}

fn flattened(value: &Value, schemas: &Map<String, Value>) -> Option<Value> {
    let parts = value.get("allOf")?.as_array()?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut closed = false;
    for part in parts {
        let part = match part["$ref"].as_str() {
            Some(reference) => schemas.get(reference.strip_prefix("#/components/schemas/")?)?,
            None => part,
        };
        // Only plain objects are merged; anything else is left as generated.
        if part.get("allOf").is_some() || part["type"] != "object" {
            return None;
        }
        closed |= part["additionalProperties"] == Value::Bool(false);
        properties.extend(part["properties"].as_object().cloned().unwrap_or_default());
        required.extend(part["required"].as_array().cloned().unwrap_or_default());
    }
    if !closed {
        return None;
    }
    let mut flat = Map::new();
    flat.insert("type".into(), "object".into());
    if let Some(description) = value.get("description") {
        flat.insert("description".into(), description.clone());
    }
    flat.insert("required".into(), Value::Array(required));
    flat.insert("properties".into(), Value::Object(properties));
    flat.insert("additionalProperties".into(), Value::Bool(false));
    Some(Value::Object(flat))
}

/// The error shape of the proxied routes: OpenAI's `{"error": {…}}`, Anthropic's
/// `{"type": "error", "error": {…}}`, both with Herma's `code`.
fn protocol_error_schema() -> Value {
    json!({
        "type": "object",
        "description": "An error in the wire protocol's own shape (OpenAI or Anthropic), carrying Herma's problem `code`.",
        "required": ["error"],
        "properties": {
            "type": {"type": "string", "enum": ["error"]},
            "error": {
                "type": "object",
                "required": ["message", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string", "example": "invalid_request_error"},
                    "code": {"$ref": "#/components/schemas/ProblemCode"},
                },
            },
        },
    })
}
