//! Governed failover: after each step of a planned turn, whether the turn advances to the
//! plan's next choice or stops. Deterministic, and only along the authorized order.
//!
//! | the step ended in | decision |
//! |---|---|
//! | `completed` (valid proposal or not) | stop: the turn has its answer |
//! | missing configuration (`provider_not_configured`), a recorded skip (`provider_operator_disabled`, `provider_identity_cooldown`) or a known rejection (`provider_rejected`, `provider_rate_limited`, `provider_payment_required`, `provider_unavailable`) | advance |
//! | `provider_budget_denied` (a per-provider ceiling, known denial) | advance only to an independently budgeted next choice |
//! | an unknown, possibly charged outcome (`provider_outcome_uncertain` — HTTP 202 and other unexpected non-200 successes, timeouts — or `provider_invalid_response`) | stop, unless the plan's `allow_uncertain_outcome` **and** the caller's grant's `allow_uncertain_failover` both allow it: then advance, and the next attempt records `follows_uncertain_attempt_id` |
//! | `caller_budget_denied`, `storage_or_coordination_unavailable`, a scope failure, a lost turn fence | stop, whatever the permissions |
//!
//! Every advance also needs a next choice and the plan's `allow_failover`. "Independently
//! budgeted" means the next choice reserves against no ceiling that just denied: a denial by a
//! ceiling shared with the next choice (a global one) is therefore passed with
//! `independently_budgeted: false`, and stops. The uncertain attempt keeps its reservation either
//! way (nothing is refunded on a guess); each further attempt reserves its own allowance.

use serde::{Deserialize, Serialize};

use super::plan::PlannedTurn;
use super::providers::AttemptOutcome;

/// How a step of a planned turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepEnd {
    /// An attempt, or a recorded skip, with its outcome.
    Attempt(AttemptOutcome),
    /// The caller's key or grant no longer admits the turn.
    ScopeFailure,
    /// Another process (the sweeper, recovery) took the turn's fence.
    TurnFenceLost,
}

/// What the plan and the caller's own grant permit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permissions {
    /// The plan's `allow_failover`.
    pub allow_failover: bool,
    /// The plan's `allow_uncertain_outcome`.
    pub allow_uncertain_outcome: bool,
    /// The caller's own grant's `allow_uncertain_failover` (the operator's alone).
    pub allow_uncertain_failover: bool,
}

impl Permissions {
    /// The permissions of a turn admitted under its plan.
    pub fn of(turn: &PlannedTurn) -> Self {
        Self {
            allow_failover: turn.plan.allow_failover,
            allow_uncertain_outcome: turn.plan.allow_uncertain_outcome,
            allow_uncertain_failover: turn.allow_uncertain_failover,
        }
    }

    /// Both halves of the uncertainty grant: the plan's opt-in and the operator's.
    pub const fn uncertain_failover(self) -> bool {
        self.allow_uncertain_outcome && self.allow_uncertain_failover
    }
}

/// The plan's next choice, as far as the decision needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextChoice {
    /// It reserves against no ceiling that just denied.
    pub independently_budgeted: bool,
}

/// The decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Failover {
    /// Try the next choice; `follows_uncertain` when the step's outcome was unknown (the next
    /// attempt records `follows_uncertain_attempt_id` and `server_exception.uncertain_failover`).
    Advance {
        follows_uncertain: bool,
    },
    Stop,
}

/// How an attempt outcome bears on failover.
enum Class {
    Finished,
    Known,
    ProviderBudget,
    Uncertain,
    Halt,
}

fn class(outcome: AttemptOutcome) -> Class {
    match outcome {
        AttemptOutcome::Completed => Class::Finished,
        AttemptOutcome::ProviderNotConfigured
        | AttemptOutcome::ProviderRejected
        | AttemptOutcome::ProviderRateLimited
        | AttemptOutcome::ProviderPaymentRequired
        | AttemptOutcome::ProviderUnavailable
        | AttemptOutcome::ProviderOperatorDisabled
        | AttemptOutcome::ProviderIdentityCooldown => Class::Known,
        AttemptOutcome::ProviderBudgetDenied => Class::ProviderBudget,
        AttemptOutcome::ProviderOutcomeUncertain | AttemptOutcome::ProviderInvalidResponse => {
            Class::Uncertain
        }
        AttemptOutcome::CallerBudgetDenied | AttemptOutcome::StorageOrCoordinationUnavailable => {
            Class::Halt
        }
    }
}

/// Advance or stop after `end`, given the `permissions` and the plan's `next` choice (`None`
/// when the plan is exhausted).
pub fn after_step(end: StepEnd, permissions: Permissions, next: Option<NextChoice>) -> Failover {
    let outcome = match end {
        StepEnd::Attempt(outcome) => outcome,
        StepEnd::ScopeFailure | StepEnd::TurnFenceLost => return Failover::Stop,
    };
    let Some(next) = next.filter(|_| permissions.allow_failover) else {
        return Failover::Stop;
    };
    match class(outcome) {
        Class::Known => Failover::Advance {
            follows_uncertain: false,
        },
        Class::ProviderBudget if next.independently_budgeted => Failover::Advance {
            follows_uncertain: false,
        },
        Class::Uncertain if permissions.uncertain_failover() => Failover::Advance {
            follows_uncertain: true,
        },
        Class::ProviderBudget | Class::Uncertain | Class::Finished | Class::Halt => Failover::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const OPEN: Permissions = Permissions {
        allow_failover: true,
        allow_uncertain_outcome: false,
        allow_uncertain_failover: false,
    };
    const BUDGETED: Option<NextChoice> = Some(NextChoice {
        independently_budgeted: true,
    });
    const ADVANCE: Failover = Failover::Advance {
        follows_uncertain: false,
    };
    const AFTER_UNCERTAIN: Failover = Failover::Advance {
        follows_uncertain: true,
    };

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn every_outcome_has_its_decision_with_plain_permissions() {
        for outcome in AttemptOutcome::ALL {
            let expected = match outcome.as_str() {
                "provider_not_configured"
                | "provider_rejected"
                | "provider_rate_limited"
                | "provider_payment_required"
                | "provider_unavailable"
                | "provider_operator_disabled"
                | "provider_identity_cooldown"
                | "provider_budget_denied" => ADVANCE,
                _ => Failover::Stop,
            };
            assert_eq!(
                after_step(StepEnd::Attempt(outcome), OPEN, BUDGETED),
                expected,
                "{outcome}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn unknown_outcomes_need_both_halves_of_the_uncertainty_grant() {
        for outcome in [
            AttemptOutcome::ProviderOutcomeUncertain,
            AttemptOutcome::ProviderInvalidResponse,
        ] {
            for (plan, grant, expected) in [
                (false, false, Failover::Stop),
                (true, false, Failover::Stop),
                (false, true, Failover::Stop),
                (true, true, AFTER_UNCERTAIN),
            ] {
                let permissions = Permissions {
                    allow_uncertain_outcome: plan,
                    allow_uncertain_failover: grant,
                    ..OPEN
                };
                assert_eq!(
                    after_step(StepEnd::Attempt(outcome), permissions, BUDGETED),
                    expected,
                    "{outcome} plan={plan} grant={grant}"
                );
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn halts_stop_even_under_every_permission() {
        let all = Permissions {
            allow_failover: true,
            allow_uncertain_outcome: true,
            allow_uncertain_failover: true,
        };
        for end in [
            StepEnd::Attempt(AttemptOutcome::CallerBudgetDenied),
            StepEnd::Attempt(AttemptOutcome::StorageOrCoordinationUnavailable),
            StepEnd::Attempt(AttemptOutcome::Completed),
            StepEnd::ScopeFailure,
            StepEnd::TurnFenceLost,
        ] {
            assert_eq!(after_step(end, all, BUDGETED), Failover::Stop, "{end:?}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_provider_budget_denial_advances_only_to_an_independent_budget() {
        let denied = StepEnd::Attempt(AttemptOutcome::ProviderBudgetDenied);
        assert_eq!(after_step(denied, OPEN, BUDGETED), ADVANCE);
        let shared = Some(NextChoice {
            independently_budgeted: false,
        });
        assert_eq!(after_step(denied, OPEN, shared), Failover::Stop);
        // Only the budget denial looks at the next choice's budget.
        let rejected = StepEnd::Attempt(AttemptOutcome::ProviderRejected);
        assert_eq!(after_step(rejected, OPEN, shared), ADVANCE);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn no_next_choice_or_no_failover_stops() {
        let rejected = StepEnd::Attempt(AttemptOutcome::ProviderRejected);
        assert_eq!(after_step(rejected, OPEN, None), Failover::Stop);
        let pinned = Permissions {
            allow_failover: false,
            allow_uncertain_outcome: true,
            allow_uncertain_failover: true,
        };
        assert_eq!(after_step(rejected, pinned, BUDGETED), Failover::Stop);
        let uncertain = StepEnd::Attempt(AttemptOutcome::ProviderOutcomeUncertain);
        assert_eq!(after_step(uncertain, pinned, BUDGETED), Failover::Stop);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h17_uncertainty_grant_defaults_off_and_a_plan_cannot_supply_it() {
        use super::super::grants::Grants;
        use super::super::plan::{PlanEntry, admit_plan_turn};
        use super::super::turn::TurnBody;
        use crate::caller::CallerScope;
        use crate::problem::ProblemCode;
        use serde_json::json;

        let (a, b) = ("key:0123456789abcdef", "key:fedcba9876543210");
        let choices =
            json!([{"provider": "meta", "model": "m"}, {"provider": "ollama", "model": "o"}]);
        let grants = Grants::parse(Some(
            &json!([
                {"caller_scope": a, "providers": choices},
                {"caller_scope": b, "providers": choices, "allow_uncertain_failover": true}
            ])
            .to_string(),
        ))
        .unwrap();
        let body: TurnBody = crate::json::decode(json!({
            "conversation_id": "c", "request_id": "r", "expected_version": 0, "message": "hi",
            "context_refs": ["plan.main"], "provider": "meta", "provider_plan_ref": "plan.main"
        }))
        .unwrap();
        let uncertain = StepEnd::Attempt(AttemptOutcome::ProviderOutcomeUncertain);
        let decide = |caller: &str, plan: Value| {
            let owner = CallerScope::parse(caller).unwrap();
            let stored = json!({"provider_plan": plan});
            let entry = PlanEntry {
                id: "plan.main",
                owner: &owner,
                kind: "noun",
                schema_or_body: &stored,
            };
            admit_plan_turn(&owner, &grants, &body, &entry)
                .map(|turn| after_step(uncertain, Permissions::of(&turn), BUDGETED))
        };
        let plan = |extra: Value| {
            let mut plan = json!({"context_refs": [], "providers": choices});
            plan.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            plan
        };
        // Off by default on both sides.
        assert_eq!(decide(a, plan(json!({}))), Ok(Failover::Stop));
        assert_eq!(decide(b, plan(json!({}))), Ok(Failover::Stop));
        // The plan's opt-in alone does not do it, and B's grant does not lend itself to A.
        let opted_in = plan(json!({"allow_uncertain_outcome": true}));
        assert_eq!(decide(a, opted_in.clone()), Ok(Failover::Stop));
        // A plan cannot supply the operator's half, even for a caller whose grant has it.
        for caller in [a, b] {
            let err = decide(
                caller,
                plan(json!({"allow_uncertain_outcome": true, "allow_uncertain_failover": true})),
            )
            .unwrap_err();
            assert_eq!(err.code, ProblemCode::ValidationFailed);
            assert_eq!(
                err.errors[0].pointer,
                "/schema_or_body/provider_plan/allow_uncertain_failover"
            );
        }
        // Only the caller's own grant and its own plan's opt-in together advance.
        assert_eq!(decide(b, opted_in), Ok(AFTER_UNCERTAIN));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn failover_parity_fixtures_hold() {
        let fixture = crate::json::parse_strict(
            include_str!("../../../../parity/conversation_failover.json").as_bytes(),
        )
        .unwrap();
        let cases = fixture["failover"].as_array().unwrap();
        assert!(cases.len() >= 30, "{}", cases.len());
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let end = match case["end"].as_str().unwrap() {
                "scope_failure" => StepEnd::ScopeFailure,
                "turn_fence_lost" => StepEnd::TurnFenceLost,
                outcome => StepEnd::Attempt(serde_json::from_value(outcome.into()).expect(name)),
            };
            let permissions: Permissions =
                serde_json::from_value(case["permissions"].clone()).expect(name);
            let next: Option<NextChoice> =
                serde_json::from_value(case["next"].clone()).expect(name);
            let decision = after_step(end, permissions, next);
            let expected: Value = case["expect"].clone();
            assert_eq!(serde_json::to_value(decision).unwrap(), expected, "{name}");
        }
    }
}
