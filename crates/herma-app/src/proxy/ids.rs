//! The ids Herma mints for what it answers and records: receipts and protocol ids.

use herma_core::{Problem, ProblemCode};

use crate::App;
use crate::clock::Random;

impl App {
    /// `rcpt_` + 12 hex digits of the time in milliseconds + 20 random hex digits. Time-ordered,
    /// so receipts land at the end of the store's index instead of at random places in it.
    pub fn receipt_id(&self) -> Result<String, Problem> {
        let millis = u64::try_from(self.clock.now().as_millis()).unwrap_or(0);
        let mut id = String::with_capacity(37);
        id.push_str("rcpt_");
        // The low 48 bits: 12 hex digits until the year 10889.
        herma_core::lower_hex::push(&mut id, &millis.to_be_bytes()[2..]);
        push_random_hex(&*self.random, &mut id, 10)?;
        Ok(id)
    }

    /// `prefix` + `bytes` random bytes as lowercase hex.
    pub fn new_id(&self, prefix: &str, bytes: usize) -> Result<String, Problem> {
        let mut id = String::with_capacity(prefix.len() + bytes * 2);
        id.push_str(prefix);
        push_random_hex(&*self.random, &mut id, bytes)?;
        Ok(id)
    }
}

/// Appends `bytes` random bytes to `id` as lowercase hex, drawn 32 at a time on the stack.
fn push_random_hex(random: &dyn Random, id: &mut String, mut bytes: usize) -> Result<(), Problem> {
    let mut buf = [0u8; 32];
    while bytes > 0 {
        let n = bytes.min(buf.len());
        let part = &mut buf[..n];
        random.fill(part).map_err(|e| {
            tracing::error!(error = %e, "random source failed");
            Problem::new(
                ProblemCode::Internal,
                "Herma could not complete the request",
            )
        })?;
        herma_core::lower_hex::push(id, part);
        bytes -= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_two_lowercase_digits_per_byte_and_time_keeps_twelve() {
        let mut out = String::new();
        herma_core::lower_hex::push(&mut out, &[0x00, 0x0f, 0xa5, 0xff]);
        assert_eq!(out, "000fa5ff");
        let millis: u64 = 1_796_000_000_500;
        let mut time = String::new();
        herma_core::lower_hex::push(&mut time, &millis.to_be_bytes()[2..]);
        assert_eq!(time, format!("{millis:012x}"));
    }

    /// Bytes 0, 1, 2, … in order, one call at a time.
    struct Counting(std::sync::atomic::AtomicU8);

    impl crate::clock::Random for Counting {
        fn fill(&self, buf: &mut [u8]) -> Result<(), String> {
            for b in buf {
                *b = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        }
    }

    #[test]
    fn random_hex_is_every_byte_drawn_in_order_past_the_stack_buffer() {
        for bytes in [0, 1, 10, 12, 32, 33, 70] {
            let random = Counting(std::sync::atomic::AtomicU8::new(0));
            let mut id = String::from("p_");
            super::push_random_hex(&random, &mut id, bytes).unwrap();
            let drawn: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
            let want: String = drawn.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(id, format!("p_{want}"));
        }
    }
}
