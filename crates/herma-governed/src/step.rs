//! The governed step runner: one trusted, planned call under an operation root, buffered into
//! a neutral step (text, tool calls, reasoning, provider blocks, stop, order).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use herma_core::call::{Controls, ModelRequest, Msg, ToolChoice, ToolSpec};
use herma_core::time::Clock;
use herma_core::{CallerScope, Timestamp};
use herma_providers::single::ModelClient;
use herma_store::governed::{CallReservation, GovernedPorts, RootStatus};
use herma_store::{Runtime, SystemClock};
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, LoadFailure, MAX_ID, MAX_KEY, Mode, Plan, call_id, check_id, day_of};
use crate::text::check_versions;
use crate::types::{
    BackgroundErrorHandler, CallMeta, CallView, Caps, Clients, GovernedError, Identity, Output,
    Prices, RunOutcome, UsageQuery, UsageReconciliation, ViewState,
};

/// The longest `run_timeout` a step runner accepts.
pub const MAX_RUN_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Clone)]
pub struct StepConfig {
    pub ports: GovernedPorts,
    /// The default client.
    pub client: Arc<dyn ModelClient>,
    /// Named alternatives a planned call may name (`OperationCallInput::client`).
    pub clients: std::collections::BTreeMap<String, Arc<dyn ModelClient>>,
    pub clock: Arc<dyn Clock>,
    /// Where detached work runs and what the run's bounds wait by.
    pub runtime: Arc<dyn Runtime>,
    /// Bounds every run (at most ten minutes).
    pub run_timeout: Duration,
    pub max_request_chars: usize,
    /// Text, tool-call, provider-block and reasoning JSON together (at most 1,000,000).
    pub max_output_chars: Option<usize>,
    /// More consecutive reasoning events than this is a loop: the stream is cut there.
    pub max_consecutive_reasoning: Option<u32>,
    pub caps: Caps,
    pub consumers: Vec<String>,
    pub result_retention: Duration,
    pub on_background_error: BackgroundErrorHandler,
    pub drain_limit: Duration,
}

impl std::fmt::Debug for StepConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepConfig")
            .field("run_timeout", &self.run_timeout)
            .finish_non_exhaustive()
    }
}

impl StepConfig {
    /// The defaults around what every runner needs: its ports, its client and the runtime
    /// it runs on (`TokioRuntime` natively).
    pub fn new(
        ports: GovernedPorts,
        client: Arc<dyn ModelClient>,
        runtime: Arc<dyn Runtime>,
    ) -> Self {
        Self {
            ports,
            client,
            clients: Default::default(),
            clock: Arc::new(SystemClock),
            runtime,
            run_timeout: Duration::from_secs(300),
            max_request_chars: 400_000,
            max_output_chars: None,
            max_consecutive_reasoning: None,
            caps: Caps::default(),
            consumers: Vec::new(),
            result_retention: Duration::from_secs(7 * 24 * 3600),
            on_background_error: crate::types::log_background_errors(),
            drain_limit: Duration::from_secs(600),
        }
    }
}

/// A call the host already planned and authorized: identities, versions, prices and controls
/// are the immutable originals.
#[derive(Clone, Debug, PartialEq)]
pub struct OperationCallInput {
    pub scope: CallerScope,
    pub root_key: String,
    pub operation_key: String,
    pub session_id: String,
    pub intent: String,
    pub input_revision: String,
    pub policy_version: String,
    pub price_version: String,
    pub output_contract_version: String,
    pub prices: Prices,
    pub controls: Controls,
    /// The call's original deadline (new calls only; replays answer after it).
    pub deadline_at: Timestamp,
    /// One of the runner's named clients; `None` is its default client.
    pub client: Option<String>,
}

/// What the lazy loader returns: registry-derived tools and the same tool choice as the
/// call's controls.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedRequest {
    pub system: Option<String>,
    pub messages: Vec<Msg>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: Option<ToolChoice>,
}

pub type RequestLoader =
    Box<dyn FnOnce() -> BoxFuture<'static, Result<LoadedRequest, crate::text::LoadError>> + Send>;

pub struct StepRun {
    pub call: OperationCallInput,
    /// Why this call was routed as it was (audited, never sent).
    pub rationale: String,
    pub cancel: Option<CancellationToken>,
    pub load_request: RequestLoader,
}

#[derive(Clone)]
pub struct GovernedStepRunner {
    engine: Arc<Engine>,
    config: Arc<StepConfig>,
}

impl std::fmt::Debug for GovernedStepRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GovernedStepRunner")
    }
}

/// Tool names: 1–64 of `[A-Za-z0-9_-]`.
pub(crate) fn check_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The loaded request refused as loaded: tools malformed or duplicated, the choice not the
/// planned one or not among the actual tools.
fn check_request(
    loaded: &LoadedRequest,
    controls: &Controls,
    max_chars: usize,
) -> Result<(), LoadFailure> {
    crate::text::check_messages(&loaded.messages, max_chars)?;
    // The whole request counts: messages, system and the tools' JSON.
    let chars = loaded
        .messages
        .iter()
        .map(|m| m.text.chars().count())
        .sum::<usize>()
        + loaded.system.as_ref().map_or(0, |s| s.chars().count())
        + loaded
            .tools
            .iter()
            .map(|t| serde_json::to_string(t).map_or(usize::MAX, |j| j.chars().count()))
            .fold(0usize, usize::saturating_add);
    if chars > max_chars {
        return Err(LoadFailure::Invalid);
    }
    let mut names = std::collections::HashSet::new();
    for tool in &loaded.tools {
        if !check_tool_name(&tool.name) || !names.insert(tool.name.as_str()) {
            return Err(LoadFailure::Invalid);
        }
    }
    if loaded.tool_choice != controls.tool_choice {
        return Err(LoadFailure::Invalid);
    }
    match &controls.tool_choice {
        Some(ToolChoice::Tool { name }) if !names.contains(name.as_str()) => {
            Err(LoadFailure::Invalid)
        }
        Some(_) if loaded.tools.is_empty() => Err(LoadFailure::Invalid),
        _ => Ok(()),
    }
}

impl GovernedStepRunner {
    pub fn new(config: StepConfig) -> Result<Self, GovernedError> {
        let max_output = config
            .max_output_chars
            .unwrap_or(crate::collector::MAX_OUTPUT_CHARS_CEILING);
        crate::text::check_clients(&config.client, &config.clients, max_output)?;
        if config.run_timeout.is_zero() || config.run_timeout > MAX_RUN_TIMEOUT {
            return Err(GovernedError::config(
                "run_timeout",
                "must be positive and at most ten minutes",
            ));
        }
        if config.max_request_chars == 0 {
            return Err(GovernedError::config(
                "max_request_chars",
                "must be positive",
            ));
        }
        if config.max_consecutive_reasoning == Some(0) {
            return Err(GovernedError::config(
                "max_consecutive_reasoning",
                "must be at least 1",
            ));
        }
        config.caps.check()?;
        crate::engine::check_bound("drain_limit", config.drain_limit)?;
        if config.result_retention < config.run_timeout {
            return Err(GovernedError::config(
                "result_retention",
                "must cover at least run_timeout, so recovery can still read the result",
            ));
        }
        let engine = Engine {
            ports: config.ports.clone(),
            clock: config.clock.clone(),
            runtime: config.runtime.clone(),
            retention_ms: i64::try_from(config.result_retention.as_millis()).unwrap_or(i64::MAX),
            on_background_error: config.on_background_error.clone(),
            drain_limit: config.drain_limit,
        };
        Ok(Self {
            engine: Arc::new(engine),
            config: Arc::new(config),
        })
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.engine.clock
    }

    pub(crate) fn ports(&self) -> &GovernedPorts {
        &self.engine.ports
    }

    pub(crate) fn on_background_error(&self) -> &BackgroundErrorHandler {
        &self.config.on_background_error
    }

    /// Runs the planned call once under its root.
    pub async fn run(&self, run: StepRun) -> Result<RunOutcome, GovernedError> {
        crate::engine::check_host_key("operation_key", &run.call.operation_key)?;
        self.run_unchecked(run).await
    }

    /// [`run`](Self::run) for the structured runner's own identifiers.
    pub(crate) async fn run_unchecked(&self, run: StepRun) -> Result<RunOutcome, GovernedError> {
        let call = run.call;
        check_id("root_key", &call.root_key, MAX_KEY)?;
        check_id("operation_key", &call.operation_key, MAX_KEY)?;
        check_id("session_id", &call.session_id, MAX_ID)?;
        check_id("input_revision", &call.input_revision, MAX_ID)?;
        check_id("intent", &call.intent, MAX_ID)?;
        check_versions([
            ("policy_version", &call.policy_version),
            ("price_version", &call.price_version),
            ("output_contract_version", &call.output_contract_version),
        ])?;
        call.prices.check()?;
        if run.rationale.len() > 4096 || run.rationale.chars().any(char::is_control) {
            return Err(GovernedError::input(
                "rationale",
                "must be at most 4096 bytes without control characters",
            ));
        }

        // The client and the controls are validated before anything is written.
        let client = Clients {
            default: self.config.client.clone(),
            named: self.config.clients.clone(),
        }
        .get(call.client.as_deref())
        .ok_or_else(|| GovernedError::input("client", "names no configured client"))?;
        let probe = ModelRequest {
            call: None,
            system: None,
            messages: vec![Msg::user("probe")],
            tools: Vec::new(),
            output: None,
            controls: Controls {
                tool_choice: None,
                ..call.controls.clone()
            },
        };
        client
            .validate(&probe)
            .map_err(|u| GovernedError::input(&u.field, u.reason))?;
        // A key already journaled under another root conflicts without touching this root; a
        // new call past its deadline is refused before any write.
        let existing = self
            .engine
            .ports
            .executions
            .execution(&call.scope, &call.operation_key)
            .await?;
        if let Some(existing) = &existing {
            let meta = crate::types::JournalEntry::from_record(existing)?.meta;
            if meta.identity.root_key.as_deref() != Some(call.root_key.as_str()) {
                return Err(GovernedError::Conflict {
                    field: "root_key".to_owned(),
                });
            }
        } else if call.deadline_at <= self.engine.clock.now() {
            return Err(GovernedError::Interrupted {
                kind: crate::types::Interruption::Deadline,
                store_failed: false,
            });
        }

        // The root slot, before the journal claim.
        match self
            .engine
            .ports
            .trees
            .reserve_call(&call.scope, &call.root_key, &call.operation_key)
            .await?
        {
            CallReservation::Reserved | CallReservation::AlreadyReserved => {}
            CallReservation::MissingRoot => {
                return Err(GovernedError::Root {
                    root_key: call.root_key,
                    state: "missing".to_owned(),
                });
            }
            CallReservation::RootNotActive(status) => {
                return Err(GovernedError::Root {
                    root_key: call.root_key,
                    state: status.as_str().to_owned(),
                });
            }
        }

        let now = self.engine.clock.now();
        let remaining = call.deadline_at.as_millis().saturating_sub(now.as_millis());
        let start = self.engine.runtime.monotonic();
        let deadline = start + Duration::from_millis(u64::try_from(remaining).unwrap_or(0));
        let meta = CallMeta {
            identity: Identity {
                session_id: call.session_id.clone(),
                intent: call.intent.clone(),
                input_revision: call.input_revision.clone(),
                policy_version: call.policy_version.clone(),
                price_version: call.price_version.clone(),
                output_contract_version: call.output_contract_version.clone(),
                root_key: Some(call.root_key.clone()),
                client: call.client.clone(),
                tool_choice: call.controls.tool_choice.clone(),
            },
            controls: call.controls.clone(),
            prices: call.prices,
            day: day_of(now),
            call_id: call_id(&call.scope, &call.operation_key),
            provider: client.provider_name().to_owned(),
            consumers: self.config.consumers.clone(),
            rationale: Some(run.rationale),
            refusal: None,
            result: None,
        };
        let plan = Plan {
            scope: call.scope.clone(),
            operation_key: call.operation_key.clone(),
            meta,
            deadline_at: call.deadline_at,
            deadline,
            timeout: Some(start + self.config.run_timeout),
            caps: self.config.caps,
            max_output_chars: self
                .config
                .max_output_chars
                .unwrap_or(crate::collector::MAX_OUTPUT_CHARS_CEILING),
            mode: Mode::Step {
                max_consecutive_reasoning: self.config.max_consecutive_reasoning,
            },
            refusal: None,
            client,
        };
        let controls = call.controls.clone();
        let max_chars = self.config.max_request_chars;
        let loader = run.load_request;
        let load = Box::pin(async move {
            let loaded = loader().await.map_err(|_| LoadFailure::Input)?;
            check_request(&loaded, &controls, max_chars)?;
            Ok(ModelRequest {
                call: None,
                system: loaded.system,
                messages: loaded.messages,
                tools: loaded.tools,
                output: None,
                controls,
            })
        });
        self.engine
            .execute(plan, load, run.cancel.unwrap_or_default())
            .await
    }

    /// The call bound to its registered root: `None` when the root never admitted it.
    pub async fn read(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
    ) -> Result<Option<CallView>, GovernedError> {
        let ports = &self.engine.ports;
        if !ports.trees.has_call(scope, root_key, operation_key).await? {
            return Ok(None);
        }
        if let Some(view) = self.engine.read(scope, operation_key).await? {
            let bound = view
                .record
                .as_ref()
                .is_some_and(|r| r.meta.identity.root_key.as_deref() == Some(root_key));
            return Ok(bound.then_some(view));
        }
        // Admitted without a journal record: the root says what that means.
        let active = ports
            .trees
            .root(scope, root_key)
            .await?
            .is_some_and(|r| r.status == RootStatus::Active);
        Ok(Some(CallView {
            state: if active {
                ViewState::InProgress
            } else {
                ViewState::ReconciliationRequired
            },
            record: None,
            output: Output::None,
            receipt: None,
            root_receipt: None,
        }))
    }

    /// Accounting-only recovery bound to the root: repairs missing receipts, loads nothing,
    /// dispatches nothing.
    pub async fn recover(
        &self,
        scope: &CallerScope,
        root_key: &str,
        operation_key: &str,
        lease: Duration,
    ) -> Result<Option<CallView>, GovernedError> {
        if !self
            .engine
            .ports
            .trees
            .has_call(scope, root_key, operation_key)
            .await?
        {
            return Ok(None);
        }
        // Only the journal row is needed to see which root the call belongs to.
        let journaled_root = match self
            .engine
            .ports
            .executions
            .execution(scope, operation_key)
            .await?
        {
            Some(record) => Some(
                crate::types::JournalEntry::from_record(&record)?
                    .meta
                    .identity
                    .root_key,
            ),
            None => None,
        };
        if journaled_root.is_some_and(|root| root.as_deref() != Some(root_key)) {
            return Ok(None);
        }
        self.engine.recover(scope, operation_key, lease).await
    }

    pub async fn reconcile_expired(
        &self,
        scope: &CallerScope,
        limit: Option<u32>,
    ) -> Result<Vec<String>, GovernedError> {
        self.engine
            .reconcile_expired(scope, limit, Duration::from_secs(60))
            .await
    }

    /// Acknowledges exact usage of the root's calls whose completion and root accounting are
    /// durable.
    pub async fn reconcile_usage(
        &self,
        scope: &CallerScope,
        root_key: &str,
        query: UsageQuery,
        skip: Option<&(dyn Fn(&str) -> bool + Send + Sync)>,
    ) -> Result<UsageReconciliation, GovernedError> {
        self.engine
            .reconcile_usage(scope, query, Some(root_key), skip)
            .await
    }
}
