//! Tiers 2 and 3 at run time: the configured embedding model and classifier (opened by the
//! binary's wiring), the example vectors of semantic rules, and one request's evaluation
//! through all three tiers.
//!
//! Evaluation is [`Mode::Online`] on the proxy and [`Mode::Offline`] for dry runs, the public
//! preview and `herma rules eval` (H16): offline, the classifier is never called and a remote
//! embedding endpoint is never called; the in-process model still runs (it is not a provider).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use web_time::Instant;

use herma_core::engine::{self, Needs};
use herma_core::evaluation::{
    Evaluation, MicromodelView, Mode, NO_EMBEDDER, OFFLINE_EMBEDDER, SemanticView, may_embed,
    precheck, semantic_blocked,
};
use herma_core::micromodel::{Classifier, ClassifierError, Outcome, classify};
use herma_core::model::Tier;
use herma_core::rules::{RuleMatch, RuleSet};
use herma_core::semantic::{
    EmbedError, Embedder, ModelIdentity, RuleVectors, SemanticIndex, SemanticScore,
};
use herma_core::settings::{EmbedSource, TierSettings};
use herma_core::wire::Envelope;
use herma_core::{CallerScope, Timestamp};
use herma_providers::tiers::{HttpClassifier, RemoteEmbedder};
use herma_store::runtime::Runtime;
use herma_store::{Store, StoredVectors};

/// Classifier calls one request makes at once.
pub const MAX_PARALLEL_CLASSIFIER_CALLS: usize = 4;

/// The configured models of tiers 2 and 3.
#[derive(Clone, Default)]
pub struct Tiers {
    pub embedder: Option<Arc<dyn Embedder>>,
    pub classifier: Option<Arc<dyn Classifier>>,
    /// The bound of one classifier call.
    pub classifier_timeout: Duration,
    /// The bound of one request's embedding by a remote model (`None`: unbounded, as the
    /// in-process model needs).
    pub embed_timeout: Option<Duration>,
    /// Where the bounds are kept: the app's runtime ([`crate::App::with_tiers`] sets it).
    pub runtime: Option<Arc<dyn Runtime>>,
    /// Configured models that could not be used, in words.
    pub problems: Vec<String>,
}

impl std::fmt::Debug for Tiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tiers")
            .field("embedder", &self.embedder.as_ref().map(|e| e.identity()))
            .field("classifier", &self.classifier.is_some())
            .field("problems", &self.problems)
            .finish()
    }
}

impl Tiers {
    /// `future`, or `None` when `limit` passed first (on the app's runtime; unbounded without
    /// one, which only a `Tiers` outside an app lacks).
    async fn bounded<T>(&self, limit: Duration, future: impl Future<Output = T>) -> Option<T> {
        match &self.runtime {
            Some(runtime) => herma_store::runtime::timeout(runtime.as_ref(), limit, future).await,
            None => Some(future.await),
        }
    }

    /// Records a configured model that cannot be used (and logs it).
    pub fn problem(&mut self, text: String) {
        tracing::warn!("{text}");
        self.problems.push(text);
    }
}

/// The remote models `settings` names for tiers 2 and 3, over `http`: the embedding endpoint
/// (probed once for its size) and the classifier. A model that cannot be used is left out and
/// named in `problems`; rules needing it never fire, and dry runs say why. The in-process model
/// is not opened here (`herma serve` loads it; at the edge there is none, `local_refused` says
/// why in `problems`).
pub async fn open_remote(
    settings: &TierSettings,
    http: Arc<dyn herma_providers::Upstream>,
    local_refused: Option<&str>,
) -> Tiers {
    let mut tiers = Tiers {
        classifier_timeout: Duration::from_millis(settings.micromodel_timeout_ms),
        ..Tiers::default()
    };
    let cache = usize::try_from(settings.embed_cache_entries).unwrap_or(10_000);
    match &settings.embed {
        Some(EmbedSource::Remote(remote)) => {
            // Embedding a request may take longer than a classifier's yes or no.
            tiers.embed_timeout = Some(Duration::from_millis(
                settings.micromodel_timeout_ms.max(5_000),
            ));
            match RemoteEmbedder::connect_over(http.clone(), remote, cache).await {
                Ok(embedder) => {
                    tracing::info!(model = %embedder.identity().id, dimensions = embedder.identity().dimensions, "remote embedding model connected");
                    tiers.embedder = Some(Arc::new(embedder));
                }
                Err(e) => tiers.problem(format!(
                    "the remote embedding model at {} is not usable: {e}",
                    remote.base
                )),
            }
        }
        Some(EmbedSource::Local { .. }) => {
            if let Some(why) = local_refused {
                tiers.problem(why.to_owned());
            }
        }
        None => {}
    }
    if let Some(remote) = &settings.micromodel {
        tiers.classifier = Some(Arc::new(HttpClassifier::over(http, remote)));
    }
    tiers
}

/// A caller's semantic rules as vectors.
#[derive(Clone, Debug, Default)]
pub struct SemanticRules {
    pub index: SemanticIndex,
    pub model: Option<ModelIdentity>,
    /// Semantic rules with no vectors, and why (dry runs show it).
    pub missing: Vec<(usize, String)>,
    /// Whether every semantic rule that could get vectors has them (an incomplete set is not
    /// cached, so the next request tries again).
    pub complete: bool,
}

/// Example vectors for every semantic rule of `rules`: read from the store for the current
/// provision versions and model, computed and stored when missing — unless the model is remote
/// and `mode` is offline.
pub async fn semantic_rules(
    store: &dyn Store,
    embedder: Option<&Arc<dyn Embedder>>,
    scope: &CallerScope,
    rules: &RuleSet,
    mode: Mode,
    now: Timestamp,
) -> SemanticRules {
    let semantic: Vec<usize> = (0..rules.len())
        .filter(|&r| rules.rule(r).provision.spec.triggers.semantic.is_some())
        .collect();
    let mut out = SemanticRules {
        complete: true,
        ..SemanticRules::default()
    };
    if semantic.is_empty() {
        return out;
    }
    let Some(embedder) = embedder else {
        out.missing = semantic.iter().map(|&r| (r, NO_EMBEDDER.into())).collect();
        return out;
    };
    let identity = embedder.identity().clone();
    let builtin = CallerScope::system_builtin();
    let scope_of = |r: usize| {
        if rules.rule(r).builtin {
            &builtin
        } else {
            scope
        }
    };
    let mut vectors: HashMap<usize, RuleVectors> = HashMap::new();
    for owner in [scope, &builtin] {
        let wanted: Vec<(String, u64)> = semantic
            .iter()
            .filter(|&&r| scope_of(r) == owner)
            .map(|&r| {
                let p = &rules.rule(r).provision;
                (p.spec.id.clone(), p.version)
            })
            .collect();
        match store.get_vectors(owner, &identity.id, &wanted).await {
            Ok(found) => {
                for stored in found {
                    if let Some(&r) = semantic.iter().find(|&&r| {
                        scope_of(r) == owner
                            && rules.rule(r).provision.spec.id == stored.provision_id
                    }) {
                        vectors.insert(r, stored.vectors);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading stored example vectors failed"),
        }
        if owner == &builtin {
            break;
        }
    }
    let todo: Vec<usize> = semantic
        .iter()
        .copied()
        .filter(|r| !vectors.contains_key(r))
        .collect();
    if !todo.is_empty() && !may_embed(&identity, mode) {
        out.complete = false;
        out.missing
            .extend(todo.iter().map(|&r| (r, OFFLINE_EMBEDDER.to_owned())));
    } else if !todo.is_empty() {
        let started = Instant::now();
        if todo.len() > 1 {
            tracing::info!(rules = todo.len(), model = %identity.id, "computing example vectors");
        }
        for (done, &r) in todo.iter().enumerate() {
            let provision = &rules.rule(r).provision;
            let Some(trigger) = &provision.spec.triggers.semantic else {
                continue;
            };
            let texts: Vec<String> = trigger
                .examples
                .iter()
                .chain(&trigger.negatives)
                .cloned()
                .collect();
            match embedder.embed(&texts).await {
                Ok(mut all) => {
                    let negatives = all.split_off(trigger.examples.len().min(all.len()));
                    let computed = RuleVectors {
                        examples: all,
                        negatives,
                    };
                    let stored = StoredVectors {
                        provision_id: provision.spec.id.clone(),
                        version: provision.version,
                        vectors: computed.clone(),
                    };
                    if let Err(e) = store
                        .put_vectors(scope_of(r), &identity.id, &stored, now)
                        .await
                    {
                        tracing::warn!(provision = %provision.spec.id, error = %e, "storing example vectors failed");
                    }
                    vectors.insert(r, computed);
                }
                Err(e) => {
                    out.complete = false;
                    out.missing.push((r, e.to_string()));
                }
            }
            if todo.len() >= 20 && (done + 1) % 20 == 0 {
                tracing::info!(
                    done = done + 1,
                    of = todo.len(),
                    "computing example vectors"
                );
            }
        }
        if todo.len() > 1 {
            tracing::info!(
                rules = todo.len(),
                ms = started.elapsed().as_millis() as u64,
                "example vectors ready"
            );
        }
    }
    let triggers: Vec<_> = semantic
        .iter()
        .filter_map(|&r| {
            let trigger = rules.rule(r).provision.spec.triggers.semantic.as_ref()?;
            Some((r, trigger, vectors.get(&r)?))
        })
        .collect();
    out.index = SemanticIndex::build(identity.dimensions, triggers);
    out.model = Some(identity);
    out
}

/// Evaluates all three tiers for `envelope`: tier 1, then tier 2 for the rules it can still
/// change, then the classifier for the rest (H06).
pub async fn evaluate(
    tiers: &Tiers,
    rules: &RuleSet,
    semantic: &SemanticRules,
    envelope: &Envelope,
    mode: Mode,
) -> (Vec<RuleMatch>, Evaluation) {
    // The common case: tier 1 only. Nothing per rule beyond the tier-1 index.
    if !rules.has_later_tiers() {
        return (rules.evaluate(envelope), Evaluation::default());
    }
    let hits = rules.tier1(envelope);
    let mut report = Evaluation::default();
    let Needs {
        rules: wanted,
        skipped,
    } = engine::semantic_needs(rules, &hits);
    for (r, why) in &skipped {
        report.skip(rules, *r, Tier::Semantic, why);
    }
    let mut scores: Vec<SemanticScore> = Vec::new();
    if !wanted.is_empty() {
        let text = envelope.user_text.trim();
        let no_vectors = |r: usize| semantic.missing.iter().find(|(m, _)| *m == r);
        let blocked = semantic_blocked(tiers.embedder.as_ref().map(|e| e.identity()), mode, text);
        if let Some(reason) = blocked {
            for &r in &wanted {
                report.skip(rules, r, Tier::Semantic, reason);
            }
        } else if let Some(embedder) = &tiers.embedder {
            report.embedding_model = Some(embedder.identity().id.clone());
            let started = Instant::now();
            let asked = [text.to_owned()];
            let vector = match tiers.embed_timeout.filter(|_| embedder.identity().remote) {
                Some(limit) => tiers
                    .bounded(limit, embedder.embed(&asked))
                    .await
                    .unwrap_or_else(|| {
                        Err(EmbedError::Unavailable(format!(
                            "the embedding model did not answer within {} ms",
                            limit.as_millis()
                        )))
                    }),
                None => embedder.embed(&asked).await,
            };
            report.embed_micros = started.elapsed().as_micros() as u64;
            match vector.map(|mut v| v.pop()) {
                Ok(Some(query)) => {
                    scores = semantic
                        .index
                        .score(&query, |r| wanted.binary_search(&r).is_ok());
                    for &r in &wanted {
                        if let Some((_, why)) = no_vectors(r) {
                            report.skip(rules, r, Tier::Semantic, why);
                        }
                    }
                }
                Ok(None) => {
                    for &r in &wanted {
                        report.skip(
                            rules,
                            r,
                            Tier::Semantic,
                            "the embedding model returned nothing",
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "embedding the request failed");
                    let why = e.to_string();
                    for &r in &wanted {
                        report.skip(rules, r, Tier::Semantic, &why);
                    }
                }
            }
        }
    }
    report
        .semantic
        .extend(scores.iter().map(|s| SemanticView::of(rules, s)));

    let Needs {
        rules: asked,
        skipped,
    } = engine::micromodel_needs(rules, &hits, &scores);
    for (r, why) in &skipped {
        report.skip(rules, *r, Tier::Micromodel, why);
    }
    let mut outcomes: Vec<(usize, Outcome)> = Vec::new();
    let mut calls = Vec::new();
    for &r in &asked {
        let spec = &rules.rule(r).provision.spec;
        let Some(trigger) = &spec.triggers.micromodel else {
            continue;
        };
        match precheck(trigger, mode, tiers.classifier.is_some()) {
            Some(o) => outcomes.push((r, o)),
            None => calls.push((r, trigger)),
        }
    }
    if let Some(classifier) = &tiers.classifier
        && !calls.is_empty()
    {
        report.classifier_calls = u32::try_from(calls.len()).unwrap_or(u32::MAX);
        let timeout = tiers.classifier_timeout;
        let asks: Vec<_> = calls
            .iter()
            .copied()
            .map(|(r, trigger)| {
                let classifier: &dyn Classifier = classifier.as_ref();
                async move {
                    let outcome = tiers
                        .bounded(timeout, classify(classifier, trigger, &envelope.user_text))
                        .await
                        .unwrap_or(Outcome::Failed(ClassifierError::Timeout));
                    (r, outcome)
                }
            })
            .collect();
        // A few calls at a time: a request with many micromodel rules must not flood the
        // classifier into rate limiting every one of them.
        let answered: Vec<(usize, Outcome)> =
            futures_util::StreamExt::collect(futures_util::StreamExt::buffered(
                futures_util::stream::iter(asks),
                MAX_PARALLEL_CLASSIFIER_CALLS,
            ))
            .await;
        outcomes.extend(answered);
    }
    outcomes.sort_by_key(|(r, _)| *r);
    for (r, outcome) in &outcomes {
        if let Outcome::Failed(e) = outcome {
            let id = &rules.rule(*r).provision.spec.id;
            tracing::warn!(provision = %id, error = %e, "classifier call failed");
        }
        report
            .micromodel
            .push(MicromodelView::of(rules, *r, outcome));
    }
    let matches = engine::resolve(rules, &hits, &scores, &outcomes);
    (matches, report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use herma_core::model::{Provision, ProvisionSpec};
    use herma_core::semantic::EmbedError;
    use herma_core::wire::{HeaderFacts, Protocol};
    use herma_store::{DocumentStoreExt, MemoryStore, VectorStore};

    use super::*;

    /// Every text is the same unit vector; calls are counted.
    struct Counting {
        identity: ModelIdentity,
        calls: AtomicUsize,
    }

    #[async_trait]
    impl Embedder for Counting {
        fn identity(&self) -> &ModelIdentity {
            &self.identity
        }

        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(texts.iter().map(|_| vec![1.0, 0.0, 0.0]).collect())
        }
    }

    fn envelope(text: &str) -> Envelope {
        let body =
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": text}]});
        Envelope::from_request(
            Protocol::ChatCompletions,
            &serde_json::to_vec(&body).unwrap(),
            &HeaderFacts::default(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_request_tier_1_decides_pays_nothing_for_tier_2() {
        let store = MemoryStore::new();
        let scope = CallerScope::parse("key:0123456789abcdef").unwrap();
        let specs = [
            serde_json::json!({"id": "answer", "action": "respond_directly", "priority": 10, "response": {"text": "no"}, "triggers": {"keywords": ["deploy"]}}),
            serde_json::json!({"id": "either", "action": "shim_context", "context_refs": ["c"], "triggers": {"keywords": ["deploy"], "semantic": {"examples": ["ship it"]}}}),
            serde_json::json!({"id": "lower", "action": "shim_context", "priority": -5, "context_refs": ["c"], "triggers": {"semantic": {"examples": ["ship it"]}}}),
        ];
        for spec in specs {
            let spec: ProvisionSpec = serde_json::from_value(spec).unwrap();
            store
                .provisions()
                .create(&scope, &spec, Timestamp::from_millis(1))
                .await
                .unwrap();
        }
        let provisions: Vec<Provision> = store.provisions().list_all(&scope).await.unwrap();
        let rules = RuleSet::compile(provisions.into_iter().map(|p| (Arc::new(p), false)));
        let counting = Arc::new(Counting {
            identity: ModelIdentity {
                id: "test:3".into(),
                dimensions: 3,
                remote: false,
            },
            calls: AtomicUsize::new(0),
        });
        let embedder: Arc<dyn Embedder> = counting.clone();
        let tiers = Tiers {
            embedder: Some(embedder.clone()),
            ..Tiers::default()
        };
        let semantic = semantic_rules(
            &store,
            Some(&embedder),
            &scope,
            &rules,
            Mode::Online,
            Timestamp::from_millis(2),
        )
        .await;
        assert!(semantic.complete);
        assert_eq!(
            semantic.index.len(),
            2,
            "one example for each semantic rule"
        );
        counting.calls.store(0, Ordering::SeqCst);

        // Tier 1 fires `answer` (a direct answer) and `either`: nothing is embedded.
        let (matches, report) = evaluate(
            &tiers,
            &rules,
            &semantic,
            &envelope("deploy now"),
            Mode::Online,
        )
        .await;
        assert_eq!(counting.calls.load(Ordering::SeqCst), 0);
        assert_eq!(report.embed_micros, 0);
        let fired: Vec<&str> = matches
            .iter()
            .map(|m| rules.rule(m.rule).provision.spec.id.as_str())
            .collect();
        assert_eq!(fired, ["answer", "either"]);
        let skipped: Vec<(&str, &str)> = report
            .skipped
            .iter()
            .map(|s| (s.provision_id.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(
            skipped,
            [
                ("either", engine::FIRED_EARLIER),
                ("lower", engine::OUTRANKED)
            ]
        );

        // Without a tier-1 decision the request is embedded once, whatever the rule count.
        let (matches, report) =
            evaluate(&tiers, &rules, &semantic, &envelope("hello"), Mode::Online).await;
        assert_eq!(counting.calls.load(Ordering::SeqCst), 1);
        assert_eq!(report.semantic.len(), 2);
        assert!(matches.iter().all(|m| m.tier == Tier::Semantic));

        // Stored vectors are reused: a second index costs no embedding.
        let again = semantic_rules(
            &store,
            Some(&embedder),
            &scope,
            &rules,
            Mode::Online,
            Timestamp::from_millis(3),
        )
        .await;
        assert_eq!(counting.calls.load(Ordering::SeqCst), 1);
        assert_eq!(again.index.len(), 2);

        // Another model (another identity): the stored vectors are not used; both rules'
        // examples are embedded again and stored under the new identity.
        let other = Arc::new(Counting {
            identity: ModelIdentity {
                id: "test:3-other".into(),
                dimensions: 3,
                remote: false,
            },
            calls: AtomicUsize::new(0),
        });
        let other_embedder: Arc<dyn Embedder> = other.clone();
        let recomputed = semantic_rules(
            &store,
            Some(&other_embedder),
            &scope,
            &rules,
            Mode::Online,
            Timestamp::from_millis(4),
        )
        .await;
        assert_eq!(other.calls.load(Ordering::SeqCst), 2);
        assert_eq!(recomputed.model.unwrap().id, "test:3-other");
        let wanted = [("either".to_owned(), 1), ("lower".to_owned(), 1)];
        assert_eq!(
            store
                .get_vectors(&scope, "test:3-other", &wanted)
                .await
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            store
                .get_vectors(&scope, "test:3", &wanted)
                .await
                .unwrap()
                .len(),
            2
        );
    }
}
