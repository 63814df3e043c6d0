//! The runtime port at the edge: tasks on the isolate's event loop, waits on its timers.

use std::time::Duration;

use herma_store::runtime::{Runtime, Sleep, Task};
use worker::send::SendFuture;

/// The isolate's event loop (`spawn_local`) and timers (`setTimeout`). A Worker has one
/// thread, so the `Send` its futures lack is never needed; [`SendFuture`] says so.
#[derive(Debug, Default, Clone, Copy)]
pub struct EdgeRuntime;

impl Runtime for EdgeRuntime {
    fn spawn(&self, task: Task) -> bool {
        wasm_bindgen_futures::spawn_local(task);
        true
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(SendFuture::new(worker::Delay::from(duration)))
    }

    /// `Date.now()`: a Worker's clock stands still while it computes and moves between its
    /// I/O waits, which is when a deadline can pass.
    fn monotonic(&self) -> Duration {
        Duration::from_millis(js_sys::Date::now().max(0.0) as u64)
    }

    /// A Worker's timers and tasks stop with the request that started them.
    fn long_lived(&self) -> bool {
        false
    }
}
