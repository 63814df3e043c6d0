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
                "retention",
                "receipts_by_rowid"
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

/// A receipt the size a shim's receipt has (about 1.3 KB of JSON), number `n` of `scope`.
fn sizable_receipt(
    scope: &herma_core::CallerScope,
    n: usize,
) -> herma_core::model::InjectionReceipt {
    use herma_core::model::{MatchedRule, ReceiptAction, ReceiptBody, Tier, Timings};
    ReceiptBody {
        caller_scope: scope.clone(),
        protocol: "messages".into(),
        conversation_id: format!("conversation-{n}"),
        model: "claude-sonnet-4-5".into(),
        action: ReceiptAction::Shimmed,
        matched: (0..8)
            .map(|i| MatchedRule {
                provision_id: format!("deploy.checklist.rule-{i:02}"),
                version: 3,
                builtin: false,
                tier: Tier::Keyword,
                trigger: format!("keyword:deploy the billing service {i}"),
                applied: i == 0,
                score: None,
                confidence: None,
            })
            .collect(),
        shimmed_context_refs: vec![],
        unresolved_context_refs: vec![],
        upstream_status: Some(200),
        usage: None,
        timings: Timings::default(),
        stream_end: None,
        error: None,
        created_at: herma_core::Timestamp::from_millis(1_700_000_000_000 + n as i64),
    }
    .seal(format!("rcpt_{n:032x}"))
}

/// A migrated store on a file of its own (the directory lives as long as the guard), its path
/// and a fresh caller scope.
async fn migrated_file() -> (
    tempfile::TempDir,
    String,
    herma_store_sqlite::SqliteStore,
    herma_core::CallerScope,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herma.db").to_str().unwrap().to_owned();
    let store = herma_store_sqlite::open_migrated(&path).await.unwrap();
    (dir, path, store, herma_store::conformance::fresh_scope())
}

/// Receipts are kept by rowid (migration 10): a receipt of 1.3 KB sits in its table's pages
/// instead of taking a 4 KB overflow page of its own, as it did clustered by its key.
#[tokio::test]
async fn a_receipt_does_not_take_a_page_of_its_own() {
    use herma_store::ReceiptStore;
    let (_dir, path, store, scope) = migrated_file().await;
    let path = path.as_str();
    let receipts: Vec<_> = (0..400).map(|n| sizable_receipt(&scope, n)).collect();
    let json = serde_json::to_string(&receipts[0]).unwrap().len();
    assert!((1_200..2_000).contains(&json), "{json} bytes of JSON");
    let before = herma_store_sqlite::testing::page_count(path).await.unwrap();
    for batch in receipts.chunks(100) {
        store.insert_receipts(batch).await.unwrap();
    }
    let pages = herma_store_sqlite::testing::page_count(path).await.unwrap() - before;
    // 400 × 1.3 KB is about 130 pages of rows plus the key and age indexes; a page each
    // would be 400 and more.
    assert!(pages < 300, "400 receipts took {pages} pages of 4 KB");
    let back = store
        .get_receipt(&scope, &receipts[399].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, receipts[399]);
    assert!(back.verifies());
}

/// Receipts written under migration 9 (clustered by their key) are all there after migration
/// 10 rebuilt the table, still unique by their key and found by age.
#[tokio::test]
async fn receipts_written_before_migration_10_survive_it() {
    use herma_store::ReceiptStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let path = path.to_str().unwrap();
    herma_store_sqlite::open(path).await.unwrap();
    let files =
        herma_store_sql::wrangler_migrations::<herma_store_sqlite::SqliteBackend>().unwrap();
    for (name, contents) in &files {
        if name.as_str() < "0010" {
            herma_store_sqlite::testing::execute(path, contents)
                .await
                .unwrap();
        }
    }
    let scope = herma_store::conformance::fresh_scope();
    let receipts: Vec<_> = (0..50).map(|n| sizable_receipt(&scope, n)).collect();
    {
        let old = herma_store_sqlite::open(path).await.unwrap();
        old.insert_receipts(&receipts).await.unwrap();
        let (schema, _) = herma_store_sqlite::testing::schema(path).await.unwrap();
        assert!(
            schema
                .iter()
                .any(|(_, name, sql)| name == "injection_receipts" && sql.contains("WITHOUT ROWID")),
            "migration 9's table is clustered by its key"
        );
    }
    let store = herma_store_sqlite::open(path).await.unwrap();
    let applied = store.migrate().await.unwrap();
    assert_eq!(
        applied.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["receipts_by_rowid"]
    );
    let (schema, _) = herma_store_sqlite::testing::schema(path).await.unwrap();
    let table = schema
        .iter()
        .find(|(kind, name, _)| kind == "table" && name == "injection_receipts")
        .unwrap();
    assert!(!table.2.contains("WITHOUT ROWID"), "{}", table.2);
    assert!(
        schema
            .iter()
            .any(|(kind, name, _)| kind == "index" && name == "injection_receipts_by_age")
    );
    for receipt in &receipts {
        let back = store.get_receipt(&scope, &receipt.id).await.unwrap();
        assert_eq!(back.as_ref(), Some(receipt));
    }
    // The key is still unique: the same receipt again is ignored, not added twice.
    store.insert_receipts(&receipts[..1]).await.unwrap();
    let pruned = store
        .prune_receipts(herma_core::Timestamp::from_millis(1_700_000_000_010), 1_000)
        .await
        .unwrap();
    assert_eq!(pruned, 10, "the ten oldest, by age");
    assert!(
        store
            .get_receipt(&scope, &receipts[9].id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .get_receipt(&scope, &receipts[10].id)
            .await
            .unwrap()
            .is_some()
    );
}

/// The WAL is copied back into the database file by the store's own task, about once a second
/// (`CHECKPOINT_EVERY`), however little was written: before, a commit checkpointed only when the
/// log passed 1,000 pages, so a lightly used database kept its rows in the log for hours.
#[tokio::test]
async fn a_write_reaches_the_database_file_without_the_log_filling_up() {
    use herma_store::ReceiptStore;
    let (_dir, path, store, scope) = migrated_file().await;
    let receipt = sizable_receipt(&scope, 7);
    store
        .insert_receipts(std::slice::from_ref(&receipt))
        .await
        .unwrap();
    let in_file = || {
        let bytes = std::fs::read(&path).unwrap();
        bytes
            .windows(receipt.id.len())
            .any(|window| window == receipt.id.as_bytes())
    };
    // Thirty ticks' worth of patience on a busy machine; the checkpoint is due after one.
    for _ in 0..300 {
        if in_file() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(in_file(), "the receipt is still only in the log");
    // And the store still reads it.
    assert_eq!(
        store.get_receipt(&scope, &receipt.id).await.unwrap(),
        Some(receipt)
    );
}
