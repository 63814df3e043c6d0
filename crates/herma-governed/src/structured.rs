//! The structured single-call runner: the text runner's call shape for a forced tool acting as
//! an extraction schema, on the step runner under a root it owns.

use std::sync::Arc;
use std::time::Duration;

use herma_core::CallerScope;
use herma_core::call::{Controls, ModelRequest, Msg, ToolChoice, ToolSpec};
use herma_core::time::Clock;
use herma_providers::single::ModelClient;
use herma_store::governed::{GovernedPorts, RootOpen, RootRecord, RootStatus};
use herma_store::{Runtime, SystemClock};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::engine::{MAX_ID, MAX_KEY, check_id};
use crate::step::{
    GovernedStepRunner, LoadedRequest, OperationCallInput, StepConfig, StepRun, check_tool_name,
};
use crate::text::{InputLoader, check_versions};
use crate::types::{
    BackgroundError, BackgroundErrorHandler, CallView, CapMode, Caps, GovernedError, Output,
    Prices, RunOutcome, UsageQuery, UsageReconciliation, ViewState,
};

/// The reserved identifier prefix: do not use it for other keys.
pub const ID_PREFIX: &str = "alma-structured-v1";

/// `alma-structured-v1:<kind>:<sha256>` over the scope and the host key, length-prefixed and
/// domain-separated: bounded, and never embedding the key.
pub fn structured_id(kind: &str, scope: &CallerScope, host_key: &str) -> String {
    let mut h = Sha256::new();
    for part in [ID_PREFIX, kind, scope.as_str(), host_key] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    format!("{ID_PREFIX}:{kind}:{}", hex::encode(h.finalize()))
}

#[derive(Clone)]
pub struct StructuredConfig {
    pub policy_version: String,
    pub price_version: String,
    pub output_contract_version: String,
    pub prices: Prices,
    pub caps: Caps,
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
    /// Named alternatives the policy may choose.
    pub clients: std::collections::BTreeMap<String, Arc<dyn ModelClient>>,
    pub on_background_error: BackgroundErrorHandler,
    /// Overrides the policy's caching (`Some(false)` included); `None` keeps its choice.
    pub cache: Option<bool>,
    /// A trusted policy choosing the model and caching per intent (or refusing).
    pub policy: Option<crate::types::PolicyHandle>,
    pub temperature: Option<f64>,
    /// The trusted registry's tools (validated and deduplicated at construction).
    pub tools: Vec<ToolSpec>,
    pub tool_choice: Option<ToolChoice>,
    pub max_consecutive_reasoning: Option<u32>,
    pub ports: GovernedPorts,
    pub clock: Arc<dyn Clock>,
    /// Where detached work runs and what the deadline waits by.
    pub runtime: Arc<dyn Runtime>,
    pub drain_limit: Duration,
}

impl std::fmt::Debug for StructuredConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructuredConfig")
            .field("policy_version", &self.policy_version)
            .finish_non_exhaustive()
    }
}

impl StructuredConfig {
    pub fn new(
        ports: GovernedPorts,
        client: Arc<dyn ModelClient>,
        model: &str,
        tools: Vec<ToolSpec>,
        tool_choice: Option<ToolChoice>,
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
            temperature: None,
            tools,
            tool_choice,
            max_consecutive_reasoning: None,
            ports,
            clock: Arc::new(SystemClock),
            runtime,
            drain_limit: Duration::from_secs(600),
        }
    }
}

pub struct StructuredRun {
    pub scope: CallerScope,
    pub session_id: String,
    /// The host's key (never stored as such: identifiers are derived from it).
    pub operation_key: String,
    pub input_revision: String,
    pub intent: String,
    pub load_input: InputLoader,
    pub cancel: Option<CancellationToken>,
}

/// What `reconcile_expired` fenced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpiredReport {
    pub roots: Vec<String>,
    pub executions: Vec<String>,
}

#[derive(Clone)]
pub struct StructuredCallRunner {
    step: GovernedStepRunner,
    config: Arc<StructuredConfig>,
    config_digest: String,
}

impl std::fmt::Debug for StructuredCallRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StructuredCallRunner")
    }
}

fn controls(config: &StructuredConfig) -> Controls {
    Controls {
        model: config.model.clone(),
        max_tokens: config.max_tokens,
        temperature: config.temperature,
        tool_choice: config.tool_choice.clone(),
        cache: config.cache,
    }
}

/// SHA-256 over the canonical JSON of every configuration datum (capabilities excluded:
/// bump `policy_version` when their behaviour changes).
fn digest_config(config: &StructuredConfig) -> String {
    let data = json!({
        "policy_version": config.policy_version,
        "price_version": config.price_version,
        "output_contract_version": config.output_contract_version,
        "prices": config.prices,
        "caps": config.caps,
        "consumers": config.consumers,
        "system": config.system,
        "controls": controls(config),
        "max_input_chars": config.max_input_chars,
        "max_output_chars": config.max_output_chars,
        "deadline_ms": config.deadline.as_millis() as u64,
        "result_retention_ms": config.result_retention.as_millis() as u64,
        "tools": config.tools,
        "max_consecutive_reasoning": config.max_consecutive_reasoning,
        "provider": config.client.provider_name(),
        "clients": config
            .clients
            .iter()
            .map(|(name, c)| (name.clone(), c.provider_name()))
            .collect::<std::collections::BTreeMap<_, _>>(),
    });
    hex::encode(Sha256::digest(canonical(&data).as_bytes()))
}

/// JSON with object keys sorted, so the digest does not depend on insertion order.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<_> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&map[*k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

impl StructuredCallRunner {
    pub fn new(mut config: StructuredConfig) -> Result<Self, GovernedError> {
        check_versions([
            ("policy_version", &config.policy_version),
            ("price_version", &config.price_version),
            ("output_contract_version", &config.output_contract_version),
        ])?;
        config.prices.check()?;
        if config.deadline.is_zero() || config.deadline > crate::step::MAX_RUN_TIMEOUT {
            return Err(GovernedError::config(
                "deadline",
                "must be positive and at most ten minutes",
            ));
        }
        // Tools: valid names, duplicates of the same spec dropped, conflicting ones refused.
        let mut tools: Vec<ToolSpec> = Vec::new();
        for (i, tool) in config.tools.iter().enumerate() {
            if !check_tool_name(&tool.name) {
                return Err(GovernedError::config(
                    &format!("tools[{i}].name"),
                    "must be 1-64 of A-Z a-z 0-9 _ -",
                ));
            }
            match tools.iter().find(|t| t.name == tool.name) {
                Some(existing) if existing == tool => {}
                Some(_) => {
                    return Err(GovernedError::config(
                        &format!("tools[{i}]"),
                        format!("`{}` is declared twice with different specs", tool.name),
                    ));
                }
                None => tools.push(tool.clone()),
            }
        }
        config.tools = tools;
        if let Some(choice) = &config.tool_choice {
            let known = match choice {
                ToolChoice::Tool { name } => config.tools.iter().any(|t| &t.name == name),
                _ => !config.tools.is_empty(),
            };
            if !known {
                return Err(GovernedError::config(
                    "tool_choice",
                    "must name one of the configured tools",
                ));
            }
        }
        let probe = ModelRequest {
            call: None,
            system: config.system.clone(),
            messages: vec![Msg::user("probe")],
            tools: config.tools.clone(),
            output: None,
            controls: controls(&config),
        };
        config
            .client
            .validate(&probe)
            .map_err(|u| GovernedError::config(&u.field, u.reason))?;
        let mut step = StepConfig::new(
            config.ports.clone(),
            config.client.clone(),
            config.runtime.clone(),
        );
        step.clients = config.clients.clone();
        step.clock = config.clock.clone();
        step.run_timeout = config.deadline;
        step.max_request_chars = config.max_input_chars;
        step.max_output_chars = Some(config.max_output_chars);
        step.max_consecutive_reasoning = config.max_consecutive_reasoning;
        step.caps = config.caps;
        step.consumers = config.consumers.clone();
        step.result_retention = config.result_retention;
        step.on_background_error = config.on_background_error.clone();
        step.drain_limit = config.drain_limit;
        let step = GovernedStepRunner::new(step)?;
        let config_digest = digest_config(&config);
        Ok(Self {
            step,
            config: Arc::new(config),
            config_digest,
        })
    }

    fn binding(&self, run: &StructuredRun) -> Value {
        json!({
            "session_id": run.session_id,
            "intent": run.intent,
            "input_revision": run.input_revision,
            "config": self.config_digest,
        })
    }

    pub async fn run(&self, run: StructuredRun) -> Result<RunOutcome, GovernedError> {
        check_id("session_id", &run.session_id, MAX_ID)?;
        check_id("operation_key", &run.operation_key, MAX_KEY)?;
        check_id("input_revision", &run.input_revision, MAX_ID)?;
        check_id("intent", &run.intent, MAX_ID)?;
        let ports = self.step.ports().clone();
        let root_key = structured_id("root", &run.scope, &run.operation_key);
        let call_key = structured_id("call", &run.scope, &run.operation_key);
        let binding = self.binding(&run);
        let now = self.step.clock().now();

        let resolved = crate::types::apply_policy(
            self.config.policy.as_ref(),
            &run.intent,
            controls(&self.config),
            self.config.cache,
        );
        let call_controls = resolved.controls;
        let chosen_client = resolved.client;
        let policy_refusal = match &chosen_client {
            Some(name) if !self.config.clients.contains_key(name) => {
                Some("policy:unknown_client".to_owned())
            }
            _ => resolved.refusal,
        };
        let existing = ports.trees.root(&run.scope, &root_key).await?;
        let root = match existing {
            Some(root) => {
                compare_binding(&root.binding, &binding)?;
                if root.status != RootStatus::Active
                    || ports
                        .trees
                        .has_call(&run.scope, &root_key, &call_key)
                        .await?
                {
                    // A replay: the root's view, never a second call.
                    let view = self.read(&run.scope, &run.operation_key).await?;
                    return Ok(replay(view));
                }
                root
            }
            None => {
                // Policy and the session/day block preflight, before any root exists.
                let refusal = match policy_refusal {
                    Some(refusal) => Some(refusal),
                    None => self.preflight(&run).await?,
                };
                if let Some(refusal) = refusal {
                    return Ok(RunOutcome {
                        view: CallView {
                            state: ViewState::NotDispatched,
                            record: None,
                            output: Output::None,
                            receipt: None,
                            root_receipt: None,
                        },
                        replayed: false,
                        invalid_reason: None,
                        reasoning_loop: false,
                        warnings: Vec::new(),
                        refusal: Some(refusal),
                    });
                }
                let deadline_ms =
                    i64::try_from(self.config.deadline.as_millis()).unwrap_or(i64::MAX);
                let record = RootRecord {
                    scope: run.scope.clone(),
                    root_key: root_key.clone(),
                    binding: binding.clone(),
                    status: RootStatus::Active,
                    deadline_at: now.plus_millis(deadline_ms),
                    reserved_calls: 0,
                    settled_micros: 0,
                    receipts: 0,
                    created_at: now,
                    closed_at: None,
                };
                match ports.trees.open_root(&record).await? {
                    RootOpen::Opened(root) => root,
                    RootOpen::Existing(root) => {
                        compare_binding(&root.binding, &binding)?;
                        root
                    }
                }
            }
        };

        let config = self.config.clone();
        let loader = run.load_input;
        let outcome = self
            .step
            .run_unchecked(StepRun {
                call: OperationCallInput {
                    scope: run.scope.clone(),
                    root_key: root_key.clone(),
                    operation_key: call_key,
                    session_id: run.session_id,
                    intent: run.intent,
                    input_revision: run.input_revision,
                    policy_version: config.policy_version.clone(),
                    price_version: config.price_version.clone(),
                    output_contract_version: config.output_contract_version.clone(),
                    prices: config.prices,
                    controls: call_controls,
                    deadline_at: root.deadline_at,
                    client: chosen_client,
                },
                rationale: "structured".to_owned(),
                cancel: run.cancel,
                load_request: Box::new(move || {
                    Box::pin(async move {
                        let messages = loader().await?;
                        Ok(LoadedRequest {
                            system: config.system.clone(),
                            messages,
                            tools: config.tools.clone(),
                            tool_choice: config.tool_choice.clone(),
                        })
                    })
                }),
            })
            .await;

        // Closure is detached housekeeping: a failure never hides the result.
        let trees = ports.trees.clone();
        let handler = self.step.on_background_error().clone();
        let scope = run.scope;
        let clock = self.step.clock().clone();
        self.config.runtime.spawn(Box::pin(async move {
            if let Err(err) = trees.close_root(&scope, &root_key, clock.now()).await {
                handler(&BackgroundError {
                    operation_key: root_key,
                    stage: "close_root",
                    message: err.to_string(),
                });
            }
        }));
        outcome
    }

    async fn preflight(&self, run: &StructuredRun) -> Result<Option<String>, GovernedError> {
        let caps = self.config.caps;
        let blocking = |c: Option<crate::types::Cap>| c.filter(|c| c.mode == CapMode::Block);
        let (session, day) = (blocking(caps.session), blocking(caps.day));
        if session.is_none() && day.is_none() {
            return Ok(None);
        }
        let now = self.step.clock().now();
        let spend = self
            .step
            .ports()
            .spend
            .peek(&run.scope, &run.session_id, &crate::engine::day_of(now))
            .await?;
        if session.is_some_and(|c| spend.session_micros >= c.limit_micros) {
            return Ok(Some("cap:session".to_owned()));
        }
        if day.is_some_and(|c| spend.day_micros >= c.limit_micros) {
            return Ok(Some("cap:day".to_owned()));
        }
        Ok(None)
    }

    /// The call of `operation_key` (the host key). Without an execution record the root
    /// decides: active → in progress; closed or expired with no admitted call → not
    /// dispatched (no record, no cause); an admitted call without a record → reconciliation.
    pub async fn read(
        &self,
        scope: &CallerScope,
        operation_key: &str,
    ) -> Result<Option<CallView>, GovernedError> {
        let ports = self.step.ports();
        let root_key = structured_id("root", scope, operation_key);
        let call_key = structured_id("call", scope, operation_key);
        let Some(root) = ports.trees.root(scope, &root_key).await? else {
            return Ok(None);
        };
        if let Some(view) = self.step.read(scope, &root_key, &call_key).await?
            && view.record.is_some()
        {
            return Ok(Some(view));
        }
        let state = if root.status == RootStatus::Active {
            ViewState::InProgress
        } else if root.reserved_calls == 0 {
            ViewState::NotDispatched
        } else {
            ViewState::ReconciliationRequired
        };
        Ok(Some(CallView {
            state,
            record: None,
            output: Output::None,
            receipt: None,
            root_receipt: None,
        }))
    }

    pub async fn recover(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        lease: Duration,
    ) -> Result<Option<CallView>, GovernedError> {
        let root_key = structured_id("root", scope, operation_key);
        let call_key = structured_id("call", scope, operation_key);
        match self
            .step
            .recover(scope, &root_key, &call_key, lease)
            .await?
        {
            Some(view) => Ok(Some(view)),
            // Nothing journaled: the root says what that means.
            None => self.read(scope, operation_key).await,
        }
    }

    pub async fn reconcile_usage(
        &self,
        scope: &CallerScope,
        operation_key: &str,
        query: UsageQuery,
    ) -> Result<UsageReconciliation, GovernedError> {
        let root_key = structured_id("root", scope, operation_key);
        self.step
            .reconcile_usage(scope, &root_key, query, None)
            .await
    }

    /// Expires overdue roots and fences overdue executions of the whole scope.
    pub async fn reconcile_expired(
        &self,
        scope: &CallerScope,
        limit: Option<u32>,
    ) -> Result<ExpiredReport, GovernedError> {
        let limit = limit
            .unwrap_or(crate::types::DEFAULT_PAGE)
            .clamp(1, crate::types::MAX_PAGE);
        let now = self.step.clock().now();
        let roots = self
            .step
            .ports()
            .trees
            .expire_roots(scope, now, limit)
            .await?
            .into_iter()
            .map(|r| r.root_key)
            .collect();
        let executions = self.step.reconcile_expired(scope, Some(limit)).await?;
        Ok(ExpiredReport { roots, executions })
    }
}

fn replay(view: Option<CallView>) -> RunOutcome {
    RunOutcome {
        view: view.unwrap_or(CallView {
            state: ViewState::InProgress,
            record: None,
            output: Output::None,
            receipt: None,
            root_receipt: None,
        }),
        replayed: true,
        invalid_reason: None,
        reasoning_loop: false,
        warnings: Vec::new(),
        refusal: None,
    }
}

/// The first binding field that differs (the deadline is not part of it).
fn compare_binding(stored: &Value, new: &Value) -> Result<(), GovernedError> {
    for field in ["session_id", "intent", "input_revision", "config"] {
        if stored.get(field) != new.get(field) {
            return Err(GovernedError::Conflict {
                field: field.to_owned(),
            });
        }
    }
    Ok(())
}
