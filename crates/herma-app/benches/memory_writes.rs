//! Entity memory's writes: 16 coding turns' entities written to SQLite one write per turn (as
//! the memory worker did) against one write for the whole batch (as it does now), in the same
//! run; and the batch again for a caller whose memory already holds 4,000 entities, as a team's
//! key does after some weeks: below its cap, and at its cap with turns about entities it knows.
//! (Extracting them is `herma-core`'s `memory` bench.)

// A benchmark fails loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]
mod support;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use herma_core::memory::observations;
use herma_core::model::EntityKind;
use herma_core::{CallerScope, Timestamp};
use herma_store::{EntityObservation, EntityTurn};

/// Turns per memory batch.
const TURNS: usize = 16;
const MAX_ENTITIES: u64 = 10_000;
/// Entities a long-used caller's memory already holds.
const HELD: usize = 4_000;

fn bench(c: &mut Criterion) {
    let (rt, store, _dir) = support::sqlite_store();
    let user = "The build fails in src/billing/invoice.rs: error[E0308]: mismatched types in \
        `Invoice::total()`. Fix `apply_discount()` so CustomerAccount totals match, then run \
        cargo test.";
    let answer = "I changed `Invoice::total` in src/billing/invoice.rs to sum LineItem amounts \
        and made apply_discount() take a DiscountPolicy. The tests in tests/billing.rs pass.";
    let paths = vec![
        "src/billing/invoice.rs".to_owned(),
        "tests/billing.rs".to_owned(),
    ];
    let seen = observations(&paths, user, &[], answer);
    assert!(seen.len() >= 8, "a coding turn has entities: {seen:?}");
    println!("{TURNS} turns of {} entities each", seen.len());
    let seen_len = seen.len();

    let scope = CallerScope::parse("key:0123456789abcdef").unwrap();
    let mut at = 0;
    let mut turns_of = move |scope: &CallerScope| -> Vec<EntityTurn> {
        (0..TURNS)
            .map(|_| {
                at += 1;
                EntityTurn {
                    scope: scope.clone(),
                    project_tag: "billing".into(),
                    observations: seen.clone(),
                    at: Timestamp::from_millis(at),
                }
            })
            .collect()
    };
    let mut turns = || turns_of(&scope);
    let name = format!("{TURNS} turns' entities, one write per turn (sqlite)");
    c.bench_function(&name, |b| {
        b.iter_batched(
            &mut turns,
            |turns| {
                rt.block_on(async {
                    for t in &turns {
                        (store.record_entities(
                            &t.scope,
                            &t.project_tag,
                            &t.observations,
                            t.at,
                            MAX_ENTITIES,
                        ))
                        .await
                        .unwrap();
                    }
                })
            },
            BatchSize::SmallInput,
        )
    });
    let name = format!("{TURNS} turns' entities, one write per batch (sqlite)");
    c.bench_function(&name, |b| {
        b.iter_batched(
            &mut turns,
            |turns| {
                rt.block_on(store.record_entity_turns(&turns, MAX_ENTITIES))
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });

    // A caller with HELD entities already (written once, before the measurement).
    let held = CallerScope::parse("key:fedcba9876543210").unwrap();
    let backlog: Vec<EntityObservation> = (0..HELD)
        .map(|i| EntityObservation {
            kind: EntityKind::CodeSymbol,
            value: format!("Symbol{i:04}"),
        })
        .collect();
    rt.block_on(store.record_entities(
        &held,
        "billing",
        &backlog,
        Timestamp::from_millis(0),
        MAX_ENTITIES,
    ))
    .unwrap();
    // The turns' own entities, once, so that the cap below is exactly what the scope holds.
    rt.block_on(store.record_entity_turns(&turns_of(&held)[..1], MAX_ENTITIES))
        .unwrap();
    let at_cap = (HELD + seen_len) as u64;
    for (case, cap) in [("below the cap", MAX_ENTITIES), ("at the cap", at_cap)] {
        let name =
            format!("{TURNS} turns' entities, one write per batch, {HELD} held, {case} (sqlite)");
        c.bench_function(&name, |b| {
            b.iter_batched(
                || turns_of(&held),
                |turns| {
                    let evicted = rt.block_on(store.record_entity_turns(&turns, cap)).unwrap();
                    assert_eq!(evicted, 0, "the turns' entities are all known");
                },
                BatchSize::SmallInput,
            )
        });
    }
}
criterion_group!(benches, bench);
criterion_main!(benches);
