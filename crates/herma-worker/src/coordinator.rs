//! The coordinator's protocol: what a caller's object asks the one `WorkReasoningBudget` object
//! about the records every caller shares — the shared ledger counters (providers' budgets,
//! Ollama's calls of a UTC day), provider health, identity holds and probe leases — and
//! [`Split`], a caller's conversation port: its own records in its own object, the shared ones
//! at the coordinator.
//!
//! A reservation with both kinds of charges is two steps: the caller's own counters (its hourly
//! tokens) are held in its object first — the attempt is recorded as `pending` meanwhile
//! ([`ConversationStore::reserves_in_two_steps`]) — then the coordinator reserves the shared
//! ones; a denial or a failure there gives the caller's back. A failure after the coordinator
//! may have reserved keeps what it reserved: money is held, never spent twice.

use std::sync::Arc;

use async_trait::async_trait;
use herma_core::{CallerScope, Timestamp};
use herma_store::conversations::*;
use herma_store::{StoreError, StoreResult};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use worker::send::{SendFuture, SendWrapper};
use worker::{Method, ObjectNamespace, Request, RequestInit};

use crate::dosql::Atomic;

/// The coordinator's binding (`wrangler.toml`) and its one object's name.
pub const BINDING: &str = "WORK_REASONING_BUDGET";
pub const NAME: &str = "global";

/// The path a caller's object posts its questions to (never one the Worker forwards).
pub const PATH: &str = "/_herma/coordinator";

/// One question to the coordinator.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case", deny_unknown_fields)]
pub enum Call {
    Reserve {
        charges: Vec<LedgerCharge>,
    },
    Release {
        charges: Vec<LedgerCharge>,
    },
    Ledger {
        counters: Vec<String>,
    },
    Health {
        resources: Vec<String>,
    },
    AllHealth,
    Limit {
        record: HealthRecord,
    },
    ClearHealth {
        resource: String,
        observed_at: Timestamp,
    },
    ReserveProbe {
        resource: String,
        probe_id: String,
        lease_until: Timestamp,
        now: Timestamp,
        charges: Vec<LedgerCharge>,
    },
    ExpireProbe {
        probe_id: String,
        record: HealthRecord,
    },
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Reserve { .. } => "reserve",
            Call::Release { .. } => "release",
            Call::Ledger { .. } => "ledger",
            Call::Health { .. } => "health",
            Call::AllHealth => "all_health",
            Call::Limit { .. } => "limit",
            Call::ClearHealth { .. } => "clear_health",
            Call::ReserveProbe { .. } => "reserve_probe",
            Call::ExpireProbe { .. } => "expire_probe",
        }
    }
}

/// The coordinator's answer: the call's value, or why it failed.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Reply {
    Ok(Value),
    Error(String),
}

/// `bytes` read by herma-core's strict reader (no duplicate members, bounded depth), then as
/// a `T`.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let value = herma_core::json::parse_strict(bytes).map_err(|problem| problem.detail)?;
    serde_json::from_value(value).map_err(|err| err.to_string())
}

fn to_value<T: Serialize>(value: T) -> StoreResult<Value> {
    serde_json::to_value(value).map_err(|e| StoreError::Backend(e.to_string()))
}

/// Answers `body` (a [`Call`]) on the coordinator's own ports.
pub async fn answer(ports: &Atomic, body: &[u8]) -> Vec<u8> {
    let reply = match parse::<Call>(body) {
        Err(err) => Reply::Error(format!("not a coordinator call: {err}")),
        Ok(call) => match run(ports, call).await {
            Ok(value) => Reply::Ok(value),
            Err(err) => Reply::Error(err.to_string()),
        },
    };
    serde_json::to_vec(&reply).unwrap_or_default()
}

async fn run(ports: &Atomic, call: Call) -> StoreResult<Value> {
    match call {
        Call::Reserve { charges } => to_value(ports.reserve(&charges).await?),
        Call::Release { charges } => to_value(ports.release(&charges).await?),
        Call::Ledger { counters } => to_value(ports.ledger(&counters).await?),
        Call::Health { resources } => to_value(ports.health(&resources).await?),
        Call::AllHealth => to_value(ports.all_health().await?),
        Call::Limit { record } => to_value(ports.limit(&record).await?),
        Call::ClearHealth {
            resource,
            observed_at,
        } => to_value(ports.clear_health(&resource, observed_at).await?),
        Call::ReserveProbe {
            resource,
            probe_id,
            lease_until,
            now,
            charges,
        } => to_value(
            ports
                .reserve_probe(&resource, &probe_id, lease_until, now, &charges)
                .await?,
        ),
        Call::ExpireProbe { probe_id, record } => {
            to_value(ports.expire_probe(&probe_id, &record).await?)
        }
    }
}

/// The coordinator as a caller's object reaches it: its binding.
pub struct Coordinator {
    namespace: SendWrapper<ObjectNamespace>,
}

fn unreachable(err: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("the WorkReasoningBudget coordinator: {err}"))
}

impl Coordinator {
    pub fn new(namespace: ObjectNamespace) -> Self {
        Self {
            namespace: SendWrapper::new(namespace),
        }
    }

    /// Asks the coordinator; a failure is logged with what was asked.
    async fn call<T: DeserializeOwned>(&self, call: Call) -> StoreResult<T> {
        let what = call.name();
        self.ask(call).await.inspect_err(|err| {
            worker::console_error!("asking the coordinator ({what}): {err}");
        })
    }

    async fn ask<T: DeserializeOwned>(&self, call: Call) -> StoreResult<T> {
        let body = serde_json::to_string(&call).map_err(unreachable)?;
        let namespace = &self.namespace;
        let reply = SendFuture::new(async move {
            let stub = namespace.get_by_name(NAME).map_err(unreachable)?;
            let mut init = RequestInit::new();
            init.with_method(Method::Post).with_body(Some(body.into()));
            let request = Request::new_with_init(&format!("https://coordinator{PATH}"), &init)
                .map_err(unreachable)?;
            let mut response = stub
                .fetch_with_request(request)
                .await
                .map_err(unreachable)?;
            response.bytes().await.map_err(unreachable)
        })
        .await?;
        match parse::<Reply>(&reply).map_err(unreachable)? {
            Reply::Ok(value) => serde_json::from_value(value).map_err(unreachable),
            Reply::Error(err) => Err(unreachable(err)),
        }
    }
}

/// A caller's conversation port: [`Atomic`] in its own object, the shared records at the
/// [`Coordinator`].
pub struct Split {
    pub own: Arc<Atomic>,
    pub shared: Coordinator,
}

/// `charges` cut into the caller's own and the shared, each in its order.
fn partition(charges: &[LedgerCharge]) -> (Vec<LedgerCharge>, Vec<LedgerCharge>) {
    charges
        .iter()
        .cloned()
        .partition(|c| !is_shared_counter(&c.counter))
}

impl Split {
    /// Gives the caller's own held charges back after the coordinator did not take the rest;
    /// `outcome` is what the caller is told either way.
    async fn give_back<T>(&self, own: &[LedgerCharge], outcome: StoreResult<T>) -> StoreResult<T> {
        if !own.is_empty()
            && let Err(err) = self.own.release(own).await
        {
            worker::console_error!("giving a caller's held charges back failed: {err}");
        }
        outcome
    }
}

#[async_trait]
impl ConversationStore for Split {
    async fn admit_turn(&self, admit: &AdmitTurn) -> StoreResult<Admission> {
        self.own.admit_turn(admit).await
    }

    async fn put_attempt(&self, attempt: &AttemptRecord) -> StoreResult<()> {
        self.own.put_attempt(attempt).await
    }

    fn reserves_in_two_steps(&self) -> bool {
        true
    }

    async fn reserve(&self, charges: &[LedgerCharge]) -> StoreResult<Reserved> {
        let (own, shared) = partition(charges);
        if !own.is_empty()
            && let denied @ Reserved::Denied { .. } = self.own.reserve(&own).await?
        {
            return Ok(denied);
        }
        if shared.is_empty() {
            return Ok(Reserved::All);
        }
        match self.shared.call(Call::Reserve { charges: shared }).await {
            Ok(Reserved::All) => Ok(Reserved::All),
            other => self.give_back(&own, other).await,
        }
    }

    async fn release(&self, charges: &[LedgerCharge]) -> StoreResult<()> {
        let (own, shared) = partition(charges);
        if !shared.is_empty() {
            self.shared
                .call::<()>(Call::Release { charges: shared })
                .await?;
        }
        self.own.release(&own).await
    }

    async fn seal_turn(&self, seal: &SealTurn) -> StoreResult<bool> {
        self.own.seal_turn(seal).await
    }

    async fn conversation(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationRecord>> {
        self.own.conversation(scope, conversation_id).await
    }

    async fn turn(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Option<TurnRecord>> {
        self.own.turn(scope, conversation_id, request_id).await
    }

    async fn recent_turns(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>> {
        self.own.recent_turns(scope, conversation_id, limit).await
    }

    async fn attempts(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
        request_id: &str,
    ) -> StoreResult<Vec<AttemptRecord>> {
        self.own.attempts(scope, conversation_id, request_id).await
    }

    async fn unfinished_turns(
        &self,
        admitted_before: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<TurnRecord>> {
        self.own.unfinished_turns(admitted_before, limit).await
    }

    async fn expire_conversations(&self, now: Timestamp, limit: u32) -> StoreResult<u64> {
        self.own.expire_conversations(now, limit).await
    }

    async fn next_due(&self, seal_after_ms: i64) -> StoreResult<Option<Timestamp>> {
        self.own.next_due(seal_after_ms).await
    }

    async fn ledger(&self, counters: &[String]) -> StoreResult<Vec<u64>> {
        let (shared, own): (Vec<(usize, &String)>, Vec<(usize, &String)>) = counters
            .iter()
            .enumerate()
            .partition(|(_, c)| is_shared_counter(c));
        let mut values = vec![0; counters.len()];
        let names = |part: &[(usize, &String)]| -> Vec<String> {
            part.iter().map(|(_, c)| (*c).clone()).collect()
        };
        if !own.is_empty() {
            let found = self.own.ledger(&names(&own)).await?;
            for ((at, _), value) in own.iter().zip(found) {
                values[*at] = value;
            }
        }
        if !shared.is_empty() {
            let found: Vec<u64> = self
                .shared
                .call(Call::Ledger {
                    counters: names(&shared),
                })
                .await?;
            for ((at, _), value) in shared.iter().zip(found) {
                values[*at] = value;
            }
        }
        Ok(values)
    }

    async fn health(&self, resources: &[String]) -> StoreResult<Vec<HealthRecord>> {
        self.shared
            .call(Call::Health {
                resources: resources.to_vec(),
            })
            .await
    }

    async fn all_health(&self) -> StoreResult<Vec<HealthRecord>> {
        self.shared.call(Call::AllHealth).await
    }

    async fn limit(&self, record: &HealthRecord) -> StoreResult<bool> {
        self.shared
            .call(Call::Limit {
                record: record.clone(),
            })
            .await
    }

    async fn clear_health(&self, resource: &str, observed_at: Timestamp) -> StoreResult<bool> {
        self.shared
            .call(Call::ClearHealth {
                resource: resource.to_owned(),
                observed_at,
            })
            .await
    }

    async fn reserve_probe(
        &self,
        resource: &str,
        probe_id: &str,
        lease_until: Timestamp,
        now: Timestamp,
        charges: &[LedgerCharge],
    ) -> StoreResult<ProbeReservation> {
        let (own, shared) = partition(charges);
        if !own.is_empty()
            && let Reserved::Denied { counter } = self.own.reserve(&own).await?
        {
            return Ok(ProbeReservation::Denied { counter });
        }
        let probe = Call::ReserveProbe {
            resource: resource.to_owned(),
            probe_id: probe_id.to_owned(),
            lease_until,
            now,
            charges: shared,
        };
        match self.shared.call(probe).await {
            Ok(ProbeReservation::Admitted) => Ok(ProbeReservation::Admitted),
            other => self.give_back(&own, other).await,
        }
    }

    async fn expire_probe(&self, probe_id: &str, record: &HealthRecord) -> StoreResult<bool> {
        self.shared
            .call(Call::ExpireProbe {
                probe_id: probe_id.to_owned(),
                record: record.clone(),
            })
            .await
    }
}
