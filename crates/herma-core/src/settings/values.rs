//! The typed values settings parse into, beyond numbers and text.

use crate::secret::Secret;

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
    pub embed_precision: EmbedPrecision,
    /// `None`: micromodel triggers cannot be evaluated.
    pub micromodel: Option<RemoteModel>,
    pub micromodel_timeout_ms: u64,
}

/// How the local embedding model computes its linear layers (`HERMA_EMBED_PRECISION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedPrecision {
    /// 8 bits where the CPU has the instructions for it, else f32.
    Auto,
    F32,
    Int8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}
