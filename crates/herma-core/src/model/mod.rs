//! Domain records. Each has a caller-written `…Spec` (strict: unknown fields refused, validated
//! on construction) and a stored form carrying `caller_scope`, `version` and times.

mod context;
mod entity;
mod harness_key;
mod outcome;
pub(crate) mod provision;
mod receipt;

/// A receipt's usage: its type lives with the observer that writes it.
pub use crate::wire::usage::Usage;
pub use context::{ContextEntry, ContextEntrySpec, ContextKind, MAX_BODY_CHARS, MAX_URI_CHARS};
pub use entity::{EntityKind, WorkingEntity};
pub use harness_key::HarnessKey;
pub use outcome::{OutcomeKind, RuleOutcomeRecord};
pub use provision::{
    Action, DirectResponse, FailurePolicy, MAX_CONTEXT_REFS, MicromodelTrigger, Provision,
    ProvisionSpec, SemanticTrigger, TriggerMode, Triggers, Unit,
};
pub use receipt::{
    InjectionReceipt, MatchedRule, ReceiptAction, ReceiptBody, ShimmedRef, StreamEnd, Tier, Timings,
};

use crate::problem::{FieldError, Problem};

/// Why `text` may not be shown as it is: a control character (ESC, CR, LF, NUL, …) or a
/// bidirectional override or isolate (which can make a terminal or a page display other text
/// than is stored). `None` when it is plain text.
pub fn unprintable(text: &str) -> Option<&'static str> {
    for c in text.chars() {
        if c.is_control() {
            return Some("must not contain control characters (line breaks, escapes, NUL)");
        }
        if matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
        {
            return Some("must not contain bidirectional control characters");
        }
    }
    None
}

/// Collects field errors while validating one record.
#[derive(Debug, Default)]
pub struct Violations(Vec<FieldError>);

impl Violations {
    pub fn push(&mut self, pointer: impl Into<String>, detail: impl Into<String>) {
        self.0.push(FieldError::new(pointer, detail));
    }

    pub fn check(&mut self, ok: bool, pointer: impl Into<String>, detail: impl Into<String>) {
        if !ok {
            self.push(pointer, detail);
        }
    }

    pub fn into_result(self) -> Result<(), Problem> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Problem::validation(self.0))
        }
    }
}

/// Validates a list of short strings: count, length, emptiness and duplicates.
pub(crate) fn check_string_list(
    v: &mut Violations,
    pointer: &str,
    items: &[String],
    max_items: usize,
    max_len: usize,
) {
    if items.len() > max_items {
        v.push(pointer, format!("at most {max_items} entries are allowed"));
        return;
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{pointer}/{i}");
        if item.trim().is_empty() {
            v.push(at, "must not be empty");
        } else if item.chars().count() > max_len {
            v.push(at, format!("must be at most {max_len} characters"));
        } else if !seen.insert(item.as_str()) {
            v.push(at, "duplicate entry");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unprintable;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn control_and_bidirectional_characters_are_unprintable() {
        for text in [
            "\u{1b}[2J",
            "a\nb",
            "a\rb",
            "nul\u{0}",
            "tab\t",
            "\u{202e}abc",
            "\u{2066}x",
            "\u{200f}",
        ] {
            assert!(unprintable(text).is_some(), "{text:?}");
        }
        for text in ["ci", "Équipe ops — 2026", "日本語", "emoji 😀", ""] {
            assert_eq!(unprintable(text), None, "{text:?}");
        }
    }
}
