//! Opening the configured store.

use std::sync::Arc;

use herma_core::settings::DatabaseUrl;
use herma_store::{Store, StoreError};

/// Connects to the database named by `url` (not yet migrated).
pub async fn connect(url: &DatabaseUrl) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match url {
        DatabaseUrl::Sqlite(path) => Arc::new(herma_store_sqlite::open(path).await?),
        DatabaseUrl::Postgres(url) => Arc::new(herma_store_postgres::connect(url.expose()).await?),
    })
}
