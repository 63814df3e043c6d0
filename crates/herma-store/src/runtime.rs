//! The async runtime port: starting background tasks and waiting. The services never call
//! `tokio::spawn` or `tokio::time::sleep` themselves — the native server runs them on tokio
//! ([`TokioRuntime`]), and the Worker, which has no tokio runtime, on the platform's own event
//! loop and timers.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A background task.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
/// A wait for a duration (see [`Runtime::sleep`]).
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where background work runs and how long waits are kept.
pub trait Runtime: Send + Sync + Debug {
    /// Runs `task` to completion in the background; `false` (and `task` dropped unstarted)
    /// when the runtime has stopped, so the caller can say what was lost.
    fn spawn(&self, task: Task) -> bool;
    /// Resolves once `duration` has passed.
    fn sleep(&self, duration: Duration) -> Sleep;
    /// The time on the clock [`Runtime::sleep`] waits by, from an origin of the runtime's
    /// choosing: it never goes back. Deadlines are points on it.
    fn monotonic(&self) -> Duration;
    /// Whether a task may outlive the request that started it (a writer draining its queue for
    /// the life of the process). True natively; false on a Worker, whose timers and tasks stop
    /// with their request: there each piece of background work is a task of its own request.
    fn long_lived(&self) -> bool {
        true
    }
}

/// The native runtime: tokio's, the one current when [`Runtime::spawn`] is called. Its sleeps
/// follow tokio's clock, so tests with paused time stay exact.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioRuntime;

#[cfg(not(target_arch = "wasm32"))]
impl Runtime for TokioRuntime {
    fn spawn(&self, task: Task) -> bool {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(task);
                true
            }
            Err(_) => false,
        }
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }

    /// Since the first reading in this process, on tokio's clock (paused in tests too).
    fn monotonic(&self) -> Duration {
        static ORIGIN: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        let now = tokio::time::Instant::now();
        now.saturating_duration_since(*ORIGIN.get_or_init(|| now))
    }
}

/// How many background tasks of one kind are running, and a wait until none is.
#[derive(Debug, Default)]
pub struct InFlight {
    running: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl InFlight {
    /// One more task has started.
    pub fn start(&self) {
        self.running
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A task has finished (or was never started after all).
    pub fn finish(&self) {
        if self
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.idle.notify_waiters();
        }
    }

    /// Resolves once no task is running.
    pub async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.running.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Resolves at `deadline` on `runtime`'s monotonic clock (at once when it has passed).
pub fn sleep_until(runtime: &dyn Runtime, deadline: Duration) -> Sleep {
    runtime.sleep(deadline.saturating_sub(runtime.monotonic()))
}

/// Runs `future`, giving up after `limit` on `runtime`'s clock (`None`).
pub async fn timeout<T>(
    runtime: &dyn Runtime,
    limit: Duration,
    future: impl Future<Output = T>,
) -> Option<T> {
    let future = std::pin::pin!(future);
    match futures_util::future::select(future, runtime.sleep(limit)).await {
        futures_util::future::Either::Left((value, _)) => Some(value),
        futures_util::future::Either::Right(((), _)) => None,
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn timeout_gives_the_value_in_time_and_none_after_the_limit() {
        let runtime = TokioRuntime;
        let quick = timeout(&runtime, Duration::from_secs(1), async { 7 }).await;
        assert_eq!(quick, Some(7));
        let slow = timeout(&runtime, Duration::from_secs(1), async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            7
        })
        .await;
        assert_eq!(slow, None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_monotonic_clock_is_the_one_sleeps_wait_by() {
        let runtime = TokioRuntime;
        let start = runtime.monotonic();
        runtime.sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.monotonic() - start, Duration::from_secs(5));
        sleep_until(&runtime, start + Duration::from_secs(8)).await;
        assert_eq!(runtime.monotonic() - start, Duration::from_secs(8));
        // A deadline already passed resolves at once.
        sleep_until(&runtime, start).await;
        assert_eq!(runtime.monotonic() - start, Duration::from_secs(8));
    }

    #[test]
    fn spawning_outside_a_runtime_says_the_task_was_not_started() {
        assert!(!TokioRuntime.spawn(Box::pin(async {})));
    }

    #[tokio::test]
    async fn a_spawned_task_runs() {
        let (done, ran) = tokio::sync::oneshot::channel();
        assert!(TokioRuntime.spawn(Box::pin(async move {
            let _ = done.send(());
        })));
        assert!(ran.await.is_ok());
    }
}
