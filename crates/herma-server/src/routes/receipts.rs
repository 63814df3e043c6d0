//! `/v1/receipts/{id}`: a caller reads only its own receipts.

use axum::Json;
use axum::extract::State;
use herma_app::records::own_scope;
use herma_core::Problem;
use herma_core::gate::Requirement;
use herma_core::model::InjectionReceipt;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::{GateFacts, PathId};

/// Read one of your receipts. Another caller's receipt is `not_found`, never `forbidden`.
#[utoipa::path(get, path = "/v1/receipts/{id}", tag = "receipts",
    params(("id" = String, Path, description = "The receipt id from `x-herma-receipt`")),
    responses((status = 200, body = InjectionReceipt), (status = 404, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn get_receipt(
    State(state): State<AppState>,
    facts: GateFacts,
    PathId(id): PathId,
) -> ApiResult<Json<InjectionReceipt>> {
    let principal = facts.admit(&state, Requirement::Read).await?;
    let scope = own_scope(&principal)?;
    let receipt = state
        .app
        .receipt(scope, &id)
        .await
        .map_err(herma_app::error::internal)?
        .ok_or_else(|| Problem::not_found("receipt", &id))?;
    Ok(Json(receipt))
}
