//! The three tiers together (H06). Tiers run in order and each is asked only about the rules it
//! can still change:
//!
//! - an `any` rule fired by tier 1 is not scored by tier 2; one fired by tier 1 or 2 is not sent
//!   to the classifier (tier 3);
//! - an `all` rule goes on to tier 2 only when every configured tier-1 kind fired, and to tier 3
//!   only when tiers 1 and 2 both held;
//! - once a rule that answers directly (and is not once-per-conversation) has fired, no rule
//!   ranked below it can change the decision, so none of them is evaluated further.
//!
//! The embedding and classifier calls themselves happen outside (they are I/O); this module
//! says which to make and combines the evidence into matches.

use crate::micromodel::Outcome;
use crate::model::{Action, Tier, TriggerMode};
use crate::rules::{RuleMatch, RuleSet, Tier1Hit};
use crate::semantic::SemanticScore;

/// Which rules a tier should evaluate, and why each other rule with that tier is not evaluated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Needs {
    pub rules: Vec<usize>,
    pub skipped: Vec<(usize, String)>,
}

pub const FIRED_EARLIER: &str = "an earlier tier already fired the rule";
pub const EARLIER_TIER_FAILED: &str = "an earlier tier of this `all` rule did not match";
pub const OUTRANKED: &str = "a higher-priority rule already answers directly";

// Hits and scores come in rule order (`RuleSet::tier1`, `SemanticIndex::score`), so lookups are
// binary searches: the engine stays O(rules · log hits) however many rules a caller has.
fn hit(hits: &[Tier1Hit], rule: usize) -> Option<&Tier1Hit> {
    hits.binary_search_by_key(&rule, |h| h.rule)
        .ok()
        .map(|i| &hits[i])
}

fn semantic_of(scores: &[SemanticScore], rule: usize) -> Option<&SemanticScore> {
    scores
        .binary_search_by_key(&rule, |s| s.rule)
        .ok()
        .map(|i| &scores[i])
}

/// Tier-1 and tier-2 state of one rule.
struct State {
    /// The rule has fired for sure.
    fired: bool,
    /// Tier 2 may still change it.
    wants_semantic: bool,
    /// Tier 3 may still change it.
    wants_micromodel: bool,
    /// Why tier 3 is not wanted, when it is configured.
    micromodel_skip: Option<&'static str>,
}

fn state(
    set: &RuleSet,
    rule: usize,
    hits: &[Tier1Hit],
    semantic: Option<&[SemanticScore]>,
) -> State {
    let triggers = &set.rule(rule).provision.spec.triggers;
    let (has1, has2, has3) = (
        triggers.has_tier1(),
        triggers.semantic.is_some(),
        triggers.micromodel.is_some(),
    );
    let h = hit(hits, rule);
    let sem = semantic
        .and_then(|s| semantic_of(s, rule))
        .is_some_and(|s| s.matched);
    match set.rule(rule).provision.spec.trigger_mode {
        TriggerMode::Any => {
            let by1 = h.is_some();
            let by2 = has2 && sem;
            State {
                fired: by1 || by2,
                wants_semantic: has2 && !by1,
                wants_micromodel: has3 && !by1 && !by2,
                micromodel_skip: (has3 && (by1 || by2)).then_some(FIRED_EARLIER),
            }
        }
        TriggerMode::All => {
            let ok1 = !has1 || h.is_some_and(|h| h.complete);
            let ok2 = !has2 || sem;
            // Before tier 2 has run, `ok2` is unknown for a semantic rule.
            let tier2_pending = has2 && semantic.is_none();
            State {
                fired: ok1 && ok2 && !has3 && !tier2_pending,
                wants_semantic: has2 && ok1,
                wants_micromodel: has3 && ok1 && ok2 && !tier2_pending,
                micromodel_skip: (has3 && !(ok1 && ok2)).then_some(EARLIER_TIER_FAILED),
            }
        }
    }
}

/// The highest-ranked rule that has fired and settles the decision: a direct answer that is
/// not once-per-conversation (such a rule may step aside when already used).
fn settled(set: &RuleSet, fired: impl IntoIterator<Item = usize>) -> Option<usize> {
    fired.into_iter().min().filter(|&r| {
        let spec = &set.rule(r).provision.spec;
        spec.action == Action::RespondDirectly && !spec.once_per_conversation
    })
}

/// The rules tier 2 should score, given tier 1's hits.
pub fn semantic_needs(set: &RuleSet, hits: &[Tier1Hit]) -> Needs {
    let states: Vec<State> = (0..set.len()).map(|r| state(set, r, hits, None)).collect();
    let top = settled(set, (0..set.len()).filter(|&r| states[r].fired));
    let mut needs = Needs::default();
    for (r, st) in states.iter().enumerate() {
        if set.rule(r).provision.spec.triggers.semantic.is_none() {
            continue;
        }
        if !st.wants_semantic {
            let why = match set.rule(r).provision.spec.trigger_mode {
                TriggerMode::Any => FIRED_EARLIER,
                TriggerMode::All => EARLIER_TIER_FAILED,
            };
            needs.skipped.push((r, why.into()));
        } else if top.is_some_and(|t| r > t) {
            needs.skipped.push((r, OUTRANKED.into()));
        } else {
            needs.rules.push(r);
        }
    }
    needs
}

/// The rules tier 3 should ask the classifier about, given tiers 1 and 2.
pub fn micromodel_needs(set: &RuleSet, hits: &[Tier1Hit], semantic: &[SemanticScore]) -> Needs {
    let states: Vec<State> = (0..set.len())
        .map(|r| state(set, r, hits, Some(semantic)))
        .collect();
    let top = settled(set, (0..set.len()).filter(|&r| states[r].fired));
    let mut needs = Needs::default();
    for (r, st) in states.iter().enumerate() {
        if set.rule(r).provision.spec.triggers.micromodel.is_none() {
            continue;
        }
        if let Some(why) = st.micromodel_skip {
            needs.skipped.push((r, why.into()));
        } else if !st.wants_micromodel {
            needs.skipped.push((r, EARLIER_TIER_FAILED.into()));
        } else if top.is_some_and(|t| r > t) {
            needs.skipped.push((r, OUTRANKED.into()));
        } else {
            needs.rules.push(r);
        }
    }
    needs
}

/// Every rule that fired, in rule order, with the tier that fired it, its semantic score and
/// its classifier confidence. Rules tier 2 or 3 did not evaluate count as not matching there.
/// `hits`, `semantic` and `micromodel` are in rule order.
pub fn resolve(
    set: &RuleSet,
    hits: &[Tier1Hit],
    semantic: &[SemanticScore],
    micromodel: &[(usize, Outcome)],
) -> Vec<RuleMatch> {
    let mut matches = Vec::new();
    for r in 0..set.len() {
        let spec = &set.rule(r).provision.spec;
        let triggers = &spec.triggers;
        let h = hit(hits, r);
        let sem = semantic_of(semantic, r);
        let micro = micromodel
            .binary_search_by_key(&r, |(m, _)| *m)
            .ok()
            .map(|i| &micromodel[i].1);
        let micro_fires = match (&triggers.micromodel, micro) {
            (Some(trigger), Some(outcome)) => outcome.activates(trigger, spec.action),
            _ => false,
        };
        let sem_fires = triggers.semantic.is_some() && sem.is_some_and(|s| s.matched);
        let (fired, tier) = match spec.trigger_mode {
            TriggerMode::Any => {
                if h.is_some() {
                    (true, Tier::Keyword)
                } else if sem_fires {
                    (true, Tier::Semantic)
                } else {
                    (micro_fires, Tier::Micromodel)
                }
            }
            TriggerMode::All => {
                let ok1 = !triggers.has_tier1() || h.is_some_and(|h| h.complete);
                let ok2 = triggers.semantic.is_none() || sem_fires;
                let ok3 = triggers.micromodel.is_none() || micro_fires;
                let tier = if triggers.micromodel.is_some() {
                    Tier::Micromodel
                } else if triggers.semantic.is_some() {
                    Tier::Semantic
                } else {
                    Tier::Keyword
                };
                (ok1 && ok2 && ok3, tier)
            }
        };
        if !fired {
            continue;
        }
        let mut fired_by: Vec<String> = Vec::new();
        if matches!(spec.trigger_mode, TriggerMode::All) || tier == Tier::Keyword {
            fired_by.extend(h.map(|h| h.triggers.clone()).unwrap_or_default());
        }
        if (tier == Tier::Semantic || spec.trigger_mode == TriggerMode::All)
            && let (Some(s), Some(t)) = (sem, &triggers.semantic)
            && s.matched
        {
            let example = t.examples.get(s.example).map_or("", String::as_str);
            fired_by.push(format!("semantic:{example}"));
        }
        if micro_fires && (tier == Tier::Micromodel) {
            let how = match micro {
                Some(Outcome::Failed(_)) => "micromodel:fallback",
                _ => "micromodel",
            };
            fired_by.push(how.into());
        }
        matches.push(RuleMatch {
            rule: r,
            triggers: fired_by,
            tier,
            score: sem.map(|s| s.score),
            confidence: micro.and_then(Outcome::confidence),
        });
    }
    matches
}

#[cfg(test)]
mod tests;
