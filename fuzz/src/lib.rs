//! What the fuzz targets share: ways to cut one input into chunks, and the checks on the field
//! errors Herma reports.
//!
//! A target panics (and libFuzzer records the input) when an invariant breaks, not only when
//! Herma itself panics.

use serde_json::Value;

/// The same bytes cut three ways: whole, one byte at a time, and at boundaries drawn from a
/// generator seeded by the bytes themselves (so a failing input replays the same cuts).
pub fn chunkings(bytes: &[u8]) -> [Vec<&[u8]>; 3] {
    let whole = vec![bytes];
    let single = bytes.chunks(1).collect();
    let mut state = fnv(bytes) | 1;
    let mut uneven = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        // xorshift64: sizes 1..=17, so boundaries fall inside every kind of line and event.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let size = usize::try_from(state % 17).unwrap_or(0) + 1;
        let (now, later) = rest.split_at(size.min(rest.len()));
        uneven.push(now);
        rest = later;
    }
    [whole, single, uneven]
}

/// FNV-1a over `bytes`.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The pointer one level up (`/a/b` → `/a`, `/a` → ``); `None` for the root.
pub fn parent(pointer: &str) -> Option<&str> {
    pointer.rfind('/').map(|i| &pointer[..i])
}

/// A field error names a node of `value`: the pointer resolves, or it names a member missing
/// from an object that is there ("is required"). Pointers are RFC 6901, so `~` and `/` in a
/// member name must be escaped for this to hold.
pub fn names_a_node(value: &Value, pointer: &str) -> bool {
    if !(pointer.is_empty() || pointer.starts_with('/')) {
        return false;
    }
    if value.pointer(pointer).is_some() {
        return true;
    }
    parent(pointer)
        .and_then(|up| value.pointer(up))
        .is_some_and(Value::is_object)
}
