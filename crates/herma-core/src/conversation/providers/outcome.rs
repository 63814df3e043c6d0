//! The closed list of what one model attempt of a turn came to, and what each says about money.
//! The two skips (`provider_operator_disabled`, `provider_identity_cooldown`) are recorded as
//! attempts that were never sent, so a plan's receipt lists every choice it passed over.

use serde::{Deserialize, Serialize};

/// One attempt's outcome, as recorded (snake_case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// A 200 reply was read; its proposal is validated separately.
    Completed,
    /// The provider's key is missing: nothing was sent or reserved.
    ProviderNotConfigured,
    /// A 4xx other than 402 and 429: the provider refused the request (401/403: the credential).
    ProviderRejected,
    /// 429.
    ProviderRateLimited,
    /// 402.
    ProviderPaymentRequired,
    /// 503 or 529: the provider is overloaded or has no capacity for the request.
    ProviderUnavailable,
    /// Accepted but not finished (202, `queued`, `in_progress`), a 5xx that may have generated,
    /// or no answer at all: possibly charged, never retried.
    ProviderOutcomeUncertain,
    /// A 200 whose body is not a readable reply: possibly charged.
    ProviderInvalidResponse,
    /// The provider's cumulative dollar ceiling refused the reservation.
    ProviderBudgetDenied,
    /// The caller's hourly tokens refused the reservation.
    CallerBudgetDenied,
    /// Herma's own store or coordinator failed around the attempt.
    StorageOrCoordinationUnavailable,
    /// A recorded skip: the operator paused the provider (`HERMA_CONVERSATION_DISABLED_PROVIDERS`);
    /// nothing was reserved or sent.
    ProviderOperatorDisabled,
    /// A recorded skip: the choice's upstream model identity is held by a rate or credit limit
    /// seen through another route (H17); nothing was reserved or sent.
    ProviderIdentityCooldown,
}

impl AttemptOutcome {
    pub const ALL: [AttemptOutcome; 13] = [
        AttemptOutcome::Completed,
        AttemptOutcome::ProviderNotConfigured,
        AttemptOutcome::ProviderRejected,
        AttemptOutcome::ProviderRateLimited,
        AttemptOutcome::ProviderPaymentRequired,
        AttemptOutcome::ProviderUnavailable,
        AttemptOutcome::ProviderOutcomeUncertain,
        AttemptOutcome::ProviderInvalidResponse,
        AttemptOutcome::ProviderBudgetDenied,
        AttemptOutcome::CallerBudgetDenied,
        AttemptOutcome::StorageOrCoordinationUnavailable,
        AttemptOutcome::ProviderOperatorDisabled,
        AttemptOutcome::ProviderIdentityCooldown,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Completed => "completed",
            AttemptOutcome::ProviderNotConfigured => "provider_not_configured",
            AttemptOutcome::ProviderRejected => "provider_rejected",
            AttemptOutcome::ProviderRateLimited => "provider_rate_limited",
            AttemptOutcome::ProviderPaymentRequired => "provider_payment_required",
            AttemptOutcome::ProviderUnavailable => "provider_unavailable",
            AttemptOutcome::ProviderOutcomeUncertain => "provider_outcome_uncertain",
            AttemptOutcome::ProviderInvalidResponse => "provider_invalid_response",
            AttemptOutcome::ProviderBudgetDenied => "provider_budget_denied",
            AttemptOutcome::CallerBudgetDenied => "caller_budget_denied",
            AttemptOutcome::StorageOrCoordinationUnavailable => {
                "storage_or_coordination_unavailable"
            }
            AttemptOutcome::ProviderOperatorDisabled => "provider_operator_disabled",
            AttemptOutcome::ProviderIdentityCooldown => "provider_identity_cooldown",
        }
    }

    /// The outcome of a reply outside 2xx, by status: 429 rate limited, 402 payment required,
    /// any other 4xx rejected, 503 and 529 unavailable; 500, 502, 504, any other 5xx (the
    /// provider may have generated) and any 1xx or 3xx (a redirect is never followed, so what the
    /// origin did is unknown) are uncertain.
    pub const fn for_rejection(status: u16) -> Self {
        match status {
            429 => AttemptOutcome::ProviderRateLimited,
            402 => AttemptOutcome::ProviderPaymentRequired,
            400..=499 => AttemptOutcome::ProviderRejected,
            503 | 529 => AttemptOutcome::ProviderUnavailable,
            _ => AttemptOutcome::ProviderOutcomeUncertain,
        }
    }

    /// True when the attempt is known to have cost nothing: it was never sent (not configured,
    /// a budget denial, an operator or identity skip) or the provider refused it before generating (rejected, rate limited,
    /// payment required, unavailable). Its reservation may be released. False for `completed`
    /// (charged as reported), the uncertain and invalid outcomes (possibly charged: never
    /// refunded on a guess) and a storage or coordination failure (it may have struck after
    /// the dispatch).
    pub const fn charge_known_zero(self) -> bool {
        match self {
            AttemptOutcome::ProviderNotConfigured
            | AttemptOutcome::ProviderRejected
            | AttemptOutcome::ProviderRateLimited
            | AttemptOutcome::ProviderPaymentRequired
            | AttemptOutcome::ProviderUnavailable
            | AttemptOutcome::ProviderBudgetDenied
            | AttemptOutcome::CallerBudgetDenied
            | AttemptOutcome::ProviderOperatorDisabled
            | AttemptOutcome::ProviderIdentityCooldown => true,
            AttemptOutcome::Completed
            | AttemptOutcome::ProviderOutcomeUncertain
            | AttemptOutcome::ProviderInvalidResponse
            | AttemptOutcome::StorageOrCoordinationUnavailable => false,
        }
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
