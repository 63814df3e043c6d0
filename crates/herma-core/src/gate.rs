//! The gate's decisions, free of I/O: which credential a request presents, whether a browser
//! is navigating, whether the edge secret matches, and whether a principal may do an operation.
//! Looking a key up is the caller's job; everything decided here is pure.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::caller::CallerScope;
use crate::key::{KeyId, PresentedKey, Scope, Scopes};
use crate::problem::{Problem, ProblemCode};
use crate::secret::Secret;

/// The request facts the gate reads. Transports fill it from their own header types.
#[derive(Clone, Copy, Debug, Default)]
pub struct GateRequest<'a> {
    pub authorization: Option<&'a str>,
    pub x_api_key: Option<&'a str>,
    pub has_cookie: bool,
    pub sec_fetch_mode: Option<&'a str>,
    pub sec_fetch_dest: Option<&'a str>,
}

/// A credential as presented, before it is checked against the store.
#[derive(Debug)]
pub enum PresentedCredential {
    /// Something shaped like an `hmk_` key.
    Key(PresentedKey),
    /// Any other bearer value: only ever compared with the bootstrap admin token.
    Token(String),
}

/// Who is calling, once verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// Shared with the gate's cache of verified keys: admitting a request clones no strings.
    Key(Arc<KeyPrincipal>),
    /// The bootstrap `HERMA_ADMIN_TOKEN`: admin routes only; it owns no records.
    Bootstrap,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPrincipal {
    pub key_id: KeyId,
    pub caller_scope: CallerScope,
    pub scopes: Scopes,
    pub harness: Option<String>,
    /// The key's cohorts (for cohort-scoped governed records).
    pub cohorts: Vec<String>,
}

/// What an operation needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// Any valid key: reading one's own records.
    Read,
    /// The `route` scope: proxied model traffic.
    Route,
    /// The `configure` scope and an `X-Herma-Harness` header matching the key's harness (H02).
    Configure,
    /// The bootstrap token or a key with the `admin` scope (H11).
    Admin,
    /// Writing the `system_builtin` records: a key with the `admin` scope that also meets
    /// [`Requirement::Configure`] (H02 holds for every provision management write; the bootstrap
    /// token, which attests no harness, only manages keys).
    ManageBuiltins,
}

fn unauthorized(detail: &str) -> Problem {
    Problem::new(ProblemCode::Unauthorized, detail)
}

/// H01: API routes refuse browser navigation and cookie-only authentication.
pub fn refuse_browser(req: &GateRequest<'_>) -> Result<(), Problem> {
    let navigating = req
        .sec_fetch_mode
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("navigate"))
        || req
            .sec_fetch_dest
            .is_some_and(|d| d.trim().eq_ignore_ascii_case("document"));
    if navigating {
        return Err(Problem::new(
            ProblemCode::BrowserNavigationRefused,
            "API routes cannot be opened by browser navigation; call them with a Herma key",
        ));
    }
    if req.has_cookie && req.authorization.is_none() && req.x_api_key.is_none() {
        return Err(Problem::new(
            ProblemCode::BrowserNavigationRefused,
            "cookie authentication is not accepted; send the key in Authorization or x-api-key",
        ));
    }
    Ok(())
}

/// The one credential the request presents (`Authorization: Bearer …` or `x-api-key`).
pub fn presented_credential(req: &GateRequest<'_>) -> Result<PresentedCredential, Problem> {
    let bearer = match req.authorization {
        None => None,
        Some(raw) => {
            let raw = raw.trim();
            let (scheme, value) = raw.split_once(' ').unwrap_or((raw, ""));
            if !scheme.eq_ignore_ascii_case("bearer") || value.trim().is_empty() {
                return Err(unauthorized(
                    "the Authorization header must be `Bearer <key>`",
                ));
            }
            Some(value.trim())
        }
    };
    let api_key = req.x_api_key.map(str::trim);
    let value = match (bearer, api_key) {
        (Some(a), Some(b)) if a != b => {
            return Err(unauthorized(
                "Authorization and x-api-key carry different credentials",
            ));
        }
        (Some(v), _) | (None, Some(v)) => v,
        (None, None) => {
            return Err(unauthorized(
                "a Herma key is required in `Authorization: Bearer` or `x-api-key`",
            ));
        }
    };
    if value.starts_with(crate::key::KEY_PREFIX) {
        // A malformed key and an unknown key get the same answer from the caller.
        return PresentedKey::parse(value)
            .map(PresentedCredential::Key)
            .ok_or_else(|| unauthorized("the key is not valid"));
    }
    Ok(PresentedCredential::Token(value.to_owned()))
}

/// Constant-time equality of two secrets of any length (compares their SHA-256 digests).
pub fn secrets_match(expected: &str, presented: &str) -> bool {
    let a = Sha256::digest(expected.as_bytes());
    let b = Sha256::digest(presented.as_bytes());
    a.ct_eq(&b).into()
}

/// H08 (edge part): with `HERMA_EDGE_SECRET` set, a request lacking a matching `x-edge-auth`
/// is refused.
pub fn check_edge(edge_secret: Option<&Secret>, x_edge_auth: Option<&str>) -> Result<(), Problem> {
    let Some(expected) = edge_secret else {
        return Ok(());
    };
    match x_edge_auth {
        Some(presented) if secrets_match(expected.expose(), presented) => Ok(()),
        _ => Err(Problem::new(
            ProblemCode::EdgeAuthRequired,
            "this Herma only accepts traffic through its edge",
        )),
    }
}

/// Whether `principal` may do an operation needing `requirement`.
pub fn authorize(
    principal: &Principal,
    requirement: Requirement,
    harness_header: Option<&str>,
) -> Result<(), Problem> {
    let key = match (principal, requirement) {
        (Principal::Bootstrap, Requirement::Admin) => return Ok(()),
        (Principal::Bootstrap, _) => {
            return Err(Problem::new(
                ProblemCode::InsufficientScope,
                "the bootstrap token only manages keys; use an hmk_ key for this route",
            ));
        }
        (Principal::Key(key), _) => key,
    };
    let need = |scope: Scope, code: ProblemCode| -> Result<(), Problem> {
        if key.scopes.contains(scope) {
            Ok(())
        } else {
            Err(Problem::new(
                code,
                format!(
                    "this operation needs a key with the `{}` scope",
                    scope.as_str()
                ),
            ))
        }
    };
    match requirement {
        Requirement::Read => Ok(()),
        Requirement::Route => need(Scope::Route, ProblemCode::InsufficientScope),
        Requirement::Admin => need(Scope::Admin, ProblemCode::AdminRequired),
        Requirement::ManageBuiltins => {
            need(Scope::Admin, ProblemCode::AdminRequired)?;
            authorize(principal, Requirement::Configure, harness_header)
        }
        Requirement::Configure => {
            need(Scope::Configure, ProblemCode::InsufficientScope)?;
            let attested = harness_header.map(|h| h.trim().to_ascii_lowercase());
            match (&key.harness, attested) {
                (Some(expected), Some(presented)) if *expected == presented => Ok(()),
                (_, None) => Err(Problem::new(
                    ProblemCode::HarnessRequired,
                    "configure operations need an X-Herma-Harness header naming the key's harness",
                )),
                _ => Err(Problem::new(
                    ProblemCode::HarnessRequired,
                    "X-Herma-Harness does not match the harness this key was issued for",
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyMaterial;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h02_built_in_writes_need_admin_configure_and_the_harness() {
        let m = Requirement::ManageBuiltins;
        let full = key_principal(&[Scope::Admin, Scope::Configure], Some("claude-code"));
        assert!(authorize(&full, m, Some("claude-code")).is_ok());
        let code = |p: &Principal, h: Option<&str>| authorize(p, m, h).unwrap_err().code;
        assert_eq!(code(&full, None), ProblemCode::HarnessRequired);
        assert_eq!(code(&full, Some("codex")), ProblemCode::HarnessRequired);
        let admin_only = key_principal(&[Scope::Admin], Some("claude-code"));
        assert_eq!(
            code(&admin_only, Some("claude-code")),
            ProblemCode::InsufficientScope
        );
        let configure_only = key_principal(&[Scope::Configure], Some("claude-code"));
        assert_eq!(
            code(&configure_only, Some("claude-code")),
            ProblemCode::AdminRequired
        );
        assert_eq!(
            code(&Principal::Bootstrap, None),
            ProblemCode::InsufficientScope
        );
    }

    fn key_principal(scopes: &[Scope], harness: Option<&str>) -> Principal {
        let id = KeyId::parse("0123456789abcdef").unwrap();
        Principal::Key(Arc::new(KeyPrincipal {
            caller_scope: CallerScope::for_key(&id),
            key_id: id,
            scopes: Scopes::new(scopes.iter().copied()),
            harness: harness.map(str::to_owned),
            cohorts: Vec::new(),
        }))
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h01_browser_navigation_is_refused() {
        for (mode, dest) in [
            (Some("navigate"), None),
            (None, Some("document")),
            (Some("NAVIGATE"), Some("document")),
        ] {
            let req = GateRequest {
                sec_fetch_mode: mode,
                sec_fetch_dest: dest,
                x_api_key: Some("x"),
                ..Default::default()
            };
            assert_eq!(
                refuse_browser(&req).unwrap_err().code,
                ProblemCode::BrowserNavigationRefused
            );
        }
        let fetch = GateRequest {
            sec_fetch_mode: Some("cors"),
            sec_fetch_dest: Some("empty"),
            x_api_key: Some("x"),
            ..Default::default()
        };
        assert!(refuse_browser(&fetch).is_ok());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h01_cookie_only_authentication_is_refused() {
        let req = GateRequest {
            has_cookie: true,
            ..Default::default()
        };
        assert_eq!(
            refuse_browser(&req).unwrap_err().code,
            ProblemCode::BrowserNavigationRefused
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn credentials_come_from_bearer_or_x_api_key() {
        let m = KeyMaterial::from_random([1; 8], [2; 32]);
        let bearer = format!("Bearer {}", m.key);
        for req in [
            GateRequest {
                authorization: Some(&bearer),
                ..Default::default()
            },
            GateRequest {
                x_api_key: Some(&m.key),
                ..Default::default()
            },
            GateRequest {
                authorization: Some(&bearer),
                x_api_key: Some(&m.key),
                ..Default::default()
            },
        ] {
            match presented_credential(&req).unwrap() {
                PresentedCredential::Key(k) => assert!(k.verify(&m.digest)),
                PresentedCredential::Token(_) => panic!("expected a key"),
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn bad_credentials_are_unauthorized() {
        let m = KeyMaterial::from_random([1; 8], [2; 32]);
        let other = KeyMaterial::from_random([3; 8], [2; 32]);
        let bearer = format!("Bearer {}", m.key);
        let basic = format!("Basic {}", m.key);
        for req in [
            GateRequest::default(),
            GateRequest {
                authorization: Some("Bearer "),
                ..Default::default()
            },
            GateRequest {
                authorization: Some(&basic),
                ..Default::default()
            },
            GateRequest {
                authorization: Some(&bearer),
                x_api_key: Some(&other.key),
                ..Default::default()
            },
            GateRequest {
                x_api_key: Some("hmk_nope"),
                ..Default::default()
            },
        ] {
            assert_eq!(
                presented_credential(&req).unwrap_err().code,
                ProblemCode::Unauthorized,
                "{req:?}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h02_configure_needs_scope_and_matching_harness() {
        let configure = key_principal(&[Scope::Route, Scope::Configure], Some("claude-code"));
        assert!(authorize(&configure, Requirement::Configure, Some("claude-code")).is_ok());
        assert!(authorize(&configure, Requirement::Configure, Some(" Claude-Code ")).is_ok());
        assert_eq!(
            authorize(&configure, Requirement::Configure, None)
                .unwrap_err()
                .code,
            ProblemCode::HarnessRequired
        );
        assert_eq!(
            authorize(&configure, Requirement::Configure, Some("codex"))
                .unwrap_err()
                .code,
            ProblemCode::HarnessRequired
        );
        let route_only = key_principal(&[Scope::Route], Some("claude-code"));
        assert_eq!(
            authorize(&route_only, Requirement::Configure, Some("claude-code"))
                .unwrap_err()
                .code,
            ProblemCode::InsufficientScope
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h11_admin_needs_bootstrap_or_admin_scope() {
        assert!(authorize(&Principal::Bootstrap, Requirement::Admin, None).is_ok());
        assert!(
            authorize(
                &key_principal(&[Scope::Admin], None),
                Requirement::Admin,
                None
            )
            .is_ok()
        );
        assert_eq!(
            authorize(
                &key_principal(&[Scope::Route, Scope::Configure], Some("x")),
                Requirement::Admin,
                Some("x")
            )
            .unwrap_err()
            .code,
            ProblemCode::AdminRequired
        );
        assert_eq!(
            authorize(&Principal::Bootstrap, Requirement::Route, None)
                .unwrap_err()
                .code,
            ProblemCode::InsufficientScope
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h08_edge_secret_is_checked_when_set() {
        let secret = Secret::new("edge-secret-of-sufficient-length");
        assert!(check_edge(None, None).is_ok());
        assert!(check_edge(Some(&secret), Some("edge-secret-of-sufficient-length")).is_ok());
        assert_eq!(
            check_edge(Some(&secret), None).unwrap_err().code,
            ProblemCode::EdgeAuthRequired
        );
        assert_eq!(
            check_edge(Some(&secret), Some("edge")).unwrap_err().code,
            ProblemCode::EdgeAuthRequired
        );
    }
}
