//! Deterministic entity memory (H13): no model, only regular expressions. From each proxied turn
//! Herma remembers the file paths, code symbols, Tessera URIs, statute card ids and error
//! signatures it saw, per caller and project; error signatures in turn N are attributed to the
//! rules fired in turn N-1; and frequent entities become reviewable candidate provisions.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::model::{
    Action, EntityKind, OutcomeKind, ProvisionSpec, TriggerMode, Triggers, WorkingEntity,
};

/// One sighting of an entity in a turn.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Observation {
    pub kind: EntityKind,
    pub value: String,
}

/// Longest entity value kept.
pub const MAX_ENTITY_CHARS: usize = 256;
/// Most observations taken from one turn.
pub const MAX_OBSERVATIONS_PER_TURN: usize = 256;

/// Compiles a constant pattern (the tests prove each compiles; `None` would only skip it).
fn re(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

/// Calls `each` with every match of an optional pattern: its group 1 where the pattern has one
/// and it took part, else the whole match. One set of capture slots serves every match (a
/// `Captures` per match is an allocation), and a pattern without groups only finds.
fn each_match<'t>(pattern: &Option<Regex>, text: &'t str, mut each: impl FnMut(&'t str)) {
    let Some(pattern) = pattern else { return };
    if pattern.captures_len() == 1 {
        pattern.find_iter(text).for_each(|m| each(m.as_str()));
        return;
    }
    let mut slots = pattern.capture_locations();
    let (mut at, mut last_end) = (0, None);
    while let Some(m) = pattern.captures_read_at(&mut slots, text, at) {
        // As `captures_iter`: an empty match where the previous one ended is not a match.
        if !(m.is_empty() && last_end == Some(m.end())) {
            match slots.get(1) {
                Some((start, end)) => each(&text[start..end]),
                None => each(m.as_str()),
            }
            last_end = Some(m.end());
        }
        at = m.end();
        if m.is_empty() {
            // Step over one character so an empty match is not found again.
            match text[at..].chars().next() {
                Some(c) => at += c.len_utf8(),
                None => break,
            }
        }
    }
}

/// `tessera://…` URIs.
static TESSERA_URI: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"tessera://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+"));
/// Statute card ids: `statute://…` URIs and `sc-` ids such as `sc-us-17-107`.
static STATUTE_CARD: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"\b(?:statute://[A-Za-z0-9._/-]+|sc-[a-z0-9]+(?:-[a-z0-9]+)+)\b"));
/// Code symbols: `` `quoted` `` identifiers, `Type::member` paths, `name()` calls, CamelCase types.
static BACKTICKED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(r"`([A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*)(?:\(\))?`")
});
static PATH_SYMBOL: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"\b[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+\b"));
static CALL: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"\b([a-z_][a-z0-9_]{2,}(?:\.[a-z_][a-z0-9_]*)*)\(\)"));
static CAMEL: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b"));

/// Error signatures, each with how it is named: a stable kind prefix and the code.
static ERRORS: LazyLock<Vec<(Option<Regex>, &'static str)>> = LazyLock::new(|| {
    vec![
        (re(r"error\[(E\d{4})\]"), "rust"),
        (re(r"\b(TS\d{4})\b"), "ts"),
        (
            re(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception))\b:"),
            "exception",
        ),
        (
            re(r"\b(E(?:NOENT|ACCES|CONNREFUSED|ADDRINUSE|TIMEDOUT|PERM|EXIST))\b"),
            "errno",
        ),
        (re(r"\b(panicked) at\b"), "rust"),
        (re(r"(?i)\b(segmentation fault)\b"), "signal"),
        (re(r"\btest result: (FAILED)\b"), "tests"),
    ]
});

fn bounded(value: &str) -> Option<String> {
    let value = value
        .trim_matches(|c: char| c == '.' || c == ',' || c == ')' || c == '(' || c.is_whitespace());
    (!value.is_empty() && value.chars().count() <= MAX_ENTITY_CHARS).then(|| value.to_owned())
}

/// Error signatures in `texts`, deduplicated in order of first appearance, e.g. `rust:E0308`,
/// `exception:KeyError`, `errno:ENOENT`.
pub fn error_signatures<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for text in texts {
        for (pattern, kind) in ERRORS.iter() {
            // Every pattern's group 1 is its code.
            each_match(pattern, text, |code| {
                // Codes keep their spelling (`E0308`, `KeyError`); phrases are normalized.
                let code = match *kind {
                    "signal" | "tests" => code.to_ascii_lowercase().replace(' ', "-"),
                    _ => code.to_owned(),
                };
                let signature = format!("{kind}:{code}");
                if seen.insert(signature.clone()) {
                    out.push(signature);
                }
            });
        }
    }
    out
}

/// Everything worth remembering from one turn: the paths Herma already found, plus symbols,
/// URIs, card ids and error signatures in the user's text, the tool results and the answer.
pub fn observations(
    paths: &[String],
    user_text: &str,
    tool_results: &[String],
    response_text: &str,
) -> Vec<Observation> {
    let mut seen: BTreeSet<Observation> = BTreeSet::new();
    let mut out = Vec::new();
    let mut push = |kind: EntityKind, value: &str| {
        if out.len() >= MAX_OBSERVATIONS_PER_TURN {
            return;
        }
        if let Some(value) = bounded(value) {
            let observation = Observation { kind, value };
            if seen.insert(observation.clone()) {
                out.push(observation);
            }
        }
    };
    for path in paths {
        push(EntityKind::FilePath, path);
    }
    let texts: Vec<&str> = std::iter::once(user_text)
        .chain(tool_results.iter().map(String::as_str))
        .chain(std::iter::once(response_text))
        .collect();
    for text in &texts {
        for (pattern, kind) in [
            (&*TESSERA_URI, EntityKind::TesseraUri),
            (&*STATUTE_CARD, EntityKind::StatuteCardId),
        ] {
            each_match(pattern, text, |m| push(kind, m));
        }
    }
    // Symbols from what people and the model wrote, not from raw tool output (too noisy).
    // Group 1 when the pattern has one (the name inside backticks or before `()`), else all.
    for text in [user_text, response_text] {
        for pattern in [&*BACKTICKED, &*PATH_SYMBOL, &*CALL, &*CAMEL] {
            each_match(pattern, text, |symbol| push(EntityKind::CodeSymbol, symbol));
        }
    }
    for signature in error_signatures(texts.iter().copied()) {
        push(EntityKind::ErrorSignature, &signature);
    }
    out
}

/// The project a turn belongs to: `X-Herma-Project` when given, else the last segment of the
/// working directory the harness states in its system prompt (Claude Code's `Working directory:
/// /path`, Codex's `<cwd>/path</cwd>`), else `default`.
pub fn project_tag(header: Option<&str>, system: Option<&str>) -> String {
    static CWD: LazyLock<Option<Regex>> =
        LazyLock::new(|| re(r"(?:Working directory: |<cwd>)([^\s<]+)"));
    let clean = |raw: &str| -> Option<String> {
        let tag: String = raw
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .take(64)
            .collect();
        (!tag.is_empty()).then_some(tag)
    };
    if let Some(tag) = header.and_then(clean) {
        return tag;
    }
    // The whole match less its literal prefix is the group: `find` spares a capture search
    // over the whole system prompt.
    system
        .and_then(|s| CWD.as_ref()?.find(s))
        .and_then(|m| {
            let text = m.as_str();
            text.strip_prefix("Working directory: ")
                .or_else(|| text.strip_prefix("<cwd>"))
        })
        .and_then(|dir| dir.trim_end_matches('/').rsplit('/').next().and_then(clean))
        .unwrap_or_else(|| "default".to_owned())
}

/// How often a rule was applied and followed by an error (for insights and candidates).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleStats {
    pub provision_id: String,
    /// Turns whose request received this rule's context.
    pub injected: u64,
    /// Turns this rule answered.
    pub responded_directly: u64,
    /// Turns after one where it fired that carried an error signature.
    pub retry_errors: u64,
    /// Turns where it matched but another rule decided (or it was once-only and spent).
    #[serde(default)]
    pub matched_not_applied: u64,
}

impl RuleStats {
    pub fn fired(&self) -> u64 {
        self.injected + self.responded_directly
    }

    pub fn add(&mut self, outcome: OutcomeKind, count: u64) {
        match outcome {
            OutcomeKind::Injected => self.injected += count,
            OutcomeKind::RespondedDirectly => self.responded_directly += count,
            OutcomeKind::RetryError => self.retry_errors += count,
            OutcomeKind::Matched => self.matched_not_applied += count,
        }
    }
}

/// Entities seen at least this often may become candidates.
pub const CANDIDATE_MIN_COUNT: u64 = 3;
/// At most this many candidates are proposed at once.
pub const MAX_CANDIDATES: usize = 10;

fn slug(value: &str) -> String {
    let mut slug: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while slug.contains("--") {
        slug = slug.replace("--", "-");
    }
    slug.trim_matches('-').chars().take(80).collect()
}

/// Candidate provisions, synthesized deterministically from the most frequent entities: a
/// recurring error signature suggests a regex rule that brings context when it shows up again;
/// a frequently touched directory suggests a path rule. Each is a valid `ProvisionSpec` whose
/// id (`candidate.…`) and context ref (`notes.…`) are not yet used — a candidate is never
/// active until someone approves it, and then it is created like any other provision.
pub fn candidate_provisions(
    entities: &[WorkingEntity],
    existing_ids: &BTreeSet<String>,
) -> Vec<ProvisionSpec> {
    let mut ranked: Vec<&WorkingEntity> = entities
        .iter()
        .filter(|e| e.count >= CANDIDATE_MIN_COUNT)
        .collect();
    ranked.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.kind.as_str().cmp(b.kind.as_str()))
            .then(a.value.cmp(&b.value))
    });
    let mut out: Vec<ProvisionSpec> = Vec::new();
    let mut directories = BTreeSet::new();
    for entity in ranked {
        if out.len() >= MAX_CANDIDATES {
            break;
        }
        let (id, description, triggers, note) = match entity.kind {
            EntityKind::ErrorSignature => {
                let code = entity
                    .value
                    .split_once(':')
                    .map(|(_, c)| c)
                    .unwrap_or(&entity.value);
                (
                    format!("candidate.error.{}", slug(&entity.value)),
                    format!(
                        "`{}` recurred {} times: bring the fix-up notes when it shows up again",
                        entity.value, entity.count
                    ),
                    Triggers {
                        regex: vec![regex::escape(code)],
                        ..Triggers::default()
                    },
                    format!("notes.error.{}", slug(&entity.value)),
                )
            }
            EntityKind::FilePath => {
                let Some((directory, _)) = entity.value.rsplit_once('/') else {
                    continue;
                };
                let directory = directory.trim_start_matches("./");
                if directory.is_empty()
                    || directory.contains(['*', '?', '[', ']', '{', '}', '\\'])
                    || !directories.insert(directory.to_owned())
                {
                    continue;
                }
                (
                    format!("candidate.path.{}", slug(directory)),
                    format!(
                        "Files under `{directory}/` came up {} times: bring that area's notes when they are touched",
                        entity.count
                    ),
                    Triggers {
                        paths: vec![format!("{}/**", directory.trim_start_matches('/'))],
                        ..Triggers::default()
                    },
                    format!("notes.path.{}", slug(directory)),
                )
            }
            _ => continue,
        };
        if existing_ids.contains(&id)
            || out.iter().any(|c| c.id == id)
            || crate::caller::id_problem(&id).is_some()
        {
            continue;
        }
        let spec = ProvisionSpec {
            id,
            description: description
                .chars()
                .take(crate::model::provision::MAX_DESCRIPTION_CHARS)
                .collect(),
            action: Action::ShimContext,
            priority: 0,
            trigger_mode: TriggerMode::Any,
            triggers,
            context_refs: vec![note],
            response: None,
            once_per_conversation: true,
            enabled: true,
            fabric_governance: None,
        };
        if spec.validate().is_ok() {
            out.push(spec);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::CallerScope;
    use crate::time::Timestamp;

    /// Every pattern extraction uses, the error signatures' last.
    fn every_pattern() -> impl Iterator<Item = &'static Option<Regex>> {
        [
            &*TESSERA_URI,
            &*STATUTE_CARD,
            &*BACKTICKED,
            &*PATH_SYMBOL,
            &*CALL,
            &*CAMEL,
        ]
        .into_iter()
        .chain(ERRORS.iter().map(|(p, _)| p))
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn every_pattern_compiles() {
        assert_eq!(every_pattern().count(), 13);
        assert!(every_pattern().all(Option::is_some));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn each_match_finds_what_captures_iter_finds() {
        let text = "See `Parser::parse()` and `x.y` then run_all() again; HttpClient::new \
            in src/App.rs, tessera://nouns/a?b=1 statute://us/17/107 sc-us-17-107. \
            error[E0308]: mismatched; TS2345 failed; KeyError: 'k'; ENOENT; thread panicked at \
            x; Segmentation Fault; test result: FAILED. ünïcödé `Ça` CamelCaseName done() ";
        for pattern in every_pattern() {
            let regex = pattern.as_ref().unwrap();
            let want: Vec<&str> = regex
                .captures_iter(text)
                .filter_map(|c| c.get(1).or_else(|| c.get(0)))
                .map(|m| m.as_str())
                .collect();
            let mut got = Vec::new();
            each_match(pattern, text, |m| got.push(m));
            assert!(!want.is_empty(), "{regex} matches the sample");
            assert_eq!(got, want, "{regex}");
        }
        // Empty matches, as `captures_iter` has them.
        for (pattern, text) in [
            ("(x*)", "aéxxb"),
            ("(x*)", "xx"),
            ("(x*?)", "aéx"),
            ("(é*)", "éaé"),
        ] {
            let regex = re(pattern);
            let want: Vec<&str> = (regex.as_ref().unwrap().captures_iter(text))
                .map(|c| c.get(1).unwrap().as_str())
                .collect();
            let mut got = Vec::new();
            each_match(&regex, text, |m| got.push(m));
            assert_eq!(got, want, "{pattern} in {text}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn all_five_kinds_are_extracted_deterministically() {
        let paths = vec!["src/lib.rs".to_owned()];
        let user = "Use `Envelope::from_request` and parse_body() in RuleSet; see tessera://nouns/billing and sc-us-17-107.";
        let tools = vec![
            "error[E0308]: mismatched types\n  --> src/lib.rs:3".to_owned(),
            "KeyError: 'x'".to_owned(),
        ];
        let got = observations(&paths, user, &tools, "Fixed in `herma_core::json`.");
        let by_kind = |k: EntityKind| {
            got.iter()
                .filter(|o| o.kind == k)
                .map(|o| o.value.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(by_kind(EntityKind::FilePath), ["src/lib.rs"]);
        assert_eq!(by_kind(EntityKind::TesseraUri), ["tessera://nouns/billing"]);
        assert_eq!(by_kind(EntityKind::StatuteCardId), ["sc-us-17-107"]);
        assert_eq!(
            by_kind(EntityKind::CodeSymbol),
            [
                "Envelope::from_request",
                "parse_body",
                "RuleSet",
                "herma_core::json"
            ]
        );
        assert_eq!(
            by_kind(EntityKind::ErrorSignature),
            ["rust:E0308", "exception:KeyError"]
        );
        assert_eq!(
            observations(&paths, user, &tools, "Fixed in `herma_core::json`."),
            got,
            "same input, same output"
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn error_signatures_cover_common_toolchains() {
        let text = "error[E0599]: no method\nsrc/a.ts(3,1): error TS2345: bad\nError: ENOENT: no such file\nthread 'main' panicked at src/x.rs\ntest result: FAILED. 1 passed; 2 failed\nSegmentation fault (core dumped)";
        assert_eq!(
            error_signatures([text]),
            [
                "rust:E0599",
                "ts:TS2345",
                "errno:ENOENT",
                "rust:panicked",
                "signal:segmentation-fault",
                "tests:failed"
            ]
        );
        assert!(error_signatures(["all good"]).is_empty());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn project_tags_come_from_the_header_or_the_working_directory() {
        assert_eq!(project_tag(Some("billing-api"), None), "billing-api");
        assert_eq!(
            project_tag(None, Some("<env>Working directory: /home/me/herma</env>")),
            "herma"
        );
        assert_eq!(project_tag(None, Some("<cwd>/repo/svc/</cwd>")), "svc");
        assert_eq!(project_tag(Some("  "), None), "default");
        assert_eq!(project_tag(Some("a b/c"), None), "abc");
    }

    fn entity(kind: EntityKind, value: &str, count: u64) -> WorkingEntity {
        WorkingEntity {
            caller_scope: CallerScope::system_builtin(),
            project_tag: "p".into(),
            kind,
            value: value.into(),
            count,
            first_seen: Timestamp::default(),
            last_seen: Timestamp::default(),
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn frequent_entities_become_valid_candidate_provisions() {
        let entities = vec![
            entity(EntityKind::ErrorSignature, "rust:E0308", 5),
            entity(EntityKind::FilePath, "crates/herma-core/src/lib.rs", 4),
            entity(EntityKind::FilePath, "crates/herma-core/src/json.rs", 3),
            entity(EntityKind::FilePath, "README.md", 9),
            entity(EntityKind::CodeSymbol, "RuleSet", 7),
            entity(EntityKind::ErrorSignature, "rust:E0599", 2),
        ];
        let candidates = candidate_provisions(&entities, &BTreeSet::new());
        let ids: Vec<_> = candidates.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "candidate.error.rust-e0308",
                "candidate.path.crates-herma-core-src"
            ]
        );
        for c in &candidates {
            assert!(c.validate().is_ok());
            assert_eq!(c.action, Action::ShimContext);
        }
        assert_eq!(candidates[0].triggers.regex, ["E0308"]);
        assert_eq!(candidates[1].triggers.paths, ["crates/herma-core/src/**"]);
        let existing: BTreeSet<String> = ["candidate.error.rust-e0308".to_owned()].into();
        assert_eq!(
            candidate_provisions(&entities, &existing).len(),
            1,
            "existing provisions are not proposed again"
        );
    }
}
