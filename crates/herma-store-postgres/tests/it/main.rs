//! The store conformance suite against a real PostgreSQL (one fresh schema per test).

// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use herma_store::Store;
use herma_store_postgres::testing;

async fn fresh_store() -> Arc<dyn Store> {
    Arc::new(testing::fresh_store().await)
}

herma_store::store_conformance_tests!(fresh_store);

#[tokio::test]
async fn concurrent_migrations_apply_once() {
    let url = testing::test_database_url();
    let schema = testing::fresh_schema_name();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (url, schema) = (url.clone(), schema.clone());
        tasks.push(tokio::spawn(async move {
            let store = herma_store_postgres::connect_in_schema(&url, &schema)
                .await
                .unwrap();
            usize::from(!store.migrate().await.unwrap().is_empty())
        }));
    }
    let mut applied = Vec::new();
    for t in tasks {
        applied.push(t.await.unwrap());
    }
    applied.sort();
    assert_eq!(
        applied,
        [0, 0, 0, 1],
        "exactly one process applies the migration"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_schema_share_the_conversation_limits() {
    let url = testing::test_database_url();
    let schema = testing::fresh_schema_name();
    let first = herma_store_postgres::connect_in_schema(&url, &schema)
        .await
        .unwrap();
    first.migrate().await.unwrap();
    let second = herma_store_postgres::connect_in_schema(&url, &schema)
        .await
        .unwrap();
    let (first, second): (Arc<dyn herma_store::Store>, Arc<dyn herma_store::Store>) =
        (Arc::new(first), Arc::new(second));
    herma_store::conversation_conformance::two_stores_on_one_database_share_the_limits(
        first.clone(),
        second.clone(),
    )
    .await;
    herma_store::conversation_conformance::concurrent_probes_admit_exactly_one(first, second).await;
}

mod governed {
    use std::sync::Arc;

    use herma_store::governed::GovernedPorts;
    use herma_store_postgres::testing;

    async fn fresh_ports() -> GovernedPorts {
        GovernedPorts::uniform(Arc::new(testing::fresh_store().await))
    }

    herma_store::governed_conformance_tests!(fresh_ports);
}
