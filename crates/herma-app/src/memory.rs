//! Entity memory and rule outcomes (H13), processed off the request path.
//!
//! Each proxied turn hands a [`TurnRecord`] to the [`MemoryWorker`] after its response ends.
//! The worker extracts entities (core, deterministic), counts them per caller and project
//! (bounded, rarest and oldest evicted first), records which rules fired (`injected`,
//! `responded_directly`, `matched`), and attributes error signatures seen in turn N to the
//! rules that fired in turn N-1 of the same conversation as `retry_error`.
//!
//! Memory is derived data: when its queue is full a turn is skipped and counted
//! ([`MemoryWorker::dropped`]) rather than slowing requests down. (Receipts, by contrast, are
//! never dropped.)

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use herma_core::memory::{error_signatures, observations};
use herma_core::model::{OutcomeKind, RuleOutcomeRecord};
use herma_core::wire::Protocol;
use herma_core::wire::answer::{StreamText, first_chars, response_text};
use herma_core::{CallerScope, Timestamp};
use herma_store::runtime::InFlight;
use herma_store::{EntityTurn, Runtime, Store};
use tokio::sync::{Mutex, mpsc, oneshot};

/// Response bytes kept for extraction at most.
pub const MAX_CAPTURED_RESPONSE: usize = 256 * 1024;
/// Characters of an answer's text read for extraction at most.
pub const MAX_RESPONSE_TEXT: usize = 64 * 1024;

/// What one turn leaves for memory.
#[derive(Clone, Debug)]
pub struct TurnRecord {
    pub scope: CallerScope,
    pub project_tag: String,
    pub protocol: Protocol,
    /// Empty when the request had no conversation identity (then nothing is attributed).
    pub conversation_id: String,
    pub turn: u64,
    pub receipt_id: String,
    /// Provisions and what happened to each in this turn.
    pub outcomes: Vec<(String, u64, OutcomeKind)>,
    pub user_text: String,
    pub tool_results: Vec<String>,
    pub paths: Vec<String>,
    pub answer: TurnAnswer,
    pub at: Timestamp,
}

/// A turn's answer, as memory reads it.
#[derive(Clone, Debug)]
pub enum TurnAnswer {
    /// A relayed JSON answer: the bytes the client received (bounded).
    Relayed { body: Vec<u8> },
    /// A relayed stream's text, read as its events passed: that of the events that ended
    /// within its first [`MAX_CAPTURED_RESPONSE`] bytes, up to [`MAX_RESPONSE_TEXT`]
    /// characters, what reading those bytes would find.
    Streamed(StreamText),
    /// Herma's own direct answer: its text (what reading the rendered answer back would give).
    Direct(String),
    /// A relayed JSON answer's text, read (up to [`MAX_RESPONSE_TEXT`] characters) where the
    /// answer ended, in the same reading as its usage: what reading the bytes would give.
    Read(String),
}

enum Message {
    Turn(Box<TurnRecord>),
    Flush(oneshot::Sender<()>),
}

pub struct MemoryWorker {
    sender: std::sync::RwLock<Option<mpsc::Sender<Message>>>,
    /// Without a long-lived task (a Worker), each turn is processed by a task of its own.
    direct: Option<Direct>,
    /// Resolves when the worker task has processed everything and stopped.
    task: Mutex<Option<oneshot::Receiver<()>>>,
    dropped: AtomicU64,
}

/// What a turn's own task needs, and how many such tasks are running.
struct Direct {
    store: Arc<dyn Store>,
    runtime: Arc<dyn Runtime>,
    max_entities: u64,
    running: Arc<InFlight>,
}

impl MemoryWorker {
    /// Starts the worker task on `runtime`.
    pub fn spawn(
        store: Arc<dyn Store>,
        capacity: usize,
        max_entities: u64,
        runtime: Arc<dyn Runtime>,
    ) -> Self {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        let (stopped, task) = oneshot::channel();
        if !runtime.long_lived() {
            return Self {
                sender: std::sync::RwLock::new(None),
                direct: Some(Direct {
                    store,
                    runtime,
                    max_entities,
                    running: Arc::new(InFlight::default()),
                }),
                task: Mutex::new(None),
                dropped: AtomicU64::new(0),
            };
        }
        let work = run(store, receiver, max_entities, runtime.clone());
        let started = runtime.spawn(Box::pin(async move {
            work.await;
            let _ = stopped.send(());
        }));
        if !started {
            tracing::error!("the memory worker could not start: the runtime has stopped");
        }
        Self {
            // Without a running task every turn counts as skipped.
            sender: std::sync::RwLock::new(started.then_some(sender)),
            direct: None,
            task: Mutex::new(started.then_some(task)),
            dropped: AtomicU64::new(0),
        }
    }

    fn sender(&self) -> Option<mpsc::Sender<Message>> {
        self.sender.read().ok().and_then(|s| s.clone())
    }

    /// Hands a turn over without waiting; a full queue skips it (counted).
    pub fn submit(&self, turn: TurnRecord) {
        if let Some(direct) = &self.direct {
            direct.running.start();
            let (store, running) = (direct.store.clone(), direct.running.clone());
            let max_entities = direct.max_entities;
            let started = direct.runtime.spawn(Box::pin(async move {
                let mut pending = Pending::default();
                if let Err(err) = process(store.as_ref(), &turn, &mut pending).await {
                    tracing::warn!(error = %err, receipt = %turn.receipt_id, "entity memory for a turn failed");
                }
                pending.write(store.as_ref(), max_entities).await;
                running.finish();
            }));
            if !started {
                direct.running.finish();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let sent = self
            .sender()
            .map(|s| s.try_send(Message::Turn(Box::new(turn))).is_ok())
            .unwrap_or(false);
        if !sent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Turns waiting in the queue.
    pub fn depth(&self) -> usize {
        self.sender()
            .map(|s| s.max_capacity() - s.capacity())
            .unwrap_or(0)
    }

    /// Turns skipped because the queue was full or closed.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until every turn submitted before this call is processed.
    pub async fn flush(&self) {
        if let Some(direct) = &self.direct {
            return direct.running.idle().await;
        }
        let Some(sender) = self.sender() else { return };
        let (done, wait) = oneshot::channel();
        if sender.send(Message::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// Processes what is queued, then stops.
    pub async fn shutdown(&self) {
        if let Ok(mut sender) = self.sender.write() {
            sender.take();
        }
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }
}

/// Turns taken off the queue at once. Their entities and rule outcomes are written together (a
/// transaction per batch rather than per turn), which is most of what memory costs.
const BATCH: usize = 128;
/// Under light load turns trickle in one by one; waiting this long lets one write carry many.
/// Every commit rewrites the outcomes table's last page, a page of each of its indexes and the
/// file's first page, however few rows it carries; this is the receipt writer's linger too
/// (5 ms made a third more commits and a tenth more WAL pages: docs/performance.md).
const LINGER: std::time::Duration = std::time::Duration::from_millis(10);

async fn run(
    store: Arc<dyn Store>,
    mut receiver: mpsc::Receiver<Message>,
    max_entities: u64,
    runtime: Arc<dyn Runtime>,
) {
    let mut pending = Pending::default();
    let mut messages = Vec::with_capacity(BATCH);
    while receiver.recv_many(&mut messages, BATCH).await > 0 {
        let flushing = messages.iter().any(|m| matches!(m, Message::Flush(_)));
        if messages.len() < BATCH && !flushing {
            runtime.sleep(LINGER).await;
            while messages.len() < BATCH {
                match receiver.try_recv() {
                    Ok(message) => messages.push(message),
                    Err(_) => break,
                }
            }
        }
        for message in messages.drain(..) {
            match message {
                Message::Turn(turn) => {
                    if let Err(err) = process(store.as_ref(), &turn, &mut pending).await {
                        tracing::warn!(error = %err, receipt = %turn.receipt_id, "entity memory for a turn failed");
                    }
                }
                Message::Flush(done) => {
                    pending.write(store.as_ref(), max_entities).await;
                    let _ = done.send(());
                }
            }
        }
        pending.write(store.as_ref(), max_entities).await;
    }
}

/// What processed turns leave to write: their entities and their rule outcomes.
#[derive(Default)]
struct Pending {
    entities: Vec<EntityTurn>,
    outcomes: Vec<RuleOutcomeRecord>,
}

impl Pending {
    /// Writes what is pending — the entities of all its turns in one write, the outcomes in
    /// another — and empties it. A failure is logged: memory is derived data.
    async fn write(&mut self, store: &dyn Store, max_entities: u64) {
        if !self.entities.is_empty() {
            if let Err(err) = store
                .record_entity_turns(&self.entities, max_entities)
                .await
            {
                // One bad turn (or a deadlock with another instance's batch) must not take the
                // others with it: write them one by one.
                tracing::warn!(error = %err, turns = self.entities.len(), "writing a batch of entity memory failed; writing turns singly");
                for turn in &self.entities {
                    if let Err(err) = store
                        .record_entity_turns(std::slice::from_ref(turn), max_entities)
                        .await
                    {
                        tracing::warn!(error = %err, scope = %turn.scope, "entity memory for a turn failed");
                    }
                }
            }
            self.entities.clear();
        }
        self.write_outcomes(store).await;
    }

    async fn write_outcomes(&mut self, store: &dyn Store) {
        if self.outcomes.is_empty() {
            return;
        }
        if let Err(err) = store.insert_outcomes(&self.outcomes).await {
            tracing::warn!(error = %err, outcomes = self.outcomes.len(), "writing rule outcomes failed");
        }
        self.outcomes.clear();
    }
}

/// Queues one turn's entities and rule outcomes on `pending` (written by the caller, batched;
/// its outcomes written first here when attribution needs to read earlier turns).
async fn process(
    store: &dyn Store,
    turn: &TurnRecord,
    pending: &mut Pending,
) -> Result<(), herma_store::StoreError> {
    let answer = match &turn.answer {
        TurnAnswer::Relayed { body } => {
            Cow::Owned(response_text(turn.protocol, false, body, MAX_RESPONSE_TEXT))
        }
        TurnAnswer::Streamed(text) => Cow::Borrowed(text.text()),
        TurnAnswer::Direct(text) | TurnAnswer::Read(text) => {
            Cow::Borrowed(first_chars(text, MAX_RESPONSE_TEXT))
        }
    };
    let seen = observations(&turn.paths, &turn.user_text, &turn.tool_results, &answer);
    if !seen.is_empty() {
        pending.entities.push(EntityTurn {
            scope: turn.scope.clone(),
            project_tag: turn.project_tag.clone(),
            observations: seen,
            at: turn.at,
        });
    }
    let record = |provision_id: &str,
                  version: u64,
                  outcome: OutcomeKind,
                  turn_number: u64,
                  signature: Option<String>| RuleOutcomeRecord {
        caller_scope: turn.scope.clone(),
        conversation_id: turn.conversation_id.clone(),
        turn: turn_number,
        provision_id: provision_id.to_owned(),
        provision_version: version,
        outcome,
        error_signature: signature,
        receipt_id: Some(turn.receipt_id.clone()),
        recorded_at: turn.at,
    };
    // Errors the harness reports in turn N follow from what the model did in turn N-1.
    let mut retries = Vec::new();
    if !turn.conversation_id.is_empty() && turn.turn > 1 {
        let signatures = error_signatures(
            std::iter::once(turn.user_text.as_str())
                .chain(turn.tool_results.iter().map(String::as_str)),
        );
        if !signatures.is_empty() {
            // Turn N-1 may still be in the batch.
            pending.write_outcomes(store).await;
            for (id, version) in store
                .fired_in_turn(&turn.scope, &turn.conversation_id, turn.turn - 1)
                .await?
            {
                for signature in &signatures {
                    retries.push(record(
                        &id,
                        version,
                        OutcomeKind::RetryError,
                        turn.turn - 1,
                        Some(signature.clone()),
                    ));
                }
            }
        }
    }
    pending.outcomes.extend(
        turn.outcomes
            .iter()
            .map(|(id, version, outcome)| record(id, *version, *outcome, turn.turn, None)),
    );
    pending.outcomes.extend(retries);
    Ok(())
}

#[cfg(test)]
mod tests {
    // A test fails loudly.
    #![allow(clippy::expect_used, clippy::unwrap_used)]
    use super::*;
    use herma_store::{EntityStore, OutcomeStore};

    fn turn(scope: &CallerScope, path: &str, receipt: &str) -> TurnRecord {
        TurnRecord {
            scope: scope.clone(),
            project_tag: "p".into(),
            protocol: Protocol::Messages,
            conversation_id: String::new(),
            turn: 1,
            receipt_id: receipt.into(),
            outcomes: vec![("rule.a".into(), 1, OutcomeKind::Injected)],
            user_text: format!("please look at {path}"),
            tool_results: vec![],
            paths: vec![path.into()],
            answer: TurnAnswer::Direct(String::new()),
            at: Timestamp::from_millis(1),
        }
    }

    /// A batch whose write fails (here a trigger refuses one turn's entity, in real SQLite)
    /// is written again turn by turn: only the turn at fault is lost.
    #[tokio::test]
    async fn a_turn_that_fails_its_batch_does_not_take_the_others_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        let path = path.to_str().unwrap();
        let store = Arc::new(herma_store_sqlite::open_migrated(path).await.unwrap());
        herma_store_sqlite::testing::execute(
            path,
            "CREATE TRIGGER poison BEFORE INSERT ON working_entities
             WHEN NEW.value LIKE '%poison%'
             BEGIN SELECT RAISE(ABORT, 'poisoned entity'); END",
        )
        .await
        .unwrap();
        let worker =
            MemoryWorker::spawn(store.clone(), 16, 1000, Arc::new(herma_store::TokioRuntime));
        let scope = CallerScope::parse("key:0123456789abcdef").unwrap();
        // Submitted together: on this test's one-thread runtime the worker runs only once the
        // test awaits, so it takes all three as one batch.
        for (path, receipt) in [
            ("src/alpha.rs", "rcpt_1"),
            ("src/poison.rs", "rcpt_2"),
            ("src/omega.rs", "rcpt_3"),
        ] {
            worker.submit(turn(&scope, path, receipt));
        }
        worker.flush().await;

        let values: Vec<String> = store
            .list_entities(&scope, None, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.value)
            .collect();
        for kept in ["src/alpha.rs", "src/omega.rs"] {
            assert!(values.iter().any(|v| v == kept), "{kept} in {values:?}");
        }
        assert!(!values.iter().any(|v| v.contains("poison")), "{values:?}");
        // The rule outcomes are written apart from the entities: all three turns have theirs.
        let mut receipts: Vec<String> = store
            .list_outcomes(&scope, 100)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|o| o.receipt_id)
            .collect();
        receipts.sort();
        assert_eq!(receipts, ["rcpt_1", "rcpt_2", "rcpt_3"]);
        assert_eq!(worker.dropped(), 0);
    }
}
