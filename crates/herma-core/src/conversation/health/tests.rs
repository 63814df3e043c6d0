use super::*;

const T0: i64 = 1_796_000_000_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_millis(T0 + seconds * 1000)
}

fn openai() -> Resources {
    Resources::of(Provider::Openai, DEFAULT_ACCOUNT, "gpt-x")
}

fn openrouter() -> Resources {
    Resources::of(Provider::Openrouter, DEFAULT_ACCOUNT, "openai/GPT-X:free")
}

const OPEN: Recovery = Recovery {
    allow_probe: true,
    uncertain: false,
};

fn finished(outcome: AttemptOutcome, guidance: &[(String, String)]) -> Finished<'_> {
    Finished {
        outcome,
        diagnostics: None,
        guidance,
        started_at: at(0),
        now: at(1),
        probed: None,
    }
}

fn retry_after(seconds: u64) -> Vec<(String, String)> {
    vec![("Retry-After".to_owned(), seconds.to_string())]
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn resources_are_keyed_by_provider_account_model_and_identity() {
    let r = openai();
    assert_eq!(r.route, "route:openai:operator:gpt-x");
    assert_eq!(r.account, "account:openai:operator");
    assert_eq!(r.identity, "identity:openai/gpt-x");
    assert_eq!(openrouter().identity, r.identity);
    let other = Resources::of(Provider::Openai, "team-b", "gpt-x");
    assert_ne!(other.route, r.route);
    assert_eq!(other.identity, r.identity);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn nothing_stored_is_clear() {
    assert_eq!(gate(&[], &openai(), at(0), OPEN), Gate::Clear);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn h17_a_rate_limit_holds_the_upstream_model_against_other_credentials() {
    let guidance = retry_after(30);
    let settled = settle(
        &finished(AttemptOutcome::ProviderRateLimited, &guidance),
        &openai(),
        &[],
    );
    let scopes: Vec<HealthScope> = settled.limits.iter().map(|r| r.scope).collect();
    assert_eq!(
        scopes,
        [HealthScope::Route, HealthScope::UpstreamModelIdentity]
    );
    for record in &settled.limits {
        assert_eq!(record.until, at(31));
        assert_eq!(record.source, "retry_after");
        assert_eq!(record.origin, openai().route);
    }
    // Another credential for the same model is held…
    match gate(&settled.limits, &openrouter(), at(10), OPEN) {
        Gate::Skip { skip } => {
            assert_eq!(skip.outcome, AttemptOutcome::ProviderIdentityCooldown);
            assert_eq!(skip.reason, SkipReason::IdentityHeld);
            assert_eq!(skip.scope, HealthScope::UpstreamModelIdentity);
            assert_eq!(skip.next_eligible_at, at(31));
        }
        other => panic!("{other:?}"),
    }
    // …the limited route keeps its own cooldown and then its one probe…
    match gate(&settled.limits, &openai(), at(10), OPEN) {
        Gate::Skip { skip } => {
            assert_eq!(skip.outcome, AttemptOutcome::ProviderRateLimited);
            assert_eq!(skip.reason, SkipReason::Cooldown);
            assert_eq!(skip.scope, HealthScope::Route);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        gate(&settled.limits, &openai(), at(31), OPEN),
        Gate::Probe {
            resource: openai().route
        }
    );
    // …and the hold ends with its delay.
    assert_eq!(
        gate(&settled.limits, &openrouter(), at(31), OPEN),
        Gate::Clear
    );
    // The same provider under another account alias is not held: its health is its own.
    let alias = Resources::of(Provider::Openai, "team-b", "gpt-x");
    assert_eq!(gate(&settled.limits, &alias, at(10), OPEN), Gate::Clear);
    // A different model is never held.
    let other = Resources::of(Provider::Openrouter, DEFAULT_ACCOUNT, "openai/gpt-y");
    assert_eq!(gate(&settled.limits, &other, at(10), OPEN), Gate::Clear);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn credit_exhaustion_blocks_the_account_across_models_for_five_minutes() {
    let settled = settle(
        &finished(AttemptOutcome::ProviderPaymentRequired, &[]),
        &openai(),
        &[],
    );
    let scopes: Vec<HealthScope> = settled.limits.iter().map(|r| r.scope).collect();
    assert_eq!(
        scopes,
        [
            HealthScope::Route,
            HealthScope::Account,
            HealthScope::UpstreamModelIdentity
        ]
    );
    assert!(settled.limits.iter().all(|r| r.until == at(301)));
    assert!(settled.limits.iter().all(|r| r.source == "backoff"));
    let another_model = Resources::of(Provider::Openai, DEFAULT_ACCOUNT, "gpt-y");
    match gate(&settled.limits, &another_model, at(100), OPEN) {
        Gate::Skip { skip } => {
            assert_eq!(skip.scope, HealthScope::Account);
            assert_eq!(skip.outcome, AttemptOutcome::ProviderPaymentRequired);
        }
        other => panic!("{other:?}"),
    }
    // After the delay, one account-wide probe.
    assert_eq!(
        gate(&settled.limits, &another_model, at(301), OPEN),
        Gate::Probe {
            resource: openai().account
        }
    );
    // Another account alias of the same provider keeps its own health.
    let team = Resources::of(Provider::Openai, "team-b", "gpt-y");
    assert_eq!(gate(&settled.limits, &team, at(100), OPEN), Gate::Clear);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn unknown_outcomes_and_unavailability_cool_the_route_only() {
    for outcome in [
        AttemptOutcome::ProviderOutcomeUncertain,
        AttemptOutcome::ProviderInvalidResponse,
        AttemptOutcome::ProviderUnavailable,
    ] {
        let settled = settle(&finished(outcome, &[]), &openai(), &[]);
        assert_eq!(settled.limits.len(), 1, "{outcome}");
        assert_eq!(settled.limits[0].scope, HealthScope::Route);
        assert_eq!(settled.limits[0].until, at(31));
    }
    for outcome in [
        AttemptOutcome::Completed,
        AttemptOutcome::ProviderRejected,
        AttemptOutcome::ProviderNotConfigured,
        AttemptOutcome::ProviderBudgetDenied,
    ] {
        assert_eq!(
            settle(&finished(outcome, &[]), &openai(), &[]),
            Settlement::default(),
            "{outcome}"
        );
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn recovery_is_one_probe_that_doubles_the_backoff_when_it_fails_and_clears_when_it_succeeds() {
    let first = settle(
        &finished(AttemptOutcome::ProviderUnavailable, &[]),
        &openai(),
        &[],
    );
    assert_eq!(first.limits[0].failures, 0);
    let mut probe = finished(AttemptOutcome::ProviderUnavailable, &[]);
    probe.probed = Some("route:openai:operator:gpt-x");
    probe.now = at(40);
    let again = settle(&probe, &openai(), &first.limits);
    assert_eq!(again.limits[0].failures, 1);
    assert_eq!(again.limits[0].until, at(100), "30 s doubled");
    probe.outcome = AttemptOutcome::Completed;
    let healed = settle(&probe, &openai(), &again.limits);
    assert!(healed.limits.is_empty());
    assert_eq!(healed.clears, [openai().route, openai().account]);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_lease_out_skips_and_a_passed_lease_becomes_uncertain_once() {
    let mut record = settle(
        &finished(AttemptOutcome::ProviderRateLimited, &retry_after(10)),
        &openai(),
        &[],
    )
    .limits
    .remove(0);
    record.probe_until = Some(at(131));
    record.probe_id = Some("p1".into());
    match gate(std::slice::from_ref(&record), &openai(), at(60), OPEN) {
        Gate::Skip { skip } => {
            assert_eq!(skip.reason, SkipReason::ProbeInFlight);
            assert_eq!(skip.next_eligible_at, at(131));
        }
        other => panic!("{other:?}"),
    }
    match gate(std::slice::from_ref(&record), &openai(), at(131), OPEN) {
        Gate::ExpireProbe {
            probe_id,
            record: replaced,
            skip,
        } => {
            assert_eq!(probe_id, "p1");
            assert_eq!(replaced.condition, "uncertain");
            assert_eq!(replaced.failures, 1);
            assert_eq!(replaced.until, at(191));
            assert_eq!(replaced.probe_until, None);
            assert_eq!(skip.reason, SkipReason::ProbeExpired);
            assert_eq!(skip.outcome, AttemptOutcome::ProviderUnavailable);
            // Recovery from uncertain needs both halves of the uncertainty grant.
            let stored = [replaced];
            match gate(&stored, &openai(), at(191), OPEN) {
                Gate::Skip { skip } => {
                    assert_eq!(skip.reason, SkipReason::UncertainRecoveryNotGranted)
                }
                other => panic!("{other:?}"),
            }
            let granted = Recovery {
                allow_probe: true,
                uncertain: true,
            };
            assert!(matches!(
                gate(&stored, &openai(), at(191), granted),
                Gate::Probe { .. }
            ));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_plan_may_pause_recovery() {
    let limits = settle(
        &finished(AttemptOutcome::ProviderRateLimited, &retry_after(5)),
        &openai(),
        &[],
    )
    .limits;
    let paused = Recovery {
        allow_probe: false,
        uncertain: true,
    };
    match gate(&limits, &openai(), at(60), paused) {
        Gate::Skip { skip } => assert_eq!(skip.reason, SkipReason::RecoveryPaused),
        other => panic!("{other:?}"),
    }
}

fn fixtures() -> serde_json::Value {
    crate::json::parse_strict(
        include_str!("../../../../../parity/conversation_health.json").as_bytes(),
    )
    .expect("the fixture parses strictly")
}

fn resources_of(case: &serde_json::Value) -> Resources {
    let provider = Provider::parse(case["provider"].as_str().unwrap()).unwrap();
    Resources::of(
        provider,
        case["account"].as_str().unwrap(),
        case["model"].as_str().unwrap(),
    )
}

fn records_of(case: &serde_json::Value) -> Vec<HealthRecord> {
    serde_json::from_value(case["records"].clone()).expect("records")
}

fn time_of(value: &serde_json::Value) -> Timestamp {
    Timestamp::parse_rfc3339(value.as_str().unwrap()).unwrap()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn gate_fixtures_decide_as_stated() {
    let fixtures = fixtures();
    let cases = fixtures["gate"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let recovery = Recovery {
            allow_probe: case["recovery"]["allow_probe"].as_bool().unwrap(),
            uncertain: case["recovery"]["uncertain"].as_bool().unwrap(),
        };
        let got = gate(
            &records_of(case),
            &resources_of(case),
            time_of(&case["now"]),
            recovery,
        );
        assert_eq!(serde_json::to_value(&got).unwrap(), case["gate"], "{name}");
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn settle_fixtures_write_as_stated() {
    let fixtures = fixtures();
    let cases = fixtures["settle"].as_array().unwrap();
    assert!(cases.len() >= 7);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let outcome: AttemptOutcome = serde_json::from_value(case["outcome"].clone()).unwrap();
        let guidance: Vec<(String, String)> =
            serde_json::from_value(case["guidance"].clone()).unwrap();
        let finished = Finished {
            outcome,
            diagnostics: None,
            guidance: &guidance,
            started_at: time_of(&case["started_at"]),
            now: time_of(&case["now"]),
            probed: case["probed"].as_str(),
        };
        let got = settle(&finished, &resources_of(case), &records_of(case));
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            case["settlement"],
            "{name}"
        );
    }
}
