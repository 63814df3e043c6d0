//! What the app's benchmarks share: a one-worker runtime and a migrated SQLite store in a
//! temporary directory.

use std::sync::Arc;

use herma_store::Store;

/// A one-worker runtime, a migrated SQLite store in `dir`, and the directory (kept alive).
pub fn sqlite_store() -> (tokio::runtime::Runtime, Arc<dyn Store>, tempfile::TempDir) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = rt.block_on(async {
        Arc::new(
            herma_store_sqlite::open_migrated(dir.path().join("bench.db").to_str().unwrap())
                .await
                .unwrap(),
        )
    });
    (rt, store, dir)
}
