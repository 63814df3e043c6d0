//! The governance lens on the firing path (H12, H19): built-in starters fire for a routed
//! caller only while their fabric_governance admits that caller and its harness.

use herma_test_support::mock_upstream::MockUpstream;
use herma_test_support::{Backend, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{dry_run, req};

/// An admin-written built-in answering `text` when the prompt says `word`.
fn starter(id: &str, word: &str, governance: Option<Value>) -> Value {
    let mut p = json!({
        "id": id, "action": "respond_directly", "response": {"text": format!("answered by {id}")},
        "triggers": {"keywords": [word]}
    });
    if let Some(g) = governance {
        p["fabric_governance"] = g;
    }
    p
}

fn governed(status: &str, producer: &str, extra: Value) -> Value {
    let mut g = json!({"status": status, "producer": producer, "visibility_scope": "public"});
    if let (Some(g), Some(extra)) = (g.as_object_mut(), extra.as_object()) {
        g.extend(extra.clone());
    }
    g
}

#[tokio::test]
async fn h19_synced_starters_fire_for_routed_callers_only_with_their_governance() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let admin = app.key("route,configure,admin", Some("claude-code")).await;
    let blob = "tessera://blobs/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
    let starters = [
        starter(
            "s.verified",
            "alpha",
            Some(governed("verified", "tessera", json!({}))),
        ),
        starter(
            "s.quarantined",
            "bravo",
            Some(governed("quarantined", "tessera", json!({}))),
        ),
        starter(
            "s.untrusted",
            "charlie",
            Some(governed("verified", "tessera-mirror", json!({}))),
        ),
        starter(
            "s.codex-only",
            "delta",
            Some(governed(
                "verified",
                "eranos",
                json!({"harnesses": ["codex"]}),
            )),
        ),
        starter("s.ungoverned", "echo", None),
        starter(
            "s.blob-ok",
            "foxtrot",
            Some(governed(
                "verified",
                "agora",
                json!({"blobs": [{"uri": blob, "content_sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}]}),
            )),
        ),
        starter(
            "s.blob-bad",
            "golf",
            Some(governed(
                "verified",
                "agora",
                json!({"blobs": [{"uri": blob, "content_sha256": "0000000000000000000000000000000000000000000000000000000000000000"}]}),
            )),
        ),
        starter(
            "s.for-one-caller",
            "hotel",
            Some(
                json!({"status": "verified", "producer": "herma", "visibility_scope": "callers", "callers": ["key:ffffffffffffffff"]}),
            ),
        ),
    ];
    for s in &starters {
        let got = req(Method::POST, "/v1/provisions?scope=system_builtin")
            .key(&admin)
            .harness("claude-code")
            .json(s.clone())
            .send(&app)
            .await;
        assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
    }
    let claude = app.key("route", Some("claude-code")).await;
    let codex = app.key("route", Some("codex")).await;

    let cases = [
        ("alpha", "s.verified", true, true),
        ("bravo", "s.quarantined", false, false),
        ("charlie", "s.untrusted", false, false),
        ("delta", "s.codex-only", false, true),
        ("echo", "s.ungoverned", false, false),
        ("foxtrot", "s.blob-ok", true, true),
        ("golf", "s.blob-bad", false, false),
        ("hotel", "s.for-one-caller", false, false),
    ];
    for (word, id, for_claude, for_codex) in cases {
        for (key, fires) in [(&claude, for_claude), (&codex, for_codex)] {
            let report = dry_run(&app, key, &format!("{word} please")).await;
            let decided = report["decision"] == "respond_directly" && report["provision_id"] == id;
            assert_eq!(decided, fires, "{id}: {report:#}");
            let refused = report["governance_refused"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["id"] == id && r["kind"] == "provision" && r["builtin"] == true);
            // Records meant for other harnesses or callers are not named to this one.
            let for_others = ["s.codex-only", "s.for-one-caller"].contains(&id);
            assert_eq!(
                refused,
                !fires && !for_others,
                "{id} is listed as refused exactly when it cannot fire for what it is"
            );
        }
    }
    let report = dry_run(&app, &claude, "bravo").await;
    let reasons: Vec<(&str, &str)> = report["governance_refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["code"].as_str().unwrap()))
        .collect();
    for expected in [
        ("s.quarantined", "quarantined"),
        ("s.untrusted", "untrusted_producer"),
        ("s.ungoverned", "ungoverned"),
        ("s.blob-bad", "blob_digest_mismatch"),
    ] {
        assert!(reasons.contains(&expected), "{expected:?} in {reasons:?}");
    }
    assert!(
        !reasons
            .iter()
            .any(|(id, _)| *id == "s.codex-only" || *id == "s.for-one-caller"),
        "{reasons:?}"
    );
    // The public preview names no refused built-in at all.
    let preview: Value = app
        .client
        .post(app.url("/api/preview"))
        .json(&json!({"protocol": "chat_completions", "body": {"model": "m", "messages": [{"role": "user", "content": "bravo"}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(preview["governance_refused"], json!([]), "{preview:#}");

    // The proxy decides the same way as the dry run: the verified starter answers without the
    // upstream, the quarantined one is forwarded.
    let mock = MockUpstream::start().await;
    for (word, answered) in [("alpha", true), ("bravo", false)] {
        let got = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(&claude)
            .header("X-Upstream-Base-Url", mock.url())
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": word}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), StatusCode::OK);
        let body: Value = got.json().await.unwrap();
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(text == "answered by s.verified", answered, "{word}: {text}");
    }
    assert_eq!(
        mock.requests().len(),
        1,
        "only the quarantined starter's request went upstream"
    );

    // The starters shipped with Herma carry passing governance and fire.
    let shipped = dry_run(&app, &claude, "/herma").await;
    assert_eq!(shipped["provision_id"], "herma.help");

    // Refused on every surface: a caller's listing and reads of the built-ins leave refused
    // records out (an admin, who manages them, sees all).
    let ids = |listing: &Value| -> Vec<String> {
        listing["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let seen = req(Method::GET, "/v1/provisions?scope=system_builtin&limit=2")
        .key(&claude)
        .send(&app)
        .await;
    let mut visible = ids(&seen.2);
    let mut after = seen.2["next_after"].as_str().map(str::to_owned);
    while let Some(a) = after {
        let next = req(
            Method::GET,
            format!("/v1/provisions?scope=system_builtin&limit=2&after={a}"),
        )
        .key(&claude)
        .send(&app)
        .await;
        assert!(next.2["items"].as_array().unwrap().len() <= 2);
        visible.extend(ids(&next.2));
        after = next.2["next_after"].as_str().map(str::to_owned);
    }
    for id in ["s.verified", "s.blob-ok", "herma.help"] {
        assert!(visible.iter().any(|v| v == id), "{id} in {visible:?}");
    }
    for id in [
        "s.quarantined",
        "s.untrusted",
        "s.codex-only",
        "s.ungoverned",
        "s.blob-bad",
    ] {
        assert!(
            !visible.iter().any(|v| v == id),
            "{id} hidden from {visible:?}"
        );
    }
    let hidden = req(Method::GET, "/v1/provisions/s.quarantined")
        .key(&claude)
        .send(&app)
        .await;
    assert_eq!(hidden.0, StatusCode::NOT_FOUND);
    let for_codex = req(Method::GET, "/v1/provisions/s.codex-only")
        .key(&codex)
        .send(&app)
        .await;
    assert_eq!(for_codex.0, StatusCode::OK);
    let all = req(Method::GET, "/v1/provisions?scope=system_builtin&limit=100")
        .key(&admin)
        .send(&app)
        .await;
    assert!(ids(&all.2).iter().any(|v| v == "s.quarantined"));
}

#[tokio::test]
async fn a_callers_own_governed_record_is_held_to_the_lens_too() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    for (id, word, governance) in [
        ("mine.plain", "plain", None),
        (
            "mine.quarantined",
            "quarantined",
            Some(governed("quarantined", "tessera", json!({}))),
        ),
    ] {
        let got = req(Method::POST, "/v1/provisions")
            .key(&key)
            .harness("claude-code")
            .json(starter(id, word, governance))
            .send(&app)
            .await;
        assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
    }
    assert_eq!(
        dry_run(&app, &key, "plain").await["provision_id"],
        "mine.plain"
    );
    let report = dry_run(&app, &key, "quarantined").await;
    assert_eq!(report["decision"], "forward");
    assert_eq!(report["governance_refused"][0]["code"], "quarantined");

    // A governed context entry is held to the lens when it would be shimmed.
    for (id, status) in [("noun.ok", "verified"), ("noun.held", "quarantined")] {
        let got = req(Method::POST, "/v1/context")
            .key(&key)
            .harness("claude-code")
            .json(
                json!({"id": id, "kind": "noun", "schema_or_body": format!("{id} body"),
                "fabric_governance": governed(status, "tessera", json!({}))}),
            )
            .send(&app)
            .await;
        assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
    }
    let got = req(Method::POST, "/v1/provisions")
        .key(&key)
        .harness("claude-code")
        .json(json!({"id": "nouns", "action": "shim_context", "triggers": {"keywords": ["nouns"]}, "context_refs": ["noun.ok", "noun.held"]}))
        .send(&app)
        .await;
    assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
    let report = dry_run(&app, &key, "nouns").await;
    assert_eq!(report["decision"], "shim_context", "{report:#}");
    let text = report["shim"]["text"].as_str().unwrap();
    assert!(
        text.contains("noun.ok body") && !text.contains("noun.held body"),
        "{text}"
    );
    assert_eq!(
        report["shim"]["unresolved_context_refs"],
        json!(["noun.held"])
    );
    assert!(
        report["governance_refused"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "context_entry" && r["id"] == "noun.held")
    );
}

#[tokio::test]
async fn cohort_scoped_starters_fire_for_keys_in_that_cohort_only() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let admin = app.key("route,configure,admin", Some("claude-code")).await;
    let got = req(Method::POST, "/v1/provisions?scope=system_builtin")
        .key(&admin)
        .harness("claude-code")
        .json(starter(
            "s.platform",
            "kilo",
            Some(json!({"status": "verified", "producer": "agora", "visibility_scope": "cohort", "cohorts": ["platform"]})),
        ))
        .send(&app)
        .await;
    assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
    let issued = req(Method::POST, "/v1/admin/keys")
        .key(&admin)
        .json(json!({"scopes": ["route"], "cohorts": ["platform"]}))
        .send(&app)
        .await;
    assert_eq!(issued.0, StatusCode::CREATED, "{}", issued.2);
    assert_eq!(issued.2["cohorts"], json!(["platform"]));
    let member = issued.2["key"].as_str().unwrap().to_owned();
    let outsider = app.key("route", Some("claude-code")).await;
    assert_eq!(
        dry_run(&app, &member, "kilo").await["provision_id"],
        "s.platform"
    );
    let report = dry_run(&app, &outsider, "kilo").await;
    assert_eq!(report["decision"], "forward");
    assert!(
        !report["governance_refused"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "s.platform"),
        "a cohort's record is not named to outsiders"
    );
    let bad = req(Method::POST, "/v1/admin/keys")
        .key(&admin)
        .json(json!({"scopes": ["route"], "cohorts": ["no spaces allowed"]}))
        .send(&app)
        .await;
    assert_eq!(bad.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bad.2["errors"][0]["pointer"], "/cohorts/0");
}
