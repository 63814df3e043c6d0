//! The conversation port's tables in memory: conversations, turns, attempts and the ledger, and
//! each operation of [`crate::ConversationStore`] on them. [`crate::MemoryStore`] holds them
//! behind one mutex, so every operation is atomic as one transaction is in SQL.

use std::collections::{BTreeMap, HashMap};

use herma_core::{CallerScope, Timestamp};

use crate::conversations::{
    Admission, AdmitTurn, AttemptRecord, ConversationRecord, HealthRecord, LedgerCharge,
    ProbeReservation, Refusal, Reserved, SealTurn, TurnRecord, TurnStatus, active_turns_counter,
    admission_charges, admitted_turn, decide_before_counters, extend_transcript, new_conversation,
};
use crate::{StoreError, StoreResult};

type ConversationKey = (CallerScope, String);
type TurnKey = (CallerScope, String, String);
type AttemptKey = (CallerScope, String, String, u32);

#[derive(Default)]
pub(crate) struct ConversationTables {
    conversations: HashMap<ConversationKey, ConversationRecord>,
    turns: BTreeMap<TurnKey, TurnRecord>,
    attempts: BTreeMap<AttemptKey, AttemptRecord>,
    ledger: HashMap<String, u64>,
    health: BTreeMap<String, HealthRecord>,
}

fn conversation_key(scope: &CallerScope, conversation_id: &str) -> ConversationKey {
    (scope.clone(), conversation_id.to_owned())
}

fn turn_key(scope: &CallerScope, conversation_id: &str, request_id: &str) -> TurnKey {
    (
        scope.clone(),
        conversation_id.to_owned(),
        request_id.to_owned(),
    )
}

impl ConversationTables {
    pub(crate) fn admit(&mut self, admit: &AdmitTurn) -> Admission {
        let key = conversation_key(&admit.caller_scope, &admit.conversation_id);
        let request = turn_key(
            &admit.caller_scope,
            &admit.conversation_id,
            &admit.request_id,
        );
        let stored = self.conversations.get(&key);
        let existing = self.turns.get(&request).cloned();
        if let Some(decided) = decide_before_counters(admit, stored, existing) {
            return decided;
        }
        let mut conversation = stored.cloned().unwrap_or_else(|| new_conversation(admit));
        let (charges, refusals): (Vec<LedgerCharge>, Vec<Refusal>) =
            admission_charges(admit, stored.is_none())
                .into_iter()
                .unzip();
        if let Err(denied) = self.charge(&charges) {
            return Admission::Refused(refusals[denied].clone());
        }
        let turn = admitted_turn(admit, conversation.version);
        conversation.active_request_id = Some(admit.request_id.clone());
        self.conversations.insert(key, conversation);
        self.turns.insert(request, turn.clone());
        Admission::Admitted(turn)
    }

    /// Adds every charge, or none: `Err` with the index of the first (in the order given) that
    /// would pass its ceiling. Charges on one counter add up in order; one that would pass adds
    /// nothing.
    fn charge(&mut self, charges: &[LedgerCharge]) -> Result<(), usize> {
        let mut next: HashMap<&str, u64> = HashMap::new();
        let mut denied = None;
        for (i, charge) in charges.iter().enumerate() {
            let counter = charge.counter.as_str();
            let current = next
                .get(counter)
                .or_else(|| self.ledger.get(counter))
                .copied()
                .unwrap_or(0);
            match charge.room() {
                Some(room) if current <= room => {
                    next.insert(counter, current + charge.amount);
                }
                _ => {
                    denied.get_or_insert(i);
                }
            }
        }
        if let Some(i) = denied {
            return Err(i);
        }
        for (counter, amount) in next {
            self.ledger.insert(counter.to_owned(), amount);
        }
        Ok(())
    }

    pub(crate) fn reserve(&mut self, charges: &[LedgerCharge]) -> Reserved {
        match self.charge(charges) {
            Ok(()) => Reserved::All,
            Err(i) => Reserved::Denied {
                counter: charges[i].counter.clone(),
            },
        }
    }

    pub(crate) fn release(&mut self, charges: &[LedgerCharge]) {
        for charge in charges {
            if let Some(amount) = self.ledger.get_mut(&charge.counter) {
                *amount = amount.saturating_sub(charge.amount);
            }
        }
    }

    pub(crate) fn put_attempt(&mut self, attempt: &AttemptRecord) {
        let key = (
            attempt.caller_scope.clone(),
            attempt.conversation_id.clone(),
            attempt.request_id.clone(),
            attempt.attempt,
        );
        self.attempts.insert(key, attempt.clone());
    }

    pub(crate) fn seal(&mut self, seal: &SealTurn) -> StoreResult<bool> {
        let key = turn_key(&seal.caller_scope, &seal.conversation_id, &seal.request_id);
        let active = self
            .turns
            .get(&key)
            .is_some_and(|t| t.status == TurnStatus::Active);
        if !active {
            return Ok(false);
        }
        let conversation = self
            .conversations
            .get(&conversation_key(&seal.caller_scope, &seal.conversation_id))
            .ok_or_else(|| {
                StoreError::Corrupt("an active turn's conversation is missing".into())
            })?;
        let transcript =
            extend_transcript(conversation.transcript.clone(), &seal.transcript_append)?;
        if let Some(conversation) = self
            .conversations
            .get_mut(&conversation_key(&seal.caller_scope, &seal.conversation_id))
        {
            conversation.version += 1;
            conversation.transcript = transcript;
            conversation.active_request_id = None;
        }
        if let Some(turn) = self.turns.get_mut(&key) {
            turn.status = TurnStatus::Sealed;
            turn.answer_class = Some(seal.answer_class);
            turn.response = Some(seal.response.clone());
            turn.sealed_at = Some(seal.now);
            if let Some(exception) = &seal.server_exception {
                turn.server_exception = exception.clone();
            }
        }
        self.release(&[LedgerCharge {
            counter: active_turns_counter(&seal.caller_scope),
            amount: 1,
            ceiling: 0,
        }]);
        Ok(true)
    }

    pub(crate) fn conversation(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
    ) -> Option<ConversationRecord> {
        self.conversations
            .get(&conversation_key(scope, conversation_id))
            .cloned()
    }

    pub(crate) fn turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> Option<TurnRecord> {
        self.turns
            .get(&turn_key(scope, conversation_id, request_id))
            .cloned()
    }

    fn turns_of<'a>(
        &'a self,
        scope: &'a CallerScope,
        conversation_id: &'a str,
    ) -> impl Iterator<Item = &'a TurnRecord> + 'a {
        self.turns
            .values()
            .filter(move |t| t.caller_scope == *scope && t.conversation_id == conversation_id)
    }

    pub(crate) fn recent_turns(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        limit: u32,
    ) -> Vec<TurnRecord> {
        let mut turns: Vec<TurnRecord> = self.turns_of(scope, conversation_id).cloned().collect();
        turns.sort_by(|a, b| {
            (b.version_before, b.created_at, &b.request_id).cmp(&(
                a.version_before,
                a.created_at,
                &a.request_id,
            ))
        });
        turns.truncate(limit as usize);
        turns
    }

    pub(crate) fn attempts(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> Vec<AttemptRecord> {
        // Keys order by attempt number within one turn.
        self.attempts
            .values()
            .filter(|a| {
                a.caller_scope == *scope
                    && a.conversation_id == conversation_id
                    && a.request_id == request_id
            })
            .cloned()
            .collect()
    }

    pub(crate) fn unfinished_turns(
        &self,
        admitted_before: Timestamp,
        limit: u32,
    ) -> Vec<TurnRecord> {
        let mut turns: Vec<TurnRecord> = self
            .turns
            .values()
            .filter(|t| t.status == TurnStatus::Active && t.created_at < admitted_before)
            .cloned()
            .collect();
        turns.sort_by(|a, b| {
            (
                a.created_at,
                &a.caller_scope,
                &a.conversation_id,
                &a.request_id,
            )
                .cmp(&(
                    b.created_at,
                    &b.caller_scope,
                    &b.conversation_id,
                    &b.request_id,
                ))
        });
        turns.truncate(limit as usize);
        turns
    }

    pub(crate) fn next_due(&self, seal_after_ms: i64) -> Option<Timestamp> {
        let sealing = self
            .turns
            .values()
            .filter(|t| t.status == TurnStatus::Active)
            .map(|t| t.created_at.plus_millis(seal_after_ms));
        let expiring = self
            .conversations
            .values()
            .filter(|c| !c.expired && c.active_request_id.is_none())
            .map(|c| c.expires_at);
        sealing.chain(expiring).min()
    }

    pub(crate) fn expire(&mut self, now: Timestamp, limit: u32) -> u64 {
        let mut due: Vec<(Timestamp, ConversationKey)> = self
            .conversations
            .iter()
            .filter(|(_, c)| !c.expired && c.active_request_id.is_none() && c.expires_at <= now)
            .map(|(key, c)| (c.expires_at, key.clone()))
            .collect();
        due.sort();
        due.truncate(limit as usize);
        for (_, key) in &due {
            if let Some(conversation) = self.conversations.get_mut(key) {
                conversation.expired = true;
                conversation.transcript = None;
            }
            for turn in self.turns.values_mut() {
                if turn.caller_scope == key.0 && turn.conversation_id == key.1 {
                    turn.response = None;
                }
            }
        }
        due.len() as u64
    }

    pub(crate) fn ledger(&self, counters: &[String]) -> Vec<u64> {
        counters
            .iter()
            .map(|c| self.ledger.get(c).copied().unwrap_or(0))
            .collect()
    }
}

impl ConversationTables {
    pub(crate) fn health(&self, resources: &[String]) -> Vec<HealthRecord> {
        resources
            .iter()
            .filter_map(|r| self.health.get(r).cloned())
            .collect()
    }

    pub(crate) fn all_health(&self) -> Vec<HealthRecord> {
        self.health.values().cloned().collect()
    }

    pub(crate) fn limit(&mut self, record: &HealthRecord) -> bool {
        if let Some(stored) = self.health.get(&record.resource)
            && stored.limited_at > record.limited_at
        {
            return false;
        }
        self.health.insert(record.resource.clone(), record.clone());
        true
    }

    pub(crate) fn clear_health(&mut self, resource: &str, observed_at: Timestamp) -> bool {
        match self.health.get(resource) {
            Some(stored) if stored.limited_at <= observed_at => {
                self.health.remove(resource);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn reserve_probe(
        &mut self,
        resource: &str,
        probe_id: &str,
        lease_until: Timestamp,
        now: Timestamp,
        charges: &[LedgerCharge],
    ) -> ProbeReservation {
        let Some(stored) = self.health.get(resource) else {
            return ProbeReservation::NotLimited;
        };
        if stored.until > now || stored.probe_until.is_some() {
            let until = stored
                .probe_until
                .map_or(stored.until, |p| p.max(stored.until));
            return ProbeReservation::Held { until };
        }
        if let Err(denied) = self.charge(charges) {
            return ProbeReservation::Denied {
                counter: charges[denied].counter.clone(),
            };
        }
        if let Some(stored) = self.health.get_mut(resource) {
            stored.probe_until = Some(lease_until);
            stored.probe_id = Some(probe_id.to_owned());
        }
        ProbeReservation::Admitted
    }

    pub(crate) fn expire_probe(&mut self, probe_id: &str, record: &HealthRecord) -> bool {
        match self.health.get(&record.resource) {
            Some(stored) if stored.probe_id.as_deref() == Some(probe_id) => {
                self.health.insert(record.resource.clone(), record.clone());
                true
            }
            _ => false,
        }
    }
}
