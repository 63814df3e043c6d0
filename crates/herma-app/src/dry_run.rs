//! Dry run: the proxy's pipeline on the caller's rules without touching anything — no
//! upstream, no claims, no receipt — reporting what would happen and why.

use std::collections::BTreeMap;

use herma_core::contributor::refuse_contributor_model;
use herma_core::governance::Refusal;
use herma_core::model::ShimmedRef;
use herma_core::model::{MatchedRule, Tier};
use herma_core::wire::direct::DirectAnswer;
use herma_core::wire::{ConversationSource, Envelope, HeaderFacts, Insertion, Protocol};
use herma_core::{CallerScope, Problem};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::App;
use crate::proxy::{Claims, PlannedAction};
use herma_core::evaluation::Evaluation;

/// A request to evaluate.
#[derive(Clone, Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DryRunRequest {
    /// Which route the body is for.
    #[schema(value_type = String, example = "messages")]
    pub protocol: Protocol,
    /// The request body exactly as a harness would send it to that route.
    #[schema(value_type = Object, example = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "deploy the fix"}]}))]
    pub body: Value,
    /// Request headers that matter to Herma (conversation and session ids).
    #[serde(default)]
    #[schema(example = json!({"x-herma-conversation-id": "demo-1"}))]
    pub headers: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EnvelopeView {
    pub model: Option<String>,
    pub stream: bool,
    pub user_text: String,
    pub tools_offered: Vec<String>,
    pub tools_called: Vec<String>,
    pub paths: Vec<String>,
    pub conversation_id: String,
    #[schema(value_type = String, example = "native")]
    pub conversation_source: ConversationSource,
}

/// Matches by the tier that fired them.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub struct TierMatches {
    pub keyword: Vec<MatchedRule>,
    pub semantic: Vec<MatchedRule>,
    pub micromodel: Vec<MatchedRule>,
}

impl From<Vec<MatchedRule>> for TierMatches {
    fn from(matched: Vec<MatchedRule>) -> Self {
        let mut tiers = TierMatches::default();
        for m in matched {
            match m.tier {
                Tier::Keyword => tiers.keyword.push(m),
                Tier::Semantic => tiers.semantic.push(m),
                Tier::Micromodel => tiers.micromodel.push(m),
            }
        }
        tiers
    }
}

/// A provision or context entry the governance lens refused for the caller.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct GovernanceRefusal {
    /// `provision` or `context_entry`.
    #[schema(example = "provision")]
    pub kind: &'static str,
    pub id: String,
    pub builtin: bool,
    /// `quarantined`, `not_verified`, `untrusted_producer`, `ungoverned`, …
    #[schema(example = "quarantined")]
    pub code: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ShimReport {
    /// The exact text that would be added.
    pub text: String,
    /// Where it would go in this request.
    #[schema(example = "appended as the last block of `system`")]
    pub placement: String,
    pub shimmed_context_refs: Vec<ShimmedRef>,
    pub unresolved_context_refs: Vec<String>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct DryRunReport {
    /// Always false: nothing was stored, claimed or sent.
    pub persisted: bool,
    pub upstream_contacted: bool,
    #[schema(value_type = String, example = "messages")]
    pub protocol: Protocol,
    pub envelope: EnvelopeView,
    pub tiers: TierMatches,
    /// Tiers 2 and 3 in detail: every semantic score with its example, threshold and margin,
    /// every classifier outcome, and each rule a tier did not evaluate with the reason.
    pub evaluation: Evaluation,
    /// Provisions the governance lens keeps from this caller, and why (H12, H19).
    pub governance_refused: Vec<GovernanceRefusal>,
    /// `forward`, `shim_context` or `respond_directly`.
    #[schema(example = "shim_context")]
    pub decision: &'static str,
    /// The provision that answers (`respond_directly`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provision_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shim: Option<ShimReport>,
    /// The answer Herma would send (`respond_directly`): the JSON object, or for a streaming
    /// request the SSE text.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub direct_response: Option<Value>,
}

/// Where a shim lands, in words.
pub fn placement(insertion: Option<&Insertion>) -> String {
    insertion
        .map_or(
            "nowhere: the request has no message to place context before",
            |insertion| insertion.splice.placement,
        )
        .into()
}

/// Which refused built-ins a report names: none in the public preview; for a caller, those
/// refused for what they are (quarantined, untrusted, unverifiable), never those meant for other
/// callers, cohorts or harnesses (their existence is not this caller's business).
fn shows_builtin_refusal(scope: &CallerScope, why: &Refusal) -> bool {
    !scope.is_system_builtin()
        && !matches!(
            why,
            Refusal::NotInCohort
                | Refusal::NotListedCaller
                | Refusal::HarnessNotAdmitted(_)
                | Refusal::UnknownVisibility(_)
        )
}

impl App {
    pub async fn dry_run(
        &self,
        scope: &CallerScope,
        request: DryRunRequest,
    ) -> Result<DryRunReport, Problem> {
        let body = serde_json::to_vec(&request.body).unwrap_or_default();
        let headers: Vec<(String, String)> = request
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        let facts =
            HeaderFacts::from_headers(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let envelope = Envelope::from_request(request.protocol, &body, &facts)
            .map_err(|p| p.with_pointer("/body"))?;
        if let Some(model) = &envelope.model {
            refuse_contributor_model(model, "/body/model")?;
        }
        let snapshot = self
            .rules
            .snapshot(scope, herma_core::evaluation::Mode::Offline)
            .await?;
        let plan = self
            .plan(scope, &snapshot, &envelope, Claims::DryRun, || true)
            .await?;
        let mut report = DryRunReport {
            persisted: false,
            upstream_contacted: false,
            protocol: request.protocol,
            envelope: EnvelopeView {
                model: envelope.model.clone(),
                stream: envelope.stream,
                user_text: envelope.user_text.clone(),
                tools_offered: envelope.tools_offered.clone(),
                tools_called: envelope.tools_called.clone(),
                paths: envelope.paths.clone(),
                conversation_id: envelope.conversation.id.clone(),
                conversation_source: envelope.conversation.source,
            },
            tiers: TierMatches::from(plan.matched),
            evaluation: plan.evaluation,
            governance_refused: snapshot
                .refused
                .iter()
                .filter(|r| !r.builtin || shows_builtin_refusal(scope, &r.why))
                .map(|r| GovernanceRefusal {
                    kind: r.kind,
                    id: r.id.clone(),
                    builtin: r.builtin,
                    code: r.why.code(),
                    reason: r.why.to_string(),
                })
                .collect(),
            decision: "forward",
            provision_id: None,
            shim: None,
            direct_response: None,
        };
        match plan.action {
            PlannedAction::Forward => {}
            PlannedAction::Respond { provision_id, text } => {
                let answer = DirectAnswer {
                    protocol: request.protocol,
                    model: envelope.model.as_deref().unwrap_or_default(),
                    text: &text,
                    id_hex: "dryrun",
                    created: self.clock.now(),
                    stream_usage: envelope.stream_usage,
                };
                report.decision = "respond_directly";
                report.provision_id = Some(provision_id);
                report.direct_response = Some(if envelope.stream {
                    Value::String(String::from_utf8_lossy(&answer.sse()).into_owned())
                } else {
                    // Herma's own JSON: it always parses.
                    serde_json::from_slice(&answer.json()).unwrap_or_default()
                });
            }
            PlannedAction::Shim(shim) => {
                report.decision = "shim_context";
                report.shim = Some(ShimReport {
                    placement: placement(envelope.insertion.as_ref()),
                    text: shim.rendered.text,
                    shimmed_context_refs: shim.rendered.refs,
                    unresolved_context_refs: shim.unresolved,
                });
            }
        }
        Ok(report)
    }
}
