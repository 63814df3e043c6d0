//! Typed work conversations: one operator-funded turn, from the caller's body to a sealed,
//! replayable answer — `clarify`, `ready` or `blocked`, always `executed: false`.
//!
//! A turn, in order (every refusal before the turn record writes nothing):
//! 1. enabled, the body valid, the provider's configuration in the fixed outcome order
//!    ([`herma_core::conversation::config`]), the caller's own exact grant;
//! 2. the named context entries (work contracts become tools), the model request, its 32 KiB
//!    bound;
//! 3. admission: replay or conflict of the request id, version, active turn, fingerprint,
//!    expiry, the caller's limits — with the private `server_exception` record;
//! 4. the attempt, persisted before dispatch: the credential (a missing key is a recorded
//!    `provider_not_configured` attempt, never another key), the reservation (provider dollars,
//!    caller tokens, Ollama's daily calls: all or nothing, shared by every process), then one
//!    governed step call under the turn's operation root, whose cap is the reservation;
//! 5. the answer read locally and the turn sealed with it.
//!
//! A turn left unfinished (a crash, a hung provider) is sealed by [`App::sweep_conversations`]
//! two minutes after admission as `provider_outcome_uncertain`, never retried; the sweeper also
//! runs at start-up, so another process seals a dead one's turns. Reservations are not
//! refunded on a guess: an uncertain attempt keeps its reservation.

use std::sync::Arc;
use std::time::Duration;

use herma_core::call::{Controls, Role, ToolChoice};
use herma_core::conversation::config::{self, Pricing, ProviderConfig, Reservation};
use herma_core::conversation::contract::{WorkContract, parse_work_contract};
use herma_core::conversation::failover::{self, Failover, NextChoice, Permissions, StepEnd};
use herma_core::conversation::grants::{GrantChoice, Grants};
use herma_core::conversation::health::{self, Finished, Gate, Recovery, Resources, SkipReason};
use herma_core::conversation::plan::{self, PlanEntry, ProviderPlan};
use herma_core::conversation::providers::{AttemptOutcome, MAX_REQUEST_BYTES};
use herma_core::conversation::turn::{
    self, Outcome, ProposedCall, TranscriptMessage, TurnBody, TurnContext,
};
use herma_core::gate::Principal;
use herma_core::model::ContextEntrySpec;
use herma_core::problem::{FieldError, Problem, ProblemCode};
use herma_core::{CallerScope, Timestamp};
use herma_governed::{
    Cap, CapMode, Caps, GovernedStepRunner, LoadedRequest, OperationCallInput, Prices, StepConfig,
    StepRun, ViewState,
};
use herma_providers::conversation::{ConversationClient, DispatchReport};
use herma_store::conversations::{
    Admission, AdmitTurn, AnswerClass, AttemptRecord, LedgerCharge, ProbeReservation, Refusal,
    Reserved, SealTurn, TurnLimits, TurnRecord, TurnStatus,
};
use herma_store::governed::{RootRecord, RootStatus};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::App;
use crate::records::own_scope;

/// The seed's limits.
pub const LIMITS: TurnLimits = TurnLimits {
    active_per_caller: 2,
    turns_per_hour: 60,
    conversations_per_caller: 10_000,
    lifetime_ms: 24 * 3600 * 1000,
};
/// An unfinished turn is sealed this long after admission.
pub const SEAL_AFTER_MS: i64 = 120_000;
/// How long one attempt may take natively (below the sealing age, so a live attempt is never
/// sealed). A Worker bounds each dispatch to [`EDGE_ATTEMPT_TIMEOUT`] ([`App::attempt_timeout`]).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(100);
/// How long one attempt may take at the edge: the seed's 25-second dispatch.
pub const EDGE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(25);
/// A further attempt of a planned turn starts only with at least this long before the
/// turn's boundary.
pub const MIN_ATTEMPT_MS: i64 = 10_000;
/// How many recent turns `GET /v1/conversations/{id}` shows.
pub const RECENT_TURNS: u32 = 20;

/// What a turn answered.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnAnswer {
    pub body: Value,
    /// A spending ceiling refused the turn (the transport answers 429, on replays too).
    pub budget_denied: bool,
    /// The answer was stored earlier: no model was called now.
    pub replayed: bool,
}

fn internal(err: impl std::fmt::Display) -> Problem {
    tracing::error!(error = %err, "conversation store failed");
    Problem::new(
        ProblemCode::Unavailable,
        "the conversation store is unavailable; the turn was not completed",
    )
}

fn conflict(detail: impl Into<String>, reason: &str) -> Problem {
    Problem::new(ProblemCode::ConversationConflict, detail).with_extension("reason", json!(reason))
}

fn refusal_problem(refusal: Refusal) -> Problem {
    match refusal {
        Refusal::RequestIdReused => conflict(
            "this request_id was used with another input; send a new request_id",
            "request_id_reused",
        ),
        Refusal::TurnActive => conflict(
            "a turn of this conversation is being answered; retry when it is done",
            "turn_active",
        ),
        Refusal::VersionConflict { current } => conflict(
            format!("expected_version is stale; the conversation is at version {current}"),
            "version_conflict",
        )
        .with_extension("current_version", json!(current)),
        Refusal::FingerprintChanged => conflict(
            "the conversation's context, contracts or provider changed since it began; start a new conversation",
            "contract_changed",
        ),
        Refusal::Expired => Problem::new(
            ProblemCode::ConversationExpired,
            "this conversation no longer accepts turns (24 hours after it began); start a new conversation id",
        ),
        Refusal::TooManyConversations => Problem::new(
            ProblemCode::ConversationLimit,
            "this key has created as many conversation ids as allowed (10,000); ask the operator",
        )
        .with_extension("reason", json!("conversation_ids")),
        Refusal::TooManyActiveTurns => Problem::new(
            ProblemCode::ConversationLimit,
            "this key has two turns being answered; retry when one is done",
        )
        .with_extension("reason", json!("active_turns")),
        Refusal::HourlyTurnsExhausted => Problem::new(
            ProblemCode::ConversationLimit,
            "this key has started 60 turns this hour; retry in the next hour",
        )
        .with_extension("reason", json!("turns_per_hour")),
    }
}

/// A short stable key from parts (ids the governed engine accepts).
fn digest_key(prefix: &str, parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    format!("{prefix}-{}", &hex::encode(hasher.finalize())[..40])
}

fn hour_of(now: Timestamp) -> String {
    now.to_rfc3339().chars().take(13).collect()
}

fn day_of(now: Timestamp) -> String {
    now.to_rfc3339().chars().take(10).collect()
}

/// The charges one attempt reserves, all or nothing.
fn charges(
    scope: &CallerScope,
    config: &ProviderConfig,
    reservation: Reservation,
    caller_tokens_per_hour: Option<u64>,
    now: Timestamp,
) -> Vec<LedgerCharge> {
    let mut charges = Vec::new();
    match config.pricing {
        Pricing::Metered { budget_micros, .. } => charges.push(LedgerCharge {
            counter: format!("provider:{}", config.provider.as_str()),
            amount: reservation.micros.unwrap_or(u64::MAX),
            ceiling: budget_micros,
        }),
        Pricing::Calls { per_day } => charges.push(LedgerCharge {
            counter: format!("calls:{}:{}", config.provider.as_str(), day_of(now)),
            amount: 1,
            ceiling: per_day,
        }),
    }
    if let Some(ceiling) = caller_tokens_per_hour {
        charges.push(LedgerCharge {
            counter: format!("caller_tokens:{scope}:{}", hour_of(now)),
            amount: reservation.tokens,
            ceiling,
        });
    }
    charges
}

/// The governed prices of a configuration: micros per million tokens are picodollars per token.
fn prices(config: &ProviderConfig) -> Prices {
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    match config.pricing {
        Pricing::Metered { tariff, .. } => Prices {
            input_per_mtok: signed(tariff.input_picos_per_token),
            output_per_mtok: signed(tariff.output_picos_per_token),
            cache_read_per_mtok: signed(tariff.cached_input_picos_per_token),
            // Cache writes are never asked for; priced at twice the input if a provider reports
            // them anyway.
            cache_write_per_mtok: signed(tariff.input_picos_per_token.saturating_mul(2)),
        },
        Pricing::Calls { .. } => Prices {
            input_per_mtok: 0,
            output_per_mtok: 0,
            cache_read_per_mtok: 0,
            cache_write_per_mtok: 0,
        },
    }
}

/// The named context entries, in order: work contracts and reference entries.
struct Named {
    context: Vec<TurnContext>,
    contracts: Vec<WorkContract>,
    references: Vec<TurnContext>,
}

impl App {
    /// Answers one turn (or replays its stored answer).
    pub async fn conversation_turn(
        &self,
        principal: &Principal,
        body: TurnBody,
    ) -> Result<TurnAnswer, Problem> {
        let conversation = &self.settings.conversation;
        if !conversation.enabled {
            return Err(Problem::new(
                ProblemCode::ConversationDisabled,
                "typed conversations are disabled on this server; the operator enables them with HERMA_CONVERSATION_ENABLED=true",
            ));
        }
        let scope = own_scope(principal)?.clone();
        body.validate()?;
        let grants = config::grants(&conversation.env)?;
        let route = self.route(principal, &scope, &grants, &body).await?;
        let caller_tokens = config::caller_tokens_per_hour(&conversation.env)?;
        let Some(governed) = self.governed.clone() else {
            return Err(Problem::new(
                ProblemCode::Unavailable,
                "this server has no governed store for operator-funded turns",
            ));
        };

        let named = self.named_context(principal, &route.model_refs).await?;
        let mut kept = named.context.clone();
        kept.extend(route.plan.as_ref().map(|plan| plan.context.clone()));
        let fingerprint = turn::fingerprint(body.provider, &route.first_model, &kept);
        let existing = self
            .conversations
            .conversation(&scope, &body.conversation_id)
            .await
            .map_err(internal)?;
        let transcript: Vec<TranscriptMessage> = existing
            .as_ref()
            .and_then(|c| c.transcript.clone())
            .map(serde_json::from_value)
            .transpose()
            .map_err(internal)?
            .unwrap_or_default();
        let input = turn::model_input(
            &named.contracts,
            &named.references,
            &transcript,
            &body.message,
        );
        // Every usable choice's request is measured before anything is recorded.
        let mut steps = Vec::with_capacity(route.choices.len());
        for choice in route.choices {
            steps.push(match choice {
                Choice::Ready(config) => {
                    let request_bytes = request_bytes(&config, &input);
                    if request_bytes > MAX_REQUEST_BYTES {
                        return Err(Problem::new(
                            ProblemCode::PayloadTooLarge,
                            format!(
                                "the model request this turn needs for {} is {request_bytes} bytes, over the {MAX_REQUEST_BYTES}-byte limit; name fewer context entries or start a new conversation",
                                config.provider.as_str()
                            ),
                        ));
                    }
                    let reservation = config.reservation(request_bytes as u64);
                    Step::Ready {
                        config,
                        reservation,
                        request_bytes,
                    }
                }
                Choice::NotConfigured(choice) => Step::NotConfigured(choice),
            });
        }
        let now = self.clock.now();
        let server_exception = server_exception(
            principal,
            &scope,
            &body,
            &route.grant,
            route.plan.as_ref(),
            &steps,
            self.attempt_timeout,
        );
        let admitted = self
            .conversations
            .admit_turn(&AdmitTurn {
                caller_scope: scope.clone(),
                conversation_id: body.conversation_id.clone(),
                request_id: body.request_id.clone(),
                input_digest: body.input_digest(),
                expected_version: body.expected_version,
                fingerprint,
                server_exception,
                now,
                hour: hour_of(now),
                limits: LIMITS,
            })
            .await
            .map_err(internal)?;
        let turn = match admitted {
            Admission::Admitted(turn) => turn,
            Admission::Existing(turn) => return replay(&turn),
            Admission::Refused(refusal) => return Err(refusal_problem(refusal)),
        };

        let run = TurnRun {
            scope: &scope,
            body: &body,
            turn: &turn,
            input: &input,
            contracts: &named.contracts,
            governed,
            caller_tokens,
            recovery: Recovery {
                allow_probe: route
                    .plan
                    .as_ref()
                    .is_none_or(|plan| plan.plan.allow_recovery_probe),
                uncertain: route.permissions.uncertain_failover(),
            },
        };
        let mut attempts: Vec<Value> = Vec::new();
        let mut uncertain_failover: Option<Value> = None;
        let mut follows: Option<String> = None;
        let mut last: Option<StepResult> = None;
        for (i, step) in steps.iter().enumerate() {
            let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
            let too_late =
                self.clock.now().as_millis() > attempt_boundary(&turn).as_millis() - MIN_ATTEMPT_MS;
            if n > 1 && (too_late || !self.fence_held(&turn).await?) {
                // Too little of the turn's two minutes is left for another call to finish, or
                // the sweeper sealed the turn: stop here rather than send a call bound to time
                // out as uncertain.
                break;
            }
            let result = self.step(&run, n, step, follows.take()).await?;
            attempts.push(result.record.clone());
            let next = steps.get(i + 1).map(|next| NextChoice {
                independently_budgeted: result
                    .denied_counter
                    .as_deref()
                    .is_none_or(|denied| !next.counters(&run, now).iter().any(|c| c == denied)),
            });
            let decision =
                failover::after_step(StepEnd::Attempt(result.outcome), route.permissions, next);
            let uncertain = matches!(
                result.outcome,
                AttemptOutcome::ProviderOutcomeUncertain | AttemptOutcome::ProviderInvalidResponse
            );
            if uncertain && next.is_some() && route.plan.is_some() {
                let advanced = matches!(decision, Failover::Advance { .. });
                uncertain_failover = Some(json!({
                    "plan_allow_uncertain_outcome": route.permissions.allow_uncertain_outcome,
                    "grant_allow_uncertain_failover": route.permissions.allow_uncertain_failover,
                    "after_attempt_id": result.record["attempt_id"],
                    "result": if advanced { "advanced" } else { "stopped" },
                }));
            }
            let advance = match decision {
                Failover::Advance { follows_uncertain } => {
                    if follows_uncertain {
                        follows = result.record["attempt_id"].as_str().map(str::to_owned);
                    }
                    true
                }
                Failover::Stop => false,
            };
            last = Some(result);
            if !advance {
                break;
            }
        }
        let Some(last) = last else {
            return Err(internal("a turn ended without an attempt"));
        };
        let server_exception = uncertain_failover.map(|record| {
            let mut exception = turn.server_exception.clone();
            exception["uncertain_failover"] = record;
            exception
        });
        self.seal(
            &turn,
            &body,
            last.answer,
            attempts,
            last.budget_denied,
            server_exception,
        )
        .await
    }

    /// The choices a turn may use, in order: the one configured provider of a direct turn, or
    /// the caller's plan (H17).
    async fn route(
        &self,
        principal: &Principal,
        scope: &CallerScope,
        grants: &Grants,
        body: &TurnBody,
    ) -> Result<Route, Problem> {
        let env = &self.settings.conversation.env;
        let Some(plan_ref) = body.provider_plan_ref.as_deref() else {
            let config = ProviderConfig::resolve(env, body.provider)?;
            let grant = grants.admit(scope, &config.choice())?;
            return Ok(Route {
                first_model: config.model.clone(),
                grant: json!({
                    "provider": config.provider.as_str(),
                    "model": config.model,
                    "routing_provider": config.routing_provider,
                    "allow_uncertain_failover": grant.allow_uncertain_failover,
                }),
                choices: vec![Choice::Ready(Box::new(config))],
                permissions: Permissions::default(),
                model_refs: body.context_refs.clone(),
                plan: None,
            });
        };
        let entry = match self
            .get_record::<ContextEntrySpec>(principal, plan_ref)
            .await
        {
            Ok(entry) => entry,
            Err(problem) if problem.code == ProblemCode::NotFound => {
                return Err(Problem::validation(vec![FieldError::new(
                    "/provider_plan_ref",
                    "names no context entry visible to this key",
                )]));
            }
            Err(problem) => return Err(problem),
        };
        let planned = plan::admit_plan_turn(
            scope,
            grants,
            body,
            &PlanEntry {
                id: &entry.spec.id,
                owner: &entry.caller_scope,
                kind: entry.spec.kind.as_str(),
                schema_or_body: &entry.spec.schema_or_body,
            },
        )?;
        let choices = planned
            .plan
            .choices
            .iter()
            .map(
                |choice| match ProviderConfig::resolve(env, choice.provider) {
                    Ok(config) if config.choice() == *choice => Choice::Ready(Box::new(config)),
                    _ => Choice::NotConfigured(choice.clone()),
                },
            )
            .collect();
        let permissions = Permissions::of(&planned);
        Ok(Route {
            first_model: planned
                .plan
                .choices
                .first()
                .map(|c| c.model.clone())
                .unwrap_or_default(),
            grant: json!({
                "choices": planned.plan.choices.iter().map(choice_json).collect::<Vec<_>>(),
                "allow_uncertain_failover": planned.allow_uncertain_failover,
            }),
            choices,
            permissions,
            model_refs: planned.model_refs.clone(),
            plan: Some(RoutePlan {
                context: TurnContext {
                    id: entry.spec.id.clone(),
                    version: entry.version,
                    title: entry.spec.title.clone(),
                    body: entry.spec.schema_or_body.clone(),
                },
                plan: planned.plan,
            }),
        })
    }

    /// Whether the turn is still this request's to answer.
    async fn fence_held(&self, turn: &TurnRecord) -> Result<bool, Problem> {
        let stored = self
            .conversations
            .turn(&turn.caller_scope, &turn.conversation_id, &turn.request_id)
            .await
            .map_err(internal)?;
        Ok(stored.is_some_and(|t| t.status == TurnStatus::Active))
    }

    /// One step of a turn: a recorded skip, or an attempt.
    async fn step(
        &self,
        run: &TurnRun<'_>,
        n: u32,
        step: &Step,
        follows: Option<String>,
    ) -> Result<StepResult, Problem> {
        let (config, reservation, request_bytes) = match step {
            Step::NotConfigured(choice) => {
                let mut record = skip_record(run, n, choice);
                record["outcome"] = json!(AttemptOutcome::ProviderNotConfigured.as_str());
                self.put_attempt(run, n, &record, self.clock.now()).await?;
                return Ok(StepResult::skip(
                    record,
                    AttemptOutcome::ProviderNotConfigured,
                    format!(
                        "the operator's configuration for {} is not this plan choice; no request was sent",
                        choice.provider.as_str()
                    ),
                ));
            }
            Step::Ready {
                config,
                reservation,
                request_bytes,
            } => (config, *reservation, *request_bytes),
        };
        if self
            .settings
            .upstream
            .disabled_providers
            .contains(&config.provider)
        {
            let mut record = skip_record(run, n, &config.choice());
            record["outcome"] = json!(AttemptOutcome::ProviderOperatorDisabled.as_str());
            self.put_attempt(run, n, &record, self.clock.now()).await?;
            return Ok(StepResult::skip(
                record,
                AttemptOutcome::ProviderOperatorDisabled,
                format!(
                    "the operator paused {}; no request was sent",
                    config.provider.as_str()
                ),
            ));
        }
        let attempt = Attempt {
            n,
            config,
            reservation,
            request_bytes,
            follows,
        };
        self.attempt(run, &attempt).await
    }

    async fn named_context(
        &self,
        principal: &Principal,
        refs: &[String],
    ) -> Result<Named, Problem> {
        let mut named = Named {
            context: Vec::new(),
            contracts: Vec::new(),
            references: Vec::new(),
        };
        let mut errors = Vec::new();
        for (i, id) in refs.iter().enumerate() {
            let entry = match self.get_record::<ContextEntrySpec>(principal, id).await {
                Ok(entry) => entry,
                Err(problem) if problem.code == ProblemCode::NotFound => {
                    errors.push(FieldError::new(
                        format!("/context_refs/{i}"),
                        "names no context entry visible to this key",
                    ));
                    continue;
                }
                Err(problem) => return Err(problem),
            };
            if entry
                .spec
                .schema_or_body
                .get(herma_core::conversation::plan::MEMBER)
                .is_some()
            {
                errors.push(FieldError::new(
                    format!("/context_refs/{i}"),
                    "names a provider plan; name it as `provider_plan_ref` (a plan is never sent to a model)",
                ));
                continue;
            }
            let context = TurnContext {
                id: entry.spec.id.clone(),
                version: entry.version,
                title: entry.spec.title.clone(),
                body: entry.spec.schema_or_body.clone(),
            };
            match entry.spec.schema_or_body.get("work_contract") {
                Some(contract) => match parse_work_contract(contract) {
                    Ok(contract) => named.contracts.push(contract),
                    Err(_) => errors.push(FieldError::new(
                        format!("/context_refs/{i}"),
                        "names a work contract that no longer passes the portable profile; rewrite it",
                    )),
                },
                None => named.references.push(context.clone()),
            }
            named.context.push(context);
        }
        let mut ids: Vec<&str> = named
            .contracts
            .iter()
            .map(WorkContract::operation_id)
            .collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            errors.push(FieldError::new(
                "/context_refs",
                "names two work contracts with the same operation_id",
            ));
        }
        if errors.is_empty() {
            Ok(named)
        } else {
            Err(Problem::validation(errors))
        }
    }

    /// One attempt: persisted before dispatch, the credential, the reservation, the governed
    /// call, the outcome.
    async fn attempt(
        &self,
        run: &TurnRun<'_>,
        attempt: &Attempt<'_>,
    ) -> Result<StepResult, Problem> {
        let config = attempt.config;
        let n = attempt.n;
        let now = self.clock.now();
        let mut record = json!({
            "attempt": n,
            "attempt_id": attempt_id(&run.body.request_id, n),
            "provider": config.provider.as_str(),
            "model": config.model,
            "routing_provider": config.routing_provider,
            "destination": config.destination.url(),
            "payer": "operator",
            "allowance_tokens": config.allowance,
            "request_bytes": attempt.request_bytes,
            "reservation_status": "not_reserved",
            "reservation_ceiling_tokens": attempt.reservation.tokens,
            "reservation_ceiling_usd": attempt.reservation.micros.map(herma_core::money::format_micros),
            "reserved_tokens": 0,
            "request_sent": false,
            "outcome": Value::Null,
            "usage": Value::Null,
            "cost_usd": Value::Null,
            "cost_reason": "reservations are not invoices: usage is recorded as reported",
            "reported_model": Value::Null,
            "reported_provider": Value::Null,
            "upstream_http_status": Value::Null,
            "provider_diagnostics": Value::Null,
        });
        if let Some(follows) = &attempt.follows {
            record["follows_uncertain_attempt_id"] = json!(follows);
        }
        self.put_attempt(run, n, &record, now).await?;

        // The credential, before anything is reserved.
        let Some(client) = ConversationClient::new(config.clone(), self.upstream.clone()) else {
            record["outcome"] = json!(AttemptOutcome::ProviderNotConfigured.as_str());
            self.put_attempt(run, n, &record, now).await?;
            return Ok(StepResult::skip(
                record,
                AttemptOutcome::ProviderNotConfigured,
                format!(
                    "the operator has no key for {}; no request was sent",
                    config.provider.as_str()
                ),
            ));
        };

        // Shared provider health: a recorded skip, a recovery probe, or clear.
        let resources = Resources::of(config.provider, &config.account, &config.model);
        let records = match self.conversations.health(&resources.all()).await {
            Ok(records) => records,
            Err(err) => return self.coordination_failed(run, n, record, err, now).await,
        };
        let probed = match health::gate(&records, &resources, now, run.recovery) {
            Gate::Clear => None,
            Gate::Skip { skip } => return self.health_skip(run, n, record, &skip, now).await,
            Gate::ExpireProbe {
                probe_id,
                record: replaced,
                skip,
            } => {
                if let Err(err) = self.conversations.expire_probe(&probe_id, &replaced).await {
                    return self.coordination_failed(run, n, record, err, now).await;
                }
                return self.health_skip(run, n, record, &skip, now).await;
            }
            Gate::Probe { resource } => Some(resource),
        };

        // The reservation: all or nothing, shared by every caller and process; a recovery
        // probe takes its resource's lease in the same transaction.
        record["reservation_status"] = json!("pending");
        self.put_attempt(run, n, &record, now).await?;
        let charges = charges(
            run.scope,
            config,
            attempt.reservation,
            run.caller_tokens,
            now,
        );
        if self.conversations.reserves_in_two_steps() {
            // The caller's tokens are held before the shared counters answer: an attempt cut
            // off in between is sealed showing what it held.
            record["reservation_status"] = json!("pending");
            self.put_attempt(run, n, &record, now).await?;
        }
        let mut probing = false;
        let reserved = match &probed {
            None => self.conversations.reserve(&charges).await,
            Some(resource) => {
                let probe_id = digest_key(
                    "probe",
                    &[
                        run.scope.as_str(),
                        &run.body.conversation_id,
                        &attempt_id(&run.body.request_id, n),
                    ],
                );
                let lease_until = now.plus_millis(health::PROBE_LEASE_MS);
                match self
                    .conversations
                    .reserve_probe(resource, &probe_id, lease_until, now, &charges)
                    .await
                {
                    Ok(ProbeReservation::Admitted) => {
                        probing = true;
                        record["recovery_probe"] = json!(true);
                        Ok(Reserved::All)
                    }
                    Ok(ProbeReservation::Denied { counter }) => Ok(Reserved::Denied { counter }),
                    Ok(ProbeReservation::NotLimited) => self.conversations.reserve(&charges).await,
                    Ok(ProbeReservation::Held { until }) => {
                        // Another request took the lease first: the same skip the gate gives.
                        record["reservation_status"] = json!("not_reserved");
                        let limited = records
                            .iter()
                            .find(|r| &r.resource == resource)
                            .ok_or_else(|| internal("a probed resource has no health record"))?;
                        let skip = health::probe_held(limited, until);
                        return self.health_skip(run, n, record, &skip, now).await;
                    }
                    Err(err) => Err(err),
                }
            }
        };
        let probed = probed.filter(|_| probing);
        match reserved {
            Ok(Reserved::All) => {
                record["reservation_status"] = json!("reserved");
                record["reserved_tokens"] = json!(attempt.reservation.tokens);
            }
            Ok(Reserved::Denied { counter }) => {
                let (outcome, what) = if counter.starts_with("caller_tokens:") {
                    (
                        AttemptOutcome::CallerBudgetDenied,
                        "this key's hourly token allowance",
                    )
                } else {
                    (
                        AttemptOutcome::ProviderBudgetDenied,
                        "the provider's operator budget",
                    )
                };
                record["reservation_status"] = json!("denied");
                record["outcome"] = json!(outcome.as_str());
                self.put_attempt(run, n, &record, now).await?;
                let mut result = StepResult::skip(
                    record,
                    outcome,
                    format!("this turn's reservation would pass {what}; no request was sent"),
                );
                result.budget_denied = true;
                result.denied_counter = Some(counter);
                return Ok(result);
            }
            Err(err) => {
                // A failure inside the atomic reservation: whether it committed is unknown.
                record["reservation_status"] = json!("unknown");
                record["outcome"] =
                    json!(AttemptOutcome::StorageOrCoordinationUnavailable.as_str());
                tracing::error!(error = %err, "conversation reservation failed");
                let _ = self.put_attempt(run, n, &record, now).await;
                return Ok(StepResult::skip(
                    record,
                    AttemptOutcome::StorageOrCoordinationUnavailable,
                    "the reservation could not be confirmed; no request was sent".to_owned(),
                ));
            }
        }
        record["request_sent"] = json!(true);
        self.put_attempt(run, n, &record, now).await?;

        let governed_run = self.governed_call(run, attempt, client.clone()).await;
        let report = client.report();
        let (answer, outcome) =
            self.read_attempt(&mut record, governed_run, report.as_ref(), run.contracts);
        let finished = Finished {
            outcome,
            diagnostics: report.as_ref().and_then(|r| r.diagnostics.as_ref()),
            guidance: report.as_ref().map_or(&[], |r| r.guidance.as_slice()),
            started_at: now,
            now: self.clock.now(),
            probed: probed.as_deref(),
        };
        let settlement = health::settle(&finished, &resources, &records);
        if let Err(err) = self.settle_health(&settlement, now).await {
            // The call's result stands; the failed write is recorded for the operator.
            tracing::error!(error = %err, "a conversation attempt's health update failed");
            record["health_settlement"] = json!("failed");
        }
        self.put_attempt(run, n, &record, self.clock.now()).await?;
        Ok(StepResult {
            answer,
            record,
            outcome,
            budget_denied: false,
            denied_counter: None,
        })
    }

    /// A recorded skip of shared health: nothing reserved, nothing sent.
    async fn health_skip(
        &self,
        run: &TurnRun<'_>,
        n: u32,
        mut record: Value,
        skip: &health::Skip,
        now: Timestamp,
    ) -> Result<StepResult, Problem> {
        record["outcome"] = json!(skip.outcome.as_str());
        record["skip"] = json!(skip.reason.as_str());
        record["next_eligible_at"] = json!(skip.next_eligible_at);
        record["provider_health"] = json!({
            "scope": skip.scope.as_str(),
            "condition": skip.condition,
        });
        self.put_attempt(run, n, &record, now).await?;
        let message = format!(
            "{} is {} ({}); no request was sent; eligible again at {}",
            record["provider"].as_str().unwrap_or("the provider"),
            match skip.reason {
                SkipReason::IdentityHeld =>
                    "held: another route to this upstream model met a limit",
                SkipReason::ProbeInFlight => "being probed by another request after a limit",
                SkipReason::ProbeExpired => "cooling down after a recovery probe went unanswered",
                SkipReason::RecoveryPaused => "limited and the plan paused recovery",
                SkipReason::UncertainRecoveryNotGranted => {
                    "limited after an unknown outcome, and recovery needs both halves of the uncertainty grant"
                }
                SkipReason::Cooldown => "cooling down after a limit",
            },
            skip.condition,
            skip.next_eligible_at.to_rfc3339(),
        );
        Ok(StepResult::skip(record, skip.outcome, message))
    }

    /// A storage failure while coordinating an attempt: recorded, and the turn stops.
    async fn coordination_failed(
        &self,
        run: &TurnRun<'_>,
        n: u32,
        mut record: Value,
        err: herma_store::StoreError,
        now: Timestamp,
    ) -> Result<StepResult, Problem> {
        tracing::error!(error = %err, "conversation coordination failed");
        let outcome = AttemptOutcome::StorageOrCoordinationUnavailable;
        record["outcome"] = json!(outcome.as_str());
        let _ = self.put_attempt(run, n, &record, now).await;
        Ok(StepResult::skip(
            record,
            outcome,
            "provider health could not be read; no request was sent".to_owned(),
        ))
    }

    async fn settle_health(
        &self,
        settlement: &health::Settlement,
        started_at: Timestamp,
    ) -> Result<(), herma_store::StoreError> {
        for limit in &settlement.limits {
            self.conversations.limit(limit).await?;
        }
        for resource in &settlement.clears {
            self.conversations
                .clear_health(resource, started_at)
                .await?;
        }
        Ok(())
    }

    async fn put_attempt(
        &self,
        run: &TurnRun<'_>,
        n: u32,
        record: &Value,
        now: Timestamp,
    ) -> Result<(), Problem> {
        self.conversations
            .put_attempt(&AttemptRecord {
                caller_scope: run.scope.clone(),
                conversation_id: run.body.conversation_id.clone(),
                request_id: run.body.request_id.clone(),
                attempt: n,
                record: record.clone(),
                updated_at: now,
            })
            .await
            .map_err(internal)
    }

    /// The one governed step call of an attempt, under its own root in the turn, never past
    /// the turn's sealing boundary.
    async fn governed_call(
        &self,
        run: &TurnRun<'_>,
        attempt: &Attempt<'_>,
        client: Arc<ConversationClient>,
    ) -> Result<herma_governed::RunOutcome, herma_governed::GovernedError> {
        let config = attempt.config;
        let scope = run.scope;
        let body = run.body;
        let governed = run.governed.clone();
        let request = run.request(config);
        let now = self.clock.now();
        let mut root_parts = vec![scope.as_str(), &body.conversation_id, &body.request_id];
        let n = attempt.n.to_string();
        if attempt.n > 1 {
            root_parts.push(&n);
        }
        let root_key = digest_key("turn", &root_parts);
        let boundary = attempt_boundary(run.turn);
        let left = u64::try_from(boundary.as_millis() - now.as_millis()).unwrap_or(0);
        let timeout = self.attempt_timeout.min(Duration::from_millis(left.max(1)));
        let deadline = now.plus_millis(timeout.as_millis() as i64);
        governed
            .trees
            .open_root(&RootRecord {
                scope: scope.clone(),
                root_key: root_key.clone(),
                binding: json!({"conversation_id": body.conversation_id, "request_id": body.request_id}),
                status: RootStatus::Active,
                deadline_at: deadline,
                reserved_calls: 0,
                settled_micros: 0,
                receipts: 0,
                created_at: now,
                closed_at: None,
            })
            .await
            .map_err(herma_governed::GovernedError::from)?;
        let mut step = StepConfig::new(governed, client, self.runtime.clone());
        step.clock = self.clock.clone();
        step.run_timeout = timeout;
        step.max_request_chars = MAX_REQUEST_BYTES * 4;
        step.consumers = vec!["herma.conversations".to_owned()];
        step.caps = Caps {
            session: None,
            day: None,
            root: attempt.reservation.micros.map(|micros| Cap {
                limit_micros: i64::try_from(micros).unwrap_or(i64::MAX),
                mode: CapMode::Warn,
            }),
        };
        let runner = GovernedStepRunner::new(step)?;
        let loaded = LoadedRequest {
            system: request.system.clone(),
            messages: request.messages.clone(),
            tools: request.tools.clone(),
            tool_choice: request.controls.tool_choice.clone(),
        };
        runner
            .run(StepRun {
                call: OperationCallInput {
                    scope: scope.clone(),
                    root_key: root_key.clone(),
                    operation_key: format!("{root_key}-a{}", attempt.n),
                    session_id: digest_key("conversation", &[scope.as_str(), &body.conversation_id]),
                    intent: "propose_typed_action".to_owned(),
                    input_revision: digest_key("input", &[&body.input_digest()]),
                    policy_version: "conversation-v1".to_owned(),
                    price_version: digest_key("prices", &[&format!("{:?}", config.pricing)]),
                    output_contract_version: "proposal-v1".to_owned(),
                    prices: prices(config),
                    controls: request.controls.clone(),
                    deadline_at: deadline,
                    client: None,
                },
                rationale: format!(
                    "caller-requested typed proposal, operator-funded under the caller's grant for {} {}",
                    config.provider.as_str(),
                    config.model
                ),
                cancel: None,
                load_request: Box::new(move || Box::pin(async move { Ok(loaded) })),
            })
            .await
    }

    /// The attempt's record and the turn's outcome from the governed run and the dispatch
    /// report.
    fn read_attempt(
        &self,
        record: &mut Value,
        run: Result<herma_governed::RunOutcome, herma_governed::GovernedError>,
        report: Option<&DispatchReport>,
        contracts: &[WorkContract],
    ) -> (Outcome, AttemptOutcome) {
        if let Some(report) = report {
            record["upstream_http_status"] = json!(report.http_status);
            record["reported_model"] = json!(report.reported_model);
            record["reported_provider"] = json!(report.reported_provider);
            if let Some(diagnostics) = &report.diagnostics {
                record["provider_diagnostics"] = json!(diagnostics);
            }
        }
        let run = match run {
            Ok(run) => run,
            Err(err) => {
                tracing::warn!(error = %err, "a conversation attempt's governed call failed");
                let outcome = report
                    .map(|r| r.outcome)
                    .unwrap_or(AttemptOutcome::ProviderOutcomeUncertain);
                record["outcome"] = json!(outcome.as_str());
                return (blocked_by(outcome), outcome);
            }
        };
        if let Some(charge) = &run.view.receipt {
            record["governed_charge_usd_micros"] = json!(charge.amount_micros);
            if let Some(usage) = charge.detail.get("usage") {
                record["usage"] = usage.clone();
            }
        }
        let completed = run.view.state == ViewState::Completed;
        let step = run.view.envelope().and_then(|e| e.step.clone());
        match (report.map(|r| r.outcome), step) {
            (Some(AttemptOutcome::Completed), Some(step)) if completed => {
                record["outcome"] = json!(AttemptOutcome::Completed.as_str());
                let calls: Vec<ProposedCall> = step
                    .tool_calls
                    .iter()
                    .map(|c| ProposedCall {
                        name: c.name.clone(),
                        arguments: if c.malformed {
                            String::new()
                        } else {
                            c.input.to_string()
                        },
                    })
                    .collect();
                (
                    turn::interpret(contracts, &step.text, &calls),
                    AttemptOutcome::Completed,
                )
            }
            (Some(AttemptOutcome::Completed), _) if run.invalid_reason.is_some() => {
                record["outcome"] = json!(AttemptOutcome::Completed.as_str());
                record["invalid_reason"] = json!(format!("{:?}", run.invalid_reason));
                (
                    Outcome::blocked(
                        "unknown_operation",
                        "The model's answer was not a proposal Herma can read (an unknown function or malformed output).",
                    ),
                    AttemptOutcome::Completed,
                )
            }
            (Some(outcome), _) => {
                record["outcome"] = json!(outcome.as_str());
                (blocked_by(outcome), outcome)
            }
            (None, _) => {
                record["outcome"] = json!(AttemptOutcome::ProviderOutcomeUncertain.as_str());
                (
                    blocked_by(AttemptOutcome::ProviderOutcomeUncertain),
                    AttemptOutcome::ProviderOutcomeUncertain,
                )
            }
        }
    }

    /// Seals the turn with its outcome; the stored answer is what replays return.
    async fn seal(
        &self,
        turn: &TurnRecord,
        body: &TurnBody,
        outcome: Outcome,
        attempts: Vec<Value>,
        budget_denied: bool,
        server_exception: Option<Value>,
    ) -> Result<TurnAnswer, Problem> {
        let answer = answer_of(turn, &outcome, attempts);
        let transcript_append = vec![
            json!(TranscriptMessage {
                role: Role::User,
                text: body.message.clone(),
            }),
            json!(TranscriptMessage {
                role: Role::Assistant,
                text: outcome.transcript_text(),
            }),
        ];
        let sealed = self
            .conversations
            .seal_turn(&SealTurn {
                caller_scope: turn.caller_scope.clone(),
                conversation_id: turn.conversation_id.clone(),
                request_id: turn.request_id.clone(),
                answer_class: if budget_denied {
                    AnswerClass::CeilingDenied
                } else {
                    AnswerClass::Answered
                },
                response: answer.clone(),
                transcript_append,
                server_exception,
                now: self.clock.now(),
            })
            .await
            .map_err(internal)?;
        if !sealed {
            // The sweeper sealed it first (the attempt outlived two minutes): its answer stands.
            let stored = self
                .conversations
                .turn(&turn.caller_scope, &turn.conversation_id, &turn.request_id)
                .await
                .map_err(internal)?
                .ok_or_else(|| internal("a sealed turn disappeared"))?;
            return replay(&stored);
        }
        Ok(TurnAnswer {
            body: answer,
            budget_denied,
            replayed: false,
        })
    }

    /// The caller's own conversation: its transcript, active request and recent turns with
    /// their attempts.
    pub async fn conversation_view(
        &self,
        principal: &Principal,
        conversation_id: &str,
    ) -> Result<Value, Problem> {
        let scope = own_scope(principal)?;
        self.conversation_record(scope, conversation_id).await
    }

    /// A conversation as an operator inspects it (`herma conversations show`).
    pub async fn conversation_record(
        &self,
        scope: &CallerScope,
        conversation_id: &str,
    ) -> Result<Value, Problem> {
        let conversation = self
            .conversations
            .conversation(scope, conversation_id)
            .await
            .map_err(internal)?
            .ok_or_else(|| Problem::not_found("conversation", conversation_id))?;
        let turns = self
            .conversations
            .recent_turns(scope, conversation_id, RECENT_TURNS)
            .await
            .map_err(internal)?;
        let mut recent = Vec::new();
        for turn in turns {
            let attempts = self
                .conversations
                .attempts(scope, conversation_id, &turn.request_id)
                .await
                .map_err(internal)?;
            recent.push(json!({
                "request_id": turn.request_id,
                "status": turn.status.as_str(),
                "version_before": turn.version_before,
                "created_at": turn.created_at,
                "sealed_at": turn.sealed_at,
                "answer": turn.response,
                "server_exception": turn.server_exception,
                "attempts": attempts.into_iter().map(|a| a.record).collect::<Vec<_>>(),
            }));
        }
        Ok(json!({
            "conversation_id": conversation.conversation_id,
            "version": conversation.version,
            "created_at": conversation.created_at,
            "expires_at": conversation.expires_at,
            "expired": conversation.expired,
            "active_request_id": conversation.active_request_id,
            "transcript": conversation.transcript,
            "recent_turns": recent,
        }))
    }

    /// Seals turns unfinished two minutes after admission as `provider_outcome_uncertain`
    /// (never retried; reservations kept) and expires conversations past their lifetime.
    /// Returns how many turns it sealed.
    pub async fn sweep_conversations(&self) -> Result<u64, Problem> {
        let now = self.clock.now();
        // Admitted at or before `now - 2 min` (the store's cutoff is exclusive).
        let cutoff = now.plus_millis(1 - SEAL_AFTER_MS);
        let mut sealed = 0;
        loop {
            let unfinished = self
                .conversations
                .unfinished_turns(cutoff, 100)
                .await
                .map_err(internal)?;
            if unfinished.is_empty() {
                break;
            }
            let batch = unfinished.len();
            for turn in unfinished {
                if self.seal_abandoned(&turn, now).await? {
                    sealed += 1;
                }
            }
            if batch < 100 {
                break;
            }
        }
        self.conversations
            .expire_conversations(now, 1000)
            .await
            .map_err(internal)?;
        Ok(sealed)
    }

    async fn seal_abandoned(&self, turn: &TurnRecord, now: Timestamp) -> Result<bool, Problem> {
        let mut attempts = self
            .conversations
            .attempts(&turn.caller_scope, &turn.conversation_id, &turn.request_id)
            .await
            .map_err(internal)?;
        for attempt in &mut attempts {
            if attempt.record.get("outcome").is_none_or(Value::is_null) {
                attempt.record["outcome"] =
                    json!(AttemptOutcome::ProviderOutcomeUncertain.as_str());
                attempt.updated_at = now;
                self.conversations
                    .put_attempt(attempt)
                    .await
                    .map_err(internal)?;
            }
        }
        let outcome = blocked_by(AttemptOutcome::ProviderOutcomeUncertain);
        let records = attempts.iter().map(|a| a.record.clone()).collect();
        let answer = answer_of(turn, &outcome, records);
        self.conversations
            .seal_turn(&SealTurn {
                caller_scope: turn.caller_scope.clone(),
                conversation_id: turn.conversation_id.clone(),
                request_id: turn.request_id.clone(),
                answer_class: AnswerClass::Answered,
                response: answer,
                transcript_append: vec![json!(TranscriptMessage {
                    role: Role::Assistant,
                    text: outcome.transcript_text(),
                })],
                server_exception: None,
                now,
            })
            .await
            .map_err(internal)
    }
}

/// What a turn's steps share.
struct TurnRun<'a> {
    scope: &'a CallerScope,
    body: &'a TurnBody,
    turn: &'a TurnRecord,
    input: &'a turn::ModelInput,
    contracts: &'a [WorkContract],
    governed: herma_store::governed::GovernedPorts,
    caller_tokens: Option<u64>,
    recovery: Recovery,
}

impl TurnRun<'_> {
    /// The model request of this turn for one provider.
    fn request(&self, config: &ProviderConfig) -> herma_core::call::ModelRequest {
        herma_core::call::ModelRequest {
            system: Some(self.input.system.clone()),
            messages: self.input.messages.clone(),
            tools: self.input.tools.clone(),
            output: None,
            controls: controls(config, !self.input.tools.is_empty()),
            call: None,
        }
    }
}

/// The choices a turn may use and what governs moving between them.
struct Route {
    choices: Vec<Choice>,
    permissions: Permissions,
    /// The entries a model may be sent (never the plan).
    model_refs: Vec<String>,
    /// The first choice's model: what the conversation's fingerprint keeps.
    first_model: String,
    /// The caller's own grant as the turn's record states it.
    grant: Value,
    plan: Option<RoutePlan>,
}

struct RoutePlan {
    plan: ProviderPlan,
    /// The plan entry: its version and content join the fingerprint.
    context: TurnContext,
}

enum Choice {
    Ready(Box<ProviderConfig>),
    /// A plan choice the operator's configuration does not resolve to.
    NotConfigured(GrantChoice),
}

/// A choice, measured.
enum Step {
    Ready {
        config: Box<ProviderConfig>,
        reservation: Reservation,
        request_bytes: usize,
    },
    NotConfigured(GrantChoice),
}

impl Step {
    /// The ledger counters this step would charge.
    fn counters(&self, run: &TurnRun<'_>, now: Timestamp) -> Vec<String> {
        match self {
            Step::Ready {
                config,
                reservation,
                ..
            } => charges(run.scope, config, *reservation, run.caller_tokens, now)
                .into_iter()
                .map(|c| c.counter)
                .collect(),
            Step::NotConfigured(_) => Vec::new(),
        }
    }
}

/// One attempt's fixed inputs.
struct Attempt<'a> {
    n: u32,
    config: &'a ProviderConfig,
    reservation: Reservation,
    request_bytes: usize,
    /// The uncertain attempt this one follows (both halves of the uncertainty grant allowed it).
    follows: Option<String>,
}

/// How a step ended.
struct StepResult {
    /// The turn's answer if the turn stops here.
    answer: Outcome,
    record: Value,
    outcome: AttemptOutcome,
    /// A ceiling refused the reservation (the transport answers 429 if the turn stops here).
    budget_denied: bool,
    /// The ledger counter that refused.
    denied_counter: Option<String>,
}

impl StepResult {
    /// A step that sent nothing.
    fn skip(record: Value, outcome: AttemptOutcome, message: String) -> Self {
        Self {
            answer: Outcome::blocked(outcome.as_str(), message),
            record,
            outcome,
            budget_denied: false,
            denied_counter: None,
        }
    }
}

/// No attempt runs past this: the sweeper seals a turn two minutes after admission, and an
/// attempt ends five seconds before that.
fn attempt_boundary(turn: &TurnRecord) -> Timestamp {
    turn.created_at.plus_millis(SEAL_AFTER_MS - 5_000)
}

fn attempt_id(request_id: &str, n: u32) -> String {
    format!("{request_id}#{n}")
}

fn choice_json(choice: &GrantChoice) -> Value {
    json!({
        "provider": choice.provider.as_str(),
        "model": choice.model,
        "routing_provider": choice.routing_provider,
    })
}

/// The record of a step that sent nothing: a plan choice the operator's configuration does not
/// match, or a paused provider.
fn skip_record(run: &TurnRun<'_>, n: u32, choice: &GrantChoice) -> Value {
    json!({
        "attempt": n,
        "attempt_id": attempt_id(&run.body.request_id, n),
        "provider": choice.provider.as_str(),
        "model": choice.model,
        "routing_provider": choice.routing_provider,
        "payer": "operator",
        "reservation_status": "not_reserved",
        "reserved_tokens": 0,
        "request_sent": false,
        "outcome": Value::Null,
        "usage": Value::Null,
    })
}

/// The compact bytes of one provider's request for `input`: what the 32 KiB bound and the
/// reservation count.
fn request_bytes(config: &ProviderConfig, input: &turn::ModelInput) -> usize {
    herma_core::conversation::providers::encode(
        config,
        &herma_core::conversation::providers::TurnRequest {
            system: input.system.clone(),
            messages: input.messages.clone(),
            tools: input.tools.clone(),
        },
    )
    .body
    .len()
}

/// The turn's private authorization record: why an operator-funded request may be made, for
/// whom, to where, within what.
fn server_exception(
    principal: &Principal,
    scope: &CallerScope,
    body: &TurnBody,
    grant: &Value,
    plan: Option<&RoutePlan>,
    steps: &[Step],
    attempt_timeout: Duration,
) -> Value {
    let choices: Vec<Value> = steps
        .iter()
        .map(|step| match step {
            Step::Ready {
                config,
                reservation,
                request_bytes,
            } => json!({
                "provider": config.provider.as_str(),
                "model": config.model,
                "routing_provider": config.routing_provider,
                "destination": config.destination.url(),
                "destination_overridden": config.destination.overridden,
                "output_allowance_tokens": config.allowance,
                "reservation": {"tokens": reservation.tokens, "usd_micros": reservation.micros, "input_bytes": request_bytes},
            }),
            Step::NotConfigured(choice) => {
                let mut value = choice_json(choice);
                value["configured"] = json!(false);
                value
            }
        })
        .collect();
    let mut exception = json!({
        "purpose": "caller-requested interactive proposal of one typed action",
        "capability": "propose_typed_action: the caller asked in a typed conversation; Herma validates the proposal locally and never executes it",
        "principal": principal_id(principal),
        "scope": {
            "caller": scope.as_str(),
            "conversation_id": body.conversation_id,
            "context_refs": body.context_refs,
        },
        "effect": "proposal_only",
        "payer": "operator",
        "grant": grant,
        "timeout_ms": attempt_timeout.as_millis() as u64,
        "retry_policy": "none: one request per attempt, never retried; an unfinished turn is sealed as provider_outcome_uncertain after two minutes",
    });
    if let (Some(first), [_]) = (choices.first(), steps) {
        // A direct turn: its one choice, as part 1 recorded it.
        for member in [
            "destination",
            "destination_overridden",
            "output_allowance_tokens",
            "reservation",
        ] {
            exception[member] = first[member].clone();
        }
    } else {
        exception["choices"] = json!(choices);
    }
    if let Some(plan) = plan {
        exception["provider_plan"] = json!({
            "ref": plan.context.id,
            "version": plan.context.version,
            "allow_failover": plan.plan.allow_failover,
            "allow_uncertain_outcome": plan.plan.allow_uncertain_outcome,
            "allow_recovery_probe": plan.plan.allow_recovery_probe,
        });
        exception["choices"] = json!(choices);
    }
    exception
}

fn controls(config: &ProviderConfig, tools: bool) -> Controls {
    Controls {
        model: config.model.clone(),
        max_tokens: u32::try_from(config.allowance).unwrap_or(u32::MAX),
        temperature: None,
        tool_choice: tools.then_some(ToolChoice::Auto),
        cache: None,
    }
}

fn principal_id(principal: &Principal) -> Value {
    match principal {
        Principal::Key(key) => json!({"key_id": key.key_id.to_string(), "scope": "route"}),
        Principal::Bootstrap => json!("bootstrap"),
    }
}

/// A sealed turn's answer: its ids, the version the next turn sends, `executed: false`, the
/// outcome's members and the attempts' records.
fn answer_of(turn: &TurnRecord, outcome: &Outcome, attempts: Vec<Value>) -> Value {
    let mut answer = json!({
        "conversation_id": turn.conversation_id,
        "request_id": turn.request_id,
        "version": turn.version_before + 1,
        "executed": false,
        "attempts": attempts,
    });
    if let (Some(answer), Value::Object(members)) = (answer.as_object_mut(), outcome.to_json()) {
        answer.extend(members);
    }
    answer
}

fn blocked_by(outcome: AttemptOutcome) -> Outcome {
    let message = match outcome {
        AttemptOutcome::ProviderOutcomeUncertain => {
            "The provider's outcome is unknown (it may have been charged); the turn is not retried."
        }
        AttemptOutcome::ProviderInvalidResponse => {
            "The provider's reply could not be read (it may have been charged); the turn is not retried."
        }
        AttemptOutcome::ProviderRateLimited => {
            "The provider is rate limiting this account; try later."
        }
        AttemptOutcome::ProviderPaymentRequired => {
            "The operator's provider account needs payment or credit."
        }
        AttemptOutcome::ProviderUnavailable => "The provider is unavailable; try later.",
        AttemptOutcome::ProviderRejected => "The provider refused the request.",
        _ => "No proposal could be made.",
    };
    Outcome::blocked(outcome.as_str(), message)
}

/// A stored turn's answer: sealed ones replay; an active one is still being answered.
fn replay(turn: &TurnRecord) -> Result<TurnAnswer, Problem> {
    match (turn.status, &turn.response) {
        (TurnStatus::Sealed, Some(body)) => Ok(TurnAnswer {
            body: body.clone(),
            budget_denied: turn.answer_class == Some(AnswerClass::CeilingDenied),
            replayed: true,
        }),
        (TurnStatus::Sealed, None) => Err(Problem::new(
            ProblemCode::ConversationExpired,
            "this turn's answer expired with its conversation",
        )),
        (TurnStatus::Active, _) => Err(conflict(
            "this turn is still being answered; repeat the request later for its answer",
            "turn_active",
        )),
    }
}

/// Sweeps every `every` (the first sweep after one period) until the app is dropped.
pub fn spawn_sweeper(app: Arc<App>, every: Duration) -> tokio::task::JoinHandle<()> {
    let app = Arc::downgrade(&app);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(app) = app.upgrade() else { return };
            match app.sweep_conversations().await {
                Ok(0) => {}
                Ok(sealed) => tracing::warn!(
                    sealed,
                    "sealed unfinished conversation turns as provider_outcome_uncertain"
                ),
                Err(p) => tracing::warn!(detail = %p.detail, "sweeping conversation turns failed"),
            }
        }
    })
}
