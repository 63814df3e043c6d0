//! The ids Herma mints for what it answers and records: receipts and protocol ids.

use herma_core::{Problem, ProblemCode};

use crate::App;

impl App {
    /// `rcpt_` + 12 hex digits of the time in milliseconds + 20 random hex digits. Time-ordered,
    /// so receipts land at the end of the store's index instead of at random places in it.
    pub fn receipt_id(&self) -> Result<String, Problem> {
        let millis = u64::try_from(self.clock.now().as_millis()).unwrap_or(0);
        let mut prefix = String::with_capacity(37);
        prefix.push_str("rcpt_");
        // The low 48 bits: 12 hex digits until the year 10889.
        push_hex(&mut prefix, &millis.to_be_bytes()[2..]);
        self.new_id(&prefix, 10)
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
        push_hex(&mut id, &buf);
        Ok(id)
    }
}

/// Appends `bytes` as lowercase hex.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_two_lowercase_digits_per_byte_and_time_keeps_twelve() {
        let mut out = String::new();
        super::push_hex(&mut out, &[0x00, 0x0f, 0xa5, 0xff]);
        assert_eq!(out, "000fa5ff");
        let millis: u64 = 1_796_000_000_500;
        let mut time = String::new();
        super::push_hex(&mut time, &millis.to_be_bytes()[2..]);
        assert_eq!(time, format!("{millis:012x}"));
    }
}
