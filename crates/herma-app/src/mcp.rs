//! MCP (H14): a stateless JSON-RPC 2.0 endpoint. It speaks the current stateless revision
//! (2026-07-28: `server/discover`, the version in every request's `_meta` and header) and the
//! handshake revisions (2025-11-25 back to 2024-11-05: `initialize` with version negotiation,
//! then `MCP-Protocol-Version` on every request). Every request gets one JSON answer; nothing is
//! kept between requests.
//!
//! Public tools are deterministic and need no key (the preview, discovery). With a Herma key the
//! caller also gets their own dry run and read-only views of their provisions, context entries
//! and insights. Tool failures are results with `isError: true`; protocol mistakes are JSON-RPC
//! errors.

use herma_core::gate::{GateRequest, Principal};
use herma_core::model::{ContextEntrySpec, ProvisionSpec};
use herma_core::{CallerScope, Problem, ProblemCode, json};
use herma_store::Page;
use serde_json::{Map, Value, json};

use crate::App;
use crate::dry_run::DryRunRequest;
use crate::records::Partition;

/// The stateless revision.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// The handshake revisions, newest first.
pub const HANDSHAKE_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// JSON-RPC and MCP error codes.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const UNAUTHORIZED: i64 = -32001;
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// What the transport sends back.
#[derive(Debug, PartialEq)]
pub enum McpReply {
    /// A JSON-RPC response (result or error) to send as JSON.
    Message(Value),
    /// A notification was received: accepted, nothing to say.
    Accepted,
}

impl McpReply {
    /// The JSON-RPC error code of an error response, if it is one.
    pub fn error_code(&self) -> Option<i64> {
        match self {
            McpReply::Message(v) => v
                .get("error")
                .and_then(|e| e.get("code"))
                .and_then(Value::as_i64),
            McpReply::Accepted => None,
        }
    }
}

/// What the transport knows about the request besides its body.
#[derive(Debug, Default)]
pub struct McpRequestFacts<'a> {
    pub gate: GateRequest<'a>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// The client address (for the preview's rate limit).
    pub address: &'a str,
    /// The URL clients reach Herma at.
    pub base_url: &'a str,
}

fn error(id: &Value, code: i64, message: impl Into<String>, data: Option<Value>) -> McpReply {
    let mut err = json!({"code": code, "message": message.into()});
    if let Some(data) = data {
        err["data"] = data;
    }
    McpReply::Message(json!({"jsonrpc": "2.0", "id": id, "error": err}))
}

fn result(id: &Value, mut value: Value) -> McpReply {
    // The stateless revision requires `resultType`; handshake-era clients ignore it.
    if let Value::Object(map) = &mut value {
        map.insert("resultType".into(), json!("complete"));
    }
    McpReply::Message(json!({"jsonrpc": "2.0", "id": id, "result": value}))
}

/// Results the stateless revision lets clients cache: Herma's answers are per caller and may
/// change at any time, so they are private and not reusable.
fn uncached(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        map.insert("ttlMs".into(), json!(0));
        map.insert("cacheScope".into(), json!("private"));
    }
    value
}

fn supported(version: &str) -> bool {
    version == STATELESS_VERSION || HANDSHAKE_VERSIONS.contains(&version)
}

/// Every revision `POST /mcp` speaks, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    std::iter::once(STATELESS_VERSION)
        .chain(HANDSHAKE_VERSIONS)
        .collect()
}

fn text_content(value: &Value) -> Value {
    json!([{"type": "text", "text": serde_json::to_string_pretty(value).unwrap_or_default()}])
}

fn tool_failure(problem: &Problem) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("{}: {}", problem.code, problem.detail)}],
        "structuredContent": problem.to_body(0),
        "isError": true
    })
}

fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn request_schema() -> Value {
    object_schema(
        json!({
            "protocol": {"type": "string", "enum": ["chat_completions", "responses", "messages"], "description": "The route the body is for"},
            "body": {"type": "object", "description": "The request body exactly as a harness would send it"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Conversation and session headers"}
        }),
        &["protocol", "body"],
    )
}

fn report_schema() -> Value {
    json!({
        "type": "object",
        "required": ["persisted", "upstream_contacted", "decision", "tiers", "envelope"],
        "properties": {
            "persisted": {"type": "boolean", "const": false},
            "upstream_contacted": {"type": "boolean", "const": false},
            "decision": {"type": "string", "enum": ["forward", "shim_context", "respond_directly"]},
            "tiers": {"type": "object"},
            "envelope": {"type": "object"},
            "shim": {"type": "object"},
            "provision_id": {"type": "string"},
            "direct_response": {}
        }
    })
}

fn list_schema() -> Value {
    json!({"type": "object", "required": ["items"], "properties": {"items": {"type": "array", "items": {"type": "object"}}}})
}

struct Tool {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    input: Value,
    output: Value,
    needs_key: bool,
}

fn tools() -> Vec<Tool> {
    vec![
        Tool {
            name: "herma_preview",
            title: "Preview the built-in rules",
            description: "What Herma's built-in starter rules would do with a model request: the matches, the exact context shim or direct answer. Nothing is stored or sent.",
            input: request_schema(),
            output: report_schema(),
            needs_key: false,
        },
        Tool {
            name: "herma_discovery",
            title: "Discover this Herma",
            description: "Routes, protocol versions and enabled features of this Herma.",
            input: object_schema(json!({}), &[]),
            output: json!({"type": "object", "required": ["name", "version", "proxy", "features"], "properties": {"name": {"type": "string"}, "version": {"type": "string"}, "proxy": {"type": "array"}, "features": {"type": "object"}}}),
            needs_key: false,
        },
        Tool {
            name: "herma_dry_run",
            title: "Dry-run a request against your rules",
            description: "Your own rules and the built-ins against a model request: the matches per tier, the exact shim or direct answer. Nothing is stored, claimed or sent.",
            input: request_schema(),
            output: report_schema(),
            needs_key: true,
        },
        Tool {
            name: "herma_list_provisions",
            title: "List your provisions",
            description: "Your provisions (or, with builtin: true, the built-in starters), read-only.",
            input: object_schema(
                json!({"builtin": {"type": "boolean", "description": "List the built-in starters instead"}}),
                &[],
            ),
            output: list_schema(),
            needs_key: true,
        },
        Tool {
            name: "herma_list_context",
            title: "List your context entries",
            description: "Your context entries (or the built-in ones), read-only.",
            input: object_schema(
                json!({"builtin": {"type": "boolean", "description": "List the built-in entries instead"}}),
                &[],
            ),
            output: list_schema(),
            needs_key: true,
        },
        Tool {
            name: "herma_insights",
            title: "Your insights",
            description: "Fire counts and retry-error rates of your rules, rules that never matched, and candidate provisions.",
            input: object_schema(json!({}), &[]),
            output: json!({"type": "object", "required": ["rules", "never_matched", "candidate_provisions"], "properties": {"rules": {"type": "array"}, "never_matched": {"type": "array"}, "candidate_provisions": {"type": "array"}}}),
            needs_key: true,
        },
    ]
}

struct Resource {
    uri: &'static str,
    name: &'static str,
    description: &'static str,
    mime: &'static str,
    needs_key: bool,
}

const RESOURCES: [Resource; 5] = [
    Resource {
        uri: "herma://docs/llms.txt",
        name: "llms.txt",
        description: "What Herma is, for language models",
        mime: "text/markdown",
        needs_key: false,
    },
    Resource {
        uri: "herma://connect.json",
        name: "connect.json",
        description: "Routes, protocol versions and features",
        mime: "application/json",
        needs_key: false,
    },
    Resource {
        uri: "herma://provisions",
        name: "provisions",
        description: "Your provisions",
        mime: "application/json",
        needs_key: true,
    },
    Resource {
        uri: "herma://context",
        name: "context",
        description: "Your context entries",
        mime: "application/json",
        needs_key: true,
    },
    Resource {
        uri: "herma://insights",
        name: "insights",
        description: "Your insights",
        mime: "application/json",
        needs_key: true,
    },
];

impl App {
    /// Handles one MCP message.
    pub async fn mcp(&self, body: &[u8], facts: &McpRequestFacts<'_>) -> McpReply {
        let null = Value::Null;
        let message = match json::parse_strict(body) {
            Ok(v) => v,
            Err(p) if p.code == ProblemCode::InvalidJson => {
                return error(
                    &null,
                    codes::PARSE_ERROR,
                    format!("parse error: {}", p.detail),
                    None,
                );
            }
            Err(p) => return error(&null, codes::PARSE_ERROR, p.detail, None),
        };
        let Value::Object(message) = message else {
            return error(
                &null,
                codes::INVALID_REQUEST,
                "a request must be one JSON-RPC object (batches are not accepted)",
                None,
            );
        };
        let id = message.get("id").cloned();
        let id_ok = matches!(&id, None | Some(Value::String(_)) | Some(Value::Number(_)));
        let method = message.get("method").and_then(Value::as_str);
        let (Some(method), true, true) =
            (method, message.get("jsonrpc") == Some(&json!("2.0")), id_ok)
        else {
            return error(
                id.as_ref().filter(|_| id_ok).unwrap_or(&null),
                codes::INVALID_REQUEST,
                "not a JSON-RPC 2.0 request: `jsonrpc` must be \"2.0\", `method` a string, `id` a string or number",
                None,
            );
        };
        let params = match message.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => {
                return error(
                    id.as_ref().unwrap_or(&null),
                    codes::INVALID_PARAMS,
                    "`params` must be an object",
                    None,
                );
            }
        };
        let Some(id) = id else {
            // A notification (`notifications/initialized`, `notifications/cancelled`, …).
            return McpReply::Accepted;
        };

        // The protocol version: in `_meta` (stateless revision) and/or the header.
        let meta_version = params
            .get("_meta")
            .and_then(|m| m.get(META_VERSION))
            .and_then(Value::as_str);
        if let (Some(meta), Some(header)) = (meta_version, facts.protocol_version)
            && meta != header
        {
            return error(
                &id,
                codes::HEADER_MISMATCH,
                format!(
                    "MCP-Protocol-Version `{header}` does not match the request's protocol version `{meta}`"
                ),
                None,
            );
        }
        if method != "initialize"
            && let Some(version) = meta_version.or(facts.protocol_version)
            && !supported(version)
        {
            return error(
                &id,
                codes::UNSUPPORTED_PROTOCOL_VERSION,
                format!("protocol version `{version}` is not supported"),
                Some(json!({"supported": supported_versions(), "requested": version})),
            );
        }

        // Who is asking: no key is fine (public tools); a key must be valid.
        let principal = if facts.gate.authorization.is_some() || facts.gate.x_api_key.is_some() {
            match self.gate.authenticate(&facts.gate).await {
                Ok(p) => Some(p),
                Err(p) => {
                    return error(
                        &id,
                        codes::UNAUTHORIZED,
                        p.detail,
                        Some(json!({"code": p.code.as_str()})),
                    );
                }
            }
        } else {
            None
        };
        let caller = principal.as_ref().and_then(|p| match p {
            Principal::Key(k) => Some(k.caller_scope.clone()),
            Principal::Bootstrap => None,
        });

        match method {
            "initialize" => {
                let requested = params.get("protocolVersion").and_then(Value::as_str);
                let version = requested
                    .filter(|v| HANDSHAKE_VERSIONS.contains(v))
                    .unwrap_or(HANDSHAKE_VERSIONS[0]);
                result(
                    &id,
                    json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": false}, "resources": {"listChanged": false, "subscribe": false}},
                        "serverInfo": {"name": "herma", "title": "Herma", "version": env!("CARGO_PKG_VERSION")},
                        "instructions": "Herma's MCP tools: preview the built-in rules and discover this Herma without a key; with a Herma key, dry-run requests against your rules and read your provisions, context entries and insights."
                    }),
                )
            }
            "server/discover" => result(
                &id,
                uncached(json!({
                    "supportedVersions": supported_versions(),
                    "capabilities": {"tools": {}, "resources": {}},
                    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "herma", "version": env!("CARGO_PKG_VERSION")}}
                })),
            ),
            "ping" => result(&id, json!({})),
            "tools/list" => {
                let listed: Vec<Value> = tools()
                    .into_iter()
                    .filter(|t| !t.needs_key || caller.is_some())
                    .map(|t| json!({"name": t.name, "title": t.title, "description": t.description, "inputSchema": t.input, "outputSchema": t.output, "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}}))
                    .collect();
                result(&id, uncached(json!({"tools": listed})))
            }
            "tools/call" => {
                self.mcp_call(&id, &params, caller.as_ref(), principal.as_ref(), facts)
                    .await
            }
            "resources/list" => {
                let listed: Vec<Value> = RESOURCES
                    .iter()
                    .filter(|r| !r.needs_key || caller.is_some())
                    .map(|r| json!({"uri": r.uri, "name": r.name, "description": r.description, "mimeType": r.mime}))
                    .collect();
                result(&id, uncached(json!({"resources": listed})))
            }
            "resources/read" => {
                let Some(uri) = params.get("uri").and_then(Value::as_str) else {
                    return error(
                        &id,
                        codes::INVALID_PARAMS,
                        "resources/read needs `uri`",
                        None,
                    );
                };
                let Some(resource) = RESOURCES
                    .iter()
                    .find(|r| r.uri == uri && (!r.needs_key || caller.is_some()))
                else {
                    return error(
                        &id,
                        codes::RESOURCE_NOT_FOUND,
                        format!("no resource `{uri}`"),
                        Some(json!({"uri": uri})),
                    );
                };
                let text = match self
                    .mcp_resource_text(resource.uri, principal.as_ref(), facts.base_url)
                    .await
                {
                    Ok(text) => text,
                    Err(p) => return error(&id, codes::INTERNAL_ERROR, p.detail, None),
                };
                result(
                    &id,
                    uncached(
                        json!({"contents": [{"uri": resource.uri, "mimeType": resource.mime, "text": text}]}),
                    ),
                )
            }
            other => error(
                &id,
                codes::METHOD_NOT_FOUND,
                format!("method `{other}` is not supported"),
                None,
            ),
        }
    }

    async fn mcp_call(
        &self,
        id: &Value,
        params: &Map<String, Value>,
        caller: Option<&CallerScope>,
        principal: Option<&Principal>,
        facts: &McpRequestFacts<'_>,
    ) -> McpReply {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return error(id, codes::INVALID_PARAMS, "tools/call needs `name`", None);
        };
        let Some(tool) = tools().into_iter().find(|t| t.name == name) else {
            return error(
                id,
                codes::INVALID_PARAMS,
                format!("unknown tool `{name}`"),
                None,
            );
        };
        let (Some(caller), Some(principal)) = (caller, principal) else {
            if tool.needs_key {
                return error(
                    id,
                    codes::UNAUTHORIZED,
                    format!("`{name}` needs a Herma key (Authorization: Bearer hmk_…)"),
                    None,
                );
            }
            return result(id, self.mcp_public_tool(name, params, facts).await);
        };
        let arguments = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let outcome: Result<Value, Problem> = match name {
            "herma_dry_run" => match json::decode::<DryRunRequest>(arguments) {
                Ok(request) => self.dry_run(caller, request).await.and_then(to_value),
                Err(p) => Err(p),
            },
            "herma_list_provisions" | "herma_list_context" => {
                let builtin = arguments
                    .get("builtin")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let partition = if builtin {
                    Partition::Builtin
                } else {
                    Partition::Own
                };
                if name == "herma_list_provisions" {
                    self.list_records::<ProvisionSpec>(principal, partition, &Page::all())
                        .await
                        .and_then(|items| to_value(json!({"items": items})))
                } else {
                    self.list_records::<ContextEntrySpec>(principal, partition, &Page::all())
                        .await
                        .and_then(|items| to_value(json!({"items": items})))
                }
            }
            "herma_insights" => self.insights(principal).await.and_then(to_value),
            _ => return result(id, self.mcp_public_tool(name, params, facts).await),
        };
        result(
            id,
            match outcome {
                Ok(value) => {
                    json!({"content": text_content(&value), "structuredContent": value, "isError": false})
                }
                Err(problem) => tool_failure(&problem),
            },
        )
    }

    async fn mcp_public_tool(
        &self,
        name: &str,
        params: &Map<String, Value>,
        facts: &McpRequestFacts<'_>,
    ) -> Value {
        let arguments = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let outcome: Result<Value, Problem> = match name {
            "herma_preview" => match self.preview_limit.check(facts.address) {
                Err(p) => Err(p),
                Ok(()) => match json::decode::<DryRunRequest>(arguments) {
                    Ok(request) => self.preview(request).await.and_then(to_value),
                    Err(p) => Err(p),
                },
            },
            _ => Ok(self.connect_document(facts.base_url)),
        };
        match outcome {
            Ok(value) => {
                json!({"content": text_content(&value), "structuredContent": value, "isError": false})
            }
            Err(problem) => tool_failure(&problem),
        }
    }

    async fn mcp_resource_text(
        &self,
        uri: &str,
        principal: Option<&Principal>,
        base: &str,
    ) -> Result<String, Problem> {
        let value = match (uri, principal) {
            ("herma://docs/llms.txt", _) => return Ok(self.llms_txt(base)),
            ("herma://connect.json", _) => self.connect_document(base),
            ("herma://provisions", Some(p)) => {
                json!({"items": self.list_records::<ProvisionSpec>(p, Partition::Own, &Page::all()).await?})
            }
            ("herma://context", Some(p)) => {
                json!({"items": self.list_records::<ContextEntrySpec>(p, Partition::Own, &Page::all()).await?})
            }
            ("herma://insights", Some(p)) => to_value(self.insights(p).await?)?,
            _ => return Err(Problem::not_found("resource", uri)),
        };
        Ok(serde_json::to_string_pretty(&value).unwrap_or_default())
    }
}

fn to_value(value: impl serde::Serialize) -> Result<Value, Problem> {
    serde_json::to_value(value).map_err(|e| Problem::new(ProblemCode::Internal, e.to_string()))
}
