//! A per-address token bucket for the public routes (the preview): each address may make
//! `per_minute` requests a minute, in bursts of up to `per_minute`. Per instance and in memory:
//! it protects an instance from one noisy client, it is not a global quota.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use herma_core::{Problem, ProblemCode};

use herma_core::time::Clock;

/// Buckets beyond this are pruned (full buckets first); memory stays bounded.
const MAX_TRACKED: usize = 100_000;

#[derive(Clone, Copy)]
struct Bucket {
    /// Thousandths of a token, so refills are exact integers.
    milli_tokens: u64,
    at_millis: i64,
}

pub struct RateLimiter {
    per_minute: u64,
    clock: Arc<dyn Clock>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    pub fn new(per_minute: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            per_minute: per_minute.max(1),
            clock,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `address`, or says when to come back.
    pub fn check(&self, address: &str) -> Result<(), Problem> {
        let now = self.clock.now().as_millis();
        let capacity = self.per_minute * 1000;
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() >= MAX_TRACKED {
            buckets.retain(|_, b| b.milli_tokens < capacity && now - b.at_millis < 60_000);
            if buckets.len() >= MAX_TRACKED {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(address.to_owned()).or_insert(Bucket {
            milli_tokens: capacity,
            at_millis: now,
        });
        let elapsed = u64::try_from(now.saturating_sub(bucket.at_millis)).unwrap_or(0);
        // per_minute tokens per 60,000 ms = per_minute thousandths of a token per 60 ms.
        bucket.milli_tokens = (bucket.milli_tokens + elapsed * self.per_minute / 60).min(capacity);
        bucket.at_millis = now;
        if bucket.milli_tokens >= 1000 {
            bucket.milli_tokens -= 1000;
            return Ok(());
        }
        let missing = 1000 - bucket.milli_tokens;
        let wait_ms = (missing * 60).div_ceil(self.per_minute);
        let seconds = wait_ms.div_ceil(1000).max(1);
        Err(Problem::new(
            ProblemCode::RateLimited,
            format!(
                "at most {} preview requests a minute from one address; try again in {seconds} s",
                self.per_minute
            ),
        )
        .with("retry_after_seconds", seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herma_core::time::ManualClock;

    #[test]
    fn bursts_are_bounded_and_tokens_come_back_with_time() {
        let clock = ManualClock::at(0);
        let limiter = RateLimiter::new(3, clock.clone());
        for _ in 0..3 {
            assert!(limiter.check("a").is_ok());
        }
        let refused = limiter.check("a").unwrap_err();
        assert_eq!(refused.code, ProblemCode::RateLimited);
        assert_eq!(
            refused.extension("retry_after_seconds"),
            Some(&serde_json::json!(20))
        );
        assert!(limiter.check("b").is_ok(), "addresses are separate");
        clock.advance_millis(20_000);
        assert!(
            limiter.check("a").is_ok(),
            "one token back after 20 s at 3/min"
        );
        assert!(limiter.check("a").is_err());
    }
}
