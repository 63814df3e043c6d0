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

/// `crates/herma-worker/migrations`, where `wrangler d1 migrations apply` reads the Worker's.
fn wrangler_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../herma-worker/migrations")
}

/// The Worker's D1 migrations are this store's, file for file (`HERMA_BLESS=1` writes them).
#[test]
fn wrangler_migrations_are_the_sqlite_stores_own() {
    let files = herma_store_sql::wrangler_migrations::<herma_store_sqlite::SqliteBackend>()
        .expect("migrations");
    let dir = wrangler_dir();
    #[allow(clippy::disallowed_methods)] // a developer's switch, read once
    if std::env::var("HERMA_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, contents) in &files {
            std::fs::write(dir.join(name), contents).unwrap();
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    on_disk.sort();
    let names: Vec<&String> = files.iter().map(|(n, _)| n).collect();
    assert_eq!(
        on_disk.iter().collect::<Vec<_>>(),
        names,
        "the files in {}",
        dir.display()
    );
    for (name, contents) in &files {
        let stored = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            stored == *contents,
            "{name} differs from the SQLite store's migrations: run HERMA_BLESS=1 cargo test -p herma-store-sqlite wrangler_migrations"
        );
    }
}

/// Applied one file after another, as wrangler does, they build the schema `migrate` builds.
#[tokio::test]
async fn wrangler_migrations_build_the_schema_migrate_builds() {
    let dir = tempfile::tempdir().unwrap();
    let migrated = dir.path().join("migrated.db");
    let migrated = migrated.to_str().unwrap();
    herma_store_sqlite::open_migrated(migrated).await.unwrap();
    let by_files = dir.path().join("files.db");
    let by_files = by_files.to_str().unwrap();
    herma_store_sqlite::open(by_files).await.unwrap();
    for (_, contents) in
        herma_store_sql::wrangler_migrations::<herma_store_sqlite::SqliteBackend>().unwrap()
    {
        herma_store_sqlite::testing::execute(by_files, &contents)
            .await
            .unwrap();
    }
    let (schema, ledger) = herma_store_sqlite::testing::schema(migrated).await.unwrap();
    let (files_schema, files_ledger) = herma_store_sqlite::testing::schema(by_files).await.unwrap();
    assert!(schema.len() > 10, "{schema:?}");
    assert_eq!(files_schema, schema);
    assert_eq!(files_ledger, ledger);
    // And the store opens it as current: nothing left to apply.
    let store = herma_store_sqlite::open(by_files).await.unwrap();
    assert_eq!(store.migrate().await.unwrap(), vec![]);
}
