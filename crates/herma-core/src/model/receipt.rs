//! Injection receipts: a SHA-256-sealed, canonical account of what Herma did with one request.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::ContextKind;
use crate::caller::CallerScope;
use crate::time::Timestamp;

/// Which tier decided a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Tier 1: keywords, regular expressions, path globs, tool names.
    Keyword,
    /// Tier 2: semantic similarity.
    Semantic,
    /// Tier 3: the micromodel classifier.
    Micromodel,
}

/// What Herma did with the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReceiptAction {
    /// Forwarded unchanged: no provision fired.
    Forwarded,
    /// Context was shimmed, then the request was forwarded.
    Shimmed,
    /// A provision answered; nothing went upstream.
    RespondedDirectly,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MatchedRule {
    pub provision_id: String,
    pub version: u64,
    /// True for a `system_builtin` starter.
    #[serde(default)]
    pub builtin: bool,
    pub tier: Tier,
    /// The trigger that fired, e.g. `keyword:deploy` or `path:**/*.tf`.
    #[cfg_attr(feature = "openapi", schema(example = "keyword:deploy"))]
    pub trigger: String,
    /// Whether this match was applied (a lower-priority match may be outranked, and a
    /// `once_per_conversation` rule applies once).
    #[serde(default)]
    pub applied: bool,
    /// Tier 2: the best example's cosine similarity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// Tier 3: the classifier's confidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ShimmedRef {
    pub id: String,
    pub version: u64,
    pub kind: ContextKind,
    #[serde(default)]
    pub builtin: bool,
    /// Characters of the entry that were shimmed.
    pub chars: u64,
    /// True when the entry was cut to fit the shim budget.
    #[serde(default)]
    pub truncated: bool,
    /// A governed record (H09): its fabric identity and version, and the digests of the blobs
    /// it references, as they passed the governance lens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(example = "tessera://records/nouns/billing")
    )]
    pub record_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blob_digests: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Timings {
    /// Microseconds Herma spent deciding (extraction, rules, rendering).
    pub decision_micros: u64,
    /// Microseconds until the upstream's response headers arrived, when forwarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_headers_micros: Option<u64>,
    /// Microseconds until the response was complete, when observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_micros: Option<u64>,
}

/// How a forwarded response's body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    /// The whole body was relayed (a stream through its protocol's last event).
    Completed,
    /// The upstream closed a stream before its protocol's last event.
    UpstreamClosedEarly,
    /// The upstream sent nothing for `HERMA_UPSTREAM_IDLE_TIMEOUT_MS`.
    IdleTimeout,
    /// The upstream connection failed mid-body.
    UpstreamError,
    /// The client went away before the body ended (the upstream connection was closed too).
    ClientGone,
}

impl StreamEnd {
    pub const ALL: [StreamEnd; 5] = [
        StreamEnd::Completed,
        StreamEnd::UpstreamClosedEarly,
        StreamEnd::IdleTimeout,
        StreamEnd::UpstreamError,
        StreamEnd::ClientGone,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            StreamEnd::Completed => "completed",
            StreamEnd::UpstreamClosedEarly => "upstream_closed_early",
            StreamEnd::IdleTimeout => "idle_timeout",
            StreamEnd::UpstreamError => "upstream_error",
            StreamEnd::ClientGone => "client_gone",
        }
    }
}

/// The canonical content a receipt's digest covers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReceiptBody {
    pub caller_scope: CallerScope,
    /// `chat_completions`, `responses` or `messages`.
    #[cfg_attr(feature = "openapi", schema(example = "messages"))]
    pub protocol: String,
    pub conversation_id: String,
    pub model: String,
    pub action: ReceiptAction,
    pub matched: Vec<MatchedRule>,
    pub shimmed_context_refs: Vec<ShimmedRef>,
    /// Context refs a matched provision named that neither the caller nor the built-ins have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unresolved_context_refs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// Token usage as the upstream reported it, when observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub usage: Option<Value>,
    pub timings: Timings,
    /// How the forwarded response's body ended, when one was relayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_end: Option<StreamEnd>,
    /// When Herma could not complete the request: the problem code it answered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::problem::ProblemCode>,
    pub created_at: Timestamp,
}

impl ReceiptBody {
    /// The canonical JSON: compact, in declared field order.
    fn canonical(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_canonical(&mut out);
        out
    }

    /// Appends the canonical JSON to `out` (nothing if the body would not serialize, which a
    /// body of plain data never fails to).
    fn write_canonical(&self, out: &mut Vec<u8>) {
        let start = out.len();
        if serde_json::to_writer(&mut *out, self).is_err() {
            out.truncate(start);
        }
    }

    /// Lowercase hex SHA-256 over the canonical JSON.
    pub fn digest(&self) -> String {
        sha256_hex(&self.canonical())
    }

    /// Seals the body under `id`, computing its digest. The receipt's JSON (what the journal
    /// and the database keep) is written here too, in one buffer: `{"id":…,"sha256":"…"`, then
    /// the canonical body, whose digest is taken where it lies before its opening brace becomes
    /// the comma that joins it to the two (serializing the receipt flattens its body after them).
    pub fn seal(self, id: String) -> InjectionReceipt {
        let id_json = serde_json::to_string(&id).unwrap_or_default();
        let mut json = Vec::with_capacity(SEALED_CAPACITY + id_json.len());
        json.extend_from_slice(b"{\"id\":");
        json.extend_from_slice(id_json.as_bytes());
        json.extend_from_slice(b",\"sha256\":\"");
        let digest_at = json.len();
        json.extend_from_slice(&[b'0'; 64]);
        json.push(b'"');
        let body_at = json.len();
        self.write_canonical(&mut json);
        let sha256 = sha256_hex(&json[body_at..]);
        // A body with members (every body: its fields are required) joins the two.
        let json = match &json[body_at..] {
            [b'{', members @ ..] if !id_json.is_empty() && members.len() > 1 => {
                json[digest_at..digest_at + 64].copy_from_slice(sha256.as_bytes());
                json[body_at] = b',';
                String::from_utf8(json).ok().map(Arc::from)
            }
            _ => None,
        };
        InjectionReceipt {
            sha256,
            id,
            body: self,
            json: Encoded(json),
        }
    }
}

/// Lowercase hex SHA-256 of `data`.
fn sha256_hex(data: &[u8]) -> String {
    crate::wire::prefixed_digest("", data, 32)
}

/// Room for a typical sealed receipt, so its buffer is allocated once: a forwarded request's
/// with one matched rule, one shimmed entry and Anthropic's usage (`hot_path`'s `receipt seal`)
/// is 808 bytes; each further rule or entry adds about 150.
const SEALED_CAPACITY: usize = 1024;

/// A sealed receipt's JSON, kept from sealing. Not part of the receipt's value: two receipts
/// are equal whether or not they carry it.
#[derive(Clone, Debug, Default)]
pub struct Encoded(Option<Arc<str>>);

impl PartialEq for Encoded {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InjectionReceipt {
    /// The receipt id, returned to the client as `x-herma-receipt`.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "rcpt_0f1e2d3c4b5a69788796a5b4c3d2e1f0")
    )]
    pub id: String,
    /// SHA-256 of the canonical body.
    pub sha256: String,
    #[serde(flatten)]
    pub body: ReceiptBody,
    #[serde(skip)]
    json: Encoded,
}

impl InjectionReceipt {
    /// True when the stored digest still matches the body.
    pub fn verifies(&self) -> bool {
        self.sha256 == self.body.digest()
    }

    /// The receipt as JSON (what serializing it gives): kept from sealing, or serialized now
    /// for a receipt that was read back. A sealed receipt is never changed on Herma's path;
    /// one changed after sealing would keep the JSON it was sealed with, as its digest does.
    pub fn to_json(&self) -> Cow<'_, str> {
        match &self.json.0 {
            Some(json) => Cow::Borrowed(json),
            None => Cow::Owned(serde_json::to_string(self).unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    fn body() -> ReceiptBody {
        ReceiptBody {
            caller_scope: CallerScope::system_builtin(),
            protocol: "messages".into(),
            conversation_id: "c1".into(),
            model: "claude".into(),
            action: ReceiptAction::RespondedDirectly,
            matched: vec![MatchedRule {
                provision_id: "p".into(),
                version: 1,
                builtin: false,
                tier: Tier::Keyword,
                trigger: "keyword:deploy".into(),
                applied: true,
                score: None,
                confidence: None,
            }],
            shimmed_context_refs: vec![],
            unresolved_context_refs: vec![],
            upstream_status: None,
            usage: None,
            timings: Timings::default(),
            stream_end: None,
            error: None,
            created_at: Timestamp::from_millis(5),
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_digest_is_sha256_in_lowercase_hex() {
        for data in [&b""[..], b"abc", &body().canonical()] {
            assert_eq!(sha256_hex(data), hex::encode(Sha256::digest(data)));
        }
        // The standard's own example.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn digest_is_stable_and_sensitive() {
        let a = body().seal("r1".into());
        assert_eq!(a.sha256.len(), 64);
        assert_eq!(a.sha256, body().digest());
        assert!(a.verifies());
        let mut changed = body();
        changed.matched[0].version = 2;
        assert_ne!(changed.digest(), a.sha256);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn receipts_round_trip_through_json() {
        let r = body().seal("r1".into());
        let text = serde_json::to_string(&r).unwrap();
        let back: InjectionReceipt = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert!(back.verifies());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_json_kept_from_sealing_is_the_receipts_serialization() {
        let mut rich = body();
        rich.matched[0].score = Some(0.4375);
        rich.matched[0].confidence = Some(0.9);
        rich.shimmed_context_refs = vec![ShimmedRef {
            id: "deploy.checklist".into(),
            version: 2,
            kind: ContextKind::Verb,
            builtin: false,
            chars: 91,
            truncated: true,
            record_uri: Some("tessera://records/verbs/deploy".into()),
            record_version: Some(4),
            blob_digests: vec!["ab".repeat(32)],
        }];
        rich.unresolved_context_refs = vec!["gone \"quoted\" é".into()];
        rich.upstream_status = Some(200);
        rich.usage = Some(serde_json::json!({"input_tokens": 12, "output_tokens": 3}));
        rich.timings = Timings {
            decision_micros: 41,
            upstream_headers_micros: Some(900),
            total_micros: Some(1200),
        };
        rich.stream_end = Some(StreamEnd::ClientGone);
        rich.error = Some(crate::problem::ProblemCode::UpstreamTimeout);
        for receipt in [
            body().seal("rcpt_1".into()),
            rich.seal("rcpt_\"odd\"\n".into()),
        ] {
            let kept = receipt.to_json();
            assert!(matches!(kept, Cow::Borrowed(_)), "kept from sealing");
            assert_eq!(kept, serde_json::to_string(&receipt).unwrap());
            let back: InjectionReceipt = serde_json::from_str(&kept).unwrap();
            assert_eq!(back, receipt);
            assert!(back.verifies());
            assert!(
                matches!(back.to_json(), Cow::Owned(_)),
                "read back: serialized"
            );
            assert_eq!(back.to_json(), kept);
        }
    }
}
