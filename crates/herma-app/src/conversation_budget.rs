//! The operator's summary of operator-funded turns (`GET /v1/admin/conversation-budget`,
//! `herma conversations budget`): reserved dollars per provider against its ceiling, today's
//! Ollama calls, shared resource health with the next eligible time, upstream identity holds
//! and operator-disabled providers. Aggregates only: no caller, token count, transcript or
//! provider message.

use herma_core::conversation::config::{Pricing, ProviderConfig};
use herma_core::conversation::health::HealthScope;
use herma_core::money::format_micros;
use herma_core::problem::{Problem, ProblemCode};
use herma_core::upstream::Provider;
use serde::Serialize;

use crate::App;

/// One provider's line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ProviderBudget {
    pub provider: String,
    /// The configured model, when the provider's settings resolve.
    pub model: Option<String>,
    /// The settings resolve (a key may still be missing).
    pub configured: bool,
    /// Why not, as a problem code (`output_allowance_required`, …).
    pub configuration_problem: Option<String>,
    pub account_scope: Option<String>,
    pub operator_disabled: bool,
    /// The cumulative reserved-dollar ceiling (metered providers).
    pub budget_usd: Option<String>,
    /// Dollars reserved so far (never refunded on a guess).
    pub reserved_usd: Option<String>,
    /// Ollama Cloud: calls reserved this UTC day and the daily cap.
    pub calls_today: Option<u64>,
    pub calls_per_day: Option<u64>,
}

/// One limited resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ResourceHealth {
    pub resource: String,
    /// `provider_route`, `provider_account` or `upstream_model_identity`.
    pub scope: String,
    pub condition: String,
    /// When it may next be tried (by its one recovery probe).
    pub next_eligible_at: String,
    /// `retry_after`, `openai_reset`, `anthropic_reset` or `backoff`.
    pub source: String,
    pub failures: u32,
    /// A recovery probe holds the lease.
    pub probe_in_flight: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BudgetSummary {
    pub as_of: String,
    pub providers: Vec<ProviderBudget>,
    /// Route and account records (cooling, or eligible for their probe).
    pub resource_health: Vec<ResourceHealth>,
    /// Upstream model identities held against other providers' routes, while active.
    pub identity_cooldowns: Vec<ResourceHealth>,
    pub operator_disabled: Vec<String>,
}

fn internal(err: impl std::fmt::Display) -> Problem {
    tracing::error!(error = %err, "the conversation budget could not be read");
    Problem::new(
        ProblemCode::Unavailable,
        "the conversation store is unavailable; the summary could not be read",
    )
}

impl App {
    /// The operator's summary, read from the shared ledger and health at this moment.
    pub async fn conversation_budget(&self) -> Result<BudgetSummary, Problem> {
        let now = self.clock.now();
        let env = &self.settings.conversation.env;
        let disabled = &self.settings.upstream.disabled_providers;
        let day: String = now.to_rfc3339().chars().take(10).collect();
        // Metered providers' reserved micros, Ollama's calls this UTC day: one read.
        let counters: Vec<String> = Provider::ALL
            .iter()
            .map(|provider| match provider {
                Provider::Ollama => format!("calls:{}:{day}", provider.as_str()),
                _ => format!("provider:{}", provider.as_str()),
            })
            .collect();
        let ledger = self
            .conversations
            .ledger(&counters)
            .await
            .map_err(internal)?;
        let mut providers = Vec::new();
        for (provider, used) in Provider::ALL.into_iter().zip(ledger) {
            let name = provider.as_str();
            let config = ProviderConfig::resolve(env, provider);
            let mut line = ProviderBudget {
                provider: name.to_owned(),
                model: None,
                configured: config.is_ok(),
                configuration_problem: config.as_ref().err().map(|p| p.code.as_str().to_owned()),
                account_scope: None,
                operator_disabled: disabled.contains(&provider),
                budget_usd: None,
                reserved_usd: None,
                calls_today: None,
                calls_per_day: None,
            };
            match provider {
                Provider::Ollama => line.calls_today = Some(used),
                _ => line.reserved_usd = Some(format_micros(used)),
            }
            if let Ok(config) = config {
                line.model = Some(config.model.clone());
                line.account_scope = Some(config.account.clone());
                match config.pricing {
                    Pricing::Metered { budget_micros, .. } => {
                        line.budget_usd = Some(format_micros(budget_micros));
                    }
                    Pricing::Calls { per_day } => line.calls_per_day = Some(per_day),
                }
            }
            providers.push(line);
        }
        let mut resource_health = Vec::new();
        let mut identity_cooldowns = Vec::new();
        for record in self.conversations.all_health().await.map_err(internal)? {
            let shown = ResourceHealth {
                resource: record.resource.clone(),
                scope: record.scope.as_str().to_owned(),
                condition: record.condition.clone(),
                next_eligible_at: record
                    .probe_until
                    .map_or(record.until, |p| p.max(record.until))
                    .to_rfc3339(),
                source: record.source.clone(),
                failures: record.failures,
                probe_in_flight: record.probe_until.is_some_and(|p| p > now),
            };
            match record.scope {
                HealthScope::UpstreamModelIdentity if record.until > now => {
                    identity_cooldowns.push(shown);
                }
                HealthScope::UpstreamModelIdentity => {}
                HealthScope::Route | HealthScope::Account => resource_health.push(shown),
            }
        }
        Ok(BudgetSummary {
            as_of: now.to_rfc3339(),
            providers,
            resource_health,
            identity_cooldowns,
            operator_disabled: disabled.iter().map(|p| p.as_str().to_owned()).collect(),
        })
    }
}
