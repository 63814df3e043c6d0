//! The single-dispatch client of one typed-conversation attempt: one provider, one
//! configuration, one non-streaming request, never retried, never redirected.
//!
//! The core builds the exact request bytes ([`herma_core::conversation::providers::encode`])
//! and reads the reply ([`herma_core::conversation::providers::decode`]); this is the HTTP
//! around them. The governed engine sees the reply as [`ModelEvent`]s; the attempt's exact
//! outcome (uncertain, invalid, rejected with its diagnostics) is kept in the client's
//! [`DispatchReport`] for the turn's attempt record, since the engine's view of a failed call is
//! coarser.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use herma_core::call::{ModelEvent, ModelRequest, Unsupported};
use herma_core::conversation::config::ProviderConfig;
use herma_core::conversation::cooldown;
use herma_core::conversation::providers::{
    self, AttemptOutcome, CredentialStyle, MAX_RESPONSE_BYTES, ProviderDiagnostics, Reply,
    TurnRequest,
};
use herma_core::upstream::Provider;

use crate::single::{EventStream, ModelClient, ProviderError};
use crate::{Upstream, UpstreamError, UpstreamRequest};

/// What one dispatch found, for the attempt record.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchReport {
    pub outcome: AttemptOutcome,
    /// The provider's HTTP status, when it answered.
    pub http_status: Option<u16>,
    pub diagnostics: Option<ProviderDiagnostics>,
    pub retry_after_seconds: Option<u64>,
    /// The reply's cooldown guidance headers (`Retry-After`, reset headers), for shared health
    /// only: never recorded as text.
    pub guidance: Vec<(String, String)>,
    pub reported_model: Option<String>,
    pub reported_provider: Option<String>,
    /// Why the outcome is uncertain or invalid, as a fixed phrase.
    pub reason: Option<String>,
}

impl DispatchReport {
    fn new(outcome: AttemptOutcome, http_status: Option<u16>) -> Self {
        Self {
            outcome,
            http_status,
            diagnostics: None,
            retry_after_seconds: None,
            guidance: Vec::new(),
            reported_model: None,
            reported_provider: None,
            reason: None,
        }
    }
}

/// One attempt's client.
pub struct ConversationClient {
    config: ProviderConfig,
    http: Arc<dyn Upstream>,
    report: Mutex<Option<DispatchReport>>,
}

impl std::fmt::Debug for ConversationClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversationClient")
            .field("provider", &self.config.provider)
            .field("destination", &self.config.destination)
            .finish_non_exhaustive()
    }
}

impl ConversationClient {
    /// `None` when the configuration has no operator key: that attempt is recorded as
    /// `provider_not_configured` and never sent.
    pub fn new(config: ProviderConfig, http: Arc<dyn Upstream>) -> Option<Arc<Self>> {
        config.api_key.as_ref()?;
        Some(Arc::new(Self {
            config,
            http,
            report: Mutex::new(None),
        }))
    }

    /// What the dispatch found; `None` before it ran.
    pub fn report(&self) -> Option<DispatchReport> {
        self.report.lock().ok().and_then(|r| r.clone())
    }

    fn set(&self, report: DispatchReport) {
        if let Ok(mut slot) = self.report.lock() {
            *slot = Some(report);
        }
    }

    /// The name a governed call records.
    pub fn name(provider: Provider) -> &'static str {
        match provider {
            Provider::Meta => "meta_chat",
            Provider::Ollama => "ollama_chat",
            Provider::Openai => "openai_responses",
            Provider::Anthropic => "anthropic_messages",
            Provider::Openrouter => "openrouter_chat",
        }
    }

    fn turn_request(request: &ModelRequest) -> TurnRequest {
        TurnRequest {
            system: request.system.clone().unwrap_or_default(),
            messages: request.messages.clone(),
            tools: request.tools.clone(),
        }
    }

    fn failed(&self, report: DispatchReport, error: ProviderError) -> EventStream {
        self.set(report);
        Box::pin(futures_util::stream::iter([Err(error)]))
    }
}

#[async_trait]
impl ModelClient for ConversationClient {
    fn provider_name(&self) -> &'static str {
        Self::name(self.config.provider)
    }

    fn attempts_per_dispatch(&self) -> u32 {
        1
    }

    fn validate(&self, request: &ModelRequest) -> Result<(), Unsupported> {
        let unsupported = |field: &str, reason: &str| Unsupported {
            field: field.to_owned(),
            reason: reason.to_owned(),
        };
        if request.controls.model != self.config.model {
            return Err(unsupported(
                "controls.model",
                "must be the configured model",
            ));
        }
        if u64::from(request.controls.max_tokens) != self.config.allowance {
            return Err(unsupported(
                "controls.max_tokens",
                "must be the configured allowance",
            ));
        }
        if request.output.is_some() || request.controls.temperature.is_some() {
            return Err(unsupported(
                "controls",
                "a turn sends no output schema and no temperature of its own",
            ));
        }
        Ok(())
    }

    async fn dispatch(&self, request: &ModelRequest) -> Result<EventStream, ProviderError> {
        let encoded = providers::encode(&self.config, &Self::turn_request(request));
        let Some(key) = &self.config.api_key else {
            return Err(ProviderError::Transport("no operator key".into()));
        };
        let (name, credential) = match encoded.credential {
            CredentialStyle::Bearer => ("authorization", format!("Bearer {}", key.expose())),
            CredentialStyle::XApiKey => ("x-api-key", key.expose().to_owned()),
        };
        let sent = async {
            let mut headers = crate::header_map(encoded.headers.iter().map(|(n, v)| (*n, v)))?;
            crate::append_header(&mut headers, name, credential)?;
            if let Some(call) = &request.call {
                crate::append_header(&mut headers, "x-herma-call-id", &call.call_id)?;
                crate::append_header(&mut headers, "x-herma-attempt", call.attempt.to_string())?;
            }
            let upstream = UpstreamRequest {
                method: "POST".to_owned(),
                url: encoded.url,
                headers,
                body: Bytes::from(encoded.body),
            };
            self.http.send(upstream).await
        }
        .await;
        let response = match sent {
            Ok(response) => response,
            Err(UpstreamError::Redirect(status)) => {
                let mut report =
                    DispatchReport::new(AttemptOutcome::ProviderRejected, Some(status));
                report.reason =
                    Some("the provider answered with a redirect, which is never followed".into());
                return Ok(self.failed(report, ProviderError::Rejected { status }));
            }
            Err(
                UpstreamError::Connect(_)
                | UpstreamError::Request(_)
                | UpstreamError::LoopbackPromiseBroken(_),
            ) => {
                // Nothing reached the provider.
                let mut report = DispatchReport::new(AttemptOutcome::ProviderUnavailable, None);
                report.reason = Some("the provider could not be reached".into());
                self.set(report);
                return Err(ProviderError::Transport(
                    "the provider could not be reached".into(),
                ));
            }
            Err(UpstreamError::Timeout(_) | UpstreamError::Body(_)) => {
                let mut report =
                    DispatchReport::new(AttemptOutcome::ProviderOutcomeUncertain, None);
                report.reason = Some("the provider did not answer in time".into());
                return Ok(self.failed(
                    report,
                    ProviderError::Transport("the provider did not answer in time".into()),
                ));
            }
        };
        let status = response.status;
        let header_pairs: Vec<(String, String)> = response
            .headers
            .iter()
            .filter_map(|(n, v)| {
                let v = std::str::from_utf8(v.as_bytes()).ok()?;
                Some((n.as_str().to_owned(), v.to_owned()))
            })
            .collect();
        // At most one byte past the limit is read: enough to know it was passed.
        let mut body = Vec::new();
        let mut chunks = response.body;
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(chunk) => {
                    let room = (MAX_RESPONSE_BYTES + 1).saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() > MAX_RESPONSE_BYTES {
                        break;
                    }
                }
                Err(_) => {
                    let mut report =
                        DispatchReport::new(AttemptOutcome::ProviderOutcomeUncertain, Some(status));
                    report.reason = Some("the provider's answer broke off".into());
                    return Ok(self.failed(
                        report,
                        ProviderError::Transport("the provider's answer broke off".into()),
                    ));
                }
            }
        }
        match providers::decode(self.config.provider, status, &header_pairs, &body) {
            Reply::Completed {
                events,
                reported_model,
                reported_provider,
            } => {
                let mut report = DispatchReport::new(AttemptOutcome::Completed, Some(status));
                report.reported_model = reported_model;
                report.reported_provider = reported_provider;
                self.set(report);
                let items: Vec<Result<ModelEvent, ProviderError>> =
                    events.into_iter().map(Ok).collect();
                Ok(Box::pin(futures_util::stream::iter(items)))
            }
            Reply::Uncertain { reason } => {
                let mut report =
                    DispatchReport::new(AttemptOutcome::ProviderOutcomeUncertain, Some(status));
                report.reason = Some(reason.clone());
                Ok(self.failed(report, ProviderError::Protocol(reason)))
            }
            Reply::Invalid { reason } => {
                let mut report =
                    DispatchReport::new(AttemptOutcome::ProviderInvalidResponse, Some(status));
                report.reason = Some(reason.clone());
                Ok(self.failed(report, ProviderError::Protocol(reason)))
            }
            Reply::Rejected {
                status,
                outcome,
                diagnostics,
                retry_after_seconds,
                reference,
            } => {
                let mut report = DispatchReport::new(outcome, Some(status));
                report.diagnostics = Some(diagnostics);
                report.retry_after_seconds = retry_after_seconds;
                report.guidance = header_pairs
                    .iter()
                    .filter(|(name, _)| cooldown::is_guidance_header(name))
                    .cloned()
                    .collect();
                self.set(report);
                let items: Vec<Result<ModelEvent, ProviderError>> = reference
                    .map(|r| Ok(ModelEvent::Reference(r)))
                    .into_iter()
                    .chain([Err(ProviderError::Rejected { status })])
                    .collect();
                Ok(Box::pin(futures_util::stream::iter(items)))
            }
        }
    }
}
