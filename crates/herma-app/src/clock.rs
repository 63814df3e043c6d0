//! Randomness, injected so tests are exact. (Time is the core's `herma_core::time::Clock`
//! port: the wall clock is `herma_store::SystemClock`, tests use
//! `herma_core::time::ManualClock`.)

/// A source of unpredictable bytes (keys, ids).
pub trait Random: Send + Sync {
    fn fill(&self, buf: &mut [u8]) -> Result<(), String>;
}

/// The operating system's CSPRNG.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRandom;

impl Random for OsRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), String> {
        getrandom::fill(buf).map_err(|e| format!("the OS random source failed: {e}"))
    }
}
