//! The end of phase B: a drained stream's outcome (a provider's proof of a free call, the
//! text runner's JSON contract, pricing), the one settlement, the root receipt, the caps after
//! the call, the envelope and the journal completion; and the charge and root-receipt rows
//! recovery writes as well.

use herma_core::call::{StopReason, Usage};
use herma_core::wire::Protocol;
use herma_core::{CallerScope, Timestamp};
use herma_providers::single::ProviderError;
use herma_store::StoreError;
use herma_store::governed::{ExecutionRecord, ExecutionStatus, GovernedCharge, RootReceipt};
use serde_json::{Value, json};

use super::{Engine, Mode, Plan, Swap, to_meta};
use crate::collector::{Collected, InvalidReason};
use crate::types::{
    CallMeta, CallView, CapMode, CapWarning, Envelope, GovernedError, JournalEntry, Outcome,
    ResultMeta, RunOutcome, ViewState,
};

impl Engine {
    /// The drained stream's outcome — a proof of a free call, the JSON contract, the price —
    /// then the settlement, the root receipt, the caps after the call, the envelope, the
    /// journal completion and the closing audit. Without a price (no usage, or unpriceable)
    /// the call reads `reconciliation_required`; a call recovery fenced meanwhile is left to it.
    pub(super) async fn finalize(
        &self,
        plan: &Plan,
        record: ExecutionRecord,
        mut collected: Collected,
        stream_error: Option<ProviderError>,
    ) -> Result<RunOutcome, GovernedError> {
        let anthropic = plan.meta.provider == Protocol::Messages.provider_name();
        let context_proof = anthropic
            && collected.reference.is_some()
            && !collected.content
            && collected.stops == 1
            && collected.step.stop == Some(StopReason::ContextWindowExceeded)
            && stream_error.is_none()
            && !collected.loop_cut;
        let prestream_proof = collected.reference.is_some()
            && !collected.content
            && collected.stops == 0
            && collected.usage.is_none()
            && matches!(stream_error, Some(ProviderError::Rejected { .. }));

        // The text runner's JSON contract.
        let mut json_output = None;
        if let Mode::Text {
            validator: Some(validator),
        } = &plan.mode
            && collected.invalid.is_none()
            && stream_error.is_none()
            && collected.usage.is_some()
            && collected.step.stop != Some(StopReason::Refusal)
        {
            match serde_json::from_str::<Value>(&collected.step.text) {
                Ok(value) if validator(&value) => json_output = Some(value),
                _ => collected.invalid = Some(InvalidReason::TextMalformed),
            }
        }

        let priced = collected
            .usage
            .and_then(|usage| plan.meta.prices.cost_micros(&usage).map(|a| (usage, a)));
        let (outcome, amount, usage, refusal) = if context_proof {
            // The provider attested it read nothing it could answer: free by proof; the usage
            // it reported stays with the charge so the inbox evidence reconciles.
            (
                Outcome::Refused,
                0,
                collected.usage,
                Some("context_window_exceeded".to_owned()),
            )
        } else if prestream_proof {
            (Outcome::Unavailable, 0, None, None)
        } else if let Some((usage, amount)) = priced {
            let outcome = if collected.invalid.is_some() {
                Outcome::Invalid
            } else if stream_error.is_some() {
                Outcome::Unavailable
            } else if collected.step.stop == Some(StopReason::Refusal) {
                Outcome::Refused
            } else {
                Outcome::Success
            };
            let refusal = (outcome == Outcome::Refused).then(|| "model".to_owned());
            (outcome, amount, Some(usage), refusal)
        } else {
            // Dispatched, cost unknown (or unpriceable): an operator reconciles.
            let mut next = record.clone();
            next.status = ExecutionStatus::ReconciliationRequired;
            next.updated_at = self.now();
            let (Swap::Won(stored) | Swap::Lost(stored)) = self.swap(&next, record.version).await?;
            let _ = self
                .audit(
                    plan,
                    "governed.reconciliation_required",
                    json!({"call_id": plan.meta.call_id, "reference": collected.reference}),
                )
                .await;
            return Ok(RunOutcome {
                view: self.view_of(&stored, plan.root_key()).await?,
                replayed: false,
                invalid_reason: collected.invalid,
                reasoning_loop: collected.loop_cut,
                warnings: Vec::new(),
                refusal: None,
            });
        };

        let stop_reason = if prestream_proof {
            None
        } else {
            collected.step.stop.clone()
        };
        // Recovery may have fenced the call while it streamed: then it owns the accounting.
        let current = self.current(&plan.scope, &plan.operation_key).await?;
        if current.version != record.version {
            self.background(
                &plan.operation_key,
                "fenced",
                "recovery fenced the call while it streamed",
            );
            return Ok(RunOutcome {
                view: self.view_of(&current, plan.root_key()).await?,
                replayed: false,
                invalid_reason: collected.invalid,
                reasoning_loop: collected.loop_cut,
                warnings: Vec::new(),
                refusal: None,
            });
        }
        let charge = self
            .settle(plan, amount, usage, collected.reference.clone())
            .await?;
        // What stands is what was settled (recovery may have settled first).
        let amount = charge.amount_micros;
        let root_receipt = self.root_receipt(plan, amount).await?;

        // Caps after the call, inclusive of its settled cost.
        let mut warnings = Vec::new();
        let mut blocked = false;
        if outcome == Outcome::Success {
            for (name, cap, spent) in self.spent(plan).await? {
                if spent > cap.limit_micros {
                    match cap.mode {
                        CapMode::Block => blocked = true,
                        CapMode::Warn => warnings.push(CapWarning {
                            cap: name.to_owned(),
                            limit_micros: cap.limit_micros,
                            spent_micros: spent,
                        }),
                    }
                }
            }
        }
        let outcome = if blocked { Outcome::Blocked } else { outcome };
        let envelope = Envelope {
            outcome,
            stop_reason: stop_reason.clone(),
            text: (outcome == Outcome::Success && matches!(plan.mode, Mode::Text { .. }))
                .then(|| collected.step.text.clone()),
            json: if outcome == Outcome::Success {
                json_output
            } else {
                None
            },
            step: (outcome == Outcome::Success && matches!(plan.mode, Mode::Step { .. }))
                .then(|| collected.step.clone()),
            refusal: refusal.clone(),
        };
        let slot = self
            .ports
            .results
            .store_envelope(
                &plan.scope,
                &plan.operation_key,
                &serde_json::to_value(&envelope).map_err(|e| StoreError::Backend(e.to_string()))?,
            )
            .await?;

        let mut meta = plan.meta.clone();
        meta.refusal = refusal;
        let meta_refusal = meta.refusal.clone();
        meta.result = Some(ResultMeta {
            outcome,
            stop_reason,
            reference: collected.reference.clone(),
            amount_micros: amount,
            usage,
            warnings: warnings.clone(),
            recovered: false,
        });
        let mut next = record.clone();
        next.status = ExecutionStatus::Completed;
        next.meta = to_meta(&meta)?;
        next.updated_at = self.now();
        let completed = match self.swap(&next, record.version).await? {
            Swap::Won(stored) => stored,
            Swap::Lost(current) => {
                // Recovery fenced the call meanwhile; it owns the completion now.
                self.background(
                    &plan.operation_key,
                    "fenced",
                    "recovery fenced the call before it completed",
                );
                return Ok(RunOutcome {
                    view: self.view_of(&current, plan.root_key()).await?,
                    replayed: false,
                    invalid_reason: collected.invalid,
                    reasoning_loop: collected.loop_cut,
                    warnings,
                    refusal: None,
                });
            }
        };
        if let Err(err) = self
            .audit(
                plan,
                "governed.completed",
                json!({"call_id": plan.meta.call_id, "outcome": outcome, "amount_micros": amount}),
            )
            .await
        {
            self.background(&plan.operation_key, "audit", err.to_string());
        }
        // The view from what the writes returned; only the content is read again.
        let view = CallView {
            state: ViewState::Completed,
            record: Some(JournalEntry::from_record(&completed)?),
            output: self.output_of(Some(slot)),
            receipt: Some(charge),
            root_receipt,
        };
        Ok(RunOutcome {
            view,
            replayed: false,
            invalid_reason: collected.invalid,
            reasoning_loop: collected.loop_cut,
            warnings,
            refusal: meta_refusal,
        })
    }

    /// Each configured cap with what its counter holds now, this call's settlement included.
    async fn spent(
        &self,
        plan: &Plan,
    ) -> Result<Vec<(&'static str, crate::types::Cap, i64)>, StoreError> {
        let mut out = Vec::new();
        let caps = plan.caps;
        if caps.session.is_some() || caps.day.is_some() {
            let spend = self
                .ports
                .spend
                .peek(&plan.scope, &plan.meta.identity.session_id, &plan.meta.day)
                .await?;
            if let Some(cap) = caps.session {
                out.push(("session", cap, spend.session_micros));
            }
            if let Some(cap) = caps.day {
                out.push(("day", cap, spend.day_micros));
            }
        }
        if let (Some(cap), Some(root_key)) = (caps.root, plan.root_key())
            && let Some(root) = self.ports.trees.root(&plan.scope, root_key).await?
        {
            out.push(("root", cap, root.settled_micros));
        }
        Ok(out)
    }

    /// Settles the call once; returns the charge that stands (recovery may have settled first).
    async fn settle(
        &self,
        plan: &Plan,
        amount: i64,
        usage: Option<Usage>,
        reference: Option<String>,
    ) -> Result<GovernedCharge, GovernedError> {
        let charge = charge_for(
            &plan.scope,
            &plan.operation_key,
            &plan.meta,
            amount,
            usage,
            reference,
            self.now(),
        );
        Ok(self.ports.settlement.settle(&charge).await?.charge)
    }

    /// The root's receipt of the call's settled cost, for a call under a root.
    async fn root_receipt(
        &self,
        plan: &Plan,
        amount: i64,
    ) -> Result<Option<RootReceipt>, GovernedError> {
        let Some(root_key) = plan.root_key() else {
            return Ok(None);
        };
        let receipt = receipt_for(
            &plan.scope,
            root_key,
            &plan.operation_key,
            &plan.meta,
            amount,
            self.now(),
        );
        Ok(Some(
            self.ports.accounting.record_root_receipt(&receipt).await?.0,
        ))
    }
}

/// A call's one financial row: the amount with its usage, reference, model and price version.
pub(super) fn charge_for(
    scope: &CallerScope,
    key: &str,
    meta: &CallMeta,
    amount: i64,
    usage: Option<Usage>,
    reference: Option<String>,
    now: Timestamp,
) -> GovernedCharge {
    GovernedCharge {
        scope: scope.clone(),
        operation_key: key.to_owned(),
        session_id: meta.identity.session_id.clone(),
        day: meta.day.clone(),
        amount_micros: amount,
        detail: json!({
            "call_id": meta.call_id,
            "price_version": meta.identity.price_version,
            "model": meta.controls.model,
            "provider": meta.provider,
            "usage": usage,
            "reference": reference,
            "consumers": meta.consumers,
        }),
        settled_at: now,
    }
}

/// A root's receipt of one call's cost.
pub(super) fn receipt_for(
    scope: &CallerScope,
    root_key: &str,
    key: &str,
    meta: &CallMeta,
    amount: i64,
    now: Timestamp,
) -> RootReceipt {
    RootReceipt {
        scope: scope.clone(),
        root_key: root_key.to_owned(),
        operation_key: key.to_owned(),
        amount_micros: amount,
        detail: json!({"call_id": meta.call_id, "price_version": meta.identity.price_version}),
        recorded_at: now,
    }
}
