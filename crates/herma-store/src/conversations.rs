//! The conversation port: typed work conversations, their turns and attempts, and the shared
//! ledger of reservations.
//!
//! A conversation belongs to one caller and is keyed by the caller's `conversation_id`; each
//! turn by its `request_id`; each model attempt of a turn by its number. The ledger holds named
//! counters (a provider's reserved microdollars, a caller's tokens and turns of one hour, the
//! calls of one UTC day, a caller's active turns and conversation ids), each moved only within
//! its ceiling, so every process on one database shares the same limits.
//!
//! Layout: the records, then the pure pieces every implementation shares — the counter names,
//! what admission decides before it moves a counter ([`decide_before_counters`]), the counters
//! it moves ([`admission_charges`]) and the rows it writes — then the port
//! ([`ConversationStore`]), whose docs are the contract.
//!
//! Architecture invariant: admission, reservation and sealing are each one transaction (or one
//! statement); a refused admission or reservation writes nothing. Expiry removes transcripts and
//! responses but keeps every conversation's id and version (a tombstone), so an id is never
//! reused.

use async_trait::async_trait;
use herma_core::{CallerScope, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{StoreError, StoreResult};

/// A conversation as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ConversationRecord {
    pub caller_scope: CallerScope,
    pub conversation_id: String,
    /// Sealed turns so far; the next turn sends it as `expected_version`.
    pub version: u64,
    /// What the conversation's turns must keep sending: a digest of its context refs, their
    /// versions and contents, and the provider choice.
    pub fingerprint: String,
    /// The transcript, a JSON list of messages; `None` once expired.
    pub transcript: Option<Value>,
    /// The turn being answered now.
    pub active_request_id: Option<String>,
    pub created_at: Timestamp,
    /// No turn is admitted at or after this; the sweeper then removes the transcript.
    pub expires_at: Timestamp,
    /// The transcript and responses were removed; the id and version remain.
    pub expired: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnStatus {
    /// Admitted, not yet sealed.
    Active,
    /// Answered (or sealed by the sweeper); its response replays.
    Sealed,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Active => "active",
            TurnStatus::Sealed => "sealed",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "active" => Some(TurnStatus::Active),
            "sealed" => Some(TurnStatus::Sealed),
            _ => None,
        }
    }
}

/// How a sealed turn answered, so its replay answers the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerClass {
    /// An ordinary answer (`clarify`, `ready` or `blocked`).
    Answered,
    /// A spending ceiling refused the turn before any request (its replay is refused alike).
    CeilingDenied,
}

impl AnswerClass {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerClass::Answered => "answered",
            AnswerClass::CeilingDenied => "ceiling_denied",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "answered" => Some(AnswerClass::Answered),
            "ceiling_denied" => Some(AnswerClass::CeilingDenied),
            _ => None,
        }
    }
}

/// A turn as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnRecord {
    pub caller_scope: CallerScope,
    pub conversation_id: String,
    pub request_id: String,
    /// A digest of the turn's whole input: the same `request_id` with another input is a
    /// conflict.
    pub input_digest: String,
    pub status: TurnStatus,
    /// The conversation's version the turn was admitted at.
    pub version_before: u64,
    /// The private turn record written before inference (purpose, principal, scope, payer,
    /// destination, allowance, reservation, timeout, retry policy).
    pub server_exception: Value,
    /// How the turn answered and the body a replay answers with; `None` while active, and the response
    /// once expired.
    pub answer_class: Option<AnswerClass>,
    pub response: Option<Value>,
    pub created_at: Timestamp,
    pub sealed_at: Option<Timestamp>,
}

/// One model attempt of a turn, persisted before its dispatch and updated after.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptRecord {
    pub caller_scope: CallerScope,
    pub conversation_id: String,
    pub request_id: String,
    /// 1, 2, … in the order they were made.
    pub attempt: u32,
    /// The attempt's receipt: provider, model, destination, payer, allowance, reservation
    /// status and ceilings, outcome, usage, HTTP status, diagnostics.
    pub record: Value,
    pub updated_at: Timestamp,
}

/// One counter moved by a reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerCharge {
    /// `provider:meta`, `caller_tokens:key:…:2026-12-01T12`, …
    pub counter: String,
    pub amount: u64,
    /// The counter may reach the ceiling, never pass it.
    pub ceiling: u64,
}

impl LedgerCharge {
    /// The most its counter may hold for this charge to fit (`ceiling − amount`), `None` when
    /// the amount alone passes the ceiling. Ceilings above `i64::MAX`, more than a SQL counter
    /// holds, count as `i64::MAX`.
    pub fn room(&self) -> Option<u64> {
        let ceiling = self.ceiling.min(i64::MAX.unsigned_abs());
        ceiling.checked_sub(self.amount)
    }
}

/// Whether `counter` is one every caller shares (a provider's budget, Ollama's calls of a UTC
/// day) rather than one caller's own (its conversation ids, active turns, turns and tokens of
/// an hour). Where callers' records are kept apart (the edge's per-caller objects), the shared
/// counters stay with the one coordinator.
pub fn is_shared_counter(counter: &str) -> bool {
    counter.starts_with("provider:") || counter.starts_with("calls:")
}

/// What a reservation did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reserved {
    /// Every charge was added.
    All,
    /// Nothing was added: this counter would have passed its ceiling.
    Denied { counter: String },
}

pub use herma_core::conversation::health::{HealthRecord, HealthScope};

/// What [`ConversationStore::reserve_probe`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeReservation {
    /// The lease is this probe's and every charge was added.
    Admitted,
    /// Another probe holds the lease, or the resource is cooling again: eligible at `until`.
    Held { until: Timestamp },
    /// The resource is not limited (any more): nothing was written.
    NotLimited,
    /// Nothing was written: this counter would have passed its ceiling.
    Denied { counter: String },
}

/// Limits admission enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnLimits {
    /// Active turns one caller may have at once (2).
    pub active_per_caller: u64,
    /// Turns one caller may start per hour bucket (60).
    pub turns_per_hour: u64,
    /// Conversation ids one caller may create (10,000).
    pub conversations_per_caller: u64,
    /// How long a conversation accepts turns after it starts (24 hours).
    pub lifetime_ms: i64,
}

/// A turn asking to be admitted.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmitTurn {
    pub caller_scope: CallerScope,
    pub conversation_id: String,
    pub request_id: String,
    pub input_digest: String,
    pub expected_version: u64,
    pub fingerprint: String,
    pub server_exception: Value,
    pub now: Timestamp,
    /// The hour bucket the turn counts in (`2026-12-01T12`).
    pub hour: String,
    pub limits: TurnLimits,
}

/// Why a turn was not admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The `request_id` was used with another input.
    RequestIdReused,
    /// A turn of this conversation is being answered.
    TurnActive,
    /// `expected_version` is not the conversation's version.
    VersionConflict { current: u64 },
    /// The context refs, their contracts or the provider changed since the conversation began.
    FingerprintChanged,
    /// The conversation no longer accepts turns.
    Expired,
    /// The caller has as many conversation ids as allowed.
    TooManyConversations,
    /// The caller has as many active turns as allowed.
    TooManyActiveTurns,
    /// The caller has started as many turns this hour as allowed.
    HourlyTurnsExhausted,
}

/// What admission decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// The turn is active: the caller's active-turn and hourly counters moved, the conversation
    /// (created when new) names it as its active request.
    Admitted(TurnRecord),
    /// The same `request_id` with the same input: the stored turn (sealed, or still active).
    Existing(TurnRecord),
    Refused(Refusal),
}

/// A turn's end: its response, and what the transcript gains.
#[derive(Clone, Debug, PartialEq)]
pub struct SealTurn {
    pub caller_scope: CallerScope,
    pub conversation_id: String,
    pub request_id: String,
    pub answer_class: AnswerClass,
    pub response: Value,
    /// Messages appended to the transcript (the caller's message and the outcome).
    pub transcript_append: Vec<Value>,
    /// The turn's private authorization record as it ended, when the turn added to it (an
    /// uncertain failover); `None` keeps the admission's record.
    pub server_exception: Option<Value>,
    pub now: Timestamp,
}

impl ConversationRecord {
    /// Whether a turn may still be admitted at `now`.
    pub fn accepts_turns_at(&self, now: Timestamp) -> bool {
        !self.expired && now < self.expires_at
    }
}

/// The counter of conversation ids the caller has created (never given back: ids are not
/// reused).
pub fn conversations_counter(scope: &CallerScope) -> String {
    format!("conversations:{}", scope.as_str())
}

/// The counter of the caller's active turns.
pub fn active_turns_counter(scope: &CallerScope) -> String {
    format!("active:{}", scope.as_str())
}

/// The counter of turns the caller started in hour bucket `hour`.
pub fn hourly_turns_counter(scope: &CallerScope, hour: &str) -> String {
    format!("turns:{}:{hour}", scope.as_str())
}

/// What admission decides before any counter moves, in the contract's order: the request id's
/// replay (`existing` with the same input) or reuse, expiry, the active turn, the version, the
/// fingerprint. `conversation` is `None` for a conversation not stored yet (its version is 0).
/// `None`: go on to the counters.
pub fn decide_before_counters(
    admit: &AdmitTurn,
    conversation: Option<&ConversationRecord>,
    existing: Option<TurnRecord>,
) -> Option<Admission> {
    if let Some(turn) = existing {
        return Some(if turn.input_digest == admit.input_digest {
            Admission::Existing(turn)
        } else {
            Admission::Refused(Refusal::RequestIdReused)
        });
    }
    let refusal = match conversation {
        None if admit.expected_version != 0 => Refusal::VersionConflict { current: 0 },
        None => return None,
        Some(c) if !c.accepts_turns_at(admit.now) => Refusal::Expired,
        Some(c) if c.active_request_id.is_some() => Refusal::TurnActive,
        Some(c) if c.version != admit.expected_version => {
            Refusal::VersionConflict { current: c.version }
        }
        Some(c) if c.fingerprint != admit.fingerprint => Refusal::FingerprintChanged,
        Some(_) => return None,
    };
    Some(Admission::Refused(refusal))
}

/// The counters admission moves, each by one, in the order they are checked, with the refusal
/// when one is at its limit: the new conversation id (only for a conversation not stored yet),
/// the active turns, the turns of the hour.
pub fn admission_charges(
    admit: &AdmitTurn,
    new_conversation: bool,
) -> Vec<(LedgerCharge, Refusal)> {
    let scope = &admit.caller_scope;
    let limits = &admit.limits;
    let one = |counter: String, ceiling: u64| LedgerCharge {
        counter,
        amount: 1,
        ceiling,
    };
    let mut charges = Vec::with_capacity(3);
    if new_conversation {
        charges.push((
            one(
                conversations_counter(scope),
                limits.conversations_per_caller,
            ),
            Refusal::TooManyConversations,
        ));
    }
    charges.push((
        one(active_turns_counter(scope), limits.active_per_caller),
        Refusal::TooManyActiveTurns,
    ));
    charges.push((
        one(
            hourly_turns_counter(scope, &admit.hour),
            limits.turns_per_hour,
        ),
        Refusal::HourlyTurnsExhausted,
    ));
    charges
}

/// The conversation an admission creates: version 0, an empty transcript, accepting turns for
/// the limits' lifetime from `now` (its active request is set once the turn is admitted).
pub fn new_conversation(admit: &AdmitTurn) -> ConversationRecord {
    ConversationRecord {
        caller_scope: admit.caller_scope.clone(),
        conversation_id: admit.conversation_id.clone(),
        version: 0,
        fingerprint: admit.fingerprint.clone(),
        transcript: Some(Value::Array(Vec::new())),
        active_request_id: None,
        created_at: admit.now,
        expires_at: admit.now.plus_millis(admit.limits.lifetime_ms),
        expired: false,
    }
}

/// The turn an admission writes, active at the conversation's `version_before`.
pub fn admitted_turn(admit: &AdmitTurn, version_before: u64) -> TurnRecord {
    TurnRecord {
        caller_scope: admit.caller_scope.clone(),
        conversation_id: admit.conversation_id.clone(),
        request_id: admit.request_id.clone(),
        input_digest: admit.input_digest.clone(),
        status: TurnStatus::Active,
        version_before,
        server_exception: admit.server_exception.clone(),
        answer_class: None,
        response: None,
        created_at: admit.now,
        sealed_at: None,
    }
}

/// `transcript` with `append` added at its end; an expired conversation's (`None`) stays
/// `None`.
pub fn extend_transcript(
    transcript: Option<Value>,
    append: &[Value],
) -> StoreResult<Option<Value>> {
    match transcript {
        None => Ok(None),
        Some(Value::Array(mut messages)) => {
            messages.extend_from_slice(append);
            Ok(Some(Value::Array(messages)))
        }
        Some(_) => Err(StoreError::Corrupt("a transcript is not a list".into())),
    }
}

#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// Admits a turn in one transaction, deciding in this order: the request id's replay
    /// (`Existing`, nothing moves) or reuse, expiry, the active turn, the version (a conversation
    /// not stored yet has version 0), the fingerprint ([`decide_before_counters`]); then the
    /// caller's counters, each by one within its limit ([`admission_charges`]: a new
    /// conversation id, active turns, the hour's turns); then the turn row, active, and the
    /// conversation (created when new, see [`new_conversation`]) naming it as its active
    /// request. A refusal writes nothing: no conversation row, no counter.
    async fn admit_turn(&self, admit: &AdmitTurn) -> StoreResult<Admission>;

    /// Inserts or replaces one attempt's record.
    async fn put_attempt(&self, attempt: &AttemptRecord) -> StoreResult<()>;

    /// Whether [`ConversationStore::reserve`] holds the caller's own counters before the shared
    /// ones are answered for, in two steps (the edge's per-caller objects and their
    /// coordinator): the attempt is then recorded as `pending` in between. False where one
    /// transaction does both.
    fn reserves_in_two_steps(&self) -> bool {
        false
    }

    /// Adds every charge, or none when one would pass its ceiling; one transaction. A charge
    /// that brings its counter exactly to the ceiling is added. Charges on one counter add up
    /// in the order given; when several would pass, `Denied` names the first in that order.
    /// Concurrent reservations never lose an update nor pass a ceiling together.
    async fn reserve(&self, charges: &[LedgerCharge]) -> StoreResult<Reserved>;

    /// Takes back charges known to be unspent (never below zero).
    async fn release(&self, charges: &[LedgerCharge]) -> StoreResult<()>;

    /// Seals an active turn in one transaction: its response, the conversation's next version
    /// and transcript (gaining `transcript_append`), no active request, the caller's active
    /// slot freed (never below zero). `Ok(false)` when it is not an active turn of this caller
    /// (another process sealed it first, or it does not exist): nothing is written.
    async fn seal_turn(&self, seal: &SealTurn) -> StoreResult<bool>;

    async fn conversation(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationRecord>>;

    async fn turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Option<TurnRecord>>;

    /// The conversation's most recent turns, newest first (by the version they were admitted
    /// at).
    async fn recent_turns(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>>;

    /// A turn's attempts, in order.
    async fn attempts(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Vec<AttemptRecord>>;

    /// Active turns admitted before `admitted_before`, any caller, oldest first (the sweeper).
    async fn unfinished_turns(
        &self,
        admitted_before: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>>;

    /// Removes the transcripts and responses of up to `limit` conversations expired at `now`
    /// (`expires_at <= now`), not yet expired and with no active turn, soonest expiry first:
    /// they are marked expired, their transcript and every turn's response removed, their ids,
    /// versions and turns' statuses kept (tombstones, so the id stays refused). Returns how many
    /// it expired.
    async fn expire_conversations(&self, now: Timestamp, limit: u32) -> StoreResult<u64>;

    /// When the sweep next has work: the soonest of an active turn's sealing time (admitted
    /// `seal_after_ms` before) and an idle conversation's expiry; `None` when neither exists.
    /// (A Worker's caller object sets its alarm by it; a busy conversation past its expiry is
    /// due once its turn is sealed.)
    async fn next_due(&self, seal_after_ms: i64) -> StoreResult<Option<Timestamp>>;

    /// The counters' current values (0 for one never moved), in the order asked.
    async fn ledger(&self, counters: &[String]) -> StoreResult<Vec<u64>>;

    /// The health records of `resources` that exist, in no particular order.
    async fn health(&self, resources: &[String]) -> StoreResult<Vec<HealthRecord>>;

    /// Every health record, by resource (the operator's summary).
    async fn all_health(&self) -> StoreResult<Vec<HealthRecord>>;

    /// Records a limit: inserted, or replacing the stored record when that one was observed at
    /// or before this one (its probe lease ends with it). `Ok(false)`: a newer limit is stored
    /// and nothing was written.
    async fn limit(&self, record: &HealthRecord) -> StoreResult<bool>;

    /// A success observed at `observed_at` clears the resource's record only when the record
    /// was observed at or before it: a stale success never clears a newer limit.
    async fn clear_health(&self, resource: &str, observed_at: Timestamp) -> StoreResult<bool>;

    /// Admits `probe_id` as the one recovery probe of `resource`, together with its charges,
    /// in one transaction: only when the resource's delay has passed (`until <= now`) and no
    /// lease is out. Concurrent callers on any process: at most one is admitted.
    async fn reserve_probe(
        &self,
        resource: &str,
        probe_id: &str,
        lease_until: Timestamp,
        now: Timestamp,
        charges: &[LedgerCharge],
    ) -> StoreResult<ProbeReservation>;

    /// Replaces the record of `resource` with `record` only while its lease is `probe_id`'s
    /// (an expired probe becomes uncertain once, whoever notices it first).
    async fn expire_probe(&self, probe_id: &str, record: &HealthRecord) -> StoreResult<bool>;
}

#[cfg(test)]
mod tests {
    use herma_core::key::KeyId;
    use serde_json::json;

    use super::*;

    fn scope() -> CallerScope {
        CallerScope::for_key(&KeyId::parse("00000000000000aa").unwrap())
    }

    fn admit() -> AdmitTurn {
        AdmitTurn {
            caller_scope: scope(),
            conversation_id: "c".into(),
            request_id: "r2".into(),
            input_digest: "d2".into(),
            expected_version: 1,
            fingerprint: "fp".into(),
            server_exception: json!({}),
            now: Timestamp::from_millis(100),
            hour: "2026-12-01T12".into(),
            limits: TurnLimits {
                active_per_caller: 2,
                turns_per_hour: 60,
                conversations_per_caller: 10_000,
                lifetime_ms: 1_000,
            },
        }
    }

    fn stored() -> ConversationRecord {
        ConversationRecord {
            version: 1,
            ..new_conversation(&admit())
        }
    }

    #[test]
    fn admission_decides_replay_then_expiry_then_activity_then_version_then_fingerprint() {
        let replay = admitted_turn(&admit(), 1);
        let other_input = TurnRecord {
            input_digest: "d1".into(),
            ..replay.clone()
        };
        let everything_wrong = ConversationRecord {
            version: 7,
            fingerprint: "other".into(),
            active_request_id: Some("r1".into()),
            expired: true,
            ..stored()
        };
        let cases: Vec<(
            &str,
            ConversationRecord,
            Option<TurnRecord>,
            Option<Admission>,
        )> = vec![
            (
                "replay",
                everything_wrong.clone(),
                Some(replay.clone()),
                Some(Admission::Existing(replay)),
            ),
            (
                "reuse",
                everything_wrong.clone(),
                Some(other_input),
                Some(Admission::Refused(Refusal::RequestIdReused)),
            ),
            (
                "expired",
                everything_wrong.clone(),
                None,
                Some(Admission::Refused(Refusal::Expired)),
            ),
            (
                "past its expiry",
                ConversationRecord {
                    expires_at: Timestamp::from_millis(100),
                    ..stored()
                },
                None,
                Some(Admission::Refused(Refusal::Expired)),
            ),
            (
                "active",
                ConversationRecord {
                    expired: false,
                    ..everything_wrong.clone()
                },
                None,
                Some(Admission::Refused(Refusal::TurnActive)),
            ),
            (
                "stale",
                ConversationRecord {
                    expired: false,
                    active_request_id: None,
                    ..everything_wrong
                },
                None,
                Some(Admission::Refused(Refusal::VersionConflict { current: 7 })),
            ),
            (
                "fingerprint",
                ConversationRecord {
                    fingerprint: "other".into(),
                    ..stored()
                },
                None,
                Some(Admission::Refused(Refusal::FingerprintChanged)),
            ),
            ("admissible", stored(), None, None),
        ];
        for (name, conversation, existing, expected) in cases {
            assert_eq!(
                decide_before_counters(&admit(), Some(&conversation), existing),
                expected,
                "{name}"
            );
        }
        assert_eq!(
            decide_before_counters(&admit(), None, None),
            Some(Admission::Refused(Refusal::VersionConflict { current: 0 }))
        );
        let first = AdmitTurn {
            expected_version: 0,
            ..admit()
        };
        assert_eq!(decide_before_counters(&first, None, None), None);
    }

    #[test]
    fn a_new_conversation_also_counts_its_id_first() {
        let counters = |new| {
            admission_charges(&admit(), new)
                .into_iter()
                .map(|(charge, refusal)| (charge.counter, charge.ceiling, refusal))
                .collect::<Vec<_>>()
        };
        let s = scope();
        assert_eq!(
            counters(true),
            [
                (
                    format!("conversations:{}", s.as_str()),
                    10_000,
                    Refusal::TooManyConversations
                ),
                (
                    format!("active:{}", s.as_str()),
                    2,
                    Refusal::TooManyActiveTurns
                ),
                (
                    format!("turns:{}:2026-12-01T12", s.as_str()),
                    60,
                    Refusal::HourlyTurnsExhausted
                ),
            ]
        );
        assert_eq!(counters(false).len(), 2);
    }

    #[test]
    fn only_the_providers_budgets_and_daily_calls_are_shared_counters() {
        let scope = scope();
        for shared in ["provider:meta", "calls:ollama:2026-12-01"] {
            assert!(is_shared_counter(shared), "{shared}");
        }
        for own in [
            conversations_counter(&scope),
            active_turns_counter(&scope),
            hourly_turns_counter(&scope, "2026-12-01T12"),
            format!("caller_tokens:{scope}:2026-12-01T12"),
        ] {
            assert!(!is_shared_counter(&own), "{own}");
        }
    }

    #[test]
    fn a_charges_room_is_its_ceiling_less_its_amount() {
        let charge = |amount, ceiling| LedgerCharge {
            counter: "c".into(),
            amount,
            ceiling,
        };
        assert_eq!(charge(100_000, 2_010_000).room(), Some(1_910_000));
        assert_eq!(charge(5, 5).room(), Some(0));
        assert_eq!(charge(6, 5).room(), None);
        assert_eq!(
            charge(1, u64::MAX).room(),
            Some(i64::MAX.unsigned_abs() - 1)
        );
    }

    #[test]
    fn sealing_extends_the_transcript_and_leaves_a_tombstone_alone() {
        let append = [json!({"role": "user"}), json!({"outcome": "ready"})];
        assert_eq!(
            extend_transcript(Some(json!([1])), &append).unwrap(),
            Some(json!([1, {"role": "user"}, {"outcome": "ready"}]))
        );
        assert_eq!(extend_transcript(None, &append).unwrap(), None);
        assert!(extend_transcript(Some(json!({})), &append).is_err());
    }
}
