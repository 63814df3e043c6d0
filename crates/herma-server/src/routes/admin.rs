//! `/v1/admin/keys`: the bootstrap token or an admin key (H11).

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use herma_app::keys::{IssuedKey, NewKey};
use herma_core::gate::Requirement;
use herma_core::json;
use herma_core::model::HarnessKey;
use serde::Serialize;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::{GateFacts, PathId, read_json};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyList {
    pub items: Vec<HarnessKey>,
}

/// Issue a key. The secret is returned once and never stored.
#[utoipa::path(post, path = "/v1/admin/keys", tag = "admin",
    request_body(content = NewKey,
        example = json!({"scopes": ["route", "configure"], "harness": "claude-code", "label": "laptop"})),
    responses((status = 201, body = IssuedKey), (status = 401, body = crate::openapi::ProblemBody),
        (status = 403, description = "Not an admin", body = crate::openapi::ProblemBody),
        (status = 422, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn create_key(
    State(state): State<AppState>,
    facts: GateFacts,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<IssuedKey>)> {
    facts.admit(&state, Requirement::Admin).await?;
    let request: NewKey = json::decode(read_json(&headers, body, state.body_limit()).await?)?;
    Ok((
        StatusCode::CREATED,
        Json(state.app.issue_key(request).await?),
    ))
}

/// List every key (ids, scopes, harness; never secrets or digests), newest first.
#[utoipa::path(get, path = "/v1/admin/keys", tag = "admin",
    responses((status = 200, body = KeyList), (status = 403, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn list_keys(
    State(state): State<AppState>,
    facts: GateFacts,
) -> ApiResult<Json<KeyList>> {
    facts.admit(&state, Requirement::Admin).await?;
    Ok(Json(KeyList {
        items: state.app.list_keys().await?,
    }))
}

#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SyncQuery {
    /// Resume after this cursor (a stopped sync's `resume_after`).
    pub after: Option<String>,
}

/// Sync governed records from the configured Tessera (`HERMA_TESSERA_URL`) into the built-ins.
/// A sync that stops early still answers 200 with `stopped` and `resume_after`.
#[utoipa::path(post, path = "/v1/admin/tessera/sync", tag = "admin",
    params(SyncQuery),
    responses((status = 200, body = herma_app::tessera::SyncReport),
        (status = 403, body = crate::openapi::ProblemBody),
        (status = 422, description = "No Tessera is configured", body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn tessera_sync(
    State(state): State<AppState>,
    facts: GateFacts,
    crate::extract::StrictQuery(query): crate::extract::StrictQuery<SyncQuery>,
) -> ApiResult<Json<herma_app::tessera::SyncReport>> {
    facts.admit(&state, Requirement::Admin).await?;
    Ok(Json(state.app.tessera_sync_configured(query.after).await?))
}

/// Revoke a key: refused here at once and on every instance within one second.
#[utoipa::path(delete, path = "/v1/admin/keys/{key_id}", tag = "admin",
    params(("key_id" = String, Path, description = "The key id (16 hex characters)", example = "3f9a1c0d5e7b2a64")),
    responses((status = 200, body = HarnessKey), (status = 404, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn revoke_key(
    State(state): State<AppState>,
    facts: GateFacts,
    PathId(key_id): PathId,
) -> ApiResult<Json<HarnessKey>> {
    facts.admit(&state, Requirement::Admin).await?;
    Ok(Json(state.app.revoke_key(&key_id).await?))
}

/// The operator's summary of operator-funded turns: reserved dollars per provider against its
/// ceiling, today's Ollama calls, shared provider health, upstream identity holds and paused
/// providers. No caller, token count or transcript.
#[utoipa::path(get, path = "/v1/admin/conversation-budget", tag = "admin",
    responses((status = 200, body = herma_app::conversation_budget::BudgetSummary),
        (status = 401, body = crate::openapi::ProblemBody),
        (status = 403, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn conversation_budget(
    State(state): State<AppState>,
    facts: GateFacts,
) -> ApiResult<Json<herma_app::conversation_budget::BudgetSummary>> {
    facts.admit(&state, Requirement::Admin).await?;
    Ok(Json(state.app.conversation_budget().await?))
}
