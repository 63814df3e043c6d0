//! Retention: receipts and rule outcomes past their settings' age are deleted in batches of
//! [`BATCH`], each its own short statement, so a large backlog never holds a lock for long or
//! slows the requests beside it; then freed pages go back to the file system where the engine
//! needs asking (SQLite). `herma serve` prunes at start-up and every hour; `herma prune` once.
//!
//! Nothing else is pruned here: conversations expire on their own after 24 hours and keep
//! tombstones; provider health, the ledger (reservations, uncertain calls) and the governed
//! audit trail are the record of money committed and stay.

use std::sync::Arc;
use std::time::Duration;

use herma_core::Timestamp;
use herma_core::problem::{Problem, ProblemCode};
use serde::Serialize;

use crate::App;

/// Rows deleted per statement.
pub const BATCH: u32 = 500;
const DAY_MS: i64 = 86_400_000;

/// What one pruning deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    pub receipts: u64,
    pub outcomes: u64,
}

fn internal(err: impl std::fmt::Display) -> Problem {
    tracing::error!(error = %err, "pruning failed");
    Problem::new(
        ProblemCode::Unavailable,
        "the store is unavailable; pruning stopped",
    )
}

/// The cutoff `days` before `now`, or `None` when kept forever.
fn cutoff(now: Timestamp, days: u64) -> Option<Timestamp> {
    let days = i64::try_from(days).ok().filter(|d| *d > 0)?;
    Some(now.plus_millis(-days.saturating_mul(DAY_MS)))
}

impl App {
    /// Deletes receipts and outcomes past their retention, batch by batch.
    pub async fn prune(&self) -> Result<PruneReport, Problem> {
        let now = self.clock.now();
        let mut report = PruneReport::default();
        if let Some(before) = cutoff(now, self.settings.receipt_retention_days) {
            loop {
                let n = self
                    .store
                    .prune_receipts(before, BATCH)
                    .await
                    .map_err(internal)?;
                report.receipts += n;
                if n < u64::from(BATCH) {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        if let Some(before) = cutoff(now, self.settings.outcome_retention_days) {
            loop {
                let n = self
                    .store
                    .prune_outcomes(before, BATCH)
                    .await
                    .map_err(internal)?;
                report.outcomes += n;
                if n < u64::from(BATCH) {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        // One reclaiming step frees at most 4,096 SQLite pages (16 MiB, about 15,000 rows of
        // these tables): enough steps for what was deleted, bounded.
        let deleted = report.receipts + report.outcomes;
        if deleted > 0 {
            for _ in 0..(deleted / 15_000 + 1).min(256) {
                self.store.reclaim_space().await.map_err(internal)?;
                tokio::task::yield_now().await;
            }
        }
        Ok(report)
    }
}

/// Prunes now and then every `every` until the app is dropped.
pub fn spawn_pruner(app: Arc<App>, every: Duration) -> tokio::task::JoinHandle<()> {
    let app = Arc::downgrade(&app);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            ticks.tick().await;
            let Some(app) = app.upgrade() else { return };
            match app.prune().await {
                Ok(PruneReport {
                    receipts: 0,
                    outcomes: 0,
                }) => {}
                Ok(report) => tracing::info!(
                    receipts = report.receipts,
                    outcomes = report.outcomes,
                    "pruned records past their retention"
                ),
                Err(p) => tracing::warn!(detail = %p.detail, "pruning failed"),
            }
        }
    })
}
