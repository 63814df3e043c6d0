//! The text/JSON single-call runner: tool-free, one key one call.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use herma_core::CallerScope;
use herma_core::call::{Controls, ModelRequest, Msg, OutputSchema, ToolChoice};
use herma_core::time::Clock;
use herma_providers::single::ModelClient;
use herma_store::governed::GovernedPorts;
use herma_store::{Runtime, SystemClock};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::collector::MAX_OUTPUT_CHARS_CEILING;
use crate::engine::{
    Engine, LoadFailure, MAX_ID, Mode, Plan, Validator, call_id, check_bound, check_host_key,
    check_id, day_of,
};
use crate::types::{
    BackgroundErrorHandler, CallMeta, CallView, Caps, Clients, GovernedError, Identity, Prices,
    RunOutcome, UsageQuery, UsageReconciliation,
};

/// A native JSON output contract: the provider is asked for `schema`, and `validate` must
/// return true of the parsed output (synchronously) for it to count.
#[derive(Clone)]
pub struct OutputContract {
    pub name: String,
    pub schema: Value,
    pub validate: Validator,
}

impl std::fmt::Debug for OutputContract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputContract")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The runner's configuration, snapshotted (moved in) at construction.
#[derive(Clone)]
pub struct SingleCallConfig {
    /// Versions describing immutable policy, prices and output contract: bump one whenever
    /// what it names changes.
    pub policy_version: String,
    pub price_version: String,
    pub output_contract_version: String,
    pub prices: Prices,
    pub caps: Caps,
    /// Financial projections that consume the charges (recorded with each charge).
    pub consumers: Vec<String>,
    pub system: Option<String>,
    pub model: String,
    pub max_tokens: u32,
    pub max_input_chars: usize,
    pub max_output_chars: usize,
    pub deadline: Duration,
    pub result_retention: Duration,
    /// The default client.
    pub client: Arc<dyn ModelClient>,
    /// Named alternatives a policy may choose (every one single-dispatch).
    pub clients: std::collections::BTreeMap<String, Arc<dyn ModelClient>>,
    /// Metadata-only failures after a run returned (the background drain).
    pub on_background_error: BackgroundErrorHandler,
    /// Overrides the policy's (or the provider's) caching, `Some(false)` included; `None`
    /// keeps the policy's choice.
    pub cache: Option<bool>,
    /// A trusted policy choosing the model and caching per intent (or refusing); without one,
    /// `model` and `cache` apply to every call.
    pub policy: Option<crate::types::PolicyHandle>,
    pub output: Option<OutputContract>,
    pub temperature: Option<f64>,
    /// Refused: the text runner is tool-free (use the step runner).
    pub tool_choice: Option<ToolChoice>,
    pub ports: GovernedPorts,
    pub clock: Arc<dyn Clock>,
    /// Where detached work runs and what the deadline waits by.
    pub runtime: Arc<dyn Runtime>,
    /// How long a dispatched stream is drained at most.
    pub drain_limit: Duration,
}

impl std::fmt::Debug for SingleCallConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleCallConfig")
            .field("policy_version", &self.policy_version)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl SingleCallConfig {
    /// Sane defaults around the four things every runner needs (the runtime it runs on is
    /// `TokioRuntime` natively).
    pub fn new(
        ports: GovernedPorts,
        client: Arc<dyn ModelClient>,
        model: &str,
        runtime: Arc<dyn Runtime>,
    ) -> Self {
        Self {
            policy_version: "policy-1".to_owned(),
            price_version: "prices-1".to_owned(),
            output_contract_version: "output-1".to_owned(),
            prices: Prices::default(),
            caps: Caps::default(),
            consumers: Vec::new(),
            system: None,
            model: model.to_owned(),
            max_tokens: 1024,
            max_input_chars: 200_000,
            max_output_chars: 100_000,
            deadline: Duration::from_secs(120),
            result_retention: Duration::from_secs(7 * 24 * 3600),
            client,
            clients: Default::default(),
            on_background_error: crate::types::log_background_errors(),
            cache: None,
            policy: None,
            output: None,
            temperature: None,
            tool_choice: None,
            ports,
            clock: Arc::new(SystemClock),
            runtime,
            drain_limit: Duration::from_secs(600),
        }
    }
}

/// The host's loader failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError(pub String);

pub type InputLoader = Box<dyn FnOnce() -> BoxFuture<'static, Result<Vec<Msg>, LoadError>> + Send>;

/// One run: a verified scope and the host's identities for the call.
pub struct TextRun {
    pub scope: CallerScope,
    pub session_id: String,
    pub operation_key: String,
    pub input_revision: String,
    pub intent: String,
    pub cancel: Option<CancellationToken>,
    /// Refused when set: the text runner is tool-free.
    pub tool_choice: Option<ToolChoice>,
    pub load_input: InputLoader,
}

pub(crate) fn check_runtime(
    client: &Arc<dyn ModelClient>,
    max_output_chars: usize,
) -> Result<(), GovernedError> {
    if client.attempts_per_dispatch() != 1 {
        return Err(GovernedError::config(
            "client",
            "retries automatically; use a single-dispatch client (SingleDispatchClient)",
        ));
    }
    if max_output_chars == 0 || max_output_chars > MAX_OUTPUT_CHARS_CEILING {
        return Err(GovernedError::config(
            "max_output_chars",
            format!("must be between 1 and {MAX_OUTPUT_CHARS_CEILING}"),
        ));
    }
    Ok(())
}

/// Every client must dispatch once; named ones are reported by name.
pub(crate) fn check_clients(
    default: &Arc<dyn ModelClient>,
    named: &std::collections::BTreeMap<String, Arc<dyn ModelClient>>,
    max_output_chars: usize,
) -> Result<(), GovernedError> {
    check_runtime(default, max_output_chars)?;
    for (name, client) in named {
        check_runtime(client, max_output_chars).map_err(|e| match e {
            GovernedError::Config { reason, .. } => {
                GovernedError::config(&format!("clients.{name}"), reason)
            }
            other => other,
        })?;
    }
    Ok(())
}

pub(crate) fn check_versions(versions: [(&str, &str); 3]) -> Result<(), GovernedError> {
    for (field, value) in versions {
        if value.trim().is_empty() {
            return Err(GovernedError::config(field, "must not be empty"));
        }
    }
    Ok(())
}

/// Validates loaded messages: text user/assistant turns within the character budget.
pub(crate) fn check_messages(messages: &[Msg], max_chars: usize) -> Result<(), LoadFailure> {
    if messages.is_empty() {
        return Err(LoadFailure::Invalid);
    }
    let chars: usize = messages.iter().map(|m| m.text.chars().count()).sum();
    if chars > max_chars {
        return Err(LoadFailure::Invalid);
    }
    Ok(())
}

#[derive(Clone)]
pub struct SingleCallRunner {
    engine: Arc<Engine>,
    config: Arc<SingleCallConfig>,
}

impl std::fmt::Debug for SingleCallRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SingleCallRunner")
    }
}

impl SingleCallRunner {
    pub fn new(config: SingleCallConfig) -> Result<Self, GovernedError> {
        check_versions([
            ("policy_version", &config.policy_version),
            ("price_version", &config.price_version),
            ("output_contract_version", &config.output_contract_version),
        ])?;
        check_clients(&config.client, &config.clients, config.max_output_chars)?;
        if config.tool_choice.is_some() {
            return Err(GovernedError::config(
                "tool_choice",
                "the text runner is tool-free; use GovernedStepRunner for tool choices",
            ));
        }
        config.prices.check()?;
        config.caps.check()?;
        if config.caps.root.is_some() {
            return Err(GovernedError::config(
                "caps.root",
                "the text runner has no operation root",
            ));
        }
        check_bound("deadline", config.deadline)?;
        check_bound("drain_limit", config.drain_limit)?;
        if config.result_retention < config.deadline {
            return Err(GovernedError::config(
                "result_retention",
                "must cover at least the deadline, so recovery can still read the result",
            ));
        }
        if config.max_input_chars == 0 {
            return Err(GovernedError::config("max_input_chars", "must be positive"));
        }
        // Provider validation before any claim: the configuration itself must be supported.
        let probe = ModelRequest {
            call: None,
            system: config.system.clone(),
            messages: vec![Msg::user("probe")],
            tools: Vec::new(),
            output: config.output.as_ref().map(|o| OutputSchema {
                name: o.name.clone(),
                schema: o.schema.clone(),
            }),
            controls: controls(&config),
        };
        config
            .client
            .validate(&probe)
            .map_err(|u| GovernedError::config(&u.field, u.reason))?;
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

    /// Runs the call for `run.operation_key` once. A key seen before returns its status or
    /// original envelope without loading input or dispatching.
    pub async fn run(&self, run: TextRun) -> Result<RunOutcome, GovernedError> {
        check_id("session_id", &run.session_id, MAX_ID)?;
        check_host_key("operation_key", &run.operation_key)?;
        check_id("input_revision", &run.input_revision, MAX_ID)?;
        check_id("intent", &run.intent, MAX_ID)?;
        if run.tool_choice.is_some() {
            return Err(GovernedError::input(
                "tool_choice",
                "the text runner is tool-free; use GovernedStepRunner",
            ));
        }
        let config = &self.config;
        let now = self.engine.clock.now();
        let deadline_ms = i64::try_from(config.deadline.as_millis()).unwrap_or(i64::MAX);
        let resolved = crate::types::apply_policy(
            config.policy.as_ref(),
            &run.intent,
            controls(config),
            config.cache,
        );
        let call_controls = resolved.controls;
        let clients = Clients {
            default: config.client.clone(),
            named: config.clients.clone(),
        };
        // A client the policy names but the runner lacks is a refusal, like any other.
        let (client, refusal) = match clients.get(resolved.client.as_deref()) {
            Some(client) => (client, resolved.refusal),
            None => (
                config.client.clone(),
                Some("policy:unknown_client".to_owned()),
            ),
        };
        let meta = CallMeta {
            identity: Identity {
                session_id: run.session_id.clone(),
                intent: run.intent.clone(),
                input_revision: run.input_revision.clone(),
                policy_version: config.policy_version.clone(),
                price_version: config.price_version.clone(),
                output_contract_version: config.output_contract_version.clone(),
                root_key: None,
                client: resolved.client.clone(),
                tool_choice: None,
            },
            controls: call_controls.clone(),
            prices: config.prices,
            day: day_of(now),
            call_id: call_id(&run.scope, &run.operation_key),
            provider: client.provider_name().to_owned(),
            consumers: config.consumers.clone(),
            rationale: None,
            refusal: None,
            result: None,
        };
        let plan = Plan {
            scope: run.scope,
            operation_key: run.operation_key,
            meta,
            deadline_at: now.plus_millis(deadline_ms),
            deadline: self.engine.runtime.monotonic() + config.deadline,
            timeout: None,
            caps: config.caps,
            max_output_chars: config.max_output_chars,
            mode: Mode::Text {
                validator: config.output.as_ref().map(|o| o.validate.clone()),
            },
            refusal,
            client,
        };
        let config = self.config.clone();
        let loader = run.load_input;
        let load = Box::pin(async move {
            let messages = loader().await.map_err(|_| LoadFailure::Input)?;
            check_messages(&messages, config.max_input_chars)?;
            Ok(ModelRequest {
                call: None,
                system: config.system.clone(),
                messages,
                tools: Vec::new(),
                output: config.output.as_ref().map(|o| OutputSchema {
                    name: o.name.clone(),
                    schema: o.schema.clone(),
                }),
                controls: call_controls,
            })
        });
        self.engine
            .execute(plan, load, run.cancel.unwrap_or_default())
            .await
    }

    /// `None` when the key was never claimed.
    pub async fn read(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> Result<Option<CallView>, GovernedError> {
        self.engine.read(scope, operation_key).await
    }

    /// Accounting-only recovery under a lease: never loads input or dispatches.
    pub async fn recover(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        lease: Duration,
    ) -> Result<Option<CallView>, GovernedError> {
        self.engine.recover(scope, operation_key, lease).await
    }

    /// Fences overdue prepared/dispatching calls; call it from the host's scheduler.
    pub async fn reconcile_expired(
        &self,
        scope: &CallerScope,
        limit: Option<u32>,
    ) -> Result<Vec<String>, GovernedError> {
        self.engine
            .reconcile_expired(scope, limit, Duration::from_secs(60))
            .await
    }

    /// Acknowledges exact usage whose accounting (or not-dispatched proof) is durable. Restart
    /// each pass from the beginning (`after: None`) to see late commits.
    pub async fn reconcile_usage(
        &self,
        scope: &CallerScope,
        query: UsageQuery,
        skip: Option<&(dyn Fn(&str) -> bool + Send + Sync)>,
    ) -> Result<UsageReconciliation, GovernedError> {
        self.engine.reconcile_usage(scope, query, None, skip).await
    }
}

fn controls(config: &SingleCallConfig) -> Controls {
    Controls {
        model: config.model.clone(),
        max_tokens: config.max_tokens,
        temperature: config.temperature,
        tool_choice: None,
        cache: config.cache,
    }
}
