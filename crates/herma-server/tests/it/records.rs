//! Provisions and context entries over HTTP: compare-and-set (H07), isolation and the built-in
//! lock (H11), on SQLite and PostgreSQL.

use herma_test_support::fixtures::{context_entry, provision};
use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{assert_problem, req};

fn with_version(mut body: Value, version: u64) -> Value {
    body["expected_version"] = json!(version);
    body
}

async fn cas_round_trip(backend: Backend) {
    let app = spawn_app(backend, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    for (base, body) in [
        ("/v1/provisions", provision("deploy")),
        ("/v1/context", context_entry("deploy")),
    ] {
        let created = req(Method::POST, base)
            .key(&key)
            .harness("claude-code")
            .json(body.clone())
            .send(&app)
            .await;
        assert_eq!(created.0, StatusCode::CREATED, "{}", created.2);
        assert_eq!(created.2["version"], 1);
        assert_eq!(
            created.2["caller_scope"],
            format!("key:{}", TestApp::key_id(&key))
        );

        let mut changed = body.clone();
        changed["description"] = json!("changed");
        if base == "/v1/context" {
            changed = context_entry("deploy");
            changed["title"] = json!("changed");
        }
        let updated = req(Method::PUT, format!("{base}/deploy"))
            .key(&key)
            .harness("claude-code")
            .json(with_version(changed.clone(), 1))
            .send(&app)
            .await;
        assert_eq!(updated.0, StatusCode::OK, "{}", updated.2);
        assert_eq!(updated.2["version"], 2);

        // A second writer that read version 1 loses, learns the current version, writes nothing.
        let mut lost = changed.clone();
        lost["tags"] = json!(["lost"]);
        if base == "/v1/provisions" {
            lost = provision("deploy");
            lost["priority"] = json!(99);
        }
        let stale = req(Method::PUT, format!("{base}/deploy"))
            .key(&key)
            .harness("claude-code")
            .json(with_version(lost, 1))
            .send(&app)
            .await;
        assert_problem(&stale, StatusCode::CONFLICT, "version_conflict");
        assert_eq!(stale.2["current_version"], 2);
        assert_eq!(stale.2["expected_version"], 1);
        let read = req(Method::GET, format!("{base}/deploy"))
            .key(&key)
            .send(&app)
            .await;
        assert_eq!(read.2, updated.2, "the stale write changed nothing");

        let dup = req(Method::POST, base)
            .key(&key)
            .harness("claude-code")
            .json(body)
            .send(&app)
            .await;
        assert_problem(&dup, StatusCode::CONFLICT, "version_conflict");
        assert_eq!(dup.2["current_version"], 2);

        let stale_delete = req(Method::DELETE, format!("{base}/deploy?expected_version=1"))
            .key(&key)
            .harness("claude-code")
            .send(&app)
            .await;
        assert_problem(&stale_delete, StatusCode::CONFLICT, "version_conflict");
        let deleted = req(Method::DELETE, format!("{base}/deploy?expected_version=2"))
            .key(&key)
            .harness("claude-code")
            .send(&app)
            .await;
        assert_eq!(deleted.0, StatusCode::NO_CONTENT);
        let gone = req(Method::GET, format!("{base}/deploy"))
            .key(&key)
            .send(&app)
            .await;
        assert_problem(&gone, StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn h07_compare_and_set_over_http_on_sqlite() {
    cas_round_trip(Backend::Sqlite).await;
}

#[tokio::test]
async fn h07_compare_and_set_over_http_on_postgres() {
    cas_round_trip(Backend::Postgres).await;
}

async fn isolation(backend: Backend) {
    let app = spawn_app(backend, &[]).await;
    let alice = app.key("route,configure", Some("claude-code")).await;
    let bob = app.key("route,configure", Some("codex")).await;
    let create = |key: &str, harness: &'static str, body: Value| {
        let key = key.to_owned();
        let app = &app;
        async move {
            req(Method::POST, "/v1/provisions")
                .key(&key)
                .harness(harness)
                .json(body)
                .send(app)
                .await
        }
    };
    assert_eq!(
        create(&alice, "claude-code", provision("shared")).await.0,
        StatusCode::CREATED
    );
    let mut bobs = provision("shared");
    bobs["description"] = json!("bob's");
    assert_eq!(
        create(&bob, "codex", bobs).await.0,
        StatusCode::CREATED,
        "same id, separate scope"
    );

    let alices = req(Method::GET, "/v1/provisions/shared")
        .key(&alice)
        .send(&app)
        .await;
    assert_eq!(alices.2["description"], "deploy help");
    // Bob's update and delete touch only Bob's row.
    let mut update = provision("shared");
    update["expected_version"] = json!(1);
    update["description"] = json!("bob again");
    assert_eq!(
        req(Method::PUT, "/v1/provisions/shared")
            .key(&bob)
            .harness("codex")
            .json(update)
            .send(&app)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        req(Method::DELETE, "/v1/provisions/shared")
            .key(&bob)
            .harness("codex")
            .send(&app)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let still = req(Method::GET, "/v1/provisions/shared")
        .key(&alice)
        .send(&app)
        .await;
    assert_eq!(
        (still.2["version"].clone(), still.2["description"].clone()),
        (json!(1), json!("deploy help"))
    );
    // Alice's private record is invisible to Bob everywhere.
    assert_eq!(
        create(&alice, "claude-code", provision("alice-only"))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_problem(
        &req(Method::GET, "/v1/provisions/alice-only")
            .key(&bob)
            .send(&app)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let mut steal = provision("alice-only");
    steal["expected_version"] = json!(1);
    assert_problem(
        &req(Method::PUT, "/v1/provisions/alice-only")
            .key(&bob)
            .harness("codex")
            .json(steal)
            .send(&app)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_problem(
        &req(Method::DELETE, "/v1/provisions/alice-only")
            .key(&bob)
            .harness("codex")
            .send(&app)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let bobs_list = req(Method::GET, "/v1/provisions")
        .key(&bob)
        .send(&app)
        .await;
    assert_eq!(bobs_list.2["items"], json!([]));
    let alices_list = req(Method::GET, "/v1/provisions")
        .key(&alice)
        .send(&app)
        .await;
    let ids: Vec<_> = alices_list.2["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["alice-only", "shared"]);
}

#[tokio::test]
async fn h11_callers_never_see_or_change_each_others_records_on_sqlite() {
    isolation(Backend::Sqlite).await;
}

#[tokio::test]
async fn h11_callers_never_see_or_change_each_others_records_on_postgres() {
    isolation(Backend::Postgres).await;
}

#[tokio::test]
async fn h11_builtin_records_return_builtin_protected_on_non_admin_writes() {
    let app = spawn_app(
        Backend::Sqlite,
        &[("HERMA_ADMIN_TOKEN", "bootstrap-token-0123456789abcdef")],
    )
    .await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let builtin = req(Method::GET, "/v1/provisions/git.force-push")
        .key(&key)
        .send(&app)
        .await;
    assert_eq!(builtin.0, StatusCode::OK, "built-ins are readable");
    assert_eq!(builtin.2["caller_scope"], "system_builtin");
    let original = builtin.2.clone();

    let mut body = provision("git.force-push");
    body["expected_version"] = json!(1);
    let attempts = [
        req(Method::PUT, "/v1/provisions/git.force-push")
            .key(&key)
            .harness("claude-code")
            .json(body.clone()),
        req(Method::DELETE, "/v1/provisions/git.force-push")
            .key(&key)
            .harness("claude-code"),
        req(Method::POST, "/v1/provisions")
            .key(&key)
            .harness("claude-code")
            .json(provision("git.force-push")),
        req(Method::POST, "/v1/provisions?scope=system_builtin")
            .key(&key)
            .harness("claude-code")
            .json(provision("new.builtin")),
        req(Method::PUT, "/v1/context/secrets.hygiene")
            .key(&key)
            .harness("claude-code")
            .json(with_version(context_entry("secrets.hygiene"), 1)),
    ];
    for attempt in attempts {
        let got = attempt.send(&app).await;
        assert_eq!(got.0, StatusCode::FORBIDDEN, "{}", got.2);
        assert!(
            ["builtin_protected", "admin_required"].contains(&got.2["code"].as_str().unwrap()),
            "{}",
            got.2
        );
    }
    let after = req(Method::GET, "/v1/provisions/git.force-push")
        .key(&key)
        .send(&app)
        .await;
    assert_eq!(after.2, original, "unchanged");

    // An admin may change built-ins.
    let admin = app.key("route,configure,admin", Some("claude-code")).await;
    let mut edit = original.clone();
    for managed in ["caller_scope", "version", "created_at", "updated_at"] {
        edit.as_object_mut().unwrap().remove(managed);
    }
    edit["expected_version"] = json!(1);
    edit["priority"] = json!(11);
    let changed = req(
        Method::PUT,
        "/v1/provisions/git.force-push?scope=system_builtin",
    )
    .key(&admin)
    .harness("claude-code")
    .json(edit)
    .send(&app)
    .await;
    assert_eq!(changed.0, StatusCode::OK, "{}", changed.2);
    assert_eq!(changed.2["version"], 2);
    let listed = req(Method::GET, "/v1/provisions?scope=system_builtin")
        .key(&key)
        .send(&app)
        .await;
    assert!(
        listed.2["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == "git.force-push" && p["version"] == 2)
    );
}

#[tokio::test]
async fn listings_page_with_next_after() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    for id in ["c", "a", "b"] {
        req(Method::POST, "/v1/context")
            .key(&key)
            .harness("claude-code")
            .json(context_entry(id))
            .send(&app)
            .await;
    }
    let first = req(Method::GET, "/v1/context?limit=2")
        .key(&key)
        .send(&app)
        .await;
    assert_eq!(first.2["next_after"], "b");
    let second = req(Method::GET, "/v1/context?limit=2&after=b")
        .key(&key)
        .send(&app)
        .await;
    assert_eq!(second.2["items"].as_array().unwrap().len(), 1);
    assert!(second.2.get("next_after").is_none());
    let bad = req(Method::GET, "/v1/context?limit=0")
        .key(&key)
        .send(&app)
        .await;
    assert_problem(&bad, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let unknown = req(Method::GET, "/v1/context?colour=blue")
        .key(&key)
        .send(&app)
        .await;
    assert_problem(
        &unknown,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
}

#[tokio::test]
async fn receipts_are_readable_only_by_their_caller() {
    use herma_core::model::{ReceiptAction, ReceiptBody, Timings};
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let alice = app.key("route", None).await;
    let bob = app.key("route", None).await;
    let scope =
        herma_core::CallerScope::parse(&format!("key:{}", TestApp::key_id(&alice))).unwrap();
    let receipt = ReceiptBody {
        caller_scope: scope,
        protocol: "messages".into(),
        conversation_id: "c".into(),
        model: "m".into(),
        action: ReceiptAction::Forwarded,
        matched: vec![],
        shimmed_context_refs: vec![],
        unresolved_context_refs: vec![],
        upstream_status: Some(200),
        usage: None,
        timings: Timings::default(),
        stream_end: None,
        error: None,
        created_at: herma_core::Timestamp::from_millis(1),
    }
    .seal("rcpt_test".into());
    app.app
        .store
        .insert_receipts(std::slice::from_ref(&receipt))
        .await
        .unwrap();
    let mine = req(Method::GET, "/v1/receipts/rcpt_test")
        .key(&alice)
        .send(&app)
        .await;
    assert_eq!(mine.0, StatusCode::OK);
    assert_eq!(mine.2["sha256"], receipt.sha256);
    let theirs = req(Method::GET, "/v1/receipts/rcpt_test")
        .key(&bob)
        .send(&app)
        .await;
    assert_problem(&theirs, StatusCode::NOT_FOUND, "not_found");
}

/// Issue 17, finding 4: per-caller quotas on stored records, named in the problem.
#[tokio::test]
async fn a_caller_stores_at_most_its_quotas_and_others_are_not_affected() {
    let app = spawn_app(
        Backend::Sqlite,
        &[
            ("HERMA_CALLER_MAX_PROVISIONS", "2"),
            ("HERMA_CALLER_MAX_STORED_BYTES", "8192"),
        ],
    )
    .await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let other = app.key("route,configure", Some("claude-code")).await;
    fn post<'a>(key: &'a str, path: &'static str, body: Value) -> crate::Req<'a> {
        req(Method::POST, path)
            .key(key)
            .harness("claude-code")
            .json(body)
    }
    for id in ["q.one", "q.two"] {
        let got = post(&key, "/v1/provisions", provision(id)).send(&app).await;
        assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
    }
    let third = post(&key, "/v1/provisions", provision("q.three"))
        .send(&app)
        .await;
    assert_problem(&third, StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(third.2["limit"], "HERMA_CALLER_MAX_PROVISIONS");
    let listed = req(Method::GET, "/v1/provisions")
        .key(&key)
        .send(&app)
        .await;
    assert_eq!(
        listed.2["items"].as_array().unwrap().len(),
        2,
        "nothing written"
    );
    // Another caller has its own quota; a deletion frees a slot.
    let theirs = post(&other, "/v1/provisions", provision("q.three"))
        .send(&app)
        .await;
    assert_eq!(theirs.0, StatusCode::CREATED, "{}", theirs.2);
    let deleted = req(Method::DELETE, "/v1/provisions/q.one")
        .key(&key)
        .harness("claude-code")
        .send(&app)
        .await;
    assert!(deleted.0.is_success(), "{}", deleted.2);
    let again = post(&key, "/v1/provisions", provision("q.three"))
        .send(&app)
        .await;
    assert_eq!(again.0, StatusCode::CREATED, "{}", again.2);

    // Bytes: a large entry fits once; a second does not; shrinking the first by update is fine.
    let big = |id: &str, chars: usize| json!({"id": id, "kind": "noun", "schema_or_body": "x".repeat(chars)});
    let first = post(&key, "/v1/context", big("big.one", 5000))
        .send(&app)
        .await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.2);
    let second = post(&key, "/v1/context", big("big.two", 5000))
        .send(&app)
        .await;
    assert_problem(&second, StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(second.2["limit"], "HERMA_CALLER_MAX_STORED_BYTES");
    let mut smaller = big("big.one", 100);
    smaller["expected_version"] = json!(1);
    let shrunk = req(Method::PUT, "/v1/context/big.one")
        .key(&key)
        .harness("claude-code")
        .json(smaller)
        .send(&app)
        .await;
    assert_eq!(shrunk.0, StatusCode::OK, "{}", shrunk.2);
    let fits = post(&key, "/v1/context", big("big.two", 5000))
        .send(&app)
        .await;
    assert_eq!(fits.0, StatusCode::CREATED, "{}", fits.2);
}

/// Found by the API fuzz: an `expected_version` past the signed 64-bit range (which no record can
/// have) was a 500 from the SQL stores; it is a field error, and nothing changes.
async fn expected_version_beyond_any_version(backend: Backend) {
    let app = spawn_app(backend, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let too_large = "9223372036854775808";
    for (base, body) in [
        ("/v1/provisions", provision("deploy")),
        ("/v1/context", context_entry("deploy.checklist")),
    ] {
        let id = body["id"].as_str().unwrap().to_owned();
        let created = req(Method::POST, base)
            .key(&key)
            .harness("claude-code")
            .json(body.clone())
            .send(&app)
            .await;
        assert_eq!(created.0, StatusCode::CREATED, "{}", created.2);
        let deleted = req(
            Method::DELETE,
            format!("{base}/{id}?expected_version={too_large}"),
        )
        .key(&key)
        .harness("claude-code")
        .send(&app)
        .await;
        assert_problem(
            &deleted,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        );
        assert_eq!(deleted.2["errors"][0]["pointer"], "/expected_version");
        let mut update: Value = body.clone();
        update["expected_version"] = serde_json::from_str(too_large).unwrap();
        let updated = req(Method::PUT, format!("{base}/{id}"))
            .key(&key)
            .harness("claude-code")
            .json(update)
            .send(&app)
            .await;
        assert_problem(
            &updated,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        );
        let read = req(Method::GET, format!("{base}/{id}"))
            .key(&key)
            .send(&app)
            .await;
        assert_eq!(read.2["version"], 1, "nothing changed: {}", read.2);
    }
}

#[tokio::test]
async fn an_expected_version_beyond_any_version_is_a_field_error_on_sqlite() {
    expected_version_beyond_any_version(Backend::Sqlite).await;
}

#[tokio::test]
async fn an_expected_version_beyond_any_version_is_a_field_error_on_postgres() {
    expected_version_beyond_any_version(Backend::Postgres).await;
}
