//! The conversation port in SQL (migration 0007's tables and 0008's provider health).
//!
//! Admission, reservation, release, sealing and expiry are each one transaction.
//!
//! Locking: admission starts with a no-op `UPDATE` of the conversation row (`SET version =
//! version … RETURNING`), or creates the row (`INSERT … ON CONFLICT DO NOTHING RETURNING`, which
//! waits for a concurrent creator in PostgreSQL). In PostgreSQL that holds the row lock; in
//! SQLite the first write takes the database's write lock. Either way the checks and the writes
//! of one conversation are serialized. Counters move only by a conditional `UPDATE … WHERE
//! amount <= ceiling − charge` on the counter's row, which PostgreSQL re-checks on the newest
//! row after waiting for its lock, so concurrent reservations never pass a ceiling. Locks are
//! taken turn → conversation → counters, the counters in name order, so admissions, seals and
//! reservations never wait on each other in a cycle. A recovery probe is admitted by a
//! conditional `UPDATE` of its health row (`… WHERE until_at <= now AND probe_until IS NULL`),
//! re-checked in PostgreSQL on the newest row after waiting for its lock, in the same
//! transaction as its charges: at most one probe per resource, and never one without its
//! allowance.

mod rows;

use async_trait::async_trait;
use herma_core::{CallerScope, Timestamp};
use herma_store::conversations::{
    Admission, AdmitTurn, AttemptRecord, ConversationRecord, ConversationStore, HealthRecord,
    LedgerCharge, ProbeReservation, Reserved, SealTurn, TurnRecord, active_turns_counter,
    admission_charges, admitted_turn, decide_before_counters, extend_transcript, new_conversation,
};
use herma_store::{StoreError, StoreResult};

use self::rows::{attempt_from_row, conversation_from_row, health_from_row, turn_from_row};
use crate::{Backend, Query, SqlRow, SqlStore, to_i64, to_json, to_u64};

const CONVERSATION_COLUMNS: &str = "caller_scope, conversation_id, version, fingerprint, \
    transcript, active_request_id, created_at, expires_at, expired";
const TURN_COLUMNS: &str = "caller_scope, conversation_id, request_id, input_digest, status, \
    version_before, server_exception, answer_class, response, created_at, sealed_at";
const HEALTH_COLUMNS: &str = "resource, scope, condition, until_at, source, failures, \
    limited_at, origin, probe_until, probe_id";
const ATTEMPT_COLUMNS: &str =
    "caller_scope, conversation_id, request_id, attempt, record, updated_at";

/// Takes the conversation's lock (a no-op write of its row) and returns it, `None` when it does
/// not exist. Nothing else admits, seals or expires it until the transaction ends.
async fn lock_conversation<B: Backend>(
    tx: &mut B::Tx,
    scope: &CallerScope,
    conversation_id: &str,
) -> StoreResult<Option<ConversationRecord>> {
    let sql = format!(
        "UPDATE conversations SET version = version
         WHERE caller_scope = ? AND conversation_id = ? RETURNING {CONVERSATION_COLUMNS}"
    );
    let lock = B::query(&sql).bind(scope.as_str()).bind(conversation_id);
    B::fetch_in(tx, lock)
        .await?
        .first()
        .map(conversation_from_row)
        .transpose()
}

/// Creates the conversation unless it exists; `None` when another transaction created it first.
async fn create_conversation<B: Backend>(
    tx: &mut B::Tx,
    record: &ConversationRecord,
) -> StoreResult<Option<ConversationRecord>> {
    let sql = format!(
        "INSERT INTO conversations ({CONVERSATION_COLUMNS})
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (caller_scope, conversation_id) DO NOTHING
         RETURNING {CONVERSATION_COLUMNS}"
    );
    let transcript = record.transcript.as_ref().map(to_json).transpose()?;
    let query = B::query(&sql)
        .bind(record.caller_scope.as_str())
        .bind(&record.conversation_id)
        .bind(to_i64(record.version)?)
        .bind(&record.fingerprint)
        .bind(transcript.as_deref())
        .bind(record.active_request_id.as_deref())
        .bind(record.created_at.as_millis())
        .bind(record.expires_at.as_millis())
        .bind(i64::from(record.expired));
    B::fetch_in(tx, query)
        .await?
        .first()
        .map(conversation_from_row)
        .transpose()
}

/// The conversation `admit` names, locked, and whether this transaction created it.
async fn lock_or_create<B: Backend>(
    tx: &mut B::Tx,
    admit: &AdmitTurn,
) -> StoreResult<(ConversationRecord, bool)> {
    let (scope, id) = (&admit.caller_scope, admit.conversation_id.as_str());
    if let Some(stored) = lock_conversation::<B>(tx, scope, id).await? {
        return Ok((stored, false));
    }
    if let Some(created) = create_conversation::<B>(tx, &new_conversation(admit)).await? {
        return Ok((created, true));
    }
    lock_conversation::<B>(tx, scope, id)
        .await?
        .map(|stored| (stored, false))
        .ok_or_else(|| StoreError::Backend("a conflicting conversation vanished".into()))
}

/// The statement reading one turn by its key (bound by [`select_turn`]).
fn turn_select() -> String {
    format!(
        "SELECT {TURN_COLUMNS} FROM conversation_turns
         WHERE caller_scope = ? AND conversation_id = ? AND request_id = ?"
    )
}

fn select_turn<'q, B: Backend>(
    sql: &'q str,
    scope: &'q CallerScope,
    conversation_id: &'q str,
    request_id: &'q str,
) -> Query<'q> {
    B::query(sql)
        .bind(scope.as_str())
        .bind(conversation_id)
        .bind(request_id)
}

async fn insert_turn<B: Backend>(tx: &mut B::Tx, turn: &TurnRecord) -> StoreResult<TurnRecord> {
    let sql = format!(
        "INSERT INTO conversation_turns ({TURN_COLUMNS})
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         RETURNING {TURN_COLUMNS}"
    );
    let response = turn.response.as_ref().map(to_json).transpose()?;
    let query = B::query(&sql)
        .bind(turn.caller_scope.as_str())
        .bind(&turn.conversation_id)
        .bind(&turn.request_id)
        .bind(&turn.input_digest)
        .bind(turn.status.as_str())
        .bind(to_i64(turn.version_before)?)
        .bind(to_json(&turn.server_exception)?)
        .bind(turn.answer_class.map(|class| class.as_str()))
        .bind(response.as_deref())
        .bind(turn.created_at.as_millis())
        .bind(turn.sealed_at.map(Timestamp::as_millis));
    B::fetch_in(tx, query)
        .await?
        .first()
        .map(turn_from_row)
        .transpose()?
        .ok_or_else(|| StoreError::Backend("an inserted turn returned no row".into()))
}

/// The charges' indexes in counter-name order (stable: one counter's charges keep theirs), the
/// order their rows are locked in.
fn lock_order(charges: &[LedgerCharge]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..charges.len()).collect();
    order.sort_by(|&a, &b| charges[a].counter.cmp(&charges[b].counter));
    order
}

/// Adds every charge inside `tx`; `Some(i)` when charge `i` (the first in the order given of
/// those that would) passes its ceiling, and then the caller must roll back.
async fn charge_in<B: Backend>(
    tx: &mut B::Tx,
    charges: &[LedgerCharge],
) -> StoreResult<Option<usize>> {
    let ensure = B::statement(
        "INSERT INTO conversation_ledger (counter, amount) VALUES (?, 0)
         ON CONFLICT (counter) DO NOTHING",
    );
    let add = B::statement(
        "UPDATE conversation_ledger SET amount = amount + ? WHERE counter = ? AND amount <= ?",
    );
    let mut denied: Option<usize> = None;
    for i in lock_order(charges) {
        let charge = &charges[i];
        let added = match charge.room() {
            None => 0,
            Some(room) => {
                B::execute_in(tx, ensure.query().bind(charge.counter.as_str())).await?;
                let query = add
                    .query()
                    .bind(to_i64(charge.amount)?)
                    .bind(charge.counter.as_str())
                    .bind(to_i64(room)?);
                B::execute_in(tx, query).await?
            }
        };
        if added == 0 {
            denied = Some(denied.map_or(i, |first| first.min(i)));
        }
    }
    Ok(denied)
}

/// Takes `charges` back inside `tx`, never below zero.
async fn release_in<B: Backend>(tx: &mut B::Tx, charges: &[LedgerCharge]) -> StoreResult<()> {
    let release = B::statement(
        "UPDATE conversation_ledger
         SET amount = CASE WHEN amount > ? THEN amount - ? ELSE 0 END
         WHERE counter = ?",
    );
    for i in lock_order(charges) {
        let charge = &charges[i];
        let amount = i64::try_from(charge.amount).unwrap_or(i64::MAX);
        let query = release
            .query()
            .bind(amount)
            .bind(amount)
            .bind(charge.counter.as_str());
        B::execute_in(tx, query).await?;
    }
    Ok(())
}

#[async_trait]
impl<B: Backend> ConversationStore for SqlStore<B> {
    async fn admit_turn(&self, admit: &AdmitTurn) -> StoreResult<Admission> {
        let mut tx = self.db.begin().await?;
        let (conversation, created) = lock_or_create::<B>(&mut tx, admit).await?;
        let sql = turn_select();
        let query = select_turn::<B>(
            &sql,
            &admit.caller_scope,
            &admit.conversation_id,
            &admit.request_id,
        );
        let existing = B::fetch_in(&mut tx, query)
            .await?
            .first()
            .map(turn_from_row)
            .transpose()?;
        let stored = (!created).then_some(&conversation);
        if let Some(decided) = decide_before_counters(admit, stored, existing) {
            B::rollback(tx).await?;
            return Ok(decided);
        }
        let (charges, refusals): (Vec<_>, Vec<_>) =
            admission_charges(admit, created).into_iter().unzip();
        if let Some(denied) = charge_in::<B>(&mut tx, &charges).await? {
            B::rollback(tx).await?;
            return Ok(Admission::Refused(refusals[denied].clone()));
        }
        let turn = insert_turn::<B>(&mut tx, &admitted_turn(admit, conversation.version)).await?;
        let activate = B::query(
            "UPDATE conversations SET active_request_id = ?
             WHERE caller_scope = ? AND conversation_id = ?",
        )
        .bind(&admit.request_id)
        .bind(admit.caller_scope.as_str())
        .bind(&admit.conversation_id);
        B::execute_in(&mut tx, activate).await?;
        B::commit(tx).await?;
        Ok(Admission::Admitted(turn))
    }

    async fn put_attempt(&self, attempt: &AttemptRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO conversation_attempts ({ATTEMPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (caller_scope, conversation_id, request_id, attempt)
             DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at"
        );
        let query = B::query(&sql)
            .bind(attempt.caller_scope.as_str())
            .bind(&attempt.conversation_id)
            .bind(&attempt.request_id)
            .bind(i64::from(attempt.attempt))
            .bind(to_json(&attempt.record)?)
            .bind(attempt.updated_at.as_millis());
        self.db.execute(query).await?;
        Ok(())
    }

    async fn reserve(&self, charges: &[LedgerCharge]) -> StoreResult<Reserved> {
        if charges.is_empty() {
            return Ok(Reserved::All);
        }
        let mut tx = self.db.begin().await?;
        match charge_in::<B>(&mut tx, charges).await? {
            Some(denied) => {
                B::rollback(tx).await?;
                Ok(Reserved::Denied {
                    counter: charges[denied].counter.clone(),
                })
            }
            None => {
                B::commit(tx).await?;
                Ok(Reserved::All)
            }
        }
    }

    async fn release(&self, charges: &[LedgerCharge]) -> StoreResult<()> {
        if charges.is_empty() {
            return Ok(());
        }
        let mut tx = self.db.begin().await?;
        release_in::<B>(&mut tx, charges).await?;
        B::commit(tx).await
    }

    async fn seal_turn(&self, seal: &SealTurn) -> StoreResult<bool> {
        let exception = seal.server_exception.as_ref().map(to_json).transpose()?;
        let mut tx = self.db.begin().await?;
        let sealed = B::query(
            "UPDATE conversation_turns
             SET status = 'sealed', answer_class = ?, response = ?, sealed_at = ?,
                 server_exception = COALESCE(?, server_exception)
             WHERE caller_scope = ? AND conversation_id = ? AND request_id = ?
               AND status = 'active'",
        )
        .bind(seal.answer_class.as_str())
        .bind(to_json(&seal.response)?)
        .bind(seal.now.as_millis())
        .bind(exception.as_deref())
        .bind(seal.caller_scope.as_str())
        .bind(&seal.conversation_id)
        .bind(&seal.request_id);
        if B::execute_in(&mut tx, sealed).await? == 0 {
            B::rollback(tx).await?;
            return Ok(false);
        }
        let conversation =
            lock_conversation::<B>(&mut tx, &seal.caller_scope, &seal.conversation_id)
                .await?
                .ok_or_else(|| {
                    StoreError::Corrupt("an active turn's conversation is missing".into())
                })?;
        let transcript = extend_transcript(conversation.transcript, &seal.transcript_append)?
            .as_ref()
            .map(to_json)
            .transpose()?;
        let advance = B::query(
            "UPDATE conversations
             SET version = version + 1, transcript = ?, active_request_id = NULL
             WHERE caller_scope = ? AND conversation_id = ?",
        )
        .bind(transcript.as_deref())
        .bind(seal.caller_scope.as_str())
        .bind(&seal.conversation_id);
        B::execute_in(&mut tx, advance).await?;
        let slot = LedgerCharge {
            counter: active_turns_counter(&seal.caller_scope),
            amount: 1,
            ceiling: 0,
        };
        release_in::<B>(&mut tx, std::slice::from_ref(&slot)).await?;
        B::commit(tx).await?;
        Ok(true)
    }

    async fn conversation(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationRecord>> {
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations
             WHERE caller_scope = ? AND conversation_id = ?"
        );
        let query = B::query(&sql).bind(scope.as_str()).bind(conversation_id);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| conversation_from_row(&row))
            .transpose()
    }

    async fn turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Option<TurnRecord>> {
        let sql = turn_select();
        let query = select_turn::<B>(&sql, scope, conversation_id, request_id);
        self.db
            .fetch_optional(query)
            .await?
            .map(|row| turn_from_row(&row))
            .transpose()
    }

    async fn recent_turns(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM conversation_turns
             WHERE caller_scope = ? AND conversation_id = ?
             ORDER BY version_before DESC, created_at DESC, request_id DESC LIMIT ?"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(conversation_id)
            .bind(i64::from(limit));
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(turn_from_row)
            .collect()
    }

    async fn attempts(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Vec<AttemptRecord>> {
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM conversation_attempts
             WHERE caller_scope = ? AND conversation_id = ? AND request_id = ?
             ORDER BY attempt"
        );
        let query = B::query(&sql)
            .bind(scope.as_str())
            .bind(conversation_id)
            .bind(request_id);
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(attempt_from_row)
            .collect()
    }

    async fn unfinished_turns(
        &self,
        admitted_before: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM conversation_turns
             WHERE status = 'active' AND created_at < ?
             ORDER BY created_at, caller_scope, conversation_id, request_id LIMIT ?"
        );
        let query = B::query(&sql)
            .bind(admitted_before.as_millis())
            .bind(i64::from(limit));
        self.db
            .fetch(query)
            .await?
            .iter()
            .map(turn_from_row)
            .collect()
    }

    async fn next_due(&self, seal_after_ms: i64) -> StoreResult<Option<Timestamp>> {
        let query = B::query(
            "SELECT MIN(due) AS due FROM (
               SELECT MIN(created_at) + ? AS due FROM conversation_turns WHERE status = 'active'
               UNION ALL
               SELECT MIN(expires_at) AS due FROM conversations
               WHERE expired = 0 AND active_request_id IS NULL
             ) AS soonest",
        )
        .bind(seal_after_ms);
        let row = self.db.fetch_optional(query).await?;
        Ok(row
            .map(|row| row.opt_int("due"))
            .transpose()?
            .flatten()
            .map(Timestamp::from_millis))
    }

    async fn expire_conversations(&self, now: Timestamp, limit: u32) -> StoreResult<u64> {
        let mut tx = self.db.begin().await?;
        // The outer conditions repeat the inner ones: PostgreSQL re-checks them on the newest
        // row when a concurrent admission held it.
        let expire = B::query(
            "UPDATE conversations SET expired = 1, transcript = NULL
             WHERE expired = 0 AND active_request_id IS NULL AND expires_at <= ?
               AND (caller_scope, conversation_id) IN (
                 SELECT caller_scope, conversation_id FROM conversations
                 WHERE expired = 0 AND active_request_id IS NULL AND expires_at <= ?
                 ORDER BY expires_at, caller_scope, conversation_id LIMIT ?)
             RETURNING caller_scope, conversation_id",
        )
        .bind(now.as_millis())
        .bind(now.as_millis())
        .bind(i64::from(limit));
        let expired = B::fetch_in(&mut tx, expire)
            .await?
            .iter()
            .map(|row| Ok((row.text("caller_scope")?, row.text("conversation_id")?)))
            .collect::<StoreResult<Vec<_>>>()?;
        let forget = B::statement(
            "UPDATE conversation_turns SET response = NULL
             WHERE caller_scope = ? AND conversation_id = ? AND response IS NOT NULL",
        );
        for (scope, conversation_id) in &expired {
            let query = forget.query().bind(scope).bind(conversation_id);
            B::execute_in(&mut tx, query).await?;
        }
        B::commit(tx).await?;
        Ok(expired.len() as u64)
    }

    async fn ledger(&self, counters: &[String]) -> StoreResult<Vec<u64>> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT counter, amount FROM conversation_ledger WHERE counter {}",
            B::TEXT_IN
        );
        let query = B::query(&sql).bind(counters);
        let mut values = vec![0; counters.len()];
        for row in self.db.fetch(query).await? {
            let counter = row.text("counter")?;
            let amount = to_u64(row.int("amount")?)?;
            for (value, asked) in values.iter_mut().zip(counters) {
                if *asked == counter {
                    *value = amount;
                }
            }
        }
        Ok(values)
    }

    async fn health(&self, resources: &[String]) -> StoreResult<Vec<HealthRecord>> {
        if resources.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {HEALTH_COLUMNS} FROM conversation_health WHERE resource {}",
            B::TEXT_IN
        );
        let rows = self.db.fetch(B::query(&sql).bind(resources)).await?;
        rows.iter().map(health_from_row).collect()
    }

    async fn all_health(&self) -> StoreResult<Vec<HealthRecord>> {
        let sql = format!("SELECT {HEALTH_COLUMNS} FROM conversation_health ORDER BY resource");
        let rows = self.db.fetch(B::query(&sql)).await?;
        rows.iter().map(health_from_row).collect()
    }

    async fn limit(&self, record: &HealthRecord) -> StoreResult<bool> {
        let sql = format!(
            "INSERT INTO conversation_health ({HEALTH_COLUMNS})
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (resource) DO UPDATE SET
                 scope = excluded.scope, condition = excluded.condition,
                 until_at = excluded.until_at, source = excluded.source,
                 failures = excluded.failures, limited_at = excluded.limited_at,
                 origin = excluded.origin, probe_until = excluded.probe_until,
                 probe_id = excluded.probe_id
             WHERE conversation_health.limited_at <= excluded.limited_at"
        );
        let query = bind_health(B::query(&sql), record);
        Ok(self.db.execute(query).await? > 0)
    }

    async fn clear_health(&self, resource: &str, observed_at: Timestamp) -> StoreResult<bool> {
        let query =
            B::query("DELETE FROM conversation_health WHERE resource = ? AND limited_at <= ?")
                .bind(resource)
                .bind(observed_at.as_millis());
        Ok(self.db.execute(query).await? > 0)
    }

    async fn reserve_probe(
        &self,
        resource: &str,
        probe_id: &str,
        lease_until: Timestamp,
        now: Timestamp,
        charges: &[LedgerCharge],
    ) -> StoreResult<ProbeReservation> {
        let mut tx = self.db.begin().await?;
        let lease = B::query(
            "UPDATE conversation_health SET probe_until = ?, probe_id = ?
             WHERE resource = ? AND until_at <= ? AND probe_until IS NULL",
        )
        .bind(lease_until.as_millis())
        .bind(probe_id)
        .bind(resource)
        .bind(now.as_millis());
        if B::execute_in(&mut tx, lease).await? == 0 {
            B::rollback(tx).await?;
            let stored = self.health(&[resource.to_owned()]).await?;
            return Ok(match stored.first() {
                None => ProbeReservation::NotLimited,
                Some(stored) => ProbeReservation::Held {
                    until: stored
                        .probe_until
                        .map_or(stored.until, |p| p.max(stored.until)),
                },
            });
        }
        match charge_in::<B>(&mut tx, charges).await? {
            Some(denied) => {
                B::rollback(tx).await?;
                Ok(ProbeReservation::Denied {
                    counter: charges[denied].counter.clone(),
                })
            }
            None => {
                B::commit(tx).await?;
                Ok(ProbeReservation::Admitted)
            }
        }
    }

    async fn expire_probe(&self, probe_id: &str, record: &HealthRecord) -> StoreResult<bool> {
        let sql = format!(
            "UPDATE conversation_health SET ({HEALTH_COLUMNS}) = (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             WHERE resource = ? AND probe_id = ?"
        );
        let query = bind_health(B::query(&sql), record)
            .bind(record.resource.as_str())
            .bind(probe_id);
        Ok(self.db.execute(query).await? > 0)
    }
}

/// Binds a health record's columns in [`HEALTH_COLUMNS`] order.
fn bind_health<'q>(query: Query<'q>, record: &'q HealthRecord) -> Query<'q> {
    query
        .bind(record.resource.as_str())
        .bind(record.scope.as_str())
        .bind(record.condition.as_str())
        .bind(record.until.as_millis())
        .bind(record.source.as_str())
        .bind(i64::from(record.failures))
        .bind(record.limited_at.as_millis())
        .bind(record.origin.as_str())
        .bind(record.probe_until.map(Timestamp::as_millis))
        .bind(record.probe_id.as_deref())
}
