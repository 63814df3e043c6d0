//! The Layer-1 governance lens (H12, H18, H19): whether a governed fabric record — a Tessera
//! noun or verb, a synced starter rule — may be served to a requester, and if not, why.
//!
//! A record is admitted only when, in this order:
//!
//! 1. its `status` is `verified` (`quarantined` is refused everywhere, and so is anything else);
//! 2. its producer surface is a trusted one: Tessera, Herma, Eranos or Agora — nothing else;
//! 3. its `visibility_scope` admits the requester: `public` (everyone), `cohort` (a requester
//!    sharing one of the record's `cohorts`) or `callers` (a requester listed in `callers`);
//! 4. its `harnesses` tags, when present, name the requester's harness;
//! 5. every `tessera://blobs/<sha256>` it references names a 64-hex SHA-256 digest, and the
//!    content fetched for it (recorded as `content_sha256` at sync) hashes to exactly that.
//!
//! One pure function decides, so every runtime decides every stored row the same way.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::caller::CallerScope;

/// The producer surfaces whose records Herma trusts (H18).
pub const TRUSTED_PRODUCERS: [&str; 4] = ["tessera", "herma", "eranos", "agora"];

/// The URI prefix of content-addressed blobs.
pub const BLOB_PREFIX: &str = "tessera://blobs/";

/// A record's governance, as the fabric publishes it and Herma stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FabricGovernance {
    /// `verified` is served; `quarantined` and anything else are not.
    #[cfg_attr(feature = "openapi", schema(example = "verified"))]
    pub status: String,
    /// The producer surface: `tessera`, `herma`, `eranos` or `agora`.
    #[cfg_attr(feature = "openapi", schema(example = "tessera"))]
    pub producer: String,
    /// `public`, `cohort` or `callers`.
    #[cfg_attr(feature = "openapi", schema(example = "public"))]
    pub visibility_scope: String,
    /// With `visibility_scope: cohort`: the cohorts that may see the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cohorts: Vec<String>,
    /// With `visibility_scope: callers`: the caller scopes (`key:<key_id>`) that may see it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<String>,
    /// When present, only these harnesses may see it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub harnesses: Vec<String>,
    /// Content-addressed blobs the record references.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blobs: Vec<BlobRef>,
    /// The record's identity in the fabric, e.g. `tessera://records/starters/deploy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_uri: Option<String>,
    /// The fabric's version of the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_version: Option<u64>,
}

/// A referenced blob and the digest of the content fetched for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BlobRef {
    /// `tessera://blobs/<64 lowercase hex>`.
    pub uri: String,
    /// SHA-256 (hex) of the content Herma fetched; absent until fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
}

impl FabricGovernance {
    /// The governance of a starter shipped with Herma: verified, produced by Herma, public.
    pub fn herma_starter() -> Self {
        Self {
            status: "verified".into(),
            producer: "herma".into(),
            visibility_scope: "public".into(),
            cohorts: Vec::new(),
            callers: Vec::new(),
            harnesses: Vec::new(),
            blobs: Vec::new(),
            record_uri: None,
            record_version: None,
        }
    }
}

/// Who asks: the caller, its harness (from its key) and its cohorts.
#[derive(Clone, Copy, Debug)]
pub struct Requester<'a> {
    pub caller: &'a CallerScope,
    pub harness: Option<&'a str>,
    pub cohorts: &'a [String],
}

/// Why the lens refused a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A governed store's row without `fabric_governance`.
    Ungoverned,
    Quarantined,
    NotVerified(String),
    UntrustedProducer(String),
    UnknownVisibility(String),
    NotInCohort,
    NotListedCaller,
    HarnessNotAdmitted(Option<String>),
    BadBlobUri(String),
    BlobNotFetched(String),
    BlobDigestMismatch(String),
}

impl Refusal {
    /// A stable code for receipts, logs and tests.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Ungoverned => "ungoverned",
            Refusal::Quarantined => "quarantined",
            Refusal::NotVerified(_) => "not_verified",
            Refusal::UntrustedProducer(_) => "untrusted_producer",
            Refusal::UnknownVisibility(_) => "unknown_visibility",
            Refusal::NotInCohort => "not_in_cohort",
            Refusal::NotListedCaller => "not_listed_caller",
            Refusal::HarnessNotAdmitted(_) => "harness_not_admitted",
            Refusal::BadBlobUri(_) => "bad_blob_uri",
            Refusal::BlobNotFetched(_) => "blob_not_fetched",
            Refusal::BlobDigestMismatch(_) => "blob_digest_mismatch",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Ungoverned => f.write_str("the record carries no fabric_governance"),
            Refusal::Quarantined => f.write_str("the record is quarantined"),
            Refusal::NotVerified(status) => {
                write!(f, "the record's status is `{status}`, not `verified`")
            }
            Refusal::UntrustedProducer(p) => write!(
                f,
                "producer `{p}` is not a trusted surface (tessera, herma, eranos, agora)"
            ),
            Refusal::UnknownVisibility(v) => write!(
                f,
                "visibility_scope `{v}` is not one of public, cohort, callers"
            ),
            Refusal::NotInCohort => f.write_str("the caller is in none of the record's cohorts"),
            Refusal::NotListedCaller => f.write_str("the record does not list this caller"),
            Refusal::HarnessNotAdmitted(Some(h)) => {
                write!(f, "harness `{h}` is not among the record's harnesses")
            }
            Refusal::HarnessNotAdmitted(None) => {
                f.write_str("the record is limited to named harnesses and the caller has none")
            }
            Refusal::BadBlobUri(uri) => write!(
                f,
                "`{uri}` is not tessera://blobs/ followed by a 64-hex SHA-256 digest"
            ),
            Refusal::BlobNotFetched(uri) => write!(f, "the content of {uri} was never fetched"),
            Refusal::BlobDigestMismatch(uri) => {
                write!(
                    f,
                    "the content fetched for {uri} does not hash to its digest"
                )
            }
        }
    }
}

/// The digest a blob URI names (lowercase 64-hex), or why it names none.
pub fn blob_digest(uri: &str) -> Result<&str, Refusal> {
    let digest = uri
        .strip_prefix(BLOB_PREFIX)
        .ok_or_else(|| Refusal::BadBlobUri(uri.to_owned()))?;
    if digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(digest)
    } else {
        Err(Refusal::BadBlobUri(uri.to_owned()))
    }
}

/// The lowercase hex SHA-256 of `content` (the receipt's seal uses it too).
pub fn sha256_hex(content: &[u8]) -> String {
    crate::wire::prefixed_digest("", content, 32)
}

/// Whether `content` is exactly the blob `uri` names.
pub fn verify_blob(uri: &str, content: &[u8]) -> Result<(), Refusal> {
    let digest = blob_digest(uri)?;
    if sha256_hex(content) == digest {
        Ok(())
    } else {
        Err(Refusal::BlobDigestMismatch(uri.to_owned()))
    }
}

fn trusted(producer: &str) -> bool {
    TRUSTED_PRODUCERS
        .iter()
        .any(|t| t.eq_ignore_ascii_case(producer))
}

/// The lens: `Ok` when `governance` admits `who`, else the first reason it does not.
pub fn admit(governance: Option<&FabricGovernance>, who: &Requester<'_>) -> Result<(), Refusal> {
    let g = governance.ok_or(Refusal::Ungoverned)?;
    check_standing(g)?;
    check_visibility(g, Some(who))?;
    check_blobs(g)
}

/// The requester-independent part of the lens: whether the record can be served to anyone
/// (verified, trusted, a known visibility scope, every blob verified).
pub fn admit_anyone(governance: Option<&FabricGovernance>) -> Result<(), Refusal> {
    let g = governance.ok_or(Refusal::Ungoverned)?;
    check_standing(g)?;
    check_visibility(g, None)?;
    check_blobs(g)
}

fn check_standing(g: &FabricGovernance) -> Result<(), Refusal> {
    match g.status.as_str() {
        "verified" => {}
        "quarantined" => return Err(Refusal::Quarantined),
        other => return Err(Refusal::NotVerified(other.to_owned())),
    }
    if !trusted(&g.producer) {
        return Err(Refusal::UntrustedProducer(g.producer.clone()));
    }
    Ok(())
}

/// Visibility scope and harness tags; without a requester, only that the scope is known.
fn check_visibility(g: &FabricGovernance, who: Option<&Requester<'_>>) -> Result<(), Refusal> {
    match g.visibility_scope.as_str() {
        "public" | "cohort" | "callers" => {}
        other => return Err(Refusal::UnknownVisibility(other.to_owned())),
    }
    let Some(who) = who else {
        return Ok(());
    };
    match g.visibility_scope.as_str() {
        "cohort" if !g.cohorts.iter().any(|c| who.cohorts.contains(c)) => {
            return Err(Refusal::NotInCohort);
        }
        "callers" if !g.callers.iter().any(|c| c == who.caller.as_str()) => {
            return Err(Refusal::NotListedCaller);
        }
        _ => {}
    }
    if !g.harnesses.is_empty()
        && !who
            .harness
            .is_some_and(|h| g.harnesses.iter().any(|t| t.eq_ignore_ascii_case(h)))
    {
        return Err(Refusal::HarnessNotAdmitted(who.harness.map(str::to_owned)));
    }
    Ok(())
}

fn check_blobs(g: &FabricGovernance) -> Result<(), Refusal> {
    for blob in &g.blobs {
        let digest = blob_digest(&blob.uri)?;
        match &blob.content_sha256 {
            None => return Err(Refusal::BlobNotFetched(blob.uri.clone())),
            Some(fetched) if fetched != digest => {
                return Err(Refusal::BlobDigestMismatch(blob.uri.clone()));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
