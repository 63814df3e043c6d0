//! Shared provider health: what the records of a turn's resources say before an attempt
//! ([`gate`]: go ahead, skip with a recorded reason, or be the resource's one recovery probe),
//! and what an attempt's outcome writes after it ([`settle`]). The records themselves live in
//! the store, shared by every process on one database; the delay math is [`super::cooldown`].
//!
//! Resources, keyed by the operator's account alias (`HERMA_CONVERSATION_<PROVIDER>_ACCOUNT_SCOPE`,
//! default `operator`), never by a key:
//! - the **route** `route:<provider>:<account>:<model>`: 429s, rate limits, unavailability and
//!   unknown outcomes cool it down;
//! - the **account** `account:<provider>:<account>`: credit exhaustion and HTTP 402 block it
//!   across models;
//! - the **upstream model identity** `identity:<vendor/model>`: rate limits, credit exhaustion
//!   and 402 hold it for the same delay against routes of *other providers* to that model (H17);
//!   the provider that met the limit keeps its own health and single probe per route, and its
//!   separate account aliases stay isolated.
//!
//! [`gate`], in order: an identity held by another provider → `provider_identity_cooldown`; then
//! the account, then the route: a probe lease that has passed becomes an `uncertain` condition
//! (once, whoever notices first) and the attempt is skipped; a lease still out, or a delay not
//! yet passed, is a recorded skip with the condition's outcome and the next eligible time; a
//! passed delay makes this attempt the resource's one recovery probe (admitted atomically with
//! its allowance, leased for [`PROBE_LEASE_MS`]) — unless the plan set
//! `allow_recovery_probe: false`, or the condition is `uncertain` and the turn lacks both halves
//! of the uncertainty grant: then it is skipped too. No limit: the attempt goes ahead.
//!
//! A skip's outcome by condition: `rate_limited` → `provider_rate_limited`, `credit_exhausted` →
//! `provider_payment_required`, `unavailable` and `uncertain` → `provider_unavailable` (nothing
//! was sent, so a skip is never itself uncertain). All are known: a plan may advance past them.

use serde::{Deserialize, Serialize};

use super::cooldown::{Condition, cooldown};
use super::providers::{AttemptOutcome, ProviderDiagnostics};
use crate::time::Timestamp;
use crate::upstream::Provider;

/// How long a recovery probe's lease lasts.
pub const PROBE_LEASE_MS: i64 = 120_000;
/// The account alias when the operator sets none.
pub const DEFAULT_ACCOUNT: &str = "operator";

/// What a provider-health record limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HealthScope {
    /// One provider, operator account alias and model.
    #[serde(rename = "provider_route")]
    Route,
    /// A provider account across every model (credit exhaustion, HTTP 402).
    #[serde(rename = "provider_account")]
    Account,
    /// An upstream model identity against other routes to it (H17).
    #[serde(rename = "upstream_model_identity")]
    UpstreamModelIdentity,
}

impl HealthScope {
    pub const fn as_str(self) -> &'static str {
        match self {
            HealthScope::Route => "provider_route",
            HealthScope::Account => "provider_account",
            HealthScope::UpstreamModelIdentity => "upstream_model_identity",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [
            HealthScope::Route,
            HealthScope::Account,
            HealthScope::UpstreamModelIdentity,
        ]
        .into_iter()
        .find(|s| s.as_str() == raw)
    }
}

/// One limited provider resource, shared by every process on the database. Only normalized
/// seconds and fixed labels are kept: no header text, no provider message, no caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthRecord {
    /// `route:<provider>:<account>:<model>`, `account:<provider>:<account>` or
    /// `identity:<vendor/model>`.
    pub resource: String,
    pub scope: HealthScope,
    /// `rate_limited`, `credit_exhausted`, `unavailable` or `uncertain`.
    pub condition: String,
    /// When the resource becomes eligible again (for its one recovery probe).
    pub until: Timestamp,
    /// Where the delay came from: `retry_after`, `openai_reset`, `anthropic_reset`, `backoff`.
    pub source: String,
    /// Unsuccessful recoveries so far (the backoff doubles with each).
    pub failures: u32,
    /// When the condition was observed: a success observed earlier never clears it.
    pub limited_at: Timestamp,
    /// The route resource whose attempt opened it.
    pub origin: String,
    /// The recovery probe's lease, while one is out.
    pub probe_until: Option<Timestamp>,
    pub probe_id: Option<String>,
}

/// The three resources one attempt uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources {
    pub route: String,
    pub account: String,
    pub identity: String,
}

impl Resources {
    pub fn of(provider: Provider, account: &str, model: &str) -> Self {
        let p = provider.as_str();
        Self {
            route: format!("route:{p}:{account}:{model}"),
            account: format!("account:{p}:{account}"),
            identity: format!(
                "identity:{}",
                super::identity::upstream_identity(provider, model)
            ),
        }
    }

    /// What every route of this provider starts with: an identity hold never applies to the
    /// provider that met the limit (its own routes, under any account alias, keep their own
    /// health).
    fn provider_prefix(&self) -> &str {
        let end = self
            .route
            .match_indices(':')
            .nth(1)
            .map_or(self.route.len(), |(i, _)| i + 1);
        &self.route[..end]
    }

    pub fn all(&self) -> [String; 3] {
        [
            self.route.clone(),
            self.account.clone(),
            self.identity.clone(),
        ]
    }
}

/// Why an attempt was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The resource's delay has not passed.
    Cooldown,
    /// Another request is the resource's recovery probe.
    ProbeInFlight,
    /// The last probe's lease passed without an answer: now uncertain.
    ProbeExpired,
    /// The plan paused recovery (`allow_recovery_probe: false`).
    RecoveryPaused,
    /// Recovery after an uncertain outcome needs both halves of the uncertainty grant.
    UncertainRecoveryNotGranted,
    /// Another route to the same upstream model met a limit (H17).
    IdentityHeld,
}

impl SkipReason {
    pub const fn as_str(self) -> &'static str {
        match self {
            SkipReason::Cooldown => "cooldown",
            SkipReason::ProbeInFlight => "probe_in_flight",
            SkipReason::ProbeExpired => "probe_expired",
            SkipReason::RecoveryPaused => "recovery_paused",
            SkipReason::UncertainRecoveryNotGranted => "uncertain_recovery_not_granted",
            SkipReason::IdentityHeld => "identity_held",
        }
    }
}

/// A recorded skip: nothing reserved, nothing sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skip {
    pub outcome: AttemptOutcome,
    pub reason: SkipReason,
    pub scope: HealthScope,
    pub condition: String,
    /// When the resource may next be tried (for a paused or ungranted recovery: when it became
    /// eligible).
    pub next_eligible_at: Timestamp,
}

/// What the records say before an attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Gate {
    /// Nothing limits it: reserve and send.
    Clear,
    Skip {
        skip: Skip,
    },
    /// Reserve as this resource's one recovery probe.
    Probe {
        resource: String,
    },
    /// The lease `probe_id` passed: replace the record with `record` (uncertain), then skip.
    ExpireProbe {
        probe_id: String,
        record: HealthRecord,
        skip: Skip,
    },
}

/// What governs recovery for this turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The plan's `allow_recovery_probe` (true for a direct turn).
    pub allow_probe: bool,
    /// Both halves of the uncertainty grant.
    pub uncertain: bool,
}

fn condition_of(raw: &str) -> Condition {
    match raw {
        "rate_limited" => Condition::RateLimited,
        "credit_exhausted" => Condition::CreditExhausted,
        "unavailable" => Condition::Unavailable,
        _ => Condition::Uncertain,
    }
}

fn skip_outcome(condition: &str) -> AttemptOutcome {
    match condition_of(condition) {
        Condition::RateLimited => AttemptOutcome::ProviderRateLimited,
        Condition::CreditExhausted => AttemptOutcome::ProviderPaymentRequired,
        Condition::Unavailable | Condition::Uncertain => AttemptOutcome::ProviderUnavailable,
    }
}

fn skip(record: &HealthRecord, reason: SkipReason, next: Timestamp) -> Skip {
    Skip {
        outcome: if reason == SkipReason::IdentityHeld {
            AttemptOutcome::ProviderIdentityCooldown
        } else {
            skip_outcome(&record.condition)
        },
        reason,
        scope: record.scope,
        condition: record.condition.clone(),
        next_eligible_at: next,
    }
}

/// The skip of an attempt that found `record`'s probe lease taken by another request (until
/// `until`) when it tried to take it.
pub fn probe_held(record: &HealthRecord, until: Timestamp) -> Skip {
    skip(record, SkipReason::ProbeInFlight, until)
}

/// The decision before an attempt on `resources`, from the stored `records` (any of the
/// three, in any order) at `now`.
pub fn gate(
    records: &[HealthRecord],
    resources: &Resources,
    now: Timestamp,
    recovery: Recovery,
) -> Gate {
    let find = |resource: &str| records.iter().find(|r| r.resource == resource);
    if let Some(hold) = find(&resources.identity)
        && hold.until > now
        && !hold.origin.starts_with(resources.provider_prefix())
    {
        return Gate::Skip {
            skip: skip(hold, SkipReason::IdentityHeld, hold.until),
        };
    }
    // The account first: a blocked account covers every route of it.
    if let Some(record) = find(&resources.account).or_else(|| find(&resources.route)) {
        if let Some(lease) = record.probe_until {
            if lease <= now {
                let failures = record.failures.saturating_add(1);
                let delay = cooldown(Condition::Uncertain, &[], now, failures);
                let replaced = HealthRecord {
                    condition: Condition::Uncertain.as_str().to_owned(),
                    until: delay.until(now),
                    source: delay.source.as_str().to_owned(),
                    failures,
                    limited_at: now,
                    probe_until: None,
                    probe_id: None,
                    ..record.clone()
                };
                let skip = skip(&replaced, SkipReason::ProbeExpired, replaced.until);
                return Gate::ExpireProbe {
                    probe_id: record.probe_id.clone().unwrap_or_default(),
                    record: replaced,
                    skip,
                };
            }
            return Gate::Skip {
                skip: skip(record, SkipReason::ProbeInFlight, lease.max(record.until)),
            };
        }
        if record.until > now {
            return Gate::Skip {
                skip: skip(record, SkipReason::Cooldown, record.until),
            };
        }
        if !recovery.allow_probe {
            return Gate::Skip {
                skip: skip(record, SkipReason::RecoveryPaused, record.until),
            };
        }
        if condition_of(&record.condition) == Condition::Uncertain && !recovery.uncertain {
            return Gate::Skip {
                skip: skip(
                    record,
                    SkipReason::UncertainRecoveryNotGranted,
                    record.until,
                ),
            };
        }
        return Gate::Probe {
            resource: record.resource.clone(),
        };
    }
    Gate::Clear
}

/// What an attempt writes to health.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    /// Limits to record (each replaces only an older one).
    pub limits: Vec<HealthRecord>,
    /// Resources a success clears (only limits observed before the attempt began).
    pub clears: Vec<String>,
}

/// One finished attempt, as settlement needs it.
#[derive(Clone, Copy, Debug)]
pub struct Finished<'a> {
    pub outcome: AttemptOutcome,
    pub diagnostics: Option<&'a ProviderDiagnostics>,
    /// The reply's guidance headers (`Retry-After`, reset headers); none for a timeout.
    pub guidance: &'a [(String, String)],
    /// When the attempt's request was about to be sent.
    pub started_at: Timestamp,
    /// When its outcome was known.
    pub now: Timestamp,
    /// The resource it probed, when it was a recovery probe.
    pub probed: Option<&'a str>,
}

/// The health writes after `attempt` on `resources`, with the `records` read before it.
pub fn settle(
    attempt: &Finished<'_>,
    resources: &Resources,
    records: &[HealthRecord],
) -> Settlement {
    let mut out = Settlement::default();
    let Some(condition) = Condition::of(attempt.outcome, attempt.diagnostics) else {
        // The provider answered without a limit: a probe's resources recover.
        if attempt.probed.is_some() && attempt.outcome != AttemptOutcome::ProviderNotConfigured {
            out.clears = vec![resources.route.clone(), resources.account.clone()];
        }
        return out;
    };
    let prior = |resource: &str| records.iter().find(|r| r.resource == resource);
    // The backoff doubles with each unsuccessful recovery of the same resource.
    let failures = attempt
        .probed
        .and_then(prior)
        .map_or(0, |r| r.failures.saturating_add(1));
    let delay = cooldown(condition, attempt.guidance, attempt.now, failures);
    let record = |resource: &str, scope: HealthScope| HealthRecord {
        resource: resource.to_owned(),
        scope,
        condition: condition.as_str().to_owned(),
        until: delay.until(attempt.now),
        source: delay.source.as_str().to_owned(),
        failures,
        limited_at: attempt.now,
        origin: resources.route.clone(),
        probe_until: None,
        probe_id: None,
    };
    out.limits
        .push(record(&resources.route, HealthScope::Route));
    if condition.blocks_account() {
        out.limits
            .push(record(&resources.account, HealthScope::Account));
    } else if attempt.probed == Some(resources.account.as_str()) {
        // An account probe that met a lesser limit: the account recovered, the route did not.
        out.clears.push(resources.account.clone());
    }
    if condition.holds_identity() {
        out.limits.push(record(
            &resources.identity,
            HealthScope::UpstreamModelIdentity,
        ));
    }
    out
}

#[cfg(test)]
mod tests;
