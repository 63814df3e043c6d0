//! The OpenAPI description: generated from the handlers' annotations, so it covers every route
//! by construction (every route is registered through `OpenApiRouter::routes`).

use serde::Serialize;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Herma",
        description = "Context-shimming middleware between coding harnesses and model APIs. \
            Herma's own API speaks JSON; errors are RFC 9457 `application/problem+json` with a stable `code`.",
    ),
    modifiers(&SecuritySchemes),
    components(schemas(ProblemBody, herma_core::problem::FieldError, herma_core::problem::ProblemCode)),
    tags(
        (name = "provisions", description = "Your rules: triggers and actions"),
        (name = "context", description = "Your context entries: nouns, verbs and details"),
        (name = "proxy", description = "Model traffic: the three wire protocols, and dry runs"),
                (name = "receipts", description = "What Herma did with a request"),
        (name = "insights", description = "Entity memory, rule outcomes, insights and candidate provisions"),


        (name = "admin", description = "Keys (bootstrap token or admin key)"),
                (name = "system", description = "Health, identity, this document"),
        (name = "public", description = "No key needed: the preview, discovery documents and MCP"),
        (name = "pages", description = "HTML pages for people: landing, playground, docs"),


    )
)]
pub struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("hmk_<key_id>_<secret>")
                    .description(Some(
                        "A Herma key, or the bootstrap admin token on /v1/admin routes",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key"))),
        );
    }
}

/// An RFC 9457 problem as Herma sends it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[allow(dead_code)] // documentation only: problems are rendered by `ApiError`
pub struct ProblemBody {
    /// A stable URI naming the problem type.
    #[schema(example = "https://herma.dev/problems/version_conflict")]
    pub r#type: String,
    #[schema(example = "The record changed since the version you read")]
    pub title: String,
    #[schema(example = 409)]
    pub status: u16,
    #[schema(example = "expected_version 1 is stale; the current version is 2")]
    pub detail: String,
    pub code: herma_core::problem::ProblemCode,
    /// Field-level errors, each with a JSON pointer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<herma_core::problem::FieldError>,
    /// On `version_conflict`: the version the record has now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_version: Option<u64>,
}

/// The harness attestation configure operations need (H02).
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct HarnessHeader {
    /// Must equal the harness the key was issued for, e.g. `claude-code`.
    #[param(rename = "X-Herma-Harness", example = "claude-code")]
    pub harness: Option<String>,
}
