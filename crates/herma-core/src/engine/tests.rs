use std::sync::Arc;

use super::*;
use crate::caller::CallerScope;
use crate::micromodel::{ClassifierError, Decision};
use crate::model::{
    DirectResponse, FailurePolicy, MicromodelTrigger, Provision, ProvisionSpec, SemanticTrigger,
    Triggers, Unit,
};
use crate::time::Timestamp;
use crate::wire::{Conversation, ConversationSource, Envelope, Protocol};

struct Rule<'a> {
    id: &'a str,
    priority: i32,
    mode: TriggerMode,
    keywords: &'a [&'a str],
    semantic: bool,
    micromodel: bool,
    action: Action,
}

fn rule(id: &str) -> Rule<'_> {
    Rule {
        id,
        priority: 0,
        mode: TriggerMode::Any,
        keywords: &[],
        semantic: false,
        micromodel: false,
        action: Action::ShimContext,
    }
}

fn set(rules: &[Rule<'_>]) -> RuleSet {
    RuleSet::compile(rules.iter().map(|r| {
        let spec = ProvisionSpec {
            id: r.id.into(),
            description: String::new(),
            action: r.action,
            priority: r.priority,
            trigger_mode: r.mode,
            triggers: Triggers {
                keywords: r.keywords.iter().map(|k| k.to_string()).collect(),
                semantic: r.semantic.then(|| SemanticTrigger {
                    examples: vec!["ship it".into()],
                    negatives: vec![],
                    threshold: Unit(0.3),
                    margin: Unit(0.05),
                }),
                micromodel: r.micromodel.then(|| MicromodelTrigger {
                    question: "q?".into(),
                    min_confidence: Unit(0.5),
                    model: None,
                    on_failure: FailurePolicy::Fallback,
                }),
                ..Triggers::default()
            },
            context_refs: if r.action == Action::ShimContext {
                vec!["ctx".into()]
            } else {
                vec![]
            },
            response: (r.action == Action::RespondDirectly)
                .then(|| DirectResponse { text: "a".into() }),
            once_per_conversation: false,
            enabled: true,
            fabric_governance: None,
        };
        (
            Arc::new(Provision {
                caller_scope: CallerScope::system_builtin(),
                version: 1,
                created_at: Timestamp::default(),
                updated_at: Timestamp::default(),
                spec,
            }),
            false,
        )
    }))
}

fn envelope(text: &str) -> Envelope {
    Envelope {
        protocol: Protocol::Messages,
        repeated_member: None,
        model: None,
        stream: false,
        stream_usage: false,
        system: None,
        user_text: text.into(),
        tools_offered: vec![],
        tools_called: vec![],
        tool_results: vec![],
        paths: vec![],
        conversation: Conversation {
            id: "c".into(),
            source: ConversationSource::Header,
        },
        turn: 1,
        insertion: None,
    }
}

fn index_of(set: &RuleSet, id: &str) -> usize {
    (0..set.len())
        .find(|&r| set.rule(r).provision.spec.id == id)
        .unwrap()
}

fn score(rule: usize, value: f32) -> SemanticScore {
    SemanticScore {
        rule,
        score: value,
        example: 0,
        negative: None,
        threshold: 0.3,
        margin: 0.05,
        matched: value >= 0.3,
    }
}

fn ids(set: &RuleSet, rules: &[usize]) -> Vec<String> {
    rules
        .iter()
        .map(|&r| set.rule(r).provision.spec.id.clone())
        .collect()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn h06_engine_short_circuits_micromodel_when_keyword_matches() {
    let set = set(&[
        Rule {
            keywords: &["deploy"],
            semantic: true,
            micromodel: true,
            ..rule("deploy")
        },
        Rule {
            semantic: true,
            micromodel: true,
            ..rule("release")
        },
    ]);
    let hits = set.tier1(&envelope("please deploy"));
    let deploy = index_of(&set, "deploy");
    let release = index_of(&set, "release");
    // Tier 1 fired `deploy`: tier 2 scores only `release`.
    let semantic = semantic_needs(&set, &hits);
    assert_eq!(ids(&set, &semantic.rules), ["release"]);
    assert_eq!(semantic.skipped, [(deploy, FIRED_EARLIER.to_owned())]);
    // Tier 2 fired `release`: nobody asks the classifier.
    let scores = [score(release, 0.8)];
    let micro = micromodel_needs(&set, &hits, &scores);
    assert!(micro.rules.is_empty(), "{micro:?}");
    assert_eq!(micro.skipped.len(), 2);
    assert!(micro.skipped.iter().all(|(_, why)| why == FIRED_EARLIER));
    let matches = resolve(&set, &hits, &scores, &[]);
    let tiers: Vec<_> = matches.iter().map(|m| (m.rule, m.tier, m.score)).collect();
    assert_eq!(
        tiers,
        [
            (deploy, Tier::Keyword, None),
            (release, Tier::Semantic, Some(0.8))
        ]
    );
    assert_eq!(matches[1].triggers, ["semantic:ship it"]);
    // Below the threshold, the classifier is asked, and its yes fires the rule.
    let scores = [score(release, 0.1)];
    let micro = micromodel_needs(&set, &hits, &scores);
    assert_eq!(ids(&set, &micro.rules), ["release"]);
    let yes = Outcome::Decided(Decision {
        apply: true,
        confidence: 0.9,
    });
    let matches = resolve(&set, &hits, &scores, &[(release, yes)]);
    assert_eq!(matches[1].tier, Tier::Micromodel);
    assert_eq!(matches[1].confidence, Some(0.9));
    assert_eq!(matches[1].score, Some(0.1));
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn all_rules_need_every_configured_tier_in_order() {
    let set = set(&[Rule {
        mode: TriggerMode::All,
        keywords: &["deploy"],
        semantic: true,
        micromodel: true,
        ..rule("strict")
    }]);
    // Tier 1 failed: tiers 2 and 3 are not asked.
    let none = set.tier1(&envelope("hello"));
    assert!(semantic_needs(&set, &none).rules.is_empty());
    assert!(micromodel_needs(&set, &none, &[]).rules.is_empty());
    let hits = set.tier1(&envelope("deploy"));
    assert_eq!(semantic_needs(&set, &hits).rules, [0]);
    // Tier 2 failed: tier 3 is not asked.
    let low = [score(0, 0.1)];
    let micro = micromodel_needs(&set, &hits, &low);
    assert!(micro.rules.is_empty());
    assert_eq!(micro.skipped, [(0, EARLIER_TIER_FAILED.to_owned())]);
    let high = [score(0, 0.9)];
    assert_eq!(micromodel_needs(&set, &hits, &high).rules, [0]);
    let no = Outcome::Decided(Decision {
        apply: false,
        confidence: 0.99,
    });
    assert!(resolve(&set, &hits, &high, &[(0, no)]).is_empty());
    let yes = Outcome::Decided(Decision {
        apply: true,
        confidence: 0.6,
    });
    let fired = resolve(&set, &hits, &high, &[(0, yes)]);
    assert_eq!(fired.len(), 1);
    assert_eq!(
        fired[0].triggers,
        ["keyword:deploy", "semantic:ship it", "micromodel"]
    );
    // The classifier failed: the shim rule's fallback fires it, a malformed reply does not.
    let failed = Outcome::Failed(ClassifierError::Timeout);
    assert_eq!(
        resolve(&set, &hits, &high, &[(0, failed)])[0].triggers[2],
        "micromodel:fallback"
    );
    let malformed = Outcome::Malformed("x".into());
    assert!(resolve(&set, &hits, &high, &[(0, malformed)]).is_empty());
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn a_settled_direct_answer_spares_every_lower_rule_its_tiers_2_and_3() {
    let set = set(&[
        Rule {
            priority: 10,
            keywords: &["freeze"],
            action: Action::RespondDirectly,
            ..rule("freeze")
        },
        Rule {
            priority: 20,
            semantic: true,
            ..rule("above")
        },
        Rule {
            semantic: true,
            micromodel: true,
            ..rule("below")
        },
    ]);
    let hits = set.tier1(&envelope("freeze?"));
    let needs = semantic_needs(&set, &hits);
    assert_eq!(
        ids(&set, &needs.rules),
        ["above"],
        "a higher rule can still outrank it"
    );
    assert_eq!(
        needs.skipped,
        [(index_of(&set, "below"), OUTRANKED.to_owned())]
    );
    let micro = micromodel_needs(&set, &hits, &[score(index_of(&set, "above"), 0.1)]);
    assert!(micro.rules.is_empty());
    assert_eq!(
        micro.skipped,
        [(index_of(&set, "below"), OUTRANKED.to_owned())]
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn without_later_tiers_the_engine_agrees_with_tier_one_alone() {
    let s = set(&[
        Rule {
            keywords: &["deploy", "ship"],
            ..rule("any")
        },
        Rule {
            keywords: &["deploy", "prod"],
            mode: TriggerMode::All,
            ..rule("all")
        },
        Rule {
            keywords: &["ship"],
            priority: 5,
            action: Action::RespondDirectly,
            ..rule("answer")
        },
    ]);
    assert!(!s.has_later_tiers());
    for text in [
        "deploy to prod",
        "ship it",
        "deploy",
        "nothing here",
        "ship and deploy prod",
    ] {
        let env = envelope(text);
        let hits = s.tier1(&env);
        let engine: Vec<(usize, Vec<String>)> = resolve(&s, &hits, &[], &[])
            .into_iter()
            .map(|m| (m.rule, m.triggers))
            .collect();
        let alone: Vec<(usize, Vec<String>)> = s
            .evaluate(&env)
            .into_iter()
            .map(|m| (m.rule, m.triggers))
            .collect();
        assert_eq!(engine, alone, "{text}");
    }
    let with_semantic = set(&[Rule {
        semantic: true,
        ..rule("sem")
    }]);
    assert!(with_semantic.has_later_tiers());
}
