//! Money, exactly: integers only.
//!
//! Budgets are microdollars (µ$, 10⁻⁶ USD); tariffs are picodollars per token (p$, 10⁻¹² USD),
//! which is the same number as microdollars per million tokens, so a price of `$1.25` per
//! million tokens is 1,250,000 p$ per token. Decimal settings are parsed digit by digit, never
//! through a float: `2.01` is exactly 2,010,000 µ$, and a reservation of exactly that much is
//! admitted by a `2.01` budget.

/// Picodollars in one microdollar.
pub const PICOS_PER_MICRO: u128 = 1_000_000;

/// Parses a plain decimal (`16384`, `2.01`, `0.000001`) into an integer of `scale` fractional
/// digits: `parse_scaled("2.01", 6)` is 2,010,000. Signs, exponents, separators, a bare or
/// trailing `.` and precision finer than the scale (other than trailing zeros) are refused.
pub fn parse_scaled(raw: &str, scale: u32) -> Result<u64, String> {
    let (whole, fraction) = match raw.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (raw, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return Err(format!(
            "`{raw}` is not a plain decimal number such as `2.01`"
        ));
    }
    let fraction = fraction.unwrap_or("");
    let kept = fraction.len().min(scale as usize);
    if fraction[kept..].bytes().any(|b| b != b'0') {
        return Err(format!(
            "`{raw}` has more than {scale} decimal places (the smallest unit is 10^-{scale})"
        ));
    }
    let too_large = || format!("`{raw}` is too large");
    let mut value: u64 = whole.parse().map_err(|_| too_large())?;
    for _ in 0..scale {
        value = value.checked_mul(10).ok_or_else(too_large)?;
    }
    let mut part: u64 = 0;
    for b in fraction[..kept].bytes() {
        part = part * 10 + u64::from(b - b'0');
    }
    for _ in kept..scale as usize {
        part *= 10;
    }
    value.checked_add(part).ok_or_else(too_large)
}

/// A dollar amount as microdollars: `2.01` → 2,010,000.
pub fn parse_usd_micros(raw: &str) -> Result<u64, String> {
    parse_scaled(raw, 6)
}

/// A price in dollars per million tokens as picodollars per token: `1.25` → 1,250,000.
pub fn parse_usd_per_million_picos(raw: &str) -> Result<u64, String> {
    parse_scaled(raw, 6)
}

/// Microdollars as a decimal dollar amount without trailing zeros: 2,010,000 → `2.01`.
pub fn format_micros(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let fraction = micros % 1_000_000;
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:06}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Whether `amount` more fits under `ceiling` after `spent`: exactly at the ceiling fits.
pub fn fits(spent: u64, amount: u64, ceiling: u64) -> bool {
    spent
        .checked_add(amount)
        .is_some_and(|total| total <= ceiling)
}

/// A tariff: what one token costs, in picodollars.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Tariff {
    pub input_picos_per_token: u64,
    pub output_picos_per_token: u64,
    /// Cached input, where the provider prices it lower (never above `input`).
    pub cached_input_picos_per_token: u64,
}

impl Tariff {
    /// The most `input_tokens` and `output_tokens` can cost, in microdollars, rounded up (a
    /// fraction of a microdollar is reserved as one). Exact: integer arithmetic in 128 bits.
    pub fn ceiling_micros(&self, input_tokens: u64, output_tokens: u64) -> u128 {
        let picos = u128::from(input_tokens) * u128::from(self.input_picos_per_token)
            + u128::from(output_tokens) * u128::from(self.output_picos_per_token);
        picos.div_ceil(PICOS_PER_MICRO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn decimals_parse_exactly() {
        for (raw, micros) in [
            ("2.01", 2_010_000),
            ("2", 2_000_000),
            ("0.000001", 1),
            ("2.010000000", 2_010_000),
            ("16384", 16_384_000_000),
            ("0", 0),
            ("007.5", 7_500_000),
        ] {
            assert_eq!(parse_usd_micros(raw), Ok(micros), "{raw}");
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn other_number_forms_are_refused() {
        for raw in [
            "",
            "-1",
            "+1",
            "1e3",
            "1E3",
            "1_000",
            "1,5",
            ".5",
            "5.",
            "0x10",
            " 1",
            "1 ",
            "1.2.3",
            "0.0000001",
            "inf",
            "NaN",
            "١",
        ] {
            assert!(parse_usd_micros(raw).is_err(), "{raw:?}");
        }
        assert!(parse_usd_micros("18446744073709.551616").is_err());
        assert_eq!(
            parse_usd_micros("18446744073709.551615"),
            Ok(u64::MAX),
            "the largest amount"
        );
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn micros_format_back_to_their_decimal() {
        for micros in [0, 1, 10, 2_010_000, 2_000_000, 123_456_789] {
            assert_eq!(parse_usd_micros(&format_micros(micros)), Ok(micros));
        }
        assert_eq!(format_micros(2_010_000), "2.01");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn ceilings_round_up_to_the_next_microdollar() {
        let tariff = Tariff {
            input_picos_per_token: 1_250_000,
            output_picos_per_token: 4_250_000,
            cached_input_picos_per_token: 150_000,
        };
        // 1000 × 1.25 µ$ + 100 × 4.25 µ$ = 1250 + 425.
        assert_eq!(tariff.ceiling_micros(1000, 100), 1675);
        // One input token is 1.25 µ$: reserved as 2.
        assert_eq!(tariff.ceiling_micros(1, 0), 2);
        assert_eq!(tariff.ceiling_micros(0, 0), 0);
        assert_eq!(
            tariff.ceiling_micros(u64::MAX, u64::MAX),
            (u128::from(u64::MAX) * 5_500_000).div_ceil(1_000_000)
        );
    }
}
