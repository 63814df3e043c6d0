//! The ids Herma mints for what it answers and records: receipts and protocol ids.

use herma_core::{Problem, ProblemCode};

use crate::App;

impl App {
    /// `rcpt_` + 12 hex digits of the time in milliseconds + 20 random hex digits. Time-ordered,
    /// so receipts land at the end of the store's index instead of at random places in it.
    pub fn receipt_id(&self) -> Result<String, Problem> {
        let millis = u64::try_from(self.clock.now().as_millis()).unwrap_or(0);
        self.new_id(&format!("rcpt_{millis:012x}"), 10)
    }

    /// `prefix` + `bytes` random bytes as lowercase hex.
    pub fn new_id(&self, prefix: &str, bytes: usize) -> Result<String, Problem> {
        let mut buf = vec![0u8; bytes];
        self.random.fill(&mut buf).map_err(|e| {
            tracing::error!(error = %e, "random source failed");
            Problem::new(
                ProblemCode::Internal,
                "Herma could not complete the request",
            )
        })?;
        let mut id = String::with_capacity(prefix.len() + bytes * 2);
        id.push_str(prefix);
        for b in buf {
            id.push_str(&format!("{b:02x}"));
        }
        Ok(id)
    }
}
