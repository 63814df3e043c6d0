//! The starter provisions and context entries shipped with Herma, loaded into `system_builtin`
//! on every start (an unchanged starter keeps its version).

use herma_core::model::{ContextEntrySpec, ProvisionSpec};
use herma_core::{CallerScope, Problem};
use herma_store::ImportSummary;

use crate::App;
use crate::transfer::{Format, parse_records};

pub const STARTER_PROVISIONS: &str = include_str!("../starters/provisions.json");
pub const STARTER_CONTEXT: &str = include_str!("../starters/context.json");

/// The shipped starters, validated like any import.
pub fn starters() -> Result<(Vec<ProvisionSpec>, Vec<ContextEntrySpec>), Problem> {
    let provisions = parse_records(STARTER_PROVISIONS.as_bytes(), Format::Json, &mut |_, _| {})?;
    let context = parse_records(STARTER_CONTEXT.as_bytes(), Format::Json, &mut |_, _| {})?;
    Ok((provisions, context))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StarterSummary {
    pub provisions: ImportSummary,
    pub context: ImportSummary,
}

impl App {
    /// Loads the starters into `system_builtin`.
    pub async fn load_starters(&self) -> Result<StarterSummary, Problem> {
        let (provisions, context) = starters()?;
        let scope = CallerScope::system_builtin();
        Ok(StarterSummary {
            context: self.import_records(&scope, &context).await?,
            provisions: self.import_records(&scope, &provisions).await?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_starters_are_valid_and_their_refs_resolve() {
        let (provisions, context) = starters().unwrap();
        assert!(!provisions.is_empty());
        for p in &provisions {
            for r in &p.context_refs {
                assert!(
                    context.iter().any(|c| &c.id == r),
                    "{} refers to missing {r}",
                    p.id
                );
            }
        }
    }
}
