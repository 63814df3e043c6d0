//! The proxy pipeline: read the envelope, refuse contributor-tier models, evaluate the caller's
//! rules, apply `once_per_conversation`, then answer directly or shim and forward — streaming
//! the upstream's answer back chunk by chunk — and seal a receipt off the request path.
//!
//! Layout: this module is the request's way through ([`App::proxy`]) and to the upstream;
//! [`plan`] decides what to do (shared with dry runs); [`observed`] relays the answer and seals
//! the receipt; [`ids`] mints receipt and protocol ids.

mod ids;
mod observed;
mod plan;

pub use plan::{Claims, Plan, PlannedAction};

use std::sync::Arc;

use web_time::Instant;

use bytes::Bytes;
use herma_core::contributor::refuse_contributor_model;
use herma_core::evaluation::Mode;
use herma_core::gate::KeyPrincipal;
use herma_core::memory::project_tag;
use herma_core::model::{OutcomeKind, ReceiptAction, ReceiptBody, Timings};
use herma_core::upstream::{
    self, UpstreamAsk, UpstreamTarget, connection_tokens, forward_request_header,
    relay_response_header,
};
use herma_core::wire::answer::StreamText;
use herma_core::wire::direct::DirectAnswer;
use herma_core::wire::usage::UsageObserver;
use herma_core::wire::{ConversationSource, Envelope, HeaderFacts, Protocol, SESSION_HEADERS};
use herma_core::{CallerScope, Problem, ProblemCode};
use herma_providers::{
    BodyStream, HeaderMap, HeaderName, HeaderValue, UpstreamError, UpstreamRequest,
};

use crate::App;
use crate::memory::{MAX_CAPTURED_RESPONSE, MAX_RESPONSE_TEXT, TurnAnswer, TurnRecord};
use observed::{ObservedBody, elapsed_micros};

/// Room in a forwarded request's and a relayed response's header maps for the headers added
/// after they are built — the credential and the HTTP client's own (`accept`, the body's
/// length) on the way up; the receipt id, the request id and the edge's security headers on
/// the way back — so that neither map is regrown (a regrowth rehashes every header, about 600
/// instructions).
const ROOM_FOR_ADDED_HEADERS: usize = 8;

/// Names the project a request belongs to (entity memory is kept per project).
pub const PROJECT_HEADER: &str = "x-herma-project";
const PROJECT: HeaderName = HeaderName::from_static(PROJECT_HEADER);

/// What a proxied route asks for.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyRoute {
    /// One of the three protocols: rules, shims, direct answers, receipts.
    Protocol(Protocol),
    /// Forwarded as it is (`/v1/messages/count_tokens`, `/v1/models`), in this protocol's
    /// credential style.
    Passthrough(Protocol),
}

pub struct ProxyRequest {
    pub principal: Arc<KeyPrincipal>,
    pub route: ProxyRoute,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub received: Instant,
}

pub enum ProxyReply {
    /// Herma answered; `streaming` tells the transport to send `text/event-stream`.
    Direct {
        receipt_id: String,
        streaming: bool,
        body: Bytes,
    },
    /// The upstream's answer, relayed as it arrives.
    Upstream {
        receipt_id: Option<String>,
        /// Forwarded or shimmed (passthrough routes: forwarded).
        action: ReceiptAction,
        /// Microseconds from receiving the request to handing it to the upstream: Herma's own
        /// share of the latency.
        added_micros: u64,
        status: u16,
        headers: HeaderMap,
        body: BodyStream,
    },
}

/// A request Herma could not complete, and its receipt when one was written.
#[derive(Debug)]
pub struct ProxyFailure {
    pub problem: Problem,
    pub receipt_id: Option<String>,
}

impl From<Problem> for ProxyFailure {
    fn from(problem: Problem) -> Self {
        Self {
            problem,
            receipt_id: None,
        }
    }
}

impl ProxyRequest {
    fn header_facts(&self) -> HeaderFacts {
        // The two kinds of header are read apart; the reader treats them apart anyway.
        let conversation = self.text_headers(&[herma_core::wire::CONVERSATION_HEADER]);
        HeaderFacts::from_headers(conversation.chain(self.text_headers(&SESSION_HEADERS)))
    }

    /// The headers named in `names` whose values are UTF-8, as text, in the header map's order
    /// (a name's values as sent). The name is looked at first: most headers are none of them,
    /// and checking a value's UTF-8 is a pass over its bytes.
    fn text_headers<'a>(&'a self, names: &'a [&str]) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.headers
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .filter_map(|(n, v)| Some((n.as_str(), std::str::from_utf8(v.as_bytes()).ok()?)))
    }

    /// A header's value as text, by a name made once (a lookup by `&str` checks and lowercases
    /// the name every time).
    fn header(&self, name: &HeaderName) -> Option<&str> {
        std::str::from_utf8(self.headers.get(name)?.as_bytes()).ok()
    }
}

fn upstream_problem(err: UpstreamError, host: &str) -> Problem {
    match err {
        // One sentence whatever the socket said (the detail is in the server log): refused,
        // unresolvable and TLS failures must not tell a caller which local ports are open.
        UpstreamError::Connect(_) | UpstreamError::Body(_) => Problem::new(
            ProblemCode::UpstreamUnreachable,
            format!("the upstream {host} could not be reached"),
        ),
        UpstreamError::Timeout(after) => Problem::new(
            ProblemCode::UpstreamTimeout,
            format!(
                "the upstream {host} sent no response headers within {} s",
                after.as_secs()
            ),
        ),
        UpstreamError::Redirect(status) => Problem::new(
            ProblemCode::UpstreamRedirectRefused,
            format!(
                "the upstream {host} answered {status} with a redirect; Herma never follows redirects"
            ),
        ),
        UpstreamError::LoopbackPromiseBroken(_) => Problem::new(
            ProblemCode::UpstreamHostRefused,
            format!(
                "the upstream host `{host}` names loopback but resolved to a non-loopback address; nothing was sent"
            ),
        ),
        UpstreamError::Request(detail) => Problem::new(
            ProblemCode::ValidationFailed,
            format!("the upstream request is invalid: {detail}"),
        ),
    }
}

impl App {
    /// Handles one proxied request.
    pub async fn proxy(&self, request: ProxyRequest) -> Result<ProxyReply, ProxyFailure> {
        let protocol = match request.route {
            ProxyRoute::Passthrough(protocol) => {
                return Ok(self.passthrough(request, protocol).await?);
            }
            ProxyRoute::Protocol(protocol) => protocol,
        };
        let envelope = Envelope::from_request(protocol, &request.body, &request.header_facts())?;
        if let Some(model) = &envelope.model {
            refuse_contributor_model(model, "/model")?;
        }
        let scope = &request.principal.caller_scope;
        let snapshot = self.rules.snapshot(scope, Mode::Online).await?;
        // Decided while planning, before any claim, when a shim rule matched (so a request
        // that cannot be forwarded spends no claims), else when the request is forwarded.
        let mut target = None;
        let can_forward = || {
            target
                .get_or_insert_with(|| self.resolve_target(&request, protocol))
                .is_ok()
        };
        let plan = self
            .plan(scope, &snapshot, &envelope, Claims::Write, can_forward)
            .await?;
        let receipt_id = self.receipt_id()?;
        let mut receipt = ReceiptBody {
            caller_scope: scope.clone(),
            protocol: protocol.as_str().to_owned(),
            conversation_id: envelope.conversation.id.clone(),
            model: envelope.model.clone().unwrap_or_default(),
            action: ReceiptAction::Forwarded,
            matched: plan.matched,
            shimmed_context_refs: Vec::new(),
            unresolved_context_refs: Vec::new(),
            upstream_status: None,
            usage: None,
            timings: Timings {
                decision_micros: elapsed_micros(request.received),
                upstream_headers_micros: None,
                total_micros: None,
            },
            stream_end: None,
            error: None,
            created_at: self.clock.now(),
        };

        let body = match plan.action {
            PlannedAction::Respond { text, .. } => {
                let id_hex = self.new_id("", 12)?;
                let answer = DirectAnswer {
                    protocol,
                    model: &receipt.model,
                    text: &text,
                    id_hex: &id_hex,
                    created: self.clock.now(),
                    stream_usage: envelope.stream_usage,
                };
                let body = if envelope.stream {
                    Bytes::from(answer.sse())
                } else {
                    Bytes::from(answer.json())
                };
                receipt.action = ReceiptAction::RespondedDirectly;
                receipt.timings.total_micros = Some(elapsed_micros(request.received));
                let streaming = envelope.stream;
                if let Some(memory) = &self.memory {
                    let answer = TurnAnswer::Direct(text);
                    memory.submit(self.turn_record(
                        &request,
                        envelope,
                        &receipt,
                        &receipt_id,
                        answer,
                    ));
                }
                self.receipts.submit(receipt.seal(receipt_id.clone())).await;
                return Ok(ProxyReply::Direct {
                    receipt_id,
                    streaming,
                    body,
                });
            }
            PlannedAction::Shim(shim) => {
                receipt.unresolved_context_refs = shim.unresolved;
                match envelope.with_shim_json(&request.body, &shim.json) {
                    Some(body) if !shim.rendered.text.is_empty() => {
                        receipt.action = ReceiptAction::Shimmed;
                        receipt.shimmed_context_refs = shim.rendered.refs;
                        Bytes::from(body)
                    }
                    _ => request.body.clone(),
                }
            }
            PlannedAction::Forward => request.body.clone(),
        };

        // Resolved before Herma's share of the latency is taken, as when planning resolves it.
        let target = target.unwrap_or_else(|| self.resolve_target(&request, protocol));
        let added_micros = elapsed_micros(request.received);
        let sent = match target {
            Ok(target) => self.send(&request, &target, body, Some(&receipt_id)).await,
            Err(problem) => Err(problem),
        };
        let (status, headers, body) = match sent {
            Ok(sent) => sent,
            Err(problem) => {
                // The shim never reached the model: give the once-only claims back.
                self.release(scope, &envelope, &plan.claimed).await;
                receipt.error = Some(problem.code);
                receipt.timings.total_micros = Some(elapsed_micros(request.received));
                self.receipts.submit(receipt.seal(receipt_id.clone())).await;
                return Err(ProxyFailure {
                    problem,
                    receipt_id: Some(receipt_id),
                });
            }
        };
        if !(200..300).contains(&status) {
            self.release(scope, &envelope, &plan.claimed).await;
        }
        receipt.upstream_status = Some(status);
        receipt.timings.upstream_headers_micros = Some(elapsed_micros(request.received));
        let streaming = headers
            .get_all(http::header::CONTENT_TYPE)
            .iter()
            .any(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let memory = self.memory.clone().map(|m| {
            // The relayed body or its stream's text is added as it passes ([`ObservedBody`]).
            let answer = if streaming {
                TurnAnswer::Streamed(StreamText::new(
                    protocol,
                    MAX_CAPTURED_RESPONSE,
                    MAX_RESPONSE_TEXT,
                ))
            } else {
                TurnAnswer::Relayed { body: Vec::new() }
            };
            let turn = self.turn_record(&request, envelope, &receipt, &receipt_id, answer);
            (m, turn)
        });
        let action = receipt.action;
        let observed = ObservedBody {
            inner: body,
            observer: Some(UsageObserver::new(protocol, streaming)),
            pending: Some((receipt, receipt_id.clone(), request.received)),
            writer: self.receipts.clone(),
            memory,
            streaming,
            protocol,
            ends: self.metrics.stream_ends.clone(),
        };

        Ok(ProxyReply::Upstream {
            receipt_id: Some(receipt_id),
            action,
            added_micros,
            status,
            headers,
            body: Box::pin(observed),
        })
    }

    /// What memory needs from this turn. The envelope is not used after it, so its texts (tool
    /// results up to [`MAX_TOOL_RESULTS`](herma_core::wire::MAX_TOOL_RESULTS) ×
    /// [`MAX_TOOL_RESULT_CHARS`](herma_core::wire::MAX_TOOL_RESULT_CHARS)) move into the record
    /// instead of being copied.
    fn turn_record(
        &self,
        request: &ProxyRequest,
        envelope: Envelope,
        receipt: &ReceiptBody,
        receipt_id: &str,
        answer: TurnAnswer,
    ) -> TurnRecord {
        let outcomes = receipt
            .matched
            .iter()
            .map(|m| {
                let outcome = match (m.applied, receipt.action) {
                    (true, ReceiptAction::Shimmed) => OutcomeKind::Injected,
                    (true, ReceiptAction::RespondedDirectly) => OutcomeKind::RespondedDirectly,
                    _ => OutcomeKind::Matched,
                };
                (m.provision_id.clone(), m.version, outcome)
            })
            .collect();
        TurnRecord {
            scope: receipt.caller_scope.clone(),
            project_tag: project_tag(request.header(&PROJECT), envelope.system.as_deref()),
            protocol: envelope.protocol,
            conversation_id: if envelope.conversation.source == ConversationSource::None {
                String::new()
            } else {
                envelope.conversation.id
            },
            turn: envelope.turn,
            receipt_id: receipt_id.to_owned(),
            outcomes,
            user_text: envelope.user_text,
            tool_results: envelope.tool_results,
            paths: envelope.paths,
            answer,
            at: self.clock.now(),
        }
    }

    async fn release(&self, scope: &CallerScope, envelope: &Envelope, claimed: &[String]) {
        if claimed.is_empty() {
            return;
        }
        if let Err(err) = self
            .store
            .release_claims(scope, &envelope.conversation.id, claimed)
            .await
        {
            tracing::warn!(error = %err, "once-per-conversation claims could not be released");
        }
    }

    /// `/v1/messages/count_tokens` and `/v1/models`: forwarded as they are.
    async fn passthrough(
        &self,
        request: ProxyRequest,
        protocol: Protocol,
    ) -> Result<ProxyReply, Problem> {
        if !request.body.is_empty()
            && let Ok(serde_json::Value::Object(body)) =
                serde_json::from_slice::<serde_json::Value>(&request.body)
            && let Some(model) = body.get("model").and_then(|m| m.as_str())
        {
            refuse_contributor_model(model, "/model")?;
        }
        let target = self.resolve_target(&request, protocol)?;
        let body = request.body.clone();
        let added_micros = elapsed_micros(request.received);
        let (status, headers, body) = self.send(&request, &target, body, None).await?;
        Ok(ProxyReply::Upstream {
            receipt_id: None,
            action: ReceiptAction::Forwarded,
            added_micros,
            status,
            headers,
            body,
        })
    }

    /// Where the request would go and with which credential — decided before any byte is sent.
    fn resolve_target(
        &self,
        request: &ProxyRequest,
        protocol: Protocol,
    ) -> Result<UpstreamTarget, Problem> {
        let one = |names: &'static [&'static str]| {
            upstream::one_header_value(request.text_headers(names), names)
        };
        let ask = UpstreamAsk {
            protocol,
            path: &request.path,
            query: request.query.as_deref(),
            base_header: one(&upstream::BASE_URL_HEADERS)?,
            key_header: one(&[upstream::API_KEY_HEADER])?,
        };
        upstream::resolve(&self.settings.upstream, &ask)
    }

    /// Sends to `target` and filters the response headers.
    async fn send(
        &self,
        request: &ProxyRequest,
        target: &UpstreamTarget,
        body: Bytes,
        receipt_id: Option<&str>,
    ) -> Result<(u16, HeaderMap, BodyStream), Problem> {
        let hop_by_hop = request
            .header(&http::header::CONNECTION)
            .map(connection_tokens)
            .unwrap_or_default();
        let mut headers = HeaderMap::with_capacity(request.headers.len() + ROOM_FOR_ADDED_HEADERS);
        for (name, value) in &request.headers {
            let name_text = name.as_str();
            if forward_request_header(name_text) && !hop_by_hop.iter().any(|t| t == name_text) {
                headers.append(name, value.clone());
            }
        }
        if let Some((name, value)) = &target.credential {
            herma_providers::append_header(&mut headers, name, value.expose())
                .map_err(|e| upstream_problem(e, &target.host))?;
        }
        let response = self
            .upstream
            .send(UpstreamRequest {
                method: request.method.clone(),
                url: target.url.clone(),
                headers,
                body,
            })
            .await
            .map_err(|e| upstream_problem(e, &target.host))?;
        let hop_by_hop: Vec<String> = response
            .headers
            .get_all(http::header::CONNECTION)
            .iter()
            .flat_map(|v| connection_tokens(&String::from_utf8_lossy(v.as_bytes())))
            .collect();
        let mut headers = HeaderMap::with_capacity(response.headers.len() + ROOM_FOR_ADDED_HEADERS);
        // A `None` name is one more value of the name before it.
        let mut name: Option<HeaderName> = None;
        for (next, value) in response.headers {
            if next.is_some() {
                name = next;
            }
            let Some(name) = &name else { continue };
            let name_text = name.as_str();
            if relay_response_header(name_text) && !hop_by_hop.iter().any(|t| t == name_text) {
                headers.append(name, value);
            }
        }
        if let Some(id) = receipt_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            headers.append(HeaderName::from_static("x-herma-receipt"), id);
        }
        Ok((response.status, headers, response.body))
    }
}
