//! Decoding the conversation tables' rows into the port's records.

use herma_store::StoreResult;
use herma_store::conversations::{
    AnswerClass, AttemptRecord, ConversationRecord, HealthRecord, HealthScope, TurnRecord,
    TurnStatus,
};

use crate::rows::{json, opt_json, opt_time, scope, time};
use crate::{SqlRow, corrupt, to_u64};

pub(super) fn conversation_from_row(row: &impl SqlRow) -> StoreResult<ConversationRecord> {
    Ok(ConversationRecord {
        caller_scope: scope(row)?,
        conversation_id: row.text("conversation_id")?,
        version: to_u64(row.int("version")?)?,
        fingerprint: row.text("fingerprint")?,
        transcript: opt_json(row, "transcript")?,
        active_request_id: row.opt_text("active_request_id")?,
        created_at: time(row, "created_at")?,
        expires_at: time(row, "expires_at")?,
        expired: row.int("expired")? != 0,
    })
}

pub(super) fn turn_from_row(row: &impl SqlRow) -> StoreResult<TurnRecord> {
    let answer_class = row
        .opt_text("answer_class")?
        .map(|class| AnswerClass::parse(&class).ok_or_else(|| corrupt("answer class")))
        .transpose()?;
    Ok(TurnRecord {
        caller_scope: scope(row)?,
        conversation_id: row.text("conversation_id")?,
        request_id: row.text("request_id")?,
        input_digest: row.text("input_digest")?,
        status: TurnStatus::parse(&row.text("status")?).ok_or_else(|| corrupt("turn status"))?,
        version_before: to_u64(row.int("version_before")?)?,
        server_exception: json(row, "server_exception")?,
        answer_class,
        response: opt_json(row, "response")?,
        created_at: time(row, "created_at")?,
        sealed_at: opt_time(row, "sealed_at")?,
    })
}

pub(super) fn attempt_from_row(row: &impl SqlRow) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        caller_scope: scope(row)?,
        conversation_id: row.text("conversation_id")?,
        request_id: row.text("request_id")?,
        attempt: u32::try_from(row.int("attempt")?).map_err(|_| corrupt("attempt number"))?,
        record: json(row, "record")?,
        updated_at: time(row, "updated_at")?,
    })
}

pub(super) fn health_from_row(row: &impl SqlRow) -> StoreResult<HealthRecord> {
    Ok(HealthRecord {
        resource: row.text("resource")?,
        scope: HealthScope::parse(&row.text("scope")?).ok_or_else(|| corrupt("health scope"))?,
        condition: row.text("condition")?,
        until: time(row, "until_at")?,
        source: row.text("source")?,
        failures: u32::try_from(row.int("failures")?).map_err(|_| corrupt("health failures"))?,
        limited_at: time(row, "limited_at")?,
        origin: row.text("origin")?,
        probe_until: opt_time(row, "probe_until")?,
        probe_id: row.opt_text("probe_id")?,
    })
}
