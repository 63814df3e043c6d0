//! Herma as a Cloudflare Worker: `herma_server::router` — the same routes, extractors, gate and
//! services as `herma serve` — behind workers-rs's `fetch` event.
//!
//! This crate is a transport plus the edge's adapters of the ports, nothing more: the wall
//! clock ([`clock::DateClock`], `Date.now()`), the runtime ([`runtime::EdgeRuntime`], the
//! isolate's event loop and timers) and the HTTP client ([`upstream::FetchUpstream`], the
//! platform's `fetch`). Settings are the `HERMA_*` vars and secrets of the Worker's
//! environment, read through the core's one settings table.
//!
//! First increment (issue 16): records live in the isolate's memory (`MemoryStore`) until the
//! D1 store lands, so nothing survives an isolate's restart; conversation turns are
//! unavailable (no governed ports). `docs/deploy-cloudflare.md` says what works.

#![cfg(target_arch = "wasm32")]

mod body;
mod clock;
mod runtime;
mod upstream;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use herma_app::App;
use herma_app::clock::OsRandom;
use herma_core::settings::{Settings, table};
use herma_store::MemoryStore;
use tower_service::Service;
use worker::{Context, Env, HttpRequest, event};

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
        None => {
            let served = build(&env).await?;
            SERVED.with(|s| *s.borrow_mut() = Some(served.clone()));
            served
        }
    };
    let response = router.call(req).await?;
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

/// The `HERMA_*` settings the environment defines (vars and secrets alike), by the names the
/// core's settings table declares.
fn settings(env: &Env) -> worker::Result<Settings> {
    let mut map = BTreeMap::new();
    for name in table::all().flat_map(|d| d.names()) {
        if let Ok(value) = env.var(&name) {
            map.insert(name, value.to_string());
        } else if let Ok(value) = env.secret(&name) {
            map.insert(name, value.to_string());
        }
    }
    Settings::from_map(&map).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        worker::Error::RustError(format!("bad settings: {}", lines.join("; ")))
    })
}

async fn build(env: &Env) -> worker::Result<(Arc<App>, Router)> {
    let settings = settings(env)?;
    let upstream = upstream::FetchUpstream::new(&settings);
    let app = App::with_parts(
        Arc::new(MemoryStore::new()),
        settings,
        Arc::new(clock::DateClock),
        Arc::new(OsRandom),
        Arc::new(upstream),
        Arc::new(runtime::EdgeRuntime),
    );
    app.load_starters()
        .await
        .map_err(|p| worker::Error::RustError(format!("loading the starters: {}", p.detail)))?;
    let app = Arc::new(app);
    Ok((app.clone(), herma_server::router(app)))
}
