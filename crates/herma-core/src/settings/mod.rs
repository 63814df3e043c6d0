//! Operator settings (`HERMA_*`), parsed from a map so every runtime reads them the same way.
//!
//! Rules shared by every setting: an empty or whitespace-only value counts as unset (the default
//! applies); numbers are plain decimal digits (no signs, exponents, separators); every invalid
//! setting is reported by name, all at once. Secrets are never shown, only whether they are set.
//!
//! Layout: [`table`] declares every setting once (name, kind, doc line) in [`table::GROUPS`];
//! [`declare`] is the shape of a declaration and [`kinds`] how each kind parses; [`Settings`]
//! reads them all through a reader that collects the errors; [`report`] and
//! [`unknown_settings`] serve `herma config check`, [`docs`] the README's tables.

pub mod conversation;
pub mod declare;
pub mod docs;
pub mod kinds;
mod read;
pub mod table;
mod values;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use url::Url;

pub use kinds::parse_decimal_u64;
pub use read::{SettingError, setting};
pub use values::{
    DatabaseUrl, EmbedPrecision, EmbedSource, LogFormat, RemoteModel, RemoteProtocol, TierSettings,
};

use crate::contributor::is_contributor_model;
use crate::secret::Secret;
use crate::upstream::UpstreamSettings;
use declare::{Declared, Member};
use read::Reader;

/// What one caller scope may store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    pub provisions: u64,
    pub context_entries: u64,
    /// Bytes of compact JSON across both collections.
    pub stored_bytes: u64,
}

/// The validated settings of one process.
#[derive(Clone, Debug)]
pub struct Settings {
    pub bind: SocketAddr,
    pub database: DatabaseUrl,
    /// PostgreSQL connections this process keeps at most.
    pub database_pool_size: u64,
    pub admin_token: Option<Secret>,
    pub edge_secret: Option<Secret>,
    /// Bearer token `GET /metrics` requires, when set.
    pub metrics_token: Option<Secret>,
    pub max_body_bytes: u64,
    /// Client connections served at once.
    pub max_connections: u64,
    /// How long a request head may take to arrive.
    pub header_read_timeout_ms: u64,
    /// How long a whole request body may take to arrive.
    pub body_read_timeout_ms: u64,
    /// How long a kept-alive connection waits for its next request.
    pub keep_alive_timeout_ms: u64,
    /// Bytes all request bodies in flight may hold together.
    pub body_budget_bytes: u64,
    /// Per-caller quotas on stored records.
    pub quotas: Quotas,
    /// Days receipts and rule outcomes are kept (0: forever).
    pub receipt_retention_days: u64,
    pub outcome_retention_days: u64,
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
    /// `HERMA_RECEIPT_JOURNAL_DIR` as given (`off` disables the journal).
    pub receipt_journal_dir: Option<String>,
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
    pub conversation: ConversationSettings,
}

/// The typed-conversation settings as `herma serve` holds them: whether turns are enabled, and
/// the raw values of the rest, parsed per turn for the selected provider only
/// (`crate::conversation::config`).
#[derive(Clone, Debug, Default)]
pub struct ConversationSettings {
    pub enabled: bool,
    pub env: ConversationEnv,
}

/// The set values of the conversation group's settings (provider keys among them), by name.
/// Its `Debug` shows nothing: keys are secrets, and a spelled-out default reads the same as an
/// unset one.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConversationEnv(BTreeMap<String, String>);

impl ConversationEnv {
    pub fn new(values: BTreeMap<String, String>) -> Self {
        Self(values)
    }

    /// The value of `name`, or `None` when unset, empty or whitespace-only.
    pub fn get(&self, name: &str) -> Option<&str> {
        setting(&self.0, name)
    }
}

impl std::fmt::Debug for ConversationEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConversationEnv(..)")
    }
}

impl Settings {
    /// Parses and validates every known setting, collecting all errors.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, Vec<SettingError>> {
        let mut reader = Reader::new(map);
        let settings = Self::read(&mut reader);
        reader.finish(settings)
    }

    /// Reads every declared setting. Errors are reported in the order of these reads.
    fn read(r: &mut Reader<'_>) -> Self {
        use table::*;

        let bind = r.get(&BIND);
        let database = r.get(&DATABASE_URL);
        let database_pool_size = r.get(&DATABASE_POOL_SIZE);
        let admin_token = r.get(&ADMIN_TOKEN);
        let edge_secret = r.get(&EDGE_SECRET);
        let metrics_token = r.get(&METRICS_TOKEN);
        let max_body_bytes = r.get(&MAX_BODY_BYTES);
        let max_connections = r.get(&MAX_CONNECTIONS);
        let header_read_timeout_ms = r.get(&HEADER_READ_TIMEOUT_MS);
        let body_read_timeout_ms = r.get(&BODY_READ_TIMEOUT_MS);
        let keep_alive_timeout_ms = r.get(&KEEP_ALIVE_TIMEOUT_MS);
        let body_budget_bytes = r.get(&BODY_BUDGET_BYTES);
        let receipt_retention_days = r.get(&RECEIPT_RETENTION_DAYS);
        let outcome_retention_days = r.get(&OUTCOME_RETENTION_DAYS);
        let quotas = Quotas {
            provisions: r.get(&CALLER_MAX_PROVISIONS),
            context_entries: r.get(&CALLER_MAX_CONTEXT_ENTRIES),
            stored_bytes: r.get(&CALLER_MAX_STORED_BYTES),
        };
        let key_cache_ttl_ms = r.get(&KEY_CACHE_TTL_MS);
        let shim_max_chars = r.get(&SHIM_MAX_CHARS);
        let handshake_max_chars = r.get(&HANDSHAKE_MAX_CHARS);
        let tessera_timeout_ms = r.get(&TESSERA_TIMEOUT_MS);
        let proxy_max_body_bytes = r.get(&PROXY_MAX_BODY_BYTES);
        // A body within its route's limit must fit the budget, or it could never be read.
        let largest_body = max_body_bytes.max(proxy_max_body_bytes);
        if body_budget_bytes < largest_body {
            r.fail(
                BODY_BUDGET_BYTES.name,
                format!(
                    "{body_budget_bytes} is smaller than the largest body a route accepts ({largest_body}, the larger of {} and {}): such a body could never be read; raise it or lower those",
                    MAX_BODY_BYTES.name, PROXY_MAX_BODY_BYTES.name
                ),
            );
        }
        let upstream_connect_timeout_ms = r.get(&UPSTREAM_CONNECT_TIMEOUT_MS);
        let upstream_headers_timeout_ms = r.get(&UPSTREAM_HEADERS_TIMEOUT_MS);
        let upstream_idle_timeout_ms = r.get(&UPSTREAM_IDLE_TIMEOUT_MS);
        let rules_cache_ttl_ms = r.get(&RULES_CACHE_TTL_MS);
        let receipt_queue_capacity = r.get(&RECEIPT_QUEUE_CAPACITY);
        let receipt_journal_dir = r.get(&RECEIPT_JOURNAL_DIR);
        let memory_max_entities = r.get(&MEMORY_MAX_ENTITIES);
        let memory_queue_capacity = r.get(&MEMORY_QUEUE_CAPACITY);
        let preview_rate_per_minute = r.get(&PREVIEW_RATE_PER_MINUTE);
        let embed_window_tokens = r.get(&EMBED_WINDOW_TOKENS);
        let embed_threads = r.get(&EMBED_THREADS);
        let embed_cache_entries = r.get(&EMBED_CACHE_ENTRIES);
        let embed_precision = r.get(&EMBED_PRECISION);
        let micromodel_timeout_ms = r.get(&MICROMODEL_TIMEOUT_MS);
        let public_url = r.get(&PUBLIC_URL).map(without_trailing_slash);
        let memory_enabled = r.get(&MEMORY_ENABLED);

        let upstream = UpstreamSettings {
            base: r.get(&UPSTREAM_BASE_URL),
            key: r.get(&UPSTREAM_API_KEY),
            allowed_hosts: r.get(&ALLOWED_UPSTREAM_HOSTS),
            disabled_providers: r.get(&CONVERSATION_DISABLED_PROVIDERS),
        };

        let remote_embed = remote(r, &EMBED_TIER);
        let micromodel = remote(r, &MICROMODEL_TIER);
        let embed = match (r.get(&EMBED_MODEL_DIR), remote_embed) {
            (Some(_), Some(_)) => {
                r.fail(
                    EMBED_MODEL_DIR.name,
                    format!(
                        "set either {} or {}, not both",
                        EMBED_MODEL_DIR.name,
                        TIER_URL.name(&EMBED_TIER)
                    ),
                );
                None
            }
            (Some(dir), None) => Some(EmbedSource::Local { dir }),
            (None, Some(model)) => Some(EmbedSource::Remote(model)),
            (None, None) => None,
        };
        let tiers = TierSettings {
            embed,
            embed_window_tokens,
            embed_threads,
            embed_cache_entries,
            embed_precision,
            micromodel,
            micromodel_timeout_ms,
        };

        let tessera_url = r.get(&TESSERA_URL).map(without_trailing_slash);
        let tessera_token = r.get(&TESSERA_TOKEN);
        let log_filter = r.get(&LOG);
        let log_format = r.get(&LOG_FORMAT);
        let conversation = ConversationSettings {
            enabled: r.get(&conversation::ENABLED),
            env: ConversationEnv(r.keep(conversation_group())),
        };

        Self {
            bind,
            database,
            database_pool_size,
            admin_token,
            edge_secret,
            metrics_token,
            max_body_bytes,
            max_connections,
            header_read_timeout_ms,
            body_read_timeout_ms,
            keep_alive_timeout_ms,
            body_budget_bytes,
            quotas,
            receipt_retention_days,
            outcome_retention_days,
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
            receipt_journal_dir,
            memory_enabled,
            memory_max_entities,
            memory_queue_capacity,
            preview_rate_per_minute,
            public_url,
            tiers,
            tessera_url,
            tessera_token,
            tessera_timeout_ms,
            conversation,
        }
    }
}

/// The conversation group's declarations but `HERMA_CONVERSATION_ENABLED`, which is parsed at
/// start-up.
fn conversation_group() -> impl Iterator<Item = &'static dyn Declared> {
    table::GROUPS
        .iter()
        .filter(|group| group.title == "Typed conversations")
        .flat_map(|group| group.settings.iter().copied())
        .filter(|declared| declared.title() != conversation::ENABLED.name)
}

/// A tier's remote endpoint, when its URL is set: the model is required with it and may not be
/// contributor tier.
fn remote(r: &mut Reader<'_>, tier: &Member) -> Option<RemoteModel> {
    use table::{TIER_API_KEY, TIER_MODEL, TIER_PROTOCOL, TIER_URL};

    let protocol = r.member(&TIER_PROTOCOL, tier);
    let base = without_trailing_slash(r.member(&TIER_URL, tier)?);
    let Some(model) = r.member(&TIER_MODEL, tier) else {
        r.fail(
            &TIER_MODEL.name(tier),
            format!("is required with {}", TIER_URL.name(tier)),
        );
        return None;
    };
    if is_contributor_model(&model) {
        r.fail(
            &TIER_MODEL.name(tier),
            format!("`{model}` is contributor tier and is refused"),
        );
        return None;
    }
    Some(RemoteModel {
        protocol,
        base,
        model,
        key: r.member(&TIER_API_KEY, tier),
    })
}

/// A base URL as endpoints are joined to it: without the trailing slash.
fn without_trailing_slash(url: Url) -> String {
    url.as_str().trim_end_matches('/').to_owned()
}

/// One line of `herma config check`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingReport {
    pub name: String,
    /// The effective value as it may be shown: secrets are `[set]`/`unset`, URLs lose passwords.
    pub shown: String,
    pub from_default: bool,
}

/// The effective value of every known setting, redacted, in table order; the families of one
/// member list side by side are shown member by member (`HERMA_EMBED_URL`, `HERMA_EMBED_MODEL`,
/// …, then `HERMA_MICROMODEL_URL`, …).
pub fn report(map: &BTreeMap<String, String>) -> Vec<SettingReport> {
    let declared: Vec<&dyn Declared> = table::all().collect();
    let mut lines = Vec::new();
    for run in declared.chunk_by(|a, b| same_members(*a, *b)) {
        let names: Vec<Vec<String>> = run.iter().map(|d| d.names()).collect();
        let members = names.first().map_or(0, Vec::len);
        for member in 0..members {
            for (declared, names) in run.iter().zip(&names) {
                let Some(name) = names.get(member) else {
                    continue;
                };
                let kind = declared.describe();
                let value = setting(map, name);
                let shown = match value {
                    None => kind.shown_default().unwrap_or_else(|| "unset".to_owned()),
                    Some(raw) => kind.show(raw),
                };
                lines.push(SettingReport {
                    name: name.clone(),
                    shown,
                    from_default: value.is_none(),
                });
            }
        }
    }
    lines
}

/// Whether both are families over the same members.
fn same_members(a: &dyn Declared, b: &dyn Declared) -> bool {
    a.members()
        .zip(b.members())
        .is_some_and(|(a, b)| a.placeholder == b.placeholder)
}

/// `HERMA_*` names in `map` that Herma does not know (likely typos).
pub fn unknown_settings(map: &BTreeMap<String, String>) -> Vec<String> {
    let known: Vec<String> = table::all().flat_map(|d| d.names()).collect();
    map.keys()
        .filter(|name| name.starts_with("HERMA_"))
        .filter(|name| !known.contains(name))
        .filter(|name| !name.starts_with("HERMA_TEST_"))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Provider;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn defaults_need_no_configuration() {
        let s = Settings::from_map(&BTreeMap::new()).unwrap();
        assert_eq!(s.bind.to_string(), "127.0.0.1:7730");
        assert_eq!(s.database, DatabaseUrl::Sqlite("herma.db".into()));
        assert!(s.admin_token.is_none());
        assert_eq!(s.key_cache_ttl_ms, 1000);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn connection_and_body_limits_have_defaults_and_the_budget_must_hold_the_largest_body() {
        let s = Settings::from_map(&BTreeMap::new()).unwrap();
        assert_eq!(
            (
                s.max_connections,
                s.header_read_timeout_ms,
                s.body_read_timeout_ms,
                s.keep_alive_timeout_ms,
                s.body_budget_bytes
            ),
            (1024, 10_000, 60_000, 75_000, 256 * 1024 * 1024)
        );
        let errors = Settings::from_map(&map(&[
            ("HERMA_MAX_BODY_BYTES", "4096"),
            ("HERMA_PROXY_MAX_BODY_BYTES", "8192"),
            ("HERMA_BODY_BUDGET_BYTES", "2048"),
        ]))
        .unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].name, "HERMA_BODY_BUDGET_BYTES");
        assert!(errors[0].detail.contains("(8192,"), "{}", errors[0].detail);
        let fits = Settings::from_map(&map(&[
            ("HERMA_MAX_BODY_BYTES", "4096"),
            ("HERMA_PROXY_MAX_BODY_BYTES", "4096"),
            ("HERMA_BODY_BUDGET_BYTES", "4096"),
        ]))
        .unwrap();
        assert_eq!(fits.body_budget_bytes, 4096);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn whitespace_values_are_unset() {
        let s =
            Settings::from_map(&map(&[("HERMA_BIND", "  "), ("HERMA_ADMIN_TOKEN", "\t")])).unwrap();
        assert_eq!(s.bind, table::BIND.kind.default);
        assert!(s.admin_token.is_none());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn upstream_settings_are_validated() {
        let s = Settings::from_map(&map(&[
            ("HERMA_UPSTREAM_BASE_URL", "https://api.anthropic.com"),
            (
                "HERMA_ALLOWED_UPSTREAM_HOSTS",
                "LocalHost., ollama.internal, ::1, [::1]",
            ),
            (
                "HERMA_CONVERSATION_DISABLED_PROVIDERS",
                "[\"anthropic\",\"openrouter\"]",
            ),
        ]))
        .unwrap();
        assert_eq!(
            s.upstream.allowed_hosts,
            ["localhost", "ollama.internal", "[::1]", "[::1]"]
        );
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
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn unknown_herma_settings_are_listed() {
        let unknown = unknown_settings(&map(&[
            ("HERMA_BIN", "x"),
            ("HERMA_BIND", "1.2.3.4:5"),
            ("PATH", "/"),
        ]));
        assert_eq!(unknown, ["HERMA_BIN"]);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn from_map_reads_every_declared_setting_once_and_nothing_else() {
        // Both remote endpoints set, so none of their settings is skipped.
        let set = map(&[
            ("HERMA_EMBED_URL", "http://localhost:8000/v1"),
            ("HERMA_EMBED_MODEL", "e"),
            ("HERMA_MICROMODEL_URL", "http://localhost:8000/v1"),
            ("HERMA_MICROMODEL_MODEL", "m"),
        ]);
        let mut reader = Reader::new(&set);
        Settings::read(&mut reader);
        let mut read = reader.names().to_vec();
        read.sort();
        let mut declared: Vec<String> = table::all().flat_map(|d| d.names()).collect();
        declared.sort();
        let mut unique = declared.clone();
        unique.dedup();
        assert_eq!(declared, unique, "every name is declared once");
        assert_eq!(read, declared);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_shown_defaults_are_valid_and_mean_the_defaults() {
        let defaults = Settings::from_map(&BTreeMap::new()).unwrap();
        let mut explicit = BTreeMap::new();
        for declared in table::all() {
            if let Some(shown) = declared.describe().shown_default() {
                for name in declared.names() {
                    explicit.insert(name, shown.clone());
                }
            }
        }
        let spelled_out = Settings::from_map(&explicit).unwrap();
        assert_eq!(format!("{spelled_out:?}"), format!("{defaults:?}"));
        let shown = |map: &BTreeMap<String, String>| -> Vec<String> {
            report(map).into_iter().map(|line| line.shown).collect()
        };
        assert_eq!(shown(&explicit), shown(&BTreeMap::new()));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn family_members_are_reported_and_known() {
        let set = map(&[
            ("HERMA_MICROMODEL_API_KEY", "sk-classifier"),
            ("HERMA_MICROMODEL_PROTOCOL", "ollama"),
        ]);
        let lines = report(&set);
        let shown = |name: &str| {
            lines
                .iter()
                .find(|line| line.name == name)
                .map(|line| (line.shown.as_str(), line.from_default))
        };
        assert_eq!(shown("HERMA_MICROMODEL_API_KEY"), Some(("[set]", false)));
        assert_eq!(shown("HERMA_MICROMODEL_PROTOCOL"), Some(("ollama", false)));
        assert_eq!(shown("HERMA_EMBED_PROTOCOL"), Some(("openai", true)));
        assert_eq!(shown("HERMA_EMBED_URL"), Some(("unset", true)));
        assert!(unknown_settings(&set).is_empty());
        let tiers: Vec<&str> = lines
            .iter()
            .map(|line| line.name.as_str())
            .filter(|name| name.starts_with("HERMA_EMBED_") || name.starts_with("HERMA_MICRO"))
            .collect();
        assert_eq!(
            tiers,
            [
                "HERMA_EMBED_MODEL_DIR",
                "HERMA_EMBED_WINDOW_TOKENS",
                "HERMA_EMBED_THREADS",
                "HERMA_EMBED_PRECISION",
                "HERMA_EMBED_CACHE_ENTRIES",
                "HERMA_EMBED_URL",
                "HERMA_EMBED_PROTOCOL",
                "HERMA_EMBED_MODEL",
                "HERMA_EMBED_API_KEY",
                "HERMA_MICROMODEL_URL",
                "HERMA_MICROMODEL_PROTOCOL",
                "HERMA_MICROMODEL_MODEL",
                "HERMA_MICROMODEL_API_KEY",
                "HERMA_MICROMODEL_TIMEOUT_MS",
            ],
            "a family's members are shown member by member"
        );
    }
}
