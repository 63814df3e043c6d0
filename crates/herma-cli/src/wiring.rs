//! Choosing the adapters behind the ports, from the settings. The one place that names
//! concrete backends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use herma_app::App;
use herma_app::clock::OsRandom;
use herma_app::tiers::Tiers;
use herma_core::settings::{DatabaseUrl, EmbedPrecision, EmbedSource, Settings, TierSettings};
use herma_core::{Problem, ProblemCode};
use herma_embed::{LocalEmbedder, Options, Precision};
use herma_providers::{HttpUpstream, Upstream};
use herma_store::governed::GovernedPorts;
use herma_store::{Store, StoreError, SystemClock, TokioRuntime};

/// Connects to the database named by `url` (not yet migrated).
pub async fn connect_store(url: &DatabaseUrl) -> Result<Arc<dyn Store>, StoreError> {
    Ok(connect(url, 2).await?.store)
}

/// One database behind both the store and the governed ports.
pub struct Connected {
    pub store: Arc<dyn Store>,
    pub governed: GovernedPorts,
}

/// Connects to the database named by `url` (not yet migrated), for records and governed calls;
/// a PostgreSQL pool keeps at most `pool_size` connections.
pub async fn connect(url: &DatabaseUrl, pool_size: u64) -> Result<Connected, StoreError> {
    Ok(match url {
        DatabaseUrl::Sqlite(path) => {
            let store = Arc::new(herma_store_sqlite::open(path).await?);
            Connected {
                store: store.clone(),
                governed: GovernedPorts::uniform(store),
            }
        }
        DatabaseUrl::Postgres(url) => {
            let store = Arc::new(
                herma_store_postgres::connect_pooled(
                    url.expose(),
                    u32::try_from(pool_size).unwrap_or(u32::MAX),
                )
                .await?,
            );
            Connected {
                store: store.clone(),
                governed: GovernedPorts::uniform(store),
            }
        }
    })
}

/// The HTTP client the settings describe, for proxied requests.
pub fn http_upstream(settings: &Settings) -> Result<Arc<dyn Upstream>, Problem> {
    HttpUpstream::new(
        Duration::from_millis(settings.upstream_connect_timeout_ms),
        Duration::from_millis(settings.upstream_headers_timeout_ms),
        Duration::from_millis(settings.upstream_idle_timeout_ms),
    )
    .map(|u| Arc::new(u) as Arc<dyn Upstream>)
    .map_err(|e| {
        Problem::new(
            ProblemCode::Internal,
            format!("the HTTP client could not start: {e}"),
        )
    })
}

/// An app over `store` on the wall clock, the OS random source, the real HTTP client and tokio.
/// Must run inside a Tokio runtime (it starts the receipt writer).
pub fn app(store: Arc<dyn Store>, settings: Settings) -> Result<App, Problem> {
    let upstream = http_upstream(&settings)?;
    Ok(App::with_parts(
        store,
        settings,
        Arc::new(SystemClock),
        Arc::new(OsRandom),
        upstream,
        Arc::new(TokioRuntime),
    ))
}

/// Where `herma serve` journals receipts (`HERMA_RECEIPT_JOURNAL_DIR`); `None` when it is
/// `off`.
pub fn receipt_journal_dir(settings: &Settings) -> Option<PathBuf> {
    match settings.receipt_journal_dir.as_deref().map(str::trim) {
        Some("off") => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(match &settings.database {
            DatabaseUrl::Sqlite(path) => PathBuf::from(format!("{path}.receipts")),
            DatabaseUrl::Postgres(_) => PathBuf::from("herma-receipts"),
        }),
    }
}

/// The models of tiers 2 and 3 as opened.
pub struct OpenedTiers {
    pub tiers: Tiers,
    /// The in-process model, when that is the embedder (`herma models check` reports on it).
    pub local: Option<Arc<LocalEmbedder>>,
}

/// Loads the in-process model or connects to the remote one, and prepares the classifier. A
/// model that cannot be used is left out and named in `problems` (and the log); Herma still
/// starts, and rules needing it never fire.
pub async fn open_tiers(settings: &TierSettings) -> OpenedTiers {
    // The remote models' client: each wait (connect, headers, each chunk) bounded by at least
    // 5 s; on the proxy path the app also bounds every classifier call by
    // `HERMA_MICROMODEL_TIMEOUT_MS` and every request's embedding by at least 5 s.
    let wait = Duration::from_millis(settings.micromodel_timeout_ms.max(5_000));
    let mut tiers = match HttpUpstream::new(wait, wait, wait) {
        Ok(http) => herma_app::tiers::open_remote(settings, Arc::new(http), None).await,
        Err(e) => {
            let mut tiers = Tiers::default();
            tiers.problem(format!("the remote models' HTTP client did not start: {e}"));
            tiers
        }
    };
    let mut local = None;
    if let Some(EmbedSource::Local { dir }) = &settings.embed {
        let cache = usize::try_from(settings.embed_cache_entries).unwrap_or(10_000);
        let options = Options {
            window_tokens: usize::try_from(settings.embed_window_tokens).unwrap_or(32),
            threads: usize::try_from(settings.embed_threads).unwrap_or(1),
            cache_entries: cache,
            precision: match settings.embed_precision {
                EmbedPrecision::Auto => Precision::Auto,
                EmbedPrecision::F32 => Precision::F32,
                EmbedPrecision::Int8 => Precision::Int8,
            },
            ..Options::default()
        };
        let dir = PathBuf::from(dir);
        let loaded = tokio::task::spawn_blocking(move || LocalEmbedder::load(&dir, &options)).await;
        match loaded {
            Ok(Ok(model)) => {
                let report = model.report();
                tracing::info!(
                    model = %report.identity.id,
                    dimensions = report.identity.dimensions,
                    window_tokens = report.window_tokens,
                    load_ms = report.load_time.as_millis() as u64,
                    "embedding model loaded"
                );
                let model = Arc::new(model);
                tiers.embedder = Some(model.clone());
                local = Some(model);
            }
            Ok(Err(e)) => tiers.problem(format!("the embedding model did not load: {e}")),
            Err(e) => tiers.problem(format!("the embedding model did not load: {e}")),
        }
    }
    OpenedTiers { tiers, local }
}
