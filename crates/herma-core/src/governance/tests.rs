use super::*;

const HELLO: &[u8] = b"hello";

fn hello_uri() -> String {
    format!("{BLOB_PREFIX}{}", sha256_hex(HELLO))
}

fn governance() -> FabricGovernance {
    FabricGovernance {
        status: "verified".into(),
        producer: "tessera".into(),
        visibility_scope: "public".into(),
        cohorts: vec![],
        callers: vec![],
        harnesses: vec![],
        blobs: vec![],
        record_uri: Some("tessera://records/starters/deploy".into()),
        record_version: Some(3),
    }
}

/// One case: a change to the verified public record, and what the lens says.
type Case = (
    &'static str,
    fn(&mut FabricGovernance),
    Result<(), &'static str>,
);

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn h12_governance_lens_blob_sha256_integrity_and_visibility() {
    let caller = CallerScope::parse("key:0123456789abcdef").unwrap();
    let cohorts = vec!["platform".to_owned()];
    let who = Requester {
        caller: &caller,
        harness: Some("claude-code"),
        cohorts: &cohorts,
    };
    let cases: Vec<Case> = vec![
        ("verified, public, trusted", |_| {}, Ok(())),
        (
            "quarantined",
            |g| g.status = "quarantined".into(),
            Err("quarantined"),
        ),
        (
            "pending",
            |g| g.status = "pending".into(),
            Err("not_verified"),
        ),
        (
            "status is case-sensitive",
            |g| g.status = "Verified".into(),
            Err("not_verified"),
        ),
        (
            "empty status",
            |g| g.status = String::new(),
            Err("not_verified"),
        ),
        (
            "unknown visibility",
            |g| g.visibility_scope = "everyone".into(),
            Err("unknown_visibility"),
        ),
        (
            "cohort shared",
            |g| {
                g.visibility_scope = "cohort".into();
                g.cohorts = vec!["research".into(), "platform".into()];
            },
            Ok(()),
        ),
        (
            "cohort not shared",
            |g| {
                g.visibility_scope = "cohort".into();
                g.cohorts = vec!["research".into()];
            },
            Err("not_in_cohort"),
        ),
        (
            "cohort with no cohorts",
            |g| g.visibility_scope = "cohort".into(),
            Err("not_in_cohort"),
        ),
        (
            "caller listed",
            |g| {
                g.visibility_scope = "callers".into();
                g.callers = vec!["key:0123456789abcdef".into()];
            },
            Ok(()),
        ),
        (
            "caller not listed",
            |g| {
                g.visibility_scope = "callers".into();
                g.callers = vec!["key:ffffffffffffffff".into()];
            },
            Err("not_listed_caller"),
        ),
        (
            "harness admitted",
            |g| g.harnesses = vec!["codex".into(), "Claude-Code".into()],
            Ok(()),
        ),
        (
            "harness not admitted",
            |g| g.harnesses = vec!["codex".into()],
            Err("harness_not_admitted"),
        ),
        (
            "blob fetched and matching",
            |g| {
                g.blobs = vec![BlobRef {
                    uri: hello_uri(),
                    content_sha256: Some(sha256_hex(HELLO)),
                }];
            },
            Ok(()),
        ),
        (
            "blob content differs",
            |g| {
                g.blobs = vec![BlobRef {
                    uri: hello_uri(),
                    content_sha256: Some(sha256_hex(b"hellO")),
                }];
            },
            Err("blob_digest_mismatch"),
        ),
        (
            "blob never fetched",
            |g| {
                g.blobs = vec![BlobRef {
                    uri: hello_uri(),
                    content_sha256: None,
                }];
            },
            Err("blob_not_fetched"),
        ),
        (
            "blob digest too short",
            |g| {
                g.blobs = vec![BlobRef {
                    uri: format!("{BLOB_PREFIX}abc123"),
                    content_sha256: Some("abc123".into()),
                }];
            },
            Err("bad_blob_uri"),
        ),
        (
            "blob digest uppercase",
            |g| {
                let upper = sha256_hex(HELLO).to_uppercase();
                g.blobs = vec![BlobRef {
                    uri: format!("{BLOB_PREFIX}{upper}"),
                    content_sha256: Some(upper),
                }];
            },
            Err("bad_blob_uri"),
        ),
        (
            "blob digest not hex",
            |g| {
                let z = "z".repeat(64);
                g.blobs = vec![BlobRef {
                    uri: format!("{BLOB_PREFIX}{z}"),
                    content_sha256: Some(z),
                }];
            },
            Err("bad_blob_uri"),
        ),
        (
            "blob on another scheme",
            |g| {
                g.blobs = vec![BlobRef {
                    uri: format!("https://example.com/{}", sha256_hex(HELLO)),
                    content_sha256: Some(sha256_hex(HELLO)),
                }];
            },
            Err("bad_blob_uri"),
        ),
        (
            "quarantine wins over everything",
            |g| {
                g.status = "quarantined".into();
                g.producer = "unknown".into();
            },
            Err("quarantined"),
        ),
    ];
    for (name, change, expected) in cases {
        let mut g = governance();
        change(&mut g);
        let got = admit(Some(&g), &who).map_err(|r| r.code());
        assert_eq!(got, expected, "{name}");
    }
    assert_eq!(admit(None, &who).map_err(|r| r.code()), Err("ungoverned"));
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn h18_governance_lens_trusts_the_same_producer_surfaces() {
    let caller = CallerScope::system_builtin();
    let who = Requester {
        caller: &caller,
        harness: None,
        cohorts: &[],
    };
    let cases = [
        ("tessera", true),
        ("herma", true),
        ("eranos", true),
        ("agora", true),
        ("Tessera", true),
        (" agora ", false),
        ("tessera\u{3000}", false),
        ("tessera-legacy", false),
        ("tesserae", false),
        ("openai", false),
        ("", false),
        ("agora.mirror", false),
    ];
    for (producer, trusted) in cases {
        let mut g = governance();
        g.producer = producer.into();
        let got = admit(Some(&g), &who);
        assert_eq!(got.is_ok(), trusted, "{producer:?}: {got:?}");
        if !trusted {
            assert_eq!(got.unwrap_err().code(), "untrusted_producer");
        }
    }
    assert_eq!(TRUSTED_PRODUCERS, ["tessera", "herma", "eranos", "agora"]);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn blobs_verify_against_their_digest() {
    assert_eq!(verify_blob(&hello_uri(), HELLO), Ok(()));
    assert_eq!(
        verify_blob(&hello_uri(), b"hello\n").map_err(|r| r.code()),
        Err("blob_digest_mismatch")
    );
    assert_eq!(
        verify_blob("tessera://blobs/", HELLO).map_err(|r| r.code()),
        Err("bad_blob_uri")
    );
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn refusals_say_why() {
    let caller = CallerScope::system_builtin();
    let who = Requester {
        caller: &caller,
        harness: Some("codex"),
        cohorts: &[],
    };
    let mut g = governance();
    g.harnesses = vec!["claude-code".into()];
    let refusal = admit(Some(&g), &who).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "harness `codex` is not among the record's harnesses"
    );
    g.harnesses.clear();
    g.producer = "acme".into();
    assert!(
        admit(Some(&g), &who)
            .unwrap_err()
            .to_string()
            .contains("`acme` is not a trusted surface")
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn governance_is_strict_on_input() {
    let bad = serde_json::json!({"status": "verified", "producer": "herma", "visibility_scope": "public", "trust_me": true});
    assert!(serde_json::from_value::<FabricGovernance>(bad).is_err());
    let starter = FabricGovernance::herma_starter();
    let round: FabricGovernance =
        serde_json::from_value(serde_json::to_value(&starter).unwrap()).unwrap();
    assert_eq!(round, starter);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn admit_anyone_judges_everything_but_the_requester() {
    let mut g = governance();
    g.visibility_scope = "callers".into();
    g.harnesses = vec!["codex".into()];
    assert_eq!(admit_anyone(Some(&g)), Ok(()), "visible to somebody");
    g.visibility_scope = "everyone".into();
    assert_eq!(
        admit_anyone(Some(&g)).map_err(|r| r.code()),
        Err("unknown_visibility")
    );
    let mut q = governance();
    q.status = "quarantined".into();
    assert_eq!(
        admit_anyone(Some(&q)).map_err(|r| r.code()),
        Err("quarantined")
    );
    assert_eq!(admit_anyone(None).map_err(|r| r.code()), Err("ungoverned"));
}
