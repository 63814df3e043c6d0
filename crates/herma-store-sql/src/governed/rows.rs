//! Decoding the governed tables' rows into the ports' records.

use herma_store::StoreResult;
use herma_store::governed::{
    AuditEvent, ExecutionRecord, ExecutionStatus, GovernedCharge, InboxEntry, NotDispatchedCause,
    ResultSlot, RootReceipt, RootRecord, RootStatus, UsageObservation,
};

use crate::rows::{json, opt_json, opt_time, scope, time};
use crate::{SqlRow, corrupt, to_u64};

pub(super) fn execution_from_row(row: &impl SqlRow) -> StoreResult<ExecutionRecord> {
    let cause = row
        .opt_text("cause")?
        .map(|c| NotDispatchedCause::parse(&c).ok_or_else(|| corrupt("cause")))
        .transpose()?;
    Ok(ExecutionRecord {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        version: to_u64(row.int("version")?)?,
        status: ExecutionStatus::parse(&row.text("status")?).ok_or_else(|| corrupt("status"))?,
        cause,
        deadline_at: time(row, "deadline_at")?,
        lease_until: opt_time(row, "lease_until")?,
        fence: to_u64(row.int("fence")?)?,
        meta: json(row, "meta")?,
        created_at: time(row, "created_at")?,
        updated_at: time(row, "updated_at")?,
    })
}

pub(super) fn slot_from_row(row: &impl SqlRow) -> StoreResult<ResultSlot> {
    Ok(ResultSlot {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        expires_at: time(row, "expires_at")?,
        envelope: opt_json(row, "envelope")?,
        erased_at: opt_time(row, "erased_at")?,
        created_at: time(row, "created_at")?,
    })
}

pub(super) fn inbox_from_row(row: &impl SqlRow) -> StoreResult<InboxEntry> {
    Ok(InboxEntry {
        seq: to_u64(row.int("seq")?)?,
        observation: UsageObservation {
            scope: scope(row)?,
            operation_key: row.text("operation_key")?,
            observation_id: row.text("observation_id")?,
            exact: row.int("exact")? != 0,
            usage: json(row, "usage")?,
            observed_at: time(row, "observed_at")?,
        },
        acknowledged_at: opt_time(row, "acknowledged_at")?,
    })
}

pub(super) fn charge_from_row(row: &impl SqlRow) -> StoreResult<GovernedCharge> {
    Ok(GovernedCharge {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        session_id: row.text("session_id")?,
        day: row.text("day")?,
        amount_micros: row.int("amount_micros")?,
        detail: json(row, "detail")?,
        settled_at: time(row, "settled_at")?,
    })
}

pub(super) fn audit_from_row(row: &impl SqlRow) -> StoreResult<AuditEvent> {
    Ok(AuditEvent {
        scope: scope(row)?,
        operation_key: row.text("operation_key")?,
        kind: row.text("kind")?,
        detail: json(row, "detail")?,
        at: time(row, "at")?,
    })
}

pub(super) fn root_from_row(row: &impl SqlRow) -> StoreResult<RootRecord> {
    Ok(RootRecord {
        scope: scope(row)?,
        root_key: row.text("root_key")?,
        binding: json(row, "binding")?,
        status: RootStatus::parse(&row.text("status")?).ok_or_else(|| corrupt("root status"))?,
        deadline_at: time(row, "deadline_at")?,
        reserved_calls: to_u64(row.int("reserved_calls")?)?,
        settled_micros: row.int("settled_micros")?,
        receipts: to_u64(row.int("receipts")?)?,
        created_at: time(row, "created_at")?,
        closed_at: opt_time(row, "closed_at")?,
    })
}

pub(super) fn root_receipt_from_row(row: &impl SqlRow) -> StoreResult<RootReceipt> {
    Ok(RootReceipt {
        scope: scope(row)?,
        root_key: row.text("root_key")?,
        operation_key: row.text("operation_key")?,
        amount_micros: row.int("amount_micros")?,
        detail: json(row, "detail")?,
        recorded_at: time(row, "recorded_at")?,
    })
}
