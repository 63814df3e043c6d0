use std::sync::Arc;

use super::*;
use crate::caller::CallerScope;
use crate::model::{DirectResponse, ProvisionSpec, Triggers};
use crate::time::Timestamp;
use crate::wire::{Conversation, ConversationSource, Protocol};

fn provision(
    id: &str,
    priority: i32,
    mode: TriggerMode,
    triggers: Triggers,
    action: Action,
) -> (Arc<Provision>, bool) {
    let response = (action == Action::RespondDirectly).then(|| DirectResponse {
        text: "answer".into(),
    });
    let context_refs = if action == Action::ShimContext {
        vec!["ctx".into()]
    } else {
        vec![]
    };
    let spec = ProvisionSpec {
        id: id.into(),
        description: String::new(),
        action,
        priority,
        trigger_mode: mode,
        triggers,
        context_refs,
        response,
        once_per_conversation: false,
        enabled: true,
        fabric_governance: None,
    };
    let p = Provision {
        caller_scope: CallerScope::system_builtin(),
        version: 1,
        created_at: Timestamp::default(),
        updated_at: Timestamp::default(),
        spec,
    };
    (Arc::new(p), false)
}

fn keywords(list: &[&str]) -> Triggers {
    Triggers {
        keywords: list.iter().map(|s| s.to_string()).collect(),
        ..Triggers::default()
    }
}

fn envelope(text: &str, paths: &[&str], tools: &[&str]) -> Envelope {
    Envelope {
        protocol: Protocol::Messages,
        repeated_member: None,
        model: Some("m".into()),
        stream: false,
        stream_usage: false,
        system: None,
        user_text: text.into(),
        tools_offered: tools.iter().map(|s| s.to_string()).collect(),
        tools_called: vec![],
        tool_results: vec![],
        paths: paths.iter().map(|s| s.to_string()).collect(),
        conversation: Conversation {
            id: "c".into(),
            source: ConversationSource::Header,
        },
        turn: 1,
        insertion: None,
    }
}

fn matched_ids(set: &RuleSet, env: &Envelope) -> Vec<(String, String)> {
    set.evaluate(env)
        .into_iter()
        .map(|m| (set.rule(m.rule).provision.spec.id.clone(), m.trigger()))
        .collect()
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn h04_tier1_keyword_regex_path_and_tool_triggers_match_deterministically() {
    let set = RuleSet::compile([
        provision(
            "kw",
            0,
            TriggerMode::Any,
            keywords(&["deploy", "release checklist"]),
            Action::ShimContext,
        ),
        provision(
            "re",
            0,
            TriggerMode::Any,
            Triggers {
                regex: vec![r"\bv\d+\.\d+\.\d+\b".into()],
                ..Triggers::default()
            },
            Action::ShimContext,
        ),
        provision(
            "glob",
            0,
            TriggerMode::Any,
            Triggers {
                paths: vec!["**/*.tf".into()],
                ..Triggers::default()
            },
            Action::ShimContext,
        ),
        provision(
            "tool",
            0,
            TriggerMode::Any,
            Triggers {
                tools: vec!["Bash".into()],
                ..Triggers::default()
            },
            Action::ShimContext,
        ),
    ]);
    let env = envelope(
        "Please DEPLOY v1.2.3 and follow the Release Checklist",
        &["infra/main.tf"],
        &["Read", "Bash"],
    );
    let got = matched_ids(&set, &env);
    assert_eq!(
        got,
        [
            ("glob".to_owned(), "path:**/*.tf".to_owned()),
            ("kw".to_owned(), "keyword:deploy".to_owned()),
            ("re".to_owned(), r"regex:\bv\d+\.\d+\.\d+\b".to_owned()),
            ("tool".to_owned(), "tool:Bash".to_owned()),
        ]
    );
    // Same input, same answer, every time.
    for _ in 0..10 {
        assert_eq!(matched_ids(&set, &env), got);
    }
    assert!(
        matched_ids(
            &set,
            &envelope("nothing relevant here", &["src/main.rs"], &["Read"])
        )
        .is_empty()
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn keywords_are_case_insensitive_on_word_boundaries() {
    let set = RuleSet::compile([
        provision(
            "a",
            0,
            TriggerMode::Any,
            keywords(&["deploy"]),
            Action::ShimContext,
        ),
        provision(
            "b",
            0,
            TriggerMode::Any,
            keywords(&["Déploiement"]),
            Action::ShimContext,
        ),
        provision(
            "c",
            0,
            TriggerMode::Any,
            keywords(&[".env"]),
            Action::ShimContext,
        ),
        provision(
            "d",
            0,
            TriggerMode::Any,
            keywords(&["c++"]),
            Action::ShimContext,
        ),
    ]);
    let ids = |text: &str| {
        matched_ids(&set, &envelope(text, &[], &[]))
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>()
    };
    assert_eq!(ids("redeployed the app"), Vec::<String>::new());
    assert_eq!(ids("deployment"), Vec::<String>::new());
    assert_eq!(ids("deploy."), ["a"]);
    assert_eq!(ids("(DEPLOY)"), ["a"]);
    assert_eq!(ids("le DÉPLOIEMENT échoue"), ["b"]);
    assert_eq!(ids("cat .env please"), ["c"]);
    assert_eq!(
        ids("my.env file"),
        ["c"],
        "a keyword starting with punctuation needs no boundary before it"
    );
    assert_eq!(ids("write c++ code"), ["d"]);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn overlapping_keywords_of_different_rules_all_fire() {
    let set = RuleSet::compile([
        provision(
            "short",
            0,
            TriggerMode::Any,
            keywords(&["deploy"]),
            Action::ShimContext,
        ),
        provision(
            "long",
            0,
            TriggerMode::Any,
            keywords(&["deploy now"]),
            Action::ShimContext,
        ),
        provision(
            "same",
            0,
            TriggerMode::Any,
            keywords(&["Deploy"]),
            Action::ShimContext,
        ),
    ]);
    let ids: Vec<_> = matched_ids(&set, &envelope("deploy now", &[], &[]))
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, ["long", "same", "short"]);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn all_mode_needs_every_configured_kind() {
    let both = Triggers {
        keywords: vec!["terraform".into()],
        paths: vec!["**/*.tf".into()],
        ..Triggers::default()
    };
    let set = RuleSet::compile([
        provision(
            "all",
            0,
            TriggerMode::All,
            both.clone(),
            Action::ShimContext,
        ),
        provision("any", 0, TriggerMode::Any, both, Action::ShimContext),
    ]);
    let only_keyword = matched_ids(&set, &envelope("terraform plan", &[], &[]));
    assert_eq!(
        only_keyword,
        [("any".to_owned(), "keyword:terraform".to_owned())]
    );
    let both_hit = matched_ids(&set, &envelope("terraform plan", &["main.tf"], &[]));
    assert_eq!(
        both_hit[0],
        (
            "all".to_owned(),
            "keyword:terraform+path:**/*.tf".to_owned()
        )
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn order_is_priority_then_id_and_decide_follows_the_first() {
    let direct = provision(
        "direct",
        5,
        TriggerMode::Any,
        keywords(&["x"]),
        Action::RespondDirectly,
    );
    let shim_hi = provision(
        "shim-hi",
        10,
        TriggerMode::Any,
        keywords(&["x"]),
        Action::ShimContext,
    );
    let shim_b = provision(
        "b-shim",
        1,
        TriggerMode::Any,
        keywords(&["x"]),
        Action::ShimContext,
    );
    let shim_a = provision(
        "a-shim",
        1,
        TriggerMode::Any,
        keywords(&["x"]),
        Action::ShimContext,
    );
    let set = RuleSet::compile([
        direct.clone(),
        shim_b.clone(),
        shim_hi.clone(),
        shim_a.clone(),
    ]);
    let env = envelope("x", &[], &[]);
    let ids: Vec<_> = matched_ids(&set, &env)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, ["shim-hi", "direct", "a-shim", "b-shim"]);
    match decide(&set, set.evaluate(&env)) {
        Decision::Shim(m) => assert_eq!(
            m.iter()
                .map(|m| set.rule(m.rule).provision.spec.id.as_str())
                .collect::<Vec<_>>(),
            ["shim-hi", "a-shim", "b-shim"]
        ),
        other => panic!("{other:?}"),
    }
    let set = RuleSet::compile([direct, shim_a]);
    assert!(
        matches!(decide(&set, set.evaluate(&env)), Decision::Respond(m) if set.rule(m.rule).provision.spec.id == "direct")
    );
    assert_eq!(decide(&set, vec![]), Decision::Forward);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn disabled_provisions_never_fire_and_globs_respect_separators() {
    let (mut p, b) = provision(
        "off",
        0,
        TriggerMode::Any,
        keywords(&["x"]),
        Action::ShimContext,
    );
    Arc::get_mut(&mut p).unwrap().spec.enabled = false;
    let g = provision(
        "g",
        0,
        TriggerMode::Any,
        Triggers {
            paths: vec!["src/*.rs".into()],
            ..Triggers::default()
        },
        Action::ShimContext,
    );
    let set = RuleSet::compile([(p, b), g]);
    assert_eq!(set.len(), 1);
    assert!(matched_ids(&set, &envelope("x", &["src/deep/lib.rs"], &[])).is_empty());
    assert_eq!(
        matched_ids(&set, &envelope("x", &["src/lib.rs"], &[])).len(),
        1
    );
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn required_literals_skip_wildcards_classes_and_alternations() {
    assert_eq!(
        required_literal("**/module7/*.rs").as_deref(),
        Some("module7/")
    );
    assert_eq!(required_literal("**/main.tf").as_deref(), Some("main.tf"));
    assert_eq!(required_literal("**/*.tf").as_deref(), Some(".tf"));
    assert_eq!(required_literal("src/{a,bcdef}/x"), Some("src/".into()));
    assert_eq!(required_literal("[abcdef]*"), None);
    assert_eq!(required_literal("[]ab]long-literal"), None);
    assert_eq!(required_literal("**/*"), None);
}

#[test]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn prefiltered_globs_match_like_plain_globs() {
    let globs = [
        "**/*.tf",
        "src/*.rs",
        "**/migrations/**",
        "{docs,guides}/**/*.md",
        "*",
        "**/[Mm]akefile",
        "**/main.tf",
        "[[:digit:]]foo.rs",
        "[]x]y.rs",
        "a/**/b.txt",
    ];
    let set = RuleSet::compile(globs.iter().enumerate().map(|(i, g)| {
        provision(
            &format!("g{i}"),
            0,
            TriggerMode::Any,
            Triggers {
                paths: vec![g.to_string()],
                ..Triggers::default()
            },
            Action::ShimContext,
        )
    }));
    for path in [
        "infra/main.tf",
        "main.tf",
        "src/lib.rs",
        "src/a/lib.rs",
        "db/migrations/0001.sql",
        "migrations/0001.sql",
        "docs/x/y.md",
        "guides/a.md",
        "README",
        "tools/Makefile",
        "tools/makefile",
        "1foo.rs",
        "]y.rs",
        "a/b.txt",
        "a/x/y/b.txt",
    ] {
        let got: Vec<String> = matched_ids(&set, &envelope("", &[path], &[]))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let want: Vec<String> = globs
            .iter()
            .enumerate()
            .filter(|(_, g)| {
                globset::GlobBuilder::new(g)
                    .literal_separator(true)
                    .build()
                    .unwrap()
                    .compile_matcher()
                    .is_match(path)
            })
            .map(|(i, _)| format!("g{i}"))
            .collect();
        assert_eq!(got, want, "{path}");
    }
}
