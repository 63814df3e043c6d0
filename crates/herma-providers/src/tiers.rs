//! Remote models for tiers 2 and 3: an embedding endpoint and a classifier, each spoken as
//! OpenAI-compatible (`/embeddings`, `/chat/completions`) or Ollama (`/api/embed`, `/api/chat`).
//! One request per call, no redirects, no retries, bounded waits and body sizes.
//!
//! Both speak through the [`Upstream`] port, so they run wherever one exists: natively over
//! their own [`crate::HttpUpstream`] (`new`, `connect`), at the edge over the platform's fetch
//! (`over`, `connect_over`). Each wait (connecting, the response headers, each body chunk) is
//! the upstream's bound; the whole call's is the caller's: `herma_app::tiers` puts one around
//! every classifier call and every request's embedding on the proxy path (the start-up probe
//! and the example vectors of rules are bounded per wait only).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use herma_core::micromodel::{Classifier, ClassifierError, ClassifierRequest};
use herma_core::semantic::{EmbedError, Embedder, ModelIdentity, VectorCache, normalize};
use herma_core::settings::{RemoteModel, RemoteProtocol};
use serde_json::{Value, json};

use crate::{Upstream, UpstreamError, UpstreamRequest, phrase};

/// The largest answer read from a tier model (a batch of embeddings is the big one).
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// A native client with `timeout` for connecting, the response headers and each body chunk.
#[cfg(not(target_arch = "wasm32"))]
fn native(timeout: std::time::Duration) -> Result<Arc<dyn Upstream>, String> {
    crate::HttpUpstream::new(timeout, timeout, timeout)
        .map(|http| Arc::new(http) as Arc<dyn Upstream>)
        .map_err(|e| e.to_string())
}

/// What one POST of a JSON body answered.
struct Answer {
    status: u16,
    headers: crate::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        crate::header_text(&self.headers, name)
    }
}

/// POSTs `body` as JSON to `url` (with `key` as a bearer token) and reads the whole answer.
async fn post_json(
    http: &dyn Upstream,
    url: &str,
    key: Option<&str>,
    body: &Value,
) -> Result<Answer, UpstreamError> {
    let mut headers = vec![
        ("content-type".to_owned(), b"application/json".to_vec()),
        ("accept".to_owned(), b"application/json".to_vec()),
    ];
    if let Some(key) = key {
        headers.push((
            "authorization".to_owned(),
            format!("Bearer {key}").into_bytes(),
        ));
    }
    let response = http
        .send(UpstreamRequest {
            method: "POST".to_owned(),
            url: url.to_owned(),
            headers: crate::header_map(headers)?,
            body: Bytes::from(body.to_string()),
        })
        .await?;
    let status = response.status;
    let headers = response.headers.clone();
    let body = crate::read_limited(response, MAX_ANSWER_BYTES).await?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// The endpoint part of a model identity: host, port and path (two endpoints on one host
/// are different models).
fn endpoint_of(base: &str) -> String {
    base.trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// The tier-3 classifier over HTTP.
pub struct HttpClassifier {
    http: Arc<dyn Upstream>,
    endpoint: String,
    protocol: RemoteProtocol,
    model: String,
    key: Option<String>,
}

impl std::fmt::Debug for HttpClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClassifier")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl HttpClassifier {
    /// The classifier over its own HTTP client, each wait bounded by `timeout`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(settings: &RemoteModel, timeout: std::time::Duration) -> Result<Self, String> {
        Ok(Self::over(native(timeout)?, settings))
    }

    /// The classifier over `http`.
    pub fn over(http: Arc<dyn Upstream>, settings: &RemoteModel) -> Self {
        let endpoint = match settings.protocol {
            RemoteProtocol::OpenAi => format!("{}/chat/completions", settings.base),
            RemoteProtocol::Ollama => format!("{}/api/chat", settings.base),
        };
        Self {
            http,
            endpoint,
            protocol: settings.protocol,
            model: settings.model.clone(),
            key: settings.key.as_ref().map(|k| k.expose().to_owned()),
        }
    }
}

#[async_trait]
impl Classifier for HttpClassifier {
    fn default_model(&self) -> &str {
        &self.model
    }

    async fn ask(&self, request: &ClassifierRequest) -> Result<String, ClassifierError> {
        let messages = json!([
            {"role": "system", "content": request.system},
            {"role": "user", "content": request.user}
        ]);
        let body = match self.protocol {
            RemoteProtocol::OpenAi => json!({
                "model": request.model,
                "messages": messages,
                "temperature": 0,
                "max_tokens": 50,
                "response_format": {"type": "json_object"},
                "stream": false
            }),
            RemoteProtocol::Ollama => json!({
                "model": request.model,
                "messages": messages,
                "stream": false,
                "format": "json",
                "options": {"temperature": 0}
            }),
        };
        let answer = post_json(
            self.http.as_ref(),
            &self.endpoint,
            self.key.as_deref(),
            &body,
        )
        .await
        .map_err(|e| match e {
            UpstreamError::Timeout(_) => ClassifierError::Timeout,
            other => ClassifierError::Unreachable(phrase(&other)),
        })?;
        if answer.status == 429 {
            let retry_after_seconds = answer
                .header("retry-after")
                .and_then(|v| v.trim().parse().ok());
            return Err(ClassifierError::RateLimited {
                retry_after_seconds,
            });
        }
        if !(200..300).contains(&answer.status) {
            return Err(ClassifierError::Status(answer.status));
        }
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        // The decision is the assistant's text; an envelope without one is passed on as it is,
        // so the typed-decision check reports it as malformed.
        let content = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
            let content = match self.protocol {
                RemoteProtocol::OpenAi => v.pointer("/choices/0/message/content").cloned(),
                RemoteProtocol::Ollama => v.pointer("/message/content").cloned(),
            };
            content.and_then(|c| c.as_str().map(str::to_owned))
        });
        Ok(content.unwrap_or(text))
    }
}

/// A remote embedding endpoint, with the same digest-keyed cache as the local model.
pub struct RemoteEmbedder {
    http: Arc<dyn Upstream>,
    endpoint: String,
    protocol: RemoteProtocol,
    model: String,
    key: Option<String>,
    identity: ModelIdentity,
    cache: Mutex<VectorCache>,
}

impl std::fmt::Debug for RemoteEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEmbedder")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl RemoteEmbedder {
    /// Connects over its own HTTP client, each wait bounded by `timeout`: one probe embedding
    /// tells the model's dimensions.
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn connect(
        settings: &RemoteModel,
        timeout: std::time::Duration,
        cache_entries: usize,
    ) -> Result<Self, EmbedError> {
        let http = native(timeout).map_err(EmbedError::Unavailable)?;
        Self::connect_over(http, settings, cache_entries).await
    }

    /// Connects over `http`: one probe embedding tells the model's dimensions.
    pub async fn connect_over(
        http: Arc<dyn Upstream>,
        settings: &RemoteModel,
        cache_entries: usize,
    ) -> Result<Self, EmbedError> {
        let endpoint = match settings.protocol {
            RemoteProtocol::OpenAi => format!("{}/embeddings", settings.base),
            RemoteProtocol::Ollama => format!("{}/api/embed", settings.base),
        };
        let mut embedder = Self {
            http,
            endpoint,
            protocol: settings.protocol,
            model: settings.model.clone(),
            key: settings.key.as_ref().map(|k| k.expose().to_owned()),
            identity: ModelIdentity {
                id: format!(
                    "{}:{}@{}",
                    settings.protocol.as_str(),
                    settings.model,
                    endpoint_of(&settings.base)
                ),
                dimensions: 0,
                remote: true,
            },
            cache: Mutex::new(VectorCache::new(cache_entries)),
        };
        let probe = embedder.call(&["hello".to_owned()]).await?;
        let dimensions = probe.first().map_or(0, Vec::len);
        if dimensions == 0 {
            return Err(EmbedError::Malformed(
                "the probe returned an empty vector".into(),
            ));
        }
        embedder.identity.dimensions = dimensions;
        Ok(embedder)
    }

    async fn call(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = json!({"model": self.model, "input": texts});
        let answer = post_json(
            self.http.as_ref(),
            &self.endpoint,
            self.key.as_deref(),
            &body,
        )
        .await
        .map_err(|e| EmbedError::Unavailable(phrase(&e)))?;
        if !(200..300).contains(&answer.status) {
            return Err(EmbedError::Unavailable(format!("HTTP {}", answer.status)));
        }
        let value: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| EmbedError::Malformed(format!("the answer is not JSON: {e}")))?;
        let rows: Vec<&Value> = match self.protocol {
            RemoteProtocol::OpenAi => {
                let mut data: Vec<&Value> =
                    value["data"].as_array().into_iter().flatten().collect();
                data.sort_by_key(|d| d["index"].as_u64().unwrap_or(u64::MAX));
                data.into_iter().map(|d| &d["embedding"]).collect()
            }
            RemoteProtocol::Ollama => value["embeddings"]
                .as_array()
                .into_iter()
                .flatten()
                .collect(),
        };
        if rows.len() != texts.len() {
            return Err(EmbedError::Malformed(format!(
                "{} vectors for {} texts",
                rows.len(),
                texts.len()
            )));
        }
        rows.into_iter()
            .map(|row| {
                let mut v: Vec<f32> = row
                    .as_array()
                    .ok_or_else(|| EmbedError::Malformed("a vector is not a list".into()))?
                    .iter()
                    .map(|x| x.as_f64().map(|x| x as f32))
                    .collect::<Option<_>>()
                    .ok_or_else(|| EmbedError::Malformed("a vector holds a non-number".into()))?;
                if v.iter().any(|x| !x.is_finite()) {
                    return Err(EmbedError::Malformed(
                        "a vector holds a non-finite value".into(),
                    ));
                }
                normalize(&mut v);
                Ok(v)
            })
            .collect()
    }
}

#[async_trait]
impl Embedder for RemoteEmbedder {
    fn identity(&self) -> &ModelIdentity {
        &self.identity
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let keys: Vec<[u8; 32]> = texts.iter().map(|t| VectorCache::key(t)).collect();
        let mut out: Vec<Option<Arc<Vec<f32>>>> = match self.cache.lock() {
            Ok(mut cache) => keys.iter().map(|k| cache.get(k)).collect(),
            Err(_) => vec![None; texts.len()],
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        if !missing.is_empty() {
            let asked: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let vectors = self.call(&asked).await?;
            for (&i, v) in missing.iter().zip(vectors) {
                if v.len() != self.identity.dimensions {
                    return Err(EmbedError::Malformed(format!(
                        "a vector of {} values, the model gives {}",
                        v.len(),
                        self.identity.dimensions
                    )));
                }
                let v = Arc::new(v);
                if let Ok(mut cache) = self.cache.lock() {
                    cache.put(keys[i], v.clone());
                }
                out[i] = Some(v);
            }
        }
        Ok(out
            .into_iter()
            .map(|v| v.map(|v| v.as_ref().clone()).unwrap_or_default())
            .collect())
    }
}
