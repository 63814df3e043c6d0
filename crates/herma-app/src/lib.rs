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

pub mod clock;
pub mod error;
pub mod gate;
pub mod keys;
pub mod records;
pub mod starters;
pub mod storage;
pub mod transfer;

use std::sync::Arc;

use herma_core::settings::Settings;
use herma_store::Store;

use clock::{Clock, OsRandom, Random, SystemClock};
use gate::Gate;

pub struct App {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub random: Arc<dyn Random>,
    pub gate: Gate,
    pub settings: Settings,
}

impl App {
    /// An app on the wall clock and the OS random source.
    pub fn new(store: Arc<dyn Store>, settings: Settings) -> Self {
        Self::with_clock(store, settings, Arc::new(SystemClock), Arc::new(OsRandom))
    }

    pub fn with_clock(
        store: Arc<dyn Store>,
        settings: Settings,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
    ) -> Self {
        let gate = Gate::new(
            store.clone(),
            clock.clone(),
            settings.key_cache_ttl_ms,
            settings.admin_token.clone(),
            settings.edge_secret.clone(),
        );
        Self {
            store,
            clock,
            random,
            gate,
            settings,
        }
    }
}
