//! Herma's side of the Tessera contract (`docs/tessera.md`): a published record, and what it
//! becomes in Herma — a `system_builtin` provision (a starter) or context entry (a noun or a
//! verb) carrying its `fabric_governance`.
//!
//! Conversion is pure: the sync fetches pages and blobs, and hands each record here with the
//! SHA-256 of the content fetched for each blob it references.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::governance::{BlobRef, FabricGovernance, Refusal, blob_digest};
use crate::model::{ContextEntrySpec, ContextKind, ProvisionSpec};

/// The URI prefix of Tessera records.
pub const RECORD_PREFIX: &str = "tessera://records/";

/// Records per page Herma asks for, and the most a page may hold.
pub const PAGE_LIMIT: usize = 100;
pub const MAX_PAGE_RECORDS: usize = 500;
/// The largest blob Herma fetches.
pub const MAX_BLOB_BYTES: usize = 1 << 20;

/// What a record publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    Starter,
    Noun,
    Verb,
}

/// A record's governance as Tessera publishes it (blobs by URI only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedGovernance {
    pub status: String,
    pub producer: String,
    pub visibility_scope: String,
    #[serde(default)]
    pub cohorts: Vec<String>,
    #[serde(default)]
    pub callers: Vec<String>,
    #[serde(default)]
    pub harnesses: Vec<String>,
    #[serde(default)]
    pub blobs: Vec<String>,
}

/// One published record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TesseraRecord {
    /// `tessera://records/<path>`.
    pub uri: String,
    pub kind: RecordKind,
    /// Tessera's version of the record (grows with every change).
    pub version: u64,
    pub governance: PublishedGovernance,
    /// `starter`: the provision (without `fabric_governance`, which Herma writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision: Option<Value>,
    /// `noun`/`verb`: `{id, title?, schema_or_body, tags?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<Value>,
}

/// One page of records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordPage {
    pub records: Vec<Value>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default)]
    pub next: Option<String>,
}

/// What a record becomes in Herma.
#[derive(Clone, Debug, PartialEq)]
pub enum Converted {
    Provision(ProvisionSpec),
    Context(ContextEntrySpec),
}

impl Converted {
    pub fn id(&self) -> &str {
        match self {
            Converted::Provision(p) => &p.id,
            Converted::Context(c) => &c.id,
        }
    }
}

/// The blob URIs a record references (checked for shape: 64 lowercase hex).
pub fn blob_uris(record: &TesseraRecord) -> Result<Vec<String>, Refusal> {
    record
        .governance
        .blobs
        .iter()
        .map(|uri| blob_digest(uri).map(|_| uri.clone()))
        .collect()
}

/// Converts a record, given the SHA-256 of the content fetched for each of its blobs (a blob
/// missing from `fetched` is recorded as not fetched, and the lens will refuse it).
pub fn convert(
    record: &TesseraRecord,
    fetched: &BTreeMap<String, String>,
) -> Result<Converted, String> {
    if !record.uri.starts_with(RECORD_PREFIX) || record.uri.len() <= RECORD_PREFIX.len() {
        return Err(format!("`{}` is not a tessera://records/ URI", record.uri));
    }
    let uris = blob_uris(record).map_err(|r| r.to_string())?;
    let g = &record.governance;
    let governance = FabricGovernance {
        status: g.status.clone(),
        producer: g.producer.clone(),
        visibility_scope: g.visibility_scope.clone(),
        cohorts: g.cohorts.clone(),
        callers: g.callers.clone(),
        harnesses: g.harnesses.clone(),
        blobs: uris
            .into_iter()
            .map(|uri| BlobRef {
                content_sha256: fetched.get(&uri).cloned(),
                uri,
            })
            .collect(),
        record_uri: Some(record.uri.clone()),
        record_version: Some(record.version),
    };
    let decode = |value: &Option<Value>, what: &str| -> Result<Value, String> {
        value
            .clone()
            .ok_or_else(|| format!("a {:?} record needs `{what}`", record.kind))
    };
    match record.kind {
        RecordKind::Starter => {
            let raw = decode(&record.provision, "provision")?;
            let mut spec: ProvisionSpec =
                crate::json::decode(raw).map_err(|p| describe(&p, "/provision"))?;
            if spec.fabric_governance.is_some() {
                return Err("`provision.fabric_governance` is Herma's to write".into());
            }
            spec.fabric_governance = Some(governance);
            spec.validate().map_err(|p| describe(&p, "/provision"))?;
            Ok(Converted::Provision(spec))
        }
        RecordKind::Noun | RecordKind::Verb => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Entry {
                id: String,
                #[serde(default)]
                title: String,
                schema_or_body: Value,
                #[serde(default)]
                tags: Vec<String>,
            }
            let raw = decode(&record.entry, "entry")?;
            let entry: Entry = crate::json::decode(raw).map_err(|p| describe(&p, "/entry"))?;
            let spec = ContextEntrySpec {
                id: entry.id,
                kind: if record.kind == RecordKind::Noun {
                    ContextKind::Noun
                } else {
                    ContextKind::Verb
                },
                title: entry.title,
                schema_or_body: entry.schema_or_body,
                uri: Some(record.uri.clone()),
                tags: entry.tags,
                fabric_governance: Some(governance),
            };
            spec.validate().map_err(|p| describe(&p, "/entry"))?;
            Ok(Converted::Context(spec))
        }
    }
}

fn describe(problem: &crate::Problem, prefix: &str) -> String {
    match problem.errors.first() {
        Some(e) => format!("{prefix}{}: {}", e.pointer, e.detail),
        None => format!("{prefix}: {}", problem.detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::sha256_hex;

    fn record(kind: &str, body: Value) -> TesseraRecord {
        let mut raw = serde_json::json!({
            "uri": "tessera://records/starters/deploy", "kind": kind, "version": 4,
            "governance": {"status": "verified", "producer": "tessera", "visibility_scope": "public",
                "blobs": [format!("tessera://blobs/{}", sha256_hex(b"doc"))]}
        });
        if kind == "starter" {
            raw["provision"] = body;
        } else {
            raw["entry"] = body;
        }
        serde_json::from_value(raw).unwrap()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn starters_become_governed_provisions_with_their_blob_digests() {
        let r = record(
            "starter",
            serde_json::json!({"id": "deploy", "action": "respond_directly", "response": {"text": "x"}, "triggers": {"keywords": ["deploy"]}}),
        );
        let uri = format!("tessera://blobs/{}", sha256_hex(b"doc"));
        let fetched = BTreeMap::from([(uri.clone(), sha256_hex(b"doc"))]);
        let Converted::Provision(p) = convert(&r, &fetched).unwrap() else {
            panic!("a provision")
        };
        let g = p.fabric_governance.unwrap();
        assert_eq!(
            g.record_uri.as_deref(),
            Some("tessera://records/starters/deploy")
        );
        assert_eq!(g.record_version, Some(4));
        assert_eq!(
            g.blobs[0].content_sha256.as_deref(),
            Some(sha256_hex(b"doc").as_str())
        );
        // Not fetched: recorded as such (the lens refuses it later).
        let Converted::Provision(p) = convert(&r, &BTreeMap::new()).unwrap() else {
            panic!("a provision")
        };
        assert_eq!(p.fabric_governance.unwrap().blobs[0].content_sha256, None);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn nouns_and_verbs_become_governed_context_entries() {
        let r = record(
            "noun",
            serde_json::json!({"id": "billing", "title": "Billing", "schema_or_body": "The billing service."}),
        );
        let Converted::Context(c) = convert(&r, &BTreeMap::new()).unwrap() else {
            panic!("an entry")
        };
        assert_eq!(c.kind, ContextKind::Noun);
        assert_eq!(c.uri.as_deref(), Some("tessera://records/starters/deploy"));
        assert!(c.fabric_governance.is_some());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn malformed_records_are_refused_with_the_reason() {
        let bad_provision = record(
            "starter",
            serde_json::json!({"id": "x", "action": "shim_context", "triggers": {}}),
        );
        assert!(
            convert(&bad_provision, &BTreeMap::new())
                .unwrap_err()
                .starts_with("/provision/")
        );
        let self_governed = record(
            "starter",
            serde_json::json!({"id": "x", "action": "respond_directly", "response": {"text": "x"}, "triggers": {"keywords": ["x"]},
                "fabric_governance": {"status": "verified", "producer": "herma", "visibility_scope": "public"}}),
        );
        assert!(
            convert(&self_governed, &BTreeMap::new())
                .unwrap_err()
                .contains("Herma's to write")
        );
        let mut wrong_uri = record(
            "verb",
            serde_json::json!({"id": "v", "schema_or_body": "do"}),
        );
        wrong_uri.uri = "https://example.com/records/v".into();
        assert!(convert(&wrong_uri, &BTreeMap::new()).is_err());
        let mut bad_blob = record(
            "verb",
            serde_json::json!({"id": "v", "schema_or_body": "do"}),
        );
        bad_blob.governance.blobs = vec!["tessera://blobs/xyz".into()];
        assert!(
            convert(&bad_blob, &BTreeMap::new())
                .unwrap_err()
                .contains("64-hex")
        );
        let missing = record("verb", serde_json::json!({"id": "v"}));
        assert!(
            convert(&missing, &BTreeMap::new())
                .unwrap_err()
                .starts_with("/entry")
        );
    }
}
