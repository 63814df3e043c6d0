//! Herma's HTML pages: the landing page, the preview playground and the docs. Plain HTML built
//! here, one stylesheet and (for the playground only) one script, both served by Herma; no
//! external assets. Every page carries its own Content-Security-Policy.
//!
//! Architecture invariant: pages work without JavaScript. The playground's script only spares a
//! page load: without it, the form posts to `/preview` and the result is rendered here.

use herma_app::dry_run::DryRunReport;
use herma_core::settings::table::{LOG, LOG_FORMAT};
use serde_json::Value;

/// CSP of pages without scripts or forms.
pub const STATIC_CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// CSP of the playground: its own script, calls to this origin, its form posts here.
pub const PLAYGROUND_CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

pub const STYLESHEET: &str = include_str!("../assets/herma.css");
pub const PLAYGROUND_SCRIPT: &str = include_str!("../assets/playground.js");

/// Herma's mark, inline (the same drawing as `/favicon.svg`).
const LOGO: &str = r##"<svg viewBox="0 0 64 64" role="img" aria-label="Herma" class="logo"><title>Herma</title><rect width="64" height="64" rx="14" fill="#fca311" fill-opacity="0.12"/><path d="M18 14v36M46 14v36" stroke="#fca311" stroke-width="8" stroke-linecap="round"/><path d="M18 32h28" stroke="#e5e5e5" stroke-width="6" stroke-linecap="round"/><circle cx="32" cy="32" r="5" fill="#fca311"/></svg>"##;

/// Text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Page {
    Home,
    Playground,
    Docs,
}

fn layout(page: Page, title: &str, description: &str, body: &str) -> String {
    let current = |p: Page| {
        if p == page {
            r#" aria-current="page""#
        } else {
            ""
        }
    };
    let script = if page == Page::Playground {
        r#"<script src="/assets/playground.js" defer></script>"#
    } else {
        ""
    };
    format!(
        r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<meta name="description" content="{description}">
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/assets/herma.css">
{script}
</head>
<body>
<a class="skip" href="#content">Skip to content</a>
<header class="bar"><div class="inner">
<a class="brand" href="/">{LOGO}<span>Herma</span></a>
<nav aria-label="Main">
<a href="/"{home}>Overview</a>
<a href="/preview"{play}>Playground</a>
<a href="/docs"{docs}>Docs</a>
<a href="/openapi.json">API</a>
</nav>
</div></header>
<main id="content">
{body}
</main>
<footer><div class="inner">
<span>Herma {version} · context-shimming middleware for coding harnesses</span>
<span><a href="/llms.txt">llms.txt</a> · <a href="/connect.json">connect.json</a> · <a href="/.well-known/agent-card.json">agent card</a> · <a href="/healthz">health</a></span>
</div></footer>
</body>
</html>
"##,
        title = escape(title),
        description = escape(description),
        home = current(Page::Home),
        play = current(Page::Playground),
        docs = current(Page::Docs),
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// The flow drawn on the landing page.
const DIAGRAM: &str = r##"<svg class="diagram" viewBox="0 0 420 300" role="img" aria-labelledby="flow-title flow-desc">
<title id="flow-title">How a request flows through Herma</title>
<desc id="flow-desc">A coding harness sends a request to Herma. Herma either answers directly or adds context and forwards it to the model API.</desc>
<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="#fca311"/></marker></defs>
<rect x="10" y="115" width="110" height="70" rx="12" fill="#22345e" stroke="#3b5184"/>
<text x="65" y="146" text-anchor="middle" fill="#fff" font-size="14" font-weight="600">Harness</text>
<text x="65" y="166" text-anchor="middle" fill="#b9c2d6" font-size="11">Claude Code · Codex</text>
<rect x="160" y="95" width="110" height="110" rx="16" fill="#fca311"/>
<text x="215" y="140" text-anchor="middle" fill="#14213d" font-size="16" font-weight="700">Herma</text>
<text x="215" y="160" text-anchor="middle" fill="#14213d" font-size="11">key · rules</text>
<text x="215" y="176" text-anchor="middle" fill="#14213d" font-size="11">context · receipt</text>
<rect x="300" y="40" width="110" height="64" rx="12" fill="#22345e" stroke="#3b5184"/>
<text x="355" y="68" text-anchor="middle" fill="#fff" font-size="13" font-weight="600">Direct answer</text>
<text x="355" y="86" text-anchor="middle" fill="#b9c2d6" font-size="11">0 upstream tokens</text>
<rect x="300" y="196" width="110" height="64" rx="12" fill="#22345e" stroke="#3b5184"/>
<text x="355" y="224" text-anchor="middle" fill="#fff" font-size="13" font-weight="600">Model API</text>
<text x="355" y="242" text-anchor="middle" fill="#b9c2d6" font-size="11">+ your context</text>
<path d="M122 150H156" stroke="#fca311" stroke-width="3" marker-end="url(#arrow)"/>
<path d="M272 130C285 110 288 90 296 80" stroke="#fca311" stroke-width="3" fill="none" marker-end="url(#arrow)"/>
<path d="M272 170C285 190 288 210 296 222" stroke="#fca311" stroke-width="3" fill="none" marker-end="url(#arrow)"/>
</svg>"##;

fn icon(path: &str) -> String {
    format!(
        r##"<svg viewBox="0 0 24 24" aria-hidden="true"><path d="{path}" fill="none" stroke="#fca311" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"/></svg>"##
    )
}

/// `/`: what Herma is, how to start.
pub fn landing(base: &str) -> String {
    let features = [
        (
            "M12 3l7 3v5c0 5-3 8-7 10-4-2-7-5-7-10V6z",
            "Scoped keys",
            "Every caller has its own <code>hmk_</code> key, rules, context and receipts. Browsers and cookies are refused on the API.",
        ),
        (
            "M4 6h16M4 12h10M4 18h6",
            "Rules in tiers",
            "Keywords, bounded regular expressions, path globs and tool names decide per request, in microseconds, without a network call.",
        ),
        (
            "M5 12l4 4L19 6",
            "Direct answers",
            "A matching rule can answer in the harness's own protocol, JSON or streamed, with zero upstream tokens.",
        ),
        (
            "M4 4h16v12H8l-4 4z",
            "Context shims",
            "Atomic noun, verb and detail entries from your own versioned database are placed where each protocol expects system context.",
        ),
        (
            "M6 3h9l3 3v15H6zM9 9h6M9 13h6M9 17h4",
            "Receipts and memory",
            "Each turn leaves a SHA-256 receipt; files, symbols and errors are remembered, and rules that precede errors are flagged.",
        ),
        (
            "M3 12h4l3-8 4 16 3-8h4",
            "Invisible in latency",
            "Streams pass through event by event; receipts and memory are written after the response, off the request path.",
        ),
    ];
    let cards: String = features
        .iter()
        .map(|(path, title, text)| {
            format!(
                r#"<div class="card">{}<h3>{title}</h3><p>{text}</p></div>"#,
                icon(path)
            )
        })
        .collect();
    let base = escape(base);
    let body = format!(
        r##"<section class="hero"><div class="inner">
<div>
<h1>The rules and context your coding agent should have had.</h1>
<p>Herma sits between Claude Code, Codex, opencode or any OpenAI- or Anthropic-compatible client and the model API. Your rules decide, per request, whether to answer directly or to add your own context before forwarding.</p>
<div class="actions"><a class="button" href="/preview">Try the playground</a><a class="button ghost" href="/docs">Read the docs</a></div>
</div>
<div>{DIAGRAM}</div>
</div></section>
<div class="inner">
<section aria-labelledby="what"><h2 id="what">What it does</h2><div class="grid">{cards}</div></section>
<section aria-labelledby="start"><h2 id="start">Start in three steps</h2>
<ol class="steps">
<li><strong>Run Herma.</strong> One binary with an embedded database:<pre><code>cargo run --release --bin herma -- serve</code></pre></li>
<li><strong>Create a key</strong> for your harness:<pre><code>cargo run --release --bin herma -- keys create --scope route,configure --harness claude-code</code></pre></li>
<li><strong>Point your harness here.</strong> For Claude Code:<pre><code>export ANTHROPIC_BASE_URL={base}
export ANTHROPIC_API_KEY=hmk_…</code></pre>Codex, opencode and the SDKs are in <a href="/docs#connect">the docs</a>.</li>
</ol></section>
<section aria-labelledby="agents"><h2 id="agents">For agents</h2>
<p>Agents find Herma through <a href="/llms.txt">/llms.txt</a>, <a href="/.well-known/agent-card.json">its agent card</a> and <a href="/connect.json">/connect.json</a>, and use it over MCP at <code>{base}/mcp</code>.</p></section>
</div>"##
    );
    layout(
        Page::Home,
        "Herma — rules and context for coding agents",
        "Herma is middleware between coding harnesses and model APIs: scoped keys, tiered rules, direct answers and context shims.",
        &body,
    )
}

/// What the playground form holds.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct PlaygroundInput {
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub prompt: Option<String>,
}

/// The protocols the playground offers, as (value, label).
pub const PROTOCOLS: [(&str, &str); 3] = [
    ("messages", "Anthropic Messages (Claude Code)"),
    ("responses", "OpenAI Responses (Codex)"),
    ("chat_completions", "OpenAI Chat Completions (opencode)"),
];

const EXAMPLES: [(&str, &str); 4] = [
    ("/herma help", "/herma help"),
    ("how do I force push safely?", "force push"),
    ("rotate the api key in config/.env", "secrets"),
    ("rename the parser module", "no rule"),
];

/// The request body a harness speaking `protocol` would send for `prompt`.
pub fn preview_body(protocol: &str, prompt: &str) -> Value {
    match protocol {
        "responses" => serde_json::json!({"model": "preview", "input": prompt}),
        "chat_completions" => {
            serde_json::json!({"model": "preview", "messages": [{"role": "user", "content": prompt}]})
        }
        _ => {
            serde_json::json!({"model": "preview", "max_tokens": 1024, "messages": [{"role": "user", "content": prompt}]})
        }
    }
}

/// What the result panel shows.
pub enum Outcome<'a> {
    /// Nothing run yet.
    Empty,
    Report(&'a DryRunReport),
    Error(&'a str),
}

/// `/preview`: the playground, with a result when the form was posted.
pub fn playground(input: &PlaygroundInput, outcome: Outcome<'_>) -> String {
    let protocol = input.protocol.as_deref().unwrap_or("messages");
    let prompt = input.prompt.as_deref().unwrap_or("");
    let options: String = PROTOCOLS
        .iter()
        .map(|(value, label)| {
            let selected = if *value == protocol { " selected" } else { "" };
            format!(r#"<option value="{value}"{selected}>{label}</option>"#)
        })
        .collect();
    let examples: String = EXAMPLES
        .iter()
        .map(|(text, label)| {
            format!(
                r#"<a href="/preview?prompt={}" data-prompt="{}">{}</a>"#,
                url_encode(text),
                escape(text),
                escape(label)
            )
        })
        .collect();
    let result = match outcome {
        Outcome::Empty => r#"<p class="notice">Write a prompt and run it. The result shows which built-in rules matched and what Herma would do.</p>"#.to_owned(),
        Outcome::Report(report) => render_report(report),
        Outcome::Error(message) => format!(r#"<p class="error" role="alert">{}</p>"#, escape(message)),
    };
    let body = format!(
        r##"<div class="inner">
<h1>Preview playground</h1>
<p>See what Herma's built-in rules do with a request, in the protocol your harness speaks. Nothing is stored and no model is called; your own rules are available through <code>/v1/dry-run</code> with a key.</p>
<div class="play">
<form class="preview" id="preview-form" method="post" action="/preview">
<label for="protocol">Protocol</label>
<select id="protocol" name="protocol">{options}</select>
<label for="prompt">Prompt</label>
<textarea id="prompt" name="prompt" required maxlength="8000" placeholder="how do I force push safely?">{prompt}</textarea>
<div class="examples" aria-label="Examples">{examples}</div>
<button class="button" type="submit">Run preview</button>
</form>
<section class="card result" id="result" aria-live="polite" aria-labelledby="result-title">
<h2 id="result-title">Result</h2>
<div id="result-body">{result}</div>
</section>
</div>
</div>"##,
        prompt = escape(prompt),
    );
    layout(
        Page::Playground,
        "Preview playground — Herma",
        "Try Herma's built-in rules on a prompt: matches, the context shim or the direct answer.",
        &body,
    )
}

/// The report as HTML (the playground script renders the same structure from the JSON).
pub fn render_report(report: &DryRunReport) -> String {
    let mut html = format!(
        r#"<p>Decision: <span class="decision {0}" id="decision">{0}</span></p>"#,
        escape(report.decision)
    );
    let matches: Vec<_> = report
        .tiers
        .keyword
        .iter()
        .chain(&report.tiers.semantic)
        .chain(&report.tiers.micromodel)
        .collect();
    if matches.is_empty() {
        html.push_str("<p>No rule matched: Herma would forward the request unchanged.</p>");
    } else {
        html.push_str(r#"<h3>Matched rules</h3><ul class="matches">"#);
        for m in matches {
            html.push_str(&format!(
                "<li><code>{}</code> v{} by <code>{}</code>{}</li>",
                escape(&m.provision_id),
                m.version,
                escape(&m.trigger),
                if m.applied { "" } else { " (not applied)" }
            ));
        }
        html.push_str("</ul>");
    }
    if let Some(answer) = report.direct_response.as_ref().and_then(direct_text) {
        html.push_str(&format!(
            "<h3>Direct answer</h3><pre><code>{}</code></pre>",
            escape(&answer)
        ));
    }
    if let Some(shim) = &report.shim {
        html.push_str(&format!(
            r#"<h3>Context added</h3><p class="notice">Placed {}.</p><pre><code>{}</code></pre>"#,
            escape(&shim.placement),
            escape(&shim.text)
        ));
    }
    html.push_str(&format!(
        r#"<p class="notice">persisted: {} · upstream contacted: {}</p>"#,
        report.persisted, report.upstream_contacted
    ));
    html
}

/// The text of a direct answer in any of the three protocols.
pub fn direct_text(response: &Value) -> Option<String> {
    let texts: Vec<&str> = if let Some(choices) = response.get("choices") {
        choices
            .get(0)
            .and_then(|c| c.pointer("/message/content"))
            .and_then(Value::as_str)
            .into_iter()
            .collect()
    } else if let Some(output) = response.get("output").and_then(Value::as_array) {
        output
            .iter()
            .filter_map(|item| item.get("content").and_then(Value::as_array))
            .flatten()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect()
    } else {
        response
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect()
    };
    (!texts.is_empty()).then(|| texts.concat())
}

fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// `/docs`: connecting harnesses, keys, rules, the API, MCP and operations.
pub fn docs(base: &str) -> String {
    let base = escape(base);
    let (log, log_default, log_format) = (LOG.name, escape(LOG.kind.default), LOG_FORMAT.name);
    let body = format!(
        r##"<div class="inner doc">
<aside><nav aria-label="On this page">
<a href="#start">Start</a><a href="#connect">Connect a harness</a><a href="#keys">Keys and scopes</a>
<a href="#rules">Rules and context</a><a href="#try">Dry run and preview</a><a href="#memory">Memory and insights</a>
<a href="#mcp">MCP</a><a href="#discovery">Discovery</a><a href="#errors">Errors</a><a href="#operations">Operations</a>
</nav></aside>
<article>
<h1>Herma documentation</h1>
<p>Herma authenticates each caller with a scoped <code>hmk_</code> key, matches the caller's rules (<em>provisions</em>) against each model request and either answers directly in the request's own protocol or adds the caller's context entries before forwarding the request upstream, streaming. The complete API is described by <a href="/openapi.json">/openapi.json</a>.</p>

<h2 id="start">Start</h2>
<pre><code>cargo run --release --bin herma -- serve      # 127.0.0.1:7730, ./herma.db
cargo run --release --bin herma -- keys create --scope route,configure --harness claude-code</code></pre>
<p>The key is printed once; Herma keeps only its SHA-256 digest. <code>cargo install --path crates/herma-cli</code> puts the binary on your <code>PATH</code> as <code>herma</code>; <code>herma serve --database postgres://…</code> then runs many instances on one PostgreSQL database.</p>

<h2 id="connect">Connect a harness</h2>
<p>The harness's API key is the Herma key. Herma forwards to the upstream named by <code>X-Upstream-Base-Url</code> (with the provider key in <code>X-Upstream-Api-Key</code>), or to the operator's <code>HERMA_UPSTREAM_BASE_URL</code>. A vendor host named by a caller must be allowed (the default allows only <code>localhost</code> and <code>127.0.0.1</code>); start Herma with, for example:</p>
<pre><code>HERMA_ALLOWED_UPSTREAM_HOSTS=localhost,127.0.0.1,api.anthropic.com,api.openai.com</code></pre>
<h3>Claude Code (Anthropic Messages)</h3>
<pre><code>export ANTHROPIC_BASE_URL={base}
export ANTHROPIC_API_KEY=hmk_…
export ANTHROPIC_CUSTOM_HEADERS=$'X-Upstream-Base-Url: https://api.anthropic.com\nX-Upstream-Api-Key: sk-ant-…'</code></pre>
<h3>Codex (OpenAI Responses)</h3>
<pre><code># ~/.codex/config.toml
model_provider = "herma"
model = "gpt-5-codex"

[model_providers.herma]
name = "Herma"
base_url = "{base}/v1"
env_key = "HERMA_KEY"
wire_api = "responses"
http_headers = {{ "X-Upstream-Base-Url" = "https://api.openai.com" }}
env_http_headers = {{ "X-Upstream-Api-Key" = "OPENAI_API_KEY" }}</code></pre>
<h3>opencode (Chat Completions, Responses or Messages)</h3>
<pre><code>// opencode.json: a provider whose baseURL is Herma
"provider": {{ "herma": {{
  "npm": "@ai-sdk/openai-compatible",
  "options": {{ "baseURL": "{base}/v1", "apiKey": "{{env:HERMA_KEY}}",
               "headers": {{ "X-Upstream-Base-Url": "https://api.openai.com",
                            "X-Upstream-Api-Key": "{{env:OPENAI_API_KEY}}" }} }},
  "models": {{ "gpt-5-mini": {{}} }}
}} }},
"model": "herma/gpt-5-mini"</code></pre>

<h3>OpenAI and Anthropic SDKs</h3>
<p>Set <code>base_url</code> to <code>{base}/v1</code> (OpenAI) or <code>{base}</code> (Anthropic), the API key to the Herma key, and the upstream headers in <code>default_headers</code>.</p>

<h2 id="keys">Keys and scopes</h2>
<table><thead><tr><th>Scope</th><th>Allows</th></tr></thead><tbody>
<tr><td><code>route</code></td><td>The proxy routes, dry runs, receipts, memory and insights.</td></tr>
<tr><td><code>configure</code></td><td>Writing provisions and context entries, with <code>X-Herma-Harness</code> naming the key's harness.</td></tr>
<tr><td><code>admin</code></td><td>Keys (<code>/v1/admin/keys</code>) and the built-in records.</td></tr>
</tbody></table>
<p>Keys come as <code>Authorization: Bearer hmk_…</code> or <code>x-api-key: hmk_…</code>. Requests a browser navigates to, and cookie-authenticated ones, are refused on the API.</p>

<h2 id="rules">Rules and context</h2>
<p>A <strong>provision</strong> has an <code>action</code> — <code>shim_context</code> (add context, then forward) or <code>respond_directly</code> (answer without any upstream) — and <code>triggers</code>: <code>keywords</code>, bounded <code>regex</code>, path globs (<code>paths</code>) and <code>tools</code>, with <code>mode</code> <code>any</code> or <code>all</code>. A <strong>context entry</strong> is a <code>noun</code>, <code>verb</code> or <code>detail</code>. Every record has a <code>version</code>; updates send <code>expected_version</code> and a stale one gets <code>409 version_conflict</code>.</p>
<pre><code>curl {base}/v1/context -H "Authorization: Bearer $HERMA_KEY" -H 'X-Herma-Harness: claude-code' \
  --json '{{"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations first."}}'
curl {base}/v1/provisions -H "Authorization: Bearer $HERMA_KEY" -H 'X-Herma-Harness: claude-code' \
  --json '{{"id": "deploy", "action": "shim_context", "triggers": {{"keywords": ["deploy"]}}, "context_refs": ["deploy.checklist"]}}'</code></pre>
<p>The shim goes where each protocol expects system context: a separate <code>system</code> block (Messages), a system message before the latest user turn (Chat Completions), a developer item (Responses). Every response carries <code>x-herma-receipt</code>; <code>GET /v1/receipts/{{id}}</code> shows what matched and what was shimmed.</p>

<h2 id="try">Dry run and preview</h2>
<p><code>POST /v1/dry-run</code> evaluates your rules against a request body without storing, claiming or sending anything. <code>POST /api/preview</code> does the same with the built-in rules only and needs no key; <a href="/preview">the playground</a> uses it.</p>

<h2 id="memory">Memory and insights</h2>
<p>After each turn Herma extracts file paths, code symbols, Tessera URIs, statute card ids and error signatures, per project (<code>X-Herma-Project</code>). An error in turn N of a conversation is attributed to the rules fired in turn N−1 as <code>retry_error</code>. <code>GET /v1/memory</code>, <code>GET /v1/outcomes</code> and <code>GET /v1/insights</code> show them, with candidate provisions you approve at <code>POST /v1/insights/candidates/{{id}}</code>.</p>

<h2 id="mcp">MCP</h2>
<p><code>POST {base}/mcp</code> is a stateless MCP server (revision 2026-07-28, and the initialize handshake of 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05). Without a key: the tools <code>herma_preview</code> and <code>herma_discovery</code>; with a key also <code>herma_dry_run</code>, <code>herma_list_provisions</code>, <code>herma_list_context</code> and <code>herma_insights</code>, and your records as resources.</p>

<h2 id="discovery">Discovery</h2>
<p><a href="/connect.json">/connect.json</a> (routes, protocol versions, features), <a href="/llms.txt">/llms.txt</a>, <a href="/llms-full.txt">/llms-full.txt</a>, <a href="/.well-known/agent-card.json">/.well-known/agent-card.json</a>, <a href="/openapi.json">/openapi.json</a>, <a href="/healthz">/healthz</a>.</p>

<h2 id="errors">Errors</h2>
<p>Herma's own API answers errors as RFC 9457 <code>application/problem+json</code> with a stable <code>code</code> (<code>unauthorized</code>, <code>harness_required</code>, <code>builtin_protected</code>, <code>version_conflict</code>, <code>validation_failed</code>, …) and, for bad input, the field at fault. On the proxy routes errors take each protocol's own error shape so SDKs raise their usual exceptions.</p>

<h2 id="operations">Operations</h2>
<p><code>GET /metrics</code> serves Prometheus metrics: requests by route, action and status, latency and Herma's added latency, the receipt queue and rule-index rebuilds. Logs go to standard error as text or JSON (<code>{log_format}</code>), filtered by <code>{log}</code> (default <code>{log_default}</code>), and carry the request id of <code>x-request-id</code>; keys and bodies are never logged. <code>herma config check</code> lists every <code>HERMA_*</code> setting.</p>
</article>
</div>"##
    );
    layout(
        Page::Docs,
        "Documentation — Herma",
        "How to connect Claude Code, Codex and opencode to Herma, write rules and context, and run it.",
        &body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn direct_text_reads_each_protocol() {
        let chat = serde_json::json!({"choices": [{"message": {"content": "hi"}}]});
        let responses = serde_json::json!({"output": [{"content": [{"type": "output_text", "text": "h"}, {"text": "i"}]}]});
        let messages = serde_json::json!({"content": [{"type": "text", "text": "hi"}]});
        for v in [chat, responses, messages] {
            assert_eq!(direct_text(&v).as_deref(), Some("hi"));
        }
        assert_eq!(direct_text(&serde_json::json!({"content": []})), None);
    }

    #[test]
    fn example_links_are_url_encoded() {
        assert_eq!(url_encode("/herma help?"), "%2Fherma+help%3F");
    }
}
