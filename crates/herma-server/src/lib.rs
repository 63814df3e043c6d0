//! Herma's HTTP transport (axum).
//!
//! Layout: [`router`] builds every route from annotated handlers in [`routes`] (so `/openapi.json`
//! covers them all), wrapped in the layers of [`layers`] (request ids, tracing, security headers,
//! the edge check); [`extract`] holds the strict extractors, [`error`] maps problems to statuses;
//! [`serve`] runs the router on a listener until a shutdown future resolves, over the
//! connections of [`conn`] (the connection cap, the head and idle deadlines, hyper's own answers
//! to unparseable heads as problems); [`limits`] bounds request bodies (read timeout, memory
//! budget).
//!
//! Architecture invariant: handlers contain no business rules: extract, call one `herma_app`
//! service, map the result. Status codes are decided only in [`error::status_of`].

pub mod conn;
pub mod error;
pub mod extract;
mod layers;
pub mod limits;
pub mod openapi;
pub mod pages;
pub mod routes;

use std::sync::Arc;

use axum::Router;
use herma_app::App;
use herma_core::{Problem, ProblemCode};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use error::ApiError;

/// What every handler sees.
#[derive(Clone)]
pub struct AppState {
    pub app: Arc<App>,
    /// The rendered OpenAPI document.
    pub openapi: axum::body::Bytes,
    /// The address the server listens on (when it serves a socket): what discovery documents
    /// name when `HERMA_PUBLIC_URL` is unset, never the request's `Host`.
    pub local: Option<std::net::SocketAddr>,
    /// The read timeout and memory budget of every request body.
    pub bodies: Arc<limits::BodyLimits>,
}

impl AppState {
    pub fn body_limit(&self) -> usize {
        usize::try_from(self.app.settings.max_body_bytes).unwrap_or(usize::MAX)
    }
}

/// The routes and their OpenAPI description.
fn api() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use routes::{
        admin, conversations, dry_run, mcp, memory, pages, proxy, public, receipts, records, system,
    };
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(pages::landing))
        .routes(routes!(pages::docs))
        .routes(routes!(pages::playground, pages::playground_run))
        .routes(routes!(pages::stylesheet))
        .routes(routes!(pages::playground_script))
        .routes(routes!(system::healthz))
        .routes(routes!(system::metrics))
        .routes(routes!(system::openapi))
        .routes(routes!(system::whoami))
        .routes(routes!(
            records::provisions::list,
            records::provisions::create
        ))
        .routes(routes!(
            records::provisions::get,
            records::provisions::update,
            records::provisions::delete
        ))
        .routes(routes!(records::context::list, records::context::create))
        .routes(routes!(records::handshake))
        .routes(routes!(
            records::context::get,
            records::context::update,
            records::context::delete
        ))
        .routes(routes!(receipts::get_receipt))
        .routes(routes!(admin::list_keys, admin::create_key))
        .routes(routes!(admin::revoke_key))
        .routes(routes!(admin::tessera_sync))
        .routes(routes!(admin::conversation_budget))
        .routes(routes!(proxy::chat_completions))
        .routes(routes!(proxy::responses))
        .routes(routes!(proxy::messages))
        .routes(routes!(proxy::count_tokens))
        .routes(routes!(proxy::models))
        .routes(routes!(dry_run::dry_run))
        .routes(routes!(conversations::turn))
        .routes(routes!(conversations::get))
        .routes(routes!(conversations::schema))
        .routes(routes!(memory::memory))
        .routes(routes!(memory::outcomes))
        .routes(routes!(memory::insights))
        .routes(routes!(memory::approve_candidate))
        .routes(routes!(public::preview))
        .routes(routes!(public::connect))
        .routes(routes!(public::llms))
        .routes(routes!(public::llms_full))
        .routes(routes!(public::agent_card))
        .routes(routes!(public::robots))
        .routes(routes!(public::favicon))
        .routes(routes!(mcp::mcp))
        .split_for_parts()
}

/// The OpenAPI document of this server, completed ([`openapi::complete`]).
pub fn openapi_document() -> serde_json::Value {
    document(api().1)
}

fn document(mut doc: utoipa::openapi::OpenApi) -> serde_json::Value {
    // A query parameter's type, which the handlers' annotations reference but do not register.
    use utoipa::ToSchema;
    doc.components
        .get_or_insert_with(Default::default)
        .schemas
        .insert(
            routes::ScopeParam::name().into_owned(),
            <routes::ScopeParam as utoipa::PartialSchema>::schema(),
        );
    let mut value = serde_json::to_value(&doc).unwrap_or_default();
    openapi::complete(&mut value);
    value
}

/// The whole application, ready to serve. Tests call it without a socket.
pub fn router(app: Arc<App>) -> Router {
    router_on(app, None)
}

/// [`router`] for a server listening on `local`.
pub fn router_on(app: Arc<App>, local: Option<std::net::SocketAddr>) -> Router {
    let (routes, doc) = api();
    let rendered = serde_json::to_string_pretty(&document(doc)).unwrap_or_else(|_| "{}".to_owned());
    let bodies = Arc::new(limits::BodyLimits::from_settings(
        &app.settings,
        app.runtime.clone(),
    ));
    let state = AppState {
        app,
        openapi: axum::body::Bytes::from(rendered),
        local,
        bodies,
    };
    let router = routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    layers::apply(router, state)
}

async fn not_found() -> ApiError {
    ApiError(Problem::new(
        ProblemCode::NotFound,
        "no route matches this path",
    ))
}

async fn method_not_allowed() -> ApiError {
    ApiError(Problem::new(
        ProblemCode::MethodNotAllowed,
        "this route does not accept that method",
    ))
}

/// Serves `app` on `listener` until `shutdown` resolves, then finishes in-flight requests and
/// writes every queued receipt. Connections are HTTP/1.1 under `HERMA_MAX_CONNECTIONS` and the
/// head and idle deadlines ([`conn::accept`]).
#[cfg(not(target_arch = "wasm32"))]
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let local = listener.local_addr().ok();
    let limits = conn::ConnectionLimits::from_settings(
        &app.settings,
        app.clock.clone(),
        conn::accept::open_file_limit(),
    );
    conn::accept::run(listener, router_on(app.clone(), local), limits, shutdown).await;
    // In-flight requests are done; write every queued receipt before returning.
    app.shutdown().await;
    Ok(())
}
