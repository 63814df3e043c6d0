use serde_json::{Value, json};

use super::*;
use crate::conversation::failover::{Failover, NextChoice, Permissions, StepEnd, after_step};

fn now() -> Timestamp {
    Timestamp::parse_rfc3339("2026-11-30T09:00:00Z").unwrap()
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn delay(condition: Condition, pairs: &[(&str, &str)], failures: u32) -> (u64, &'static str) {
    let cooldown = cooldown(condition, &headers(pairs), now(), failures);
    (cooldown.seconds, cooldown.source.as_str())
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn h17_rate_limit_holds_the_upstream_model_against_other_credentials() {
    // A 429 through OpenRouter on OpenAI's model...
    let limited = Condition::of(AttemptOutcome::ProviderRateLimited, None).unwrap();
    let held = limited
        .held_identity(Provider::Openrouter, "openai/gpt-x:free")
        .unwrap();
    // ...holds the direct OpenAI route to the same model for the same delay,
    assert_eq!(
        held,
        upstream_identity(Provider::Openai, "gpt-x-2025-01-31")
    );
    let hold = cooldown(limited, &headers(&[("retry-after", "40")]), now(), 0);
    assert_eq!(hold.until(now()), now().plus_millis(40_000));
    // ...but not another model, which an explicit plan may continue to.
    assert_ne!(
        held,
        upstream_identity(Provider::Anthropic, "claude-sonnet-4-5")
    );
    let plan = Permissions {
        allow_failover: true,
        ..Permissions::default()
    };
    let next = Some(NextChoice {
        independently_budgeted: true,
    });
    assert_eq!(
        after_step(
            StepEnd::Attempt(AttemptOutcome::ProviderIdentityCooldown),
            plan,
            next
        ),
        Failover::Advance {
            follows_uncertain: false
        }
    );
    // Credit exhaustion holds it too and blocks the whole account; unavailability holds nothing.
    let credit = Condition::of(AttemptOutcome::ProviderPaymentRequired, None).unwrap();
    assert!(credit.holds_identity() && credit.blocks_account());
    assert!(!limited.blocks_account());
    let unavailable = Condition::of(AttemptOutcome::ProviderUnavailable, None).unwrap();
    assert_eq!(unavailable.held_identity(Provider::Openai, "gpt-x"), None);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn guidance_comes_first_then_the_reset_headers_then_backoff() {
    let rate = Condition::RateLimited;
    for (pairs, expected) in [
        (&[("Retry-After", "120")][..], (120, "retry_after")),
        (
            &[("retry-after", "Mon, 30 Nov 2026 09:01:30 GMT")],
            (90, "retry_after"),
        ),
        (
            &[
                ("retry-after", "soon"),
                ("x-ratelimit-reset-tokens", "1m30s"),
            ],
            (90, "openai_reset"),
        ),
        (
            &[
                ("x-ratelimit-reset-requests", "250ms"),
                ("anthropic-ratelimit-requests-reset", "2026-11-30T09:00:42Z"),
            ],
            (1, "openai_reset"),
        ),
        (
            &[("anthropic-ratelimit-requests-reset", "2026-11-30T09:00:42Z")],
            (42, "anthropic_reset"),
        ),
        (&[("x-ratelimit-reset-requests", "90")], (30, "backoff")),
        (&[], (30, "backoff")),
    ] {
        assert_eq!(delay(rate, pairs, 0), expected, "{pairs:?}");
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn backoff_doubles_per_repeated_failure_up_to_an_hour() {
    let seconds = |condition, failures| delay(condition, &[], failures).0;
    let rate: Vec<u64> = (0..9).map(|n| seconds(Condition::RateLimited, n)).collect();
    assert_eq!(rate, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
    let credit: Vec<u64> = (0..6)
        .map(|n| seconds(Condition::CreditExhausted, n))
        .collect();
    assert_eq!(credit, [300, 600, 1200, 2400, 3600, 3600]);
    assert_eq!(
        seconds(Condition::Uncertain, u32::MAX),
        MAX_COOLDOWN_SECONDS
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn durations_and_dates_read_strictly() {
    for (raw, millis) in [
        ("1m30s", Some(90_000)),
        ("6s", Some(6000)),
        ("250ms", Some(250)),
        ("1h2m3.5s", Some(3_723_500)),
        ("0.0001s", Some(1)),
        ("1.25ms", Some(2)),
        ("", None),
        ("s", None),
        ("1", None),
        ("1m1h", None),
        ("1s1s", None),
        ("1.s", None),
        (".5s", None),
        ("1.0000000001s", None),
        ("1 s", None),
        ("1S", None),
    ] {
        assert_eq!(duration_millis(raw), millis, "{raw:?}");
    }
    let at = |raw: &str| http_date_millis(raw, now());
    let expected = Some(784_111_777_000);
    assert_eq!(at("Sun, 06 Nov 1994 08:49:37 GMT"), expected);
    assert_eq!(at("Sunday, 06-Nov-94 08:49:37 GMT"), expected);
    assert_eq!(at("Sun Nov  6 08:49:37 1994"), expected);
    // Two-digit years more than 50 years ahead of `now` (2026) are last century's: 77 is 1977.
    assert_eq!(
        at("Saturday, 01-Jan-77 00:00:00 GMT"),
        Some(220_924_800_000)
    );
    // Exactly 50 years ahead is not more than 50: 76 is 2076.
    assert_eq!(
        at("Wednesday, 01-Jan-76 00:00:00 GMT"),
        Some(3_345_062_400_000)
    );
    assert_eq!(
        at("Friday, 01-Jan-77 00:00:00 GMT").map(|_| ()),
        Some(()),
        "the day name is not checked against the date"
    );
    for bad in [
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 31 Feb 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:60 GMT",
        "sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 nov 1994 08:49:37 GMT",
        "Sun 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37",
        "1994-11-06T08:49:37Z",
    ] {
        assert_eq!(at(bad), None, "{bad}");
    }
}

fn fixture() -> Value {
    crate::json::parse_strict(
        include_str!("../../../../../parity/conversation_cooldowns.json").as_bytes(),
    )
    .unwrap()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn condition_parity_fixtures_hold() {
    let fixture = fixture();
    let cases = fixture["conditions"].as_array().unwrap();
    assert!(cases.len() >= 20, "{}", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let outcome: AttemptOutcome = serde_json::from_value(case["outcome"].clone()).expect(name);
        let diagnostics: Option<ProviderDiagnostics> =
            serde_json::from_value(case["diagnostics"].clone()).expect(name);
        let condition = Condition::of(outcome, diagnostics.as_ref());
        assert_eq!(json!(condition), case["condition"], "{name}");
        let holds = condition.is_some_and(Condition::holds_identity);
        let blocks = condition.is_some_and(Condition::blocks_account);
        assert_eq!(json!(holds), case["holds_identity"], "{name}");
        assert_eq!(json!(blocks), case["blocks_account"], "{name}");
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn hold_parity_fixtures_hold() {
    let fixture = fixture();
    let cases = fixture["holds"].as_array().unwrap();
    assert!(cases.len() >= 5, "{}", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let provider = Provider::parse(case["provider"].as_str().unwrap()).expect(name);
        let condition: Condition = serde_json::from_value(case["condition"].clone()).expect(name);
        let held = condition.held_identity(provider, case["model"].as_str().unwrap());
        assert_eq!(json!(held), case["held_identity"], "{name}");
    }
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn delay_parity_fixtures_hold() {
    let fixture = fixture();
    let cases = fixture["delays"].as_array().unwrap();
    assert!(cases.len() >= 50, "{}", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let condition: Condition = serde_json::from_value(case["condition"].clone()).expect(name);
        let pairs: Vec<(String, String)> =
            serde_json::from_value(case["headers"].clone()).expect(name);
        let now = Timestamp::parse_rfc3339(case["now"].as_str().unwrap()).expect(name);
        let failures = u32::try_from(case["repeated_failures"].as_u64().unwrap()).expect(name);
        let got = cooldown(condition, &pairs, now, failures);
        assert_eq!(json!(got.seconds), case["seconds"], "{name}");
        assert_eq!(got.source.as_str(), case["source"], "{name}");
        assert_eq!(json!(got.source), case["source"], "{name}");
    }
}
