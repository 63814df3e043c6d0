//! The governed ports' conformance suite: one behaviour on memory, SQLite and PostgreSQL.
//!
//! A backend's tests call [`governed_conformance_tests!`](crate::governed_conformance_tests) with
//! an async factory returning fresh [`GovernedPorts`]; each case becomes a named test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use herma_core::{CallerScope, Timestamp};
use serde_json::json;

use crate::StoreError;
use crate::conformance::fresh_scope;
use crate::governed::{
    AuditEvent, CallReservation, Claim, ExecutionRecord, ExecutionStatus, GovernedCharge,
    GovernedPorts, NotDispatchedCause, Reservation, ResultSlot, RootOpen, RootReceipt, RootRecord,
    RootStatus, SpendTotals, UsageObservation,
};

#[macro_export]
macro_rules! governed_conformance_tests {
    ($factory:path) => {
        $crate::governed_conformance_tests!(@cases $factory;
            executions_are_claimed_once_and_updated_by_compare_and_set,
            sixty_four_concurrent_claims_of_one_key_have_one_winner,
            overdue_executions_are_the_unfinished_ones_past_their_deadline,
            results_are_reserved_once_filled_once_and_erased_for_good,
            the_usage_inbox_deposits_once_pages_by_cursor_and_acknowledges,
            settlement_writes_once_and_peek_reads_the_counters_it_moves,
            concurrent_settlements_of_one_key_move_the_counters_once,
            audit_events_keep_their_order,
            roots_admit_each_call_once_and_only_while_active,
            overdue_roots_expire,
            root_receipts_are_written_once_and_aggregated,
            governed_rows_are_partitioned_by_scope,
        );
    };
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let ports = $factory().await;
                $crate::governed_conformance::$case(ports).await;
            }
        )*
    };
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_790_000_000_000 + ms)
}

pub fn execution(scope: &CallerScope, key: &str, deadline: i64) -> ExecutionRecord {
    ExecutionRecord {
        scope: scope.clone(),
        operation_key: key.to_owned(),
        version: 0,
        status: ExecutionStatus::Prepared,
        cause: None,
        deadline_at: at(deadline),
        lease_until: None,
        fence: 0,
        meta: json!({"session": "s1", "z": 1, "a": [1, {"b": "ü"}]}),
        created_at: at(0),
        updated_at: at(0),
    }
}

fn slot(scope: &CallerScope, key: &str) -> ResultSlot {
    ResultSlot {
        scope: scope.clone(),
        operation_key: key.to_owned(),
        expires_at: at(1_000_000),
        envelope: Some(json!({"ignored": true})),
        erased_at: None,
        created_at: at(0),
    }
}

fn observation(scope: &CallerScope, key: &str, id: &str) -> UsageObservation {
    UsageObservation {
        scope: scope.clone(),
        operation_key: key.to_owned(),
        observation_id: id.to_owned(),
        exact: true,
        usage: json!({"input_tokens": 10, "output_tokens": 5}),
        observed_at: at(5),
    }
}

fn charge(scope: &CallerScope, key: &str, session: &str, micros: i64) -> GovernedCharge {
    GovernedCharge {
        scope: scope.clone(),
        operation_key: key.to_owned(),
        session_id: session.to_owned(),
        day: "2026-11-30".to_owned(),
        amount_micros: micros,
        detail: json!({"price_version": "p1"}),
        settled_at: at(10),
    }
}

fn root(scope: &CallerScope, key: &str, deadline: i64) -> RootRecord {
    RootRecord {
        scope: scope.clone(),
        root_key: key.to_owned(),
        binding: json!({"digest": "abc"}),
        status: RootStatus::Active,
        deadline_at: at(deadline),
        reserved_calls: 0,
        settled_micros: 0,
        receipts: 0,
        created_at: at(0),
        closed_at: None,
    }
}

fn receipt(scope: &CallerScope, root_key: &str, key: &str, micros: i64) -> RootReceipt {
    RootReceipt {
        scope: scope.clone(),
        root_key: root_key.to_owned(),
        operation_key: key.to_owned(),
        amount_micros: micros,
        detail: json!({"charge": key}),
        recorded_at: at(20),
    }
}

pub async fn executions_are_claimed_once_and_updated_by_compare_and_set(ports: GovernedPorts) {
    let scope = fresh_scope();
    let record = execution(&scope, "op-1", 100);
    let Claim::Claimed(claimed) = ports.executions.claim_execution(&record).await.unwrap() else {
        panic!("the first claim wins");
    };
    assert_eq!(claimed.version, 1);
    assert_eq!(claimed.meta, record.meta);
    let mut other = record.clone();
    other.meta = json!({"other": true});
    match ports.executions.claim_execution(&other).await.unwrap() {
        Claim::Existing(existing) => assert_eq!(existing, claimed),
        Claim::Claimed(_) => panic!("a second claim must find the first"),
    }

    let mut next = claimed.clone();
    next.status = ExecutionStatus::NotDispatched;
    next.cause = Some(NotDispatchedCause::Input);
    next.fence = 3;
    next.lease_until = Some(at(50));
    next.meta = json!({"outcome": "x"});
    next.updated_at = at(7);
    let updated = ports.executions.update_execution(&next, 1).await.unwrap();
    assert_eq!(updated.version, 2);
    assert_eq!(
        ports.executions.execution(&scope, "op-1").await.unwrap(),
        Some(updated.clone())
    );
    assert_eq!(updated.cause, Some(NotDispatchedCause::Input));
    assert_eq!(updated.lease_until, Some(at(50)));
    assert_eq!(updated.created_at, at(0));
    assert_eq!(
        ports.executions.update_execution(&next, 1).await,
        Err(StoreError::VersionConflict { current: Some(2) })
    );
    let missing = execution(&scope, "op-missing", 1);
    assert_eq!(
        ports.executions.update_execution(&missing, 1).await,
        Err(StoreError::VersionConflict { current: None })
    );
    assert_eq!(
        ports.executions.execution(&scope, "nope").await.unwrap(),
        None
    );
}

pub async fn sixty_four_concurrent_claims_of_one_key_have_one_winner(ports: GovernedPorts) {
    let scope = fresh_scope();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let ports = ports.clone();
        let mut record = execution(&scope, "contended", 100);
        record.meta = json!({"writer": i});
        tasks.push(tokio::spawn(async move {
            ports.executions.claim_execution(&record).await.unwrap()
        }));
    }
    let mut winners = Vec::new();
    let mut seen = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Claim::Claimed(r) => winners.push(r),
            Claim::Existing(r) => seen.push(r),
        }
    }
    assert_eq!(winners.len(), 1);
    assert!(seen.iter().all(|r| r.meta == winners[0].meta));
}

pub async fn overdue_executions_are_the_unfinished_ones_past_their_deadline(ports: GovernedPorts) {
    let scope = fresh_scope();
    for (key, deadline, status) in [
        ("late-b", 20, ExecutionStatus::Dispatching),
        ("late-a", 10, ExecutionStatus::Prepared),
        ("done", 5, ExecutionStatus::Completed),
        ("open", 500, ExecutionStatus::Prepared),
        ("late-c", 30, ExecutionStatus::Prepared),
    ] {
        let Claim::Claimed(claimed) = ports
            .executions
            .claim_execution(&execution(&scope, key, deadline))
            .await
            .unwrap()
        else {
            panic!("fresh key");
        };
        if status != ExecutionStatus::Prepared {
            let mut next = claimed.clone();
            next.status = status;
            ports.executions.update_execution(&next, 1).await.unwrap();
        }
    }
    let overdue = ports
        .executions
        .overdue_executions(&scope, at(30), 10)
        .await
        .unwrap();
    let keys: Vec<_> = overdue.iter().map(|r| r.operation_key.as_str()).collect();
    assert_eq!(keys, ["late-a", "late-b", "late-c"]);
    let first = ports
        .executions
        .overdue_executions(&scope, at(30), 2)
        .await
        .unwrap();
    assert_eq!(first.len(), 2);
    assert!(
        ports
            .executions
            .overdue_executions(&fresh_scope(), at(1_000), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn results_are_reserved_once_filled_once_and_erased_for_good(ports: GovernedPorts) {
    let scope = fresh_scope();
    let Reservation::Reserved(reserved) = ports
        .results
        .reserve_result(&slot(&scope, "r"))
        .await
        .unwrap()
    else {
        panic!("first reservation");
    };
    assert_eq!(reserved.envelope, None, "a reservation starts empty");
    assert!(matches!(
        ports
            .results
            .reserve_result(&slot(&scope, "r"))
            .await
            .unwrap(),
        Reservation::Existing(_)
    ));
    assert_eq!(
        ports
            .results
            .store_envelope(&scope, "missing", &json!({}))
            .await,
        Err(StoreError::NotFound)
    );
    let first = json!({"outcome": "success", "text": "héllo"});
    let stored = ports
        .results
        .store_envelope(&scope, "r", &first)
        .await
        .unwrap();
    assert_eq!(stored.envelope, Some(first.clone()));
    let again = ports
        .results
        .store_envelope(&scope, "r", &json!({"outcome": "other"}))
        .await
        .unwrap();
    assert_eq!(again.envelope, Some(first), "the first envelope stays");

    assert!(
        ports
            .results
            .erase_result(&scope, "r", at(9))
            .await
            .unwrap()
    );
    assert!(
        !ports
            .results
            .erase_result(&scope, "none", at(9))
            .await
            .unwrap()
    );
    let erased = ports.results.result(&scope, "r").await.unwrap().unwrap();
    assert_eq!(erased.envelope, None);
    assert_eq!(erased.erased_at, Some(at(9)));
    let after = ports
        .results
        .store_envelope(&scope, "r", &json!({"outcome": "resurrected"}))
        .await
        .unwrap();
    assert_eq!(after.envelope, None, "erased content is never resurrected");
}

pub async fn the_usage_inbox_deposits_once_pages_by_cursor_and_acknowledges(ports: GovernedPorts) {
    let scope = fresh_scope();
    let other = fresh_scope();
    let mut seqs = Vec::new();
    for i in 0..5 {
        let entry = ports
            .inbox
            .deposit_usage(&observation(&scope, &format!("op-{i}"), "resp"))
            .await
            .unwrap();
        seqs.push(entry.seq);
        ports
            .inbox
            .deposit_usage(&observation(&other, "op-x", &format!("r{i}")))
            .await
            .unwrap();
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    let again = ports
        .inbox
        .deposit_usage(&observation(&scope, "op-0", "resp"))
        .await
        .unwrap();
    assert_eq!(
        again.seq, seqs[0],
        "a repeated observation is not a new entry"
    );

    let page = ports.inbox.pending_usage(&scope, None, 2).await.unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), seqs[..2]);
    let next = ports
        .inbox
        .pending_usage(&scope, Some(page[1].seq), 10)
        .await
        .unwrap();
    assert_eq!(next.iter().map(|e| e.seq).collect::<Vec<_>>(), seqs[2..]);
    assert_eq!(next[0].observation, observation(&scope, "op-2", "resp"));

    assert!(
        ports
            .inbox
            .acknowledge_usage(&scope, seqs[1], at(40))
            .await
            .unwrap()
    );
    assert!(
        !ports
            .inbox
            .acknowledge_usage(&scope, seqs[1], at(41))
            .await
            .unwrap()
    );
    assert!(
        !ports
            .inbox
            .acknowledge_usage(&other, seqs[2], at(41))
            .await
            .unwrap(),
        "another scope cannot acknowledge"
    );
    let pending = ports.inbox.pending_usage(&scope, None, 10).await.unwrap();
    assert_eq!(pending.len(), 4);
    let of_one = ports.inbox.usage_for(&scope, "op-1").await.unwrap();
    assert_eq!(of_one.len(), 1);
    assert_eq!(of_one[0].acknowledged_at, Some(at(40)));
}

pub async fn settlement_writes_once_and_peek_reads_the_counters_it_moves(ports: GovernedPorts) {
    let scope = fresh_scope();
    assert_eq!(
        ports.spend.peek(&scope, "s1", "2026-11-30").await.unwrap(),
        SpendTotals::default()
    );
    let first = ports
        .settlement
        .settle(&charge(&scope, "a", "s1", 1_500))
        .await
        .unwrap();
    assert!(first.created);
    let repeat = ports
        .settlement
        .settle(&charge(&scope, "a", "s1", 9_999))
        .await
        .unwrap();
    assert!(!repeat.created);
    assert_eq!(
        repeat.charge.amount_micros, 1_500,
        "the first charge stands"
    );
    ports
        .settlement
        .settle(&charge(&scope, "b", "s2", 500))
        .await
        .unwrap();
    assert_eq!(
        ports.spend.peek(&scope, "s1", "2026-11-30").await.unwrap(),
        SpendTotals {
            session_micros: 1_500,
            day_micros: 2_000
        }
    );
    assert_eq!(
        ports.settlement.charge(&scope, "a").await.unwrap(),
        Some(charge(&scope, "a", "s1", 1_500))
    );
    assert_eq!(ports.settlement.charge(&scope, "zz").await.unwrap(), None);
    ports
        .spend
        .add(&scope, "s1", "2026-11-30", 7)
        .await
        .unwrap();
    assert_eq!(
        ports
            .spend
            .peek(&scope, "s1", "2026-11-30")
            .await
            .unwrap()
            .session_micros,
        1_507
    );
    assert_eq!(
        ports.spend.peek(&scope, "s1", "2026-12-01").await.unwrap(),
        SpendTotals {
            session_micros: 1_507,
            day_micros: 0
        }
    );
}

pub async fn concurrent_settlements_of_one_key_move_the_counters_once(ports: GovernedPorts) {
    let scope = fresh_scope();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let ports = ports.clone();
        let charge = charge(&scope, "same", "s", 250);
        tasks.push(tokio::spawn(async move {
            ports.settlement.settle(&charge).await
        }));
    }
    let mut created = 0;
    for task in tasks {
        if task.await.unwrap().unwrap().created {
            created += 1;
        }
    }
    assert_eq!(created, 1);
    assert_eq!(
        ports.spend.peek(&scope, "s", "2026-11-30").await.unwrap(),
        SpendTotals {
            session_micros: 250,
            day_micros: 250
        }
    );
}

pub async fn audit_events_keep_their_order(ports: GovernedPorts) {
    let scope = fresh_scope();
    for (i, kind) in ["claimed", "dispatched", "completed"].iter().enumerate() {
        ports
            .audit
            .record(&AuditEvent {
                scope: scope.clone(),
                operation_key: "op".to_owned(),
                kind: (*kind).to_owned(),
                detail: json!({"i": i}),
                at: at(i as i64),
            })
            .await
            .unwrap();
    }
    let events = ports.audit.events(&scope, "op").await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["claimed", "dispatched", "completed"]
    );
    assert_eq!(events[2].detail, json!({"i": 2}));
    assert!(
        ports
            .audit
            .events(&fresh_scope(), "op")
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn roots_admit_each_call_once_and_only_while_active(ports: GovernedPorts) {
    let scope = fresh_scope();
    assert_eq!(
        ports.trees.reserve_call(&scope, "root", "c").await.unwrap(),
        CallReservation::MissingRoot
    );
    let RootOpen::Opened(opened) = ports
        .trees
        .open_root(&root(&scope, "root", 100))
        .await
        .unwrap()
    else {
        panic!("new root");
    };
    assert_eq!(opened.status, RootStatus::Active);
    assert!(matches!(
        ports.trees.open_root(&root(&scope, "root", 999)).await.unwrap(),
        RootOpen::Existing(r) if r.deadline_at == at(100)
    ));

    let mut tasks = Vec::new();
    for _ in 0..16 {
        let ports = ports.clone();
        let scope = scope.clone();
        tasks.push(tokio::spawn(async move {
            ports
                .trees
                .reserve_call(&scope, "root", "c1")
                .await
                .unwrap()
        }));
    }
    let mut reserved = 0;
    for task in tasks {
        match task.await.unwrap() {
            CallReservation::Reserved => reserved += 1,
            CallReservation::AlreadyReserved => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(reserved, 1);
    assert!(ports.trees.has_call(&scope, "root", "c1").await.unwrap());
    assert!(!ports.trees.has_call(&scope, "root", "c2").await.unwrap());
    let closed = ports
        .trees
        .close_root(&scope, "root", at(50))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(closed.status, RootStatus::Closed);
    assert_eq!(closed.reserved_calls, 1);
    assert_eq!(closed.closed_at, Some(at(50)));
    assert_eq!(
        ports
            .trees
            .reserve_call(&scope, "root", "c2")
            .await
            .unwrap(),
        CallReservation::RootNotActive(RootStatus::Closed)
    );
    assert_eq!(
        ports
            .trees
            .reserve_call(&scope, "root", "c1")
            .await
            .unwrap(),
        CallReservation::AlreadyReserved
    );
    assert_eq!(
        ports.trees.close_root(&scope, "nope", at(1)).await.unwrap(),
        None
    );
}

pub async fn overdue_roots_expire(ports: GovernedPorts) {
    let scope = fresh_scope();
    for (key, deadline) in [("late", 10), ("later", 20), ("open", 500)] {
        ports
            .trees
            .open_root(&root(&scope, key, deadline))
            .await
            .unwrap();
    }
    ports
        .trees
        .close_root(&scope, "later", at(1))
        .await
        .unwrap();
    let expired = ports.trees.expire_roots(&scope, at(30), 10).await.unwrap();
    assert_eq!(
        expired
            .iter()
            .map(|r| r.root_key.as_str())
            .collect::<Vec<_>>(),
        ["late"]
    );
    assert_eq!(expired[0].status, RootStatus::Expired);
    assert_eq!(
        ports
            .trees
            .root(&scope, "open")
            .await
            .unwrap()
            .unwrap()
            .status,
        RootStatus::Active
    );
    assert!(
        ports
            .trees
            .expire_roots(&scope, at(30), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn root_receipts_are_written_once_and_aggregated(ports: GovernedPorts) {
    let scope = fresh_scope();
    assert_eq!(
        ports
            .accounting
            .record_root_receipt(&receipt(&scope, "nope", "c", 1))
            .await,
        Err(StoreError::NotFound)
    );
    ports
        .trees
        .open_root(&root(&scope, "r", 100))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let ports = ports.clone();
        let receipt = receipt(&scope, "r", "c1", 300);
        tasks.push(tokio::spawn(async move {
            ports
                .accounting
                .record_root_receipt(&receipt)
                .await
                .unwrap()
        }));
    }
    let mut created = 0;
    for task in tasks {
        if task.await.unwrap().1 {
            created += 1;
        }
    }
    assert_eq!(created, 1);
    ports
        .accounting
        .record_root_receipt(&receipt(&scope, "r", "c2", 200))
        .await
        .unwrap();
    let root = ports.trees.root(&scope, "r").await.unwrap().unwrap();
    assert_eq!(root.settled_micros, 500);
    assert_eq!(root.receipts, 2);
    assert_eq!(
        ports
            .accounting
            .root_receipt(&scope, "r", "c1")
            .await
            .unwrap(),
        Some(receipt(&scope, "r", "c1", 300))
    );
}

pub async fn governed_rows_are_partitioned_by_scope(ports: GovernedPorts) {
    let a = fresh_scope();
    let b = fresh_scope();
    ports
        .executions
        .claim_execution(&execution(&a, "k", 1))
        .await
        .unwrap();
    ports.results.reserve_result(&slot(&a, "k")).await.unwrap();
    ports
        .settlement
        .settle(&charge(&a, "k", "s", 5))
        .await
        .unwrap();
    ports.trees.open_root(&root(&a, "k", 1)).await.unwrap();
    assert!(matches!(
        ports
            .executions
            .claim_execution(&execution(&b, "k", 1))
            .await
            .unwrap(),
        Claim::Claimed(_)
    ));
    assert_eq!(ports.results.result(&b, "k").await.unwrap(), None);
    assert_eq!(ports.settlement.charge(&b, "k").await.unwrap(), None);
    assert_eq!(
        ports.spend.peek(&b, "s", "2026-11-30").await.unwrap(),
        SpendTotals::default()
    );
    assert_eq!(ports.trees.root(&b, "k").await.unwrap(), None);
    assert!(ports.executions.execution(&b, "k").await.unwrap().is_some());
}
