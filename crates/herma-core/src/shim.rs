//! Rendering context entries into the bounded `[NOUN CONTEXT]`, `[VERB CONTEXT]` and
//! `[DETAIL CONTEXT]` blocks a shim adds to a request (H09).

use std::fmt::Write as _;

use crate::model::{ContextEntry, ContextKind, MAX_URI_CHARS, ShimmedRef};

/// Default size budget of one shim, in characters.
pub const DEFAULT_SHIM_BUDGET: usize = 8000;
const CUT_MARKER: &str = " …[cut]";

/// A resolved entry and whether it is a built-in.
#[derive(Clone, Copy, Debug)]
pub struct ShimEntry<'a> {
    pub entry: &'a ContextEntry,
    pub builtin: bool,
}

/// The shim text and the receipt's account of each entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedShim {
    pub text: String,
    pub refs: Vec<ShimmedRef>,
}

fn body_text(entry: &ContextEntry) -> std::borrow::Cow<'_, str> {
    match &entry.spec.schema_or_body {
        serde_json::Value::String(text) => text.as_str().into(),
        other => other.to_string().into(),
    }
}

/// The URI a shimmed entry is known by: its governed record's (`tessera://…`), else its own.
/// Bounded like every URI Herma accepts; a longer one is not shown.
fn entry_uri(entry: &ContextEntry) -> Option<&str> {
    entry
        .spec
        .fabric_governance
        .as_ref()
        .and_then(|g| g.record_uri.as_deref())
        .or(entry.spec.uri.as_deref())
        .filter(|uri| !uri.is_empty() && uri.len() <= MAX_URI_CHARS && !uri.contains(['\n', '\r']))
}

fn heading(kind: ContextKind) -> &'static str {
    match kind {
        ContextKind::Noun => "[NOUN CONTEXT]",
        ContextKind::Verb => "[VERB CONTEXT]",
        ContextKind::Detail => "[DETAIL CONTEXT]",
    }
}

/// Renders entries (in the order given, grouped noun, verb, detail) within `budget`
/// characters. An entry that does not fit is cut (marked `…[cut]`); entries after the budget
/// is spent are left out; both are recorded as `truncated`.
pub fn render(entries: &[ShimEntry<'_>], budget: usize) -> RenderedShim {
    let mut text = String::new();
    let mut used = 0usize;
    let mut refs = Vec::with_capacity(entries.len());
    for kind in [ContextKind::Noun, ContextKind::Verb, ContextKind::Detail] {
        let mut heading_written = false;
        for shim_entry in entries.iter().filter(|e| e.entry.spec.kind == kind) {
            let entry = shim_entry.entry;
            let title = if entry.spec.title.is_empty() {
                entry.spec.id.as_str()
            } else {
                entry.spec.title.as_str()
            };
            let mut head = String::new();
            if !heading_written {
                if !text.is_empty() {
                    head.push('\n');
                }
                head.push_str(heading(kind));
                head.push('\n');
            }
            // Writing into a `String` cannot fail.
            let _ = writeln!(head, "## {title} ({}, v{})", entry.spec.id, entry.version);
            let governance = entry.spec.fabric_governance.as_ref();
            if let Some(uri) = entry_uri(entry) {
                head.push_str("URI: ");
                head.push_str(uri);
                head.push('\n');
            }
            let body = body_text(entry);
            let body_chars = body.chars().count();
            let head_chars = head.chars().count();
            let left = budget.saturating_sub(used);
            let mut record = ShimmedRef {
                id: entry.spec.id.clone(),
                version: entry.version,
                kind,
                builtin: shim_entry.builtin,
                chars: 0,
                truncated: false,
                record_uri: governance.and_then(|g| g.record_uri.clone()),
                record_version: governance.and_then(|g| g.record_version),
                blob_digests: governance
                    .map(|g| {
                        g.blobs
                            .iter()
                            .filter_map(|b| b.content_sha256.clone())
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            if head_chars + body_chars < left {
                text.push_str(&head);
                text.push_str(&body);
                text.push('\n');
                used += head_chars + body_chars + 1;
                record.chars = body_chars as u64;
                heading_written = true;
            } else if left > head_chars + CUT_MARKER.chars().count() + 16 {
                let keep = left - head_chars - CUT_MARKER.chars().count() - 1;
                let cut: String = body.chars().take(keep).collect();
                text.push_str(&head);
                text.push_str(&cut);
                text.push_str(CUT_MARKER);
                text.push('\n');
                used += head_chars + keep + CUT_MARKER.chars().count() + 1;
                record.chars = keep as u64;
                record.truncated = true;
                heading_written = true;
            } else {
                record.truncated = true;
            }
            refs.push(record);
        }
    }
    text.truncate(text.trim_end().len());
    RenderedShim { text, refs }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::CallerScope;
    use crate::model::ContextEntrySpec;
    use crate::time::Timestamp;

    fn entry(id: &str, kind: ContextKind, body: &str) -> ContextEntry {
        ContextEntry {
            caller_scope: CallerScope::system_builtin(),
            version: 2,
            created_at: Timestamp::default(),
            updated_at: Timestamp::default(),
            spec: ContextEntrySpec {
                id: id.into(),
                kind,
                title: String::new(),
                schema_or_body: serde_json::Value::String(body.into()),
                uri: None,
                tags: vec![],
                fabric_governance: None,
            },
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn h09_blocks_are_grouped_by_kind_and_bounded() {
        let verb = entry("deploy", ContextKind::Verb, "Run migrations first.");
        let noun = entry("svc", ContextKind::Noun, "The billing service.");
        let detail = entry("d", ContextKind::Detail, "Port 8080.");
        let shim = render(
            &[
                ShimEntry {
                    entry: &verb,
                    builtin: false,
                },
                ShimEntry {
                    entry: &noun,
                    builtin: true,
                },
                ShimEntry {
                    entry: &detail,
                    builtin: false,
                },
            ],
            10_000,
        );
        assert_eq!(
            shim.text,
            "[NOUN CONTEXT]\n## svc (svc, v2)\nThe billing service.\n\n[VERB CONTEXT]\n## deploy (deploy, v2)\nRun migrations first.\n\n[DETAIL CONTEXT]\n## d (d, v2)\nPort 8080."
        );
        assert_eq!(
            shim.refs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["svc", "deploy", "d"]
        );
        assert!(shim.refs.iter().all(|r| !r.truncated));
        assert!(shim.refs[0].builtin);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn each_entry_block_names_its_uri_governed_first() {
        let mut own = entry("svc", ContextKind::Noun, "The billing service.");
        own.spec.uri = Some("https://wiki.example.com/billing".into());
        let mut governed = entry("deploy", ContextKind::Verb, "Run migrations first.");
        governed.spec.uri = Some("https://ignored.example.com".into());
        let mut governance = crate::governance::FabricGovernance::herma_starter();
        governance.record_uri = Some("tessera://records/verbs/deploy".into());
        governed.spec.fabric_governance = Some(governance);
        let plain = entry("d", ContextKind::Detail, "Port 8080.");
        let entries = [&own, &governed, &plain].map(|entry| ShimEntry {
            entry,
            builtin: false,
        });
        let shim = render(&entries, 10_000);
        assert_eq!(
            shim.text,
            "[NOUN CONTEXT]\n## svc (svc, v2)\nURI: https://wiki.example.com/billing\nThe billing service.\n\n\
             [VERB CONTEXT]\n## deploy (deploy, v2)\nURI: tessera://records/verbs/deploy\nRun migrations first.\n\n\
             [DETAIL CONTEXT]\n## d (d, v2)\nPort 8080."
        );
        // The URI counts against the budget like the rest of the block.
        let tight = render(&entries[..1], 60);
        assert!(tight.text.chars().count() <= 60, "{}", tight.text);
        assert!(tight.refs[0].truncated);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn over_budget_entries_are_cut_then_left_out_and_recorded() {
        let long = entry("long", ContextKind::Verb, &"x".repeat(500));
        let next = entry("next", ContextKind::Verb, "y");
        let shim = render(
            &[
                ShimEntry {
                    entry: &long,
                    builtin: false,
                },
                ShimEntry {
                    entry: &next,
                    builtin: false,
                },
            ],
            200,
        );
        assert!(
            shim.text.chars().count() <= 200,
            "{}",
            shim.text.chars().count()
        );
        assert!(shim.text.ends_with("…[cut]"));
        assert!(shim.refs[0].truncated && shim.refs[0].chars > 100 && shim.refs[0].chars < 500);
        assert_eq!((shim.refs[1].truncated, shim.refs[1].chars), (true, 0));
    }
}
