//! Randomness, injected so tests are exact. (Time is the core's `herma_core::time::Clock`
//! port: the wall clock is `herma_store::SystemClock`, tests use
//! `herma_core::time::ManualClock`.)

use std::cell::RefCell;

/// A source of unpredictable bytes (keys, ids).
pub trait Random: Send + Sync {
    fn fill(&self, buf: &mut [u8]) -> Result<(), String>;
}

/// The operating system's CSPRNG. A request for at most [`POOLED_MAX`] bytes (a receipt's or a
/// request's id) is served from a per-thread pool the OS fills [`POOL_BYTES`] at a time — one
/// system call for about two dozen ids instead of one each; every byte is handed out once and
/// wiped from the pool as it is. Larger requests (a key's 256-bit secret) go to the OS
/// directly.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRandom;

/// The most bytes one request takes from the pool.
pub const POOLED_MAX: usize = 16;
/// How many bytes the OS puts in the pool at a time.
pub const POOL_BYTES: usize = 256;

fn os_fill(buf: &mut [u8]) -> Result<(), String> {
    getrandom::fill(buf).map_err(|e| format!("the OS random source failed: {e}"))
}

/// Bytes from the OS not handed out yet: `bytes[used..]`.
struct Pool {
    bytes: [u8; POOL_BYTES],
    used: usize,
}

impl Pool {
    fn take(&mut self, out: &mut [u8]) -> Result<(), String> {
        if POOL_BYTES - self.used < out.len() {
            os_fill(&mut self.bytes)?;
            self.used = 0;
        }
        let taken = &mut self.bytes[self.used..self.used + out.len()];
        out.copy_from_slice(taken);
        taken.fill(0);
        self.used += out.len();
        Ok(())
    }
}

thread_local! {
    static POOL: RefCell<Pool> = const {
        RefCell::new(Pool {
            bytes: [0; POOL_BYTES],
            used: POOL_BYTES,
        })
    };
}

impl Random for OsRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), String> {
        if buf.len() > POOLED_MAX {
            return os_fill(buf);
        }
        POOL.with(|pool| pool.borrow_mut().take(buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_bytes_are_handed_out_once_and_wiped() {
        let mut pool = Pool {
            bytes: [0; POOL_BYTES],
            used: POOL_BYTES,
        };
        let mut first = [0u8; 10];
        pool.take(&mut first).unwrap();
        assert_eq!(pool.used, 10);
        assert!(
            pool.bytes[..10].iter().all(|&b| b == 0),
            "taken bytes stay in the pool"
        );
        let mut second = [0u8; 10];
        pool.take(&mut second).unwrap();
        assert_ne!(first, second);
        // A request larger than what is left refills the pool and starts at its beginning.
        pool.used = POOL_BYTES - 4;
        let mut third = [0u8; 10];
        pool.take(&mut third).unwrap();
        assert_eq!(pool.used, 10);
        assert!(![first, second].contains(&third));
    }

    #[test]
    fn ids_drawn_through_the_pool_do_not_repeat() {
        let mut seen = std::collections::HashSet::new();
        // Several refills' worth, sizes crossing the pool's boundary at different places.
        for i in 0..200 {
            let mut id = vec![0u8; 6 + i % 11];
            OsRandom.fill(&mut id).unwrap();
            assert!(seen.insert(id), "an id came out twice");
        }
        let mut secret = [0u8; 32];
        OsRandom.fill(&mut secret).unwrap();
        assert_ne!(secret, [0u8; 32]);
    }
}
