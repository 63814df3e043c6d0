//! Accounting-only recovery from the stores alone, never loading input or dispatching:
//! `recover` for one call, `reconcile_expired` for a scope's overdue calls and
//! `reconcile_usage` for the inbox's pending observations.

use std::time::Duration;

use herma_core::CallerScope;
use herma_core::call::Usage;
use herma_store::StoreError;
use herma_store::governed::{ExecutionRecord, ExecutionStatus};
use serde_json::Value;

use super::settle::{charge_for, receipt_for};
use super::{Engine, Swap, to_meta};
use crate::types::{
    CallView, DEFAULT_PAGE, Envelope, GovernedError, JournalEntry, MAX_PAGE, Outcome, ResultMeta,
    UsageQuery, UsageReconciliation,
};

impl Engine {
    /// Accounting-only recovery of one call: never loads input, never dispatches.
    pub(crate) async fn recover(
        &self,
        scope: &CallerScope,
        key: &str,
        lease: Duration,
    ) -> Result<Option<CallView>, GovernedError> {
        let Some(record) = self.ports.executions.execution(scope, key).await? else {
            return Ok(None);
        };
        let now = self.now();
        let entry = JournalEntry::from_record(&record)?;
        let root = entry.meta.identity.root_key.clone();
        match record.status {
            ExecutionStatus::NotDispatched | ExecutionStatus::ReconciliationRequired => {
                // Late evidence never rewrites an unresolved call by itself.
                if record.status == ExecutionStatus::ReconciliationRequired
                    && self.ports.settlement.charge(scope, key).await?.is_some()
                {
                    return self.complete_from_evidence(record, lease).await.map(Some);
                }
                Ok(Some(self.view_of(&record, root.as_deref()).await?))
            }
            ExecutionStatus::Completed => {
                self.repair(&record, &entry).await?;
                Ok(Some(self.view_of(&record, root.as_deref()).await?))
            }
            ExecutionStatus::Prepared => {
                if record.deadline_at > now {
                    return Ok(Some(self.view_of(&record, root.as_deref()).await?));
                }
                self.not_dispatched(&record, None, None).await.map(Some)
            }
            ExecutionStatus::Dispatching => {
                let leased = record.lease_until.is_some_and(|l| l > now);
                if record.deadline_at > now || leased {
                    return Ok(Some(self.view_of(&record, root.as_deref()).await?));
                }
                self.complete_from_evidence(record, lease).await.map(Some)
            }
        }
    }

    /// Completed journal, missing receipts: writes them again (both are idempotent).
    async fn repair(
        &self,
        record: &ExecutionRecord,
        entry: &JournalEntry,
    ) -> Result<(), GovernedError> {
        let Some(result) = &entry.meta.result else {
            return Ok(());
        };
        let now = self.now();
        if self
            .ports
            .settlement
            .charge(&record.scope, &record.operation_key)
            .await?
            .is_none()
        {
            let charge = charge_for(
                &record.scope,
                &record.operation_key,
                &entry.meta,
                result.amount_micros,
                result.usage,
                result.reference.clone(),
                now,
            );
            self.ports.settlement.settle(&charge).await?;
        }
        if let Some(root_key) = &entry.meta.identity.root_key {
            let receipt = receipt_for(
                &record.scope,
                root_key,
                &record.operation_key,
                &entry.meta,
                result.amount_micros,
                now,
            );
            self.ports.accounting.record_root_receipt(&receipt).await?;
        }
        Ok(())
    }

    /// Takes the accounting fence over a dispatched call and completes it from durable
    /// evidence (a settled charge, or exact, agreeing usage in the inbox priced with the
    /// original prices and day); without evidence the call needs an operator.
    async fn complete_from_evidence(
        &self,
        record: ExecutionRecord,
        lease: Duration,
    ) -> Result<CallView, GovernedError> {
        let now = self.now();
        let entry = JournalEntry::from_record(&record)?;
        let root = entry.meta.identity.root_key.clone();
        let mut fence = record.clone();
        fence.fence += 1;
        fence.lease_until =
            Some(now.plus_millis(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)));
        fence.updated_at = now;
        let record = match self.swap(&fence, record.version).await? {
            Swap::Won(record) => record,
            Swap::Lost(current) => return self.view_of(&current, root.as_deref()).await,
        };
        let (scope, key) = (&record.scope, record.operation_key.as_str());
        let charge = match self.ports.settlement.charge(scope, key).await? {
            Some(charge) => Some(charge),
            None => {
                let evidence = self.ports.inbox.usage_for(scope, key).await?;
                let exact: Vec<&Value> = evidence
                    .iter()
                    .filter(|e| e.observation.exact)
                    .map(|e| &e.observation.usage)
                    .collect();
                let agreed = exact
                    .first()
                    .filter(|first| exact.iter().all(|u| u == *first));
                let usage = agreed.and_then(|u| serde_json::from_value::<Usage>((*u).clone()).ok());
                let priced = usage.and_then(|u| entry.meta.prices.cost_micros(&u).map(|a| (u, a)));
                match priced {
                    None => None,
                    Some((usage, amount)) => {
                        let charge =
                            charge_for(scope, key, &entry.meta, amount, Some(usage), None, now);
                        Some(self.ports.settlement.settle(&charge).await?.charge)
                    }
                }
            }
        };
        let mut next = record.clone();
        next.lease_until = None;
        next.updated_at = self.now();
        let Some(charge) = charge else {
            next.status = ExecutionStatus::ReconciliationRequired;
            let stored = self
                .ports
                .executions
                .update_execution(&next, record.version)
                .await?;
            return self.view_of(&stored, root.as_deref()).await;
        };
        if let Some(root_key) = &root {
            let receipt = receipt_for(scope, root_key, key, &entry.meta, charge.amount_micros, now);
            self.ports.accounting.record_root_receipt(&receipt).await?;
        }
        let mut slot = self.ports.results.result(scope, key).await?;
        if slot
            .as_ref()
            .is_some_and(|s| s.envelope.is_none() && s.erased_at.is_none())
        {
            // The output was lost: record that, so a late writer cannot store a different
            // outcome than the one completed here (the first envelope wins).
            let lost = Envelope {
                outcome: Outcome::Unavailable,
                stop_reason: None,
                text: None,
                json: None,
                step: None,
                refusal: None,
            };
            let lost =
                serde_json::to_value(&lost).map_err(|e| StoreError::Backend(e.to_string()))?;
            slot = Some(self.ports.results.store_envelope(scope, key, &lost).await?);
        }
        let stored_outcome = slot
            .as_ref()
            .and_then(|s| s.envelope.clone())
            .and_then(|e| serde_json::from_value::<Envelope>(e).ok());
        let usage = charge
            .detail
            .get("usage")
            .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
        let mut meta = entry.meta.clone();
        meta.result = Some(ResultMeta {
            outcome: stored_outcome
                .as_ref()
                .map_or(Outcome::Unavailable, |e| e.outcome),
            stop_reason: stored_outcome.and_then(|e| e.stop_reason),
            reference: charge
                .detail
                .get("reference")
                .and_then(Value::as_str)
                .map(str::to_owned),
            amount_micros: charge.amount_micros,
            usage,
            warnings: Vec::new(),
            recovered: true,
        });
        next.status = ExecutionStatus::Completed;
        next.meta = to_meta(&meta)?;
        let stored = self
            .ports
            .executions
            .update_execution(&next, record.version)
            .await?;
        self.view_of(&stored, root.as_deref()).await
    }

    /// Fences overdue prepared/dispatching calls of the scope; returns their keys.
    pub(crate) async fn reconcile_expired(
        &self,
        scope: &CallerScope,
        limit: Option<u32>,
        lease: Duration,
    ) -> Result<Vec<String>, GovernedError> {
        let limit = limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
        let now = self.now();
        let overdue = self
            .ports
            .executions
            .overdue_executions(scope, now, limit)
            .await?;
        let mut fenced = Vec::new();
        for record in overdue {
            if record.lease_until.is_some_and(|l| l > now) {
                continue;
            }
            let key = record.operation_key.clone();
            let result = match record.status {
                ExecutionStatus::Prepared => self.not_dispatched(&record, None, None).await,
                _ => self.complete_from_evidence(record, lease).await,
            };
            // One bad record never stalls the pass: it is reported and the rest go on.
            match result {
                Ok(_) => fenced.push(key),
                Err(err) => self.background(&key, "reconcile", err.to_string()),
            }
        }
        Ok(fenced)
    }

    /// Acknowledges exact inbox observations whose accounting or not-dispatched proof is
    /// durable. `root` limits the pass to one root's calls (and requires its receipt).
    pub(crate) async fn reconcile_usage(
        &self,
        scope: &CallerScope,
        query: UsageQuery,
        root: Option<&str>,
        skip: Option<&(dyn Fn(&str) -> bool + Send + Sync)>,
    ) -> Result<UsageReconciliation, GovernedError> {
        let limit = query.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
        let page = self
            .ports
            .inbox
            .pending_usage(scope, query.after, limit)
            .await?;
        let mut result = UsageReconciliation {
            cursor: query.after,
            ..UsageReconciliation::default()
        };
        for entry in page {
            result.scanned += 1;
            result.cursor = Some(entry.seq);
            let key = entry.observation.operation_key.as_str();
            if skip.is_some_and(|skip| skip(key)) {
                continue;
            }
            let Some(record) = self.ports.executions.execution(scope, key).await? else {
                continue;
            };
            let meta = JournalEntry::from_record(&record)?.meta;
            if root.is_some() && meta.identity.root_key.as_deref() != root {
                continue;
            }
            let durable = match record.status {
                ExecutionStatus::NotDispatched => entry.observation.exact,
                ExecutionStatus::Completed if entry.observation.exact => {
                    let charge = self.ports.settlement.charge(scope, key).await?;
                    let agrees = charge
                        .as_ref()
                        .is_some_and(|c| c.detail.get("usage") == Some(&entry.observation.usage));
                    let receipted = match &meta.identity.root_key {
                        Some(root_key) => self
                            .ports
                            .accounting
                            .root_receipt(scope, root_key, key)
                            .await?
                            .is_some(),
                        None => true,
                    };
                    agrees && receipted
                }
                _ => false,
            };
            if durable
                && self
                    .ports
                    .inbox
                    .acknowledge_usage(scope, entry.seq, self.now())
                    .await?
            {
                result.acknowledged += 1;
            }
        }
        Ok(result)
    }
}
