//! The conformance suite against the in-memory store.

// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use herma_store::{MemoryStore, Store};

async fn fresh_store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

herma_store::store_conformance_tests!(fresh_store);

mod governed {
    use std::sync::Arc;

    use herma_store::MemoryGovernedStore;
    use herma_store::governed::GovernedPorts;

    async fn fresh_ports() -> GovernedPorts {
        GovernedPorts::uniform(Arc::new(MemoryGovernedStore::new()))
    }

    herma_store::governed_conformance_tests!(fresh_ports);
}
