//! The settings table: every `HERMA_*` setting, declared once with its name, kind (how it
//! parses, its default and bounds, whether it is secret) and doc line. `Settings::from_map`
//! reads each through its declaration; `herma config check`, the unknown-name warning and the
//! README's configuration tables ([`super::docs`]) come from [`GROUPS`].
//!
//! Adding a setting: declare it in its group here, read it in `Settings::from_map`, then run
//! `herma config docs` and paste the output into README.md (a test compares them). Settings
//! that exist once per member (per tier, per provider) are one [`Family`] over a [`Members`]
//! list.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use super::conversation;
use super::declare::{Declared, Family, Group, Member, Members, Setting};
use super::kinds::{
    Address, BaseUrl, Choice, Credential, Database, Hosts, Number, OptionalText, Providers, Text,
};
use super::values::{EmbedPrecision, LogFormat, RemoteProtocol};

const MIB: u64 = 1024 * 1024;
/// The admin, edge and metrics tokens are refused when shorter.
const MIN_TOKEN_CHARS: usize = 24;
const ON_OFF: Choice<bool> = Choice {
    default: ("true", true),
    others: &[("false", false)],
};

pub const BIND: Setting<Address> = Setting {
    name: "HERMA_BIND",
    // Loopback only: exposing Herma is a decision.
    kind: Address {
        default: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7730)),
    },
    doc: "Address `herma serve` listens on (`--bind`).",
};
pub const DATABASE_URL: Setting<Database> = Setting {
    name: "HERMA_DATABASE_URL",
    kind: Database {
        default_path: "herma.db",
    },
    doc: "Where records live: a SQLite file (embedded, WAL) or PostgreSQL, which many instances can share (`--database`).",
};
pub const DATABASE_POOL_SIZE: Setting<Number> = Setting {
    name: "HERMA_DATABASE_POOL_SIZE",
    kind: Number {
        default: 16,
        min: 1,
        max: 1000,
    },
    doc: "PostgreSQL connections one process keeps at most; N processes need N times this below the server's `max_connections` (`docs/operations.md`). SQLite ignores it.",
};
pub const PUBLIC_URL: Setting<BaseUrl> = Setting {
    name: "HERMA_PUBLIC_URL",
    kind: BaseUrl,
    doc: "The URL clients reach Herma at, for discovery documents and pages; without it they name the address Herma listens on, never the request's `Host` (set it when clients reach Herma through another name).",
};
pub const MAX_BODY_BYTES: Setting<Number> = Setting {
    name: "HERMA_MAX_BODY_BYTES",
    kind: Number {
        default: MIB,
        min: 1024,
        max: 64 * MIB,
    },
    doc: "Largest request body accepted on Herma's own API.",
};
pub const LOG: Setting<Text> = Setting {
    name: "HERMA_LOG",
    kind: Text {
        default: "info",
        form: "tracing filter",
    },
    doc: "Which log lines are written (`EnvFilter` syntax, e.g. `info,herma_server=debug`). Keys, tokens and bodies are never logged.",
};
pub const LOG_FORMAT: Setting<Choice<LogFormat>> = Setting {
    name: "HERMA_LOG_FORMAT",
    kind: Choice {
        default: ("text", LogFormat::Text),
        others: &[("json", LogFormat::Json)],
    },
    doc: "How log lines are written to standard error: text or one JSON object per line.",
};

// Connections and request limits: what slow or greedy clients can hold (`docs/reliability.md`).
pub const MAX_CONNECTIONS: Setting<Number> = Setting {
    name: "HERMA_MAX_CONNECTIONS",
    // A proxied request may hold a second descriptor upstream; `herma serve` lowers the cap
    // to what its open-file limit can carry (after raising the soft limit to the hard one).
    kind: Number {
        default: 1024,
        min: 1,
        max: 1_000_000,
    },
    doc: "Client connections served at once (kept-alive idle ones count; lowered at start to what the open-file limit can carry); past it a new connection gets 503 `server_busy` with `Retry-After`.",
};
pub const HEADER_READ_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_HEADER_READ_TIMEOUT_MS",
    // A client writes its head at once; ten seconds covers a slow link, not a trickle.
    kind: Number {
        default: 10_000,
        min: 100,
        max: 600_000,
    },
    doc: "Time a request head may take to arrive, from the connection's start or the next request's first byte; past it Herma answers 408 `request_timeout` and closes.",
};
pub const BODY_READ_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_BODY_READ_TIMEOUT_MS",
    // The whole body, not the gap between bytes: a trickle cannot hold a connection forever.
    // 60 s carries a 32 MiB proxied body over a ~5 Mbit/s uplink.
    kind: Number {
        default: 60_000,
        min: 100,
        max: 3_600_000,
    },
    doc: "Time a request body may take to arrive in full, from when Herma starts reading it; past it 408 `request_timeout`. Responses (SSE streams) are not limited by it.",
};
pub const KEEP_ALIVE_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_KEEP_ALIVE_TIMEOUT_MS",
    // Longer than the 60 s idle timeout of common load balancers, so a balancer in front
    // closes its idle connections before Herma does.
    kind: Number {
        default: 75_000,
        min: 100,
        max: 3_600_000,
    },
    doc: "Time a kept-alive connection may wait for its next request before Herma closes it (silently).",
};
pub const BODY_BUDGET_BYTES: Setting<Number> = Setting {
    name: "HERMA_BODY_BUDGET_BYTES",
    kind: Number {
        default: 256 * MIB,
        min: 1024,
        max: 64 * 1024 * MIB,
    },
    doc: "Memory all request bodies being read or handled may hold together (a declared `Content-Length` is reserved whole); past it 503 `server_busy` with `Retry-After`. At least `HERMA_MAX_BODY_BYTES` and `HERMA_PROXY_MAX_BODY_BYTES`.",
};
pub const CALLER_MAX_PROVISIONS: Setting<Number> = Setting {
    name: "HERMA_CALLER_MAX_PROVISIONS",
    kind: Number {
        default: 1000,
        min: 1,
        max: 10_000_000,
    },
    doc: "Provisions one key's caller scope may hold; a create past it is 403 `quota_exceeded`.",
};
pub const CALLER_MAX_CONTEXT_ENTRIES: Setting<Number> = Setting {
    name: "HERMA_CALLER_MAX_CONTEXT_ENTRIES",
    kind: Number {
        default: 10_000,
        min: 1,
        max: 10_000_000,
    },
    doc: "Context entries one caller scope may hold (written through the API or pulled by `/v1/handshake`); past it 403 `quota_exceeded`.",
};
pub const CALLER_MAX_STORED_BYTES: Setting<Number> = Setting {
    name: "HERMA_CALLER_MAX_STORED_BYTES",
    kind: Number {
        default: 64 * MIB,
        min: 1024,
        max: 1024 * 1024 * MIB,
    },
    doc: "Bytes of provisions and context entries (their compact JSON) one caller scope may hold; a write past it is 403 `quota_exceeded`.",
};
pub const RECEIPT_RETENTION_DAYS: Setting<Number> = Setting {
    name: "HERMA_RECEIPT_RETENTION_DAYS",
    kind: Number {
        default: 30,
        min: 0,
        max: 36_500,
    },
    doc: "Receipts older than this many days are deleted, in small batches off the request path (`herma serve` hourly, or `herma prune`); `0` keeps them forever.",
};
pub const OUTCOME_RETENTION_DAYS: Setting<Number> = Setting {
    name: "HERMA_OUTCOME_RETENTION_DAYS",
    kind: Number {
        default: 90,
        min: 0,
        max: 36_500,
    },
    doc: "Rule outcomes (what insights and candidate provisions read) older than this many days are deleted the same way; `0` keeps them forever.",
};

pub const ADMIN_TOKEN: Setting<Credential> = Setting {
    name: "HERMA_ADMIN_TOKEN",
    kind: Credential {
        min_chars: MIN_TOKEN_CHARS,
    },
    doc: "Bootstrap admin credential for `/v1/admin/*`.",
};
pub const EDGE_SECRET: Setting<Credential> = Setting {
    name: "HERMA_EDGE_SECRET",
    kind: Credential {
        min_chars: MIN_TOKEN_CHARS,
    },
    doc: "When set, every request must carry a matching `x-edge-auth` header.",
};
pub const METRICS_TOKEN: Setting<Credential> = Setting {
    name: "HERMA_METRICS_TOKEN",
    kind: Credential {
        min_chars: MIN_TOKEN_CHARS,
    },
    doc: "When set, `GET /metrics` needs `Authorization: Bearer <token>`; unset, it is public (counts only, no keys or bodies).",
};
pub const KEY_CACHE_TTL_MS: Setting<Number> = Setting {
    name: "HERMA_KEY_CACHE_TTL_MS",
    // Revocation must take effect within one second, so the cache may not be longer.
    kind: Number {
        default: 1000,
        min: 0,
        max: 1000,
    },
    doc: "How long a verified key is trusted before it is read again (a revoked key is refused within this).",
};
pub const PREVIEW_RATE_PER_MINUTE: Setting<Number> = Setting {
    name: "HERMA_PREVIEW_RATE_PER_MINUTE",
    kind: Number {
        default: 30,
        min: 1,
        max: 1_000_000,
    },
    doc: "Public previews (`/api/preview`, the playground, MCP) allowed per client address per minute.",
};

pub const UPSTREAM_BASE_URL: Setting<BaseUrl> = Setting {
    name: "HERMA_UPSTREAM_BASE_URL",
    kind: BaseUrl,
    doc: "The operator's upstream, e.g. `https://api.anthropic.com` or `http://localhost:11434/v1`; callers may name another with `X-Upstream-Base-Url`.",
};
pub const UPSTREAM_API_KEY: Setting<Credential> = Setting {
    name: "HERMA_UPSTREAM_API_KEY",
    kind: Credential { min_chars: 0 },
    doc: "The operator's upstream key, sent only to `HERMA_UPSTREAM_BASE_URL`'s origin and only when the caller sends no `X-Upstream-Api-Key`.",
};
pub const ALLOWED_UPSTREAM_HOSTS: Setting<Hosts> = Setting {
    name: "HERMA_ALLOWED_UPSTREAM_HOSTS",
    kind: Hosts {
        default: &["localhost", "127.0.0.1"],
    },
    doc: "Hosts callers may name with `X-Upstream-Base-Url` (the operator's own upstream host is always allowed).",
};
pub const CONVERSATION_DISABLED_PROVIDERS: Setting<Providers> = Setting {
    name: "HERMA_CONVERSATION_DISABLED_PROVIDERS",
    kind: Providers,
    doc: "Providers whose operator key is paused: requests that would use it are refused; a caller's own key still works.",
};
pub const PROXY_MAX_BODY_BYTES: Setting<Number> = Setting {
    name: "HERMA_PROXY_MAX_BODY_BYTES",
    kind: Number {
        default: 32 * MIB,
        min: 1024,
        max: 1024 * MIB,
    },
    doc: "Largest request body accepted on the proxied routes.",
};
pub const UPSTREAM_CONNECT_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_UPSTREAM_CONNECT_TIMEOUT_MS",
    kind: Number {
        default: 10_000,
        min: 1,
        max: 600_000,
    },
    doc: "How long to wait for a connection to the upstream.",
};
pub const UPSTREAM_HEADERS_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_UPSTREAM_HEADERS_TIMEOUT_MS",
    kind: Number {
        default: 600_000,
        min: 1,
        max: 3_600_000,
    },
    doc: "How long to wait for the upstream's response headers (streams then run as long as they run).",
};
pub const UPSTREAM_IDLE_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_UPSTREAM_IDLE_TIMEOUT_MS",
    kind: Number {
        default: 300_000,
        min: 1,
        max: 3_600_000,
    },
    doc: "How long a response body may stay silent before Herma gives up on it.",
};

pub const SHIM_MAX_CHARS: Setting<Number> = Setting {
    name: "HERMA_SHIM_MAX_CHARS",
    kind: Number {
        default: 8000,
        min: 256,
        max: 1_000_000,
    },
    doc: "Size budget of the context one request may receive; entries beyond it are cut and the cut recorded.",
};
pub const RULES_CACHE_TTL_MS: Setting<Number> = Setting {
    name: "HERMA_RULES_CACHE_TTL_MS",
    kind: Number {
        default: 1000,
        min: 0,
        max: 60_000,
    },
    doc: "How long a caller's compiled rules are used before Herma checks whether they changed.",
};
pub const RECEIPT_QUEUE_CAPACITY: Setting<Number> = Setting {
    name: "HERMA_RECEIPT_QUEUE_CAPACITY",
    kind: Number {
        default: 10_000,
        min: 1,
        max: 10_000_000,
    },
    doc: "Receipts waiting to be written; when full, requests wait (receipts are never dropped).",
};
pub const RECEIPT_JOURNAL_DIR: Setting<OptionalText> = Setting {
    name: "HERMA_RECEIPT_JOURNAL_DIR",
    kind: OptionalText {
        form: "directory, or `off`",
    },
    doc: "Where `herma serve` journals each receipt before its response ends, so a crash loses none (recovered at the next start). Unset: `<database file>.receipts/` beside a SQLite database, `herma-receipts/` in the working directory with PostgreSQL.",
};

pub const MEMORY_ENABLED: Setting<Choice<bool>> = Setting {
    name: "HERMA_MEMORY_ENABLED",
    kind: ON_OFF,
    doc: "Whether turns are processed into entity memory and rule outcomes.",
};
pub const MEMORY_MAX_ENTITIES: Setting<Number> = Setting {
    name: "HERMA_MEMORY_MAX_ENTITIES",
    kind: Number {
        default: 5000,
        min: 1,
        max: 10_000_000,
    },
    doc: "Working entities kept per caller; the rarest, oldest are evicted beyond it.",
};
pub const MEMORY_QUEUE_CAPACITY: Setting<Number> = Setting {
    name: "HERMA_MEMORY_QUEUE_CAPACITY",
    kind: Number {
        default: 10_000,
        min: 1,
        max: 10_000_000,
    },
    doc: "Turns waiting for memory processing; beyond it turns are skipped (and counted).",
};

pub const EMBED_MODEL_DIR: Setting<OptionalText> = Setting {
    name: "HERMA_EMBED_MODEL_DIR",
    kind: OptionalText { form: "directory" },
    doc: "Directory of the local sentence-embedding model (all-MiniLM-L6-v2: `config.json`, `tokenizer.json`, `model.safetensors`; `docs/tiers.md` says how to install it).",
};
pub const EMBED_WINDOW_TOKENS: Setting<Number> = Setting {
    name: "HERMA_EMBED_WINDOW_TOKENS",
    kind: Number {
        default: 32,
        min: 8,
        max: 256,
    },
    doc: "Tokens of the latest user turn that are embedded.",
};
pub const EMBED_THREADS: Setting<Number> = Setting {
    name: "HERMA_EMBED_THREADS",
    kind: Number {
        default: 1,
        min: 1,
        max: 64,
    },
    doc: "Threads of the local embedding pool.",
};
pub const EMBED_PRECISION: Setting<Choice<EmbedPrecision>> = Setting {
    name: "HERMA_EMBED_PRECISION",
    kind: Choice {
        default: ("auto", EmbedPrecision::Auto),
        others: &[("f32", EmbedPrecision::F32), ("int8", EmbedPrecision::Int8)],
    },
    doc: "How the local model computes: `int8` (8-bit linear layers, about twice as fast; scores differ from f32 by at most about 0.01), `f32`, or `auto`: int8 where the CPU has AVX-512 VNNI or AVX-VNNI, else f32. Part of the model's identity: instances sharing one database should resolve to the same one.",
};
pub const EMBED_CACHE_ENTRIES: Setting<Number> = Setting {
    name: "HERMA_EMBED_CACHE_ENTRIES",
    kind: Number {
        default: 10_000,
        min: 0,
        max: 10_000_000,
    },
    doc: "Prompt embeddings kept in memory, keyed by a digest of the text.",
};

/// The tiers whose model may be a remote endpoint.
pub const REMOTE_TIERS: Members = Members {
    placeholder: "TIER",
    members: &[EMBED_TIER, MICROMODEL_TIER],
};
pub const EMBED_TIER: Member = Member {
    key: "EMBED",
    doc: "the embedding model of semantic rules, instead of `HERMA_EMBED_MODEL_DIR`",
};
pub const MICROMODEL_TIER: Member = Member {
    key: "MICROMODEL",
    doc: "the classifier of micromodel rules",
};
pub const TIER_URL: Family<BaseUrl> = Family {
    prefix: "HERMA_",
    suffix: "_URL",
    members: &REMOTE_TIERS,
    kind: BaseUrl,
    doc: "A remote model endpoint: an OpenAI-compatible base (`…/v1`) or an Ollama base URL.",
};
pub const TIER_PROTOCOL: Family<Choice<RemoteProtocol>> = Family {
    prefix: "HERMA_",
    suffix: "_PROTOCOL",
    members: &REMOTE_TIERS,
    kind: Choice {
        default: ("openai", RemoteProtocol::OpenAi),
        others: &[("ollama", RemoteProtocol::Ollama)],
    },
    doc: "How the endpoint is spoken: `openai` (`/embeddings`, `/chat/completions`) or `ollama` (`/api/embed`, `/api/chat`).",
};
pub const TIER_MODEL: Family<OptionalText> = Family {
    prefix: "HERMA_",
    suffix: "_MODEL",
    members: &REMOTE_TIERS,
    kind: OptionalText { form: "model name" },
    doc: "The endpoint's model, required with its URL; contributor-tier models are refused. Micromodel rules use it unless they name one.",
};
pub const TIER_API_KEY: Family<Credential> = Family {
    prefix: "HERMA_",
    suffix: "_API_KEY",
    members: &REMOTE_TIERS,
    kind: Credential { min_chars: 0 },
    doc: "Bearer key for the endpoint.",
};
pub const MICROMODEL_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_MICROMODEL_TIMEOUT_MS",
    kind: Number {
        default: 2000,
        min: 50,
        max: 120_000,
    },
    doc: "How long one classifier call may take before the rule's failure policy applies.",
};

pub const TESSERA_URL: Setting<BaseUrl> = Setting {
    name: "HERMA_TESSERA_URL",
    kind: BaseUrl,
    doc: "The Tessera `herma tessera sync` and `POST /v1/admin/tessera/sync` pull governed records from (`docs/tessera.md`).",
};
pub const TESSERA_TOKEN: Setting<Credential> = Setting {
    name: "HERMA_TESSERA_TOKEN",
    kind: Credential { min_chars: 0 },
    doc: "Bearer credential for `HERMA_TESSERA_URL`.",
};
pub const TESSERA_TIMEOUT_MS: Setting<Number> = Setting {
    name: "HERMA_TESSERA_TIMEOUT_MS",
    kind: Number {
        default: 30_000,
        min: 100,
        max: 600_000,
    },
    doc: "How long one Tessera (or handshake remote) request may take before the sync stops with a resume cursor.",
};
pub const HANDSHAKE_MAX_CHARS: Setting<Number> = Setting {
    name: "HERMA_HANDSHAKE_MAX_CHARS",
    kind: Number {
        default: 4000,
        min: 16,
        max: 1_000_000,
    },
    doc: "The most characters of one context entry a remote handshake (`POST /v1/handshake`) may bring in, whatever the caller or the remote asks for.",
};

/// Every setting, by section, in the order docs and `herma config check` show them.
pub const GROUPS: &[Group] = &[
    Group {
        title: "Server",
        doc: "Where `herma serve` listens, where records live, and how it logs.",
        settings: &[
            &BIND,
            &DATABASE_URL,
            &DATABASE_POOL_SIZE,
            &PUBLIC_URL,
            &MAX_BODY_BYTES,
            &LOG,
            &LOG_FORMAT,
        ],
    },
    Group {
        title: "Connections and limits",
        doc: "What a slow or greedy client can hold: connections, time to send a request, memory for bodies, and what one caller may store (`docs/reliability.md`).",
        settings: &[
            &MAX_CONNECTIONS,
            &HEADER_READ_TIMEOUT_MS,
            &BODY_READ_TIMEOUT_MS,
            &KEEP_ALIVE_TIMEOUT_MS,
            &BODY_BUDGET_BYTES,
            &CALLER_MAX_PROVISIONS,
            &CALLER_MAX_CONTEXT_ENTRIES,
            &CALLER_MAX_STORED_BYTES,
        ],
    },
    Group {
        title: "Retention",
        doc: "How long receipts and rule outcomes are kept (`docs/operations.md`). Conversations expire after 24 hours on their own; provider health, ledgers and the governed audit trail are never pruned.",
        settings: &[&RECEIPT_RETENTION_DAYS, &OUTCOME_RETENTION_DAYS],
    },
    Group {
        title: "Access",
        doc: "The bootstrap admin, the edge in front of Herma, metrics, and the public preview.",
        settings: &[
            &ADMIN_TOKEN,
            &EDGE_SECRET,
            &METRICS_TOKEN,
            &KEY_CACHE_TTL_MS,
            &PREVIEW_RATE_PER_MINUTE,
        ],
    },
    Group {
        title: "Upstream",
        doc: "Where proxied requests go, with which key, and how long Herma waits for the upstream.",
        settings: &[
            &UPSTREAM_BASE_URL,
            &UPSTREAM_API_KEY,
            &ALLOWED_UPSTREAM_HOSTS,
            &CONVERSATION_DISABLED_PROVIDERS,
            &PROXY_MAX_BODY_BYTES,
            &UPSTREAM_CONNECT_TIMEOUT_MS,
            &UPSTREAM_HEADERS_TIMEOUT_MS,
            &UPSTREAM_IDLE_TIMEOUT_MS,
        ],
    },
    Group {
        title: "Rules and receipts",
        doc: "How much context a request may receive, how fresh a caller's rules are, and the receipt writer.",
        settings: &[
            &SHIM_MAX_CHARS,
            &RULES_CACHE_TTL_MS,
            &RECEIPT_QUEUE_CAPACITY,
            &RECEIPT_JOURNAL_DIR,
        ],
    },
    Group {
        title: "Memory",
        doc: "Entity memory and rule outcomes, extracted after each turn (`docs/memory.md`).",
        settings: &[
            &MEMORY_ENABLED,
            &MEMORY_MAX_ENTITIES,
            &MEMORY_QUEUE_CAPACITY,
        ],
    },
    Group {
        title: "Semantic and micromodel tiers",
        doc: "The models of semantic rules (tier 2) and micromodel rules (tier 3); without them those rules never fire (`docs/tiers.md`).",
        settings: &[
            &EMBED_MODEL_DIR,
            &EMBED_WINDOW_TOKENS,
            &EMBED_THREADS,
            &EMBED_PRECISION,
            &EMBED_CACHE_ENTRIES,
            &TIER_URL,
            &TIER_PROTOCOL,
            &TIER_MODEL,
            &TIER_API_KEY,
            &MICROMODEL_TIMEOUT_MS,
        ],
    },
    Group {
        title: "Typed conversations",
        doc: "Operator-funded turns (`POST /v1/conversations/turn`, `docs/conversations.md`). Read per turn, for the selected provider only: one provider's broken setting never disables another.",
        settings: &[
            &conversation::ENABLED,
            &conversation::GRANTS,
            &conversation::META_MODEL,
            &conversation::OLLAMA_MODEL,
            &conversation::OPENAI_MODEL,
            &conversation::ANTHROPIC_MODEL,
            &conversation::OPENROUTER_MODEL,
            &conversation::OPENROUTER_PROVIDER,
            &conversation::ANTHROPIC_VERSION,
            &conversation::MAX_OUTPUT,
            &conversation::SHARED_MAX_OUTPUT,
            &conversation::REASONING,
            &conversation::SHARED_REASONING,
            &conversation::GENERATION,
            &conversation::INPUT_PRICE,
            &conversation::OUTPUT_PRICE,
            &conversation::BUDGET,
            &conversation::OLLAMA_CALLS_PER_DAY,
            &conversation::CALLER_TOKENS_PER_HOUR,
            &conversation::ACCOUNT_SCOPE,
            &conversation::DESTINATION,
            &conversation::API_KEY,
            &conversation::DEPRECATED_PLAN_ALLOWLIST,
            &conversation::DEPRECATED_UNCERTAIN_FAILOVER,
        ],
    },
    Group {
        title: "Tessera and handshakes",
        doc: "Governed records from Tessera, and context entries pulled from a remote Herma.",
        settings: &[
            &TESSERA_URL,
            &TESSERA_TOKEN,
            &TESSERA_TIMEOUT_MS,
            &HANDSHAKE_MAX_CHARS,
        ],
    },
];

/// Every declaration, in table order.
pub fn all() -> impl Iterator<Item = &'static dyn Declared> {
    GROUPS
        .iter()
        .flat_map(|group| group.settings.iter().copied())
}
