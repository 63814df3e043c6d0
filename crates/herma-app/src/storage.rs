//! Opening the configured store.

use std::sync::Arc;

use herma_core::settings::DatabaseUrl;
use herma_store::{Store, StoreError};
use herma_store_postgres::PgStore;
use herma_store_sqlite::SqliteStore;

/// Connects to the database named by `url` (not yet migrated).
pub async fn connect(url: &DatabaseUrl) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match url {
        DatabaseUrl::Sqlite(path) => Arc::new(SqliteStore::open(path).await?),
        DatabaseUrl::Postgres(url) => Arc::new(PgStore::connect(url.expose()).await?),
    })
}
