//! Deterministic entity memory (H13): no model, only regular expressions. From each proxied turn
//! Herma remembers the file paths, code symbols, Tessera URIs, statute card ids and error
//! signatures it saw, per caller and project; error signatures in turn N are attributed to the
//! rules fired in turn N-1; and frequent entities become reviewable candidate provisions.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::{Regex, RegexSet, SetMatches};
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

/// The patterns extraction uses, by index; the error signatures' last (`ERROR_KINDS` names
/// them).
const PATTERNS: [&str; 13] = [
    // `tessera://…` URIs.
    r"tessera://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+",
    // Statute card ids: `statute://…` URIs and `sc-` ids such as `sc-us-17-107`.
    r"\b(?:statute://[A-Za-z0-9._/-]+|sc-[a-z0-9]+(?:-[a-z0-9]+)+)\b",
    // Code symbols: `` `quoted` `` identifiers, `Type::member` paths, `name()` calls, CamelCase
    // types.
    r"`([A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*)(?:\(\))?`",
    r"\b[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+\b",
    r"\b([a-z_][a-z0-9_]{2,}(?:\.[a-z_][a-z0-9_]*)*)\(\)",
    r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b",
    // Error signatures: group 1 is the code.
    r"error\[(E\d{4})\]",
    r"\b(TS\d{4})\b",
    r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception))\b:",
    r"\b(E(?:NOENT|ACCES|CONNREFUSED|ADDRINUSE|TIMEDOUT|PERM|EXIST))\b",
    r"\b(panicked) at\b",
    r"(?i)\b(segmentation fault)\b",
    r"\btest result: (FAILED)\b",
];

const TESSERA_URI: usize = 0;
const STATUTE_CARD: usize = 1;
/// The code-symbol patterns, in the order their matches are taken.
const SYMBOLS: std::ops::Range<usize> = 2..6;
/// The error-signature patterns, each with how its signatures are named: a stable kind prefix
/// and the code.
const ERRORS: usize = 6;
const ERROR_KINDS: [&str; 7] = [
    "rust",
    "ts",
    "exception",
    "errno",
    "rust",
    "signal",
    "tests",
];

/// Each pattern compiled on its own (the tests prove each compiles; `None` would only skip it).
static REGEXES: LazyLock<Vec<Option<Regex>>> =
    LazyLock::new(|| PATTERNS.iter().map(|p| re(p)).collect());

/// All the patterns in one set: one pass over a short text tells which of them match in it at
/// all, and only those search it for their matches. A search has a fixed cost (about 800
/// instructions on a text of a few words), so a one-line prompt and answer took 18 searches that
/// all found nothing; the set's pass costs more per byte than the searches (which skip ahead to
/// their literals), so longer texts go without it (docs/performance.md, issue 18's fifteenth
/// round).
static SET: LazyLock<Option<RegexSet>> = LazyLock::new(|| RegexSet::new(PATTERNS).ok());

/// The longest text the set is run over first.
const SET_UP_TO: usize = 128;

/// The bytes [`may_match_any`] looks at.
static LOOKED_AT: [bool; 256] = {
    let mut looked_at = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        looked_at[byte] = matches!(
            byte as u8,
            b':' | b'`' | b'(' | b'[' | b'A'..=b'Z' | b'-' | b'p' | b'f'
        );
        byte += 1;
    }
    looked_at
};

/// Whether `text` has what a match of at least one of [`PATTERNS`] needs: a `:` (URIs, `::`
/// paths, `Error:`, `test result:`), a backtick, `(` (calls), `[` (`error[`), `sc-`, two ASCII
/// capitals (CamelCase, `TS1234`, `ENOENT`), `panicked`, or `fault` in any case (`(?i)`
/// folds none but ASCII letters to `f`, `a`, `u`, `l` or `t`). A short prompt or answer
/// without any of them skips the set's pass too (the memory worker's share of the load
/// harness's direct answer, whose prompt and answer are such texts, fell from 6.0 K
/// instructions to 4.5 K: docs/performance.md, issue 18's twenty-seventh round).
fn may_match_any(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut capitals = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        // Most bytes are none of those below: one load tells.
        if !LOOKED_AT[usize::from(byte)] {
            continue;
        }
        let found = match byte {
            b':' | b'`' | b'(' | b'[' => true,
            b'A'..=b'Z' => {
                capitals += 1;
                capitals == 2
                    || (byte == b'F'
                        && bytes[at + 1..]
                            .get(..4)
                            .is_some_and(|w| w.eq_ignore_ascii_case(b"ault")))
            }
            b'-' => at >= 2 && bytes[at - 2..at] == *b"sc",
            b'p' => bytes[at..].starts_with(b"panicked"),
            b'f' => bytes[at + 1..]
                .get(..4)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"ault")),
            _ => false,
        };
        if found {
            return true;
        }
    }
    false
}

/// Which patterns may match in a text: none in a short one that lacks what every pattern needs,
/// those the set found in another short one, else all.
enum Found {
    Nothing,
    Some(SetMatches),
    All,
}

impl Found {
    fn in_text(text: &str) -> Self {
        if text.len() > SET_UP_TO {
            return Self::All;
        }
        if !may_match_any(text) {
            return Self::Nothing;
        }
        SET.as_ref()
            .map_or(Self::All, |set| Self::Some(set.matches(text)))
    }

    fn may_match(&self, index: usize) -> bool {
        match self {
            Self::Nothing => false,
            Self::Some(found) => found.matched(index),
            Self::All => true,
        }
    }

    /// Calls `each` with every match of pattern `index` in `text`, the text this was found in.
    fn each<'t>(&self, index: usize, text: &'t str, each: impl FnMut(&'t str)) {
        if self.may_match(index) {
            each_match(&REGEXES[index], text, each);
        }
    }
}

fn bounded(value: &str) -> Option<String> {
    let value = value
        .trim_matches(|c: char| c == '.' || c == ',' || c == ')' || c == '(' || c.is_whitespace());
    (!value.is_empty() && value.chars().count() <= MAX_ENTITY_CHARS).then(|| value.to_owned())
}

/// Error signatures in `texts`, deduplicated in order of first appearance, e.g. `rust:E0308`,
/// `exception:KeyError`, `errno:ENOENT`.
pub fn error_signatures<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let texts: Vec<(&str, Found)> = texts.into_iter().map(|t| (t, Found::in_text(t))).collect();
    signatures(texts.iter().map(|(text, found)| (*text, found)))
}

/// [`error_signatures`] of texts whose patterns were found already.
fn signatures<'a, 'f>(texts: impl IntoIterator<Item = (&'a str, &'f Found)>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (text, found) in texts {
        for (index, kind) in (ERRORS..).zip(ERROR_KINDS) {
            // Every pattern's group 1 is its code.
            found.each(index, text, |code| {
                // Codes keep their spelling (`E0308`, `KeyError`); phrases are normalized.
                let code = match kind {
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
    let found: Vec<Found> = texts.iter().map(|text| Found::in_text(text)).collect();
    for (text, found) in texts.iter().zip(&found) {
        for (index, kind) in [
            (TESSERA_URI, EntityKind::TesseraUri),
            (STATUTE_CARD, EntityKind::StatuteCardId),
        ] {
            found.each(index, text, |m| push(kind, m));
        }
    }
    // Symbols from what people and the model wrote, not from raw tool output (too noisy).
    // Group 1 when the pattern has one (the name inside backticks or before `()`), else all.
    // The prompt is the first text, the answer the last (were either missing, every pattern
    // would search).
    let unknown = Found::All;
    let (prompt, answer) = (
        found.first().unwrap_or(&unknown),
        found.last().unwrap_or(&unknown),
    );
    for (text, found) in [(user_text, prompt), (response_text, answer)] {
        for index in SYMBOLS {
            found.each(index, text, |symbol| push(EntityKind::CodeSymbol, symbol));
        }
    }
    for signature in signatures(texts.iter().copied().zip(&found)) {
        push(EntityKind::ErrorSignature, &signature);
    }
    out
}

/// The project a turn belongs to: `X-Herma-Project` when given, else the last segment of the
/// working directory the harness states in its system prompt (Claude Code's `Working directory:
/// /path`, Codex's `<cwd>/path</cwd>`), else `default`.
pub fn project_tag(header: Option<&str>, system: Option<&str>) -> String {
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
    system
        .and_then(working_directory)
        .and_then(|dir| dir.trim_end_matches('/').rsplit('/').next().and_then(clean))
        .unwrap_or_else(|| "default".to_owned())
}

/// The directory a system prompt states: what `(?:Working directory: |<cwd>)([^\s<]+)` would
/// capture at its leftmost match — the earliest marker followed by a run of characters that
/// are neither white space (Unicode's, as the pattern's `\s`) nor `<`, the whole run. One pass
/// for the markers' first bytes (they differ, so at most one marker starts at a place): this
/// runs on every turn's system prompt, often kilobytes, where the regex's prefilter set-up and
/// search took about 1.9 K instructions a turn, and a substring search for each marker 1.7 K.
fn working_directory(system: &str) -> Option<&str> {
    const MARKERS: [&str; 2] = ["Working directory: ", "<cwd>"];
    let stops = |c: char| c.is_whitespace() || c == '<';
    let bytes = system.as_bytes();
    memchr::memchr2_iter(b'W', b'<', bytes).find_map(|at| {
        let marker = MARKERS
            .iter()
            .find(|m| bytes[at..].starts_with(m.as_bytes()))?;
        let rest = system.get(at + marker.len()..)?;
        let run = rest.find(stops).unwrap_or(rest.len());
        (run > 0).then(|| &rest[..run])
    })
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
        REGEXES.iter()
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn every_pattern_compiles() {
        assert_eq!(every_pattern().count(), 13);
        assert!(every_pattern().all(Option::is_some));
        assert_eq!(SET.as_ref().map(RegexSet::len), Some(PATTERNS.len()));
    }

    /// The set finds exactly the patterns that match on their own, and no pattern that matches is
    /// skipped, so skipping the rest changes nothing.
    fn set_agrees_with_each_pattern(text: &str) {
        let set = SET.as_ref().expect("the set compiles").matches(text);
        let found = Found::in_text(text);
        for (index, regex) in every_pattern().enumerate() {
            let matches = regex.as_ref().expect("compiles").is_match(text);
            assert_eq!(set.matched(index), matches, "pattern {index} in {text:?}");
            assert!(
                found.may_match(index) || !matches,
                "pattern {index} skipped in {text:?}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_set_finds_what_each_pattern_finds() {
        for text in [
            "",
            "please deploy the billing service",
            "See `Parser::parse()` and run_all(); HttpClient and ünïcödé `Ça` done() x",
            "tessera://nouns/a statute://us/17/107 sc-us-17-107 error[E0308] TS2345",
            "KeyError: 'k'; ENOENT; thread panicked at x; SEGMENTATION FAULT; test result: FAILED",
            "éKeyError: é_x() ÉtéCase sc-é-1 tessera://é",
            // Longer than the set is run over: every pattern searches it.
            &"a `Parser::parse` and run_all() in RuleSet; ".repeat(4),
            // Each with one thing a pattern needs and nothing else the pre-check looks for.
            "see tessera://x",
            "see statute://x",
            "see sc-us-17",
            "see `x`",
            "see a::b",
            "see run_all()",
            "see HttpClient",
            "see error[E0308]",
            "see TS2345",
            "see Error:",
            "see ENOENT",
            "thread panicked at x",
            "segmentation fault",
            "segmentation Fault",
            "ſegmentation fault",
            "test result: FAILED",
        ] {
            set_agrees_with_each_pattern(text);
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_short_text_with_nothing_a_pattern_needs_skips_the_set() {
        for text in [
            "",
            "please deploy the billing service",
            "status-check",
            "All systems nominal.",
            "Hello from the mock upstream.",
            "fast sc -x, p, f ault, Ça é",
        ] {
            assert!(!may_match_any(text), "{text:?}");
            assert!(matches!(Found::in_text(text), Found::Nothing), "{text:?}");
            set_agrees_with_each_pattern(text);
        }
        for text in [
            "see `x`", "A B", "a: b", "x(", "[", "sc-", "panicked", "FAULT", "fAuLt",
        ] {
            assert!(may_match_any(text), "{text:?}");
        }
    }

    /// The pre-check looks for `fault` in ASCII letters of any case: the only characters the
    /// case-insensitive pattern matches for those letters.
    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn only_ascii_letters_fold_to_those_of_fault() {
        let letters = Regex::new("(?i)^[fault]$").expect("compiles");
        let mut buffer = [0u8; 4];
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            if letters.is_match(c.encode_utf8(&mut buffer)) {
                assert!(
                    b"faultFAULT".contains(&(c as u32 as u8)) && c.is_ascii(),
                    "{c:?}"
                );
            }
        }
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn the_set_finds_what_each_pattern_finds_in_any_text(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "tessera://", "statute://", "sc-", "us", "-17", "`", "::", "()", ".", "_x",
                "Http", "Client", "Camel", "error[", "E0308", "]", "TS", "2345", "Key", "Error",
                "Exception", ":", "ENOENT", "EPERM", "panicked", " at", "segmentation fault",
                "Segmentation Fault", "test result: ", "FAILED", " ", "\n", "é", "Ça", "ü", "a",
                "Z", "9", "'", "/", "ß", "ſ", "fault", "Fault", "fAuLt", "sc", "-", "p", "(",
                "[", "\u{212a}",
            ]), 0..24),
        ) {
            set_agrees_with_each_pattern(&parts.concat());
        }

        #[test]
        fn the_working_directory_is_what_the_pattern_captures_in_any_text(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "Working directory: ", "Working directory:", "Working", " directory: ", "<cwd>",
                "<cwd", "cwd>", "<", "/", "a", "é", " ", "\t", "\n", "\u{a0}", "\u{2028}",
                "\u{3000}", "\u{85}", "\u{1680}", "\u{180e}", "\u{200b}", "</cwd>", "😀",
            ]), 0..16),
        ) {
            let text = parts.concat();
            proptest::prop_assert_eq!(working_directory(&text), working_directory_by_regex(&text));
        }
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

    /// The pattern `working_directory` stands for, as the tests' reference.
    fn working_directory_by_regex(system: &str) -> Option<&str> {
        static CWD: LazyLock<Option<Regex>> =
            LazyLock::new(|| re(r"(?:Working directory: |<cwd>)([^\s<]+)"));
        CWD.as_ref()?.captures(system)?.get(1).map(|m| m.as_str())
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_working_directory_is_what_the_pattern_captures() {
        for text in [
            "",
            "Working directory: /a/b",
            "<cwd>/x</cwd> then Working directory: /y",
            "Working directory: /y then <cwd>/x</cwd>",
            "Working directory:  /spaced",
            "<cwd><cwd>/inner</cwd>",
            "<cwd>\u{a0}/nbsp <cwd>/after",
            "Working directory: \u{2003}x Working directory: /ok",
            "Working directory: /é/ü\u{3000}rest",
            "Working directory: <cwd>/both",
            "WorkingWorking directory: /p<cwd>/q",
            "<cwd>",
            "tail Working directory: ",
        ] {
            assert_eq!(
                working_directory(text),
                working_directory_by_regex(text),
                "{text:?}"
            );
        }
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
