//! The store conformance suite: one behaviour, every backend.
//!
//! A backend's integration tests call [`store_conformance_tests!`](crate::store_conformance_tests)
//! with an async factory returning a fresh, migrated store; each case below, and each of
//! [`crate::conversation_conformance`], becomes a named test.

// A test suite compiled into the library for the backends' test binaries: failing loudly is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use herma_core::key::{KeyDigest, KeyId, Scope, Scopes};
use herma_core::model::{
    Action, ContextEntrySpec, ContextKind, EntityKind, HarnessKey, InjectionReceipt, MatchedRule,
    OutcomeKind, ProvisionSpec, ReceiptAction, ReceiptBody, RuleOutcomeRecord, Tier, Timings,
    Triggers,
};
use herma_core::{CallerScope, Timestamp};
use serde_json::{Value, json};

use crate::{
    Collection, DocumentStoreExt, EntityObservation, EntityTurn, ImportSummary, Page, Revisions,
    Store, StoreError,
};

/// Generates one test per conformance case for a backend.
#[macro_export]
macro_rules! store_conformance_tests {
    ($factory:path) => {
        $crate::store_conformance_tests!(@cases $factory; conformance;
            migrate_is_idempotent,
            keys_are_inserted_found_listed_and_revoked,
            documents_are_created_read_and_listed,
            creating_an_existing_id_conflicts_with_its_version,
            compare_and_set_updates_bump_the_version_and_refuse_stale_versions,
            deletes_check_the_expected_version,
            documents_are_partitioned_by_caller_scope,
            listings_page_in_id_order,
            get_many_returns_only_existing_ids,
            imports_create_update_and_keep_unchanged_documents,
            typed_records_round_trip,
            usage_counts_a_callers_documents_and_their_bytes,
            receipts_are_idempotent_and_partitioned,
            entities_are_counted_and_evicted_rarest_oldest_first,
            an_entity_seen_again_in_one_write_is_counted_again,
            entity_turns_in_one_write_count_and_evict_as_one_by_one,
            entity_turns_at_the_cap_evict_as_one_by_one,
            outcomes_are_listed_newest_first_per_scope,
            old_receipts_and_outcomes_are_pruned_in_batches_and_new_ones_kept,
            a_large_batch_of_outcomes_keeps_its_order,
            h07_sixty_four_concurrent_compare_and_set_updates_have_exactly_one_winner,
            revisions_count_every_change_per_scope_and_collection,
            outcomes_answer_which_rules_fired_in_a_turn_and_how_often,
            h08_once_per_conversation_claims_have_one_winner,
            semantic_vectors_are_kept_per_version_and_model,
        );
        $crate::store_conformance_tests!(@cases $factory; conversation_conformance;
            a_conversation_is_created_by_its_first_turn_and_counts_sealed_turns,
            attempts_are_kept_in_order_and_replaced_by_number,
            replaying_a_request_id_returns_the_stored_turn_and_moves_no_counter,
            a_request_id_reused_with_another_input_is_refused,
            a_turn_while_another_is_active_is_refused,
            a_stale_version_is_refused_with_the_current_one,
            a_changed_fingerprint_is_refused,
            expired_conversations_become_tombstones_whose_ids_stay_refused,
            the_sweeper_expires_at_most_its_limit_soonest_first,
            the_sweep_is_next_due_at_the_soonest_seal_or_idle_expiry,
            a_caller_may_create_only_so_many_conversation_ids,
            a_caller_has_at_most_two_active_turns_until_one_is_sealed,
            hourly_turns_are_limited_and_a_new_conversation_does_not_reset_them,
            a_refused_admission_writes_nothing,
            sealing_twice_is_refused_the_second_time,
            a_seal_may_replace_the_server_exception_and_otherwise_keeps_it,
            unfinished_turns_are_the_active_ones_admitted_before_the_cutoff_oldest_first,
            conversations_are_partitioned_by_caller_scope,
            reservations_are_all_or_nothing_and_releases_stop_at_zero,
            sixty_four_concurrent_reservations_stop_exactly_at_the_ceiling,
            concurrent_admissions_never_exceed_the_active_limit,
            concurrent_first_turns_of_one_conversation_admit_one,
            health_limits_replace_only_older_ones_and_stale_successes_keep_them,
            one_recovery_probe_per_resource_and_never_without_its_allowance,
            an_expired_probe_is_replaced_once,
            concurrent_probes_of_one_store_admit_exactly_one,
        );

        #[test]
        fn three_callers_never_observe_or_change_each_others_rows() {
            $crate::conformance::run_isolation_property(|| Box::pin($factory()));
        }
    };
    (@cases $factory:path; $module:ident; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store = $factory().await;
                $crate::$module::$case(store).await;
            }
        )*
    };
}

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// A caller scope no other case of this process uses.
pub fn fresh_scope() -> CallerScope {
    let n = NEXT_SCOPE.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 40);
    let id = KeyId::parse(&format!("{n:016x}")).expect("16 hex digits");
    CallerScope::for_key(&id)
}

/// An observation of `value` as `kind`.
fn obs(kind: EntityKind, value: &str) -> EntityObservation {
    EntityObservation {
        kind,
        value: value.to_owned(),
    }
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_790_000_000_000 + ms)
}

pub fn provision(id: &str, keyword: &str) -> ProvisionSpec {
    ProvisionSpec {
        id: id.to_owned(),
        description: String::new(),
        action: Action::ShimContext,
        priority: 0,
        trigger_mode: Default::default(),
        triggers: Triggers {
            keywords: vec![keyword.to_owned()],
            ..Triggers::default()
        },
        context_refs: vec!["ctx".to_owned()],
        response: None,
        once_per_conversation: false,
        enabled: true,
        fabric_governance: None,
    }
}

pub fn context_entry(id: &str, body: &str) -> ContextEntrySpec {
    ContextEntrySpec {
        id: id.to_owned(),
        kind: ContextKind::Noun,
        title: String::new(),
        schema_or_body: Value::String(body.to_owned()),
        uri: None,
        tags: vec![],
        fabric_governance: None,
    }
}

fn key(scopes: &[Scope], created: i64) -> HarnessKey {
    let scope = fresh_scope();
    let key_id = KeyId::parse(scope.as_str().trim_start_matches("key:")).expect("key id");
    HarnessKey {
        key_id,
        caller_scope: scope,
        scopes: Scopes::new(scopes.iter().copied()),
        harness: Some("claude-code".into()),
        label: "test".into(),
        cohorts: vec!["platform".into(), "research".into()],
        digest: KeyDigest::of(&format!("secret-{created}")),
        created_at: at(created),
        revoked_at: None,
    }
}

pub async fn migrate_is_idempotent(store: Arc<dyn Store>) {
    assert!(
        store.migrate().await.unwrap().is_empty(),
        "a fresh store is already migrated"
    );
    store.ping().await.unwrap();
}

pub async fn keys_are_inserted_found_listed_and_revoked(store: Arc<dyn Store>) {
    let a = key(&[Scope::Route], 1);
    let b = key(&[Scope::Route, Scope::Configure, Scope::Admin], 2);
    store.insert_key(&a).await.unwrap();
    store.insert_key(&b).await.unwrap();
    assert!(store.insert_key(&a).await.is_err(), "key ids are unique");

    let found = store.find_key(&b.key_id).await.unwrap().unwrap();
    assert_eq!(found, b);
    assert!(found.digest.matches(&b.digest));
    assert!(
        store
            .find_key(&KeyId::parse("ffffffffffffffff").unwrap())
            .await
            .unwrap()
            .is_none()
    );

    let listed = store.list_keys().await.unwrap();
    let ids: Vec<_> = listed.iter().map(|k| k.key_id.clone()).collect();
    let pos_a = ids.iter().position(|i| *i == a.key_id).unwrap();
    let pos_b = ids.iter().position(|i| *i == b.key_id).unwrap();
    assert!(pos_b < pos_a, "newest first");

    assert!(store.revoke_key(&a.key_id, at(10)).await.unwrap());
    assert!(
        !store.revoke_key(&a.key_id, at(11)).await.unwrap(),
        "second revoke is a no-op"
    );
    assert_eq!(
        store.find_key(&a.key_id).await.unwrap().unwrap().revoked_at,
        Some(at(10))
    );
    assert_eq!(
        store
            .revoke_key(&KeyId::parse("eeeeeeeeeeeeeeee").unwrap(), at(1))
            .await,
        Err(StoreError::NotFound)
    );
}

pub async fn documents_are_created_read_and_listed(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    for collection in Collection::ALL {
        let body = json!({"id": "a", "n": 1, "nested": {"z": [1, 2], "a": "ü"}});
        let doc = store
            .create_doc(collection, &scope, "a", &body, at(1))
            .await
            .unwrap();
        assert_eq!(
            (doc.version, doc.created_at, doc.updated_at),
            (1, at(1), at(1))
        );
        let read = store
            .get_doc(collection, &scope, "a")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read, doc);
        assert_eq!(read.body, body);
        assert_eq!(
            serde_json::to_string(&read.body).unwrap(),
            serde_json::to_string(&body).unwrap(),
            "key order kept"
        );
        assert!(
            store
                .get_doc(collection, &scope, "b")
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            store
                .list_docs(collection, &scope, &Page::all())
                .await
                .unwrap(),
            vec![doc]
        );
    }
}

pub async fn creating_an_existing_id_conflicts_with_its_version(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let c = Collection::Provisions;
    store
        .create_doc(c, &scope, "a", &json!({"v": 1}), at(1))
        .await
        .unwrap();
    store
        .update_doc(c, &scope, "a", &json!({"v": 2}), 1, at(2))
        .await
        .unwrap();
    let err = store
        .create_doc(c, &scope, "a", &json!({"v": 3}), at(3))
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::VersionConflict { current: Some(2) });
    assert_eq!(
        store.get_doc(c, &scope, "a").await.unwrap().unwrap().body,
        json!({"v": 2})
    );
}

pub async fn compare_and_set_updates_bump_the_version_and_refuse_stale_versions(
    store: Arc<dyn Store>,
) {
    let scope = fresh_scope();
    for c in Collection::ALL {
        store
            .create_doc(c, &scope, "a", &json!({"v": 1}), at(1))
            .await
            .unwrap();
        let v2 = store
            .update_doc(c, &scope, "a", &json!({"v": 2}), 1, at(2))
            .await
            .unwrap();
        assert_eq!(
            (v2.version, v2.created_at, v2.updated_at),
            (2, at(1), at(2))
        );
        assert_eq!(v2.body, json!({"v": 2}));

        let stale = store
            .update_doc(c, &scope, "a", &json!({"v": "lost"}), 1, at(3))
            .await;
        assert_eq!(stale, Err(StoreError::VersionConflict { current: Some(2) }));
        let ahead = store
            .update_doc(c, &scope, "a", &json!({"v": "lost"}), 7, at(3))
            .await;
        assert_eq!(ahead, Err(StoreError::VersionConflict { current: Some(2) }));
        let now = store.get_doc(c, &scope, "a").await.unwrap().unwrap();
        assert_eq!(
            (now.version, now.body.clone(), now.updated_at),
            (2, json!({"v": 2}), at(2)),
            "nothing written"
        );

        let missing = store
            .update_doc(c, &scope, "nope", &json!({}), 1, at(3))
            .await;
        assert_eq!(missing, Err(StoreError::NotFound));
    }
}

pub async fn deletes_check_the_expected_version(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let c = Collection::ContextEntries;
    store
        .create_doc(c, &scope, "a", &json!({}), at(1))
        .await
        .unwrap();
    store
        .create_doc(c, &scope, "b", &json!({}), at(1))
        .await
        .unwrap();
    assert_eq!(
        store.delete_doc(c, &scope, "a", Some(2)).await,
        Err(StoreError::VersionConflict { current: Some(1) })
    );
    assert!(store.get_doc(c, &scope, "a").await.unwrap().is_some());
    store.delete_doc(c, &scope, "a", Some(1)).await.unwrap();
    store.delete_doc(c, &scope, "b", None).await.unwrap();
    assert!(store.get_doc(c, &scope, "a").await.unwrap().is_none());
    assert_eq!(
        store.delete_doc(c, &scope, "a", None).await,
        Err(StoreError::NotFound)
    );
    // A deleted id can be created again, from version 1.
    assert_eq!(
        store
            .create_doc(c, &scope, "a", &json!({}), at(2))
            .await
            .unwrap()
            .version,
        1
    );
}

pub async fn documents_are_partitioned_by_caller_scope(store: Arc<dyn Store>) {
    let (a, b) = (fresh_scope(), fresh_scope());
    for c in Collection::ALL {
        store
            .create_doc(c, &a, "shared", &json!({"owner": "a"}), at(1))
            .await
            .unwrap();
        store
            .create_doc(c, &b, "shared", &json!({"owner": "b"}), at(1))
            .await
            .unwrap();
        store
            .update_doc(c, &b, "shared", &json!({"owner": "b2"}), 1, at(2))
            .await
            .unwrap();
        assert_eq!(
            store.get_doc(c, &a, "shared").await.unwrap().unwrap().body,
            json!({"owner": "a"})
        );
        store.delete_doc(c, &b, "shared", None).await.unwrap();
        assert_eq!(
            store
                .get_doc(c, &a, "shared")
                .await
                .unwrap()
                .unwrap()
                .version,
            1
        );
        store
            .create_doc(c, &b, "only-b", &json!({}), at(3))
            .await
            .unwrap();
        assert!(store.get_doc(c, &a, "only-b").await.unwrap().is_none());
        assert_eq!(
            store
                .update_doc(c, &a, "only-b", &json!({}), 1, at(4))
                .await,
            Err(StoreError::NotFound)
        );
        assert_eq!(
            store.delete_doc(c, &a, "only-b", None).await,
            Err(StoreError::NotFound)
        );
        let listed: Vec<_> = store.list_docs(c, &a, &Page::all()).await.unwrap();
        assert!(listed.iter().all(|d| d.caller_scope == a));
        assert_eq!(listed.len(), 1);
    }
    // Collections are separate too.
    assert!(
        store
            .get_doc(Collection::Provisions, &b, "only-b")
            .await
            .unwrap()
            .is_some()
    );
}

pub async fn listings_page_in_id_order(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let c = Collection::Provisions;
    for id in ["m", "b", "z", "a", "c"] {
        store
            .create_doc(c, &scope, id, &json!({}), at(1))
            .await
            .unwrap();
    }
    let first = store.list_docs(c, &scope, &Page::first(2)).await.unwrap();
    assert_eq!(
        first.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let rest = store
        .list_docs(
            c,
            &scope,
            &Page {
                after: Some("b".into()),
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        rest.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["c", "m", "z"]
    );
    let all = store.provisions().list_all(&scope).await;
    assert!(
        matches!(all, Err(StoreError::Corrupt(_))),
        "bodies that are not provisions are reported, not hidden"
    );
}

pub async fn get_many_returns_only_existing_ids(store: Arc<dyn Store>) {
    let (scope, other) = (fresh_scope(), fresh_scope());
    let c = Collection::ContextEntries;
    for id in ["x", "y"] {
        store
            .create_doc(c, &scope, id, &json!({"id": id}), at(1))
            .await
            .unwrap();
    }
    store
        .create_doc(c, &other, "z", &json!({}), at(1))
        .await
        .unwrap();
    let ids: Vec<String> = ["y", "missing", "x", "z", "y"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let got = store.get_docs(c, &scope, &ids).await.unwrap();
    assert_eq!(
        got.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["x", "y"]
    );
    assert!(store.get_docs(c, &scope, &[]).await.unwrap().is_empty());
}

pub async fn imports_create_update_and_keep_unchanged_documents(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let provisions = store.provisions();
    provisions
        .create(&scope, &provision("keep", "k"), at(1))
        .await
        .unwrap();
    provisions
        .create(&scope, &provision("change", "old"), at(1))
        .await
        .unwrap();
    let summary = provisions
        .import(
            &scope,
            &[
                provision("keep", "k"),
                provision("change", "new"),
                provision("fresh", "f"),
            ],
            at(5),
        )
        .await
        .unwrap();
    assert_eq!(
        summary,
        ImportSummary {
            created: 1,
            updated: 1,
            unchanged: 1
        }
    );
    let all = provisions.list_all(&scope).await.unwrap();
    let versions: Vec<_> = all
        .iter()
        .map(|p| (p.spec.id.as_str(), p.version))
        .collect();
    assert_eq!(versions, [("change", 2), ("fresh", 1), ("keep", 1)]);
    assert_eq!(all[0].spec.triggers.keywords, ["new"]);
    assert_eq!(all[0].updated_at, at(5));
    assert_eq!(
        all[2].updated_at,
        at(1),
        "unchanged documents keep their time"
    );
}

/// A context entry body holding a work contract the portable profile accepts.
fn work_contract_body() -> Value {
    json!({"work_contract": {
        "operation_id": "op",
        "category_id": "planning",
        "description": "d",
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": false}
    }})
}

pub async fn usage_counts_a_callers_documents_and_their_bytes(store: Arc<dyn Store>) {
    let (scope, other) = (fresh_scope(), fresh_scope());
    assert_eq!(
        store.usage(&scope).await.unwrap(),
        crate::DocUsage::default()
    );
    let bodies = [
        (
            Collection::Provisions,
            "p1",
            serde_json::json!({"id": "p1", "ü": "ö"}),
        ),
        (
            Collection::Provisions,
            "p2",
            serde_json::json!({"id": "p2"}),
        ),
        (
            Collection::ContextEntries,
            "c1",
            serde_json::json!({"id": "c1", "body": "x"}),
        ),
    ];
    let mut bytes = 0;
    for (collection, id, body) in &bodies {
        store
            .create_doc(*collection, &scope, id, body, at(1))
            .await
            .unwrap();
        bytes += serde_json::to_vec(body).unwrap().len() as u64;
    }
    store
        .create_doc(Collection::Provisions, &other, "p1", &bodies[0].2, at(1))
        .await
        .unwrap();
    let usage = store.usage(&scope).await.unwrap();
    assert_eq!((usage.provisions, usage.context_entries), (2, 1));
    assert_eq!(usage.bytes, bytes, "UTF-8 bytes of the compact JSON");
    store
        .delete_doc(Collection::Provisions, &scope, "p2", None)
        .await
        .unwrap();
    assert_eq!(store.usage(&scope).await.unwrap().provisions, 1);
    assert_eq!(store.usage(&other).await.unwrap().provisions, 1);
}

pub async fn typed_records_round_trip(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let mut spec = provision("p1", "deploy");
    spec.description = "Deploy help".into();
    spec.priority = -3;
    let created = store
        .provisions()
        .create(&scope, &spec, at(1))
        .await
        .unwrap();
    assert_eq!(created.spec, spec);
    assert_eq!(created.caller_scope, scope);
    let entry = ContextEntrySpec {
        tags: vec!["ops".into()],
        fabric_governance: None,
        uri: Some("https://example.com/x".into()),
        schema_or_body: work_contract_body(),
        ..context_entry("e1", "")
    };
    let contract = &entry.schema_or_body["work_contract"];
    assert!(
        herma_core::conversation::contract::parse_work_contract(contract).is_ok(),
        "the fixture is a valid work contract"
    );
    store
        .context_entries()
        .create(&scope, &entry, at(1))
        .await
        .unwrap();
    let got = store
        .context_entries()
        .get(&scope, "e1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.spec, entry);
    let many = store
        .context_entries()
        .get_many(&scope, &["e1".into()])
        .await
        .unwrap();
    assert_eq!(many.len(), 1);
}

fn receipt(scope: &CallerScope, id: &str, created: i64) -> InjectionReceipt {
    ReceiptBody {
        caller_scope: scope.clone(),
        protocol: "messages".into(),
        conversation_id: "conv".into(),
        model: "m".into(),
        action: ReceiptAction::Shimmed,
        matched: vec![MatchedRule {
            provision_id: "p".into(),
            version: 1,
            builtin: false,
            tier: Tier::Keyword,
            trigger: "keyword:x".into(),
            applied: true,
            score: None,
            confidence: None,
        }],
        shimmed_context_refs: vec![],
        unresolved_context_refs: vec![],
        upstream_status: Some(200),
        usage: Some(json!({"input_tokens": 3}).into()),
        timings: Timings {
            decision_micros: 12,
            upstream_headers_micros: Some(40),
            total_micros: None,
        },
        stream_end: None,
        error: None,
        created_at: at(created),
    }
    .seal(id.to_owned())
}

pub async fn receipts_are_idempotent_and_partitioned(store: Arc<dyn Store>) {
    let (a, b) = (fresh_scope(), fresh_scope());
    let r1 = receipt(&a, "rcpt_1", 1);
    let r2 = receipt(&a, "rcpt_2", 2);
    store
        .insert_receipts(&[r1.clone(), r2.clone()])
        .await
        .unwrap();
    store
        .insert_receipts(std::slice::from_ref(&r1))
        .await
        .unwrap();
    store.insert_receipts(&[]).await.unwrap();
    let got = store.get_receipt(&a, "rcpt_1").await.unwrap().unwrap();
    assert_eq!(got, r1);
    assert!(got.verifies());
    assert!(
        store.get_receipt(&b, "rcpt_1").await.unwrap().is_none(),
        "another caller cannot read it"
    );
}

pub async fn entities_are_counted_and_evicted_rarest_oldest_first(store: Arc<dyn Store>) {
    let (scope, other) = (fresh_scope(), fresh_scope());
    let evicted = store
        .record_entities(
            &scope,
            "proj",
            &[
                obs(EntityKind::FilePath, "src/a.rs"),
                obs(EntityKind::CodeSymbol, "Foo"),
            ],
            at(1),
            3,
        )
        .await
        .unwrap();
    assert_eq!(evicted, 0);
    store
        .record_entities(
            &scope,
            "proj",
            &[
                obs(EntityKind::FilePath, "src/a.rs"),
                obs(EntityKind::ErrorSignature, "E0308"),
            ],
            at(2),
            3,
        )
        .await
        .unwrap();
    store
        .record_entities(&other, "proj", &[obs(EntityKind::FilePath, "x")], at(2), 3)
        .await
        .unwrap();
    let listed = store.list_entities(&scope, None, 10).await.unwrap();
    let summary: Vec<_> = listed.iter().map(|e| (e.value.as_str(), e.count)).collect();
    assert_eq!(summary, [("src/a.rs", 2), ("E0308", 1), ("Foo", 1)]);
    assert_eq!((listed[0].first_seen, listed[0].last_seen), (at(1), at(2)));

    // A fourth entity pushes out the rarest, oldest one: `Foo` (count 1, last seen at 1).
    let evicted = store
        .record_entities(
            &scope,
            "other-proj",
            &[obs(EntityKind::TesseraUri, "tessera://nouns/x")],
            at(3),
            3,
        )
        .await
        .unwrap();
    assert_eq!(evicted, 1);
    assert_eq!(
        store.entity_evictions(&scope).await.unwrap(),
        1,
        "evictions are counted"
    );
    assert_eq!(store.entity_evictions(&other).await.unwrap(), 0);
    let values: Vec<_> = store
        .list_entities(&scope, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.value)
        .collect();
    assert_eq!(values, ["src/a.rs", "tessera://nouns/x", "E0308"]);
    let project: Vec<_> = store
        .list_entities(&scope, Some("other-proj"), 10)
        .await
        .unwrap();
    assert_eq!(project.len(), 1);
    assert_eq!(
        store.list_entities(&other, None, 10).await.unwrap().len(),
        1,
        "other callers untouched"
    );
    assert_eq!(store.list_entities(&scope, None, 1).await.unwrap().len(), 1);
}

/// An entity observed twice in one turn, and in several turns of one batch (another scope's
/// turn between them), is counted once per observation, first seen at its first and last seen
/// at its latest: however the backend groups a write's rows into statements.
pub async fn an_entity_seen_again_in_one_write_is_counted_again(store: Arc<dyn Store>) {
    let (scope, other) = (fresh_scope(), fresh_scope());
    let a = obs(EntityKind::FilePath, "src/a.rs");
    let b = obs(EntityKind::CodeSymbol, "Foo");
    let c = obs(EntityKind::CodeSymbol, "Bar");
    store
        .record_entities(&scope, "p", &[a.clone(), b.clone(), a.clone()], at(1), 50)
        .await
        .unwrap();
    let turn = |scope: &CallerScope, observations: Vec<EntityObservation>, time| EntityTurn {
        scope: scope.clone(),
        project_tag: "p".to_owned(),
        observations,
        at: at(time),
    };
    let turns = [
        turn(&scope, vec![a.clone()], 2),
        turn(&other, vec![a.clone()], 3),
        turn(&scope, vec![a.clone(), c.clone(), a.clone()], 4),
        turn(&scope, vec![c.clone()], 5),
        turn(&scope, vec![a.clone()], 6),
    ];
    assert_eq!(store.record_entity_turns(&turns, 50).await.unwrap(), 0);
    let listed = |scope: CallerScope| {
        let store = store.clone();
        async move {
            let mut rows: Vec<_> = store
                .list_entities(&scope, None, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.value, e.count, e.first_seen, e.last_seen))
                .collect();
            rows.sort();
            rows
        }
    };
    assert_eq!(
        listed(scope).await,
        [
            ("Bar".to_owned(), 2, at(4), at(5)),
            ("Foo".to_owned(), 1, at(1), at(1)),
            ("src/a.rs".to_owned(), 6, at(1), at(6)),
        ]
    );
    assert_eq!(
        listed(other).await,
        [("src/a.rs".to_owned(), 1, at(3), at(3))]
    );
}

/// A batch of turns (two scopes interleaved, a turn larger than one statement takes, an
/// observation repeated within a turn, evictions in the middle, a turn with no observations)
/// leaves exactly what recording them one by one leaves.
pub async fn entity_turns_in_one_write_count_and_evict_as_one_by_one(store: Arc<dyn Store>) {
    let obs = |kind, value: String| EntityObservation { kind, value };
    let many: Vec<_> = (0..70)
        .map(|i| obs(EntityKind::CodeSymbol, format!("sym{i:02}")))
        .collect();
    let again = vec![
        obs(EntityKind::CodeSymbol, "sym00".into()),
        obs(EntityKind::CodeSymbol, "sym69".into()),
        obs(EntityKind::FilePath, "src/a.rs".into()),
        obs(EntityKind::CodeSymbol, "sym69".into()),
    ];
    let other = vec![obs(EntityKind::FilePath, "x".into())];
    let plan = [
        (0, "p", many.clone(), 1),
        (1, "p", other.clone(), 2),
        (0, "q", again.clone(), 3),
        (1, "p", other.clone(), 4),
        (0, "p", Vec::new(), 5),
        (0, "p", again.clone(), 6),
    ];
    let evicted = batch_leaves_what_one_by_one_leaves(&store, 2, &[], &plan, 50).await;
    assert!(evicted >= 20, "the plan evicts: {evicted}");
    assert_eq!(store.record_entity_turns(&[], 50).await.unwrap(), 0);
}

/// Scopes at the cap, over it (the cap was lowered) and below it: a batch whose turns bring
/// known entities, new ones, an entity evicted earlier in the same batch and a known value
/// under another project or as another kind leaves exactly what recording the turns one by one
/// leaves.
pub async fn entity_turns_at_the_cap_evict_as_one_by_one(store: Arc<dyn Store>) {
    let symbols = |prefix: &str, n: usize| -> Vec<EntityObservation> {
        (0..n)
            .map(|i| EntityObservation {
                kind: EntityKind::CodeSymbol,
                value: format!("{prefix}{i:02}"),
            })
            .collect()
    };
    let pick = |values: &[&str]| -> Vec<EntityObservation> {
        values
            .iter()
            .map(|v| EntityObservation {
                kind: EntityKind::CodeSymbol,
                value: (*v).to_owned(),
            })
            .collect()
    };
    const MAX: u64 = 20;
    // Written before the batch, each with its own cap.
    let before = [
        (0, "p", symbols("s", 20), 1, MAX),
        (1, "p", symbols("s", 30), 1, 40),
        (2, "p", symbols("s", 5), 1, MAX),
        (3, "p", symbols("s", 20), 1, MAX),
        (4, "p", symbols("s", 20), 1, MAX),
        (5, "p", symbols("s", 20), 1, MAX),
    ];
    let file = |value: &str| {
        vec![EntityObservation {
            kind: EntityKind::FilePath,
            value: value.to_owned(),
        }]
    };
    let plan = [
        // At the cap, known entities only: nothing to evict.
        (0, "p", pick(&["s03", "s07"]), 2),
        (3, "p", pick(&["s01", "s02", "s01"]), 2),
        (2, "p", pick(&["x1", "x2"]), 2),
        // A new entity: one over the cap; `s00` (seen once, earliest) goes.
        (0, "p", pick(&["s03", "n1"]), 3),
        // `s00` again: new once more.
        (0, "p", pick(&["s00", "s03"]), 4),
        // Over the cap from before: ten go.
        (1, "p", pick(&["s01"]), 5),
        // A known value under another project is another entity.
        (0, "q", pick(&["s03"]), 6),
        (2, "p", pick(&["x1"]), 7),
        (3, "p", pick(&["s19"]), 8),
        // At the cap, a known value first seen under another project, or as another kind, is
        // a new entity: one goes.
        (4, "q", pick(&["s05"]), 9),
        (5, "p", file("s05"), 9),
    ];
    let evicted = batch_leaves_what_one_by_one_leaves(&store, 6, &before, &plan, MAX).await;
    assert!(evicted >= 15, "the plan evicts: {evicted}");
}

/// Writes `before` (which scope, project, observations, time, cap) to two fresh sets of
/// `scopes` scopes alike, then `plan` (which scope, project, observations, time) to one set turn
/// by turn and to the other as one batch, both with cap `max`, and asserts both sets hold the
/// same entities, counts, times and eviction counters. Returns how many the plan evicted.
async fn batch_leaves_what_one_by_one_leaves(
    store: &Arc<dyn Store>,
    scopes: usize,
    before: &[(usize, &str, Vec<EntityObservation>, i64, u64)],
    plan: &[(usize, &str, Vec<EntityObservation>, i64)],
    max: u64,
) -> u64 {
    let one: Vec<CallerScope> = (0..scopes).map(|_| fresh_scope()).collect();
    let batch: Vec<CallerScope> = (0..scopes).map(|_| fresh_scope()).collect();
    for set in [&one, &batch] {
        for (who, project, observations, time, cap) in before {
            store
                .record_entities(&set[*who], project, observations, at(*time), *cap)
                .await
                .unwrap();
        }
    }
    let mut evicted_one = 0;
    for (who, project, observations, time) in plan {
        evicted_one += store
            .record_entities(&one[*who], project, observations, at(*time), max)
            .await
            .unwrap();
    }
    let turns: Vec<EntityTurn> = plan
        .iter()
        .map(|(who, project, observations, time)| EntityTurn {
            scope: batch[*who].clone(),
            project_tag: (*project).to_owned(),
            observations: observations.clone(),
            at: at(*time),
        })
        .collect();
    let evicted_batch = store.record_entity_turns(&turns, max).await.unwrap();
    assert_eq!(evicted_batch, evicted_one);
    let listed = |scope: CallerScope| {
        let store = store.clone();
        async move {
            let entities = store.list_entities(&scope, None, 1000).await.unwrap();
            let rows: Vec<_> = entities
                .into_iter()
                .map(|e| {
                    (
                        e.project_tag,
                        e.kind,
                        e.value,
                        e.count,
                        e.first_seen,
                        e.last_seen,
                    )
                })
                .collect();
            (rows, store.entity_evictions(&scope).await.unwrap())
        }
    };
    for who in 0..scopes {
        let (want, got) = (
            listed(one[who].clone()).await,
            listed(batch[who].clone()).await,
        );
        assert!(!want.0.is_empty());
        assert!(want.0.len() as u64 <= max, "scope {who} within the cap");
        assert_eq!(got, want, "scope {who}");
    }
    evicted_one
}

pub async fn old_receipts_and_outcomes_are_pruned_in_batches_and_new_ones_kept(
    store: Arc<dyn Store>,
) {
    let (a, b) = (fresh_scope(), fresh_scope());
    store
        .insert_receipts(&[
            receipt(&a, "rcpt_old1", 1),
            receipt(&b, "rcpt_old2", 2),
            receipt(&a, "rcpt_new", 10),
        ])
        .await
        .unwrap();
    assert_eq!(store.prune_receipts(at(5), 1).await.unwrap(), 1);
    assert_eq!(store.prune_receipts(at(5), 10).await.unwrap(), 1);
    assert_eq!(store.prune_receipts(at(5), 10).await.unwrap(), 0);
    assert!(store.get_receipt(&a, "rcpt_old1").await.unwrap().is_none());
    assert!(store.get_receipt(&b, "rcpt_old2").await.unwrap().is_none());
    assert!(store.get_receipt(&a, "rcpt_new").await.unwrap().is_some());

    let outcome = |turn: u64| RuleOutcomeRecord {
        caller_scope: a.clone(),
        conversation_id: "c".into(),
        turn,
        provision_id: "p".into(),
        provision_version: 1,
        outcome: OutcomeKind::Injected,
        error_signature: None,
        receipt_id: None,
        recorded_at: at(turn as i64),
    };
    store
        .insert_outcomes(&[outcome(1), outcome(2), outcome(3), outcome(10)])
        .await
        .unwrap();
    assert_eq!(store.prune_outcomes(at(5), 2).await.unwrap(), 2);
    assert_eq!(store.prune_outcomes(at(5), 2).await.unwrap(), 1);
    let left: Vec<u64> = store
        .list_outcomes(&a, 10)
        .await
        .unwrap()
        .iter()
        .map(|o| o.turn)
        .collect();
    assert_eq!(left, [10]);
    store.reclaim_space().await.unwrap();
}

pub async fn outcomes_are_listed_newest_first_per_scope(store: Arc<dyn Store>) {
    let (a, b) = (fresh_scope(), fresh_scope());
    let outcome = |scope: &CallerScope, turn, kind| RuleOutcomeRecord {
        caller_scope: scope.clone(),
        conversation_id: "c".into(),
        turn,
        provision_id: "p".into(),
        provision_version: 1,
        outcome: kind,
        error_signature: (kind == OutcomeKind::RetryError).then(|| "E0308".to_owned()),
        receipt_id: Some(format!("rcpt_{turn}")),
        recorded_at: at(turn as i64),
    };
    store
        .insert_outcomes(&[
            outcome(&a, 1, OutcomeKind::Injected),
            outcome(&b, 1, OutcomeKind::Injected),
        ])
        .await
        .unwrap();
    store
        .insert_outcomes(&[outcome(&a, 2, OutcomeKind::RetryError)])
        .await
        .unwrap();
    let listed = store.list_outcomes(&a, 10).await.unwrap();
    assert_eq!(
        listed,
        vec![
            outcome(&a, 2, OutcomeKind::RetryError),
            outcome(&a, 1, OutcomeKind::Injected)
        ]
    );
    assert_eq!(store.list_outcomes(&b, 10).await.unwrap().len(), 1);
    assert_eq!(store.list_outcomes(&a, 1).await.unwrap().len(), 1);
}

pub async fn a_large_batch_of_outcomes_keeps_its_order(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let batch: Vec<RuleOutcomeRecord> = (1..=250u64)
        .map(|turn| RuleOutcomeRecord {
            caller_scope: scope.clone(),
            conversation_id: format!("c{}", turn % 3),
            turn,
            provision_id: format!("p{turn}"),
            provision_version: turn,
            outcome: if turn % 2 == 0 {
                OutcomeKind::Injected
            } else {
                OutcomeKind::RetryError
            },
            error_signature: (turn % 2 == 1).then(|| format!("E{turn}")),
            receipt_id: (turn % 5 != 0).then(|| format!("rcpt_{turn}")),
            recorded_at: at(turn as i64),
        })
        .collect();
    store.insert_outcomes(&batch).await.unwrap();
    let mut listed = store.list_outcomes(&scope, 1000).await.unwrap();
    listed.reverse();
    assert_eq!(listed, batch, "every row, in order, nulls kept");
    assert_eq!(
        store.fired_in_turn(&scope, "c2", 8).await.unwrap(),
        vec![("p8".to_owned(), 8)]
    );
}

pub async fn h07_sixty_four_concurrent_compare_and_set_updates_have_exactly_one_winner(
    store: Arc<dyn Store>,
) {
    let scope = fresh_scope();
    store
        .provisions()
        .create(&scope, &provision("hot", "v0"), at(1))
        .await
        .unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (store, scope, barrier) = (store.clone(), scope.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .provisions()
                .update(&scope, &provision("hot", &format!("v{i}")), 1, at(2))
                .await
        }));
    }
    let mut winners = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(p) => winners.push((i, p)),
            Err(StoreError::VersionConflict { current: Some(2) }) => {}
            Err(other) => panic!("update {i} failed unexpectedly: {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one compare-and-set wins");
    let (i, won) = &winners[0];
    assert_eq!(won.version, 2);
    let stored = store
        .provisions()
        .get(&scope, "hot")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(
        stored.spec.triggers.keywords,
        [format!("v{i}")],
        "the winner's write is the one stored"
    );
}

pub async fn revisions_count_every_change_per_scope_and_collection(store: Arc<dyn Store>) {
    let (a, b) = (fresh_scope(), fresh_scope());
    let revs = |store: &Arc<dyn Store>| {
        let (store, a, b) = (store.clone(), a.clone(), b.clone());
        async move { store.revisions(&[a, b]).await.unwrap() }
    };
    assert_eq!(
        revs(&store).await,
        [Revisions::default(), Revisions::default()]
    );
    store
        .provisions()
        .create(&a, &provision("p", "k"), at(1))
        .await
        .unwrap();
    store
        .provisions()
        .update(&a, &provision("p", "k2"), 1, at(2))
        .await
        .unwrap();
    assert_eq!(
        revs(&store).await[0],
        Revisions {
            provisions: 2,
            context_entries: 0
        }
    );
    // Failed writes and unchanged imports change nothing.
    assert!(
        store
            .provisions()
            .update(&a, &provision("p", "k3"), 1, at(3))
            .await
            .is_err()
    );
    assert!(
        store
            .provisions()
            .create(&a, &provision("p", "k"), at(3))
            .await
            .is_err()
    );
    store
        .provisions()
        .import(&a, &[provision("p", "k2")], at(3))
        .await
        .unwrap();
    assert_eq!(revs(&store).await[0].provisions, 2);
    store
        .provisions()
        .import(&a, &[provision("p", "k4"), provision("q", "k")], at(4))
        .await
        .unwrap();
    assert_eq!(revs(&store).await[0].provisions, 4);
    store
        .context_entries()
        .create(&b, &context_entry("e", "x"), at(5))
        .await
        .unwrap();
    store.provisions().delete(&a, "q", None).await.unwrap();
    assert_eq!(
        revs(&store).await,
        [
            Revisions {
                provisions: 5,
                context_entries: 0
            },
            Revisions {
                provisions: 0,
                context_entries: 1
            }
        ]
    );
    assert_eq!(store.revisions(&[]).await.unwrap(), []);
}

pub async fn h08_once_per_conversation_claims_have_one_winner(store: Arc<dyn Store>) {
    let (a, b) = (fresh_scope(), fresh_scope());
    let ids = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        store
            .claim_once(&a, "conv-1", &ids(&["p1", "p2"]), at(1))
            .await
            .unwrap(),
        ids(&["p1", "p2"])
    );
    assert_eq!(
        store
            .claim_once(&a, "conv-1", &ids(&["p2", "p3"]), at(2))
            .await
            .unwrap(),
        ids(&["p3"])
    );
    assert_eq!(
        store
            .claim_once(&a, "conv-2", &ids(&["p1"]), at(2))
            .await
            .unwrap(),
        ids(&["p1"]),
        "another conversation"
    );
    assert_eq!(
        store
            .claim_once(&b, "conv-1", &ids(&["p1"]), at(2))
            .await
            .unwrap(),
        ids(&["p1"]),
        "another caller"
    );
    assert!(
        store
            .claim_once(&a, "conv-1", &[], at(3))
            .await
            .unwrap()
            .is_empty()
    );

    // Two requests of one session racing for the same shim: exactly one gets it.
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (store, a, barrier) = (store.clone(), a.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .claim_once(&a, "race", &["hot".to_owned()], at(4))
                .await
                .unwrap()
        }));
    }
    let mut winners = 0;
    for t in tasks {
        winners += t.await.unwrap().len();
    }
    assert_eq!(winners, 1);
}

pub async fn outcomes_answer_which_rules_fired_in_a_turn_and_how_often(store: Arc<dyn Store>) {
    use herma_core::memory::RuleStats;
    let (a, b) = (fresh_scope(), fresh_scope());
    let outcome =
        |scope: &CallerScope, conversation: &str, turn, id: &str, kind| RuleOutcomeRecord {
            caller_scope: scope.clone(),
            conversation_id: conversation.into(),
            turn,
            provision_id: id.into(),
            provision_version: 2,
            outcome: kind,
            error_signature: (kind == OutcomeKind::RetryError).then(|| "rust:E0308".to_owned()),
            receipt_id: None,
            recorded_at: at(turn as i64),
        };
    store
        .insert_outcomes(&[
            outcome(&a, "c1", 1, "shim", OutcomeKind::Injected),
            outcome(&a, "c1", 1, "direct", OutcomeKind::RespondedDirectly),
            outcome(&a, "c1", 2, "shim", OutcomeKind::Injected),
            outcome(&a, "c1", 1, "shim", OutcomeKind::RetryError),
            outcome(&a, "c2", 1, "other", OutcomeKind::Injected),
            outcome(&b, "c1", 1, "theirs", OutcomeKind::Injected),
        ])
        .await
        .unwrap();
    let fired = store.fired_in_turn(&a, "c1", 1).await.unwrap();
    assert_eq!(
        fired,
        [("direct".to_owned(), 2), ("shim".to_owned(), 2)],
        "retry errors are not firings"
    );
    assert!(store.fired_in_turn(&a, "c1", 3).await.unwrap().is_empty());
    let stats = store.rule_stats(&a).await.unwrap();
    assert_eq!(
        stats,
        [
            RuleStats {
                provision_id: "direct".into(),
                responded_directly: 1,
                ..RuleStats::default()
            },
            RuleStats {
                provision_id: "other".into(),
                injected: 1,
                ..RuleStats::default()
            },
            RuleStats {
                provision_id: "shim".into(),
                injected: 2,
                retry_errors: 1,
                ..RuleStats::default()
            },
        ]
    );
    assert_eq!(store.rule_stats(&b).await.unwrap().len(), 1);
}

/// One operation of the isolation property.
#[derive(Clone, Debug)]
enum Op {
    Create {
        caller: usize,
        id: u8,
        tag: u8,
    },
    Update {
        caller: usize,
        id: u8,
        tag: u8,
        expected: u64,
    },
    Delete {
        caller: usize,
        id: u8,
    },
}

fn op_strategy() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        (0..3usize, 0..4u8, any::<u8>()).prop_map(|(caller, id, tag)| Op::Create {
            caller,
            id,
            tag
        }),
        (0..3usize, 0..4u8, any::<u8>(), 0..4u64).prop_map(|(caller, id, tag, expected)| {
            Op::Update {
                caller,
                id,
                tag,
                expected,
            }
        }),
        (0..3usize, 0..4u8).prop_map(|(caller, id)| Op::Delete { caller, id }),
    ]
}

type Factory = dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Arc<dyn Store>>>>;

/// Random operations by three callers against a model: each caller observes exactly its own
/// writes, never another caller's, in both collections.
pub fn run_isolation_property(
    factory: impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Arc<dyn Store>>>> + 'static,
) {
    use proptest::test_runner::{Config, TestRunner};
    use std::collections::BTreeMap;

    let factory: Box<Factory> = Box::new(factory);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = rt.block_on(factory());
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = proptest::collection::vec(op_strategy(), 1..40);
    let result = runner.run(&strategy, |ops| {
        rt.block_on(async {
            let callers = [fresh_scope(), fresh_scope(), fresh_scope()];
            let collection = if ops.len() % 2 == 0 {
                Collection::Provisions
            } else {
                Collection::ContextEntries
            };
            // The model: per caller, id → (version, tag).
            let mut model: [BTreeMap<String, (u64, u8)>; 3] = Default::default();
            for op in &ops {
                match *op {
                    Op::Create { caller, id, tag } => {
                        let id = format!("doc-{id}");
                        let got = store
                            .create_doc(
                                collection,
                                &callers[caller],
                                &id,
                                &json!({"tag": tag}),
                                at(1),
                            )
                            .await;
                        match model[caller].get(&id) {
                            Some((v, _)) => assert_eq!(
                                got,
                                Err(StoreError::VersionConflict { current: Some(*v) })
                            ),
                            None => {
                                assert_eq!(got.map(|d| d.version), Ok(1));
                                model[caller].insert(id, (1, tag));
                            }
                        }
                    }
                    Op::Update {
                        caller,
                        id,
                        tag,
                        expected,
                    } => {
                        let id = format!("doc-{id}");
                        let got = store
                            .update_doc(
                                collection,
                                &callers[caller],
                                &id,
                                &json!({"tag": tag}),
                                expected,
                                at(2),
                            )
                            .await;
                        match model[caller].get(&id).copied() {
                            None => assert_eq!(got, Err(StoreError::NotFound)),
                            Some((v, _)) if v != expected => {
                                assert_eq!(
                                    got,
                                    Err(StoreError::VersionConflict { current: Some(v) })
                                )
                            }
                            Some((v, _)) => {
                                assert_eq!(got.map(|d| d.version), Ok(v + 1));
                                model[caller].insert(id, (v + 1, tag));
                            }
                        }
                    }
                    Op::Delete { caller, id } => {
                        let id = format!("doc-{id}");
                        let got = store
                            .delete_doc(collection, &callers[caller], &id, None)
                            .await;
                        match model[caller].remove(&id) {
                            None => assert_eq!(got, Err(StoreError::NotFound)),
                            Some(_) => assert_eq!(got, Ok(())),
                        }
                    }
                }
                for (caller, scope) in callers.iter().enumerate() {
                    let seen = store
                        .list_docs(collection, scope, &Page::all())
                        .await
                        .unwrap();
                    let seen: BTreeMap<String, (u64, u8)> = seen
                        .into_iter()
                        .map(|d| {
                            assert_eq!(&d.caller_scope, scope);
                            let tag = d.body["tag"].as_u64().unwrap() as u8;
                            (d.id, (d.version, tag))
                        })
                        .collect();
                    assert_eq!(
                        seen, model[caller],
                        "caller {caller} sees exactly its own rows"
                    );
                }
            }
        });
        Ok(())
    });
    if let Err(failure) = result {
        panic!("isolation property failed: {failure}");
    }
}

pub async fn semantic_vectors_are_kept_per_version_and_model(store: Arc<dyn Store>) {
    use crate::StoredVectors;
    use herma_core::semantic::RuleVectors;
    let (a, b) = (fresh_scope(), fresh_scope());
    let stored = |id: &str, version: u64, seed: f32| StoredVectors {
        provision_id: id.to_owned(),
        version,
        vectors: RuleVectors {
            examples: vec![vec![seed, -0.5, 0.25], vec![0.0, 1.0, f32::MIN_POSITIVE]],
            negatives: if seed > 0.5 {
                vec![vec![-seed, 0.5, 0.125]]
            } else {
                Vec::new()
            },
        },
    };
    let wanted = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
        pairs.iter().map(|(id, v)| ((*id).to_owned(), *v)).collect()
    };
    store
        .put_vectors(&a, "model-x", &stored("deploy", 1, 0.75), at(1))
        .await
        .unwrap();
    store
        .put_vectors(&a, "model-x", &stored("other", 3, 0.1), at(1))
        .await
        .unwrap();
    let got = store
        .get_vectors(
            &a,
            "model-x",
            &wanted(&[("deploy", 1), ("other", 3), ("absent", 1)]),
        )
        .await
        .unwrap();
    let mut got_ids: Vec<_> = got.iter().map(|v| v.provision_id.as_str()).collect();
    got_ids.sort();
    assert_eq!(got_ids, ["deploy", "other"]);
    let deploy = got.iter().find(|v| v.provision_id == "deploy").unwrap();
    assert_eq!(
        deploy,
        &stored("deploy", 1, 0.75),
        "vectors round-trip bit for bit"
    );
    let other = got.iter().find(|v| v.provision_id == "other").unwrap();
    assert!(other.vectors.negatives.is_empty());

    // Another version, another model, another caller: nothing.
    for (scope, model, pairs) in [
        (&a, "model-x", wanted(&[("deploy", 2)])),
        (&a, "model-y", wanted(&[("deploy", 1)])),
        (&b, "model-x", wanted(&[("deploy", 1)])),
    ] {
        assert!(
            store
                .get_vectors(scope, model, &pairs)
                .await
                .unwrap()
                .is_empty()
        );
    }

    // A newer version replaces the older; an older one never replaces a newer.
    store
        .put_vectors(&a, "model-x", &stored("deploy", 2, 0.9), at(2))
        .await
        .unwrap();
    store
        .put_vectors(&a, "model-x", &stored("deploy", 1, 0.2), at(3))
        .await
        .unwrap();
    assert!(
        store
            .get_vectors(&a, "model-x", &wanted(&[("deploy", 1)]))
            .await
            .unwrap()
            .is_empty()
    );
    let now = store
        .get_vectors(&a, "model-x", &wanted(&[("deploy", 2)]))
        .await
        .unwrap();
    assert_eq!(now, vec![stored("deploy", 2, 0.9)]);
}
