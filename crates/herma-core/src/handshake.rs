//! Remote handshake sync (H07): a caller pulls context entries from a remote Herma-compatible
//! endpoint into its own scope. The remote must be on the upstream allowlist, and `max_chars`
//! is clamped to the operator's ceiling whatever the caller or the remote asks for; a body over
//! the limit is cut and the cut recorded.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use crate::model::ContextEntrySpec;
use crate::problem::{Problem, ProblemCode};
use crate::upstream::parse_base;

/// What a caller asks for.
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandshakeRequest {
    /// The remote's base URL (its `/v1/context` is read); its host must be allowed.
    #[cfg_attr(feature = "openapi", schema(example = "http://127.0.0.1:7731"))]
    pub remote: String,
    /// The remote's key, sent as `Authorization: Bearer …` to the remote only.
    #[serde(default)]
    pub remote_key: Option<String>,
    /// Only these entry ids (default: every entry the remote lists).
    #[serde(default)]
    pub ids: Vec<String>,
    /// Characters per entry body at most; clamped to `HERMA_HANDSHAKE_MAX_CHARS`.
    #[serde(default)]
    pub max_chars: Option<u64>,
}

/// One entry's body cut to fit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cut {
    pub id: String,
    pub original_chars: u64,
    pub kept_chars: u64,
}

/// The limit that applies: the operator's ceiling, lowered (never raised) by the caller's ask.
pub fn clamp_max_chars(requested: Option<u64>, ceiling: u64) -> u64 {
    requested.map_or(ceiling, |r| r.min(ceiling))
}

/// The remote's base URL, when its host is on the allowlist.
pub fn check_remote(raw: &str, allowed_hosts: &[String]) -> Result<Url, Problem> {
    let url = parse_base(raw).map_err(|detail| {
        Problem::validation(vec![crate::problem::FieldError::new("/remote", detail)])
    })?;
    // Normalized by `parse_base`: `localhost.` is `localhost`.
    let host = url.host_str().unwrap_or_default().to_owned();
    if !allowed_hosts.contains(&host) {
        return Err(Problem::new(
            ProblemCode::UpstreamHostRefused,
            format!("remote host `{host}` is not in HERMA_ALLOWED_UPSTREAM_HOSTS"),
        ));
    }
    Ok(url)
}

/// Cuts `entry`'s body to `max_chars` characters. A text body is cut; a JSON object body
/// that does not fit cannot be cut meaningfully and is refused (`Err`).
pub fn fit(entry: &mut ContextEntrySpec, max_chars: u64) -> Result<Option<Cut>, String> {
    let limit = usize::try_from(max_chars).unwrap_or(usize::MAX);
    match &mut entry.schema_or_body {
        Value::String(text) => {
            let chars = text.chars().count();
            if chars <= limit {
                return Ok(None);
            }
            *text = text.chars().take(limit).collect();
            Ok(Some(Cut {
                id: entry.id.clone(),
                original_chars: chars as u64,
                kept_chars: max_chars,
            }))
        }
        other => {
            let chars = other.to_string().chars().count();
            if chars <= limit {
                Ok(None)
            } else {
                Err(format!(
                    "a JSON body of {chars} characters does not fit max_chars {max_chars} and cannot be cut"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ContextKind;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h07_max_chars_is_clamped_to_the_ceiling_whatever_the_caller_asks() {
        assert_eq!(clamp_max_chars(None, 4000), 4000);
        assert_eq!(clamp_max_chars(Some(1_000_000), 4000), 4000);
        assert_eq!(clamp_max_chars(Some(100), 4000), 100);
        assert_eq!(clamp_max_chars(Some(0), 4000), 0);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn bodies_over_the_limit_are_cut_and_the_cut_recorded() {
        let mut entry = ContextEntrySpec {
            id: "n".into(),
            kind: ContextKind::Noun,
            title: String::new(),
            schema_or_body: Value::String("é".repeat(50)),
            uri: None,
            tags: vec![],
            fabric_governance: None,
        };
        let cut = fit(&mut entry, 10).unwrap().unwrap();
        assert_eq!((cut.original_chars, cut.kept_chars), (50, 10));
        assert_eq!(entry.schema_or_body, Value::String("é".repeat(10)));
        assert_eq!(fit(&mut entry, 10).unwrap(), None);
        entry.schema_or_body = serde_json::json!({"k": "v".repeat(40)});
        assert!(fit(&mut entry, 10).is_err());
        assert_eq!(fit(&mut entry, 1000).unwrap(), None);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn remotes_must_be_allowed_hosts() {
        let allowed = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        assert!(check_remote("http://127.0.0.1:7731", &allowed).is_ok());
        assert!(check_remote("http://LOCALHOST.:7731/", &allowed).is_ok());
        let refused = check_remote("https://evil.example.com", &allowed).unwrap_err();
        assert_eq!(refused.code, ProblemCode::UpstreamHostRefused);
        let bad = check_remote("ftp://127.0.0.1", &allowed).unwrap_err();
        assert_eq!(bad.errors[0].pointer, "/remote");
    }
}
