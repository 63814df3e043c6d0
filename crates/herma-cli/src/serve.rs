//! `herma serve`.

use herma_core::settings::Settings;
use tokio::net::TcpListener;

use crate::{Failure, open_app_journaled};

pub async fn run(settings: Settings) -> Result<(), Failure> {
    let bind = settings.bind;
    let app = open_app_journaled(settings, true).await?;
    // Turns a stopped process left unfinished are sealed now, then every 30 seconds.
    match app.sweep_conversations().await {
        Ok(0) => {}
        Ok(sealed) => tracing::warn!(
            sealed,
            "sealed unfinished conversation turns as provider_outcome_uncertain"
        ),
        Err(p) => tracing::warn!(detail = %p.detail, "sweeping conversation turns failed"),
    }
    let _sweeper =
        herma_app::conversations::spawn_sweeper(app.clone(), std::time::Duration::from_secs(30));
    // Receipts and outcomes past their retention: now, off the request path, then hourly.
    let _pruner =
        herma_app::retention::spawn_pruner(app.clone(), std::time::Duration::from_secs(3600));
    if app.has_no_keys().await.unwrap_or(false) {
        tracing::info!(
            "no keys yet: create one with `{} keys create --scope route,configure --harness claude-code` (same --database)",
            program()
        );
    }
    let listener = TcpListener::bind(bind)
        .await
        .map_err(|e| Failure::runtime(format!("cannot listen on {bind}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::runtime(e.to_string()))?;
    // Handlers are installed before announcing the address, so a signal sent as soon as the
    // address is known still shuts down gracefully.
    let shutdown = shutdown_signal()
        .map_err(|e| Failure::runtime(format!("cannot install signal handlers: {e}")))?;
    tracing::info!(database = %app.settings.database.redacted(), "herma listening on http://{local}");
    herma_server::serve(listener, app, shutdown)
        .await
        .map_err(|e| Failure::runtime(format!("the server stopped: {e}")))?;
    tracing::info!("herma stopped");
    Ok(())
}

/// How to run this binary again from the same shell: `herma` when it was found on `PATH`, else
/// the path it was started by (`target/release/herma` under `cargo run`).
fn program() -> String {
    match std::env::args_os().next().map(std::path::PathBuf::from) {
        Some(path) if path.components().count() > 1 => path.display().to_string(),
        _ => "herma".to_owned(),
    }
}

/// A future resolving on SIGINT (Ctrl-C) or SIGTERM; the handlers are installed now.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {},
            _ = terminate.recv() => {},
        }
        tracing::info!("shutting down: finishing in-flight requests");
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: finishing in-flight requests");
    })
}
