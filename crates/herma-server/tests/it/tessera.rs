//! Tessera store sync against a local Tessera-shaped server, on SQLite and PostgreSQL: synced
//! starters fire only while their governance passes (H19), quarantined and unverifiable
//! records are never served (H12), syncs are idempotent, resumable and remove what Tessera no
//! longer publishes, and bad records are refused with their reason while the sync goes on.

use herma_app::tessera::{HttpSource, SyncReport};
use herma_core::governance::sha256_hex;
use herma_store::DocumentStoreExt;
use herma_test_support::mock_tessera::{MockTessera, TOKEN};
use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{dry_run, receipt, req};

const DOC: &[u8] = b"The deploy runbook, version 3.";

fn governance(status: &str) -> Value {
    json!({"status": status, "producer": "tessera", "visibility_scope": "public"})
}

fn starter(id: &str, word: &str, version: u64, governance: Value) -> Value {
    json!({
        "uri": format!("tessera://records/starters/{id}"), "kind": "starter", "version": version,
        "governance": governance,
        "provision": {"id": id, "action": "shim_context", "triggers": {"keywords": [word]}, "context_refs": ["noun.deploy"]}
    })
}

fn noun(version: u64, body: &str) -> Value {
    json!({
        "uri": "tessera://records/nouns/deploy", "kind": "noun", "version": version,
        "governance": {"status": "verified", "producer": "tessera", "visibility_scope": "public",
            "blobs": [format!("tessera://blobs/{}", sha256_hex(DOC))]},
        "entry": {"id": "noun.deploy", "title": "Deploys", "schema_or_body": body}
    })
}

async fn sync(app: &TestApp, tessera: &MockTessera, after: Option<&str>) -> SyncReport {
    let source = HttpSource::new(
        &tessera.url(),
        Some(TOKEN),
        std::time::Duration::from_millis(500),
    )
    .unwrap();
    let mut pages = Vec::new();
    let report = app
        .app
        .tessera_sync(&source, after.map(str::to_owned), &mut |r| {
            pages.push(r.pages)
        })
        .await
        .unwrap();
    assert_eq!(
        pages.len() as u32,
        report.pages,
        "progress after every page"
    );
    report
}

async fn synced_starters_fire_only_with_their_governance(backend: Backend) {
    let app = spawn_app(backend, &[]).await;
    let tessera = MockTessera::start().await;
    tessera.put_blob(&sha256_hex(DOC), DOC);
    let mut published = vec![
        noun(1, "Deploys go through the release train."),
        starter("t.verified", "alpha", 1, governance("verified")),
        starter("t.quarantined", "bravo", 1, governance("quarantined")),
        starter(
            "t.untrusted",
            "charlie",
            1,
            json!({"status": "verified", "producer": "legacy-pack", "visibility_scope": "public"}),
        ),
        json!({"uri": "tessera://records/starters/broken", "kind": "starter", "version": 1, "governance": governance("verified")}),
        json!({"uri": "tessera://records/starters/odd", "kind": "spell", "version": 1}),
    ];
    // Enough records for several pages.
    for i in 0..230 {
        published.push(starter(
            &format!("t.bulk-{i:03}"),
            &format!("bulk{i}"),
            1,
            governance("verified"),
        ));
    }
    tessera.publish(published.clone());

    let first = sync(&app, &tessera, None).await;
    assert_eq!(first.pages, 3, "{first:?}");
    assert_eq!(first.records, 236);
    assert_eq!(first.created, 234);
    assert_eq!(
        first.not_served, 2,
        "quarantined and untrusted are stored, never served"
    );
    let refused: Vec<&str> = first.refused.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        refused,
        [
            "tessera://records/starters/broken",
            "tessera://records/starters/odd"
        ]
    );
    assert!(
        first.refused[0].reason.contains("provision"),
        "{}",
        first.refused[0].reason
    );

    let key = app.key("route", Some("claude-code")).await;
    let fired = dry_run(&app, &key, "alpha").await;
    assert_eq!(fired["decision"], "shim_context", "{fired:#}");
    assert!(
        fired["shim"]["text"]
            .as_str()
            .unwrap()
            .contains("release train")
    );
    // The receipt records which governed record was shimmed, its version and blob digest (H09).
    let mock = herma_test_support::mock_upstream::MockUpstream::start().await;
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .header("X-Upstream-Base-Url", mock.url())
        .json(&json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "alpha"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let receipt_id = response.headers()["x-herma-receipt"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = response.text().await;
    let receipt = receipt(&app, &key, &receipt_id).await;
    let shimmed = &receipt["shimmed_context_refs"][0];
    assert_eq!(shimmed["id"], "noun.deploy", "{receipt:#}");
    assert_eq!(shimmed["record_uri"], "tessera://records/nouns/deploy");
    assert_eq!(shimmed["record_version"], 1);
    assert_eq!(shimmed["blob_digests"], json!([sha256_hex(DOC)]));

    for word in ["bravo", "charlie"] {
        let held = dry_run(&app, &key, word).await;
        assert_eq!(held["decision"], "forward", "{word}: {held:#}");
    }

    // Again: nothing changes, no new versions.
    let again = sync(&app, &tessera, None).await;
    assert_eq!((again.created, again.updated, again.unchanged), (0, 0, 234));

    // Tessera changes: the noun's body, a starter quarantined, one starter gone, and a blob
    // that no longer matches its digest on the noun.
    published[0] = noun(2, "Deploys need two approvals.");
    published[1] = starter("t.verified", "alpha", 2, governance("quarantined"));
    published.truncate(6);
    published.push(starter("t.bulk-000", "bulk0", 1, governance("verified")));
    tessera.publish(published.clone());
    let changed = sync(&app, &tessera, None).await;
    assert_eq!(changed.updated, 2, "{changed:?}");
    assert_eq!(changed.removed, 229, "the bulk starters Tessera dropped");
    assert_eq!(
        dry_run(&app, &key, "alpha").await["decision"],
        "forward",
        "quarantined now"
    );
    let bulk = dry_run(&app, &key, "bulk0").await;
    assert!(
        bulk["shim"]["text"]
            .as_str()
            .unwrap()
            .contains("two approvals"),
        "{bulk:#}"
    );
    assert_eq!(
        dry_run(&app, &key, "bulk1").await["decision"],
        "forward",
        "removed"
    );

    // A blob whose content no longer hashes to its digest: the noun stops being served.
    let tampered = MockTessera::start().await;
    tampered.put_blob(&sha256_hex(DOC), b"tampered");
    tampered.publish(published);
    let report = sync(&app, &tampered, None).await;
    assert_eq!(report.updated, 1, "{report:?}");
    let shimmed = dry_run(&app, &key, "bulk0").await;
    assert_eq!(
        shimmed["decision"], "forward",
        "its only context entry is no longer served: {shimmed:#}"
    );
    let refusal = shimmed["governance_refused"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "noun.deploy")
        .cloned()
        .unwrap();
    assert_eq!(refusal["code"], "blob_digest_mismatch");
}

#[tokio::test]
async fn h19_tessera_synced_starters_fire_only_with_their_governance_sqlite() {
    synced_starters_fire_only_with_their_governance(Backend::Sqlite).await;
}

#[tokio::test]
async fn h19_tessera_synced_starters_fire_only_with_their_governance_postgres() {
    synced_starters_fire_only_with_their_governance(Backend::Postgres).await;
}

#[tokio::test]
async fn a_sync_that_stops_says_where_to_resume_and_never_removes() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let tessera = MockTessera::start().await;
    let records: Vec<Value> = (0..150)
        .map(|i| {
            starter(
                &format!("s{i:03}"),
                &format!("w{i}"),
                1,
                governance("verified"),
            )
        })
        .collect();
    tessera.publish(records);
    tessera.fail_from(Some(100));
    let stopped = sync(&app, &tessera, None).await;
    assert_eq!(stopped.created, 100);
    assert_eq!(stopped.resume_after.as_deref(), Some("100"));
    assert!(
        stopped.stopped.as_deref().unwrap().contains("503"),
        "{stopped:?}"
    );
    assert_eq!(stopped.removed, 0);

    tessera.fail_from(None);
    let resumed = sync(&app, &tessera, Some("100")).await;
    assert_eq!((resumed.created, resumed.pages), (50, 1));
    assert_eq!(
        resumed.removed, 0,
        "a resumed sync saw only part of Tessera"
    );

    tessera.redirect(true);
    let redirected = sync(&app, &tessera, None).await;
    assert!(
        redirected.stopped.as_deref().unwrap().contains("redirect"),
        "{redirected:?}"
    );
    assert_eq!(redirected.records, 0);
    // Nothing was removed: the 150 starters are all still there.
    let count = app
        .app
        .store
        .provisions()
        .list_all(&herma_core::CallerScope::system_builtin())
        .await
        .unwrap()
        .iter()
        .filter(|p| p.spec.id.starts_with('s'))
        .count();
    assert!(count >= 150);
}

#[tokio::test]
async fn a_synced_record_never_replaces_a_built_in_it_did_not_write() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let tessera = MockTessera::start().await;
    tessera.publish(vec![starter("herma.help", "x", 1, governance("verified"))]);
    let report = sync(&app, &tessera, None).await;
    assert_eq!(report.refused.len(), 1);
    assert!(report.refused[0].reason.contains("not synced from Tessera"));
    let key = app.key("route", Some("claude-code")).await;
    assert_eq!(
        dry_run(&app, &key, "/herma").await["provision_id"],
        "herma.help"
    );
}

#[tokio::test]
async fn admins_sync_through_the_api() {
    let tessera = MockTessera::start().await;
    tessera.publish(vec![starter("t.api", "zulu", 1, governance("verified"))]);
    let app = spawn_app(
        Backend::Sqlite,
        &[
            ("HERMA_TESSERA_URL", &tessera.url()),
            ("HERMA_TESSERA_TOKEN", TOKEN),
        ],
    )
    .await;
    let admin = app.key("route,configure,admin", Some("claude-code")).await;
    let caller = app.key("route,configure", Some("claude-code")).await;
    let refused = req(Method::POST, "/v1/admin/tessera/sync")
        .key(&caller)
        .send(&app)
        .await;
    assert_eq!(refused.0, StatusCode::FORBIDDEN);
    assert_eq!(tessera.pages_served(), 0);
    let got = req(Method::POST, "/v1/admin/tessera/sync")
        .key(&admin)
        .send(&app)
        .await;
    assert_eq!(got.0, StatusCode::OK, "{}", got.2);
    assert_eq!(got.2["created"], 1);
    assert_eq!(
        dry_run(&app, &caller, "zulu").await["provision_id"],
        Value::Null
    );
    assert_eq!(
        dry_run(&app, &caller, "zulu").await["decision"],
        "forward",
        "its context entry was never published"
    );

    let unconfigured = spawn_app(Backend::Memory, &[]).await;
    let admin = unconfigured.key("admin", None).await;
    let got = req(Method::POST, "/v1/admin/tessera/sync")
        .key(&admin)
        .send(&unconfigured)
        .await;
    assert_eq!(got.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        got.2["detail"]
            .as_str()
            .unwrap()
            .contains("HERMA_TESSERA_URL")
    );
}

#[tokio::test]
async fn an_oversized_blob_is_never_fetched_whole_and_its_record_never_served() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let tessera = MockTessera::start().await;
    let big = vec![b'a'; herma_core::tessera::MAX_BLOB_BYTES + 1];
    let digest = sha256_hex(&big);
    tessera.put_blob(&digest, &big);
    tessera.publish(vec![json!({
        "uri": "tessera://records/starters/big", "kind": "starter", "version": 1,
        "governance": {"status": "verified", "producer": "tessera", "visibility_scope": "public",
            "blobs": [format!("tessera://blobs/{digest}")]},
        "provision": {"id": "t.big", "action": "respond_directly", "response": {"text": "big"}, "triggers": {"keywords": ["big"]}}
    })]);
    let report = sync(&app, &tessera, None).await;
    assert_eq!((report.created, report.not_served), (1, 1), "{report:?}");
    let key = app.key("route", Some("claude-code")).await;
    let dry = dry_run(&app, &key, "big").await;
    assert_eq!(dry["decision"], "forward");
    let refusal = dry["governance_refused"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "t.big")
        .cloned()
        .unwrap();
    assert_eq!(refusal["code"], "blob_not_fetched");
}

#[tokio::test]
async fn a_stalled_tessera_and_an_oversized_page_stop_the_sync_without_writing() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let tessera = MockTessera::start().await;
    let records: Vec<Value> = (0..501)
        .map(|i| {
            starter(
                &format!("o{i:03}"),
                &format!("o{i}"),
                1,
                governance("verified"),
            )
        })
        .collect();
    tessera.publish(records);
    tessera.ignore_limit(true);
    let oversized = sync(&app, &tessera, None).await;
    assert!(
        oversized
            .stopped
            .as_deref()
            .unwrap()
            .contains("at most 500"),
        "{oversized:?}"
    );
    assert_eq!((oversized.records, oversized.created), (0, 0));

    tessera.ignore_limit(false);
    tessera.stall(Some(std::time::Duration::from_secs(3)));
    let stalled = sync(&app, &tessera, None).await;
    assert!(
        stalled.stopped.as_deref().unwrap().contains("timed out"),
        "{stalled:?}"
    );
    assert_eq!(stalled.created, 0);
    assert_eq!(
        stalled.resume_after, None,
        "stopped on the first page: run again from the start"
    );
}

#[tokio::test]
async fn a_record_that_fails_to_read_keeps_its_last_good_version_and_ids_are_not_shared() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let tessera = MockTessera::start().await;
    let good = starter("t.keep", "lima", 1, governance("verified"));
    tessera.publish(vec![good.clone()]);
    assert_eq!(sync(&app, &tessera, None).await.created, 1);

    // Still published, but this version cannot be read: refused, and the stored one stays.
    let mut broken = good.clone();
    broken["provision"]["triggers"] = json!({});
    let other = json!({
        "uri": "tessera://records/starters/impostor", "kind": "starter", "version": 1,
        "governance": governance("verified"),
        "provision": {"id": "t.keep", "action": "respond_directly", "response": {"text": "impostor"}, "triggers": {"keywords": ["lima"]}}
    });
    tessera.publish(vec![broken, other]);
    let report = sync(&app, &tessera, None).await;
    assert_eq!(report.removed, 0, "{report:?}");
    assert_eq!(report.refused.len(), 2, "{report:?}");
    assert!(
        report.refused[1].reason.contains("another Tessera record"),
        "{report:?}"
    );
    let key = app.key("route", Some("claude-code")).await;
    let kept = dry_run(&app, &key, "lima").await;
    assert_eq!(
        kept["tiers"]["keyword"][0]["provision_id"], "t.keep",
        "{kept:#}"
    );
    assert!(!kept["direct_response"].to_string().contains("impostor"));
}
