//! The store conformance suite against a real SQLite file (WAL).

// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use herma_store::Store;

async fn fresh_store() -> Arc<dyn Store> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("herma.db");
    let store = herma_store_sqlite::open_migrated(path.to_str().expect("utf-8 path"))
        .await
        .expect("open");
    // Keep the directory for the life of the test process; the OS cleans /tmp.
    std::mem::forget(dir);
    Arc::new(store)
}

herma_store::store_conformance_tests!(fresh_store);

#[tokio::test]
async fn reopening_a_database_keeps_its_rows_and_migrations() {
    use herma_store::DocumentStoreExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.db");
    let path = path.to_str().unwrap();
    let scope = herma_store::conformance::fresh_scope();
    {
        let store = herma_store_sqlite::open(path).await.unwrap();
        let applied = store.migrate().await.unwrap();
        assert_eq!(
            applied.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            [
                "initial",
                "revisions_and_claims",
                "memory",
                "rule_vectors",
                "key_cohorts",
                "governed",
                "conversations",
                "provider_health",
                "retention"
            ]
        );
        let spec = herma_store::conformance::provision("p", "k");
        store
            .provisions()
            .create(&scope, &spec, herma_core::Timestamp::from_millis(1))
            .await
            .unwrap();
    }
    let store = herma_store_sqlite::open_migrated(path).await.unwrap();
    assert!(store.migrate().await.unwrap().is_empty());
    assert_eq!(
        store
            .provisions()
            .get(&scope, "p")
            .await
            .unwrap()
            .unwrap()
            .version,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_share_the_conversation_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let path = path.to_str().unwrap();
    let first = herma_store_sqlite::open_migrated(path).await.unwrap();
    let second = herma_store_sqlite::open_migrated(path).await.unwrap();
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

    async fn fresh_ports() -> GovernedPorts {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("governed.db");
        let store = herma_store_sqlite::open_migrated(path.to_str().expect("utf-8 path"))
            .await
            .expect("open");
        std::mem::forget(dir);
        GovernedPorts::uniform(Arc::new(store))
    }

    herma_store::governed_conformance_tests!(fresh_ports);
}
