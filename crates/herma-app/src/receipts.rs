//! The receipt writer: a bounded queue drained by one task that writes receipts in batches,
//! off the request path. A full queue makes submitters wait (back-pressure); nothing is ever
//! dropped silently. Shutdown closes the queue and waits until every receipt is written.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use herma_core::model::InjectionReceipt;
use herma_store::Store;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

/// Receipts written per store call at most.
const MAX_BATCH: usize = 256;
/// How long a partial batch waits for more receipts before it is written.
const LINGER: Duration = Duration::from_millis(2);

/// What the writer task receives.
enum Message {
    Receipt(Box<InjectionReceipt>),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

pub struct ReceiptWriter {
    sender: RwLock<Option<mpsc::Sender<Message>>>,
    capacity: usize,
    store: Arc<dyn Store>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl ReceiptWriter {
    /// Starts the writer task on the current runtime.
    pub fn spawn(store: Arc<dyn Store>, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let (sender, receiver) = mpsc::channel(capacity);
        let task = tokio::spawn(drain(store.clone(), receiver));
        Self {
            sender: RwLock::new(Some(sender)),
            capacity,
            store,
            task: Mutex::new(Some(task)),
        }
    }

    fn sender(&self) -> Option<mpsc::Sender<Message>> {
        self.sender.read().ok().and_then(|s| s.clone())
    }

    /// Queues a receipt, waiting while the queue is full.
    pub async fn submit(&self, receipt: InjectionReceipt) {
        match self.sender() {
            Some(sender) => {
                if let Err(mpsc::error::SendError(Message::Receipt(receipt))) =
                    sender.send(Message::Receipt(Box::new(receipt))).await
                {
                    self.write_now(vec![*receipt]).await;
                }
            }
            // After shutdown: write it directly rather than lose it.
            None => self.write_now(vec![receipt]).await,
        }
    }

    /// Queues a receipt from synchronous code (a finished or dropped response stream): at once
    /// when there is room, else from a task that waits for room.
    pub fn submit_detached(self: &Arc<Self>, receipt: InjectionReceipt) {
        if let Some(sender) = self.sender() {
            match sender.try_send(Message::Receipt(Box::new(receipt))) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(Message::Receipt(receipt)))
                | Err(mpsc::error::TrySendError::Closed(Message::Receipt(receipt))) => {
                    let writer = self.clone();
                    tokio::spawn(async move { writer.submit(*receipt).await });
                    return;
                }
                Err(_) => return,
            }
        }
        let writer = self.clone();
        tokio::spawn(async move { writer.write_now(vec![receipt]).await });
    }

    async fn write_now(&self, batch: Vec<InjectionReceipt>) {
        write_batch(self.store.as_ref(), batch).await;
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

    /// Closes the queue and waits until every queued receipt is written.
    pub async fn shutdown(&self) {
        if let Ok(mut sender) = self.sender.write() {
            sender.take();
        }
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }
}

async fn drain(store: Arc<dyn Store>, mut receiver: mpsc::Receiver<Message>) {
    let mut messages = Vec::with_capacity(MAX_BATCH);
    while receiver.recv_many(&mut messages, MAX_BATCH).await > 0 {
        // Under light load receipts trickle in one by one; waiting a moment lets one write
        // carry many of them instead of paying a round trip each.
        if messages.len() < MAX_BATCH {
            tokio::time::sleep(LINGER).await;
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
                Message::Receipt(r) => batch.push(*r),
                Message::Flush(done) => flushes.push(done),
            }
        }
        if !batch.is_empty() {
            write_batch(store.as_ref(), batch).await;
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// Writes a batch, retrying a failing store with backoff; a batch that still fails is logged
/// with every receipt id, never discarded quietly.
async fn write_batch(store: &dyn Store, batch: Vec<InjectionReceipt>) {
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=5 {
        match store.insert_receipts(&batch).await {
            Ok(()) => return,
            Err(err) if attempt < 5 => {
                tracing::warn!(error = %err, attempt, receipts = batch.len(), "writing receipts failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(err) => {
                let ids: Vec<&str> = batch.iter().map(|r| r.id.as_str()).collect();
                tracing::error!(error = %err, receipts = ?ids, "receipts could not be written");
            }
        }
    }
}
