//! Discovery: what a client or an agent can learn about this Herma without a key — the public
//! preview (built-in rules only, nothing stored, nothing sent), `/connect.json`, `/llms.txt`,
//! `/llms-full.txt` and the agent card.

use herma_core::wire::Protocol;
use herma_core::{CallerScope, Problem};
use serde_json::{Value, json};

use crate::App;
use crate::dry_run::{DryRunReport, DryRunRequest};

/// The Anthropic API versions Herma's Messages route is known to carry.
pub const ANTHROPIC_VERSIONS: [&str; 2] = ["2023-06-01", "2026-10-21"];

const SUMMARY: &str = "Herma is context-shimming middleware between coding harnesses (Claude Code, Codex, opencode, any OpenAI- or Anthropic-compatible client) and model APIs. Each caller's rules decide, per request, whether to answer directly or to add the caller's own context entries before forwarding.";

impl App {
    /// The public preview (H14): the built-in starter rules only, with the dry run's report;
    /// `persisted` is always false and no configured provider is ever contacted.
    pub async fn preview(&self, request: DryRunRequest) -> Result<DryRunReport, Problem> {
        self.dry_run(&CallerScope::system_builtin(), request).await
    }

    /// `/connect.json`: routes, protocol versions and enabled features.
    pub fn connect_document(&self, base: &str) -> Value {
        json!({
            "name": "Herma",
            "version": env!("CARGO_PKG_VERSION"),
            "base_url": base,
            "authentication": {
                "schemes": ["Authorization: Bearer hmk_…", "x-api-key: hmk_…"],
                "configure_header": "X-Herma-Harness",
                "scopes": ["route", "configure", "admin"]
            },
            "proxy": Protocol::ALL.iter().map(|p| json!({"protocol": p.as_str(), "method": "POST", "path": p.path()})).collect::<Vec<_>>(),
            "passthrough": [
                {"method": "POST", "path": "/v1/messages/count_tokens"},
                {"method": "GET", "path": "/v1/models"}
            ],
            "upstream_headers": ["X-Upstream-Base-Url", "X-Herma-Upstream-Url", "X-Upstream-Api-Key"],
            "conversation_headers": ["X-Herma-Conversation-Id", "X-Herma-Project"],
            "protocol_versions": {
                "anthropic": ANTHROPIC_VERSIONS,
                "openai": ["chat_completions", "responses"],
                "mcp": crate::mcp::supported_versions()
            },
            "api": {
                "openapi": "/openapi.json",
                "provisions": "/v1/provisions",
                "context": "/v1/context",
                "dry_run": "/v1/dry-run",
                "receipts": "/v1/receipts/{id}",
                "memory": "/v1/memory",
                "outcomes": "/v1/outcomes",
                "insights": "/v1/insights",
                "conversation_turn": "/v1/conversations/turn",
                "conversation": "/v1/conversations/{id}",
                "conversation_schema": "/api/conversation-schema"
            },
            "public": {
                "preview": "/api/preview",
                "mcp": "/mcp",
                "llms": "/llms.txt",
                "llms_full": "/llms-full.txt",
                "agent_card": "/.well-known/agent-card.json",
                "health": "/healthz"
            },
            "features": {
                "preview": true,
                "memory": self.memory.is_some(),
                "semantic_triggers": self.tiers.embedder.is_some(),
                "micromodel_triggers": self.tiers.classifier.is_some(),
                "conversations": self.settings.conversation.enabled && self.governed.is_some()
            }
        })
    }

    /// `/llms.txt` (llmstxt.org): what Herma is and where to read more, in Markdown.
    pub fn llms_txt(&self, base: &str) -> String {
        format!(
            "# Herma\n\n> {SUMMARY}\n\nPoint a harness's base URL at {base} and use a Herma key (`hmk_…`) as its API key; Herma \
             speaks OpenAI Chat Completions, OpenAI Responses and Anthropic Messages, streaming included.\n\n\
             ## Docs\n\n\
             - [Full text for models]({base}/llms-full.txt): everything below in one file\n\
             - [OpenAPI]({base}/openapi.json): every route of Herma's own API\n\
             - [Connect]({base}/connect.json): routes, protocol versions and enabled features\n\
             - [Docs page]({base}/docs): the same, for people\n\n\
             ## Try it\n\n\
             - [Preview]({base}/api/preview): `POST` a request body to see what the built-in rules would do (no key needed)\n\
             - [MCP]({base}/mcp): stateless JSON-RPC; tools `herma_preview`, `herma_discovery`, and with a key `herma_dry_run` and read-only views\n\n\
             ## Optional\n\n\
             - [Agent card]({base}/.well-known/agent-card.json)\n"
        )
    }

    /// `/llms-full.txt`: the summary followed by the proxy and memory documentation.
    pub fn llms_full_txt(&self, base: &str) -> String {
        format!(
            "{}\n\n---\n\n{}\n\n---\n\n{}\n",
            self.llms_txt(base),
            include_str!("../../../docs/proxy.md"),
            include_str!("../../../docs/memory.md")
        )
    }

    /// `/.well-known/agent-card.json`: Herma described for agents that discover services by
    /// card. Its programmatic interface for agents is MCP at `/mcp`.
    pub fn agent_card(&self, base: &str) -> Value {
        json!({
            "name": "Herma",
            "description": SUMMARY,
            "version": env!("CARGO_PKG_VERSION"),
            "url": format!("{base}/mcp"),
            "documentationUrl": format!("{base}/docs"),
            "iconUrl": format!("{base}/favicon.svg"),
            "provider": {"organization": "Herma", "url": base},
            "supportedInterfaces": [{"url": format!("{base}/mcp"), "protocolBinding": "MCP", "protocolVersion": crate::mcp::STATELESS_VERSION}],
            "capabilities": {"streaming": false, "pushNotifications": false},
            "defaultInputModes": ["application/json"],
            "defaultOutputModes": ["application/json"],
            "securitySchemes": {"herma_key": {"type": "http", "scheme": "bearer", "bearerFormat": "hmk_<key_id>_<secret>"}},
            "skills": [
                {"id": "preview", "name": "Preview the built-in rules", "description": "Show what Herma's built-in rules would do with a model request, without storing or sending anything.", "tags": ["preview", "rules"], "examples": ["/herma help"]},
                {"id": "dry_run", "name": "Dry-run a request against your rules", "description": "With a Herma key: the matches, the exact context shim or direct answer for a request.", "tags": ["rules", "context"]},
                {"id": "discovery", "name": "Discover Herma", "description": "Routes, protocol versions and enabled features of this Herma.", "tags": ["discovery"]}
            ]
        })
    }
}
