//! The two SQLite-backed Durable Objects that serve conversation turns at the edge, on the
//! same router and services as `herma serve`:
//!
//! - `HermaCaller`, one per caller (named by its caller scope), answers that caller's
//!   conversation routes (`POST /v1/conversations/turn`, `GET /v1/conversations/{id}`) with its
//!   conversations, turns, attempts, own ledger counters (conversation ids, active turns, turns
//!   and tokens of an hour) and governed records in its own database ([`crate::dosql`]); every
//!   other record is D1's. Its alarm does what the native sweeper does: it seals turns still
//!   unfinished two minutes after admission as `provider_outcome_uncertain` (never retried)
//!   and turns conversations past their lifetime into id/version tombstones.
//! - `WorkReasoningBudget`, one, the coordinator: the ledger counters every caller shares
//!   (providers' budgets, the UTC-day `HERMA_OLLAMA_CALLS_PER_DAY` cap), provider health,
//!   identity holds and probe leases ([`crate::coordinator`]), and the operator's budget summary
//!   (`GET /v1/admin/conversation-budget`).
//!
//! Each dispatch is bounded to 25 seconds and never past the turn's two-minute boundary.

use std::cell::RefCell;
use std::sync::Arc;

use axum::Router;
use herma_app::App;
use herma_app::conversations::{EDGE_ATTEMPT_TIMEOUT, SEAL_AFTER_MS};
use herma_core::problem::Problem;
use herma_store::conversations::ConversationStore;
use herma_store::governed::GovernedPorts;
use tower_service::Service;
use worker::{
    DurableObject, Env, HttpRequest, ObjectNamespace, Request, Response, State, durable_object,
};

use crate::coordinator::{self, Coordinator, Split};
use crate::dosql::Atomic;

pub use crate::coordinator::{BINDING, NAME};

/// The callers' objects' binding.
pub const CALLERS: &str = "HERMA_CALLER";

/// An object's app, its own conversation ports and its router.
#[derive(Clone)]
struct Served {
    app: Arc<App>,
    ports: Arc<Atomic>,
    router: Router,
}

/// What both objects share: their state, environment and app (built by the first event).
struct Object {
    state: State,
    env: Env,
    served: RefCell<Option<Served>>,
}

impl Object {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            served: RefCell::new(None),
        }
    }

    /// The object's app: the Worker's, with conversations on `conversations(own ports)`.
    async fn served(
        &self,
        conversations: impl FnOnce(Arc<Atomic>) -> Result<Arc<dyn ConversationStore>, Problem>,
    ) -> Result<Served, Problem> {
        if let Some(served) = self.served.borrow().clone() {
            return Ok(served);
        }
        let ports = Arc::new(
            Atomic::open(&self.state.storage())
                .map_err(|err| crate::unavailable(format!("the conversation database: {err}")))?,
        );
        let app = crate::app(&self.env).await?.with_conversations(
            conversations(ports.clone())?,
            GovernedPorts::uniform(ports.clone()),
            EDGE_ATTEMPT_TIMEOUT,
        );
        let app = Arc::new(app);
        let served = Served {
            app: app.clone(),
            ports,
            router: herma_server::router(app),
        };
        *self.served.borrow_mut() = Some(served.clone());
        Ok(served)
    }

    /// `req` answered by `served`'s router, whole; with `seals`, the object is woken before a
    /// posted turn is dispatched (due two minutes from now) and then when the next turn or
    /// conversation is due.
    async fn answer(&self, served: Served, req: Request, seals: bool) -> worker::Result<Response> {
        let req = crate::read_small_body(HttpRequest::try_from(req)?).await;
        if seals && req.method() == axum::http::Method::POST {
            // An object that stops mid-turn still seals it.
            self.wake_by(js_sys::Date::now() as i64 + SEAL_AFTER_MS)
                .await?;
        }
        let mut router = served.router.clone();
        let response = router.call(req).await?;
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|err| worker::Error::RustError(err.to_string()))?;
        if seals {
            self.wake_when_due(&served.ports).await?;
        }
        served.app.receipts.flush().await;
        Response::try_from(axum::http::Response::from_parts(
            parts,
            axum::body::Body::from(bytes),
        ))
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
        let at = match ports.next_due(SEAL_AFTER_MS).await {
            Ok(None) => return storage.delete_alarm().await,
            // Never sooner than a second from now: a due turn is sealed by the alarm itself.
            Ok(Some(at)) => at.as_millis().max(now + 1_000),
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

/// A refusal to serve, as the problem it is.
fn refused(problem: Problem) -> worker::Result<Response> {
    worker::console_error!("herma's conversations cannot start: {}", problem.detail);
    Response::try_from(axum::response::IntoResponse::into_response(
        herma_server::error::ApiError(problem),
    ))
}

#[durable_object]
pub struct HermaCaller {
    object: Object,
}

impl HermaCaller {
    async fn served(&self) -> Result<Served, Problem> {
        let coordinator = self.object.env.durable_object(BINDING);
        self.object
            .served(|own| {
                let namespace = coordinator.map_err(|_| {
                    crate::unavailable(format!("no Durable Object binding `{BINDING}`"))
                })?;
                Ok(Arc::new(Split {
                    own,
                    shared: Coordinator::new(namespace),
                }))
            })
            .await
    }
}

impl DurableObject for HermaCaller {
    fn new(state: State, env: Env) -> Self {
        Self {
            object: Object::new(state, env),
        }
    }

    async fn fetch(&self, req: Request) -> worker::Result<Response> {
        match self.served().await {
            Ok(served) => self.object.answer(served, req, true).await,
            Err(problem) => refused(problem),
        }
    }

    async fn alarm(&self) -> worker::Result<Response> {
        let served = self
            .served()
            .await
            .map_err(|problem| worker::Error::RustError(problem.detail))?;
        match served.app.sweep_conversations().await {
            Ok(0) => {}
            Ok(sealed) => worker::console_warn!(
                "sealed {sealed} unfinished conversation turns as provider_outcome_uncertain"
            ),
            Err(problem) => worker::console_error!("sweeping conversations: {}", problem.detail),
        }
        self.object.wake_when_due(&served.ports).await?;
        Response::empty()
    }
}

#[durable_object]
pub struct WorkReasoningBudget {
    object: Object,
}

impl DurableObject for WorkReasoningBudget {
    fn new(state: State, env: Env) -> Self {
        Self {
            object: Object::new(state, env),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let served = match self
            .object
            .served(|own| Ok(own as Arc<dyn ConversationStore>))
            .await
        {
            Ok(served) => served,
            Err(problem) => return refused(problem),
        };
        if req.path() == coordinator::PATH {
            let body = req.bytes().await?;
            let reply = coordinator::answer(&served.ports, &body).await;
            let mut response = Response::from_bytes(reply)?;
            response
                .headers_mut()
                .set("content-type", "application/json")?;
            return Ok(response);
        }
        self.object.answer(served, req, false).await
    }
}

/// Which object answers `path`: the coordinator (the budget summary), a caller's (its
/// conversations), or none.
pub enum Route {
    Coordinator,
    Caller,
}

pub fn route(path: &str) -> Option<Route> {
    if path == "/v1/admin/conversation-budget" {
        Some(Route::Coordinator)
    } else if path.starts_with("/v1/conversations/") {
        Some(Route::Caller)
    } else {
        None
    }
}

/// `req` answered by the object `name` of `namespace`.
pub async fn forward(
    namespace: &ObjectNamespace,
    name: &str,
    req: HttpRequest,
) -> worker::Result<axum::http::Response<axum::body::Body>> {
    let stub = namespace.get_by_name(name)?;
    let req = crate::read_small_body(req).await;
    let answer = stub.fetch_with_request(Request::try_from(req)?).await?;
    Ok(axum::http::Response::from(answer))
}
