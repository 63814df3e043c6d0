//! Domain records. Each has a caller-written `…Spec` (strict: unknown fields refused, validated
//! on construction) and a stored form carrying `caller_scope`, `version` and times.

mod context;
mod entity;
mod harness_key;
mod outcome;
pub(crate) mod provision;
mod receipt;

pub use context::{ContextEntry, ContextEntrySpec, ContextKind, MAX_BODY_CHARS, MAX_URI_CHARS};
pub use entity::{EntityKind, WorkingEntity};
pub use harness_key::HarnessKey;
pub use outcome::{OutcomeKind, RuleOutcomeRecord};
pub use provision::{
    Action, DirectResponse, FailurePolicy, MAX_CONTEXT_REFS, MicromodelTrigger, Provision,
    ProvisionSpec, SemanticTrigger, TriggerMode, Triggers, Unit,
};
pub use receipt::{
    InjectionReceipt, MatchedRule, ReceiptAction, ReceiptBody, ShimmedRef, Tier, Timings,
};

use crate::problem::{FieldError, Problem};

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
