//! Herma's services: orchestration over the core and the storage ports, shared by the HTTP
//! server and the CLI.
//!
//! Layout: [`App`] bundles the store, the clock, the random source, the settings and the
//! [`gate::Gate`]; behaviour lives in `impl App` blocks per concern — [`keys`], [`records`]
//! (provisions and context entries), [`starters`] — plus [`transfer`] (import/export files) and
//! [`storage`] (opening the configured database).
//!
//! Architecture invariant: nothing here knows HTTP: no status codes, no axum types. Errors are
//! core [`herma_core::Problem`]s; the transports choose statuses.

pub mod calibrate;
pub mod clock;
pub mod discovery;
pub mod dry_run;
pub mod error;
pub mod gate;
pub mod handshake;
pub mod insights;
pub mod keys;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod proxy;
pub mod rate_limit;
pub mod receipts;
pub mod records;
pub mod rule_cache;
pub mod starters;
pub mod storage;
pub mod tessera;
pub mod tiers;
pub mod transfer;

use std::sync::Arc;

use std::time::Duration;

use herma_core::settings::Settings;
use herma_core::{Problem, ProblemCode};
use herma_providers::{HttpUpstream, Upstream};
use herma_store::Store;

use clock::{Clock, OsRandom, Random, SystemClock};
use gate::Gate;
use memory::MemoryWorker;
use rate_limit::RateLimiter;
use receipts::ReceiptWriter;
use rule_cache::RuleCache;

pub struct App {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub random: Arc<dyn Random>,
    pub gate: Gate,
    pub rules: RuleCache,
    pub receipts: Arc<ReceiptWriter>,
    /// `None` when `HERMA_MEMORY_ENABLED=false`.
    pub memory: Option<Arc<MemoryWorker>>,
    pub upstream: Arc<dyn Upstream>,
    /// Per-address limit of the public preview.
    pub preview_limit: RateLimiter,
    /// What `GET /metrics` reports.
    pub metrics: metrics::Metrics,
    pub settings: Settings,
    /// The models of tiers 2 and 3 (none until [`App::with_tiers`]).
    pub tiers: tiers::Tiers,
}

/// The HTTP client the settings describe.
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

impl App {
    /// An app on the wall clock, the OS random source and the real HTTP client. Must run
    /// inside a Tokio runtime (it starts the receipt writer).
    pub fn new(store: Arc<dyn Store>, settings: Settings) -> Result<Self, Problem> {
        let upstream = http_upstream(&settings)?;
        Ok(Self::with_parts(
            store,
            settings,
            Arc::new(SystemClock),
            Arc::new(OsRandom),
            upstream,
        ))
    }

    pub fn with_parts(
        store: Arc<dyn Store>,
        settings: Settings,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
        upstream: Arc<dyn Upstream>,
    ) -> Self {
        let gate = Gate::new(
            store.clone(),
            clock.clone(),
            settings.key_cache_ttl_ms,
            settings.admin_token.clone(),
            settings.edge_secret.clone(),
        );
        let rules = RuleCache::new(store.clone(), clock.clone(), settings.rules_cache_ttl_ms);
        let capacity = usize::try_from(settings.receipt_queue_capacity).unwrap_or(10_000);
        let receipts = Arc::new(ReceiptWriter::spawn(store.clone(), capacity));
        let memory = settings.memory_enabled.then(|| {
            Arc::new(MemoryWorker::spawn(
                store.clone(),
                usize::try_from(settings.memory_queue_capacity).unwrap_or(10_000),
                settings.memory_max_entities,
            ))
        });
        let preview_limit = RateLimiter::new(settings.preview_rate_per_minute, clock.clone());
        Self {
            store,
            clock,
            random,
            gate,
            rules,
            receipts,
            memory,
            upstream,
            preview_limit,
            metrics: metrics::Metrics::default(),
            settings,
            tiers: tiers::Tiers::default(),
        }
    }

    /// Uses `tiers` for semantic and micromodel triggers (see [`tiers::Tiers::open`]).
    pub fn with_tiers(mut self, tiers: tiers::Tiers) -> Self {
        self.rules = RuleCache::new(
            self.store.clone(),
            self.clock.clone(),
            self.settings.rules_cache_ttl_ms,
        )
        .with_embedder(tiers.embedder.clone());
        self.tiers = tiers;
        self
    }

    /// Finishes background work: every queued receipt is written.
    pub async fn shutdown(&self) {
        self.receipts.shutdown().await;
        if let Some(memory) = &self.memory {
            memory.shutdown().await;
        }
    }
}
