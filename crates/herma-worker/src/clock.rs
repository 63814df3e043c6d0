//! The wall clock at the edge: `Date.now()`.

use herma_core::Timestamp;
use herma_core::time::Clock;

/// The platform's `Date.now()` (which, on Workers, advances only across I/O).
#[derive(Debug, Default, Clone, Copy)]
pub struct DateClock;

impl Clock for DateClock {
    fn now(&self) -> Timestamp {
        let millis = i64::try_from(worker::Date::now().as_millis()).unwrap_or(i64::MAX);
        Timestamp::from_millis(millis)
    }
}
