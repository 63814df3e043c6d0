//! Timestamps, and the [`Clock`] port. The core never reads the clock: callers pass `now` in,
//! and services ask a `Clock` — the wall clock of the runtime (`herma_store::SystemClock`
//! natively) or a [`ManualClock`] that tests move by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Time, injected.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// A clock tests move by hand.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn at(millis: i64) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(millis)))
    }

    pub fn advance_millis(&self, millis: i64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.load(Ordering::SeqCst))
    }
}

/// Milliseconds since the Unix epoch, UTC. Serialized as RFC 3339 with milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    pub fn plus_millis(self, millis: i64) -> Self {
        Self(self.0.saturating_add(millis))
    }

    /// RFC 3339 text, e.g. `2026-11-30T09:15:00.123Z`.
    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000_000;
        match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            // Written digit by digit: every receipt carries a few of these.
            Ok(dt) if (0..=9999).contains(&dt.year()) => {
                let mut text = String::with_capacity(24);
                push_digits(&mut text, dt.year().unsigned_abs(), 4);
                text.push('-');
                push_digits(&mut text, u32::from(u8::from(dt.month())), 2);
                text.push('-');
                push_digits(&mut text, u32::from(dt.day()), 2);
                text.push('T');
                push_digits(&mut text, u32::from(dt.hour()), 2);
                text.push(':');
                push_digits(&mut text, u32::from(dt.minute()), 2);
                text.push(':');
                push_digits(&mut text, u32::from(dt.second()), 2);
                text.push('.');
                push_digits(&mut text, u32::from(dt.millisecond()), 3);
                text.push('Z');
                text
            }
            Ok(dt) => {
                let ms = dt.millisecond();
                format!(
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                    dt.year(),
                    u8::from(dt.month()),
                    dt.day(),
                    dt.hour(),
                    dt.minute(),
                    dt.second(),
                    ms
                )
            }
            Err(_) => self.0.to_string(),
        }
    }

    pub fn parse_rfc3339(raw: &str) -> Option<Self> {
        let dt = OffsetDateTime::parse(raw, &Rfc3339).ok()?;
        i64::try_from(dt.unix_timestamp_nanos() / 1_000_000)
            .ok()
            .map(Self)
    }
}

/// `value`'s last `width` (at most 4) decimal digits, zero-padded.
fn push_digits(text: &mut String, value: u32, width: usize) {
    let mut digits = [b'0'; 4];
    let mut rest = value;
    for digit in digits.iter_mut().take(width).rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    for &digit in digits.iter().take(width) {
        text.push(char::from(digit));
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse_rfc3339(&raw)
            .ok_or_else(|| serde::de::Error::custom(format!("`{raw}` is not an RFC 3339 time")))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::DateTime,
            )))
            .examples([serde_json::json!("2026-11-30T09:15:00.123Z")])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Timestamp {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn rfc3339_text_is_what_the_formatter_writes() {
        let formatted = |millis: i64| {
            let dt =
                OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000).unwrap();
            format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                dt.year(),
                u8::from(dt.month()),
                dt.day(),
                dt.hour(),
                dt.minute(),
                dt.second(),
                dt.millisecond()
            )
        };
        let mut millis: i64 = -62_167_219_200_000; // 0000-01-01T00:00:00.000Z
        let last: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
        while millis < last {
            assert_eq!(Timestamp(millis).to_rfc3339(), formatted(millis));
            millis += 7_919_993_337; // about three months, every field moving
        }
        for millis in [0, 1, 999, 1_000, -1, last, 1_764_763_200_123] {
            assert_eq!(Timestamp(millis).to_rfc3339(), formatted(millis));
        }
        // Before the year 0 the formatter still writes it.
        let before = -62_167_219_200_001;
        assert_eq!(Timestamp(before).to_rfc3339(), formatted(before));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn formats_and_parses_rfc3339() {
        let t = Timestamp::from_millis(1_796_029_200_123);
        let text = t.to_rfc3339();
        assert_eq!(text, "2026-11-30T09:00:00.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&text), Some(t));
        assert_eq!(serde_json::to_value(t).unwrap(), serde_json::json!(text));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn epoch_is_formatted() {
        assert_eq!(
            Timestamp::from_millis(0).to_rfc3339(),
            "1970-01-01T00:00:00.000Z"
        );
    }
}
