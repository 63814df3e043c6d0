//! Typed work conversations: `POST /v1/conversations/turn`, `GET /v1/conversations/{id}` and the
//! public `GET /api/conversation-schema`.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use herma_core::conversation::turn::TurnBody;
use herma_core::gate::Requirement;
use herma_core::json;
use serde_json::Value;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::{GateFacts, PathId, read_json};

/// Ask, in a typed conversation, what work you can do: an operator-funded model proposes one
/// typed action against your own work contracts, validated locally. The answer is `clarify`,
/// `ready` or `blocked`, always `executed: false`; a ceiling's refusal answers 429 (its replay
/// too). Disabled unless the operator sets `HERMA_CONVERSATION_ENABLED=true`.
#[utoipa::path(post, path = "/v1/conversations/turn", tag = "conversations",
    request_body(content = Object,
        example = json!({"conversation_id": "work-session-001", "request_id": "turn-request-001", "expected_version": 0, "message": "Hello. What work can I do today?", "context_refs": ["work.review"], "provider": "meta"})),
    responses((status = 200, description = "The turn's answer (schema: `GET /api/conversation-schema`)", body = Object),
        (status = 401, body = crate::openapi::ProblemBody), (status = 403, body = crate::openapi::ProblemBody),
        (status = 404, body = crate::openapi::ProblemBody), (status = 409, body = crate::openapi::ProblemBody),
        (status = 410, body = crate::openapi::ProblemBody), (status = 413, body = crate::openapi::ProblemBody),
        (status = 422, body = crate::openapi::ProblemBody), (status = 429, body = crate::openapi::ProblemBody),
        (status = 503, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn turn(
    State(state): State<AppState>,
    facts: GateFacts,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let principal = facts.admit(&state, Requirement::Route).await?;
    let body: TurnBody = json::decode(read_json(&headers, body, state.body_limit()).await?)?;
    let answer = state.app.conversation_turn(&principal, body).await?;
    let status = if answer.budget_denied {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    let mut response = (status, Json(answer.body)).into_response();
    if answer.replayed {
        response.headers_mut().insert(
            "x-herma-replayed",
            axum::http::HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

/// Your own conversation: its transcript, active request and recent turns with their attempts.
#[utoipa::path(get, path = "/v1/conversations/{id}", tag = "conversations",
    params(("id" = String, Path, description = "The conversation id")),
    responses((status = 200, body = Object), (status = 401, body = crate::openapi::ProblemBody),
        (status = 404, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn get(
    State(state): State<AppState>,
    facts: GateFacts,
    PathId(id): PathId,
) -> ApiResult<Json<Value>> {
    let principal = facts.admit(&state, Requirement::Route).await?;
    Ok(Json(state.app.conversation_view(&principal, &id).await?))
}

/// The JSON Schemas of a turn, a work contract and a turn's answer (no key needed).
#[utoipa::path(get, path = "/api/conversation-schema", tag = "conversations",
    responses((status = 200, body = Object)))]
pub async fn schema() -> Json<Value> {
    Json(herma_core::conversation::schema::all())
}
