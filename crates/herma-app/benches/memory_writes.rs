//! Entity memory's writes: 16 coding turns' entities written to SQLite one write per turn (as
//! the memory worker did) against one write for the whole batch (as it does now), in the same
//! run. (Extracting them is `herma-core`'s `memory` bench.)

// A benchmark fails loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]
mod support;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use herma_core::memory::observations;
use herma_core::{CallerScope, Timestamp};
use herma_store::EntityTurn;

/// Turns per memory batch.
const TURNS: usize = 16;
const MAX_ENTITIES: u64 = 10_000;

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

    let scope = CallerScope::parse("key:0123456789abcdef").unwrap();
    let mut at = 0;
    let mut turns = move || -> Vec<EntityTurn> {
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
}
criterion_group!(benches, bench);
criterion_main!(benches);
