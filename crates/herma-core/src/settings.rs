//! Operator settings (`HERMA_*`), parsed from a map so every runtime reads them the same way.
//!
//! Rules shared by every setting: an empty or whitespace-only value counts as unset (the default
//! applies); numbers are plain decimal digits (no signs, exponents, separators); every invalid
//! setting is reported by name, all at once. Secrets are never shown, only whether they are set.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::secret::Secret;
use crate::upstream::{Provider, UpstreamSettings, parse_base};

/// Default listen address: loopback only.
pub const DEFAULT_BIND: &str = "127.0.0.1:7730";
/// Default database: a SQLite file in the working directory.
pub const DEFAULT_SQLITE_PATH: &str = "herma.db";
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
pub const DEFAULT_KEY_CACHE_TTL_MS: u64 = 1000;
/// Revocation must take effect within one second, so the verified-key cache may not be longer.
pub const MAX_KEY_CACHE_TTL_MS: u64 = 1000;
pub const MIN_SECRET_CHARS: usize = 24;

/// One known setting, for `herma config check` and the docs.
#[derive(Debug, Clone, Copy)]
pub struct SettingInfo {
    pub name: &'static str,
    pub secret: bool,
    pub default: &'static str,
    pub description: &'static str,
}

pub const KNOWN_SETTINGS: &[SettingInfo] = &[
    SettingInfo {
        name: "HERMA_BIND",
        secret: false,
        default: DEFAULT_BIND,
        description: "Address `herma serve` listens on (host:port).",
    },
    SettingInfo {
        name: "HERMA_DATABASE_URL",
        secret: true,
        default: "sqlite://herma.db",
        description: "`sqlite://PATH` (embedded, WAL) or `postgres://…` (shared by many instances).",
    },
    SettingInfo {
        name: "HERMA_ADMIN_TOKEN",
        secret: true,
        default: "unset",
        description: "Bootstrap admin credential for /v1/admin/* (at least 24 characters).",
    },
    SettingInfo {
        name: "HERMA_EDGE_SECRET",
        secret: true,
        default: "unset",
        description: "When set, every request must carry a matching `x-edge-auth` header.",
    },
    SettingInfo {
        name: "HERMA_METRICS_TOKEN",
        secret: true,
        default: "unset",
        description: "When set, `GET /metrics` needs `Authorization: Bearer <token>`; unset, it is public (counts only, no keys or bodies).",
    },
    SettingInfo {
        name: "HERMA_MAX_BODY_BYTES",
        secret: false,
        default: "1048576",
        description: "Largest request body accepted on Herma's own API.",
    },
    SettingInfo {
        name: "HERMA_KEY_CACHE_TTL_MS",
        secret: false,
        default: "1000",
        description: "How long a verified key is trusted without re-reading it (at most 1000).",
    },
    SettingInfo {
        name: "HERMA_UPSTREAM_BASE_URL",
        secret: false,
        default: "unset",
        description: "The operator's upstream (e.g. https://api.anthropic.com or http://localhost:11434/v1); callers may name another with X-Upstream-Base-Url.",
    },
    SettingInfo {
        name: "HERMA_UPSTREAM_API_KEY",
        secret: true,
        default: "unset",
        description: "The operator's upstream key, sent only to HERMA_UPSTREAM_BASE_URL's origin when the caller sends no X-Upstream-Api-Key.",
    },
    SettingInfo {
        name: "HERMA_ALLOWED_UPSTREAM_HOSTS",
        secret: false,
        default: "localhost,127.0.0.1",
        description: "Comma-separated hosts callers may name as upstream (the operator's own upstream host is always allowed).",
    },
    SettingInfo {
        name: "HERMA_CONVERSATION_DISABLED_PROVIDERS",
        secret: false,
        default: "[]",
        description: "JSON list of providers (meta, ollama, openai, anthropic, openrouter) whose operator key is paused.",
    },
    SettingInfo {
        name: "HERMA_SHIM_MAX_CHARS",
        secret: false,
        default: "8000",
        description: "Size budget of the context one request may receive; entries beyond it are cut and the cut recorded.",
    },
    SettingInfo {
        name: "HERMA_PROXY_MAX_BODY_BYTES",
        secret: false,
        default: "33554432",
        description: "Largest request body accepted on the proxied routes.",
    },
    SettingInfo {
        name: "HERMA_UPSTREAM_CONNECT_TIMEOUT_MS",
        secret: false,
        default: "10000",
        description: "How long to wait for a connection to the upstream.",
    },
    SettingInfo {
        name: "HERMA_UPSTREAM_HEADERS_TIMEOUT_MS",
        secret: false,
        default: "600000",
        description: "How long to wait for the upstream's response headers (streams then run as long as they run).",
    },
    SettingInfo {
        name: "HERMA_UPSTREAM_IDLE_TIMEOUT_MS",
        secret: false,
        default: "300000",
        description: "How long a response body may stay silent before Herma gives up on it.",
    },
    SettingInfo {
        name: "HERMA_RULES_CACHE_TTL_MS",
        secret: false,
        default: "1000",
        description: "How long a caller's compiled rules are used before Herma checks whether they changed.",
    },
    SettingInfo {
        name: "HERMA_RECEIPT_QUEUE_CAPACITY",
        secret: false,
        default: "10000",
        description: "Receipts waiting to be written; when full, requests wait (receipts are never dropped).",
    },
    SettingInfo {
        name: "HERMA_MEMORY_ENABLED",
        secret: false,
        default: "true",
        description: "Entity memory and rule outcomes (`true` or `false`).",
    },
    SettingInfo {
        name: "HERMA_MEMORY_MAX_ENTITIES",
        secret: false,
        default: "5000",
        description: "Working entities kept per caller; the rarest, oldest are evicted beyond it.",
    },
    SettingInfo {
        name: "HERMA_MEMORY_QUEUE_CAPACITY",
        secret: false,
        default: "10000",
        description: "Turns waiting for memory processing; beyond it turns are skipped (and counted).",
    },
    SettingInfo {
        name: "HERMA_EMBED_MODEL_DIR",
        secret: false,
        default: "unset",
        description: "Directory of a local sentence-embedding model (config.json, tokenizer.json, model.safetensors) for semantic triggers.",
    },
    SettingInfo {
        name: "HERMA_EMBED_WINDOW_TOKENS",
        secret: false,
        default: "32",
        description: "Tokens of the latest user turn that are embedded (8 to 256).",
    },
    SettingInfo {
        name: "HERMA_EMBED_THREADS",
        secret: false,
        default: "1",
        description: "Threads of the local embedding pool.",
    },
    SettingInfo {
        name: "HERMA_EMBED_CACHE_ENTRIES",
        secret: false,
        default: "10000",
        description: "Embeddings kept in memory, keyed by a digest of the text.",
    },
    SettingInfo {
        name: "HERMA_EMBED_URL",
        secret: false,
        default: "unset",
        description: "A remote embedding endpoint instead of a local model: an OpenAI-compatible base (`…/v1`) or an Ollama base URL.",
    },
    SettingInfo {
        name: "HERMA_EMBED_PROTOCOL",
        secret: false,
        default: "openai",
        description: "How HERMA_EMBED_URL is spoken: `openai` (`/embeddings`) or `ollama` (`/api/embed`).",
    },
    SettingInfo {
        name: "HERMA_EMBED_MODEL",
        secret: false,
        default: "unset",
        description: "The remote embedding model (required with HERMA_EMBED_URL).",
    },
    SettingInfo {
        name: "HERMA_EMBED_API_KEY",
        secret: true,
        default: "unset",
        description: "Bearer key for HERMA_EMBED_URL.",
    },
    SettingInfo {
        name: "HERMA_MICROMODEL_URL",
        secret: false,
        default: "unset",
        description: "The tier-3 classifier endpoint: an OpenAI-compatible base (`…/v1`) or an Ollama base URL.",
    },
    SettingInfo {
        name: "HERMA_MICROMODEL_PROTOCOL",
        secret: false,
        default: "openai",
        description: "How HERMA_MICROMODEL_URL is spoken: `openai` (`/chat/completions`) or `ollama` (`/api/chat`).",
    },
    SettingInfo {
        name: "HERMA_MICROMODEL_MODEL",
        secret: false,
        default: "unset",
        description: "The classifier model rules use unless they name one (required with HERMA_MICROMODEL_URL; contributor-tier models are refused).",
    },
    SettingInfo {
        name: "HERMA_MICROMODEL_API_KEY",
        secret: true,
        default: "unset",
        description: "Bearer key for HERMA_MICROMODEL_URL.",
    },
    SettingInfo {
        name: "HERMA_MICROMODEL_TIMEOUT_MS",
        secret: false,
        default: "2000",
        description: "How long one classifier call may take before the rule's failure policy applies.",
    },
    SettingInfo {
        name: "HERMA_HANDSHAKE_MAX_CHARS",
        secret: false,
        default: "4000",
        description: "The most characters of one context entry a remote handshake may bring in, whatever the caller or the remote asks for.",
    },
    SettingInfo {
        name: "HERMA_TESSERA_URL",
        secret: false,
        default: "unset",
        description: "The Tessera endpoint `herma tessera sync` pulls governed records from (docs/tessera.md).",
    },
    SettingInfo {
        name: "HERMA_TESSERA_TIMEOUT_MS",
        secret: false,
        default: "30000",
        description: "How long one Tessera (or handshake remote) request may take before the sync stops with a resume cursor.",
    },
    SettingInfo {
        name: "HERMA_TESSERA_TOKEN",
        secret: true,
        default: "unset",
        description: "Bearer credential for HERMA_TESSERA_URL.",
    },
    SettingInfo {
        name: "HERMA_PREVIEW_RATE_PER_MINUTE",
        secret: false,
        default: "30",
        description: "Public preview requests allowed per client address per minute.",
    },
    SettingInfo {
        name: "HERMA_PUBLIC_URL",
        secret: false,
        default: "unset",
        description: "The URL clients reach Herma at (for discovery documents); else taken from each request's Host.",
    },
    SettingInfo {
        name: "HERMA_LOG",
        secret: false,
        default: "info",
        description: "Log filter (tracing `EnvFilter` syntax, e.g. `info,herma_server=debug`).",
    },
    SettingInfo {
        name: "HERMA_LOG_FORMAT",
        secret: false,
        default: "text",
        description: "`text` or `json`.",
    },
];

/// Where records live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A SQLite file path.
    Sqlite(String),
    /// A PostgreSQL connection URL.
    Postgres(Secret),
}

impl DatabaseUrl {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if let Some(path) = raw
            .strip_prefix("sqlite://")
            .or_else(|| raw.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err("a SQLite URL needs a file path, e.g. sqlite://herma.db".into());
            }
            return Ok(Self::Sqlite(path.to_owned()));
        }
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            return Ok(Self::Postgres(Secret::new(raw)));
        }
        Err("must start with sqlite:// or postgres://".into())
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{path}"),
            Self::Postgres(url) => redact_url_password(url.expose()),
        }
    }
}

fn redact_url_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "[redacted]".into();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}{tail}")
            } else {
                format!("{scheme}://{user}@{host}{tail}")
            }
        }
        None => url.to_owned(),
    }
}

/// How a remote model endpoint is spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteProtocol {
    /// OpenAI-compatible: `{base}/embeddings`, `{base}/chat/completions`.
    OpenAi,
    /// Ollama: `{base}/api/embed`, `{base}/api/chat`.
    Ollama,
}

impl RemoteProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            RemoteProtocol::OpenAi => "openai",
            RemoteProtocol::Ollama => "ollama",
        }
    }
}

/// A remote model endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteModel {
    pub protocol: RemoteProtocol,
    /// The base URL, without a trailing slash.
    pub base: String,
    pub model: String,
    pub key: Option<Secret>,
}

/// Where tier 2's embeddings come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmbedSource {
    Local { dir: String },
    Remote(RemoteModel),
}

/// Tier 2 and tier 3 settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierSettings {
    /// `None`: semantic triggers cannot be evaluated (dry runs say so).
    pub embed: Option<EmbedSource>,
    pub embed_window_tokens: u64,
    pub embed_threads: u64,
    pub embed_cache_entries: u64,
    /// `None`: micromodel triggers cannot be evaluated.
    pub micromodel: Option<RemoteModel>,
    pub micromodel_timeout_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated settings of one process.
#[derive(Clone, Debug)]
pub struct Settings {
    pub bind: SocketAddr,
    pub database: DatabaseUrl,
    pub admin_token: Option<Secret>,
    pub edge_secret: Option<Secret>,
    /// Bearer token `GET /metrics` requires, when set.
    pub metrics_token: Option<Secret>,
    pub max_body_bytes: u64,
    pub key_cache_ttl_ms: u64,
    pub log_filter: String,
    pub log_format: LogFormat,
    pub upstream: UpstreamSettings,
    pub shim_max_chars: u64,
    /// The ceiling of a remote handshake's `max_chars` (H07).
    pub handshake_max_chars: u64,
    pub proxy_max_body_bytes: u64,
    pub upstream_connect_timeout_ms: u64,
    pub upstream_headers_timeout_ms: u64,
    pub upstream_idle_timeout_ms: u64,
    pub rules_cache_ttl_ms: u64,
    pub receipt_queue_capacity: u64,
    pub memory_enabled: bool,
    pub memory_max_entities: u64,
    pub memory_queue_capacity: u64,
    pub preview_rate_per_minute: u64,
    pub public_url: Option<String>,
    pub tiers: TierSettings,
    /// Where governed records come from, with its credential.
    pub tessera_url: Option<String>,
    pub tessera_token: Option<Secret>,
    pub tessera_timeout_ms: u64,
}

/// An invalid setting, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    pub name: String,
    pub detail: String,
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.detail)
    }
}

/// The value of `name`, or `None` when unset, empty or whitespace-only.
pub fn setting<'a>(map: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    map.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// Plain decimal digits only: `16384` yes; `+1`, `1e3`, `1_000`, `0x10`, `-1` no.
pub fn parse_decimal_u64(raw: &str) -> Result<u64, String> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{raw}` is not a plain decimal integer"));
    }
    raw.parse::<u64>()
        .map_err(|_| format!("`{raw}` is too large"))
}

impl Settings {
    /// Parses and validates every known setting, collecting all errors.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, Vec<SettingError>> {
        let mut errors = Vec::new();
        let mut fail = |name: &str, detail: String| {
            errors.push(SettingError {
                name: name.to_owned(),
                detail,
            })
        };

        let bind = setting(map, "HERMA_BIND").unwrap_or(DEFAULT_BIND);
        let bind = bind.parse::<SocketAddr>().unwrap_or_else(|_| {
            fail(
                "HERMA_BIND",
                format!("`{bind}` is not a host:port address such as 127.0.0.1:7730"),
            );
            SocketAddr::from(([127, 0, 0, 1], 7730))
        });

        let database = match setting(map, "HERMA_DATABASE_URL") {
            None => DatabaseUrl::Sqlite(DEFAULT_SQLITE_PATH.to_owned()),
            Some(raw) => DatabaseUrl::parse(raw).unwrap_or_else(|detail| {
                fail("HERMA_DATABASE_URL", detail);
                DatabaseUrl::Sqlite(DEFAULT_SQLITE_PATH.to_owned())
            }),
        };

        let mut secret = |name: &str| -> Option<Secret> {
            let value = setting(map, name)?;
            if value.chars().count() < MIN_SECRET_CHARS {
                fail(
                    name,
                    format!("must be at least {MIN_SECRET_CHARS} characters"),
                );
                return None;
            }
            Some(Secret::new(value))
        };
        let admin_token = secret("HERMA_ADMIN_TOKEN");
        let edge_secret = secret("HERMA_EDGE_SECRET");
        let metrics_token = secret("HERMA_METRICS_TOKEN");

        let mut number = |name: &str, default: u64, min: u64, max: u64| -> u64 {
            match setting(map, name).map(parse_decimal_u64) {
                None => default,
                Some(Ok(n)) if (min..=max).contains(&n) => n,
                Some(Ok(n)) => {
                    fail(name, format!("{n} is outside {min}..={max}"));
                    default
                }
                Some(Err(detail)) => {
                    fail(name, detail);
                    default
                }
            }
        };
        let max_body_bytes = number(
            "HERMA_MAX_BODY_BYTES",
            DEFAULT_MAX_BODY_BYTES,
            1024,
            64 * 1024 * 1024,
        );
        let key_cache_ttl_ms = number(
            "HERMA_KEY_CACHE_TTL_MS",
            DEFAULT_KEY_CACHE_TTL_MS,
            0,
            MAX_KEY_CACHE_TTL_MS,
        );

        let shim_max_chars = number("HERMA_SHIM_MAX_CHARS", 8000, 256, 1_000_000);
        let handshake_max_chars = number("HERMA_HANDSHAKE_MAX_CHARS", 4000, 16, 1_000_000);
        let tessera_timeout_ms = number("HERMA_TESSERA_TIMEOUT_MS", 30_000, 100, 600_000);
        let proxy_max_body_bytes = number(
            "HERMA_PROXY_MAX_BODY_BYTES",
            32 * 1024 * 1024,
            1024,
            1024 * 1024 * 1024,
        );
        let upstream_connect_timeout_ms =
            number("HERMA_UPSTREAM_CONNECT_TIMEOUT_MS", 10_000, 1, 600_000);
        let upstream_headers_timeout_ms =
            number("HERMA_UPSTREAM_HEADERS_TIMEOUT_MS", 600_000, 1, 3_600_000);
        let upstream_idle_timeout_ms =
            number("HERMA_UPSTREAM_IDLE_TIMEOUT_MS", 300_000, 1, 3_600_000);
        let rules_cache_ttl_ms = number("HERMA_RULES_CACHE_TTL_MS", 1000, 0, 60_000);
        let receipt_queue_capacity = number("HERMA_RECEIPT_QUEUE_CAPACITY", 10_000, 1, 10_000_000);
        let memory_max_entities = number("HERMA_MEMORY_MAX_ENTITIES", 5000, 1, 10_000_000);
        let memory_queue_capacity = number("HERMA_MEMORY_QUEUE_CAPACITY", 10_000, 1, 10_000_000);
        let preview_rate_per_minute = number("HERMA_PREVIEW_RATE_PER_MINUTE", 30, 1, 1_000_000);
        let embed_window_tokens = number("HERMA_EMBED_WINDOW_TOKENS", 32, 8, 256);
        let embed_threads = number("HERMA_EMBED_THREADS", 1, 1, 64);
        let embed_cache_entries = number("HERMA_EMBED_CACHE_ENTRIES", 10_000, 0, 10_000_000);
        let micromodel_timeout_ms = number("HERMA_MICROMODEL_TIMEOUT_MS", 2000, 50, 120_000);
        let public_url = match setting(map, "HERMA_PUBLIC_URL") {
            None => None,
            Some(raw) => match parse_base(raw) {
                Ok(url) => Some(url.as_str().trim_end_matches('/').to_owned()),
                Err(detail) => {
                    fail("HERMA_PUBLIC_URL", detail);
                    None
                }
            },
        };
        let memory_enabled = match setting(map, "HERMA_MEMORY_ENABLED") {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                fail(
                    "HERMA_MEMORY_ENABLED",
                    format!("`{other}` is neither `true` nor `false`"),
                );
                true
            }
        };

        let mut upstream = UpstreamSettings::default();
        if let Some(raw) = setting(map, "HERMA_UPSTREAM_BASE_URL") {
            match parse_base(raw) {
                Ok(url) => upstream.base = Some(url),
                Err(detail) => fail("HERMA_UPSTREAM_BASE_URL", detail),
            }
        }
        upstream.key = setting(map, "HERMA_UPSTREAM_API_KEY").map(Secret::new);
        let hosts = setting(map, "HERMA_ALLOWED_UPSTREAM_HOSTS").unwrap_or("localhost,127.0.0.1");
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            let host = host.to_ascii_lowercase();
            if host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'))
                && !host.contains("://")
            {
                upstream.allowed_hosts.push(host);
            } else {
                fail(
                    "HERMA_ALLOWED_UPSTREAM_HOSTS",
                    format!("`{host}` is not a host name (no scheme, port or path)"),
                );
            }
        }
        if let Some(raw) = setting(map, "HERMA_CONVERSATION_DISABLED_PROVIDERS") {
            match crate::json::parse_strict(raw.as_bytes()) {
                Ok(serde_json::Value::Array(items)) => {
                    for item in items {
                        match item.as_str().and_then(Provider::parse) {
                            Some(p) if !upstream.disabled_providers.contains(&p) => {
                                upstream.disabled_providers.push(p)
                            }
                            Some(p) => fail(
                                "HERMA_CONVERSATION_DISABLED_PROVIDERS",
                                format!("`{}` is listed twice", p.as_str()),
                            ),
                            None => fail(
                                "HERMA_CONVERSATION_DISABLED_PROVIDERS",
                                format!(
                                    "{item} is not a provider (meta, ollama, openai, anthropic, openrouter)"
                                ),
                            ),
                        }
                    }
                }
                _ => fail(
                    "HERMA_CONVERSATION_DISABLED_PROVIDERS",
                    "must be a JSON list such as [\"anthropic\"]".into(),
                ),
            }
        }

        let mut remote = |prefix: &str| -> Option<RemoteModel> {
            let url_name = format!("HERMA_{prefix}_URL");
            let model_name = format!("HERMA_{prefix}_MODEL");
            let protocol_name = format!("HERMA_{prefix}_PROTOCOL");
            let url = setting(map, &url_name);
            let model = setting(map, &model_name);
            let protocol = match setting(map, &protocol_name) {
                None | Some("openai") => RemoteProtocol::OpenAi,
                Some("ollama") => RemoteProtocol::Ollama,
                Some(other) => {
                    fail(
                        &protocol_name,
                        format!("`{other}` is neither `openai` nor `ollama`"),
                    );
                    RemoteProtocol::OpenAi
                }
            };
            let url = url?;
            let base = match parse_base(url) {
                Ok(u) => u.as_str().trim_end_matches('/').to_owned(),
                Err(detail) => {
                    fail(&url_name, detail);
                    return None;
                }
            };
            let Some(model) = model else {
                fail(&model_name, format!("is required with {url_name}"));
                return None;
            };
            if crate::contributor::is_contributor_model(model) {
                fail(
                    &model_name,
                    format!("`{model}` is contributor tier and is refused"),
                );
                return None;
            }
            Some(RemoteModel {
                protocol,
                base,
                model: model.to_owned(),
                key: setting(map, &format!("HERMA_{prefix}_API_KEY")).map(Secret::new),
            })
        };
        let remote_embed = remote("EMBED");
        let micromodel = remote("MICROMODEL");
        let embed = match (setting(map, "HERMA_EMBED_MODEL_DIR"), remote_embed) {
            (Some(_), Some(_)) => {
                fail(
                    "HERMA_EMBED_MODEL_DIR",
                    "set either HERMA_EMBED_MODEL_DIR or HERMA_EMBED_URL, not both".into(),
                );
                None
            }
            (Some(dir), None) => Some(EmbedSource::Local {
                dir: dir.to_owned(),
            }),
            (None, Some(model)) => Some(EmbedSource::Remote(model)),
            (None, None) => None,
        };
        let tiers = TierSettings {
            embed,
            embed_window_tokens,
            embed_threads,
            embed_cache_entries,
            micromodel,
            micromodel_timeout_ms,
        };

        let tessera_url = setting(map, "HERMA_TESSERA_URL").and_then(|raw| match parse_base(raw) {
            Ok(u) => Some(u.as_str().trim_end_matches('/').to_owned()),
            Err(detail) => {
                fail("HERMA_TESSERA_URL", detail);
                None
            }
        });
        let tessera_token = setting(map, "HERMA_TESSERA_TOKEN").map(Secret::new);

        let log_filter = setting(map, "HERMA_LOG").unwrap_or("info").to_owned();
        let log_format = match setting(map, "HERMA_LOG_FORMAT") {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                fail(
                    "HERMA_LOG_FORMAT",
                    format!("`{other}` is neither `text` nor `json`"),
                );
                LogFormat::Text
            }
        };

        if errors.is_empty() {
            Ok(Self {
                bind,
                database,
                admin_token,
                edge_secret,
                metrics_token,
                max_body_bytes,
                key_cache_ttl_ms,
                log_filter,
                log_format,
                upstream,
                shim_max_chars,
                handshake_max_chars,
                proxy_max_body_bytes,
                upstream_connect_timeout_ms,
                upstream_headers_timeout_ms,
                upstream_idle_timeout_ms,
                rules_cache_ttl_ms,
                receipt_queue_capacity,
                memory_enabled,
                memory_max_entities,
                memory_queue_capacity,
                preview_rate_per_minute,
                public_url,
                tiers,
                tessera_url,
                tessera_token,
                tessera_timeout_ms,
            })
        } else {
            Err(errors)
        }
    }
}

/// One line of `herma config check`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingReport {
    pub name: &'static str,
    /// The effective value as it may be shown: secrets are `[set]`/`unset`, URLs lose passwords.
    pub shown: String,
    pub from_default: bool,
}

/// The effective value of every known setting, redacted, in a stable order.
pub fn report(map: &BTreeMap<String, String>) -> Vec<SettingReport> {
    KNOWN_SETTINGS
        .iter()
        .map(|info| {
            let value = setting(map, info.name);
            let shown = match (value, info.name) {
                (None, _) => info.default.to_owned(),
                (Some(raw), "HERMA_DATABASE_URL") => DatabaseUrl::parse(raw)
                    .map(|u| u.redacted())
                    .unwrap_or_else(|_| "[invalid]".into()),
                (Some(_), _) if info.secret => "[set]".to_owned(),
                (Some(raw), _) => raw.to_owned(),
            };
            SettingReport {
                name: info.name,
                shown,
                from_default: value.is_none(),
            }
        })
        .collect()
}

/// `HERMA_*` names in `map` that Herma does not know (likely typos).
pub fn unknown_settings(map: &BTreeMap<String, String>) -> Vec<String> {
    map.keys()
        .filter(|name| name.starts_with("HERMA_"))
        .filter(|name| !KNOWN_SETTINGS.iter().any(|s| s.name == name.as_str()))
        .filter(|name| !name.starts_with("HERMA_TEST_"))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_need_no_configuration() {
        let s = Settings::from_map(&BTreeMap::new()).unwrap();
        assert_eq!(s.bind.to_string(), "127.0.0.1:7730");
        assert_eq!(s.database, DatabaseUrl::Sqlite("herma.db".into()));
        assert!(s.admin_token.is_none());
        assert_eq!(s.key_cache_ttl_ms, 1000);
    }

    #[test]
    fn whitespace_values_are_unset() {
        let s =
            Settings::from_map(&map(&[("HERMA_BIND", "  "), ("HERMA_ADMIN_TOKEN", "\t")])).unwrap();
        assert_eq!(s.bind.to_string(), DEFAULT_BIND);
        assert!(s.admin_token.is_none());
    }

    #[test]
    fn every_invalid_setting_is_named() {
        let errors = Settings::from_map(&map(&[
            ("HERMA_BIND", "nowhere"),
            ("HERMA_DATABASE_URL", "mysql://x"),
            ("HERMA_ADMIN_TOKEN", "short"),
            ("HERMA_MAX_BODY_BYTES", "1e6"),
            ("HERMA_KEY_CACHE_TTL_MS", "5000"),
            ("HERMA_LOG_FORMAT", "xml"),
        ]))
        .unwrap_err();
        let names: Vec<_> = errors.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "HERMA_BIND",
                "HERMA_DATABASE_URL",
                "HERMA_ADMIN_TOKEN",
                "HERMA_MAX_BODY_BYTES",
                "HERMA_KEY_CACHE_TTL_MS",
                "HERMA_LOG_FORMAT"
            ]
        );
    }

    #[test]
    fn tier_settings_are_validated_and_contributor_classifiers_refused() {
        let s = Settings::from_map(&map(&[
            ("HERMA_EMBED_MODEL_DIR", "/models/minilm"),
            ("HERMA_MICROMODEL_URL", "http://localhost:11434/"),
            ("HERMA_MICROMODEL_PROTOCOL", "ollama"),
            ("HERMA_MICROMODEL_MODEL", "qwen2.5:0.5b"),
        ]))
        .unwrap();
        assert_eq!(
            s.tiers.embed,
            Some(EmbedSource::Local {
                dir: "/models/minilm".into()
            })
        );
        let micro = s.tiers.micromodel.unwrap();
        assert_eq!(micro.base, "http://localhost:11434");
        assert_eq!(micro.protocol, RemoteProtocol::Ollama);
        assert_eq!(s.tiers.embed_window_tokens, 32);
        assert_eq!(s.tiers.micromodel_timeout_ms, 2000);

        let errors = Settings::from_map(&map(&[
            ("HERMA_EMBED_MODEL_DIR", "/m"),
            ("HERMA_EMBED_URL", "http://localhost:8000/v1"),
            ("HERMA_EMBED_MODEL", "e"),
            ("HERMA_MICROMODEL_URL", "http://localhost:8000/v1"),
            ("HERMA_MICROMODEL_MODEL", "tiny-Contributor"),
            ("HERMA_EMBED_WINDOW_TOKENS", "4"),
            ("HERMA_EMBED_PROTOCOL", "grpc"),
        ]))
        .unwrap_err();
        let named: Vec<_> = errors.iter().map(|e| e.name.as_str()).collect();
        for name in [
            "HERMA_EMBED_MODEL_DIR",
            "HERMA_MICROMODEL_MODEL",
            "HERMA_EMBED_WINDOW_TOKENS",
            "HERMA_EMBED_PROTOCOL",
        ] {
            assert!(named.contains(&name), "{name} in {named:?}");
        }
        assert!(errors.iter().any(|e| e.detail.contains("contributor tier")));
        let missing =
            Settings::from_map(&map(&[("HERMA_MICROMODEL_URL", "http://localhost:1/v1")]))
                .unwrap_err();
        assert_eq!(missing[0].name, "HERMA_MICROMODEL_MODEL");
    }

    #[test]
    fn upstream_settings_are_validated() {
        let s = Settings::from_map(&map(&[
            ("HERMA_UPSTREAM_BASE_URL", "https://api.anthropic.com"),
            ("HERMA_ALLOWED_UPSTREAM_HOSTS", "LocalHost, ollama.internal"),
            (
                "HERMA_CONVERSATION_DISABLED_PROVIDERS",
                "[\"anthropic\",\"openrouter\"]",
            ),
        ]))
        .unwrap();
        assert_eq!(s.upstream.allowed_hosts, ["localhost", "ollama.internal"]);
        assert_eq!(
            s.upstream.disabled_providers,
            [Provider::Anthropic, Provider::Openrouter]
        );
        let errors = Settings::from_map(&map(&[
            ("HERMA_UPSTREAM_BASE_URL", "ftp://x"),
            ("HERMA_ALLOWED_UPSTREAM_HOSTS", "http://x"),
            ("HERMA_CONVERSATION_DISABLED_PROVIDERS", "[\"bedrock\"]"),
        ]))
        .unwrap_err();
        let names: Vec<_> = errors.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "HERMA_UPSTREAM_BASE_URL",
                "HERMA_ALLOWED_UPSTREAM_HOSTS",
                "HERMA_CONVERSATION_DISABLED_PROVIDERS"
            ]
        );
        let defaults = Settings::from_map(&BTreeMap::new()).unwrap();
        assert_eq!(defaults.upstream.allowed_hosts, ["localhost", "127.0.0.1"]);
        assert!(defaults.upstream.base.is_none());
    }

    #[test]
    fn numbers_are_plain_decimal_digits() {
        assert_eq!(parse_decimal_u64("16384"), Ok(16384));
        for bad in [
            "",
            "+1",
            "-1",
            "1e3",
            "1_000",
            "0x10",
            " 1",
            "1.0",
            "99999999999999999999",
        ] {
            assert!(parse_decimal_u64(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn database_urls() {
        assert_eq!(
            DatabaseUrl::parse("sqlite://data/h.db"),
            Ok(DatabaseUrl::Sqlite("data/h.db".into()))
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:///tmp/h.db"),
            Ok(DatabaseUrl::Sqlite("/tmp/h.db".into()))
        );
        assert!(DatabaseUrl::parse("sqlite://").is_err());
        let pg = DatabaseUrl::parse("postgres://u:hunter2@db:5432/herma").unwrap();
        assert_eq!(pg.redacted(), "postgres://u:***@db:5432/herma");
        assert!(!format!("{pg:?}").contains("hunter2"));
    }

    #[test]
    fn report_redacts_secrets() {
        let lines = report(&map(&[
            ("HERMA_ADMIN_TOKEN", "a-very-long-bootstrap-token-value"),
            ("HERMA_DATABASE_URL", "postgres://u:pw@h/db"),
        ]));
        let text = format!("{lines:?}");
        assert!(!text.contains("bootstrap-token"));
        assert!(!text.contains(":pw@"));
        assert!(text.contains("[set]"));
    }

    #[test]
    fn unknown_herma_settings_are_listed() {
        let unknown = unknown_settings(&map(&[
            ("HERMA_BIN", "x"),
            ("HERMA_BIND", "1.2.3.4:5"),
            ("PATH", "/"),
        ]));
        assert_eq!(unknown, ["HERMA_BIN"]);
    }
}
