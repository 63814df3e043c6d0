//! Lowercase hex for the ids and digests Herma writes on every request (a receipt id, a
//! direct answer's id, the conversation id's and the seal's digests): four bytes at a time in
//! one 64-bit word, where a byte at a time through a table or `String::push` cost 8 to 18
//! instructions a byte.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` to `out` as lowercase hex, two digits a byte.
pub fn push(out: &mut String, bytes: &[u8]) {
    let mut digits = [0u8; 64];
    for part in bytes.chunks(digits.len() / 2) {
        let text = &mut digits[..2 * part.len()];
        write(part, text);
        // Only ASCII digits and letters were written.
        out.push_str(std::str::from_utf8(text).unwrap_or_default());
    }
}

/// Writes `bytes` as hex into `out`, which is twice as long.
fn write(bytes: &[u8], out: &mut [u8]) {
    let mut words = bytes.chunks_exact(4);
    let mut texts = out.chunks_exact_mut(8);
    for (word, text) in (&mut words).zip(&mut texts) {
        let mut four = [0u8; 4];
        four.copy_from_slice(word);
        text.copy_from_slice(&eight_digits(u32::from_be_bytes(four)).to_be_bytes());
    }
    for (byte, pair) in words
        .remainder()
        .iter()
        .zip(texts.into_remainder().chunks_exact_mut(2))
    {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
}

/// The eight hex digits of `word`, most significant first, as the bytes of a big-endian word:
/// each nibble spread to a byte of its own, then `'0'` added, and `'a' - '0' - 10` more where
/// the nibble is 10 or more (where adding 6 carries into the byte's fifth bit).
fn eight_digits(word: u32) -> u64 {
    const NIBBLES: u64 = 0x0f0f_0f0f_0f0f_0f0f;
    const LOW_BITS: u64 = 0x0101_0101_0101_0101;
    let x = u64::from(word);
    let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    let x = (x | (x << 4)) & NIBBLES;
    let letters = ((x + 6 * LOW_BITS) >> 4) & LOW_BITS;
    x + u64::from(b'0') * LOW_BITS + letters * u64::from(b'a' - b'0' - 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_format(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Every byte value at every place of lengths to 12, around one 32-byte part and around
    /// two (every remainder after the four-byte words, each side of a part's end), after a
    /// prefix already in the string.
    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn writes_what_format_writes() {
        let pairs: Vec<String> = (0..=255u8).map(|byte| by_format(&[byte])).collect();
        for len in (0..=12usize).chain(28..=36).chain(62..=70) {
            let base: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(37)).collect();
            let base_hex = format!("id_{}", by_format(&base));
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut bytes = base.clone();
                    bytes[at] = byte;
                    let mut want = base_hex.clone();
                    want.replace_range(3 + 2 * at..5 + 2 * at, &pairs[usize::from(byte)]);
                    let mut out = String::from("id_");
                    push(&mut out, &bytes);
                    assert_eq!(out, want, "{bytes:?}");
                }
            }
            let mut out = String::new();
            push(&mut out, &base);
            assert_eq!(out, by_format(&base));
        }
    }
}
