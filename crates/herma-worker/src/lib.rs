//! Herma as a Cloudflare Worker: `herma_server::router` — the same routes, extractors, gate and
//! services as `herma serve` — behind workers-rs's `fetch` event.
//!
//! This crate is a transport plus the edge's adapters of the ports, nothing more: the wall
//! clock ([`clock::DateClock`], `Date.now()`), the runtime ([`runtime::EdgeRuntime`], the
//! isolate's event loop and timers) and the HTTP client ([`upstream::FetchUpstream`], the
//! platform's `fetch`). Settings are the `HERMA_*` vars and secrets of the Worker's
//! environment, read through the core's one settings table.
//!
//! Records live in the D1 database bound as `DB` ([`d1::D1Backend`]: the native SQLite store's
//! statements on D1). Without that binding the Worker keeps them in the isolate's memory
//! (`MemoryStore`, for trying it out: nothing survives an isolate's restart) and `/healthz`
//! says `memory`. Conversation routes go to Durable Objects ([`budget`]): each caller's to its
//! own `HermaCaller` (binding `HERMA_CALLER`), which keeps its conversations in its own SQLite
//! database, and the budget summary to the `WorkReasoningBudget` coordinator (binding
//! `WORK_REASONING_BUDGET`), which keeps what callers share; without both bindings turns are
//! unavailable. `docs/deploy-cloudflare.md` says what works.

#![cfg(target_arch = "wasm32")]

mod body;
mod budget;
mod clock;
mod coordinator;
mod d1;
mod dosql;
mod runtime;
mod upstream;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use herma_app::App;
use herma_app::clock::OsRandom;
use herma_core::problem::{Problem, ProblemCode};
use herma_core::settings::{Settings, table};
use herma_server::error::ApiError;
use herma_store::{MemoryStore, Store};
use herma_store_sql::SqlStore;
use tower_service::Service;
use worker::{Context, Env, HttpRequest, ScheduleContext, ScheduledEvent, event};

thread_local! {
    /// The isolate's app and router, built by its first request.
    static SERVED: RefCell<Option<(Arc<App>, Router)>> = const { RefCell::new(None) };
}

/// One request: the router answers it; the request is kept alive (`waitUntil`) until its body
/// has ended and the receipt and memory work it queued is written, since a Worker's timers and
/// tasks stop with the request that started them.
#[event(fetch)]
async fn fetch(
    req: HttpRequest,
    env: Env,
    ctx: Context,
) -> worker::Result<axum::http::Response<axum::body::Body>> {
    let (app, mut router) = match SERVED.with(|s| s.borrow().clone()) {
        Some(served) => served,
        None => match build(&env).await {
            Ok(served) => {
                SERVED.with(|s| *s.borrow_mut() = Some(served.clone()));
                served
            }
            // Nothing is kept: the next request tries again (after the migrations are applied).
            Err(problem) => {
                worker::console_error!("herma cannot start: {}", problem.detail);
                return Ok(axum::response::IntoResponse::into_response(ApiError(
                    problem,
                )));
            }
        },
    };
    if let Some(route) = budget::route(req.uri().path())
        && let (Ok(coordinator), Ok(callers)) = (
            env.durable_object(budget::BINDING),
            env.durable_object(budget::CALLERS),
        )
    {
        match route {
            budget::Route::Coordinator => {
                return budget::forward(&coordinator, budget::NAME, req).await;
            }
            // The caller's own object, once the gate knows who calls; anything the gate
            // refuses is answered here, as natively.
            budget::Route::Caller => {
                if let Some(scope) = caller_scope(&app, req.headers()).await {
                    return budget::forward(&callers, scope.as_str(), req).await;
                }
            }
        }
    }
    let response = router.call(read_small_body(req).await).await?;
    let (done, ended) = tokio::sync::oneshot::channel();
    let response = response.map(|b| axum::body::Body::new(body::OnEnd::new(b, done)));
    ctx.wait_until(async move {
        let _ = ended.await;
        app.receipts.flush().await;
        app.receipts.settled().await;
        if let Some(memory) = &app.memory {
            memory.flush().await;
        }
    });
    Ok(response)
}

/// The caller scope of the key `headers` present, when the gate accepts it.
async fn caller_scope(
    app: &App,
    headers: &axum::http::HeaderMap,
) -> Option<herma_core::CallerScope> {
    let read = herma_server::extract::GateRead::of(headers);
    match read.authenticate(&app.gate).await.ok()? {
        herma_core::gate::Principal::Key(key) => Some(key.caller_scope.clone()),
        herma_core::gate::Principal::Bootstrap => None,
    }
}

/// Request bodies declared at most this long are read whole before routing.
const READ_AHEAD: u64 = 1 << 20;

/// `req` with its body read whole when it declares a small one, else streamed as it comes.
///
/// A route may answer without reading the body (a refusal at the gate). Under `wrangler dev`
/// the connection such a request came on then sometimes stalled, and the next request on it
/// got no answer; a body already read leaves nothing behind. A large or undeclared body is
/// streamed, so the route's own limits still apply to it as it arrives.
pub(crate) async fn read_small_body(req: HttpRequest) -> axum::http::Request<axum::body::Body> {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (parts, body) = req.into_parts();
    let body = axum::body::Body::new(body);
    let body = match declared {
        Some(n) if n > 0 && n <= READ_AHEAD => {
            match axum::body::to_bytes(body, READ_AHEAD as usize).await {
                Ok(bytes) => axum::body::Body::from(bytes),
                // A body that ends early or fails: the route reads the same failure.
                Err(err) => failed_body(err),
            }
        }
        _ => body,
    };
    axum::http::Request::from_parts(parts, body)
}

/// A body that fails at once with `err`.
fn failed_body(err: axum::Error) -> axum::body::Body {
    axum::body::Body::from_stream(futures_util::stream::once(async move {
        Err::<axum::body::Bytes, axum::Error>(err)
    }))
}

/// The isolate's app and router, built by the first event that needs them. A failure keeps
/// nothing, so the next event tries again (after the migrations are applied, say).
async fn served(env: &Env) -> Result<(Arc<App>, Router), Problem> {
    if let Some(served) = SERVED.with(|s| s.borrow().clone()) {
        return Ok(served);
    }
    let served = build(env).await.inspect_err(|problem| {
        worker::console_error!("herma cannot start: {}", problem.detail);
    })?;
    SERVED.with(|s| *s.borrow_mut() = Some(served.clone()));
    Ok(served)
}

/// A Cron Trigger (`[triggers]` in `wrangler.toml`): receipts and rule outcomes past their
/// retention (`HERMA_RECEIPT_RETENTION_DAYS`, `HERMA_OUTCOME_RETENTION_DAYS`) are deleted, as
/// `herma serve` does every hour.
#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    let Ok((app, _)) = served(&env).await else {
        return;
    };
    match app.prune().await {
        Ok(report) => worker::console_log!(
            "pruned {} receipts and {} rule outcomes past their retention",
            report.receipts,
            report.outcomes
        ),
        Err(problem) => worker::console_error!("pruning failed: {}", problem.detail),
    }
}

/// The Worker's name for the operator's fallback upstream key (the seed's Worker reference
/// names it so): the same setting as `HERMA_UPSTREAM_API_KEY`, bound to
/// `HERMA_UPSTREAM_BASE_URL`'s origin like it. Set one, not both.
const WORKER_UPSTREAM_KEY: &str = "UPSTREAM_LLM_API_KEY";

/// The `HERMA_*` settings the environment defines (vars and secrets alike), by the names the
/// core's settings table declares, and [`WORKER_UPSTREAM_KEY`].
fn settings(env: &Env) -> Result<Settings, Problem> {
    let read = |name: &str| {
        env.var(name)
            .or_else(|_| env.secret(name))
            .ok()
            .map(|value| value.to_string())
    };
    let mut map = BTreeMap::new();
    for name in table::all().flat_map(|d| d.names()) {
        if let Some(value) = read(&name) {
            map.insert(name, value);
        }
    }
    if let Some(key) = read(WORKER_UPSTREAM_KEY) {
        let canonical = table::UPSTREAM_API_KEY.name;
        if map.contains_key(canonical) {
            return Err(unavailable(format!(
                "bad settings: {WORKER_UPSTREAM_KEY} and {canonical} are the same setting (the operator's fallback upstream key): set one"
            )));
        }
        map.insert(canonical.to_owned(), key);
    }
    Settings::from_map(&map).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        unavailable(format!("bad settings: {}", lines.join("; ")))
    })
}

pub(crate) fn unavailable(detail: String) -> Problem {
    Problem::new(ProblemCode::Unavailable, detail)
}

/// The store: the D1 database bound as `DB`, once its migrations are current; else memory.
async fn store(env: &Env) -> Result<Arc<dyn Store>, Problem> {
    let Ok(db) = env.d1("DB") else {
        worker::console_warn!("no D1 binding `DB`: records are kept in this isolate's memory only");
        return Ok(Arc::new(MemoryStore::new()));
    };
    let store = d1::current(SqlStore::new(d1::D1Backend::new(db)))
        .await
        .map_err(|err| unavailable(err.to_string()))?;
    Ok(Arc::new(store))
}

/// Why `HERMA_EMBED_MODEL_DIR` does nothing here.
const LOCAL_MODEL: &str = "the in-process embedding model (HERMA_EMBED_MODEL_DIR) does not run in a Worker: semantic rules need a remote endpoint (HERMA_EMBED_URL, HERMA_EMBED_MODEL)";

async fn build(env: &Env) -> Result<(Arc<App>, Router), Problem> {
    let app = Arc::new(app(env).await?);
    Ok((app.clone(), herma_server::router(app)))
}

/// The app on the environment's settings, store, fetch and tiers, its starters loaded.
pub(crate) async fn app(env: &Env) -> Result<App, Problem> {
    let settings = settings(env)?;
    // The store first: a database that is behind refuses before any model is called.
    let store = store(env).await?;
    let mut fetch = upstream::FetchUpstream::new(&settings);
    // Tessera as a service binding: its records come from that Worker, not the network.
    if let (Ok(binding), Some(base)) = (env.service("TESSERA"), settings.tessera_url.as_deref()) {
        fetch = fetch.binding(base, binding);
    }
    let upstream: Arc<dyn herma_providers::Upstream> = Arc::new(fetch);
    // Tiers 2 and 3 on remote models only, over the platform's fetch.
    let tiers =
        herma_app::tiers::open_remote(&settings.tiers, upstream.clone(), Some(LOCAL_MODEL)).await;
    let app = App::with_parts(
        store,
        settings,
        Arc::new(clock::DateClock),
        Arc::new(OsRandom),
        upstream,
        Arc::new(runtime::EdgeRuntime),
    )
    .with_tiers(tiers);
    app.load_starters()
        .await
        .map_err(|p| unavailable(format!("loading the starters: {}", p.detail)))?;
    Ok(app)
}
