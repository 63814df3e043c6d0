//! The conversation port's conformance suite: admission, sealing, expiry and the ledger behave
//! the same on memory, SQLite and PostgreSQL, including under concurrency.
//!
//! Its cases run through [`store_conformance_tests!`](crate::store_conformance_tests) with the
//! rest of the store's, one fresh store each.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use herma_core::{CallerScope, Timestamp};
use serde_json::{Value, json};

use crate::Store;
use crate::conformance::fresh_scope;
use crate::conversations::{
    Admission, AdmitTurn, AnswerClass, AttemptRecord, ConversationRecord, HealthRecord,
    HealthScope, LedgerCharge, ProbeReservation, Refusal, Reserved, SealTurn, TurnLimits,
    TurnRecord, TurnStatus, active_turns_counter, conversations_counter, hourly_turns_counter,
};

const HOUR: &str = "2026-12-01T12";
const DAY_MS: i64 = 86_400_000;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_790_000_000_000 + ms)
}

fn limits() -> TurnLimits {
    TurnLimits {
        active_per_caller: 2,
        turns_per_hour: 60,
        conversations_per_caller: 10_000,
        lifetime_ms: DAY_MS,
    }
}

fn admit(
    scope: &CallerScope,
    conversation: &str,
    request: &str,
    expected_version: u64,
    now: i64,
) -> AdmitTurn {
    AdmitTurn {
        caller_scope: scope.clone(),
        conversation_id: conversation.to_owned(),
        request_id: request.to_owned(),
        input_digest: format!("sha256:{request}"),
        expected_version,
        fingerprint: "fp-1".to_owned(),
        server_exception: json!({"purpose": "planning", "request": request, "allowance": 5000}),
        now: at(now),
        hour: HOUR.to_owned(),
        limits: limits(),
    }
}

fn message(request: &str) -> Value {
    json!({"role": "user", "content": format!("message of {request}")})
}

fn outcome(request: &str) -> Value {
    json!({"role": "assistant", "outcome": "ready", "request": request})
}

fn seal(scope: &CallerScope, conversation: &str, request: &str, now: i64) -> SealTurn {
    SealTurn {
        caller_scope: scope.clone(),
        conversation_id: conversation.to_owned(),
        request_id: request.to_owned(),
        answer_class: AnswerClass::Answered,
        response: json!({"status": "ready", "request_id": request, "ü": [1, 2]}),
        transcript_append: vec![message(request), outcome(request)],
        server_exception: None,
        now: at(now),
    }
}

fn admitted(admission: Admission) -> TurnRecord {
    match admission {
        Admission::Admitted(turn) => turn,
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn refused(admission: Admission) -> Refusal {
    match admission {
        Admission::Refused(refusal) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The caller's admission counters: conversation ids, active turns, turns of [`HOUR`].
async fn counters(store: &Arc<dyn Store>, scope: &CallerScope) -> Vec<u64> {
    store
        .ledger(&[
            conversations_counter(scope),
            active_turns_counter(scope),
            hourly_turns_counter(scope, HOUR),
        ])
        .await
        .unwrap()
}

async fn conversation(
    store: &Arc<dyn Store>,
    scope: &CallerScope,
    id: &str,
) -> Option<ConversationRecord> {
    store.conversation(scope, id).await.unwrap()
}

async fn admit_and_seal(store: &Arc<dyn Store>, turn: &AdmitTurn, sealed_at: i64) {
    admitted(store.admit_turn(turn).await.unwrap());
    let done = seal(
        &turn.caller_scope,
        &turn.conversation_id,
        &turn.request_id,
        sealed_at,
    );
    assert!(store.seal_turn(&done).await.unwrap());
}

fn charge(counter: &str, amount: u64, ceiling: u64) -> LedgerCharge {
    LedgerCharge {
        counter: counter.to_owned(),
        amount,
        ceiling,
    }
}

pub async fn a_conversation_is_created_by_its_first_turn_and_counts_sealed_turns(
    store: Arc<dyn Store>,
) {
    let scope = fresh_scope();
    let first = admitted(
        store
            .admit_turn(&admit(&scope, "c1", "r1", 0, 10))
            .await
            .unwrap(),
    );
    assert_eq!(first.status, TurnStatus::Active);
    assert_eq!(first.version_before, 0);
    assert_eq!(first.input_digest, "sha256:r1");
    assert_eq!(first.server_exception["allowance"], 5000);
    assert_eq!(
        (first.answer_class, &first.response, first.sealed_at),
        (None, &None, None)
    );
    assert_eq!(first.created_at, at(10));
    let created = conversation(&store, &scope, "c1").await.unwrap();
    assert_eq!(
        created,
        ConversationRecord {
            caller_scope: scope.clone(),
            conversation_id: "c1".into(),
            version: 0,
            fingerprint: "fp-1".into(),
            transcript: Some(json!([])),
            active_request_id: Some("r1".into()),
            created_at: at(10),
            expires_at: at(10 + DAY_MS),
            expired: false,
        }
    );
    assert_eq!(counters(&store, &scope).await, [1, 1, 1]);

    assert!(
        store
            .seal_turn(&seal(&scope, "c1", "r1", 20))
            .await
            .unwrap()
    );
    let sealed = store.turn(&scope, "c1", "r1").await.unwrap().unwrap();
    assert_eq!(sealed.status, TurnStatus::Sealed);
    assert_eq!(sealed.answer_class, Some(AnswerClass::Answered));
    assert_eq!(sealed.response, Some(seal(&scope, "c1", "r1", 20).response));
    assert_eq!(sealed.sealed_at, Some(at(20)));
    let after_one = conversation(&store, &scope, "c1").await.unwrap();
    assert_eq!(after_one.version, 1);
    assert_eq!(after_one.active_request_id, None);
    assert_eq!(
        after_one.transcript,
        Some(json!([message("r1"), outcome("r1")]))
    );
    assert_eq!(counters(&store, &scope).await, [1, 0, 1]);

    for (version, request) in [(1, "r2"), (2, "r3")] {
        let now = 100 * i64::try_from(version).unwrap();
        let turn = admitted(
            store
                .admit_turn(&admit(&scope, "c1", request, version, now))
                .await
                .unwrap(),
        );
        assert_eq!(turn.version_before, version);
        assert_eq!(
            conversation(&store, &scope, "c1")
                .await
                .unwrap()
                .active_request_id
                .as_deref(),
            Some(request)
        );
        assert!(
            store
                .seal_turn(&seal(&scope, "c1", request, now + 1))
                .await
                .unwrap()
        );
    }
    let after_three = conversation(&store, &scope, "c1").await.unwrap();
    assert_eq!(after_three.version, 3);
    assert_eq!(
        after_three.created_at,
        at(10),
        "later turns keep the creation time"
    );
    assert_eq!(after_three.expires_at, at(10 + DAY_MS));
    let expected: Vec<Value> = ["r1", "r2", "r3"]
        .iter()
        .flat_map(|r| [message(r), outcome(r)])
        .collect();
    assert_eq!(after_three.transcript, Some(Value::Array(expected)));
    assert_eq!(
        counters(&store, &scope).await,
        [1, 0, 3],
        "one conversation id, no active turn, three turns this hour"
    );

    let recent = store.recent_turns(&scope, "c1", 2).await.unwrap();
    let ids: Vec<_> = recent
        .iter()
        .map(|t| (t.request_id.as_str(), t.version_before))
        .collect();
    assert_eq!(ids, [("r3", 2), ("r2", 1)]);
    assert_eq!(store.recent_turns(&scope, "c1", 10).await.unwrap().len(), 3);
    assert!(
        store
            .recent_turns(&scope, "other", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn attempts_are_kept_in_order_and_replaced_by_number(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admitted(
        store
            .admit_turn(&admit(&scope, "c1", "r1", 0, 1))
            .await
            .unwrap(),
    );
    let attempt = |n: u32, record: Value, updated: i64| AttemptRecord {
        caller_scope: scope.clone(),
        conversation_id: "c1".into(),
        request_id: "r1".into(),
        attempt: n,
        record,
        updated_at: at(updated),
    };
    store
        .put_attempt(&attempt(
            2,
            json!({"provider": "ollama", "outcome": "pending"}),
            5,
        ))
        .await
        .unwrap();
    store
        .put_attempt(&attempt(
            1,
            json!({"provider": "meta", "outcome": "pending"}),
            2,
        ))
        .await
        .unwrap();
    let settled = attempt(
        1,
        json!({"provider": "meta", "outcome": "timeout", "usage": null}),
        4,
    );
    store.put_attempt(&settled).await.unwrap();
    let attempts = store.attempts(&scope, "c1", "r1").await.unwrap();
    assert_eq!(
        attempts,
        [
            settled,
            attempt(2, json!({"provider": "ollama", "outcome": "pending"}), 5)
        ]
    );
    assert!(store.attempts(&scope, "c1", "r2").await.unwrap().is_empty());
}

pub async fn replaying_a_request_id_returns_the_stored_turn_and_moves_no_counter(
    store: Arc<dyn Store>,
) {
    let scope = fresh_scope();
    let turn = admit(&scope, "c1", "r1", 0, 1);
    let active = admitted(store.admit_turn(&turn).await.unwrap());
    let before = counters(&store, &scope).await;
    let mut replay = turn.clone();
    replay.now = at(2);
    assert_eq!(
        store.admit_turn(&replay).await.unwrap(),
        Admission::Existing(active)
    );
    assert_eq!(counters(&store, &scope).await, before);

    assert!(store.seal_turn(&seal(&scope, "c1", "r1", 3)).await.unwrap());
    let sealed = store.turn(&scope, "c1", "r1").await.unwrap().unwrap();
    let before = counters(&store, &scope).await;
    // A replay carries the version it was first sent with, now stale: the request id decides.
    assert_eq!(
        store.admit_turn(&replay).await.unwrap(),
        Admission::Existing(sealed)
    );
    assert_eq!(counters(&store, &scope).await, before);
    assert_eq!(conversation(&store, &scope, "c1").await.unwrap().version, 1);
}

pub async fn a_request_id_reused_with_another_input_is_refused(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admit_and_seal(&store, &admit(&scope, "c1", "r1", 0, 1), 2).await;
    let mut reused = admit(&scope, "c1", "r1", 1, 3);
    reused.input_digest = "sha256:another input".into();
    assert_eq!(
        refused(store.admit_turn(&reused).await.unwrap()),
        Refusal::RequestIdReused
    );
}

pub async fn a_turn_while_another_is_active_is_refused(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admitted(
        store
            .admit_turn(&admit(&scope, "c1", "r1", 0, 1))
            .await
            .unwrap(),
    );
    assert_eq!(
        refused(
            store
                .admit_turn(&admit(&scope, "c1", "r2", 0, 2))
                .await
                .unwrap()
        ),
        Refusal::TurnActive
    );
    assert!(store.turn(&scope, "c1", "r2").await.unwrap().is_none());
}

pub async fn a_stale_version_is_refused_with_the_current_one(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admit_and_seal(&store, &admit(&scope, "c1", "r1", 0, 1), 2).await;
    admit_and_seal(&store, &admit(&scope, "c1", "r2", 1, 3), 4).await;
    for stale in [0, 1, 3] {
        assert_eq!(
            refused(
                store
                    .admit_turn(&admit(&scope, "c1", "r3", stale, 5))
                    .await
                    .unwrap()
            ),
            Refusal::VersionConflict { current: 2 }
        );
    }
    // A conversation not stored yet is at version 0.
    assert_eq!(
        refused(
            store
                .admit_turn(&admit(&scope, "c2", "r1", 1, 5))
                .await
                .unwrap()
        ),
        Refusal::VersionConflict { current: 0 }
    );
    assert!(conversation(&store, &scope, "c2").await.is_none());
    admitted(
        store
            .admit_turn(&admit(&scope, "c1", "r3", 2, 6))
            .await
            .unwrap(),
    );
}

pub async fn a_changed_fingerprint_is_refused(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admit_and_seal(&store, &admit(&scope, "c1", "r1", 0, 1), 2).await;
    let mut changed = admit(&scope, "c1", "r2", 1, 3);
    changed.fingerprint = "fp-2".into();
    assert_eq!(
        refused(store.admit_turn(&changed).await.unwrap()),
        Refusal::FingerprintChanged
    );
    assert_eq!(
        conversation(&store, &scope, "c1")
            .await
            .unwrap()
            .fingerprint,
        "fp-1"
    );
}

pub async fn expired_conversations_become_tombstones_whose_ids_stay_refused(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let short = |mut turn: AdmitTurn| {
        turn.limits.lifetime_ms = 1_000;
        turn
    };
    admit_and_seal(&store, &short(admit(&scope, "c1", "r1", 0, 0)), 10).await;
    admit_and_seal(&store, &short(admit(&scope, "c1", "r2", 1, 999)), 999).await;
    // c2 expires at the same time but still has a turn being answered at expiry.
    admitted(
        store
            .admit_turn(&short(admit(&scope, "c2", "r1", 0, 0)))
            .await
            .unwrap(),
    );
    assert_eq!(
        refused(
            store
                .admit_turn(&short(admit(&scope, "c1", "r3", 2, 1_000)))
                .await
                .unwrap()
        ),
        Refusal::Expired,
        "no turn is admitted at its expiry"
    );

    assert_eq!(store.expire_conversations(at(999), 10).await.unwrap(), 0);
    assert_eq!(store.expire_conversations(at(1_000), 10).await.unwrap(), 1);
    let tombstone = conversation(&store, &scope, "c1").await.unwrap();
    assert!(tombstone.expired);
    assert_eq!(tombstone.transcript, None);
    assert_eq!(
        (
            tombstone.conversation_id.as_str(),
            tombstone.version,
            tombstone.created_at
        ),
        ("c1", 2, at(0))
    );
    for (request, version_before) in [("r1", 0), ("r2", 1)] {
        let turn = store.turn(&scope, "c1", request).await.unwrap().unwrap();
        assert_eq!(turn.response, None, "{request}'s response is removed");
        assert_eq!(turn.answer_class, Some(AnswerClass::Answered));
        assert_eq!(turn.status, TurnStatus::Sealed);
        assert_eq!(turn.version_before, version_before);
    }
    let active = conversation(&store, &scope, "c2").await.unwrap();
    assert!(
        !active.expired,
        "a conversation with an active turn is not expired"
    );
    assert!(active.transcript.is_some());

    // The id is refused for good, whatever the version or time.
    for expected_version in [0, 2] {
        assert_eq!(
            refused(
                store
                    .admit_turn(&admit(&scope, "c1", "r9", expected_version, 5 * DAY_MS))
                    .await
                    .unwrap()
            ),
            Refusal::Expired
        );
    }
    assert_eq!(
        store
            .expire_conversations(at(5 * DAY_MS), 10)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        counters(&store, &scope).await[0],
        2,
        "expired ids still count"
    );

    assert!(
        store
            .seal_turn(&seal(&scope, "c2", "r1", 2_000))
            .await
            .unwrap()
    );
    assert_eq!(store.expire_conversations(at(2_000), 10).await.unwrap(), 1);
    let second = conversation(&store, &scope, "c2").await.unwrap();
    assert!(second.expired);
    assert_eq!(second.version, 1);
    assert_eq!(
        store
            .turn(&scope, "c2", "r1")
            .await
            .unwrap()
            .unwrap()
            .response,
        None
    );
}

pub async fn the_sweep_is_next_due_at_the_soonest_seal_or_idle_expiry(store: Arc<dyn Store>) {
    const SEAL: i64 = 120_000;
    assert_eq!(store.next_due(SEAL).await.unwrap(), None, "nothing to do");
    let scope = fresh_scope();
    let short = |mut turn: AdmitTurn| {
        turn.limits.lifetime_ms = 60_000;
        turn
    };
    // An active turn: due for sealing two minutes after admission (its conversation, busy,
    // is not due for expiry while it is).
    admitted(
        store
            .admit_turn(&short(admit(&scope, "c1", "r1", 0, 1_000)))
            .await
            .unwrap(),
    );
    assert_eq!(store.next_due(SEAL).await.unwrap(), Some(at(1_000 + SEAL)));
    // Sealed: its conversation is idle and due at its expiry, sooner than any seal.
    assert!(
        store
            .seal_turn(&seal(&scope, "c1", "r1", 2_000))
            .await
            .unwrap()
    );
    assert_eq!(store.next_due(SEAL).await.unwrap(), Some(at(61_000)));
    // Another caller's turn, admitted at 0, is due at its seal: later than that expiry.
    let other = fresh_scope();
    admitted(
        store
            .admit_turn(&admit(&other, "c2", "r1", 0, 0))
            .await
            .unwrap(),
    );
    assert_eq!(store.next_due(SEAL).await.unwrap(), Some(at(61_000)));
    // Expired, the first conversation is a tombstone and no longer due: the seal is next.
    assert_eq!(store.expire_conversations(at(61_000), 10).await.unwrap(), 1);
    assert_eq!(store.next_due(SEAL).await.unwrap(), Some(at(SEAL)));
    // Sealed, the other conversation is idle until its day-long lifetime ends.
    assert!(
        store
            .seal_turn(&seal(&other, "c2", "r1", 10))
            .await
            .unwrap()
    );
    assert_eq!(store.next_due(SEAL).await.unwrap(), Some(at(DAY_MS)));
}

pub async fn the_sweeper_expires_at_most_its_limit_soonest_first(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    for (id, created) in [("late", 30), ("early", 10), ("middle", 20)] {
        admit_and_seal(&store, &admit(&scope, id, "r1", 0, created), created).await;
    }
    let now = at(DAY_MS + 100);
    assert_eq!(store.expire_conversations(now, 2).await.unwrap(), 2);
    let expired = |id: &'static str| {
        let store = store.clone();
        let scope = scope.clone();
        async move { conversation(&store, &scope, id).await.unwrap().expired }
    };
    assert!(expired("early").await);
    assert!(expired("middle").await);
    assert!(!expired("late").await);
    assert_eq!(store.expire_conversations(now, 2).await.unwrap(), 1);
    assert!(expired("late").await);
}

pub async fn a_caller_may_create_only_so_many_conversation_ids(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let limited = |mut turn: AdmitTurn| {
        turn.limits.conversations_per_caller = 3;
        turn
    };
    for (i, id) in ["c1", "c2", "c3"].into_iter().enumerate() {
        let now = i64::try_from(i).unwrap();
        admit_and_seal(&store, &limited(admit(&scope, id, "r1", 0, now)), now).await;
    }
    assert_eq!(
        refused(
            store
                .admit_turn(&limited(admit(&scope, "c4", "r1", 0, 10)))
                .await
                .unwrap()
        ),
        Refusal::TooManyConversations
    );
    assert!(conversation(&store, &scope, "c4").await.is_none());
    assert_eq!(counters(&store, &scope).await, [3, 0, 3]);
    // A conversation the caller has continues.
    admitted(
        store
            .admit_turn(&limited(admit(&scope, "c1", "r2", 1, 11)))
            .await
            .unwrap(),
    );
    assert_eq!(counters(&store, &scope).await, [3, 1, 4]);
}

pub async fn a_caller_has_at_most_two_active_turns_until_one_is_sealed(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admitted(
        store
            .admit_turn(&admit(&scope, "c1", "r1", 0, 1))
            .await
            .unwrap(),
    );
    admitted(
        store
            .admit_turn(&admit(&scope, "c2", "r1", 0, 2))
            .await
            .unwrap(),
    );
    assert_eq!(
        refused(
            store
                .admit_turn(&admit(&scope, "c3", "r1", 0, 3))
                .await
                .unwrap()
        ),
        Refusal::TooManyActiveTurns
    );
    assert!(conversation(&store, &scope, "c3").await.is_none());
    assert_eq!(counters(&store, &scope).await, [2, 2, 2]);
    // Another caller's slots are its own.
    let other = fresh_scope();
    admitted(
        store
            .admit_turn(&admit(&other, "c3", "r1", 0, 3))
            .await
            .unwrap(),
    );

    assert!(store.seal_turn(&seal(&scope, "c1", "r1", 4)).await.unwrap());
    assert_eq!(counters(&store, &scope).await, [2, 1, 2]);
    admitted(
        store
            .admit_turn(&admit(&scope, "c3", "r1", 0, 5))
            .await
            .unwrap(),
    );
    assert_eq!(counters(&store, &scope).await, [3, 2, 3]);
}

pub async fn hourly_turns_are_limited_and_a_new_conversation_does_not_reset_them(
    store: Arc<dyn Store>,
) {
    let scope = fresh_scope();
    let limited = |mut turn: AdmitTurn| {
        turn.limits.turns_per_hour = 2;
        turn
    };
    admit_and_seal(&store, &limited(admit(&scope, "c1", "r1", 0, 1)), 2).await;
    admit_and_seal(&store, &limited(admit(&scope, "c1", "r2", 1, 3)), 4).await;
    assert_eq!(
        refused(
            store
                .admit_turn(&limited(admit(&scope, "c1", "r3", 2, 5)))
                .await
                .unwrap()
        ),
        Refusal::HourlyTurnsExhausted
    );
    assert_eq!(
        refused(
            store
                .admit_turn(&limited(admit(&scope, "c2", "r1", 0, 6)))
                .await
                .unwrap()
        ),
        Refusal::HourlyTurnsExhausted
    );
    assert!(conversation(&store, &scope, "c2").await.is_none());
    assert_eq!(counters(&store, &scope).await, [1, 0, 2]);
    let c1 = conversation(&store, &scope, "c1").await.unwrap();
    assert_eq!((c1.version, c1.active_request_id), (2, None));

    let mut next_hour = limited(admit(&scope, "c1", "r3", 2, 3_600_000));
    next_hour.hour = "2026-12-01T13".into();
    admitted(store.admit_turn(&next_hour).await.unwrap());
    let hours = store
        .ledger(&[
            hourly_turns_counter(&scope, HOUR),
            hourly_turns_counter(&scope, "2026-12-01T13"),
        ])
        .await
        .unwrap();
    assert_eq!(hours, [2, 1]);
}

/// Everything one conversation and the caller's counters hold.
async fn snapshot(
    store: &Arc<dyn Store>,
    scope: &CallerScope,
    id: &str,
) -> (Option<ConversationRecord>, Vec<TurnRecord>, Vec<u64>) {
    (
        conversation(store, scope, id).await,
        store.recent_turns(scope, id, 100).await.unwrap(),
        counters(store, scope).await,
    )
}

pub async fn a_refused_admission_writes_nothing(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admit_and_seal(&store, &admit(&scope, "sealed", "r1", 0, 1), 2).await;
    admitted(
        store
            .admit_turn(&admit(&scope, "busy", "r1", 0, 3))
            .await
            .unwrap(),
    );
    let mut expiring = admit(&scope, "old", "r1", 0, 4);
    expiring.limits.lifetime_ms = 10;
    admit_and_seal(&store, &expiring, 5).await;

    let with = |turn: AdmitTurn, change: fn(&mut AdmitTurn)| {
        let mut turn = turn;
        change(&mut turn);
        turn
    };
    let cases: Vec<(&str, AdmitTurn, Refusal)> = vec![
        (
            "request id reused",
            with(admit(&scope, "sealed", "r1", 1, 20), |t| {
                t.input_digest = "sha256:other".into()
            }),
            Refusal::RequestIdReused,
        ),
        (
            "expired",
            admit(&scope, "old", "r2", 1, 20),
            Refusal::Expired,
        ),
        (
            "turn active",
            admit(&scope, "busy", "r2", 0, 20),
            Refusal::TurnActive,
        ),
        (
            "stale version",
            admit(&scope, "sealed", "r2", 0, 20),
            Refusal::VersionConflict { current: 1 },
        ),
        (
            "fingerprint",
            with(admit(&scope, "sealed", "r2", 1, 20), |t| {
                t.fingerprint = "fp-2".into()
            }),
            Refusal::FingerprintChanged,
        ),
        (
            "new conversation, stale version",
            admit(&scope, "new", "r1", 4, 20),
            Refusal::VersionConflict { current: 0 },
        ),
        (
            "new conversation, too many ids",
            with(admit(&scope, "new", "r1", 0, 20), |t| {
                t.limits.conversations_per_caller = 3
            }),
            Refusal::TooManyConversations,
        ),
        (
            "new conversation, active turns",
            with(admit(&scope, "new", "r1", 0, 20), |t| {
                t.limits.active_per_caller = 1
            }),
            Refusal::TooManyActiveTurns,
        ),
        (
            "new conversation, hourly turns",
            with(admit(&scope, "new", "r1", 0, 20), |t| {
                t.limits.turns_per_hour = 3
            }),
            Refusal::HourlyTurnsExhausted,
        ),
        (
            "existing conversation, hourly turns",
            with(admit(&scope, "sealed", "r2", 1, 20), |t| {
                t.limits.turns_per_hour = 3
            }),
            Refusal::HourlyTurnsExhausted,
        ),
    ];
    for (name, turn, refusal) in cases {
        let before = snapshot(&store, &scope, &turn.conversation_id).await;
        assert_eq!(
            refused(store.admit_turn(&turn).await.unwrap()),
            refusal,
            "{name}"
        );
        assert_eq!(
            snapshot(&store, &scope, &turn.conversation_id).await,
            before,
            "{name} wrote something"
        );
    }
    assert!(conversation(&store, &scope, "new").await.is_none());
    assert_eq!(counters(&store, &scope).await, [3, 1, 3]);
}

pub async fn sealing_twice_is_refused_the_second_time(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    admitted(
        store
            .admit_turn(&admit(&scope, "c1", "r1", 0, 1))
            .await
            .unwrap(),
    );
    admitted(
        store
            .admit_turn(&admit(&scope, "c2", "r1", 0, 1))
            .await
            .unwrap(),
    );
    assert!(store.seal_turn(&seal(&scope, "c1", "r1", 2)).await.unwrap());
    let first = snapshot(&store, &scope, "c1").await;
    assert_eq!(first.2, [2, 1, 2]);

    let mut again = seal(&scope, "c1", "r1", 3);
    again.answer_class = AnswerClass::CeilingDenied;
    again.response = json!({"status": "blocked"});
    assert!(!store.seal_turn(&again).await.unwrap());
    assert_eq!(
        snapshot(&store, &scope, "c1").await,
        first,
        "the second seal wrote something"
    );
    assert!(
        !store
            .seal_turn(&seal(&scope, "c1", "missing", 3))
            .await
            .unwrap()
    );
    assert!(
        !store
            .seal_turn(&seal(&scope, "missing", "r1", 3))
            .await
            .unwrap()
    );
    assert_eq!(counters(&store, &scope).await, [2, 1, 2]);
}

pub async fn a_seal_may_replace_the_server_exception_and_otherwise_keeps_it(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let first = admit(&scope, "c1", "r1", 0, 1);
    admitted(store.admit_turn(&first).await.unwrap());
    assert!(store.seal_turn(&seal(&scope, "c1", "r1", 2)).await.unwrap());
    let kept = store.turn(&scope, "c1", "r1").await.unwrap().unwrap();
    assert_eq!(kept.server_exception, first.server_exception);

    admitted(
        store
            .admit_turn(&admit(&scope, "c1", "r2", 1, 3))
            .await
            .unwrap(),
    );
    let mut ended = seal(&scope, "c1", "r2", 4);
    let replaced = json!({"purpose": "p", "uncertain_failover": {"result": "advanced"}});
    ended.server_exception = Some(replaced.clone());
    assert!(store.seal_turn(&ended).await.unwrap());
    let turn = store.turn(&scope, "c1", "r2").await.unwrap().unwrap();
    assert_eq!(turn.server_exception, replaced);
}

pub async fn unfinished_turns_are_the_active_ones_admitted_before_the_cutoff_oldest_first(
    store: Arc<dyn Store>,
) {
    let (a, b) = (fresh_scope(), fresh_scope());
    admit_and_seal(&store, &admit(&b, "c2", "r1", 0, 5), 6).await;
    admitted(
        store
            .admit_turn(&admit(&a, "c1", "r1", 0, 30))
            .await
            .unwrap(),
    );
    admitted(
        store
            .admit_turn(&admit(&b, "c1", "r1", 0, 10))
            .await
            .unwrap(),
    );
    admitted(
        store
            .admit_turn(&admit(&a, "c2", "r1", 0, 20))
            .await
            .unwrap(),
    );
    let listed = |before: i64, limit: u32| {
        let store = store.clone();
        async move {
            store
                .unfinished_turns(at(before), limit)
                .await
                .unwrap()
                .into_iter()
                .map(|t| (t.caller_scope, t.conversation_id, t.created_at))
                .collect::<Vec<_>>()
        }
    };
    let turn =
        |scope: &CallerScope, id: &str, created: i64| (scope.clone(), id.to_owned(), at(created));
    assert_eq!(
        listed(30, 10).await,
        [turn(&b, "c1", 10), turn(&a, "c2", 20)],
        "admitted before the cutoff, the sealed one left out"
    );
    assert_eq!(
        listed(31, 10).await,
        [turn(&b, "c1", 10), turn(&a, "c2", 20), turn(&a, "c1", 30)]
    );
    assert_eq!(
        listed(31, 2).await,
        [turn(&b, "c1", 10), turn(&a, "c2", 20)]
    );
    assert!(listed(10, 10).await.is_empty());
    let full = store.unfinished_turns(at(31), 1).await.unwrap();
    assert_eq!(full[0].status, TurnStatus::Active);
    assert_eq!(full[0].request_id, "r1");
}

pub async fn conversations_are_partitioned_by_caller_scope(store: Arc<dyn Store>) {
    let (a, b) = (fresh_scope(), fresh_scope());
    let turn = admitted(
        store
            .admit_turn(&admit(&a, "c1", "r1", 0, 1))
            .await
            .unwrap(),
    );
    store
        .put_attempt(&AttemptRecord {
            caller_scope: a.clone(),
            conversation_id: "c1".into(),
            request_id: "r1".into(),
            attempt: 1,
            record: json!({"provider": "meta"}),
            updated_at: at(1),
        })
        .await
        .unwrap();
    assert!(conversation(&store, &b, "c1").await.is_none());
    assert!(store.turn(&b, "c1", "r1").await.unwrap().is_none());
    assert!(store.recent_turns(&b, "c1", 10).await.unwrap().is_empty());
    assert!(store.attempts(&b, "c1", "r1").await.unwrap().is_empty());
    assert!(!store.seal_turn(&seal(&b, "c1", "r1", 2)).await.unwrap());
    assert_eq!(store.turn(&a, "c1", "r1").await.unwrap(), Some(turn));
    assert_eq!(counters(&store, &a).await, [1, 1, 1]);

    // The same ids are another conversation for another caller.
    let theirs = admitted(
        store
            .admit_turn(&admit(&b, "c1", "r1", 0, 3))
            .await
            .unwrap(),
    );
    assert_eq!(theirs.caller_scope, b);
    assert!(store.seal_turn(&seal(&b, "c1", "r1", 4)).await.unwrap());
    assert_eq!(conversation(&store, &b, "c1").await.unwrap().version, 1);
    assert_eq!(conversation(&store, &a, "c1").await.unwrap().version, 0);
    assert_eq!(
        store.turn(&a, "c1", "r1").await.unwrap().unwrap().status,
        TurnStatus::Active
    );
    assert_eq!(counters(&store, &a).await, [1, 1, 1]);
    assert_eq!(counters(&store, &b).await, [1, 0, 1]);
    assert_eq!(store.attempts(&a, "c1", "r1").await.unwrap().len(), 1);
}

pub async fn reservations_are_all_or_nothing_and_releases_stop_at_zero(store: Arc<dyn Store>) {
    let tag = fresh_scope();
    let name = |n: &str| format!("{n}:{}", tag.as_str());
    let (a, b, z) = (name("a"), name("b"), name("z"));
    assert_eq!(
        store
            .reserve(&[charge(&a, 5, 10), charge(&b, 5, 4)])
            .await
            .unwrap(),
        Reserved::Denied { counter: b.clone() }
    );
    assert_eq!(store.ledger(&[a.clone(), b.clone()]).await.unwrap(), [0, 0]);
    assert_eq!(
        store
            .reserve(&[charge(&a, 10, 10), charge(&b, 4, 4)])
            .await
            .unwrap(),
        Reserved::All,
        "a charge may reach its ceiling"
    );
    assert_eq!(
        store
            .ledger(&[b.clone(), name("never"), a.clone()])
            .await
            .unwrap(),
        [4, 0, 10]
    );
    // When several would pass, the first asked is named.
    assert_eq!(
        store
            .reserve(&[charge(&z, 11, 10), charge(&a, 1, 10)])
            .await
            .unwrap(),
        Reserved::Denied { counter: z.clone() }
    );
    assert_eq!(
        store
            .reserve(&[charge(&a, 1, 10), charge(&z, 11, 10)])
            .await
            .unwrap(),
        Reserved::Denied { counter: a.clone() }
    );
    // Charges on one counter add up.
    store.release(&[charge(&a, 10, 10)]).await.unwrap();
    assert_eq!(
        store
            .reserve(&[charge(&a, 6, 10), charge(&a, 6, 10)])
            .await
            .unwrap(),
        Reserved::Denied { counter: a.clone() }
    );
    assert_eq!(
        store
            .reserve(&[charge(&a, 6, 10), charge(&a, 4, 10)])
            .await
            .unwrap(),
        Reserved::All
    );
    assert_eq!(store.ledger(std::slice::from_ref(&a)).await.unwrap(), [10]);

    store
        .release(&[
            charge(&a, 3, 10),
            charge(&b, 7, 4),
            charge(&name("never"), 1, 1),
        ])
        .await
        .unwrap();
    assert_eq!(
        store
            .ledger(&[a.clone(), b.clone(), name("never")])
            .await
            .unwrap(),
        [7, 0, 0],
        "releases never go below zero"
    );
    assert_eq!(store.reserve(&[]).await.unwrap(), Reserved::All);
    assert!(store.ledger(&[]).await.unwrap().is_empty());
}

pub async fn sixty_four_concurrent_reservations_stop_exactly_at_the_ceiling(store: Arc<dyn Store>) {
    const CEILING: u64 = 2_010_000;
    let counter = format!("provider:meta:{}", fresh_scope().as_str());
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (store, counter, barrier) = (store.clone(), counter.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .reserve(&[charge(&counter, 100_000, CEILING)])
                .await
                .unwrap()
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Reserved::All => admitted += 1,
            Reserved::Denied { counter: denied } => assert_eq!(denied, counter),
        }
    }
    assert_eq!(
        admitted, 20,
        "exactly twenty reservations fit under the ceiling"
    );
    assert_eq!(
        store.ledger(std::slice::from_ref(&counter)).await.unwrap(),
        [2_000_000]
    );
    assert_eq!(
        store
            .reserve(&[charge(&counter, 10_000, CEILING)])
            .await
            .unwrap(),
        Reserved::All
    );
    assert_eq!(
        store.ledger(std::slice::from_ref(&counter)).await.unwrap(),
        [CEILING]
    );
    assert_eq!(
        store
            .reserve(&[charge(&counter, 1, CEILING)])
            .await
            .unwrap(),
        Reserved::Denied {
            counter: counter.clone()
        }
    );
    assert_eq!(
        store.ledger(&[counter]).await.unwrap(),
        [CEILING],
        "never over"
    );
}

pub async fn concurrent_admissions_never_exceed_the_active_limit(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (store, scope, barrier) = (store.clone(), scope.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let turn = admit(&scope, &format!("c{i}"), "r1", 0, i);
            store.admit_turn(&turn).await.unwrap()
        }));
    }
    let mut admitted = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Admission::Admitted(turn) => admitted.push(turn.conversation_id),
            other => assert_eq!(other, Admission::Refused(Refusal::TooManyActiveTurns)),
        }
    }
    assert_eq!(admitted.len(), 2, "{admitted:?}");
    assert_eq!(counters(&store, &scope).await, [2, 2, 2]);
    let mut stored = 0;
    for i in 0..16 {
        stored += usize::from(
            conversation(&store, &scope, &format!("c{i}"))
                .await
                .is_some(),
        );
    }
    assert_eq!(stored, 2, "refused admissions left no conversation");
}

pub async fn concurrent_first_turns_of_one_conversation_admit_one(store: Arc<dyn Store>) {
    let scope = fresh_scope();
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (store, scope, barrier) = (store.clone(), scope.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let turn = admit(&scope, "c1", &format!("r{i}"), 0, 1);
            store.admit_turn(&turn).await.unwrap()
        }));
    }
    let mut admitted = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Admission::Admitted(turn) => admitted.push(turn.request_id),
            other => assert_eq!(other, Admission::Refused(Refusal::TurnActive)),
        }
    }
    assert_eq!(admitted.len(), 1, "{admitted:?}");
    let stored = conversation(&store, &scope, "c1").await.unwrap();
    assert_eq!(stored.active_request_id.as_ref(), admitted.first());
    assert_eq!(counters(&store, &scope).await, [1, 1, 1]);
}

/// Two stores on one database (as two processes are): reservations and admissions made through
/// either share one ledger and one set of limits. Backends with a shared database call it with
/// two separately opened stores.
pub async fn two_stores_on_one_database_share_the_limits(
    first: Arc<dyn Store>,
    second: Arc<dyn Store>,
) {
    const CEILING: u64 = 2_010_000;
    let counter = format!("provider:meta:{}", fresh_scope().as_str());
    let scope = fresh_scope();
    let barrier = Arc::new(tokio::sync::Barrier::new(64 + 16));
    let mut reservations = Vec::new();
    let mut admissions = Vec::new();
    for i in 0..64 {
        let store = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        let (counter, barrier) = (counter.clone(), barrier.clone());
        reservations.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .reserve(&[charge(&counter, 100_000, CEILING)])
                .await
                .unwrap()
        }));
    }
    for i in 0..16 {
        let store = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        let (scope, barrier) = (scope.clone(), barrier.clone());
        admissions.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .admit_turn(&admit(&scope, &format!("c{i}"), "r1", 0, i))
                .await
                .unwrap()
        }));
    }
    let mut reserved = 0;
    for task in reservations {
        reserved += usize::from(task.await.unwrap() == Reserved::All);
    }
    let mut admitted = 0;
    for task in admissions {
        admitted += usize::from(matches!(task.await.unwrap(), Admission::Admitted(_)));
    }
    assert_eq!(reserved, 20);
    assert_eq!(admitted, 2);
    for store in [&first, &second] {
        assert_eq!(
            store.ledger(std::slice::from_ref(&counter)).await.unwrap(),
            [2_000_000]
        );
        assert_eq!(counters(store, &scope).await, [2, 2, 2]);
    }
}

/// A limit on a resource no other case uses, observed at `observed`, eligible at `until`.
fn limited(resource: &str, observed: i64, until: i64) -> HealthRecord {
    HealthRecord {
        resource: resource.to_owned(),
        scope: HealthScope::Route,
        condition: "rate_limited".to_owned(),
        until: at(until),
        source: "retry_after".to_owned(),
        failures: 0,
        limited_at: at(observed),
        origin: resource.to_owned(),
        probe_until: None,
        probe_id: None,
    }
}

fn fresh_resource() -> String {
    format!("route:meta:operator:{}", fresh_scope().as_str())
}

pub async fn health_limits_replace_only_older_ones_and_stale_successes_keep_them(
    store: Arc<dyn Store>,
) {
    let resource = fresh_resource();
    assert!(
        store
            .health(std::slice::from_ref(&resource))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.limit(&limited(&resource, 10, 40)).await.unwrap());
    // An older observation does not replace a newer one.
    assert!(!store.limit(&limited(&resource, 5, 99)).await.unwrap());
    let newer = HealthRecord {
        condition: "unavailable".to_owned(),
        failures: 2,
        ..limited(&resource, 20, 60)
    };
    assert!(store.limit(&newer).await.unwrap());
    assert_eq!(
        store.health(std::slice::from_ref(&resource)).await.unwrap(),
        std::slice::from_ref(&newer)
    );
    assert!(store.all_health().await.unwrap().contains(&newer));
    // A success observed before the limit does not clear it; one after does.
    assert!(!store.clear_health(&resource, at(19)).await.unwrap());
    assert_eq!(
        store
            .health(std::slice::from_ref(&resource))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store.clear_health(&resource, at(20)).await.unwrap());
    assert!(
        store
            .health(std::slice::from_ref(&resource))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!store.clear_health(&resource, at(30)).await.unwrap());
}

pub async fn one_recovery_probe_per_resource_and_never_without_its_allowance(
    store: Arc<dyn Store>,
) {
    let resource = fresh_resource();
    let counter = format!("provider:meta:{resource}");
    let fits = [charge(&counter, 60, 100)];
    // Not limited: nothing written.
    assert_eq!(
        store
            .reserve_probe(&resource, "p0", at(200), at(50), &fits)
            .await
            .unwrap(),
        ProbeReservation::NotLimited
    );
    store.limit(&limited(&resource, 10, 40)).await.unwrap();
    // Still cooling.
    assert_eq!(
        store
            .reserve_probe(&resource, "p1", at(160), at(39), &fits)
            .await
            .unwrap(),
        ProbeReservation::Held { until: at(40) }
    );
    // Eligible, but the allowance does not fit: no lease is taken.
    let passes = [charge(&counter, 101, 100)];
    assert_eq!(
        store
            .reserve_probe(&resource, "p1", at(160), at(40), &passes)
            .await
            .unwrap(),
        ProbeReservation::Denied {
            counter: counter.clone()
        }
    );
    assert_eq!(
        store.ledger(std::slice::from_ref(&counter)).await.unwrap(),
        [0]
    );
    assert_eq!(
        store
            .reserve_probe(&resource, "p1", at(160), at(40), &fits)
            .await
            .unwrap(),
        ProbeReservation::Admitted
    );
    assert_eq!(
        store.ledger(std::slice::from_ref(&counter)).await.unwrap(),
        [60]
    );
    let stored = store.health(std::slice::from_ref(&resource)).await.unwrap();
    assert_eq!(stored[0].probe_id.as_deref(), Some("p1"));
    assert_eq!(stored[0].probe_until, Some(at(160)));
    // A second probe waits for the lease.
    assert_eq!(
        store
            .reserve_probe(&resource, "p2", at(170), at(50), &fits)
            .await
            .unwrap(),
        ProbeReservation::Held { until: at(160) }
    );
    assert_eq!(
        store.ledger(std::slice::from_ref(&counter)).await.unwrap(),
        [60]
    );
}

pub async fn an_expired_probe_is_replaced_once(store: Arc<dyn Store>) {
    let resource = fresh_resource();
    store.limit(&limited(&resource, 10, 40)).await.unwrap();
    assert_eq!(
        store
            .reserve_probe(&resource, "p1", at(160), at(40), &[])
            .await
            .unwrap(),
        ProbeReservation::Admitted
    );
    let uncertain = HealthRecord {
        condition: "uncertain".to_owned(),
        failures: 1,
        ..limited(&resource, 161, 221)
    };
    assert!(!store.expire_probe("p0", &uncertain).await.unwrap());
    assert!(store.expire_probe("p1", &uncertain).await.unwrap());
    assert!(!store.expire_probe("p1", &uncertain).await.unwrap());
    assert_eq!(store.health(&[resource]).await.unwrap(), [uncertain]);
}

/// 32 concurrent probes of one eligible resource through `first` and `second` (one store
/// twice, or two stores on one database): exactly one is admitted, and only its allowance is
/// charged.
pub async fn concurrent_probes_admit_exactly_one(first: Arc<dyn Store>, second: Arc<dyn Store>) {
    let resource = fresh_resource();
    let counter = format!("provider:meta:{resource}");
    first.limit(&limited(&resource, 10, 40)).await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let store = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        let (resource, counter, barrier) = (resource.clone(), counter.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .reserve_probe(
                    &resource,
                    &format!("p{i}"),
                    at(160),
                    at(50),
                    &[charge(&counter, 7, 1_000)],
                )
                .await
                .unwrap()
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            ProbeReservation::Admitted => admitted += 1,
            ProbeReservation::Held { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(admitted, 1);
    assert_eq!(first.ledger(&[counter]).await.unwrap(), [7]);
}

pub async fn concurrent_probes_of_one_store_admit_exactly_one(store: Arc<dyn Store>) {
    concurrent_probes_admit_exactly_one(store.clone(), store).await;
}
