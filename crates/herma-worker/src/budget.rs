//! `WorkReasoningBudget`: the SQLite-backed Durable Object that serves conversation turns at the
//! edge. The Worker hands it every conversation route (`/v1/conversations/…`, the admin budget
//! summary); it answers with the same router and services as `herma serve`, its conversations,
//! turns, attempts, ledger, provider health and governed records in its own database
//! ([`crate::dosql`]), every other record in D1.
//!
//! One object holds every caller's turns, so the ceilings, the shared UTC-day Ollama cap, the
//! health holds and probe leases are exact, as on one native database; each dispatch is bounded
//! to 25 seconds and never past the turn's two-minute boundary. An alarm does what the native
//! sweeper does: it seals turns still unfinished two minutes after admission as
//! `provider_outcome_uncertain` (never retried) and turns conversations past their lifetime
//! into id/version tombstones; it wakes when the next of those is due.

use std::cell::RefCell;
use std::sync::Arc;

use axum::Router;
use herma_app::App;
use herma_app::conversations::{EDGE_ATTEMPT_TIMEOUT, SEAL_AFTER_MS};
use herma_core::problem::Problem;
use herma_store::governed::GovernedPorts;
use tower_service::Service;
use worker::{DurableObject, Env, HttpRequest, Request, Response, State, durable_object};

use crate::dosql::Atomic;

/// The binding the Worker reaches the object by (`wrangler.toml`).
pub const BINDING: &str = "WORK_REASONING_BUDGET";
/// The one object's name.
pub const NAME: &str = "global";

/// The object's app, its conversation ports and its router.
type Served = (Arc<App>, Arc<Atomic>, Router);

#[durable_object]
pub struct WorkReasoningBudget {
    state: State,
    env: Env,
    served: RefCell<Option<Served>>,
}

impl WorkReasoningBudget {
    /// The object's app, built by its first event: the Worker's, with conversations here.
    async fn served(&self) -> Result<Served, Problem> {
        if let Some(served) = self.served.borrow().clone() {
            return Ok(served);
        }
        let ports = Arc::new(
            Atomic::open(&self.state.storage())
                .map_err(|err| crate::unavailable(format!("the conversation database: {err}")))?,
        );
        let app = crate::app(&self.env).await?.with_conversations(
            ports.clone(),
            GovernedPorts::uniform(ports.clone()),
            EDGE_ATTEMPT_TIMEOUT,
        );
        let app = Arc::new(app);
        let served = (app.clone(), ports, herma_server::router(app));
        *self.served.borrow_mut() = Some(served.clone());
        Ok(served)
    }

    /// Wakes the object at `at` (Unix milliseconds) unless it is woken sooner.
    async fn wake_by(&self, at: i64) -> worker::Result<()> {
        let storage = self.state.storage();
        if storage.get_alarm().await?.is_some_and(|set| set <= at) {
            return Ok(());
        }
        let at = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(at as f64));
        storage.set_alarm(worker::ScheduledTime::new(at)).await
    }

    /// Wakes the object when the next turn is due for sealing or conversation for expiry.
    async fn wake_when_due(&self, ports: &Atomic) -> worker::Result<()> {
        let storage = self.state.storage();
        let now = js_sys::Date::now() as i64;
        let at = match ports.next_due(SEAL_AFTER_MS) {
            Ok(None) => return storage.delete_alarm().await,
            // Never sooner than a second from now: a due turn is sealed by the alarm itself.
            Ok(Some(at)) => at.max(now + 1_000),
            Err(err) => {
                worker::console_error!("reading when conversations are next due: {err}");
                // Try again in a while rather than never.
                now + SEAL_AFTER_MS
            }
        };
        let at = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(at as f64));
        storage.set_alarm(worker::ScheduledTime::new(at)).await
    }
}

impl DurableObject for WorkReasoningBudget {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            served: RefCell::new(None),
        }
    }

    async fn fetch(&self, req: Request) -> worker::Result<Response> {
        let (app, ports, mut router) = match self.served().await {
            Ok(served) => served,
            Err(problem) => {
                worker::console_error!("herma's conversations cannot start: {}", problem.detail);
                let answer = axum::response::IntoResponse::into_response(
                    herma_server::error::ApiError(problem),
                );
                return Response::try_from(answer);
            }
        };
        let req = crate::read_small_body(HttpRequest::try_from(req)?).await;
        if req.method() == axum::http::Method::POST {
            // A turn admitted now is due for sealing two minutes from now: the alarm is set
            // before it is dispatched, so an object that stops mid-turn still seals it.
            self.wake_by(js_sys::Date::now() as i64 + SEAL_AFTER_MS)
                .await?;
        }
        let response = router.call(req).await?;
        // The answer is whole (a turn's answer is JSON): what it recorded is due from now on.
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|err| worker::Error::RustError(err.to_string()))?;
        self.wake_when_due(&ports).await?;
        app.receipts.flush().await;
        Response::try_from(axum::http::Response::from_parts(
            parts,
            axum::body::Body::from(bytes),
        ))
    }

    async fn alarm(&self) -> worker::Result<Response> {
        let (app, ports, _) = self
            .served()
            .await
            .map_err(|problem| worker::Error::RustError(problem.detail))?;
        match app.sweep_conversations().await {
            Ok(0) => {}
            Ok(sealed) => worker::console_warn!(
                "sealed {sealed} unfinished conversation turns as provider_outcome_uncertain"
            ),
            Err(problem) => worker::console_error!("sweeping conversations: {}", problem.detail),
        }
        self.wake_when_due(&ports).await?;
        Response::empty()
    }
}

/// Whether `path` is a conversation route, answered by the object.
pub fn serves(path: &str) -> bool {
    path.starts_with("/v1/conversations/") || path == "/v1/admin/conversation-budget"
}

/// `req` answered by the one object.
pub async fn forward(
    namespace: &worker::ObjectNamespace,
    req: HttpRequest,
) -> worker::Result<axum::http::Response<axum::body::Body>> {
    let stub = namespace.get_by_name(NAME)?;
    let req = crate::read_small_body(req).await;
    let answer = stub.fetch_with_request(Request::try_from(req)?).await?;
    Ok(axum::http::Response::from(answer))
}
