//! `/v1/memory`, `/v1/outcomes`, `/v1/insights`: what Herma remembers about a caller's work
//! and how their rules fare.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use herma_app::insights::Insights;
use herma_app::records::own_scope;
use herma_core::gate::Requirement;
use herma_core::model::{Provision, RuleOutcomeRecord, WorkingEntity};
use herma_core::{FieldError, Problem};
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::{GateFacts, PathId, StrictQuery};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MemoryQuery {
    /// Only this project (`X-Herma-Project`, or derived from the harness's working directory).
    #[param(example = "herma")]
    pub project: Option<String>,
    /// At most this many, 1–1000 (default 100).
    #[param(example = 100)]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LimitQuery {
    /// At most this many, 1–1000 (default 100).
    #[param(example = 100)]
    pub limit: Option<u32>,
}

fn limit(limit: Option<u32>) -> Result<u32, Problem> {
    let limit = limit.unwrap_or(100);
    if (1..=1000).contains(&limit) {
        Ok(limit)
    } else {
        Err(Problem::validation(vec![FieldError::new(
            "/limit",
            "must be between 1 and 1000",
        )]))
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemoryList {
    /// Most frequent first, then most recently seen.
    pub items: Vec<WorkingEntity>,
    /// Entities dropped so far by the per-caller bound (rarest, oldest first).
    pub evicted: u64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OutcomeList {
    /// Most recent first.
    pub items: Vec<RuleOutcomeRecord>,
}

/// The entities Herma remembers from your turns: file paths, code symbols, Tessera URIs,
/// statute card ids and error signatures, with counts and first/last seen.
#[utoipa::path(get, path = "/v1/memory", tag = "insights", params(MemoryQuery),
    responses((status = 200, body = MemoryList), (status = 401, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn memory(
    State(state): State<AppState>,
    facts: GateFacts,
    StrictQuery(query): StrictQuery<MemoryQuery>,
) -> ApiResult<Json<MemoryList>> {
    let principal = facts.admit(&state, Requirement::Read).await?;
    let scope = own_scope(&principal)?;
    let limit = limit(query.limit)?;
    let items = state
        .app
        .store
        .list_entities(scope, query.project.as_deref(), limit)
        .await
        .map_err(herma_app::error::internal)?;
    let evicted = state
        .app
        .store
        .entity_evictions(scope)
        .await
        .map_err(herma_app::error::internal)?;
    Ok(Json(MemoryList { items, evicted }))
}

/// What happened after your rules fired: `injected`, `responded_directly`, `matched` (matched
/// but not applied) and `retry_error` (the next turn carried an error signature). An injection
/// is recorded as such, not as proof that it influenced the model.
#[utoipa::path(get, path = "/v1/outcomes", tag = "insights", params(LimitQuery),
    responses((status = 200, body = OutcomeList), (status = 401, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn outcomes(
    State(state): State<AppState>,
    facts: GateFacts,
    StrictQuery(query): StrictQuery<LimitQuery>,
) -> ApiResult<Json<OutcomeList>> {
    let principal = facts.admit(&state, Requirement::Read).await?;
    let scope = own_scope(&principal)?;
    let items = state
        .app
        .store
        .list_outcomes(scope, limit(query.limit)?)
        .await
        .map_err(herma_app::error::internal)?;
    Ok(Json(OutcomeList { items }))
}

/// Per-rule fire counts and retry-error rates, rules that never matched, and candidate
/// provisions synthesized from frequent entities (never active until approved).
#[utoipa::path(get, path = "/v1/insights", tag = "insights",
    responses((status = 200, body = Insights), (status = 401, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn insights(
    State(state): State<AppState>,
    facts: GateFacts,
) -> ApiResult<Json<Insights>> {
    let principal = facts.admit(&state, Requirement::Read).await?;
    Ok(Json(state.app.insights(&principal).await?))
}

/// Approve a candidate provision: it is created as one of your provisions (configure scope and
/// a matching X-Herma-Harness, like any other create).
#[utoipa::path(post, path = "/v1/insights/candidates/{id}", tag = "insights",
    params(("id" = String, Path, description = "A candidate's id from /v1/insights"), crate::openapi::HarnessHeader),
    responses((status = 201, body = Provision), (status = 404, body = crate::openapi::ProblemBody),
        (status = 409, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn approve_candidate(
    State(state): State<AppState>,
    facts: GateFacts,
    PathId(id): PathId,
) -> ApiResult<(StatusCode, Json<Provision>)> {
    let principal = facts.admit(&state, Requirement::Configure).await?;
    Ok((
        StatusCode::CREATED,
        Json(state.app.approve_candidate(&principal, &id).await?),
    ))
}
