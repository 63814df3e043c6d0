//! `/v1/provisions` and `/v1/context`: one generic implementation, two annotated route sets.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use herma_app::records::{Managed, Partition};
use herma_core::gate::Requirement;
use herma_store::Page;
use serde::{Deserialize, Serialize};

use super::{ScopeParam, ScopeQuery};
use crate::AppState;
use crate::error::ApiResult;
use crate::extract::{GateFacts, PathId, StrictQuery, read_json};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// `system_builtin` to list the built-in starters instead of your own records.
    pub scope: Option<ScopeParam>,
    /// Only records whose id sorts after this one (the previous page's `next_after`).
    pub after: Option<String>,
    /// Page size, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000, example = 100)]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// `system_builtin` to delete a built-in (admins only).
    pub scope: Option<ScopeParam>,
    /// Delete only if the record is still at this version.
    // Its `maximum`, `i64::MAX`, is written by `openapi::complete`: utoipa's own goes through
    // `usize`, so the document would differ on the Worker's 32-bit target.
    #[param(example = 3)]
    pub expected_version: Option<u64>,
}

/// One page of records, in ascending id order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Listing<T> {
    pub items: Vec<T>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

pub async fn create<D: Managed>(
    state: AppState,
    facts: GateFacts,
    query: ScopeQuery,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<D::Stored>)> {
    let principal = facts.admit(&state, query.write_requirement()).await?;
    let value = read_json(&headers, body, state.body_limit()).await?;
    let created = state
        .app
        .create_record::<D>(&principal, query.partition(), value)
        .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

pub async fn list<D: Managed>(
    state: AppState,
    facts: GateFacts,
    query: ListQuery,
) -> ApiResult<Json<Listing<D::Stored>>> {
    let principal = facts.admit(&state, Requirement::Read).await?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=Page::MAX_LIMIT).contains(&limit) {
        return Err(
            herma_core::Problem::validation(vec![herma_core::FieldError::new(
                "/limit",
                "must be between 1 and 1000",
            )])
            .into(),
        );
    }
    let partition = match query.scope {
        Some(ScopeParam::SystemBuiltin) => Partition::Builtin,
        None => Partition::Own,
    };
    let page = Page {
        after: query.after,
        limit,
    };
    let items = state
        .app
        .list_records::<D>(&principal, partition, &page)
        .await?;
    let next_after = (items.len() as u32 == limit)
        .then(|| items.last().map(|i| D::spec_of(i).id().to_owned()))
        .flatten();
    Ok(Json(Listing { items, next_after }))
}

pub async fn get<D: Managed>(
    state: AppState,
    facts: GateFacts,
    id: String,
) -> ApiResult<Json<D::Stored>> {
    let principal = facts.admit(&state, Requirement::Read).await?;
    Ok(Json(state.app.get_record::<D>(&principal, &id).await?))
}

pub async fn update<D: Managed>(
    state: AppState,
    facts: GateFacts,
    query: ScopeQuery,
    id: String,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<D::Stored>> {
    let principal = facts.admit(&state, query.write_requirement()).await?;
    let value = read_json(&headers, body, state.body_limit()).await?;
    Ok(Json(
        state
            .app
            .update_record::<D>(&principal, query.partition(), &id, value)
            .await?,
    ))
}

pub async fn delete<D: Managed>(
    state: AppState,
    facts: GateFacts,
    query: DeleteQuery,
    id: String,
) -> ApiResult<StatusCode> {
    let scope = ScopeQuery { scope: query.scope };
    let principal = facts.admit(&state, scope.write_requirement()).await?;
    state
        .app
        .delete_record::<D>(&principal, scope.partition(), &id, query.expected_version)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The five annotated handlers of one collection.
macro_rules! collection_routes {
    ($module:ident, $spec:ty, $stored:ty, $base:literal, $item:literal, $tag:literal,
     [$list:literal, $create:literal, $get:literal, $update:literal, $delete:literal $(,)?],
     create_example = $create_example:tt, update_example = $update_example:tt $(,)?) => {
        pub mod $module {
            use super::*;

            #[utoipa::path(get, path = $base, tag = $tag,
                summary = $list,
                params(ListQuery),
                responses((status = 200, body = Listing<$stored>), (status = 401, body = crate::openapi::ProblemBody)),
                security(("bearer" = []), ("api_key" = [])))]
            pub async fn list(State(state): State<AppState>, facts: GateFacts, StrictQuery(query): StrictQuery<ListQuery>) -> ApiResult<Json<Listing<$stored>>> {
                super::list::<$spec>(state, facts, query).await
            }

            #[utoipa::path(post, path = $base, tag = $tag,
                summary = $create,
                params(ScopeQuery, crate::openapi::HarnessHeader),
                request_body(content = $spec, example = json!($create_example)),
                responses((status = 201, body = $stored), (status = 403, body = crate::openapi::ProblemBody),
                    (status = 409, description = "The id exists", body = crate::openapi::ProblemBody),
                    (status = 422, body = crate::openapi::ProblemBody)),
                security(("bearer" = []), ("api_key" = [])))]
            pub async fn create(State(state): State<AppState>, facts: GateFacts, StrictQuery(query): StrictQuery<ScopeQuery>, headers: HeaderMap, body: Body) -> ApiResult<(StatusCode, Json<$stored>)> {
                super::create::<$spec>(state, facts, query, headers, body).await
            }

            #[utoipa::path(get, path = $item, tag = $tag,
                summary = $get,
                params(("id" = String, Path, description = "The record id")),
                responses((status = 200, body = $stored), (status = 404, body = crate::openapi::ProblemBody)),
                security(("bearer" = []), ("api_key" = [])))]
            pub async fn get(State(state): State<AppState>, facts: GateFacts, PathId(id): PathId) -> ApiResult<Json<$stored>> {
                super::get::<$spec>(state, facts, id).await
            }

            #[utoipa::path(put, path = $item, tag = $tag,
                summary = $update,
                description = "The body is the whole record plus `expected_version`, the version you read. A stale version returns 409 `version_conflict` with `current_version` and writes nothing.",
                params(("id" = String, Path, description = "The record id"), ScopeQuery, crate::openapi::HarnessHeader),
                request_body(content = Object, description = "The record's fields plus `expected_version` (integer)",
                    example = json!($update_example)),
                responses((status = 200, body = $stored), (status = 409, body = crate::openapi::ProblemBody),
                    (status = 403, body = crate::openapi::ProblemBody), (status = 422, body = crate::openapi::ProblemBody)),
                security(("bearer" = []), ("api_key" = [])))]
            pub async fn update(State(state): State<AppState>, facts: GateFacts, StrictQuery(query): StrictQuery<ScopeQuery>, PathId(id): PathId, headers: HeaderMap, body: Body) -> ApiResult<Json<$stored>> {
                super::update::<$spec>(state, facts, query, id, headers, body).await
            }

            #[utoipa::path(delete, path = $item, tag = $tag,
                summary = $delete,
                params(("id" = String, Path, description = "The record id"), DeleteQuery, crate::openapi::HarnessHeader),
                responses((status = 204, description = "Deleted"), (status = 404, body = crate::openapi::ProblemBody),
                    (status = 409, body = crate::openapi::ProblemBody)),
                security(("bearer" = []), ("api_key" = [])))]
            pub async fn delete(State(state): State<AppState>, facts: GateFacts, StrictQuery(query): StrictQuery<DeleteQuery>, PathId(id): PathId) -> ApiResult<StatusCode> {
                super::delete::<$spec>(state, facts, query, id).await
            }
        }
    };
}

collection_routes!(
    provisions,
    herma_core::model::ProvisionSpec,
    herma_core::model::Provision,
    "/v1/provisions",
    "/v1/provisions/{id}",
    "provisions",
    [
        "List your provisions",
        "Create a provision (configure scope and a matching X-Herma-Harness)",
        "Read one provision: yours, else the built-in of that id",
        "Replace a provision with compare-and-set on expected_version",
        "Delete a provision",
    ],
    create_example = {"id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist"]},
    update_example = {"expected_version": 1, "id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy", "ship it"]}, "context_refs": ["deploy.checklist"]},
);
collection_routes!(
    context,
    herma_core::model::ContextEntrySpec,
    herma_core::model::ContextEntry,
    "/v1/context",
    "/v1/context/{id}",
    "context",
    [
        "List your context entries",
        "Create a context entry (configure scope and a matching X-Herma-Harness)",
        "Read one context entry: yours, else the built-in of that id",
        "Replace a context entry with compare-and-set on expected_version",
        "Delete a context entry",
    ],
    create_example = {"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations before the canary."},
    update_example = {"expected_version": 1, "id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations, then the canary, then the rollout."},
);

/// Pull context entries from a remote Herma-compatible endpoint (its `/v1/context`) into your
/// own scope (H07). The remote's host must be in `HERMA_ALLOWED_UPSTREAM_HOSTS`; `max_chars` is
/// clamped to `HERMA_HANDSHAKE_MAX_CHARS`, and every body cut to fit is listed in `cuts`.
#[utoipa::path(post, path = "/v1/handshake", tag = "context",
    request_body(content = herma_core::handshake::HandshakeRequest,
        description = "`remote` names another Herma (or any server of its `/v1/context` shape) and `remote_key` a key it accepts",
        example = json!({"remote": "http://127.0.0.1:7731", "remote_key": "hmk_…", "ids": ["deploy.checklist"], "max_chars": 2000})),
    responses((status = 200, body = herma_app::handshake::HandshakeReport),
        (status = 403, description = "Needs the configure scope and X-Herma-Harness, or the remote host is not allowed", body = crate::openapi::ProblemBody),
        (status = 422, body = crate::openapi::ProblemBody),
        (status = 502, description = "The remote could not be read", body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn handshake(
    State(state): State<AppState>,
    facts: GateFacts,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<herma_app::handshake::HandshakeReport>> {
    let principal = facts
        .admit(&state, herma_core::gate::Requirement::Configure)
        .await?;
    let request: herma_core::handshake::HandshakeRequest =
        herma_core::json::decode(read_json(&headers, body, state.body_limit()).await?)?;
    Ok(Json(state.app.handshake(&principal, request).await?))
}
