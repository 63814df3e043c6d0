//! Upstream model identity: the one `vendor/model` name an upstream model has behind every
//! route that reaches it, the same in every runtime (H17). A plan names each identity once, and
//! a rate or credit limit seen through one route holds the identity against the others.
//!
//! The vendor is the provider for the direct providers (`meta`, `openai`, `anthropic`). For
//! OpenRouter it is the model's author prefix (`openai/gpt-x` → `openai`), whichever host
//! serves it, through [`AUTHOR_ALIASES`] (`meta-llama` → `meta`); an OpenRouter model without
//! an author prefix keeps `openrouter`. Ollama Cloud keeps `ollama`: an open-weight name does
//! not identify one upstream account.
//!
//! The model is folded, in this order (ASCII only, so every runtime computes the same bytes):
//! 1. ASCII letters are lowercased; other characters are kept as they are;
//! 2. everything from the first `:` or `@` is dropped (`:free`, `:beta`, `:120b`, `@20240620`);
//! 3. (OpenRouter) the author prefix is split off at the first `/` and folded like a model,
//!    then looked up in [`AUTHOR_ALIASES`];
//! 4. `.` and `_` become `-`, runs of `-` become one, and `-` is trimmed from both ends;
//! 5. a trailing `-latest` and a trailing dated snapshot — `-YYYYMMDD` or `-YYYY-MM-DD`, with
//!    `YYYY` in 2000–2099, `MM` 01–12 and `DD` 01–31 — are dropped, repeatedly, as long as
//!    something is left in front.
//!
//! This deliberately over-matches: treating two models as one only prevents failover between
//! them. It cannot resolve marketing aliases, so an operator should not grant two routes to one
//! model under unrelated names.

use crate::upstream::Provider;

/// OpenRouter author prefixes that name a direct provider's vendor under another name (after
/// folding). Only aliases that reach a direct provider matter: any other author is its own
/// vendor already.
pub const AUTHOR_ALIASES: &[(&str, &str)] = &[("meta-llama", "meta")];

/// The vendor of an OpenRouter model without an author prefix.
const UNPREFIXED_OPENROUTER_VENDOR: &str = "openrouter";

/// `vendor/model` for `model` reached through `provider`.
pub fn upstream_identity(provider: Provider, model: &str) -> String {
    let lowered = model.to_ascii_lowercase();
    let untagged = lowered.split([':', '@']).next().unwrap_or(lowered.as_str());
    let (vendor, name) = match provider {
        Provider::Meta | Provider::Openai | Provider::Anthropic | Provider::Ollama => {
            (provider.as_str().to_owned(), untagged)
        }
        Provider::Openrouter => match untagged.split_once('/') {
            Some((author, name)) => (author_vendor(author), name),
            None => (UNPREFIXED_OPENROUTER_VENDOR.to_owned(), untagged),
        },
    };
    format!("{vendor}/{}", fold_model(name))
}

/// The vendor an OpenRouter author prefix stands for.
fn author_vendor(author: &str) -> String {
    let folded = fold_separators(author);
    AUTHOR_ALIASES
        .iter()
        .find(|(alias, _)| *alias == folded)
        .map_or(folded, |(_, vendor)| (*vendor).to_owned())
}

/// Steps 4 and 5 of the module doc.
fn fold_model(name: &str) -> String {
    let mut folded = fold_separators(name);
    while let Some(shorter) = strip_latest(&folded).or_else(|| strip_snapshot(&folded)) {
        folded = shorter.to_owned();
    }
    folded
}

/// `.` and `_` to `-`, one `-` for a run, none at either end.
fn fold_separators(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c == '.' || c == '_' { '-' } else { c };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

fn strip_latest(name: &str) -> Option<&str> {
    name.strip_suffix("-latest").filter(|rest| !rest.is_empty())
}

/// `name` without a trailing `-YYYYMMDD` or `-YYYY-MM-DD`, when it has one.
fn strip_snapshot(name: &str) -> Option<&str> {
    let compact = name.len().checked_sub(9).and_then(|at| {
        let tail = name.get(at..)?.as_bytes();
        let date = tail.strip_prefix(b"-")?;
        is_date(&date[..4], &date[4..6], &date[6..8]).then_some(at)
    });
    let dashed = || {
        name.len().checked_sub(11).and_then(|at| {
            let tail = name.get(at..)?.as_bytes();
            let date = tail.strip_prefix(b"-")?;
            let dashes = date[4] == b'-' && date[7] == b'-';
            (dashes && is_date(&date[..4], &date[5..7], &date[8..10])).then_some(at)
        })
    };
    compact
        .or_else(dashed)
        .map(|at| &name[..at])
        .filter(|rest| !rest.is_empty())
}

fn is_date(year: &[u8], month: &[u8], day: &[u8]) -> bool {
    let digits = |part: &[u8]| -> Option<u32> {
        part.iter().try_fold(0u32, |n, b| {
            b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
        })
    };
    matches!(
        (digits(year), digits(month), digits(day)),
        (Some(2000..=2099), Some(1..=12), Some(1..=31))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn direct_providers_are_their_own_vendor() {
        for (provider, model, identity) in [
            (Provider::Meta, "muse-spark-1.3", "meta/muse-spark-1-3"),
            (Provider::Openai, "gpt-x", "openai/gpt-x"),
            (Provider::Openai, "GPT-4o-2024-08-06", "openai/gpt-4o"),
            (Provider::Openai, "gpt-4.1_mini", "openai/gpt-4-1-mini"),
            (Provider::Openai, "chatgpt-4o-latest", "openai/chatgpt-4o"),
            (
                Provider::Anthropic,
                "claude-3-5-sonnet-20241022",
                "anthropic/claude-3-5-sonnet",
            ),
            (
                Provider::Anthropic,
                "claude-sonnet-4-5@20250929",
                "anthropic/claude-sonnet-4-5",
            ),
            (
                Provider::Anthropic,
                "claude-3-7-sonnet-latest",
                "anthropic/claude-3-7-sonnet",
            ),
            // A direct model that happens to hold a slash keeps it: the vendor is the provider.
            (Provider::Meta, "meta-llama/x", "meta/meta-llama/x"),
        ] {
            assert_eq!(upstream_identity(provider, model), identity, "{model}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn openrouter_uses_the_author_prefix_through_the_alias_table() {
        for (model, identity) in [
            ("openai/gpt-x", "openai/gpt-x"),
            ("openai/gpt-x:free", "openai/gpt-x"),
            ("anthropic/claude-3.5-sonnet", "anthropic/claude-3-5-sonnet"),
            (
                "anthropic/claude-3.5-sonnet:beta",
                "anthropic/claude-3-5-sonnet",
            ),
            ("meta-llama/muse-spark-1.3", "meta/muse-spark-1-3"),
            ("Meta_Llama/Muse-Spark-1.3:free", "meta/muse-spark-1-3"),
            (
                "mistralai/mistral-large-2411",
                "mistralai/mistral-large-2411",
            ),
            ("openrouter-auto", "openrouter/openrouter-auto"),
        ] {
            assert_eq!(
                upstream_identity(Provider::Openrouter, model),
                identity,
                "{model}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn ollama_keeps_its_own_vendor_even_for_a_known_authors_model() {
        assert_eq!(
            upstream_identity(Provider::Ollama, "gpt-oss:120b"),
            "ollama/gpt-oss"
        );
        assert_ne!(
            upstream_identity(Provider::Ollama, "gpt-x"),
            upstream_identity(Provider::Openai, "gpt-x")
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn one_model_has_one_identity_through_every_route() {
        let direct = upstream_identity(Provider::Openai, "gpt-x-2025-01-31");
        for (provider, model) in [
            (Provider::Openai, "gpt-x"),
            (Provider::Openai, "gpt-x-20250131"),
            (Provider::Openai, "GPT.X-latest"),
            (Provider::Openrouter, "openai/gpt-x"),
            (Provider::Openrouter, "openai/gpt_x:free"),
            (Provider::Openrouter, "openai/gpt-x-2025-01-31-latest"),
        ] {
            assert_eq!(upstream_identity(provider, model), direct, "{model}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn only_real_dates_and_whole_suffixes_fold() {
        for (model, identity) in [
            // Not a date: month 13, day 00, year 1999, seven digits.
            ("m-20251301", "openai/m-20251301"),
            ("m-20250100", "openai/m-20250100"),
            ("m-19990101", "openai/m-19990101"),
            ("m-2025013", "openai/m-2025013"),
            ("m-2025-1-31", "openai/m-2025-1-31"),
            // Nothing is left in front: kept.
            ("20250131", "openai/20250131"),
            ("latest", "openai/latest"),
            ("-latest", "openai/latest"),
            // Separators fold before dates are found.
            ("m.2025.01.31", "openai/m"),
            ("m__2025_01_31", "openai/m"),
            ("m-latest-20250131", "openai/m"),
            ("m-nightly", "openai/m-nightly"),
            ("", "openai/"),
            ("Ünïcode-X", "openai/Ünïcode-x"),
        ] {
            assert_eq!(
                upstream_identity(Provider::Openai, model),
                identity,
                "{model}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn identity_parity_fixtures_hold() {
        let fixture = crate::json::parse_strict(
            include_str!("../../../../parity/conversation_identities.json").as_bytes(),
        )
        .unwrap();
        let cases = fixture["identities"].as_array().unwrap();
        assert!(cases.len() >= 30, "{}", cases.len());
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let provider = Provider::parse(case["provider"].as_str().unwrap()).unwrap();
            let model = case["model"].as_str().unwrap();
            assert_eq!(
                upstream_identity(provider, model),
                case["identity"].as_str().unwrap(),
                "{name}"
            );
        }
    }
}
