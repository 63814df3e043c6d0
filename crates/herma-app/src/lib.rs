//! Herma's services: orchestration over the core and the ports (storage, providers, models),
//! shared by the HTTP server and the CLI. Which adapters stand behind the ports is chosen by the
//! binary (`herma_cli::wiring`), never here.
//!
//! Layout: [`App`] bundles the store, the clock, the random source, the settings, the
//! [`gate::Gate`] (authentication with its key cache) and the background workers; behaviour
//! lives in `impl App` blocks per concern — [`keys`], [`records`] (provisions and context
//! entries, with the built-in lock), [`starters`], [`proxy`] (the pipeline; [`dry_run`] shares
//! its plan), [`insights`], [`discovery`] (preview, connect document, llms.txt, agent card),
//! [`mcp`], [`conversations`] (operator-funded typed turns and their sweeper), [`handshake`] and [`tessera`] (remote pulls and the sync) — plus the parts they
//! use: [`rule_cache`] (each caller's compiled rules), [`tiers`] (tiers 2 and 3 over the model
//! ports), [`receipts`] (the batched writer), [`memory`] (the entity and outcome worker),
//! [`metrics`], [`rate_limit`], [`calibrate`] (`rules eval`), [`transfer`] (import/export files)
//! and [`clock`] (time and randomness).
//!
//! Architecture invariant: nothing here knows HTTP: no status codes, no axum types. Errors are
//! core [`herma_core::Problem`]s; the transports choose statuses.

pub mod calibrate;
pub mod clock;
pub mod conversation_budget;
pub mod conversations;
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
pub mod retention;
pub mod rule_cache;
pub mod starters;
pub mod tessera;
pub mod tiers;
pub mod transfer;

use std::sync::Arc;

use herma_core::settings::Settings;
use herma_providers::Upstream;
use herma_store::conversations::ConversationStore;
use herma_store::{Runtime, Store};

use clock::Random;
use gate::Gate;
use herma_core::time::Clock;
use memory::MemoryWorker;
use rate_limit::RateLimiter;
use receipts::ReceiptWriter;
use rule_cache::RuleCache;

pub struct App {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub random: Arc<dyn Random>,
    /// Where the receipt writer and the memory worker run, and how they wait.
    pub runtime: Arc<dyn Runtime>,
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
    /// The governed ports operator-funded turns run their attempts through (none until
    /// [`App::with_governed`]; turns are then unavailable).
    pub governed: Option<herma_store::governed::GovernedPorts>,
    /// Where conversations, their turns and attempts, the ledger and provider health are kept:
    /// the store natively; at the edge the Durable Object that serves turns.
    pub conversations: Arc<dyn ConversationStore>,
    /// How long one conversation attempt may take at most (never past the turn's boundary):
    /// [`conversations::ATTEMPT_TIMEOUT`] natively, 25 seconds at the edge.
    pub attempt_timeout: std::time::Duration,
}

impl App {
    pub fn with_parts(
        store: Arc<dyn Store>,
        settings: Settings,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
        upstream: Arc<dyn Upstream>,
        runtime: Arc<dyn Runtime>,
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
        let receipts = Arc::new(ReceiptWriter::spawn(
            store.clone(),
            capacity,
            runtime.clone(),
        ));
        let memory = settings.memory_enabled.then(|| {
            Arc::new(MemoryWorker::spawn(
                store.clone(),
                usize::try_from(settings.memory_queue_capacity).unwrap_or(10_000),
                settings.memory_max_entities,
                runtime.clone(),
            ))
        });
        let preview_limit = RateLimiter::new(settings.preview_rate_per_minute, clock.clone());
        Self {
            conversations: store.clone(),
            attempt_timeout: conversations::ATTEMPT_TIMEOUT,
            store,
            clock,
            random,
            runtime,
            gate,
            rules,
            receipts,
            memory,
            upstream,
            preview_limit,
            metrics: metrics::Metrics::default(),
            settings,
            tiers: tiers::Tiers::default(),
            governed: None,
        }
    }

    /// Runs conversation attempts through `ports` (the same database as the store).
    pub fn with_governed(mut self, ports: herma_store::governed::GovernedPorts) -> Self {
        self.governed = Some(ports);
        self
    }

    /// Keeps conversations in `store` and runs their attempts through `ports`, with each
    /// attempt bounded by `attempt_timeout`: at the edge, the Durable Object that serves turns.
    pub fn with_conversations(
        mut self,
        store: Arc<dyn ConversationStore>,
        ports: herma_store::governed::GovernedPorts,
        attempt_timeout: std::time::Duration,
    ) -> Self {
        self.conversations = store;
        self.governed = Some(ports);
        self.attempt_timeout = attempt_timeout;
        self
    }

    /// Journals every receipt in `journal` before the response it describes ends (a new writer
    /// replaces the unjournaled one, which had written nothing yet).
    pub fn with_receipt_journal(mut self, journal: Arc<herma_store::journal::FileJournal>) -> Self {
        let capacity = usize::try_from(self.settings.receipt_queue_capacity).unwrap_or(10_000);
        self.receipts = Arc::new(ReceiptWriter::spawn_journaled(
            self.store.clone(),
            capacity,
            Some(journal),
            self.runtime.clone(),
        ));
        self
    }

    /// Uses `tiers` for semantic and micromodel triggers (their calls bounded on the app's
    /// runtime).
    pub fn with_tiers(mut self, mut tiers: tiers::Tiers) -> Self {
        tiers.runtime.get_or_insert_with(|| self.runtime.clone());
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
