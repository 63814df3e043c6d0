//! Health, identity and the API description.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use herma_core::gate::Principal;
use serde::Serialize;

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::GateFacts;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok` when the database answers, else `degraded`.
    #[schema(example = "ok")]
    pub status: &'static str,
    /// `sqlite` or `postgres`.
    #[schema(example = "sqlite")]
    pub database: &'static str,
    #[schema(example = "0.1.0")]
    pub version: &'static str,
}

/// Operational metrics in the Prometheus text format: requests by route, method, action and
/// status; request latency and Herma's added latency; queue depths; rule-index rebuilds. Public
/// unless `HERMA_METRICS_TOKEN` is set.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain"),
        (status = 401, description = "HERMA_METRICS_TOKEN is set and was not presented", body = crate::openapi::ProblemBody)))]
pub async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> ApiResult<impl IntoResponse> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let page = state.app.metrics_page(authorization)?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        page,
    ))
}

/// Liveness and database reachability. No authentication.
#[utoipa::path(get, path = "/healthz", tag = "system",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn healthz(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    let ok = state.app.store.ping().await.is_ok();
    let health = Health {
        status: if ok { "ok" } else { "degraded" },
        database: state.app.store.backend(),
        version: env!("CARGO_PKG_VERSION"),
    };
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(health))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WhoAmI {
    /// `key:<key_id>`; absent for the bootstrap token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_scope: Option<String>,
    #[schema(example = json!(["route", "configure"]))]
    pub scopes: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "claude-code")]
    pub harness: Option<String>,
    /// True for the bootstrap admin token.
    pub bootstrap: bool,
}

/// Who the presented credential is.
#[utoipa::path(get, path = "/v1/whoami", tag = "system",
    responses((status = 200, body = WhoAmI), (status = 401, body = crate::openapi::ProblemBody)),
    security(("bearer" = []), ("api_key" = [])))]
pub async fn whoami(State(state): State<AppState>, facts: GateFacts) -> ApiResult<Json<WhoAmI>> {
    let principal = facts.authenticate(&state).await?;
    Ok(Json(match principal {
        Principal::Bootstrap => WhoAmI {
            caller_scope: None,
            scopes: vec!["admin"],
            harness: None,
            bootstrap: true,
        },
        Principal::Key(k) => WhoAmI {
            caller_scope: Some(k.caller_scope.to_string()),
            scopes: k.scopes.iter().map(|s| s.as_str()).collect(),
            harness: k.harness.clone(),
            bootstrap: false,
        },
    }))
}

/// This document: the OpenAPI 3.1 description of every route.
#[utoipa::path(get, path = "/openapi.json", tag = "system",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub async fn openapi(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        state.openapi.clone(),
    )
}
