//! Each caller's compiled rules (their own provisions plus the built-ins) and the context
//! entries those rules refer to, kept in memory and rebuilt only when a revision changed.
//!
//! A snapshot is trusted for `HERMA_RULES_CACHE_TTL_MS`; after that one cheap query reads the
//! revision counters, and only a changed counter rebuilds. Writes through this instance
//! invalidate at once; other instances see them within the TTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use herma_core::model::{ContextEntry, Provision};
use herma_core::rules::RuleSet;
use herma_core::shim::RenderedShim;
use herma_core::{CallerScope, Problem, Timestamp};
use herma_store::{DocumentStoreExt, Revisions, Store};

use herma_core::governance::{Refusal, Requester, admit};
use herma_core::key::KeyId;
use herma_core::semantic::Embedder;

use crate::error::internal;
use crate::tiers::{SemanticRules, semantic_rules};
use herma_core::evaluation::Mode;
use herma_core::time::Clock;

/// The maps read on every request (snapshots by caller, context entries by id) hash with
/// foldhash, seeded per process and map, rather than std's SipHash: a few hundred instructions
/// less a request. Their keys are the store's own or one caller's ids in that caller's own
/// snapshot, and the seed is not known outside the process.
type Hasher = foldhash::fast::RandomState;

/// Snapshots beyond this are dropped wholesale and rebuilt on demand.
const MAX_CACHED_SCOPES: usize = 10_000;

/// What one caller's requests are evaluated against.
#[derive(Debug)]
pub struct RuleSnapshot {
    pub rules: RuleSet,
    /// Context entries referenced by the rules, by id: the caller's own first, else the
    /// built-in of that id (`true`).
    pub context: HashMap<String, (Arc<ContextEntry>, bool), Hasher>,
    /// The semantic rules' example vectors.
    pub semantic: SemanticRules,
    /// Records the governance lens refused for this caller.
    pub refused: Vec<RefusedRecord>,
    /// Shims rendered under this snapshot, kept for the next request the same rules choose.
    pub shims: ShimMemo,
}

/// Most shims a snapshot keeps rendered.
const SHIM_MEMO_ENTRIES: usize = 16;
/// Most text (bytes, the shims and their JSON strings) a snapshot keeps in rendered shims.
const SHIM_MEMO_BYTES: usize = 64 * 1024;

/// Shims rendered under one snapshot, by the rules that chose them and the size budget. The
/// same rules over the same snapshot's entries render the same text, so a request that a kept
/// combination fits copies it rather than rendering it again. Bounded by
/// [`SHIM_MEMO_ENTRIES`] and [`SHIM_MEMO_BYTES`]: past either, a new combination is rendered
/// for each request, as every shim was before. A new snapshot starts empty.
#[derive(Debug, Default)]
pub struct ShimMemo(RwLock<KeptShims>);

/// A rendered shim, its text as a JSON string (for
/// [`herma_core::wire::Envelope::with_shim_json`]) and the context refs its rules named that
/// did not resolve.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedShim {
    pub rendered: RenderedShim,
    pub json: Arc<str>,
    pub unresolved: Vec<String>,
}

#[derive(Debug, Default)]
struct KeptShims {
    shims: Vec<KeptShim>,
    bytes: usize,
}

#[derive(Debug)]
struct KeptShim {
    rules: Box<[usize]>,
    budget: usize,
    shim: PreparedShim,
}

impl ShimMemo {
    /// The shim for `rules`, in the order given, within `budget`: kept, or made from what
    /// `render` returns (the shim and the refs it could not resolve) and kept when there is
    /// room.
    pub fn get_or_render(
        &self,
        rules: &[usize],
        budget: usize,
        render: impl FnOnce() -> (RenderedShim, Vec<String>),
    ) -> PreparedShim {
        let same = |k: &KeptShim| k.budget == budget && *k.rules == *rules;
        if let Ok(kept) = self.0.read()
            && let Some(found) = kept.shims.iter().find(|k| same(k))
        {
            return found.shim.clone();
        }
        let (rendered, unresolved) = render();
        // A string always serializes.
        let json = serde_json::to_string(&rendered.text).unwrap_or_else(|_| "\"\"".to_owned());
        let shim = PreparedShim {
            json: json.into(),
            rendered,
            unresolved,
        };
        let bytes = shim.rendered.text.len() + shim.json.len();
        if let Ok(mut kept) = self.0.write()
            && kept.shims.len() < SHIM_MEMO_ENTRIES
            && kept.bytes + bytes <= SHIM_MEMO_BYTES
            && !kept.shims.iter().any(same)
        {
            kept.bytes += bytes;
            kept.shims.push(KeptShim {
                rules: rules.into(),
                budget,
                shim: shim.clone(),
            });
        }
        shim
    }
}

/// A provision or context entry the governance lens keeps from a caller.
#[derive(Clone, Debug)]
pub struct RefusedRecord {
    /// `provision` or `context_entry`.
    pub kind: &'static str,
    pub id: String,
    pub builtin: bool,
    pub why: Refusal,
}

impl RuleSnapshot {
    pub fn context_entry(&self, id: &str) -> Option<(&ContextEntry, bool)> {
        self.context
            .get(id)
            .map(|(e, builtin)| (e.as_ref(), *builtin))
    }
}

struct Cached {
    revisions: [Revisions; 2],
    checked_at: Timestamp,
    built_at: Timestamp,
    snapshot: Arc<RuleSnapshot>,
}

/// A snapshot missing example vectors (the embedding model failed) is kept this long before
/// the vectors are tried again, so an outage does not make every request retry them.
const INCOMPLETE_RETRY_MS: i64 = 30_000;

pub struct RuleCache {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    ttl_ms: i64,
    embedder: Option<Arc<dyn Embedder>>,
    entries: RwLock<HashMap<CallerScope, Cached, Hasher>>,
    rebuilds: AtomicU64,
    /// Bumped by every invalidation: a snapshot built from reads older than an invalidation
    /// is used for its own request but not cached.
    generation: AtomicU64,
}

impl RuleCache {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, ttl_ms: u64) -> Self {
        Self {
            store,
            clock,
            ttl_ms: i64::try_from(ttl_ms).unwrap_or(1000),
            embedder: None,
            entries: RwLock::new(HashMap::default()),
            rebuilds: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }

    /// Semantic rules get their example vectors from `embedder`.
    pub fn with_embedder(mut self, embedder: Option<Arc<dyn Embedder>>) -> Self {
        self.embedder = embedder;
        self
    }

    /// How many snapshots were compiled since start (for metrics and tests).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }

    /// The caller's current snapshot. Offline, missing example vectors are not computed with a
    /// remote model; such an incomplete snapshot serves its request but is not cached.
    pub async fn snapshot(
        &self,
        scope: &CallerScope,
        mode: Mode,
    ) -> Result<Arc<RuleSnapshot>, Problem> {
        let now = self.clock.now();
        let cached_revisions = {
            let entries = self.entries.read().map_err(|_| internal_lock())?;
            match entries.get(scope) {
                Some(c)
                    if (0..self.ttl_ms).contains(&(now.as_millis() - c.checked_at.as_millis())) =>
                {
                    return Ok(c.snapshot.clone());
                }
                Some(c) => Some((c.revisions, c.snapshot.clone(), c.built_at)),
                None => None,
            }
        };
        let generation = self.generation.load(Ordering::SeqCst);
        let builtin = CallerScope::system_builtin();
        let revisions = self
            .store
            .revisions(&[scope.clone(), builtin.clone()])
            .await
            .map_err(internal)?;
        let revisions = [
            revisions.first().copied().unwrap_or_default(),
            revisions.get(1).copied().unwrap_or_default(),
        ];
        let (snapshot, built_at) = match cached_revisions {
            Some((old, snapshot, built_at))
                if old == revisions
                    && (snapshot.semantic.complete
                        || now.as_millis() - built_at.as_millis() < INCOMPLETE_RETRY_MS) =>
            {
                (snapshot, built_at)
            }
            // Boxed: a build's future is large and rare, and every request's future would
            // otherwise be sized for it (and copied at that size).
            _ => (
                Arc::new(Box::pin(self.build(scope, &builtin, mode)).await?),
                now,
            ),
        };
        let mut entries = self.entries.write().map_err(|_| internal_lock())?;
        // An offline build that could not ask a remote model is never cached: the next online
        // request computes the vectors. An online build that failed is cached for a while.
        let offline_gap = !snapshot.semantic.complete && mode == Mode::Offline;
        if self.generation.load(Ordering::SeqCst) != generation || offline_gap {
            return Ok(snapshot);
        }
        if entries.len() >= MAX_CACHED_SCOPES {
            entries.clear();
        }
        entries.insert(
            scope.clone(),
            Cached {
                revisions,
                checked_at: now,
                built_at,
                snapshot: snapshot.clone(),
            },
        );
        Ok(snapshot)
    }

    async fn build(
        &self,
        scope: &CallerScope,
        builtin: &CallerScope,
        mode: Mode,
    ) -> Result<RuleSnapshot, Problem> {
        let provisions = self.store.provisions();
        let own: Vec<Provision> = if scope.is_system_builtin() {
            Vec::new()
        } else {
            provisions.list_all(scope).await.map_err(internal)?
        };
        let builtins: Vec<Provision> = provisions.list_all(builtin).await.map_err(internal)?;
        let mut refs: Vec<String> = own
            .iter()
            .chain(&builtins)
            .flat_map(|p| p.spec.context_refs.iter().cloned())
            .collect();
        refs.sort();
        refs.dedup();
        // The governance lens (H12, H19): a built-in fires (or is shimmed) only with
        // fabric_governance that admits this caller and its harness; a caller's own governed
        // record the same way.
        let key = match scope.as_str().strip_prefix("key:").and_then(KeyId::parse) {
            Some(key_id) => self.store.find_key(&key_id).await.map_err(internal)?,
            None => None,
        };
        let requester = Requester {
            caller: scope,
            harness: key.as_ref().and_then(|k| k.harness.as_deref()),
            cohorts: key.as_ref().map_or(&[][..], |k| &k.cohorts[..]),
        };
        let mut refused = Vec::new();
        let mut admitted = |kind: &'static str,
                            id: &str,
                            governance: Option<&herma_core::governance::FabricGovernance>,
                            builtin: bool| {
            if !builtin && governance.is_none() {
                return true;
            }
            match admit(governance, &requester) {
                Ok(()) => true,
                Err(why) => {
                    tracing::debug!(kind, id, builtin, reason = %why, "governance lens refused a record");
                    refused.push(RefusedRecord {
                        kind,
                        id: id.to_owned(),
                        builtin,
                        why,
                    });
                    false
                }
            }
        };
        let entries = self.store.context_entries();
        let mut context = HashMap::default();
        if !refs.is_empty() {
            // Built-ins first, so the caller's own entry of the same id wins.
            let owners: &[(&CallerScope, bool)] = if scope.is_system_builtin() {
                &[(builtin, true)]
            } else {
                &[(builtin, true), (scope, false)]
            };
            for &(owner, is_builtin) in owners {
                for entry in entries.get_many(owner, &refs).await.map_err(internal)? {
                    let spec = &entry.spec;
                    if admitted(
                        "context_entry",
                        &spec.id,
                        spec.fabric_governance.as_ref(),
                        is_builtin,
                    ) {
                        context.insert(entry.spec.id.clone(), (Arc::new(entry), is_builtin));
                    }
                }
            }
        }
        let own: Vec<Provision> = own
            .into_iter()
            .filter(|p| {
                admitted(
                    "provision",
                    &p.spec.id,
                    p.spec.fabric_governance.as_ref(),
                    false,
                )
            })
            .collect();
        let builtins: Vec<Provision> = builtins
            .into_iter()
            .filter(|p| {
                admitted(
                    "provision",
                    &p.spec.id,
                    p.spec.fabric_governance.as_ref(),
                    true,
                )
            })
            .collect();
        let rules = RuleSet::compile(
            own.into_iter()
                .map(|p| (Arc::new(p), false))
                .chain(builtins.into_iter().map(|p| (Arc::new(p), true))),
        );
        for skipped in rules.skipped() {
            tracing::warn!(provision = %skipped.provision_id, reason = %skipped.reason, "rule left out of matching");
        }
        let semantic = semantic_rules(
            self.store.as_ref(),
            self.embedder.as_ref(),
            scope,
            &rules,
            mode,
            self.clock.now(),
        )
        .await;
        self.rebuilds.fetch_add(1, Ordering::Relaxed);
        Ok(RuleSnapshot {
            rules,
            context,
            semantic,
            refused,
            shims: ShimMemo::default(),
        })
    }

    /// Forgets a scope's snapshot (its records changed through this instance); the built-in
    /// scope forgets every snapshot, since every caller's rules include the built-ins.
    pub fn invalidate(&self, scope: &CallerScope) {
        if let Ok(mut entries) = self.entries.write() {
            self.generation.fetch_add(1, Ordering::SeqCst);
            if scope.is_system_builtin() {
                entries.clear();
            } else {
                entries.remove(scope);
            }
        }
    }
}

fn internal_lock() -> Problem {
    Problem::new(
        herma_core::ProblemCode::Internal,
        "Herma could not complete the request",
    )
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use herma_core::model::ShimmedRef;

    use super::*;

    fn rendered(text: &str) -> (RenderedShim, Vec<String>) {
        let shim = RenderedShim {
            text: text.to_owned(),
            refs: vec![ShimmedRef {
                id: format!("entry-{}", text.len()),
                version: 1,
                kind: herma_core::model::ContextKind::Noun,
                builtin: false,
                chars: text.chars().count() as u64,
                truncated: false,
                record_uri: None,
                record_version: None,
                blob_digests: Vec::new(),
            }],
        };
        (shim, vec!["missing".to_owned()])
    }

    fn prepared(text: &str) -> PreparedShim {
        let (rendered, unresolved) = rendered(text);
        PreparedShim {
            json: serde_json::to_string(text).unwrap_or_default().into(),
            rendered,
            unresolved,
        }
    }

    #[test]
    fn a_kept_shim_is_what_rendering_gave_and_is_not_rendered_again() {
        let memo = ShimMemo::default();
        let renders = Cell::new(0);
        let render = |text: &'static str| {
            let renders = &renders;
            move || {
                renders.set(renders.get() + 1);
                rendered(text)
            }
        };
        let text = "[NOUN CONTEXT]\n## \"A\" (a, v1)\nbody";
        let first = memo.get_or_render(&[3, 1], 8000, render(text));
        assert_eq!(first, prepared(text));
        assert_eq!(memo.get_or_render(&[3, 1], 8000, render("other")), first);
        assert_eq!(renders.get(), 1);
        // Another order of the rules, or another budget, is another shim.
        assert_eq!(
            memo.get_or_render(&[1, 3], 8000, render("B")),
            prepared("B")
        );
        assert_eq!(memo.get_or_render(&[3, 1], 10, render("C")), prepared("C"));
        assert_eq!(renders.get(), 3);
    }

    #[test]
    fn the_memo_stays_within_its_bounds_and_renders_past_them() {
        let memo = ShimMemo::default();
        for rule in 0..SHIM_MEMO_ENTRIES + 4 {
            memo.get_or_render(&[rule], 8000, || rendered("x"));
        }
        let kept = memo.0.read().map(|k| k.shims.len()).unwrap_or_default();
        assert_eq!(kept, SHIM_MEMO_ENTRIES);
        // Past the bound a shim is still rendered and returned, each time.
        let renders = Cell::new(0);
        for _ in 0..2 {
            let got = memo.get_or_render(&[999], 8000, || {
                renders.set(renders.get() + 1);
                rendered("late")
            });
            assert_eq!(got, prepared("late"));
        }
        assert_eq!(renders.get(), 2);

        // The byte bound (text and JSON string): a shim of nearly half of it is kept, the
        // next, which would pass it, is not.
        let memo = ShimMemo::default();
        let big = "y".repeat(SHIM_MEMO_BYTES / 2 - 2);
        memo.get_or_render(&[1], usize::MAX, || rendered(&big));
        let got = memo.get_or_render(&[2], usize::MAX, || rendered("z"));
        assert_eq!(got, prepared("z"));
        let (kept, bytes) = memo
            .0
            .read()
            .map(|k| (k.shims.len(), k.bytes))
            .unwrap_or_default();
        assert_eq!((kept, bytes), (1, SHIM_MEMO_BYTES - 2));
    }
}
