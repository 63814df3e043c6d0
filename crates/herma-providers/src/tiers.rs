//! Remote models for tiers 2 and 3: an embedding endpoint and a classifier, each spoken as
//! OpenAI-compatible (`/embeddings`, `/chat/completions`) or Ollama (`/api/embed`, `/api/chat`).
//! One request per call, no redirects, no retries, a hard timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use herma_core::micromodel::{Classifier, ClassifierError, ClassifierRequest};
use herma_core::semantic::{EmbedError, Embedder, ModelIdentity, VectorCache, normalize};
use herma_core::settings::{RemoteModel, RemoteProtocol};
use serde_json::{Value, json};

fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    crate::client_builder(crate::dns::GuardedResolver::system())
        .timeout(timeout)
        .connect_timeout(timeout)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())
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
    client: reqwest::Client,
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
    pub fn new(settings: &RemoteModel, timeout: Duration) -> Result<Self, String> {
        let endpoint = match settings.protocol {
            RemoteProtocol::OpenAi => format!("{}/chat/completions", settings.base),
            RemoteProtocol::Ollama => format!("{}/api/chat", settings.base),
        };
        Ok(Self {
            client: client(timeout)?,
            endpoint,
            protocol: settings.protocol,
            model: settings.model.clone(),
            key: settings.key.as_ref().map(|k| k.expose().to_owned()),
        })
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
        let mut builder = self.client.post(&self.endpoint).json(&body);
        if let Some(key) = &self.key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(|e| {
            if e.is_timeout() {
                ClassifierError::Timeout
            } else {
                ClassifierError::Unreachable(crate::describe(&e))
            }
        })?;
        let status = response.status().as_u16();
        if status == 429 {
            let retry_after_seconds = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            return Err(ClassifierError::RateLimited {
                retry_after_seconds,
            });
        }
        if !(200..300).contains(&status) {
            return Err(ClassifierError::Status(status));
        }
        let text = response.text().await.map_err(|e| {
            if e.is_timeout() {
                ClassifierError::Timeout
            } else {
                ClassifierError::Unreachable(crate::describe(&e))
            }
        })?;
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
    client: reqwest::Client,
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
    /// Connects: one probe embedding tells the model's dimensions.
    pub async fn connect(
        settings: &RemoteModel,
        timeout: Duration,
        cache_entries: usize,
    ) -> Result<Self, EmbedError> {
        let endpoint = match settings.protocol {
            RemoteProtocol::OpenAi => format!("{}/embeddings", settings.base),
            RemoteProtocol::Ollama => format!("{}/api/embed", settings.base),
        };
        let mut embedder = Self {
            client: client(timeout).map_err(EmbedError::Unavailable)?,
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
        let mut builder = self.client.post(&self.endpoint).json(&body);
        if let Some(key) = &self.key {
            builder = builder.bearer_auth(key);
        }
        let response = builder
            .send()
            .await
            .map_err(|e| EmbedError::Unavailable(crate::describe(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(EmbedError::Unavailable(format!("HTTP {}", status.as_u16())));
        }
        let value: Value = response
            .json()
            .await
            .map_err(|e| EmbedError::Malformed(crate::describe(&e)))?;
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
