//! Injection receipts: a SHA-256-sealed, canonical account of what Herma did with one request.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::context::ContextKind;
use crate::caller::CallerScope;
use crate::governance::sha256_hex;
use crate::json::{write_bool, write_serialized, write_string, write_strings, write_unsigned};
use crate::time::Timestamp;
use crate::wire::usage::Usage;

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

impl Tier {
    /// The name it serializes as.
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Keyword => "keyword",
            Tier::Semantic => "semantic",
            Tier::Micromodel => "micromodel",
        }
    }
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

impl ReceiptAction {
    /// The name it serializes as.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReceiptAction::Forwarded => "forwarded",
            ReceiptAction::Shimmed => "shimmed",
            ReceiptAction::RespondedDirectly => "responded_directly",
        }
    }
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
    pub usage: Option<Usage>,
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

    /// Appends the canonical JSON to `out`: byte for byte what `serde_json` makes of the
    /// body (its derived `Serialize`: members in declared order, the same ones skipped), written
    /// by hand because the seal is on every request's path and serde's writer spends ≈ 200
    /// instructions on each of the thirty-odd keys and strings. Names are constants; a string
    /// that needs no escape is copied whole, one that does is escaped by `serde_json` itself;
    /// floats and `usage` are written by `serde_json` too. The fields are taken apart
    /// exhaustively, so a new field does not compile until it is written here; the tests
    /// compare the two writers over arbitrary bodies.
    fn write_canonical(&self, out: &mut Vec<u8>) {
        let ReceiptBody {
            caller_scope,
            protocol,
            conversation_id,
            model,
            action,
            matched,
            shimmed_context_refs,
            unresolved_context_refs,
            upstream_status,
            usage,
            timings,
            stream_end,
            error,
            created_at,
        } = self;
        out.extend_from_slice(b"{\"caller_scope\":");
        write_string(out, caller_scope.as_str());
        out.extend_from_slice(b",\"protocol\":");
        write_string(out, protocol);
        out.extend_from_slice(b",\"conversation_id\":");
        write_string(out, conversation_id);
        out.extend_from_slice(b",\"model\":");
        write_string(out, model);
        out.extend_from_slice(b",\"action\":");
        write_string(out, action.as_str());
        out.extend_from_slice(b",\"matched\":[");
        for (i, rule) in matched.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            rule.write_canonical(out);
        }
        out.extend_from_slice(b"],\"shimmed_context_refs\":[");
        for (i, entry) in shimmed_context_refs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            entry.write_canonical(out);
        }
        out.push(b']');
        if !unresolved_context_refs.is_empty() {
            out.extend_from_slice(b",\"unresolved_context_refs\":");
            write_strings(out, unresolved_context_refs);
        }
        if let Some(status) = upstream_status {
            out.extend_from_slice(b",\"upstream_status\":");
            write_unsigned(out, u64::from(*status));
        }
        if let Some(usage) = usage {
            out.extend_from_slice(b",\"usage\":");
            out.extend_from_slice(usage.as_str().as_bytes());
        }
        let Timings {
            decision_micros,
            upstream_headers_micros,
            total_micros,
        } = timings;
        out.extend_from_slice(b",\"timings\":{\"decision_micros\":");
        write_unsigned(out, *decision_micros);
        if let Some(micros) = upstream_headers_micros {
            out.extend_from_slice(b",\"upstream_headers_micros\":");
            write_unsigned(out, *micros);
        }
        if let Some(micros) = total_micros {
            out.extend_from_slice(b",\"total_micros\":");
            write_unsigned(out, *micros);
        }
        out.push(b'}');
        if let Some(end) = stream_end {
            out.extend_from_slice(b",\"stream_end\":");
            write_string(out, end.as_str());
        }
        if let Some(code) = error {
            out.extend_from_slice(b",\"error\":");
            write_string(out, code.as_str());
        }
        out.extend_from_slice(b",\"created_at\":");
        write_string(out, &created_at.to_rfc3339());
        out.push(b'}');
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
                crate::utf8::str(&json).map(Arc::from)
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

impl MatchedRule {
    /// Its canonical JSON (see [`ReceiptBody::write_canonical`]).
    fn write_canonical(&self, out: &mut Vec<u8>) {
        let MatchedRule {
            provision_id,
            version,
            builtin,
            tier,
            trigger,
            applied,
            score,
            confidence,
        } = self;
        out.extend_from_slice(b"{\"provision_id\":");
        write_string(out, provision_id);
        out.extend_from_slice(b",\"version\":");
        write_unsigned(out, *version);
        out.extend_from_slice(b",\"builtin\":");
        write_bool(out, *builtin);
        out.extend_from_slice(b",\"tier\":");
        write_string(out, tier.as_str());
        out.extend_from_slice(b",\"trigger\":");
        write_string(out, trigger);
        out.extend_from_slice(b",\"applied\":");
        write_bool(out, *applied);
        if let Some(score) = score {
            out.extend_from_slice(b",\"score\":");
            write_serialized(out, score);
        }
        if let Some(confidence) = confidence {
            out.extend_from_slice(b",\"confidence\":");
            write_serialized(out, confidence);
        }
        out.push(b'}');
    }
}

impl ShimmedRef {
    /// Its canonical JSON (see [`ReceiptBody::write_canonical`]).
    fn write_canonical(&self, out: &mut Vec<u8>) {
        let ShimmedRef {
            id,
            version,
            kind,
            builtin,
            chars,
            truncated,
            record_uri,
            record_version,
            blob_digests,
        } = self;
        out.extend_from_slice(b"{\"id\":");
        write_string(out, id);
        out.extend_from_slice(b",\"version\":");
        write_unsigned(out, *version);
        out.extend_from_slice(b",\"kind\":");
        write_string(out, kind.as_str());
        out.extend_from_slice(b",\"builtin\":");
        write_bool(out, *builtin);
        out.extend_from_slice(b",\"chars\":");
        write_unsigned(out, *chars);
        out.extend_from_slice(b",\"truncated\":");
        write_bool(out, *truncated);
        if let Some(uri) = record_uri {
            out.extend_from_slice(b",\"record_uri\":");
            write_string(out, uri);
        }
        if let Some(version) = record_version {
            out.extend_from_slice(b",\"record_version\":");
            write_unsigned(out, *version);
        }
        if !blob_digests.is_empty() {
            out.extend_from_slice(b",\"blob_digests\":");
            write_strings(out, blob_digests);
        }
        out.push(b'}');
    }
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
        rich.usage = Some(serde_json::json!({"input_tokens": 12, "output_tokens": 3}).into());
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

    /// The hand-written canonical writer against `serde_json`'s, over arbitrary bodies: every
    /// enum value, optional members present and absent, strings with quotes, backslashes,
    /// control characters and non-ASCII, floats that are not finite, nested usage values.
    #[cfg(not(target_arch = "wasm32"))]
    mod canonical_json {
        use proptest::prelude::*;
        use proptest::sample::select;
        use serde_json::Value;

        use super::*;
        use crate::problem::ProblemCode;

        const TRICKY: [char; 16] = [
            '\0', '\u{7}', '\u{8}', '\t', '\n', '\u{b}', '\u{c}', '\r', '\u{1f}', ' ', '"', '\\',
            '/', '\u{7f}', 'é', '\u{2028}',
        ];

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z0-9_.:-]{0,12}",
                // Each side of every escaping boundary serde_json has.
                proptest::collection::vec(select(TRICKY.to_vec()), 0..6)
                    .prop_map(String::from_iter),
                any::<String>(),
            ]
        }

        fn usage() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<u64>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                text().prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 16, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    proptest::collection::btree_map(text(), inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn matched_rule() -> impl Strategy<Value = MatchedRule> {
            (
                (text(), any::<u64>(), any::<bool>()),
                select(vec![Tier::Keyword, Tier::Semantic, Tier::Micromodel]),
                (text(), any::<bool>()),
                (
                    proptest::option::of(any::<f32>()),
                    proptest::option::of(any::<f64>()),
                ),
            )
                .prop_map(
                    |(
                        (provision_id, version, builtin),
                        tier,
                        (trigger, applied),
                        (score, confidence),
                    )| {
                        MatchedRule {
                            provision_id,
                            version,
                            builtin,
                            tier,
                            trigger,
                            applied,
                            score,
                            confidence,
                        }
                    },
                )
        }

        fn shimmed_ref() -> impl Strategy<Value = ShimmedRef> {
            (
                (text(), any::<u64>()),
                select(vec![
                    ContextKind::Noun,
                    ContextKind::Verb,
                    ContextKind::Detail,
                ]),
                (any::<bool>(), any::<u64>(), any::<bool>()),
                (
                    proptest::option::of(text()),
                    proptest::option::of(any::<u64>()),
                    proptest::collection::vec(text(), 0..3),
                ),
            )
                .prop_map(
                    |(
                        (id, version),
                        kind,
                        (builtin, chars, truncated),
                        (record_uri, record_version, blob_digests),
                    )| {
                        ShimmedRef {
                            id,
                            version,
                            kind,
                            builtin,
                            chars,
                            truncated,
                            record_uri,
                            record_version,
                            blob_digests,
                        }
                    },
                )
        }

        fn receipt_body() -> impl Strategy<Value = ReceiptBody> {
            (
                (
                    prop_oneof![
                        Just(CallerScope::system_builtin()),
                        "[0-9a-f]{16}".prop_map(|id| {
                            CallerScope::parse(&format!("key:{id}")).expect("a key's scope")
                        }),
                    ],
                    text(),
                    text(),
                    text(),
                    select(vec![
                        ReceiptAction::Forwarded,
                        ReceiptAction::Shimmed,
                        ReceiptAction::RespondedDirectly,
                    ]),
                ),
                (
                    proptest::collection::vec(matched_rule(), 0..3),
                    proptest::collection::vec(shimmed_ref(), 0..3),
                    proptest::collection::vec(text(), 0..3),
                ),
                (
                    proptest::option::of(any::<u16>()),
                    proptest::option::of(usage().prop_map(Usage::from)),
                    (
                        any::<u64>(),
                        proptest::option::of(any::<u64>()),
                        proptest::option::of(any::<u64>()),
                    ),
                ),
                (
                    proptest::option::of(select(StreamEnd::ALL.to_vec())),
                    proptest::option::of(select(ProblemCode::ALL.to_vec())),
                    prop_oneof![any::<i64>(), 0i64..4_102_444_800_000],
                ),
            )
                .prop_map(
                    |(
                        (caller_scope, protocol, conversation_id, model, action),
                        (matched, shimmed_context_refs, unresolved_context_refs),
                        (
                            upstream_status,
                            usage,
                            (decision_micros, upstream_headers_micros, total_micros),
                        ),
                        (stream_end, error, millis),
                    )| ReceiptBody {
                        caller_scope,
                        protocol,
                        conversation_id,
                        model,
                        action,
                        matched,
                        shimmed_context_refs,
                        unresolved_context_refs,
                        upstream_status,
                        usage,
                        timings: Timings {
                            decision_micros,
                            upstream_headers_micros,
                            total_micros,
                        },
                        stream_end,
                        error,
                        created_at: Timestamp::from_millis(millis),
                    },
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]
            #[test]
            fn the_canonical_json_is_serde_jsons(body in receipt_body()) {
                let serde = serde_json::to_vec(&body).unwrap();
                let canonical = body.canonical();
                // As text first, so a difference shows readably.
                prop_assert_eq!(
                    String::from_utf8_lossy(&canonical),
                    String::from_utf8_lossy(&serde)
                );
                prop_assert_eq!(canonical, serde);
            }
        }
    }
}
