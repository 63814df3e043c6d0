//! The contributor-tier classifier (H03).
//!
//! Any model id containing `contributor`, in any letter case and after any separator
//! (`-contributor`, `/contributor`, `:contributor`, `.contributor`, none at all), is refused
//! everywhere a model id reaches Herma: proxied payloads, classifier configuration, plans and
//! grants. The check runs before every other configuration check.

use crate::problem::{Problem, ProblemCode};

const MARKER: &str = "contributor";

/// True when `model` names a contributor-tier model.
pub fn is_contributor_model(model: &str) -> bool {
    // An ASCII name (nearly every one) lowercases the same both ways: compared in place.
    if model.is_ascii() {
        return model
            .as_bytes()
            .windows(MARKER.len())
            .any(|w| w.eq_ignore_ascii_case(MARKER.as_bytes()));
    }
    model.to_ascii_lowercase().contains(MARKER) || model.to_lowercase().contains(MARKER)
}

/// `Err(contributor_tier_refused)` naming `pointer` when `model` is contributor tier.
pub fn refuse_contributor_model(model: &str, pointer: &str) -> Result<(), Problem> {
    if is_contributor_model(model) {
        return Err(Problem::new(
            ProblemCode::ContributorTierRefused,
            format!("model `{model}` is contributor tier and is refused"),
        )
        .with_pointer(pointer));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h03_contributor_ids_are_refused_in_any_case_after_any_separator() {
        for model in [
            "contributor",
            "gpt-x-contributor",
            "vendor/contributor",
            "model:contributor",
            "model.contributor",
            "Model-CONTRIBUTOR",
            "CoNtRiBuToR-7b",
            "xcontributorx",
            "openrouter/vendor/model:Contributor",
        ] {
            assert!(is_contributor_model(model), "{model}");
            let err = refuse_contributor_model(model, "/model").unwrap_err();
            assert_eq!(err.code, ProblemCode::ContributorTierRefused);
            assert_eq!(err.errors[0].pointer, "/model");
        }
    }

    /// The in-place comparison decides as lowercasing the whole name both ways does.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn names_are_judged_as_their_lowercased_forms_are() {
        let by_lowercasing =
            |m: &str| m.to_ascii_lowercase().contains(MARKER) || m.to_lowercase().contains(MARKER);
        for model in [
            "",
            "c",
            "contributo",
            "CONTRIBUTOR",
            "a-ContribUtor-b",
            "contributocontributor",
            "contri-butor",
            "gpt-5",
            // Non-ASCII: the Kelvin sign lowercases to `k`, the dotted capital I to `i̇`.
            "contributor-\u{212A}",
            "CONTR\u{130}BUTOR",
            "\u{e9}-contributor",
            "\u{e9}-CONTRIBUTOR",
            "\u{e9}-contrib",
        ] {
            assert_eq!(
                is_contributor_model(model),
                by_lowercasing(model),
                "{model}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn ordinary_models_pass() {
        for model in [
            "gpt-5",
            "claude-sonnet-4",
            "muse-spark-1.3",
            "contrib",
            "contributo-r",
        ] {
            assert!(!is_contributor_model(model), "{model}");
            assert!(refuse_contributor_model(model, "/model").is_ok());
        }
    }
}
