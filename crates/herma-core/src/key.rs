//! Harness keys: `hmk_<key_id>_<secret>`.
//!
//! `key_id` is 16 lowercase hex characters (64 random bits, public: it names the caller scope
//! `key:<key_id>`); `secret` is 64 lowercase hex characters (256 random bits from the OS RNG,
//! drawn by the caller of [`KeyMaterial::from_random`]). Only the SHA-256 digest of the whole key
//! is stored, and digests are compared in constant time.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::problem::{FieldError, Problem};

pub const KEY_PREFIX: &str = "hmk_";
pub const KEY_ID_LEN: usize = 16;
pub const SECRET_LEN: usize = 64;

/// The public identifier of a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "String", into = "String")]
pub struct KeyId(String);

impl KeyId {
    pub fn parse(raw: &str) -> Option<Self> {
        (raw.len() == KEY_ID_LEN && is_lower_hex(raw)).then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for KeyId {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
            .ok_or_else(|| format!("`{value}` is not a key id (16 lowercase hex characters)"))
    }
}

impl From<KeyId> for String {
    fn from(value: KeyId) -> Self {
        value.0
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether every byte of `s` is `0`–`9` or `a`–`f`: eight bytes at a time (a key is 80 of
/// them, checked on every request), the rest one by one.
fn is_lower_hex(s: &str) -> bool {
    let mut words = s.as_bytes().chunks_exact(8);
    words.all(|word| {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        word_is_lower_hex(u64::from_le_bytes(eight))
    }) && words
        .remainder()
        .iter()
        .all(|&b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// [`is_lower_hex`] for the eight bytes of `word`. With every byte's top bit clear, setting it
/// and subtracting `lo` from each byte leaves the top bit set exactly where the byte is at
/// least `lo`, and no byte borrows from the next.
fn word_is_lower_hex(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    if word & TOPS != 0 {
        return false;
    }
    let at_least = |lo: u8| ((word | TOPS) - ONES * u64::from(lo)) & TOPS;
    let digits = at_least(b'0') & !at_least(b'9' + 1);
    let letters = at_least(b'a') & !at_least(b'f' + 1);
    (digits | letters) == TOPS
}

/// SHA-256 digest of a whole key string. The only form in which a key is stored.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    pub fn of(key: &str) -> Self {
        Self(Sha256::digest(key.as_bytes()).into())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(raw: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(raw, &mut out).ok()?;
        Some(Self(out))
    }

    /// Constant-time equality: the time taken does not depend on where the digests differ.
    pub fn matches(&self, other: &KeyDigest) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl std::fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyDigest(..)")
    }
}

/// A key as presented by a client: parsed, never logged.
#[derive(Clone)]
pub struct PresentedKey {
    key_id: KeyId,
    digest: KeyDigest,
}

impl PresentedKey {
    /// Parses `hmk_<key_id>_<secret>`; anything else is `None` (the gate answers `unauthorized`
    /// without saying why, so a malformed key and an unknown key look the same).
    pub fn parse(raw: &str) -> Option<Self> {
        let rest = raw.strip_prefix(KEY_PREFIX)?;
        let (key_id, secret) = rest.split_once('_')?;
        let key_id = KeyId::parse(key_id)?;
        if secret.len() != SECRET_LEN || !is_lower_hex(secret) {
            return None;
        }
        Some(Self {
            key_id,
            digest: KeyDigest::of(raw),
        })
    }

    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    pub fn digest(&self) -> &KeyDigest {
        &self.digest
    }

    /// Constant-time check against a stored digest.
    pub fn verify(&self, stored: &KeyDigest) -> bool {
        self.digest.matches(stored)
    }
}

impl std::fmt::Debug for PresentedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PresentedKey({}, ..)", self.key_id)
    }
}

/// A freshly minted key: shown to its owner once, then only its digest is kept.
pub struct KeyMaterial {
    pub key_id: KeyId,
    pub key: String,
    pub digest: KeyDigest,
}

impl KeyMaterial {
    /// Builds a key from random bytes supplied by the caller (the core does no I/O).
    pub fn from_random(id_bytes: [u8; KEY_ID_LEN / 2], secret_bytes: [u8; SECRET_LEN / 2]) -> Self {
        let key_id = KeyId(hex::encode(id_bytes));
        let key = format!("{KEY_PREFIX}{key_id}_{}", hex::encode(secret_bytes));
        let digest = KeyDigest::of(&key);
        Self {
            key_id,
            key,
            digest,
        }
    }
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyMaterial({}, ..)", self.key_id)
    }
}

/// What a key may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Route model traffic through the proxy and read one's own records.
    Route,
    /// Manage one's own provisions and context entries (with a matching `X-Herma-Harness`).
    Configure,
    /// Manage keys and system built-in records.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Route, Scope::Configure, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Route => "route",
            Scope::Configure => "configure",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Scope::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// A set of scopes, kept sorted and without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "Vec<Scope>", into = "Vec<Scope>")]
pub struct Scopes(Vec<Scope>);

impl Scopes {
    pub fn new(scopes: impl IntoIterator<Item = Scope>) -> Self {
        let mut v: Vec<Scope> = scopes.into_iter().collect();
        v.sort();
        v.dedup();
        Self(v)
    }

    /// Parses a comma-separated list such as `route,configure`, naming any unknown scope.
    pub fn parse_list(raw: &str, pointer: &str) -> Result<Self, Problem> {
        let mut scopes = Vec::new();
        let mut errors = Vec::new();
        for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match Scope::parse(part) {
                Some(scope) => scopes.push(scope),
                None => errors.push(FieldError::new(
                    pointer,
                    format!("unknown scope `{part}` (expected route, configure or admin)"),
                )),
            }
        }
        if scopes.is_empty() && errors.is_empty() {
            errors.push(FieldError::new(pointer, "at least one scope is required"));
        }
        if errors.is_empty() {
            Ok(Self::new(scopes))
        } else {
            Err(Problem::validation(errors))
        }
    }

    pub fn contains(&self, scope: Scope) -> bool {
        self.0.contains(&scope)
    }

    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `route,configure` form, as stored.
    pub fn to_list(&self) -> String {
        self.0
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl TryFrom<Vec<Scope>> for Scopes {
    type Error = &'static str;

    fn try_from(value: Vec<Scope>) -> Result<Self, Self::Error> {
        if value.is_empty() {
            return Err("at least one scope is required");
        }
        Ok(Self::new(value))
    }
}

impl From<Scopes> for Vec<Scope> {
    fn from(value: Scopes) -> Self {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material() -> KeyMaterial {
        KeyMaterial::from_random([0xab; 8], [0x01; 32])
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn lower_hex_is_checked_byte_by_byte_at_every_place() {
        let one_by_one = |s: &[u8]| s.iter().all(|b| b"0123456789abcdef".contains(b));
        for len in 0..=24 {
            let hex: Vec<u8> = b"0123456789abcdef"
                .iter()
                .cycle()
                .take(len)
                .copied()
                .collect();
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut text = hex.clone();
                    text[at] = byte;
                    let Ok(text) = std::str::from_utf8(&text) else {
                        continue;
                    };
                    assert_eq!(is_lower_hex(text), one_by_one(text.as_bytes()), "{text:?}");
                }
            }
            assert!(is_lower_hex(std::str::from_utf8(&hex).unwrap()));
        }
        // The word's check on its own takes any bytes, not only UTF-8.
        for at in 0..8 {
            for byte in 0..=255u8 {
                let mut word = *b"09afbe71";
                word[at] = byte;
                assert_eq!(
                    word_is_lower_hex(u64::from_le_bytes(word)),
                    one_by_one(&word),
                    "{word:?}"
                );
            }
        }
        assert!(!is_lower_hex("0123456789abcdeé"));
        assert!(!is_lower_hex("0123456é89abcdef"));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn minted_keys_parse_and_verify() {
        let m = material();
        assert!(m.key.starts_with("hmk_abababababababab_"));
        assert_eq!(m.key.len(), 4 + 16 + 1 + 64);
        let presented = PresentedKey::parse(&m.key).unwrap();
        assert_eq!(presented.key_id(), &m.key_id);
        assert!(presented.verify(&m.digest));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_changed_secret_does_not_verify() {
        let m = material();
        let mut other = m.key.clone();
        other.pop();
        other.push('f');
        let presented = PresentedKey::parse(&other).unwrap();
        assert!(!presented.verify(&m.digest));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn malformed_keys_do_not_parse() {
        let good = material().key;
        let cases = [
            String::new(),
            "hmk_".into(),
            good.replace("hmk_", "hmx_"),
            good.to_uppercase(),
            format!("{good}0"),
            good[..good.len() - 1].to_owned(),
            good.replacen('_', "-", 2),
            "hmk_abababababababab_".into(),
            format!("hmk_ABABABABABABABAB_{}", "0".repeat(64)),
            format!("hmk_abababab_{}", "0".repeat(64)),
            format!("hmk_abababababababab_{}", "g".repeat(64)),
        ];
        for case in cases {
            assert!(PresentedKey::parse(&case).is_none(), "{case}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn digests_round_trip_through_hex() {
        let m = material();
        let hex = m.digest.to_hex();
        assert_eq!(hex.len(), 64);
        assert!(KeyDigest::from_hex(&hex).unwrap().matches(&m.digest));
        assert!(KeyDigest::from_hex("zz").is_none());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn debug_never_shows_secrets() {
        let m = material();
        let shown = format!(
            "{m:?} {:?} {:?}",
            m.digest,
            PresentedKey::parse(&m.key).unwrap()
        );
        assert!(!shown.contains(&m.key[21..]), "{shown}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn scope_lists_parse_strictly() {
        let scopes = Scopes::parse_list("configure, route,route", "/scopes").unwrap();
        assert_eq!(scopes.to_list(), "route,configure");
        let err = Scopes::parse_list("route,root", "/scopes").unwrap_err();
        assert_eq!(err.errors[0].pointer, "/scopes");
        assert!(err.errors[0].detail.contains("`root`"));
        assert!(Scopes::parse_list(" , ", "/scopes").is_err());
    }
}
