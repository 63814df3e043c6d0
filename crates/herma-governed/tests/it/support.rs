//! Test support: the three backends, a scripted provider that counts dispatches, a store
//! wrapper that fails from its n-th write (a crash), and small builders.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use herma_core::call::{ModelEvent, ModelRequest, StopReason, Unsupported, Usage};
use herma_core::time::ManualClock;
use herma_core::wire::Protocol;
use herma_core::{CallerScope, Timestamp};
use herma_governed::Prices;
use herma_governed::ports::*;
use herma_providers::single::{EventStream, ModelClient, ProviderError};
use herma_store::{MemoryGovernedStore, StoreError, StoreResult};

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Memory,
    Sqlite,
    Postgres,
}

/// Fresh ports on a backend.
pub async fn ports(backend: Backend) -> GovernedPorts {
    match backend {
        Backend::Memory => GovernedPorts::uniform(Arc::new(MemoryGovernedStore::new())),
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("governed.db");
            let store = herma_store_sqlite::open_migrated(path.to_str().unwrap())
                .await
                .unwrap();
            std::mem::forget(dir);
            GovernedPorts::uniform(Arc::new(store))
        }
        Backend::Postgres => {
            GovernedPorts::uniform(Arc::new(herma_store_postgres::testing::fresh_store().await))
        }
    }
}

/// One test per backend: `on_all_backends!(name);` runs `async fn name(Backend)` three times.
#[macro_export]
macro_rules! on_all_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name($crate::support::Backend::Memory).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::support::Backend::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::support::Backend::Postgres).await
                }
            }
        )*
    };
}

pub fn scope() -> CallerScope {
    herma_store::conformance::fresh_scope()
}

/// 2026-11-30T10:00:00Z.
pub fn clock() -> Arc<ManualClock> {
    ManualClock::at(1_796_032_800_000)
}

pub fn prices() -> Prices {
    Prices {
        input_per_mtok: 3_000_000,
        output_per_mtok: 15_000_000,
        cache_read_per_mtok: 300_000,
        cache_write_per_mtok: 0,
    }
}

pub fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// What one dispatch streams.
#[derive(Clone, Debug)]
pub enum Item {
    Event(ModelEvent),
    Fail(ProviderError),
    /// Never yields again (a hung provider).
    Hang,
    /// Waits before the next item.
    Pause(Duration),
}

pub fn ev(event: ModelEvent) -> Item {
    Item::Event(event)
}

/// A plain successful text answer.
pub fn text_answer(text: &str, used: Usage) -> Vec<Item> {
    vec![
        ev(ModelEvent::Reference("resp_1".into())),
        ev(ModelEvent::TextDelta(text.into())),
        ev(ModelEvent::Stop(StopReason::EndTurn)),
        ev(ModelEvent::Usage(used)),
    ]
}

/// A provider in process: every dispatch takes the next script (or the default), counted.
pub struct ScriptedClient {
    kind: Protocol,
    attempts: u32,
    /// When false, `validate` accepts everything (a custom client that checks nothing).
    validates: bool,
    scripts: Mutex<VecDeque<Vec<Item>>>,
    default: Mutex<Vec<Item>>,
    dispatches: AtomicUsize,
    dropped_early: Arc<AtomicBool>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedClient {
    pub fn new(kind: Protocol, default: Vec<Item>) -> Arc<Self> {
        Arc::new(Self {
            kind,
            attempts: 1,
            validates: true,
            scripts: Mutex::new(VecDeque::new()),
            default: Mutex::new(default),
            dispatches: AtomicUsize::new(0),
            dropped_early: Arc::new(AtomicBool::new(false)),
            requests: Mutex::new(Vec::new()),
        })
    }

    pub fn anthropic(default: Vec<Item>) -> Arc<Self> {
        Self::new(Protocol::Messages, default)
    }

    pub fn with_attempts(kind: Protocol, attempts: u32) -> Arc<Self> {
        Arc::new(Self {
            attempts,
            ..Arc::into_inner(Self::new(kind, Vec::new())).unwrap()
        })
    }

    pub fn without_validation(kind: Protocol, default: Vec<Item>) -> Arc<Self> {
        Arc::new(Self {
            validates: false,
            ..Arc::into_inner(Self::new(kind, default)).unwrap()
        })
    }

    pub fn queue(&self, script: Vec<Item>) {
        self.scripts.lock().unwrap().push_back(script);
    }

    pub fn dispatches(&self) -> usize {
        self.dispatches.load(Ordering::SeqCst)
    }

    /// The stream was dropped before its script ended (the runner stopped reading).
    pub fn dropped_early(&self) -> bool {
        self.dropped_early.load(Ordering::SeqCst)
    }

    /// Dispatches whose last message was `text` (tests give each key its own message).
    pub fn dispatches_of(&self, text: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.messages.last().is_some_and(|m| m.text == text))
            .count()
    }

    pub fn last_request(&self) -> Option<ModelRequest> {
        self.requests.lock().unwrap().last().cloned()
    }
}

struct DropWatch {
    remaining: usize,
    flag: Arc<AtomicBool>,
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        if self.remaining > 0 {
            self.flag.store(true, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl ModelClient for ScriptedClient {
    fn provider_name(&self) -> &'static str {
        self.kind.provider_name()
    }

    fn attempts_per_dispatch(&self) -> u32 {
        self.attempts
    }

    fn validate(&self, request: &ModelRequest) -> Result<(), Unsupported> {
        if self.validates {
            self.kind.validate(request)
        } else {
            Ok(())
        }
    }

    async fn dispatch(&self, request: &ModelRequest) -> Result<EventStream, ProviderError> {
        self.dispatches.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().unwrap().push(request.clone());
        let script = self
            .scripts
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.default.lock().unwrap().clone());
        let watch = DropWatch {
            remaining: script.len(),
            flag: self.dropped_early.clone(),
        };
        let stream = futures_util::stream::unfold(
            (VecDeque::from(script), watch),
            |(mut items, mut watch)| async move {
                loop {
                    let item = items.pop_front()?;
                    watch.remaining = items.len();
                    match item {
                        Item::Event(e) => return Some((Ok(e), (items, watch))),
                        Item::Fail(e) => {
                            items.clear();
                            watch.remaining = 0;
                            return Some((Err(e), (items, watch)));
                        }
                        Item::Hang => {
                            watch.remaining = 1;
                            std::future::pending::<()>().await;
                        }
                        Item::Pause(d) => tokio::time::sleep(d).await,
                    }
                }
            },
        );
        Ok(Box::pin(stream))
    }
}

/// Which writes a [`Flaky`] store fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailWhen {
    Never,
    /// Every write from the n-th on (1-based): the process "died" before it.
    FromWrite(usize),
    /// Only audit writes.
    Audit,
    /// Only result reservations.
    Reserve,
    /// Only usage deposits.
    Deposit,
}

/// Wraps ports, counting writes (and the calls the engine must never make) and failing as told.
pub struct Flaky {
    inner: GovernedPorts,
    when: Mutex<FailWhen>,
    writes: AtomicUsize,
    pub cost_calls: AtomicUsize,
    pub add_calls: AtomicUsize,
    pub write_log: Mutex<Vec<&'static str>>,
}

impl Flaky {
    pub fn new(inner: GovernedPorts, when: FailWhen) -> Arc<Self> {
        Arc::new(Self {
            inner,
            when: Mutex::new(when),
            writes: AtomicUsize::new(0),
            cost_calls: AtomicUsize::new(0),
            add_calls: AtomicUsize::new(0),
            write_log: Mutex::new(Vec::new()),
        })
    }

    pub fn ports(self: &Arc<Self>) -> GovernedPorts {
        GovernedPorts::uniform(self.clone())
    }

    /// The wrapped ports, without injected failures (a restarted process).
    pub fn inner_ports(&self) -> GovernedPorts {
        self.inner.clone()
    }

    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    fn write(&self, what: &'static str) -> StoreResult<()> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        self.write_log.lock().unwrap().push(what);
        let fail = match *self.when.lock().unwrap() {
            FailWhen::Never => false,
            FailWhen::FromWrite(k) => n >= k,
            FailWhen::Audit => what == "audit",
            FailWhen::Reserve => what == "reserve_result",
            FailWhen::Deposit => what == "deposit_usage",
        };
        if fail {
            Err(StoreError::Backend(format!(
                "injected failure at write {n} ({what})"
            )))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl ExecutionStore for Flaky {
    async fn claim_execution(&self, record: &ExecutionRecord) -> StoreResult<Claim> {
        self.write("claim")?;
        self.inner.executions.claim_execution(record).await
    }
    async fn execution(&self, s: &CallerScope, k: &str) -> StoreResult<Option<ExecutionRecord>> {
        self.inner.executions.execution(s, k).await
    }
    async fn update_execution(&self, r: &ExecutionRecord, v: u64) -> StoreResult<ExecutionRecord> {
        self.write("update_execution")?;
        self.inner.executions.update_execution(r, v).await
    }
    async fn overdue_executions(
        &self,
        s: &CallerScope,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        self.inner
            .executions
            .overdue_executions(s, now, limit)
            .await
    }
}

#[async_trait]
impl ExecutionResultStore for Flaky {
    async fn reserve_result(&self, slot: &ResultSlot) -> StoreResult<Reservation> {
        self.write("reserve_result")?;
        self.inner.results.reserve_result(slot).await
    }
    async fn result(&self, s: &CallerScope, k: &str) -> StoreResult<Option<ResultSlot>> {
        self.inner.results.result(s, k).await
    }
    async fn store_envelope(
        &self,
        s: &CallerScope,
        k: &str,
        e: &serde_json::Value,
    ) -> StoreResult<ResultSlot> {
        self.write("store_envelope")?;
        self.inner.results.store_envelope(s, k, e).await
    }
    async fn erase_result(&self, s: &CallerScope, k: &str, now: Timestamp) -> StoreResult<bool> {
        self.write("erase_result")?;
        self.inner.results.erase_result(s, k, now).await
    }
}

#[async_trait]
impl UsageInbox for Flaky {
    async fn deposit_usage(&self, o: &UsageObservation) -> StoreResult<InboxEntry> {
        self.write("deposit_usage")?;
        self.inner.inbox.deposit_usage(o).await
    }
    async fn pending_usage(
        &self,
        s: &CallerScope,
        after: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<InboxEntry>> {
        self.inner.inbox.pending_usage(s, after, limit).await
    }
    async fn usage_for(&self, s: &CallerScope, k: &str) -> StoreResult<Vec<InboxEntry>> {
        self.inner.inbox.usage_for(s, k).await
    }
    async fn acknowledge_usage(
        &self,
        s: &CallerScope,
        seq: u64,
        now: Timestamp,
    ) -> StoreResult<bool> {
        self.write("acknowledge_usage")?;
        self.inner.inbox.acknowledge_usage(s, seq, now).await
    }
}

#[async_trait]
impl GovernedCostSettlementStore for Flaky {
    async fn settle(&self, c: &GovernedCharge) -> StoreResult<Settlement> {
        self.write("settle")?;
        self.inner.settlement.settle(c).await
    }
    async fn charge(&self, s: &CallerScope, k: &str) -> StoreResult<Option<GovernedCharge>> {
        self.inner.settlement.charge(s, k).await
    }
}

#[async_trait]
impl SpendStore for Flaky {
    async fn peek(&self, s: &CallerScope, session: &str, day: &str) -> StoreResult<SpendTotals> {
        self.inner.spend.peek(s, session, day).await
    }
    async fn add(&self, s: &CallerScope, session: &str, day: &str, m: i64) -> StoreResult<()> {
        self.add_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.spend.add(s, session, day, m).await
    }
}

#[async_trait]
impl AuditLog for Flaky {
    async fn record(&self, e: &AuditEvent) -> StoreResult<()> {
        self.write("audit")?;
        self.inner.audit.record(e).await
    }
    async fn cost(&self, e: &AuditEvent) -> StoreResult<()> {
        self.cost_calls.fetch_add(1, Ordering::SeqCst);
        self.inner.audit.cost(e).await
    }
    async fn events(&self, s: &CallerScope, k: &str) -> StoreResult<Vec<AuditEvent>> {
        self.inner.audit.events(s, k).await
    }
}

#[async_trait]
impl OperationTreeStore for Flaky {
    async fn open_root(&self, r: &RootRecord) -> StoreResult<RootOpen> {
        self.write("open_root")?;
        self.inner.trees.open_root(r).await
    }
    async fn root(&self, s: &CallerScope, r: &str) -> StoreResult<Option<RootRecord>> {
        self.inner.trees.root(s, r).await
    }
    async fn reserve_call(
        &self,
        s: &CallerScope,
        r: &str,
        k: &str,
    ) -> StoreResult<CallReservation> {
        self.write("reserve_call")?;
        self.inner.trees.reserve_call(s, r, k).await
    }
    async fn has_call(&self, s: &CallerScope, r: &str, k: &str) -> StoreResult<bool> {
        self.inner.trees.has_call(s, r, k).await
    }
    async fn close_root(
        &self,
        s: &CallerScope,
        r: &str,
        now: Timestamp,
    ) -> StoreResult<Option<RootRecord>> {
        self.write("close_root")?;
        self.inner.trees.close_root(s, r, now).await
    }
    async fn expire_roots(
        &self,
        s: &CallerScope,
        now: Timestamp,
        l: u32,
    ) -> StoreResult<Vec<RootRecord>> {
        self.write("expire_roots")?;
        self.inner.trees.expire_roots(s, now, l).await
    }
}

#[async_trait]
impl OperationAccountingStore for Flaky {
    async fn record_root_receipt(&self, r: &RootReceipt) -> StoreResult<(RootReceipt, bool)> {
        self.write("record_root_receipt")?;
        self.inner.accounting.record_root_receipt(r).await
    }
    async fn root_receipt(
        &self,
        s: &CallerScope,
        r: &str,
        k: &str,
    ) -> StoreResult<Option<RootReceipt>> {
        self.inner.accounting.root_receipt(s, r, k).await
    }
}

/// Waits (bounded) until `check` holds; for effects a run leaves in the background.
pub async fn eventually<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..500 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the condition never held");
}
