//! The kinds settings come in. Shared rules: the reader hands a kind only set values (trimmed,
//! never empty, since an empty or whitespace-only value is unset) and applies the default
//! otherwise; numbers are plain decimal digits.

use std::net::SocketAddr;

use url::Url;

use super::declare::{Describe, Invalid, Kind};
use super::values::DatabaseUrl;
use crate::secret::Secret;
use crate::upstream::{Provider, normalize_host, parse_base};

/// Plain decimal digits only: `16384` yes; `+1`, `1e3`, `1_000`, `0x10`, `-1` no.
pub fn parse_decimal_u64(raw: &str) -> Result<u64, String> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{raw}` is not a plain decimal integer"));
    }
    raw.parse::<u64>()
        .map_err(|_| format!("`{raw}` is too large"))
}

/// `a`, `a or b`, `a, b or c`.
pub(super) fn listed(items: &[String]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => items.concat(),
    }
}

/// A whole number within `min..=max`.
#[derive(Clone, Copy, Debug)]
pub struct Number {
    pub default: u64,
    pub min: u64,
    pub max: u64,
}

impl Describe for Number {
    fn shown_default(&self) -> Option<String> {
        Some(self.default.to_string())
    }

    fn accepts(&self) -> String {
        format!("`{}` to `{}`", self.min, self.max)
    }
}

impl Kind for Number {
    type Value = u64;

    fn default_value(&self) -> u64 {
        self.default
    }

    fn parse(&self, raw: &str) -> Result<u64, Invalid> {
        let n = parse_decimal_u64(raw)?;
        if (self.min..=self.max).contains(&n) {
            Ok(n)
        } else {
            Err(format!("{n} is outside {}..={}", self.min, self.max).into())
        }
    }
}

/// One word of a fixed few, each standing for a value (`true`/`false`, `text`/`json`).
#[derive(Clone, Copy, Debug)]
pub struct Choice<T: 'static> {
    pub default: (&'static str, T),
    pub others: &'static [(&'static str, T)],
}

impl<T> Choice<T> {
    fn words(&self) -> Vec<&'static str> {
        std::iter::once(self.default.0)
            .chain(self.others.iter().map(|(word, _)| *word))
            .collect()
    }
}

impl<T> Describe for Choice<T> {
    fn shown_default(&self) -> Option<String> {
        Some(self.default.0.to_owned())
    }

    fn accepts(&self) -> String {
        let words: Vec<String> = self.words().iter().map(|w| format!("`{w}`")).collect();
        listed(&words)
    }
}

impl<T: Copy> Kind for Choice<T> {
    type Value = T;

    fn default_value(&self) -> T {
        self.default.1
    }

    fn parse(&self, raw: &str) -> Result<T, Invalid> {
        std::iter::once(&self.default)
            .chain(self.others)
            .find(|(word, _)| *word == raw)
            .map(|(_, value)| *value)
            .ok_or_else(|| match self.words().as_slice() {
                &[a, b] => format!("`{raw}` is neither `{a}` nor `{b}`").into(),
                _ => format!("`{raw}` is not one of {}", self.accepts()).into(),
            })
    }
}

/// A secret, unset by default and never shown; `min_chars` above 0 refuses shorter ones.
#[derive(Clone, Copy, Debug)]
pub struct Credential {
    pub min_chars: usize,
}

impl Describe for Credential {
    fn shown_default(&self) -> Option<String> {
        None
    }

    fn accepts(&self) -> String {
        match self.min_chars {
            0 => "secret".to_owned(),
            n => format!("secret, at least {n} characters"),
        }
    }

    fn show(&self, _raw: &str) -> String {
        "[set]".to_owned()
    }
}

impl Kind for Credential {
    type Value = Option<Secret>;

    fn default_value(&self) -> Option<Secret> {
        None
    }

    fn parse(&self, raw: &str) -> Result<Option<Secret>, Invalid> {
        if raw.chars().count() < self.min_chars {
            return Err(format!("must be at least {} characters", self.min_chars).into());
        }
        Ok(Some(Secret::new(raw)))
    }
}

/// An http or https base URL with a host and no credentials, query or fragment; unset by
/// default.
#[derive(Clone, Copy, Debug)]
pub struct BaseUrl;

impl Describe for BaseUrl {
    fn shown_default(&self) -> Option<String> {
        None
    }

    fn accepts(&self) -> String {
        "http(s) URL".to_owned()
    }
}

impl Kind for BaseUrl {
    type Value = Option<Url>;

    fn default_value(&self) -> Option<Url> {
        None
    }

    fn parse(&self, raw: &str) -> Result<Option<Url>, Invalid> {
        Ok(Some(parse_base(raw)?))
    }
}

/// Free text with a default.
#[derive(Clone, Copy, Debug)]
pub struct Text {
    pub default: &'static str,
    /// What the text is, for the docs (`tracing filter`).
    pub form: &'static str,
}

impl Describe for Text {
    fn shown_default(&self) -> Option<String> {
        Some(self.default.to_owned())
    }

    fn accepts(&self) -> String {
        self.form.to_owned()
    }
}

impl Kind for Text {
    type Value = String;

    fn default_value(&self) -> String {
        self.default.to_owned()
    }

    fn parse(&self, raw: &str) -> Result<String, Invalid> {
        Ok(raw.to_owned())
    }
}

/// Free text, unset by default.
#[derive(Clone, Copy, Debug)]
pub struct OptionalText {
    /// What the text is, for the docs (`directory`, `model name`).
    pub form: &'static str,
}

impl Describe for OptionalText {
    fn shown_default(&self) -> Option<String> {
        None
    }

    fn accepts(&self) -> String {
        self.form.to_owned()
    }
}

impl Kind for OptionalText {
    type Value = Option<String>;

    fn default_value(&self) -> Option<String> {
        None
    }

    fn parse(&self, raw: &str) -> Result<Option<String>, Invalid> {
        Ok(Some(raw.to_owned()))
    }
}

/// A socket address, `host:port`.
#[derive(Clone, Copy, Debug)]
pub struct Address {
    pub default: SocketAddr,
}

impl Describe for Address {
    fn shown_default(&self) -> Option<String> {
        Some(self.default.to_string())
    }

    fn accepts(&self) -> String {
        "host:port".to_owned()
    }
}

impl Kind for Address {
    type Value = SocketAddr;

    fn default_value(&self) -> SocketAddr {
        self.default
    }

    fn parse(&self, raw: &str) -> Result<SocketAddr, Invalid> {
        raw.parse().map_err(|_| {
            format!(
                "`{raw}` is not a host:port address such as {}",
                self.default
            )
            .into()
        })
    }
}

/// A [`DatabaseUrl`], a SQLite file by default. A secret: a PostgreSQL URL may carry a
/// password, so `herma config check` shows it redacted.
#[derive(Clone, Copy, Debug)]
pub struct Database {
    pub default_path: &'static str,
}

impl Database {
    fn default_url(&self) -> DatabaseUrl {
        DatabaseUrl::Sqlite(self.default_path.to_owned())
    }
}

impl Describe for Database {
    fn shown_default(&self) -> Option<String> {
        Some(self.default_url().redacted())
    }

    fn accepts(&self) -> String {
        "`sqlite://PATH` or `postgres://…`".to_owned()
    }

    fn show(&self, raw: &str) -> String {
        DatabaseUrl::parse(raw)
            .map(|url| url.redacted())
            .unwrap_or_else(|_| "[invalid]".into())
    }
}

impl Kind for Database {
    type Value = DatabaseUrl;

    fn default_value(&self) -> DatabaseUrl {
        self.default_url()
    }

    fn parse(&self, raw: &str) -> Result<DatabaseUrl, Invalid> {
        Ok(DatabaseUrl::parse(raw)?)
    }
}

/// Comma-separated host names, lowercased; no scheme, port or path.
#[derive(Clone, Copy, Debug)]
pub struct Hosts {
    pub default: &'static [&'static str],
}

impl Describe for Hosts {
    fn shown_default(&self) -> Option<String> {
        Some(self.default.join(","))
    }

    fn accepts(&self) -> String {
        "comma-separated host names".to_owned()
    }
}

impl Kind for Hosts {
    type Value = Vec<String>;

    fn default_value(&self) -> Vec<String> {
        self.default.iter().map(|host| (*host).to_owned()).collect()
    }

    fn parse(&self, raw: &str) -> Result<Vec<String>, Invalid> {
        let mut hosts = Vec::new();
        let mut refused = Vec::new();
        for host in raw.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            let host = host.to_ascii_lowercase();
            // In the form requests are compared in (`localhost.` is `localhost`, `::1` is
            // `[::1]`).
            let normal = match host.parse::<std::net::Ipv6Addr>() {
                Ok(ip) => Some(format!("[{ip}]")),
                Err(_) => normalize_host(&host),
            };
            if let Some(normal) = normal.filter(|_| {
                host.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'))
                    && !host.contains("://")
            }) {
                hosts.push(normal);
            } else {
                refused.push(format!(
                    "`{host}` is not a host name (no scheme, port or path)"
                ));
            }
        }
        if refused.is_empty() {
            Ok(hosts)
        } else {
            Err(Invalid(refused))
        }
    }
}

/// A JSON list of [`Provider`]s, each at most once; empty by default.
#[derive(Clone, Copy, Debug)]
pub struct Providers;

fn provider_names() -> Vec<&'static str> {
    Provider::ALL.into_iter().map(Provider::as_str).collect()
}

impl Describe for Providers {
    fn shown_default(&self) -> Option<String> {
        Some("[]".to_owned())
    }

    fn accepts(&self) -> String {
        let names: Vec<String> = provider_names()
            .iter()
            .map(|name| format!("`{name}`"))
            .collect();
        format!("JSON list of {}", names.join(", "))
    }
}

impl Kind for Providers {
    type Value = Vec<Provider>;

    fn default_value(&self) -> Vec<Provider> {
        Vec::new()
    }

    fn parse(&self, raw: &str) -> Result<Vec<Provider>, Invalid> {
        let Ok(serde_json::Value::Array(items)) = crate::json::parse_strict(raw.as_bytes()) else {
            return Err("must be a JSON list such as [\"anthropic\"]"
                .to_owned()
                .into());
        };
        let mut providers = Vec::new();
        let mut refused = Vec::new();
        for item in items {
            match item.as_str().and_then(Provider::parse) {
                Some(p) if !providers.contains(&p) => providers.push(p),
                Some(p) => refused.push(format!("`{}` is listed twice", p.as_str())),
                None => refused.push(format!(
                    "{item} is not a provider ({})",
                    provider_names().join(", ")
                )),
            }
        }
        if refused.is_empty() {
            Ok(providers)
        } else {
            Err(Invalid(refused))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn numbers_are_plain_decimal_digits_within_bounds() {
        let n = Number {
            default: 5,
            min: 1,
            max: 10,
        };
        assert_eq!(n.parse("10"), Ok(10));
        assert_eq!(
            n.parse("11"),
            Err(Invalid(vec!["11 is outside 1..=10".into()]))
        );
        assert_eq!(
            n.parse("1e1"),
            Err(Invalid(vec!["`1e1` is not a plain decimal integer".into()]))
        );
        assert_eq!(n.accepts(), "`1` to `10`");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn choices_name_their_words() {
        let two = Choice {
            default: ("text", 0),
            others: &[("json", 1)],
        };
        assert_eq!(two.parse("json"), Ok(1));
        assert_eq!(
            two.parse("xml"),
            Err(Invalid(vec!["`xml` is neither `text` nor `json`".into()]))
        );
        assert_eq!(two.accepts(), "`text` or `json`");
        let three = Choice {
            default: ("a", 0),
            others: &[("b", 1), ("c", 2)],
        };
        assert_eq!(three.accepts(), "`a`, `b` or `c`");
        assert_eq!(
            three.parse("d"),
            Err(Invalid(vec!["`d` is not one of `a`, `b` or `c`".into()]))
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn lists_report_every_refused_item() {
        let hosts = Hosts { default: &[] };
        assert_eq!(
            hosts.parse("ok.example, http://x, a/b"),
            Err(Invalid(vec![
                "`http://x` is not a host name (no scheme, port or path)".into(),
                "`a/b` is not a host name (no scheme, port or path)".into()
            ]))
        );
        assert_eq!(
            Providers.parse("[\"meta\", \"meta\", 3]"),
            Err(Invalid(vec![
                "`meta` is listed twice".into(),
                "3 is not a provider (meta, ollama, openai, anthropic, openrouter)".into()
            ]))
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn secrets_are_never_shown() {
        let credential = Credential { min_chars: 4 };
        assert_eq!(credential.show("hunter2"), "[set]");
        assert!(credential.parse("abc").is_err());
        let database = Database {
            default_path: "herma.db",
        };
        assert_eq!(
            database.show("postgres://u:pw@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(database.show("mysql://x"), "[invalid]");
    }
}
