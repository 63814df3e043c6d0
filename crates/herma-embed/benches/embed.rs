//! Tier 2's costs on one core: embedding 8, 32 and 128 tokens with the f32 BERT of
//! candle-transformers herma-embed used before (`before-f32`), its own f32 encoder (`f32`, the
//! same vectors) and its 8-bit one (`int8`), all in the same run; a cache hit; scoring a request
//! against 10,000 rule examples; loading the model. Needs HERMA_EMBED_MODEL_DIR.
//!
//! `RAYON_NUM_THREADS=1 taskset -c 1 cargo bench -p herma-embed --bench embed`

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};
use herma_core::model::{SemanticTrigger, Unit};
use herma_core::semantic::{Embedder, RuleVectors, SemanticIndex, normalize};
use herma_embed::{LocalEmbedder, Options, Precision};
use tokenizers::Tokenizer;

fn model_dir() -> PathBuf {
    #[allow(clippy::disallowed_methods)]
    PathBuf::from(
        std::env::var("HERMA_EMBED_MODEL_DIR").expect("HERMA_EMBED_MODEL_DIR names the model"),
    )
}

/// Resident memory of this process, in MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A text of exactly `tokens` tokens (with [CLS] and [SEP]).
fn text_of(model: &LocalEmbedder, tokens: usize) -> String {
    let mut words = Vec::new();
    let vocabulary = [
        "deploy",
        "the",
        "billing",
        "service",
        "to",
        "production",
        "now",
        "please",
    ];
    while model.token_count(&words.join(" ")) < tokens {
        words.push(vocabulary[words.len() % vocabulary.len()]);
    }
    let text = words.join(" ");
    assert_eq!(model.token_count(&text), tokens);
    text
}

/// herma-embed's embedding before it had an encoder of its own: candle-transformers' BERT,
/// as it was called.
struct Before {
    bert: BertModel,
    tokenizer: Tokenizer,
}

impl Before {
    fn load(dir: &Path) -> Self {
        let config: Config =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu).unwrap();
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        tokenizer.with_padding(None);
        Self {
            bert: BertModel::load(vb, &config).unwrap(),
            tokenizer,
        }
    }

    fn embed(&self, text: &str) -> Vec<f32> {
        let encoding = self.tokenizer.encode(text, true).unwrap();
        let ids = Tensor::new(encoding.get_ids(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let types = ids.zeros_like().unwrap();
        let mask = Tensor::new(encoding.get_attention_mask(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let hidden = self.bert.forward(&ids, &types, Some(&mask)).unwrap();
        let tokens = hidden.dim(1).unwrap();
        let mean = (hidden.sum(1).unwrap() / tokens as f64).unwrap();
        let mut vector = mean.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
        normalize(&mut vector);
        vector
    }
}

fn load(precision: Precision) -> LocalEmbedder {
    let before = rss_mib();
    let started = Instant::now();
    let model = LocalEmbedder::load(
        &model_dir(),
        &Options {
            window_tokens: 256,
            precision,
            ..Options::default()
        },
    )
    .expect("the model loads");
    println!(
        "model load ({precision:?}): {:.0} ms (including one probe run), resident memory +{:.0} MiB, {} parameters, {}",
        started.elapsed().as_secs_f64() * 1000.0,
        rss_mib() - before,
        model.report().parameters,
        model.report().identity.id,
    );
    model
}

fn embedding(c: &mut Criterion) {
    let f32_model = load(Precision::F32);
    let int8_model = load(Precision::Int8);
    let before = Before::load(&model_dir());

    let mut group = c.benchmark_group("embed");
    for tokens in [8, 32, 128] {
        let text = text_of(&f32_model, tokens);
        assert_eq!(
            before.embed(&text),
            f32_model.embed_blocking(&text).unwrap(),
            "herma-embed's f32 encoder computes candle-transformers' vectors"
        );
        group.bench_with_input(BenchmarkId::new("before-f32", tokens), &text, |b, text| {
            b.iter(|| before.embed(black_box(text)))
        });
        group.bench_with_input(BenchmarkId::new("f32", tokens), &text, |b, text| {
            b.iter(|| f32_model.embed_blocking(black_box(text)).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("int8", tokens), &text, |b, text| {
            b.iter(|| int8_model.embed_blocking(black_box(text)).unwrap())
        });
    }
    group.finish();

    let model = int8_model;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let text = vec!["please deploy the billing service".to_owned()];
    runtime.block_on(model.embed(&text)).unwrap();
    c.bench_function("embed/cache hit", |b| {
        b.iter(|| runtime.block_on(model.embed(black_box(&text))).unwrap())
    });

    // 10,000 examples: 500 rules of 20 examples, random unit vectors.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut vector = || {
        let mut v: Vec<f32> = (0..384).map(|_| random()).collect();
        normalize(&mut v);
        v
    };
    let trigger = SemanticTrigger {
        examples: vec!["x".into()],
        negatives: vec![],
        threshold: Unit(0.3),
        margin: Unit(0.05),
    };
    let rules: Vec<RuleVectors> = (0..500)
        .map(|_| RuleVectors {
            examples: (0..20).map(|_| vector()).collect(),
            negatives: vec![],
        })
        .collect();
    let index = SemanticIndex::build(384, rules.iter().enumerate().map(|(i, v)| (i, &trigger, v)));
    assert_eq!(index.len(), 10_000);
    let query = vector();
    c.bench_function("nearest example over 10,000", |b| {
        b.iter(|| index.score(black_box(&query), |_| true))
    });
}

criterion_group!(benches, embedding);
criterion_main!(benches);
