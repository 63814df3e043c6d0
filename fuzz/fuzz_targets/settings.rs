//! Operator settings (`Settings::from_map`, `settings::report`, `settings::unknown_settings`)
//! and each provider's conversation configuration, from any `NAME=value` lines. A line whose
//! name Herma does not know sets a known setting picked by the name's hash, so every setting
//! gets arbitrary values; the names as written are also read, for the typo check.
//!
//! Invariants: nothing panics; every refusal names a known setting and says why; and a secret
//! (a setting whose kind is a credential) shows in nothing Herma prints — not in a refusal,
//! `herma config check`'s lines, the settings' `Debug` or a provider's configuration problem:
//! each of those is the same when every secret is swapped for another of its length.

#![no_main]

use std::collections::BTreeMap;

use herma_core::conversation::config::{ProviderConfig, caller_tokens_per_hour, grants};
use herma_core::settings::{self, ConversationEnv, Settings};
use herma_core::upstream::Provider;
use herma_fuzz::fnv;
use libfuzzer_sys::fuzz_target;

/// Everything a process prints about its settings, for one map.
fn printed(map: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    match Settings::from_map(map) {
        Ok(settings) => out.push(format!("{settings:?}")),
        Err(errors) => out.extend(errors.iter().map(ToString::to_string)),
    }
    out.extend(
        settings::report(map)
            .into_iter()
            .map(|line| format!("{line:?}")),
    );
    let env = ConversationEnv::new(map.clone());
    for provider in Provider::ALL {
        if let Err(problem) = ProviderConfig::resolve(&env, provider) {
            out.push(format!("{problem:?}"));
        }
    }
    if let Err(problem) = grants(&env) {
        out.push(format!("{problem:?}"));
    }
    if let Err(problem) = caller_tokens_per_hour(&env) {
        out.push(format!("{problem:?}"));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let declared: Vec<_> = settings::table::all().collect();
    let names: Vec<String> = declared.iter().flat_map(|d| d.names()).collect();
    let secrets: Vec<String> = declared
        .iter()
        .filter(|d| d.describe().accepts().starts_with("secret"))
        .flat_map(|d| d.names())
        .collect();

    let text = String::from_utf8_lossy(data);
    let mut written = BTreeMap::new();
    let mut map = BTreeMap::new();
    for line in text.split('\n') {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        written.insert(name.to_owned(), value.to_owned());
        let name = if names.iter().any(|n| n == name) {
            name.to_owned()
        } else {
            let pick = usize::try_from(fnv(name.as_bytes()) % names.len() as u64).unwrap_or(0);
            names[pick].clone()
        };
        map.insert(name, value.to_owned());
    }

    for typo in settings::unknown_settings(&written) {
        assert!(typo.starts_with("HERMA_") && !names.contains(&typo));
    }
    let _ = Settings::from_map(&written);

    if let Err(errors) = Settings::from_map(&map) {
        assert!(!errors.is_empty(), "a refusal lists what is wrong");
        for error in &errors {
            assert!(
                names.contains(&error.name),
                "a refusal names a known setting: {error}"
            );
            assert!(
                !error.detail.trim().is_empty(),
                "a refusal says why: {error}"
            );
        }
    }

    // The same map with every secret swapped for another of the same length.
    let mut swapped = map.clone();
    for name in &secrets {
        if let Some(value) = swapped.get_mut(name) {
            *value = value
                .chars()
                .map(|c| if c.is_whitespace() { c } else { 'x' })
                .collect();
        }
    }
    assert_eq!(
        printed(&map),
        printed(&swapped),
        "a secret shows in what Herma prints"
    );
});
