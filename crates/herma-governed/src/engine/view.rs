//! What a journal row reads as: the view every path returns, and `read`.

use herma_core::CallerScope;
use herma_store::governed::{ExecutionRecord, ExecutionStatus, ResultSlot};

use super::Engine;
use crate::types::{CallView, GovernedError, JournalEntry, Output, ViewState};

impl Engine {
    /// The stored envelope, while it is retained and not erased.
    pub(super) fn output_of(&self, slot: Option<ResultSlot>) -> Output {
        let now = self.now();
        match slot {
            Some(ResultSlot {
                envelope: Some(envelope),
                erased_at: None,
                expires_at,
                ..
            }) if expires_at > now => match serde_json::from_value(envelope) {
                Ok(envelope) => Output::Available(Box::new(envelope)),
                Err(_) => Output::Unavailable,
            },
            _ => Output::Unavailable,
        }
    }

    /// The view of a journal row (reads the receipts and the content).
    pub(crate) async fn view_of(
        &self,
        record: &ExecutionRecord,
        root_key: Option<&str>,
    ) -> Result<CallView, GovernedError> {
        let entry = JournalEntry::from_record(record)?;
        let receipt = self
            .ports
            .settlement
            .charge(&record.scope, &record.operation_key)
            .await?;
        let root_receipt = match root_key {
            Some(root) => {
                self.ports
                    .accounting
                    .root_receipt(&record.scope, root, &record.operation_key)
                    .await?
            }
            None => None,
        };
        let (state, output) = match record.status {
            ExecutionStatus::Prepared | ExecutionStatus::Dispatching => {
                (ViewState::InProgress, Output::None)
            }
            ExecutionStatus::ReconciliationRequired => {
                (ViewState::ReconciliationRequired, Output::None)
            }
            ExecutionStatus::NotDispatched => (ViewState::NotDispatched, Output::None),
            ExecutionStatus::Completed => {
                // Both financial receipts are required for completed status.
                if receipt.is_none() || (root_key.is_some() && root_receipt.is_none()) {
                    (ViewState::ReconciliationRequired, Output::None)
                } else {
                    let slot = self
                        .ports
                        .results
                        .result(&record.scope, &record.operation_key)
                        .await?;
                    (ViewState::Completed, self.output_of(slot))
                }
            }
        };
        Ok(CallView {
            state,
            record: Some(entry),
            output,
            receipt,
            root_receipt,
        })
    }

    /// The view of a key's call, if the key was ever claimed.
    pub(crate) async fn read(
        &self,
        scope: &CallerScope,
        key: &str,
    ) -> Result<Option<CallView>, GovernedError> {
        let Some(record) = self.ports.executions.execution(scope, key).await? else {
            return Ok(None);
        };
        let root = JournalEntry::from_record(&record)?.meta.identity.root_key;
        Ok(Some(self.view_of(&record, root.as_deref()).await?))
    }
}
