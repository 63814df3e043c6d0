//! Choosing where a proxied request goes and with which credential — decided before any byte
//! is sent.
//!
//! The base comes from `X-Upstream-Base-Url` / `X-Herma-Upstream-Url`, else the operator's
//! `HERMA_UPSTREAM_BASE_URL`. Its host must be on `HERMA_ALLOWED_UPSTREAM_HOSTS` (the operator's
//! own base host is implicitly allowed). The credential is the caller's `X-Upstream-Api-Key`,
//! else the operator's `HERMA_UPSTREAM_API_KEY` — but only toward the operator's configured
//! origin; it is never sent anywhere else. A paused provider (`HERMA_CONVERSATION_DISABLED_PROVIDERS`)
//! blocks the operator key for its exact hosts.
//!
//! Host names are compared and sent in one normal form ([`normalize_host`]): lowercase, IDNA
//! applied as the URL parser does, one trailing dot (the DNS root) removed — so `localhost.` and
//! `LOCALHOST` are `localhost`. A name that promises loopback ([`promises_loopback`]) must
//! resolve only to loopback addresses ([`resolution_keeps_promise`]); the HTTP adapter checks
//! that on every resolution.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use url::Url;

use crate::problem::{Problem, ProblemCode};
use crate::secret::Secret;
use crate::wire::Protocol;

pub const BASE_URL_HEADERS: [&str; 2] = ["x-upstream-base-url", "x-herma-upstream-url"];
pub const API_KEY_HEADER: &str = "x-upstream-api-key";

/// Operator-funded providers whose keys an operator can pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Meta,
    Ollama,
    Openai,
    Anthropic,
    Openrouter,
}

impl Provider {
    pub const ALL: [Provider; 5] = [
        Provider::Meta,
        Provider::Ollama,
        Provider::Openai,
        Provider::Anthropic,
        Provider::Openrouter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Meta => "meta",
            Provider::Ollama => "ollama",
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Openrouter => "openrouter",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == raw)
    }

    /// The provider behind an exact host. Substrings and look-alikes are never guessed.
    pub fn for_host(host: &str) -> Option<Self> {
        match host {
            "api.meta.ai" => Some(Provider::Meta),
            "ollama.com" => Some(Provider::Ollama),
            "api.openai.com" => Some(Provider::Openai),
            "api.anthropic.com" => Some(Provider::Anthropic),
            "openrouter.ai" => Some(Provider::Openrouter),
            _ => None,
        }
    }
}

/// The operator's upstream settings.
#[derive(Clone, Debug, Default)]
pub struct UpstreamSettings {
    pub base: Option<Url>,
    pub key: Option<Secret>,
    /// Lowercase host names.
    pub allowed_hosts: Vec<String>,
    pub disabled_providers: Vec<Provider>,
}

/// Whose credential goes upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    Caller,
    Operator,
    None,
}

/// Where the request goes.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    pub url: String,
    pub host: String,
    /// `(header name, value)`, as the protocol sends a key (`Protocol::credential`).
    pub credential: Option<(&'static str, Secret)>,
    pub credential_source: CredentialSource,
}

impl std::fmt::Debug for UpstreamTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTarget")
            .field("url", &self.url)
            .field("credential_source", &self.credential_source)
            .finish()
    }
}

/// What the request asks for.
#[derive(Clone, Copy, Debug)]
pub struct UpstreamAsk<'a> {
    pub protocol: Protocol,
    /// The path after Herma's host (`/v1/messages`), and the query string if any (`beta=true`).
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub base_header: Option<&'a str>,
    pub key_header: Option<&'a str>,
}

/// A host name as Herma compares and sends it: lowercase, IDNA to ASCII (`bücher.example` →
/// `xn--bcher-kva.example`) and IPv4 forms made canonical, as the URL parser does for `http`
/// and `https`; then one trailing dot, the DNS root, removed (`localhost.` → `localhost`), so
/// the fully qualified spelling of an allowlisted name is that name and is never handed to an
/// outside resolver as a different one. Only one: `localhost..` stays `localhost.`. `None` when
/// `raw` is not a host.
pub fn normalize_host(raw: &str) -> Option<String> {
    let host = match url::Host::parse(raw).ok()? {
        url::Host::Domain(domain) => match domain.strip_suffix('.') {
            Some(stripped) => stripped.to_owned(),
            None => domain,
        },
        ip => ip.to_string(),
    };
    (!host.is_empty()).then_some(host)
}

/// Whether a (normalized) host name promises a loopback destination: `localhost` and every name
/// under `.localhost` (RFC 6761 §6.3).
pub fn promises_loopback(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

/// Whether the addresses `host` resolved to keep what its name promises: a loopback name only
/// loopback addresses (an IPv4-mapped `::ffff:127.0.0.1` counts); other names promise nothing
/// here (the allowlist decided them).
pub fn resolution_keeps_promise(host: &str, addresses: &[IpAddr]) -> bool {
    !promises_loopback(host)
        || addresses
            .iter()
            .all(|address| address.to_canonical().is_loopback())
}

/// The one value a caller's upstream headers state for `names` (the base URL headers, or the
/// key header), from the request's `headers` (lowercase names). The same value sent more than
/// once is that value; different values are refused — which one a reader takes would decide
/// where the request goes, or with which key. Blank values count as absent.
pub fn one_header_value<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    names: &[&str],
) -> Result<Option<&'h str>, Problem> {
    let mut found: Option<&'h str> = None;
    for (name, value) in headers {
        let value = value.trim();
        if value.is_empty() || !names.contains(&name) {
            continue;
        }
        match found {
            Some(seen) if seen != value => {
                let spelled: Vec<String> = names.iter().map(|n| spell(n)).collect();
                return Err(refused(
                    ProblemCode::MalformedRequest,
                    format!("{} name different values; send one", spelled.join(" and ")),
                ));
            }
            _ => found = Some(value),
        }
    }
    Ok(found)
}

/// A header name as its documentation spells it (`x-upstream-base-url` → `X-Upstream-Base-Url`).
fn spell(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

fn refused(code: ProblemCode, detail: String) -> Problem {
    Problem::new(code, detail)
}

/// Parses a base URL: http or https, a host, no credentials, no query or fragment. The host is
/// normalized ([`normalize_host`]): the URL is the one requests are sent to.
pub fn parse_base(raw: &str) -> Result<Url, String> {
    let mut url = Url::parse(raw.trim()).map_err(|e| format!("`{raw}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{raw}` must be http or https"));
    }
    let host = url
        .host_str()
        .and_then(normalize_host)
        .ok_or_else(|| format!("`{raw}` has no host"))?;
    if url.host_str() != Some(host.as_str()) {
        url.set_host(Some(&host))
            .map_err(|e| format!("`{raw}` has no usable host: {e}"))?;
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("an upstream URL must not carry credentials; use the API key setting".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("`{raw}` must not have a query or fragment"));
    }
    Ok(url)
}

/// `base` + `path`, where a base ending in `/v1` and one without it reach the same upstream
/// path (`http://h/v1` + `/v1/chat/completions` = `http://h/v1/chat/completions`).
pub fn join(base: &Url, path: &str, query: Option<&str>) -> String {
    let mut prefix = base.as_str().trim_end_matches('/').to_owned();
    let rest = if prefix.ends_with("/v1") {
        path.strip_prefix("/v1").unwrap_or(path)
    } else {
        path
    };
    prefix.push_str(rest);
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        prefix.push('?');
        prefix.push_str(q);
    }
    prefix
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Decides the destination and credential, or refuses before anything is sent.
pub fn resolve(
    settings: &UpstreamSettings,
    ask: &UpstreamAsk<'_>,
) -> Result<UpstreamTarget, Problem> {
    let (base, from_caller) = match ask.base_header.map(str::trim).filter(|s| !s.is_empty()) {
        Some(raw) => (
            parse_base(raw).map_err(|e| {
                refused(
                    ProblemCode::ValidationFailed,
                    format!("X-Upstream-Base-Url: {e}"),
                )
            })?,
            true,
        ),
        None => match &settings.base {
            Some(base) => (base.clone(), false),
            None => {
                return Err(refused(
                    ProblemCode::UpstreamRequired,
                    "no upstream: send X-Upstream-Base-Url, or have the operator set HERMA_UPSTREAM_BASE_URL".into(),
                ));
            }
        },
    };
    // Normalized by `parse_base` (the operator's base too).
    let host = base.host_str().unwrap_or_default().to_owned();
    let operator_origin = settings
        .base
        .as_ref()
        .is_some_and(|op| same_origin(op, &base));
    if from_caller && !operator_origin && !settings.allowed_hosts.contains(&host) {
        return Err(refused(
            ProblemCode::UpstreamHostRefused,
            format!("upstream host `{host}` is not in HERMA_ALLOWED_UPSTREAM_HOSTS"),
        ));
    }
    let send_key = |key: &str| {
        let (header, value) = ask.protocol.credential(key);
        (header, Secret::new(value))
    };
    let caller_key = ask.key_header.map(str::trim).filter(|s| !s.is_empty());
    if caller_key.is_some_and(|k| k.starts_with(crate::key::KEY_PREFIX)) {
        return Err(refused(
            ProblemCode::ValidationFailed,
            "X-Upstream-Api-Key carries a Herma key; send the upstream provider's key (Herma keys never leave Herma)".into(),
        ));
    }
    let (credential, credential_source) = match caller_key {
        Some(key) => (Some(send_key(key)), CredentialSource::Caller),
        None => match (&settings.key, operator_origin) {
            (Some(key), true) => {
                if let Some(provider) =
                    Provider::for_host(&host).filter(|p| settings.disabled_providers.contains(p))
                {
                    return Err(refused(
                        ProblemCode::ProviderOperatorDisabled,
                        format!(
                            "the operator has paused {} for operator-funded traffic; send X-Upstream-Api-Key to use your own key",
                            provider.as_str()
                        ),
                    ));
                }
                (Some(send_key(key.expose())), CredentialSource::Operator)
            }
            // The operator key is bound to its origin: elsewhere the request goes without it.
            _ => (None, CredentialSource::None),
        },
    };
    Ok(UpstreamTarget {
        url: join(&base, ask.path, ask.query),
        host,
        credential,
        credential_source,
    })
}

/// Request headers that are not forwarded: hop-by-hop headers, framing Herma recomputes,
/// credentials (Herma's key must never leave), Herma's own and the edge's headers, the client's
/// address as proxies and CDNs report it, browser metadata, and `accept-encoding` (Herma reads
/// usage, so it asks for uncompressed bodies). Headers named by `Connection` are hop-by-hop too;
/// see [`connection_tokens`].
pub fn forward_request_header(name: &str) -> bool {
    !(matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "trailers"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "authorization"
            | "x-api-key"
            | "cookie"
            | "accept-encoding"
            | "x-edge-auth"
            | "forwarded"
            | "via"
            | "x-real-ip"
            | "true-client-ip"
            | "x-client-ip"
            | "x-cluster-client-ip"
            | "fastly-client-ip"
    ) || name.starts_with("x-herma-")
        || name.starts_with("x-upstream-")
        || name.starts_with("x-forwarded-")
        || name.starts_with("cf-")
        || name.starts_with("sec-fetch-"))
}

/// Response headers that are not relayed: hop-by-hop, framing, cookies, and anything claiming
/// to be Herma's own (`x-herma-*`: only Herma sets those).
pub fn relay_response_header(name: &str) -> bool {
    !(matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "trailers"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
            | "set-cookie"
    ) || name.starts_with("x-herma-"))
}

/// The header names listed in a `Connection` header value (lowercase): hop-by-hop by RFC 9110.
pub fn connection_tokens(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn two_different_upstreams_or_keys_are_refused_and_one_repeated_is_one() {
        let base = |pairs: &[(&'static str, &'static str)]| {
            one_header_value(pairs.iter().copied(), &BASE_URL_HEADERS)
        };
        assert_eq!(base(&[]).unwrap(), None);
        assert_eq!(
            base(&[("x-herma-upstream-url", " http://localhost:1 ")]).unwrap(),
            Some("http://localhost:1")
        );
        assert_eq!(
            base(&[
                ("x-upstream-base-url", "http://localhost:1"),
                ("x-herma-upstream-url", "http://localhost:1"),
                ("x-upstream-base-url", ""),
            ])
            .unwrap(),
            Some("http://localhost:1")
        );
        let err = base(&[
            ("x-upstream-base-url", "http://localhost:1"),
            ("x-herma-upstream-url", "http://evil.example"),
        ])
        .unwrap_err();
        assert_eq!(err.code, ProblemCode::MalformedRequest);
        assert!(
            err.detail
                .contains("X-Upstream-Base-Url and X-Herma-Upstream-Url"),
            "{}",
            err.detail
        );
        let keys = one_header_value(
            [
                ("x-upstream-api-key", "sk-a"),
                ("x-upstream-api-key", "sk-b"),
            ],
            &[API_KEY_HEADER],
        )
        .unwrap_err();
        assert!(
            keys.detail.contains("X-Upstream-Api-Key"),
            "{}",
            keys.detail
        );
        assert!(!keys.detail.contains("sk-"), "values are never echoed");
    }

    use super::*;

    fn settings() -> UpstreamSettings {
        UpstreamSettings {
            base: Some(parse_base("https://api.anthropic.com").unwrap()),
            key: Some(Secret::new("sk-operator")),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into()],
            disabled_providers: vec![],
        }
    }

    fn ask<'a>(protocol: Protocol, base: Option<&'a str>, key: Option<&'a str>) -> UpstreamAsk<'a> {
        UpstreamAsk {
            protocol,
            path: protocol.path(),
            query: None,
            base_header: base,
            key_header: key,
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn bases_with_and_without_v1_reach_the_same_path() {
        for base in [
            "http://localhost:11434",
            "http://localhost:11434/",
            "http://localhost:11434/v1",
            "http://localhost:11434/v1/",
        ] {
            assert_eq!(
                join(&parse_base(base).unwrap(), "/v1/chat/completions", None),
                "http://localhost:11434/v1/chat/completions"
            );
        }
        assert_eq!(
            join(
                &parse_base("https://openrouter.ai/api/v1").unwrap(),
                "/v1/chat/completions",
                None
            ),
            "https://openrouter.ai/api/v1/chat/completions"
        );
        assert_eq!(
            join(
                &parse_base("https://gw.example/api").unwrap(),
                "/v1/messages",
                Some("beta=true")
            ),
            "https://gw.example/api/v1/messages?beta=true"
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_operator_key_goes_only_to_its_origin() {
        let own = resolve(&settings(), &ask(Protocol::Messages, None, None)).unwrap();
        assert_eq!(own.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(own.credential_source, CredentialSource::Operator);
        assert_eq!(
            own.credential.as_ref().map(|(h, v)| (*h, v.expose())),
            Some(("x-api-key", "sk-operator"))
        );
        let elsewhere = resolve(
            &settings(),
            &ask(Protocol::Messages, Some("http://localhost:8080"), None),
        )
        .unwrap();
        assert_eq!(
            (elsewhere.credential.is_none(), elsewhere.credential_source),
            (true, CredentialSource::None)
        );
        let callers = resolve(
            &settings(),
            &ask(
                Protocol::ChatCompletions,
                Some("http://127.0.0.1:9"),
                Some("sk-caller"),
            ),
        )
        .unwrap();
        assert_eq!(
            callers.credential.as_ref().map(|(h, v)| (*h, v.expose())),
            Some(("authorization", "Bearer sk-caller"))
        );
        // The operator's own origin named explicitly still gets the operator key.
        let explicit = resolve(
            &settings(),
            &ask(
                Protocol::Messages,
                Some("https://api.anthropic.com/v1"),
                None,
            ),
        )
        .unwrap();
        assert_eq!(explicit.credential_source, CredentialSource::Operator);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn hosts_off_the_allowlist_are_refused() {
        for base in [
            "https://evil.example",
            "http://api.anthropic.com",
            "https://api.anthropic.com:8443",
            "http://localhost.evil.example",
        ] {
            let err =
                resolve(&settings(), &ask(Protocol::Messages, Some(base), Some("k"))).unwrap_err();
            assert_eq!(err.code, ProblemCode::UpstreamHostRefused, "{base}");
        }
        for bad in [
            "ftp://localhost",
            "http://user:pw@localhost",
            "not a url",
            "http://localhost?x=1",
        ] {
            assert_eq!(
                resolve(&settings(), &ask(Protocol::Messages, Some(bad), None))
                    .unwrap_err()
                    .code,
                ProblemCode::ValidationFailed,
                "{bad}"
            );
        }
        let none = UpstreamSettings::default();
        assert_eq!(
            resolve(&none, &ask(Protocol::Messages, None, None))
                .unwrap_err()
                .code,
            ProblemCode::UpstreamRequired
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn host_names_are_normalized_before_the_allowlist() {
        for (raw, normal) in [
            ("localhost", Some("localhost")),
            ("localhost.", Some("localhost")),
            ("LOCALHOST", Some("localhost")),
            ("LocalHost.", Some("localhost")),
            ("localhost..", Some("localhost.")),
            ("Api.OpenAI.com.", Some("api.openai.com")),
            ("bücher.example", Some("xn--bcher-kva.example")),
            ("127.0.0.1", Some("127.0.0.1")),
            ("127.1", Some("127.0.0.1")),
            ("[::1]", Some("[::1]")),
            (".", None),
            ("", None),
        ] {
            assert_eq!(normalize_host(raw).as_deref(), normal, "{raw}");
        }
        for (base, sent_to) in [
            (
                "http://localhost.:8080",
                "http://localhost:8080/v1/messages",
            ),
            (
                "http://LOCALHOST:8080/v1",
                "http://localhost:8080/v1/messages",
            ),
            (
                "http://LocalHost.:8080/",
                "http://localhost:8080/v1/messages",
            ),
        ] {
            let target = resolve(&settings(), &ask(Protocol::Messages, Some(base), None)).unwrap();
            assert_eq!(
                (target.url.as_str(), target.host.as_str()),
                (sent_to, "localhost"),
                "{base}"
            );
        }
        for base in ["http://localhost..:8080", "http://localhost.localdomain"] {
            assert_eq!(
                resolve(&settings(), &ask(Protocol::Messages, Some(base), None))
                    .unwrap_err()
                    .code,
                ProblemCode::UpstreamHostRefused,
                "{base}"
            );
        }
        // The operator's own origin spelled with the root dot is still its origin.
        let own = resolve(
            &settings(),
            &ask(Protocol::Messages, Some("https://API.anthropic.com."), None),
        )
        .unwrap();
        assert_eq!(own.credential_source, CredentialSource::Operator);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_loopback_name_must_resolve_only_to_loopback() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (host, addresses, kept) in [
            ("localhost", vec!["127.0.0.1", "::1"], true),
            ("localhost", vec!["127.0.0.53"], true),
            ("localhost", vec!["::ffff:127.0.0.1"], true),
            ("api.localhost", vec!["127.0.0.1"], true),
            ("localhost", vec!["93.184.216.34"], false),
            ("localhost", vec!["127.0.0.1", "10.0.0.1"], false),
            ("dev.localhost", vec!["::ffff:93.184.216.34"], false),
            ("localhost", vec!["0.0.0.0"], false),
            ("ollama.internal", vec!["10.0.0.1"], true),
            ("localhost.evil.example", vec!["93.184.216.34"], true),
        ] {
            let addresses: Vec<IpAddr> = addresses.into_iter().map(ip).collect();
            assert_eq!(
                resolution_keeps_promise(host, &addresses),
                kept,
                "{host} → {addresses:?}"
            );
        }
        assert!(promises_loopback("localhost") && promises_loopback("a.b.localhost"));
        assert!(!promises_loopback("notlocalhost") && !promises_loopback("localhost.evil.example"));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_herma_key_is_never_accepted_as_the_upstream_key() {
        let err = resolve(
            &settings(),
            &ask(
                Protocol::Messages,
                Some("http://localhost:1"),
                Some("hmk_0123456789abcdef_00"),
            ),
        )
        .unwrap_err();
        assert_eq!(err.code, ProblemCode::ValidationFailed);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_paused_provider_blocks_only_the_operator_key() {
        let mut s = settings();
        s.disabled_providers = vec![Provider::Anthropic];
        assert_eq!(
            resolve(&s, &ask(Protocol::Messages, None, None))
                .unwrap_err()
                .code,
            ProblemCode::ProviderOperatorDisabled
        );
        assert!(
            resolve(&s, &ask(Protocol::Messages, None, Some("mine"))).is_ok(),
            "a caller's own key is not paused"
        );
        assert_eq!(Provider::for_host("api.anthropic.com.evil"), None);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn herma_credentials_and_hop_by_hop_headers_never_go_upstream() {
        for name in [
            "authorization",
            "x-api-key",
            "cookie",
            "x-herma-harness",
            "x-upstream-api-key",
            "connection",
            "host",
            "accept-encoding",
            "x-edge-auth",
        ] {
            assert!(!forward_request_header(name), "{name}");
        }
        for name in [
            "anthropic-version",
            "anthropic-beta",
            "openai-beta",
            "content-type",
            "x-claude-code-session-id",
            "user-agent",
        ] {
            assert!(forward_request_header(name), "{name}");
        }
        assert!(!relay_response_header("transfer-encoding") && relay_response_header("request-id"));
        assert!(
            !relay_response_header("x-herma-receipt"),
            "only Herma sets its own headers"
        );
        for name in [
            "cf-connecting-ip",
            "x-real-ip",
            "true-client-ip",
            "x-forwarded-for",
        ] {
            assert!(
                !forward_request_header(name),
                "{name}: the client's address stays here"
            );
        }
        assert_eq!(
            connection_tokens("keep-alive, X-Secret-Hop"),
            ["keep-alive", "x-secret-hop"]
        );
    }
}
