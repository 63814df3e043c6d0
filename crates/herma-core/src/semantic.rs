//! Tier 2: semantic triggers. A rule carries example prompts (and negatives); the request's
//! latest user turn is embedded and compared with every example by cosine similarity. A rule
//! matches when its best example reaches the rule's threshold **and** beats its best negative
//! by the rule's margin.
//!
//! This module holds the port ([`Embedder`]) and the pure parts: the index of every example
//! vector of a caller's rules, kept in one contiguous matrix so scoring 10,000 examples is one
//! pass over memory, and the scoring itself. Embedding models live behind the port
//! (`herma-embed` in-process, or a remote endpoint).

use std::fmt;

use async_trait::async_trait;

use crate::model::SemanticTrigger;

/// Which model produced a vector. Vectors of different models are never compared: stored
/// example vectors carry this and are recomputed when it changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelIdentity {
    /// E.g. `local:all-MiniLM-L6-v2:53aa5172` or `openai:text-embedding-3-small@api.openai.com`.
    pub id: String,
    pub dimensions: usize,
    /// Whether embedding sends text over the network (offline evaluation skips such models).
    pub remote: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmbedError {
    /// The model could not be run or reached; the detail is for logs and dry runs.
    Unavailable(String),
    /// It answered with something that is not one vector per text of the right size.
    Malformed(String),
}

impl fmt::Display for EmbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbedError::Unavailable(detail) => write!(f, "embedding model unavailable: {detail}"),
            EmbedError::Malformed(detail) => write!(f, "embedding model answered badly: {detail}"),
        }
    }
}

/// A sentence-embedding model: unit-length vectors, one per text, in order.
#[async_trait]
pub trait Embedder: Send + Sync {
    fn identity(&self) -> &ModelIdentity;
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// A small LRU of vectors keyed by the SHA-256 of their text, shared by the embedders.
#[derive(Debug)]
pub struct VectorCache {
    capacity: usize,
    tick: u64,
    entries: std::collections::HashMap<[u8; 32], (std::sync::Arc<Vec<f32>>, u64)>,
}

impl VectorCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            tick: 0,
            entries: std::collections::HashMap::new(),
        }
    }

    /// The key of `text`.
    pub fn key(text: &str) -> [u8; 32] {
        use sha2::Digest;
        sha2::Sha256::digest(text.as_bytes()).into()
    }

    pub fn get(&mut self, key: &[u8; 32]) -> Option<std::sync::Arc<Vec<f32>>> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(v, used)| {
            *used = tick;
            v.clone()
        })
    }

    pub fn put(&mut self, key: [u8; 32], vector: std::sync::Arc<Vec<f32>>) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            // Evicting scans, but only after a miss that just computed a vector (milliseconds).
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
            {
                self.entries.remove(&oldest);
            }
        }
        self.tick += 1;
        self.entries.insert(key, (vector, self.tick));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The example and negative vectors of one rule, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleVectors {
    pub examples: Vec<Vec<f32>>,
    pub negatives: Vec<Vec<f32>>,
}

/// How one rule scored against one request.
#[derive(Clone, Debug, PartialEq)]
pub struct SemanticScore {
    /// Index of the rule in its `RuleSet`.
    pub rule: usize,
    /// Best cosine similarity with an example, and that example's index.
    pub score: f32,
    pub example: usize,
    /// Best similarity with a negative, when the rule has negatives.
    pub negative: Option<(usize, f32)>,
    pub threshold: f32,
    pub margin: f32,
    pub matched: bool,
}

/// One indexed rule: its rows are `start .. start + examples + negatives`, examples first.
#[derive(Clone, Debug)]
struct IndexedRule {
    rule: usize,
    threshold: f32,
    margin: f32,
    start: usize,
    examples: usize,
    negatives: usize,
}

/// Every example vector of a caller's semantic rules, in one matrix.
///
/// Scoring scans an 8-bit copy of the matrix (a quarter of the memory traffic: 10,000 examples
/// of 384 values are 3.8 MB instead of 15 MB) to find each rule's best
/// example, then scores it exactly in f32; negatives (a handful per rule) are all scored
/// exactly. The reported scores are exact; the 8-bit scan can only pick, among examples within
/// about 0.01 of each other, a slightly lower one than the true best.
#[derive(Clone, Debug, Default)]
pub struct SemanticIndex {
    dimensions: usize,
    /// Row-major f32 values, `rows * dimensions`.
    matrix: Vec<f32>,
    /// The same rows quantized to i8, each with its scale (value = q * scale).
    quantized: Vec<i8>,
    scales: Vec<f32>,
    rules: Vec<IndexedRule>,
}

/// Symmetric 8-bit quantization of one vector: (values, scale).
fn quantize(v: &[f32], out: &mut Vec<i8>) -> f32 {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 && max.is_finite() {
        max / 127.0
    } else {
        1.0
    };
    #[allow(clippy::cast_possible_truncation)]
    out.extend(
        v.iter()
            .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8),
    );
    scale
}

/// The integer dot product of two equally long i8 vectors.
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let mut chunks_a = a.chunks_exact(16);
    let mut chunks_b = b.chunks_exact(16);
    for (ca, cb) in (&mut chunks_a).zip(&mut chunks_b) {
        for lane in 0..16 {
            acc[lane] += i32::from(ca[lane]) * i32::from(cb[lane]);
        }
    }
    let tail: i32 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    acc.iter().sum::<i32>() + tail
}

impl SemanticIndex {
    /// Builds the index from `(rule index, trigger, vectors)`. Vectors of the wrong size are
    /// left out (and the rule with them), so a model change can never compare unlike vectors.
    pub fn build<'a>(
        dimensions: usize,
        rules: impl IntoIterator<Item = (usize, &'a SemanticTrigger, &'a RuleVectors)>,
    ) -> Self {
        let mut index = SemanticIndex {
            dimensions,
            ..Default::default()
        };
        for (rule, trigger, vectors) in rules {
            let all_fit = vectors
                .examples
                .iter()
                .chain(&vectors.negatives)
                .all(|v| v.len() == dimensions);
            if !all_fit || vectors.examples.is_empty() || dimensions == 0 {
                continue;
            }
            let start = index.scales.len();
            for v in vectors.examples.iter().chain(&vectors.negatives) {
                index.matrix.extend_from_slice(v);
                let scale = quantize(v, &mut index.quantized);
                index.scales.push(scale);
            }
            index.rules.push(IndexedRule {
                rule,
                threshold: trigger.threshold.get(),
                margin: trigger.margin.get(),
                start,
                examples: vectors.examples.len(),
                negatives: vectors.negatives.len(),
            });
        }
        index
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// Vectors in the index (examples and negatives).
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    /// Whether `rule` has vectors here.
    pub fn contains(&self, rule: usize) -> bool {
        self.rules.iter().any(|r| r.rule == rule)
    }

    fn row(&self, row: usize) -> &[f32] {
        &self.matrix[row * self.dimensions..(row + 1) * self.dimensions]
    }

    /// The row of `rows` with the highest approximate similarity to the quantized query.
    fn best_row(&self, rows: std::ops::Range<usize>, query: &[i8]) -> Option<usize> {
        let d = self.dimensions;
        rows.map(|row| {
            let q = &self.quantized[row * d..(row + 1) * d];
            #[allow(clippy::cast_precision_loss)]
            let approx = dot_i8(q, query) as f32 * self.scales[row];
            (row, approx)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(row, _)| row)
    }

    /// Scores every indexed rule for which `wanted` holds against the query vector.
    pub fn score(&self, query: &[f32], wanted: impl Fn(usize) -> bool) -> Vec<SemanticScore> {
        if query.len() != self.dimensions || self.is_empty() {
            return Vec::new();
        }
        let mut quantized = Vec::with_capacity(self.dimensions);
        quantize(query, &mut quantized);
        self.rules
            .iter()
            .filter(|r| wanted(r.rule))
            .filter_map(|r| {
                let examples = r.start..r.start + r.examples;
                let negatives = examples.end..examples.end + r.negatives;
                let best = self.best_row(examples.clone(), &quantized)?;
                let score = dot(query, self.row(best));
                // Negatives are few: score them all exactly, so the margin is never judged
                // against anything but the truly closest one.
                let negative = negatives
                    .clone()
                    .map(|row| (row - negatives.start, dot(query, self.row(row))))
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                let beats_negatives = negative.is_none_or(|(_, n)| score - n >= r.margin);
                Some(SemanticScore {
                    rule: r.rule,
                    score,
                    example: best - examples.start,
                    negative,
                    threshold: r.threshold,
                    margin: r.margin,
                    matched: score >= r.threshold && beats_negatives,
                })
            })
            .collect()
    }
}

/// The dot product of two equally long vectors (cosine similarity for unit vectors). Eight
/// independent accumulators let the compiler keep it in vector registers.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        for lane in 0..8 {
            acc[lane] += a[c * 8 + lane] * b[c * 8 + lane];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for i in chunks * 8..n {
        sum += a[i] * b[i];
    }
    sum
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 && norm.is_finite() {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Unit;

    fn trigger(threshold: f32, margin: f32) -> SemanticTrigger {
        SemanticTrigger {
            examples: vec!["a".into()],
            negatives: vec![],
            threshold: Unit(threshold),
            margin: Unit(margin),
        }
    }

    fn unit(values: &[f32]) -> Vec<f32> {
        let mut v = values.to_vec();
        normalize(&mut v);
        v
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_best_example_must_reach_the_threshold_and_beat_negatives_by_the_margin() {
        let t = trigger(0.5, 0.1);
        let close = RuleVectors {
            examples: vec![unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0])],
            negatives: vec![],
        };
        let with_negative = RuleVectors {
            examples: vec![unit(&[1.0, 0.0, 0.0])],
            negatives: vec![unit(&[1.0, 0.2, 0.0])],
        };
        let index = SemanticIndex::build(3, [(0, &t, &close), (1, &t, &with_negative)]);
        assert_eq!(index.len(), 4);
        let scores = index.score(&unit(&[0.1, 1.0, 0.0]), |_| true);
        assert_eq!(scores[0].rule, 0);
        assert_eq!(scores[0].example, 1, "the closer example wins");
        assert!(scores[0].matched && scores[0].score > 0.99);
        // Rule 1: near its example (0.1) is far below the threshold.
        assert!(!scores[1].matched);
        // Close to both the example and the negative: the negative wins.
        let scores = index.score(&unit(&[1.0, 0.25, 0.0]), |r| r == 1);
        assert_eq!(scores.len(), 1);
        let s = &scores[0];
        assert!(s.score > 0.9 && s.negative.is_some_and(|(_, n)| n > s.score));
        assert!(!s.matched);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_eight_bit_scan_reports_exact_scores_of_near_best_examples() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            #[allow(clippy::cast_precision_loss)]
            let x = (seed >> 40) as f32 / (1u64 << 24) as f32;
            x - 0.5
        };
        let mut vector = || {
            let mut v: Vec<f32> = (0..384).map(|_| random()).collect();
            normalize(&mut v);
            v
        };
        let t = trigger(0.0, 0.0);
        let rules: Vec<RuleVectors> = (0..50)
            .map(|_| RuleVectors {
                examples: (0..20).map(|_| vector()).collect(),
                negatives: (0..3).map(|_| vector()).collect(),
            })
            .collect();
        let index = SemanticIndex::build(384, rules.iter().enumerate().map(|(i, v)| (i, &t, v)));
        for _ in 0..20 {
            let query = vector();
            let scores = index.score(&query, |_| true);
            assert_eq!(scores.len(), 50);
            for s in scores {
                let vectors = &rules[s.rule];
                let exact_best = vectors
                    .examples
                    .iter()
                    .map(|e| dot(&query, e))
                    .fold(f32::MIN, f32::max);
                assert_eq!(s.score, dot(&query, &vectors.examples[s.example]));
                assert!(exact_best - s.score < 0.01, "{exact_best} vs {}", s.score);
                let (n, negative) = s.negative.unwrap();
                assert_eq!(negative, dot(&query, &vectors.negatives[n]));
            }
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn vectors_of_another_size_are_never_compared() {
        let t = trigger(0.0, 0.0);
        let wrong = RuleVectors {
            examples: vec![vec![1.0, 0.0]],
            negatives: vec![],
        };
        let index = SemanticIndex::build(3, [(0, &t, &wrong)]);
        assert!(index.is_empty() && !index.contains(0));
        assert!(index.score(&[1.0, 0.0], |_| true).is_empty());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_cache_evicts_the_least_recently_used() {
        let mut cache = VectorCache::new(2);
        let key = VectorCache::key;
        let v = |x: f32| std::sync::Arc::new(vec![x]);
        cache.put(key("a"), v(1.0));
        cache.put(key("b"), v(2.0));
        assert!(cache.get(&key("a")).is_some());
        cache.put(key("c"), v(3.0));
        assert!(cache.get(&key("b")).is_none(), "b was least recently used");
        assert_eq!(cache.get(&key("a")).map(|v| v[0]), Some(1.0));
        assert_eq!(cache.get(&key("c")).map(|v| v[0]), Some(3.0));
        assert_eq!(cache.len(), 2);
        let mut off = VectorCache::new(0);
        off.put(key("a"), v(1.0));
        assert!(off.is_empty());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn dot_and_normalize() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let expected: f32 = a.iter().map(|x| x * x).sum();
        assert_eq!(dot(&a, &a), expected);
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut zero = vec![0.0, 0.0];
        normalize(&mut zero);
        assert_eq!(zero, [0.0, 0.0]);
    }
}
