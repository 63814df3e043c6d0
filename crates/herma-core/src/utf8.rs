//! UTF-8 checks on the request and stream paths, with SIMD where the CPU has it.
//!
//! Every forwarded body, every data line of a relayed stream and every receipt is checked as
//! UTF-8 once. The standard library's check costs about 1.3 instructions a byte on ASCII text
//! (two words at a time); `simdutf8` checks 32 or 64 bytes at a time where the CPU has the
//! instructions (AVX2 or SSE 4.2, found at run time; NEON; wasm's simd128 when built with it)
//! and leaves inputs under 64 bytes, and other targets, to the standard library's check. Only
//! whether the bytes are UTF-8 is taken from it (no caller here says where they are not).

/// `bytes` as text, when they are UTF-8: what `std::str::from_utf8(bytes).ok()` returns.
#[inline]
pub fn str(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ASCII and mixed texts of lengths around the checker's 32- and 64-byte blocks, each with
    /// a byte changed at every position to each value that can start, continue or break a
    /// sequence: the same answer as the standard library's.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn answers_as_the_standard_library_does() {
        let alphabet = "aé€😀\u{7f}\u{80}\u{7ff}\u{800}\u{ffff}\u{10000}\u{10ffff}";
        let chars: Vec<char> = alphabet.chars().collect();
        let bytes_of = [
            0x00, 0x41, 0x7f, 0x80, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5,
            0xff,
        ];
        let mut checked = 0;
        for len in (0..=140)
            .step_by(7)
            .chain([31, 32, 33, 63, 64, 65, 127, 128, 129])
        {
            let text: String = (0..len)
                .map(|i| chars[(i * 5 + len) % chars.len()])
                .collect();
            assert_eq!(str(text.as_bytes()), Some(text.as_str()));
            let ascii = "x".repeat(len);
            for base in [ascii.as_bytes(), text.as_bytes()] {
                for at in 0..base.len() {
                    for &b in &bytes_of {
                        let mut changed = base.to_vec();
                        changed[at] = b;
                        assert_eq!(
                            str(&changed),
                            std::str::from_utf8(&changed).ok(),
                            "{changed:?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000);
    }

    // Native only: proptest forks and times out with processes.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Any bytes, and any text with one byte replaced: the standard library's answer.
        #[test]
        fn any_bytes_are_answered_as_the_standard_library_does(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            text in "\\PC{0,120}",
            at in 0usize..480,
            byte in proptest::prelude::any::<u8>(),
        ) {
            proptest::prop_assert_eq!(str(&bytes), std::str::from_utf8(&bytes).ok());
            let mut changed = text.clone().into_bytes();
            let len = changed.len();
            if let Some(slot) = changed.get_mut(at % len.max(1)) {
                *slot = byte;
            }
            proptest::prop_assert_eq!(str(&changed), std::str::from_utf8(&changed).ok());
            proptest::prop_assert_eq!(str(text.as_bytes()), Some(text.as_str()));
        }
    }
}
