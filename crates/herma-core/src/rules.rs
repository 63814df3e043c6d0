//! Tier 1: keywords, bounded regular expressions, path globs and tool names, compiled per caller
//! into one index — one automaton for every keyword, one regex set, one glob set, one tool map —
//! so evaluating a request costs about the same over 10,000 rules as over 100.
//!
//! Matching is deterministic: rules are ordered by priority (highest first), then id; each match
//! records which trigger fired. No network, no clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use globset::{GlobBuilder, GlobMatcher};
use regex::RegexSetBuilder;

use crate::model::provision::MAX_REGEX_COMPILED_BYTES;
use crate::model::{Action, Provision, Tier, TriggerMode};
use crate::wire::Envelope;

/// The trigger kinds of tier 1, as bits.
const KEYWORD: u8 = 1;
const REGEX: u8 = 2;
const PATH: u8 = 4;
const TOOL: u8 = 8;

/// One compiled provision.
#[derive(Debug)]
pub struct Rule {
    pub provision: Arc<Provision>,
    pub builtin: bool,
    configured: u8,
}

/// A rule that fired: which triggers, first per kind, in kind order, and the tier that decided.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleMatch {
    /// Index into [`RuleSet::rules`].
    pub rule: usize,
    /// E.g. `["keyword:deploy"]`, or one per kind for `all` rules.
    pub triggers: Vec<String>,
    /// The tier that fired the rule (for `all` rules, the last tier checked).
    pub tier: Tier,
    /// The best example's cosine similarity, when tier 2 was evaluated for the rule.
    pub score: Option<f32>,
    /// The classifier's confidence, when tier 3 decided.
    pub confidence: Option<f64>,
}

/// The tier-1 triggers of one rule that fired on a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier1Hit {
    pub rule: usize,
    pub triggers: Vec<String>,
    /// Every configured tier-1 kind fired (what `all` rules need of tier 1).
    pub complete: bool,
}

impl RuleMatch {
    /// The triggers as one string, e.g. `keyword:deploy+path:**/*.tf`.
    pub fn trigger(&self) -> String {
        self.triggers.join("+")
    }
}

/// A rule that could not be compiled (it was stored before a limit changed, or the combined
/// set exceeded the engine's bounds) and is left out of matching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedRule {
    pub provision_id: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    keywords: Option<AhoCorasick>,
    /// Per unique keyword: (lowercased keyword, owners as (rule, original keyword)).
    keyword_owners: Vec<(String, Vec<(u32, u32)>)>,
    regexes: Option<regex::RegexSet>,
    regex_owners: Vec<(u32, u32)>,
    globs: GlobIndex,
    glob_owners: Vec<(u32, u32)>,
    tools: HashMap<String, Vec<(u32, u32)>>,
    skipped: Vec<SkippedRule>,
    /// Whether any rule has a semantic or micromodel trigger.
    later_tiers: bool,
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

impl RuleSet {
    /// Compiles enabled provisions (`builtin` marks `system_builtin` ones).
    pub fn compile(provisions: impl IntoIterator<Item = (Arc<Provision>, bool)>) -> Self {
        let mut rules: Vec<Rule> = provisions
            .into_iter()
            .filter(|(p, _)| p.spec.enabled)
            .map(|(provision, builtin)| {
                let t = &provision.spec.triggers;
                let configured = [
                    (KEYWORD, !t.keywords.is_empty()),
                    (REGEX, !t.regex.is_empty()),
                    (PATH, !t.paths.is_empty()),
                    (TOOL, !t.tools.is_empty()),
                ]
                .iter()
                .filter(|(_, on)| *on)
                .fold(0, |acc, (bit, _)| acc | bit);
                Rule {
                    provision,
                    builtin,
                    configured,
                }
            })
            .collect();
        rules.sort_by(|a, b| {
            b.provision
                .spec
                .priority
                .cmp(&a.provision.spec.priority)
                .then_with(|| a.provision.spec.id.cmp(&b.provision.spec.id))
        });

        let mut set = RuleSet::default();
        let mut keyword_index: HashMap<String, usize> = HashMap::new();
        let mut regex_patterns = Vec::new();
        let mut glob_patterns = Vec::new();
        for (r, rule) in rules.iter().enumerate() {
            let t = &rule.provision.spec.triggers;
            for (k, keyword) in t.keywords.iter().enumerate() {
                let lower = keyword.to_lowercase();
                let slot = *keyword_index.entry(lower.clone()).or_insert_with(|| {
                    set.keyword_owners.push((lower, Vec::new()));
                    set.keyword_owners.len() - 1
                });
                set.keyword_owners[slot].1.push((r as u32, k as u32));
            }
            for (k, pattern) in t.regex.iter().enumerate() {
                regex_patterns.push(pattern.clone());
                set.regex_owners.push((r as u32, k as u32));
            }
            for (k, pattern) in t.paths.iter().enumerate() {
                match GlobBuilder::new(pattern).literal_separator(true).build() {
                    Ok(glob) => {
                        glob_patterns.push((pattern.as_str(), glob.compile_matcher()));
                        set.glob_owners.push((r as u32, k as u32));
                    }
                    Err(e) => set.skipped.push(SkippedRule {
                        provision_id: rule.provision.spec.id.clone(),
                        reason: format!("glob `{pattern}`: {e}"),
                    }),
                }
            }
            for (k, tool) in t.tools.iter().enumerate() {
                set.tools
                    .entry(tool.clone())
                    .or_default()
                    .push((r as u32, k as u32));
            }
        }
        if !set.keyword_owners.is_empty() {
            set.keywords = AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .build(set.keyword_owners.iter().map(|(k, _)| k.as_str()))
                .map_err(|e| {
                    set.skipped.push(SkippedRule {
                        provision_id: "*".into(),
                        reason: format!("keyword automaton: {e}"),
                    })
                })
                .ok();
        }
        if !regex_patterns.is_empty() {
            let limit = MAX_REGEX_COMPILED_BYTES
                .saturating_mul(regex_patterns.len())
                .min(256 * 1024 * 1024);
            match RegexSetBuilder::new(&regex_patterns)
                .size_limit(limit)
                .dfa_size_limit(limit)
                .build()
            {
                Ok(regexes) => set.regexes = Some(regexes),
                Err(e) => {
                    // Keep the patterns that compile on their own; report the rest.
                    let mut kept = Vec::new();
                    let mut owners = Vec::new();
                    for (pattern, owner) in regex_patterns.iter().zip(&set.regex_owners) {
                        match regex::RegexBuilder::new(pattern)
                            .size_limit(MAX_REGEX_COMPILED_BYTES)
                            .build()
                        {
                            Ok(_) => {
                                kept.push(pattern.clone());
                                owners.push(*owner);
                            }
                            Err(err) => set.skipped.push(SkippedRule {
                                provision_id: rules[owner.0 as usize].provision.spec.id.clone(),
                                reason: format!("regex `{pattern}`: {err}"),
                            }),
                        }
                    }
                    set.regex_owners = owners;
                    set.regexes = RegexSetBuilder::new(&kept)
                        .size_limit(limit)
                        .dfa_size_limit(limit)
                        .build()
                        .ok();
                    if set.regexes.is_none() {
                        set.skipped.push(SkippedRule {
                            provision_id: "*".into(),
                            reason: format!("regex set: {e}"),
                        });
                        set.regex_owners.clear();
                    }
                }
            }
        }
        set.globs = GlobIndex::new(glob_patterns);
        set.later_tiers = rules.iter().any(|r| {
            let t = &r.provision.spec.triggers;
            t.semantic.is_some() || t.micromodel.is_some()
        });
        set.rules = rules;
        set
    }

    /// Whether any rule has a tier-2 or tier-3 trigger. Without one, [`RuleSet::evaluate`] is
    /// the whole answer and the engine's per-rule bookkeeping can be skipped.
    pub fn has_later_tiers(&self) -> bool {
        self.later_tiers
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn rule(&self, index: usize) -> &Rule {
        &self.rules[index]
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn skipped(&self) -> &[SkippedRule] {
        &self.skipped
    }

    /// Every rule the envelope matches, in rule order (priority, then id).
    /// Tier 1 alone, as the final answer: rules with only tier-1 triggers by their mode, and
    /// `any` rules whose tier-1 triggers fired. (The full engine, with tiers 2 and 3, is
    /// `crate::engine`.)
    pub fn evaluate(&self, envelope: &Envelope) -> Vec<RuleMatch> {
        self.tier1(envelope)
            .into_iter()
            .filter(|hit| {
                let spec = &self.rules[hit.rule].provision.spec;
                match spec.trigger_mode {
                    TriggerMode::Any => true,
                    TriggerMode::All => {
                        hit.complete
                            && spec.triggers.semantic.is_none()
                            && spec.triggers.micromodel.is_none()
                    }
                }
            })
            .map(|hit| RuleMatch {
                rule: hit.rule,
                triggers: hit.triggers,
                tier: Tier::Keyword,
                score: None,
                confidence: None,
            })
            .collect()
    }

    /// Every rule with at least one tier-1 trigger firing on `envelope`, in rule order.
    pub fn tier1(&self, envelope: &Envelope) -> Vec<Tier1Hit> {
        if self.rules.is_empty() {
            return Vec::new();
        }
        // Per rule: matched kinds and the first trigger of each kind. Ordered by rule (the
        // order returned), and a trigger's text is made only for the first of its kind.
        let mut hits: BTreeMap<u32, (u8, [Option<String>; 4])> = BTreeMap::new();
        let mut hit = |rule: u32, kind: u8, slot: usize, prefix: &str, trigger: &str| {
            let entry = hits.entry(rule).or_insert((0, Default::default()));
            entry.0 |= kind;
            entry.1[slot].get_or_insert_with(|| {
                let mut text = String::with_capacity(prefix.len() + trigger.len());
                text.push_str(prefix);
                text.push_str(trigger);
                text
            });
        };

        if let Some(automaton) = &self.keywords {
            let lower = envelope.user_text.to_lowercase();
            for m in automaton.find_overlapping_iter(&lower) {
                let (keyword, owners) = &self.keyword_owners[m.pattern().as_usize()];
                let before_ok =
                    !keyword.starts_with(is_word) || !lower[..m.start()].ends_with(is_word);
                let after_ok =
                    !keyword.ends_with(is_word) || !lower[m.end()..].starts_with(is_word);
                if before_ok && after_ok {
                    for &(rule, k) in owners {
                        let original =
                            &self.rules[rule as usize].provision.spec.triggers.keywords[k as usize];
                        hit(rule, KEYWORD, 0, "keyword:", original);
                    }
                }
            }
        }
        if let Some(regexes) = &self.regexes {
            for i in regexes.matches(&envelope.user_text).iter() {
                let (rule, k) = self.regex_owners[i];
                let pattern = &self.rules[rule as usize].provision.spec.triggers.regex[k as usize];
                hit(rule, REGEX, 1, "regex:", pattern);
            }
        }
        for path in &envelope.paths {
            self.globs.matches(path, &mut |i| {
                let (rule, k) = self.glob_owners[i];
                let glob = &self.rules[rule as usize].provision.spec.triggers.paths[k as usize];
                hit(rule, PATH, 2, "path:", glob);
            });
        }
        if !self.tools.is_empty() {
            for tool in envelope.tools_offered.iter().chain(&envelope.tools_called) {
                if let Some(owners) = self.tools.get(tool) {
                    for &(rule, _) in owners {
                        hit(rule, TOOL, 3, "tool:", tool);
                    }
                }
            }
        }

        hits.into_iter()
            .filter(|(_, (kinds, _))| *kinds != 0)
            .map(|(rule, (kinds, triggers))| Tier1Hit {
                rule: rule as usize,
                triggers: triggers.into_iter().flatten().collect(),
                complete: kinds == self.rules[rule as usize].configured,
            })
            .collect()
    }
}

/// Path globs, pre-filtered by literals: each glob's longest required literal (`module7/`,
/// `.tf`) goes into one automaton, so a path is tested only against globs whose literal it
/// contains. Globs without a usable literal (`**/*`) are always tested.
#[derive(Debug, Default)]
struct GlobIndex {
    matchers: Vec<GlobMatcher>,
    literals: Option<AhoCorasick>,
    /// Per literal: the globs requiring it.
    literal_globs: Vec<Vec<usize>>,
    always: Vec<usize>,
}

/// The longest literal every match of `glob` must contain, if at least two bytes long.
///
/// Conservative on purpose: a glob with a bracket class is always tested (globset's class
/// syntax has corner cases such as a leading `]` or `[[:digit:]]`), brace alternations are
/// skipped, and a leading `**/` can match no directory at all, so the `/` after it is not
/// required (`**/main.tf` matches `main.tf`).
fn required_literal(glob: &str) -> Option<String> {
    if glob.contains('[') {
        return None;
    }
    let glob = glob.strip_prefix("**/").unwrap_or(glob);
    let mut best = String::new();
    let mut current = String::new();
    let mut brace_depth = 0usize;
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        let literal = match c {
            '{' => {
                brace_depth += 1;
                false
            }
            '}' if brace_depth > 0 => {
                brace_depth -= 1;
                false
            }
            '*' | '?' => false,
            '\\' => {
                chars.next();
                false
            }
            _ => brace_depth == 0,
        };
        if literal {
            current.push(c);
        } else {
            if current.len() > best.len() {
                best = std::mem::take(&mut current);
            }
            current.clear();
        }
    }
    if current.len() > best.len() {
        best = current;
    }
    (best.len() >= 2).then_some(best)
}

impl GlobIndex {
    fn new(globs: Vec<(&str, GlobMatcher)>) -> Self {
        let mut index = GlobIndex::default();
        let mut literal_slots: HashMap<String, usize> = HashMap::new();
        let mut literals = Vec::new();
        for (i, (pattern, matcher)) in globs.into_iter().enumerate() {
            index.matchers.push(matcher);
            match required_literal(pattern) {
                Some(literal) => {
                    let slot = *literal_slots.entry(literal.clone()).or_insert_with(|| {
                        literals.push(literal);
                        index.literal_globs.push(Vec::new());
                        literals.len() - 1
                    });
                    index.literal_globs[slot].push(i);
                }
                None => index.always.push(i),
            }
        }
        if !literals.is_empty() {
            index.literals = AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .build(&literals)
                .ok();
            if index.literals.is_none() {
                // Cannot pre-filter: test every glob.
                index.always = (0..index.matchers.len()).collect();
                index.literal_globs.clear();
            }
        }
        index
    }

    /// Calls `on_match` with the index of every glob matching `path`, once each.
    fn matches(&self, path: &str, on_match: &mut dyn FnMut(usize)) {
        if self.matchers.is_empty() {
            return;
        }
        let mut tested: Vec<usize> = Vec::new();
        let mut test = |i: usize, tested: &mut Vec<usize>| {
            if !tested.contains(&i) {
                tested.push(i);
                if self.matchers[i].is_match(path) {
                    on_match(i);
                }
            }
        };
        for &i in &self.always {
            test(i, &mut tested);
        }
        if let Some(literals) = &self.literals {
            for m in literals.find_overlapping_iter(path) {
                for &i in &self.literal_globs[m.pattern().as_usize()] {
                    test(i, &mut tested);
                }
            }
        }
    }
}

/// What the matched rules ask Herma to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nothing matched: forward unchanged.
    Forward,
    /// The highest-priority match answers directly; nothing goes upstream.
    Respond(RuleMatch),
    /// Every matching `shim_context` rule contributes its context, in rule order.
    Shim(Vec<RuleMatch>),
}

/// The highest-priority match decides the kind of action: if it answers directly, it alone
/// answers; otherwise every matching shim rule applies and direct rules below it do not.
pub fn decide(set: &RuleSet, matches: Vec<RuleMatch>) -> Decision {
    let Some(first) = matches.first() else {
        return Decision::Forward;
    };
    if set.rule(first.rule).provision.spec.action == Action::RespondDirectly {
        return Decision::Respond(first.clone());
    }
    Decision::Shim(
        matches
            .into_iter()
            .filter(|m| set.rule(m.rule).provision.spec.action == Action::ShimContext)
            .collect(),
    )
}

#[cfg(test)]
mod tests;
