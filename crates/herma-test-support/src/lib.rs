//! Test support: `spawn_app` runs a real Herma server on 127.0.0.1:0 over a chosen store, with a
//! manual clock, and hands back an HTTP client pointed at it.

// Test support: failing loudly is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use herma_app::App;
use herma_app::clock::OsRandom;
use herma_app::keys::NewKey;
use herma_core::key::Scopes;
use herma_core::settings::Settings;
use herma_core::time::ManualClock;
use herma_store::governed::GovernedPorts;
use herma_store::{MemoryStore, Store};
use tokio::sync::oneshot;

pub use herma_mocks::{mock_models, mock_providers, mock_tessera, mock_upstream};

/// The embedding model directory the test command provides (`HERMA_EMBED_MODEL_DIR`).
#[allow(clippy::disallowed_methods)] // the test command's environment, not a Herma setting
pub fn embed_model_dir() -> String {
    std::env::var("HERMA_EMBED_MODEL_DIR").expect(
        "HERMA_EMBED_MODEL_DIR must name the all-MiniLM-L6-v2 directory: run the tests with scripts/test",
    )
}

pub use herma_store_postgres::testing::{fresh_schema_name, test_database_url};

/// Which store a test app runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Sqlite,
    Postgres,
}

/// A fresh, migrated store of the given kind (SQLite in a temporary file, PostgreSQL in a fresh
/// schema of the test database).
pub async fn fresh_store(backend: Backend) -> Arc<dyn Store> {
    match backend {
        Backend::Memory => Arc::new(MemoryStore::new()),
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("herma.db");
            let store = herma_store_sqlite::open_migrated(path.to_str().expect("utf-8"))
                .await
                .expect("sqlite");
            std::mem::forget(dir);
            Arc::new(store)
        }
        Backend::Postgres => Arc::new(herma_store_postgres::testing::fresh_store().await),
    }
}

/// Creates `schema` in the database at `url` (for pointing a binary at it through the URL).
pub async fn postgres_schema(url: &str, schema: &str) -> Result<(), herma_store::StoreError> {
    herma_store_postgres::connect_in_schema(url, schema)
        .await
        .map(|_| ())
}

/// A running server.
pub struct TestApp {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    pub clock: Arc<ManualClock>,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// The settings a test app runs with: the defaults plus `overrides`.
pub fn settings(overrides: &[(&str, &str)]) -> Settings {
    let map: BTreeMap<String, String> = overrides
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Settings::from_map(&map).expect("valid test settings")
}

/// A fresh store with the governed ports of the same database (memory: an in-memory governed
/// store beside it).
pub async fn fresh_stores(backend: Backend) -> Stores {
    match backend {
        Backend::Memory => Stores {
            store: Arc::new(MemoryStore::new()),
            governed: GovernedPorts::uniform(Arc::new(herma_store::MemoryGovernedStore::new())),
        },
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("herma.db");
            let store = Arc::new(
                herma_store_sqlite::open_migrated(path.to_str().expect("utf-8"))
                    .await
                    .expect("sqlite"),
            );
            std::mem::forget(dir);
            Stores {
                store: store.clone(),
                governed: GovernedPorts::uniform(store),
            }
        }
        Backend::Postgres => {
            let store = Arc::new(herma_store_postgres::testing::fresh_store().await);
            Stores {
                store: store.clone(),
                governed: GovernedPorts::uniform(store),
            }
        }
    }
}

/// A store and the governed ports over the same database.
#[derive(Clone)]
pub struct Stores {
    pub store: Arc<dyn Store>,
    pub governed: GovernedPorts,
}

/// Starts Herma on an ephemeral port with the starters loaded.
pub async fn spawn_app(backend: Backend, overrides: &[(&str, &str)]) -> TestApp {
    spawn_app_with(fresh_stores(backend).await, overrides).await
}

/// Starts Herma over an existing store, without governed ports (several apps can share one,
/// like several instances).
pub async fn spawn_app_on(store: Arc<dyn Store>, overrides: &[(&str, &str)]) -> TestApp {
    start(store, None, overrides).await
}

/// Starts Herma over existing stores (several apps can share them, like several instances).
pub async fn spawn_app_with(stores: Stores, overrides: &[(&str, &str)]) -> TestApp {
    start(stores.store, Some(stores.governed), overrides).await
}

async fn start(
    store: Arc<dyn Store>,
    governed: Option<GovernedPorts>,
    overrides: &[(&str, &str)],
) -> TestApp {
    let clock = ManualClock::at(1_796_000_000_000);
    let settings = settings(overrides);
    let upstream = herma_cli::wiring::http_upstream(&settings).expect("http client");
    let tiers = herma_cli::wiring::open_tiers(&settings.tiers).await.tiers;
    let mut app = App::with_parts(
        store,
        settings,
        clock.clone(),
        Arc::new(OsRandom),
        upstream,
        Arc::new(herma_store::TokioRuntime),
    )
    .with_tiers(tiers);
    if let Some(governed) = governed {
        app = app.with_governed(governed);
    }
    let app = Arc::new(app);

    app.load_starters().await.expect("starters");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel();
    let server = tokio::spawn(herma_server::serve(listener, app.clone(), async {
        let _ = rx.await;
    }));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    TestApp {
        addr,
        app,
        clock,
        client,
        shutdown: Some(tx),
        server: Some(server),
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Issues a key with `scopes` (e.g. `"route,configure"`) for `harness`.
    pub async fn key(&self, scopes: &str, harness: Option<&str>) -> String {
        let scopes = Scopes::parse_list(scopes, "scopes").expect("scopes");
        self.app
            .issue_key(NewKey {
                scopes,
                harness: harness.map(str::to_owned),
                label: String::new(),
                cohorts: Vec::new(),
            })
            .await
            .expect("issue key")
            .key
    }

    /// The key id part of an `hmk_` key.
    pub fn key_id(key: &str) -> &str {
        &key[4..20]
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Sample records.
pub mod fixtures {
    use serde_json::{Value, json};

    pub fn provision(id: &str) -> Value {
        json!({
            "id": id,
            "description": "deploy help",
            "action": "shim_context",
            "triggers": {"keywords": ["deploy"]},
            "context_refs": ["deploy.checklist"]
        })
    }

    pub fn context_entry(id: &str) -> Value {
        json!({"id": id, "kind": "verb", "schema_or_body": "Run the migrations before the canary."})
    }
}

/// Stores over a SQLite file at `path` (created and migrated), for tests that inject real
/// database failures into it with [`sqlite_execute`].
pub async fn sqlite_stores_at(path: &str) -> Stores {
    let store = Arc::new(
        herma_store_sqlite::open_migrated(path)
            .await
            .expect("sqlite"),
    );
    Stores {
        store: store.clone(),
        governed: GovernedPorts::uniform(store),
    }
}

/// Runs `sql` on the SQLite file at `path` through its own connection (a trigger that aborts a
/// write, a dropped table).
pub async fn sqlite_execute(path: &str, sql: &str) {
    herma_store_sqlite::testing::execute(path, sql)
        .await
        .expect("the injected SQL runs");
}
