//! Caller scopes and record identifiers.
//!
//! Every stored row belongs to exactly one caller scope: `key:<key_id>` for a key's own records,
//! or `system_builtin` for the starters shipped with Herma (writable only by an admin).

use serde::{Deserialize, Serialize};

use crate::key::KeyId;

pub const SYSTEM_BUILTIN: &str = "system_builtin";

/// The partition every read and write is confined to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "String", into = "String")]
#[cfg_attr(feature = "openapi", schema(value_type = String, example = "key:3f9a1c0d5e7b2a64"))]
pub struct CallerScope(String);

impl CallerScope {
    pub fn for_key(key_id: &KeyId) -> Self {
        Self(format!("key:{key_id}"))
    }

    pub fn system_builtin() -> Self {
        Self(SYSTEM_BUILTIN.to_owned())
    }

    pub fn parse(raw: &str) -> Option<Self> {
        if raw == SYSTEM_BUILTIN {
            return Some(Self::system_builtin());
        }
        let key_id = raw.strip_prefix("key:")?;
        KeyId::parse(key_id).map(|id| Self::for_key(&id))
    }

    pub fn is_system_builtin(&self) -> bool {
        self.0 == SYSTEM_BUILTIN
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CallerScope {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value).ok_or_else(|| {
            format!("`{value}` is not a caller scope (`key:<key_id>` or `system_builtin`)")
        })
    }
}

impl From<CallerScope> for String {
    fn from(value: CallerScope) -> Self {
        value.0
    }
}

impl std::fmt::Display for CallerScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest record id accepted.
pub const MAX_ID_LEN: usize = 128;

/// Why `id` is not a valid record id, or `None` when it is.
///
/// Ids are chosen by callers (`deploy.checklist`, `work:observation`), start with a letter or
/// digit and use only letters, digits, `.`, `_`, `:` and `-`, so they are safe in URL paths.
pub fn id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("must not be empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return Some(format!("must be at most {MAX_ID_LEN} characters"));
    }
    let mut chars = id.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphanumeric()) {
        return Some("must start with a letter or digit".into());
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Some(format!(
            "contains `{bad}`; use letters, digits, `.`, `_`, `:` and `-`"
        ));
    }
    None
}

/// Why `harness` is not a valid harness name, or `None`. Names are lowercase, e.g. `claude-code`.
pub fn harness_problem(harness: &str) -> Option<String> {
    let ok = !harness.is_empty()
        && harness.len() <= 64
        && harness
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && harness
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    (!ok).then(|| {
        "must be 1-64 lowercase letters, digits, `.`, `_` or `-` (e.g. `claude-code`)".to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn caller_scopes_parse() {
        let id = KeyId::parse("0123456789abcdef").unwrap();
        assert_eq!(CallerScope::for_key(&id).as_str(), "key:0123456789abcdef");
        assert!(CallerScope::parse("key:0123456789abcdef").is_some());
        assert!(
            CallerScope::parse("system_builtin")
                .unwrap()
                .is_system_builtin()
        );
        for bad in ["", "key:", "key:XYZ", "user:0123456789abcdef", "system"] {
            assert!(CallerScope::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn ids_are_url_safe() {
        for good in [
            "a",
            "deploy.checklist",
            "work:observation",
            "A_1-b",
            &"x".repeat(128),
        ] {
            assert_eq!(id_problem(good), None, "{good}");
        }
        for bad in ["", ".a", "a/b", "a b", "ä", "a?", &"x".repeat(129)] {
            assert!(id_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn harness_names() {
        assert_eq!(harness_problem("claude-code"), None);
        assert_eq!(harness_problem("codex"), None);
        assert!(harness_problem("Claude Code").is_some());
        assert!(harness_problem("").is_some());
    }
}
