//! The receipt writer: a bounded queue drained by one task that writes receipts in batches,
//! off the request path. A full queue makes submitters wait (back-pressure); nothing is ever
//! dropped silently. Shutdown closes the queue and waits until every receipt is written.
//!
//! With a [`FileJournal`], every receipt is appended to the journal when it is submitted —
//! before the response it describes ends — and its segment is released once the batch holding
//! it is stored, so a crashed process's receipts are recovered at the next start
//! ([`recover_journal`]).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use herma_core::model::InjectionReceipt;
use herma_store::journal::{FileJournal, JournalMark};
use herma_store::runtime::InFlight;
use herma_store::{ReceiptStore, Runtime};

use tokio::sync::{Mutex, mpsc, oneshot};

/// Receipts written per store call at most.
const MAX_BATCH: usize = 256;
/// How long a partial batch waits for more receipts before it is written. Every commit rewrites
/// the pages it touches (the table's and its indexes' last pages, the file header), so fewer,
/// larger batches write fewer pages per receipt; a read that misses a queued receipt flushes
/// ([`App::receipt`](crate::App::receipt)), and the journal keeps queued receipts across a
/// crash.
const LINGER: Duration = Duration::from_millis(10);

/// What the writer task receives.
enum Message {
    Receipt(Box<InjectionReceipt>, Option<JournalMark>),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

pub struct ReceiptWriter {
    sender: RwLock<Option<mpsc::Sender<Message>>>,
    capacity: usize,
    store: Arc<dyn ReceiptStore>,
    journal: Option<Arc<FileJournal>>,
    runtime: Arc<dyn Runtime>,
    /// Resolves when the writer task has written everything and stopped.
    task: Mutex<Option<oneshot::Receiver<()>>>,
    /// Receipts handed to background tasks (the queue was full, or already closed); shutdown
    /// waits for them too.
    detached: InFlight,
}

impl ReceiptWriter {
    /// Starts the writer task on `runtime`.
    pub fn spawn(store: Arc<dyn ReceiptStore>, capacity: usize, runtime: Arc<dyn Runtime>) -> Self {
        Self::spawn_journaled(store, capacity, None, runtime)
    }

    /// Starts the writer task, journaling every receipt in `journal` first.
    pub fn spawn_journaled(
        store: Arc<dyn ReceiptStore>,
        capacity: usize,
        journal: Option<Arc<FileJournal>>,
        runtime: Arc<dyn Runtime>,
    ) -> Self {
        let capacity = capacity.max(1);
        let (sender, receiver) = mpsc::channel(capacity);
        let (stopped, task) = oneshot::channel();
        let drained = drain(store.clone(), receiver, journal.clone(), runtime.clone());
        let started = runtime.long_lived()
            && runtime.spawn(Box::pin(async move {
                drained.await;
                let _ = stopped.send(());
            }));
        // Without a running writer every receipt is written as it is submitted.
        let sender = started.then_some(sender);
        Self {
            sender: RwLock::new(sender),
            capacity,
            store,
            journal,
            runtime,
            task: Mutex::new(started.then_some(task)),
            detached: InFlight::default(),
        }
    }

    fn sender(&self) -> Option<mpsc::Sender<Message>> {
        self.sender.read().ok().and_then(|s| s.clone())
    }

    fn journal(&self, receipt: &InjectionReceipt) -> Option<JournalMark> {
        self.journal.as_ref().and_then(|j| j.append(receipt))
    }

    /// Queues a receipt, waiting while the queue is full. The receipt is journaled when this is
    /// called; the future only queues it (one future, not one holding another and a second copy
    /// of the receipt).
    pub fn submit(&self, receipt: InjectionReceipt) -> impl Future<Output = ()> + Send + '_ {
        let mark = self.journal(&receipt);
        self.queue(receipt, mark)
    }

    async fn queue(&self, receipt: InjectionReceipt, mark: Option<JournalMark>) {
        // The direct writes are boxed: they are rare, and a future is sized for the largest
        // state it may await (unboxed, this one was 1,416 bytes instead of 584).
        match self.sender() {
            Some(sender) => {
                if let Err(mpsc::error::SendError(Message::Receipt(receipt, mark))) =
                    sender.send(Message::Receipt(Box::new(receipt), mark)).await
                {
                    Box::pin(self.write_now(vec![(*receipt, mark)])).await;
                }
            }
            // After shutdown: write it directly rather than lose it.
            None => Box::pin(self.write_now(vec![(receipt, mark)])).await,
        }
    }

    /// Queues a receipt from synchronous code (a finished or dropped response stream): at once
    /// when there is room, else from a tracked task that waits for room.
    pub fn submit_detached(self: &Arc<Self>, receipt: InjectionReceipt) {
        let mark = self.journal(&receipt);
        let receipt = match self.sender() {
            Some(sender) => match sender.try_send(Message::Receipt(Box::new(receipt), mark)) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(Message::Receipt(receipt, _)))
                | Err(mpsc::error::TrySendError::Closed(Message::Receipt(receipt, _))) => *receipt,
                Err(_) => return,
            },
            None => receipt,
        };
        let id = receipt.id.clone();
        self.detached.start();
        let writer = self.clone();
        let started = self.runtime.spawn(Box::pin(async move {
            writer.queue(receipt, mark).await;
            writer.detached.finish();
        }));
        if !started {
            // The runtime is gone (process teardown): nothing can write any more. Say so.
            tracing::error!(receipt = %id, "receipt could not be written: the runtime has stopped");
            self.detached.finish();
        }
    }

    async fn write_now(&self, batch: Vec<(InjectionReceipt, Option<JournalMark>)>) {
        write_journaled(
            self.store.as_ref(),
            self.journal.as_deref(),
            batch,
            self.runtime.as_ref(),
        )
        .await;
    }

    /// Waits until every receipt queued before this call is written.
    pub async fn flush(&self) {
        let Some(sender) = self.sender() else { return };
        let (done, wait) = oneshot::channel();
        if sender.send(Message::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// Receipts waiting in the queue.
    pub fn depth(&self) -> usize {
        self.sender()
            .map(|s| self.capacity - s.capacity())
            .unwrap_or(0)
    }

    /// Waits until every receipt handed to a background task so far is written (without a
    /// long-lived writer, as on a Worker, that is every detached receipt).
    pub async fn settled(&self) {
        self.detached.idle().await;
    }

    /// Closes the queue and waits until every queued receipt — and every receipt handed to a
    /// background task — is written.
    pub async fn shutdown(&self) {
        if let Ok(mut sender) = self.sender.write() {
            sender.take();
        }
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
        self.settled().await;
        if let Some(journal) = &self.journal {
            journal.close();
        }
    }
}

impl crate::App {
    /// One of `scope`'s receipts. A receipt not in the store yet may still be queued in this
    /// process's writer (its response has ended; its batch has not been written): a miss of a
    /// well-formed receipt id flushes the writer and reads again, so a receipt named in
    /// `x-herma-receipt` is found here once its response has ended, on the instance that
    /// served it (unless the queue was full and it is still waiting for room).
    pub async fn receipt(
        &self,
        scope: &herma_core::CallerScope,
        id: &str,
    ) -> herma_store::StoreResult<Option<InjectionReceipt>> {
        if let Some(receipt) = self.store.get_receipt(scope, id).await? {
            return Ok(Some(receipt));
        }
        // Only an id Herma could have minted is worth a flush: a typo must not cut batches short.
        if !is_receipt_id(id) {
            return Ok(None);
        }
        self.receipts.flush().await;
        self.store.get_receipt(scope, id).await
    }
}

/// Whether `id` has the shape of a receipt id Herma mints (`App::receipt_id`): `rcpt_` and 32
/// lowercase hex digits.
fn is_receipt_id(id: &str) -> bool {
    id.strip_prefix("rcpt_").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

async fn drain(
    store: Arc<dyn ReceiptStore>,
    mut receiver: mpsc::Receiver<Message>,
    journal: Option<Arc<FileJournal>>,
    runtime: Arc<dyn Runtime>,
) {
    let mut messages = Vec::with_capacity(MAX_BATCH);
    while receiver.recv_many(&mut messages, MAX_BATCH).await > 0 {
        // Under light load receipts trickle in one by one; waiting a moment lets one write
        // carry many of them instead of paying a round trip each. A flush already queued (a
        // read that missed) does not wait for more.
        let flushing = messages.iter().any(|m| matches!(m, Message::Flush(_)));
        if messages.len() < MAX_BATCH && !flushing {
            runtime.sleep(LINGER).await;
            while messages.len() < MAX_BATCH {
                match receiver.try_recv() {
                    Ok(message) => messages.push(message),
                    Err(_) => break,
                }
            }
        }
        let mut batch = Vec::with_capacity(messages.len());
        let mut flushes = Vec::new();
        for message in messages.drain(..) {
            match message {
                Message::Receipt(r, mark) => batch.push((*r, mark)),
                Message::Flush(done) => flushes.push(done),
            }
        }
        if !batch.is_empty() {
            write_journaled(store.as_ref(), journal.as_deref(), batch, runtime.as_ref()).await;
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// Writes a batch and, when the whole batch is stored, releases its journal marks (a batch
/// that failed stays journaled, for the next start to recover).
async fn write_journaled(
    store: &dyn ReceiptStore,
    journal: Option<&FileJournal>,
    batch: Vec<(InjectionReceipt, Option<JournalMark>)>,
    runtime: &dyn Runtime,
) {
    let (receipts, marks): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    if write_batch(store, receipts, runtime).await
        && let Some(journal) = journal
    {
        let marks: Vec<JournalMark> = marks.into_iter().flatten().collect();
        if !marks.is_empty() {
            journal.committed(&marks);
        }
    }
}

/// Writes a batch, retrying a failing store with backoff; a batch that still fails is logged
/// with every receipt id, never discarded quietly. True when every receipt was stored.
async fn write_batch(
    store: &dyn ReceiptStore,
    batch: Vec<InjectionReceipt>,
    runtime: &dyn Runtime,
) -> bool {
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=5 {
        match store.insert_receipts(&batch).await {
            Ok(()) => return true,
            Err(err) if attempt < 5 => {
                tracing::warn!(error = %err, attempt, receipts = batch.len(), "writing receipts failed; retrying");
                runtime.sleep(delay).await;
                delay *= 2;
            }
            Err(err) if batch.len() > 1 => {
                // One bad receipt must not take the others with it: write them one by one.
                tracing::warn!(error = %err, receipts = batch.len(), "writing a batch failed; writing receipts singly");
                let mut all = true;
                for receipt in batch {
                    if let Err(err) = store.insert_receipts(std::slice::from_ref(&receipt)).await {
                        tracing::error!(error = %err, receipt = %receipt.id, "receipt could not be written");
                        all = false;
                    }
                }
                return all;
            }
            Err(err) => {
                let ids: Vec<&str> = batch.iter().map(|r| r.id.as_str()).collect();
                tracing::error!(error = %err, receipts = ?ids, "receipts could not be written");
            }
        }
    }
    false
}

/// Stores the receipts a crashed process left in `journal`'s directory, then removes their
/// segments; returns how many there were. The store ignores receipts it already has.
pub async fn recover_journal(
    store: &dyn ReceiptStore,
    journal: &FileJournal,
) -> Result<usize, herma_store::StoreError> {
    let orphans = journal.orphans().map_err(|e| {
        herma_store::StoreError::Backend(format!("reading the receipt journal: {e}"))
    })?;
    let count = orphans.receipts.len();
    for chunk in orphans.receipts.chunks(MAX_BATCH) {
        store.insert_receipts(chunk).await?;
    }
    orphans.discard().map_err(|e| {
        herma_store::StoreError::Backend(format!("removing recovered journal segments: {e}"))
    })?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use herma_core::model::{ReceiptAction, ReceiptBody, Timings};
    use herma_core::{CallerScope, Timestamp};
    use herma_store::{MemoryStore, StoreError, StoreResult};
    use tokio::sync::Semaphore;

    use super::*;

    #[test]
    fn only_the_minted_shape_is_a_receipt_id() {
        assert!(super::is_receipt_id(
            "rcpt_01a23ccf1c3ebe1ffa89001122334455"
        ));
        for id in [
            "rcpt_01A23CCF1C3EBE1FFA89001122334455",
            "rcpt_01a23ccf1c3ebe1ffa890011223344",
            "rcpt_01a23ccf1c3ebe1ffa8900112233445566",
            "resp_01a23ccf1c3ebe1ffa89001122334455",
            "rcpt_01a23ccf1c3ebe1ffa890011223344g5",
            "rcpt_01a23ccf1c3ebe1ffa8900112233ü55",
            "",
        ] {
            assert!(!super::is_receipt_id(id), "{id}");
        }
    }

    /// A memory store whose receipt writes wait for a permit, and fail `failures` times first.
    struct Gated {
        inner: MemoryStore,
        permits: Semaphore,
        failures: AtomicUsize,
    }

    #[async_trait]
    impl ReceiptStore for Gated {
        async fn insert_receipts(&self, receipts: &[InjectionReceipt]) -> StoreResult<()> {
            let _permit = self
                .permits
                .acquire()
                .await
                .map_err(|_| StoreError::Backend("closed".into()))?;
            if self.failures.load(Ordering::SeqCst) > 0 {
                self.failures.fetch_sub(1, Ordering::SeqCst);
                return Err(StoreError::Backend("disk full".into()));
            }
            self.inner.insert_receipts(receipts).await
        }
        async fn get_receipt(
            &self,
            scope: &CallerScope,
            id: &str,
        ) -> StoreResult<Option<InjectionReceipt>> {
            self.inner.get_receipt(scope, id).await
        }
        async fn prune_receipts(
            &self,
            before: herma_core::Timestamp,
            limit: u32,
        ) -> StoreResult<u64> {
            self.inner.prune_receipts(before, limit).await
        }
    }

    fn scope() -> CallerScope {
        CallerScope::parse("key:0123456789abcdef").unwrap()
    }

    fn receipt(n: usize) -> InjectionReceipt {
        ReceiptBody {
            caller_scope: scope(),
            protocol: "messages".into(),
            conversation_id: "c".into(),
            model: "m".into(),
            action: ReceiptAction::Forwarded,
            matched: vec![],
            shimmed_context_refs: vec![],
            unresolved_context_refs: vec![],
            upstream_status: Some(200),
            usage: None,
            timings: Timings::default(),
            stream_end: None,
            error: None,
            created_at: Timestamp::from_millis(n as i64),
        }
        .seal(format!("rcpt_{n:04}"))
    }

    fn gated(permits: usize, failures: usize) -> Arc<Gated> {
        Arc::new(Gated {
            inner: MemoryStore::new(),
            permits: Semaphore::new(permits),
            failures: AtomicUsize::new(failures),
        })
    }

    async fn stored(store: &Gated, n: usize) -> usize {
        let mut count = 0;
        for i in 0..n {
            count += usize::from(
                store
                    .inner
                    .get_receipt(&scope(), &format!("rcpt_{i:04}"))
                    .await
                    .unwrap()
                    .is_some(),
            );
        }
        count
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_makes_submitters_wait_and_loses_nothing() {
        let store = gated(0, 0);
        let writer = Arc::new(ReceiptWriter::spawn(
            store.clone(),
            2,
            Arc::new(herma_store::TokioRuntime),
        ));
        // The first receipt is taken by the writer, which then blocks on the store.
        writer.submit(receipt(0)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(LINGER * 2).await;
        writer.submit(receipt(1)).await;
        writer.submit(receipt(2)).await;
        assert_eq!(writer.depth(), 2, "the queue is full");
        let waiting = {
            let writer = writer.clone();
            tokio::spawn(async move { writer.submit(receipt(3)).await })
        };
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "a submitter waits while the queue is full"
        );
        store.permits.add_permits(100);
        waiting.await.unwrap();
        writer.flush().await;
        assert_eq!(stored(&store, 4).await, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_store_is_retried_until_the_receipts_land() {
        let store = gated(100, 3);
        let writer = Arc::new(ReceiptWriter::spawn(
            store.clone(),
            8,
            Arc::new(herma_store::TokioRuntime),
        ));
        for i in 0..5 {
            writer.submit_detached(receipt(i));
        }
        writer.flush().await;
        assert_eq!(stored(&store, 5).await, 5);
        assert_eq!(store.failures.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_writes_everything_queued_and_later_receipts_still_land() {
        let store = gated(100, 0);
        let writer = Arc::new(ReceiptWriter::spawn(
            store.clone(),
            64,
            Arc::new(herma_store::TokioRuntime),
        ));
        for i in 0..40 {
            writer.submit(receipt(i)).await;
        }
        writer.shutdown().await;
        assert_eq!(stored(&store, 40).await, 40);
        writer.submit(receipt(40)).await;
        assert_eq!(
            stored(&store, 41).await,
            41,
            "after shutdown a receipt is written directly"
        );
        writer.flush().await;
    }

    /// Tokio's runtime, saying (as a Worker's does) that no task may outlive its request.
    #[derive(Debug)]
    struct PerRequest;

    impl Runtime for PerRequest {
        fn spawn(&self, task: herma_store::runtime::Task) -> bool {
            herma_store::TokioRuntime.spawn(task)
        }
        fn sleep(&self, duration: Duration) -> herma_store::runtime::Sleep {
            herma_store::TokioRuntime.sleep(duration)
        }
        fn monotonic(&self) -> Duration {
            herma_store::TokioRuntime.monotonic()
        }
        fn long_lived(&self) -> bool {
            false
        }
    }

    #[tokio::test]
    async fn without_long_lived_tasks_each_receipt_is_written_by_its_own_request() {
        let store = gated(0, 0);
        let writer = Arc::new(ReceiptWriter::spawn(store.clone(), 8, Arc::new(PerRequest)));
        assert_eq!(writer.depth(), 0, "no queue: nothing waits in one");
        // From a finished stream: a task of its own, which `settled` waits for.
        writer.submit_detached(receipt(1));
        let settled = tokio::spawn({
            let writer = writer.clone();
            async move { writer.settled().await }
        });
        tokio::task::yield_now().await;
        assert!(!settled.is_finished(), "settled before the write");
        store.permits.add_permits(2);
        settled.await.unwrap();
        assert!(
            store
                .inner
                .get_receipt(&scope(), "rcpt_0001")
                .await
                .unwrap()
                .is_some()
        );
        // A direct answer's receipt is written before `submit` returns.
        writer.submit(receipt(2)).await;
        assert!(
            store
                .inner
                .get_receipt(&scope(), "rcpt_0002")
                .await
                .unwrap()
                .is_some()
        );
    }
}
