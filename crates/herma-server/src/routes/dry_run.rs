//! `POST /v1/dry-run`: what Herma would do with a request, without doing it.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use herma_app::dry_run::{DryRunReport, DryRunRequest};
use herma_app::records::own_scope;
use herma_core::gate::Requirement;
use herma_core::json;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::{GateFacts, read_json};

/// Evaluate a request against your rules: matches per tier, the exact shim or direct answer,
/// `persisted: false`, no upstream contact.
#[utoipa::path(post, path = "/v1/dry-run", tag = "proxy",
    request_body(content = DryRunRequest,
        example = json!({"protocol": "messages", "body": {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "deploy the fix"}]}})),
    responses((status = 200, body = DryRunReport), (status = 401, body = crate::openapi::ProblemBody),
        (status = 422, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn dry_run(
    State(state): State<AppState>,
    facts: GateFacts,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<DryRunReport>> {
    let principal = facts.admit(&state, Requirement::Read).await?;
    let scope = own_scope(&principal)?.clone();
    let request: DryRunRequest =
        json::decode(read_json(&headers, body, state.body_limit()).await?)?;
    Ok(Json(state.app.dry_run(&scope, request).await?))
}
