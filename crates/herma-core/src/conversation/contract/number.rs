//! Exact JSON values: numbers compared by their decimal form (never through binary floating
//! point, so `19.99` is a multiple of `0.01`), and a canonical form for equality and uniqueness.

use std::cmp::Ordering;

use serde_json::{Number, Value};

/// A JSON number as an exact decimal: `0.d₁d₂…dₙ × 10^exponent`, normalized (no leading or
/// trailing zero digits; zero is no digits, not negative, exponent 0), so equal values are equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    /// The exact value of `number` as JSON writes it (an `f64` by its shortest round-trip form).
    pub(super) fn of(number: &Number) -> Self {
        Self::parse(&number.to_string())
    }

    /// Reads `[-]digits[.digits][e[±]digits]`; other characters cannot occur in a JSON number.
    fn parse(text: &str) -> Self {
        let (mantissa, exponent) = match text.find(['e', 'E']) {
            Some(at) => (&text[..at], parse_exponent(&text[at + 1..])),
            None => (text, 0),
        };
        let negative = mantissa.starts_with('-');
        let mantissa = mantissa.trim_start_matches('-');
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let mut digits: Vec<u8> = whole
            .bytes()
            .chain(fraction.bytes())
            .filter(u8::is_ascii_digit)
            .map(|b| b - b'0')
            .collect();
        let leading = digits.iter().take_while(|d| **d == 0).count();
        digits.drain(..leading);
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            return Self::zero();
        }
        let point = i64::try_from(whole.len()).unwrap_or(i64::MAX);
        Self {
            negative,
            digits,
            exponent: point
                .saturating_add(exponent)
                .saturating_sub(i64::try_from(leading).unwrap_or(i64::MAX)),
        }
    }

    fn zero() -> Self {
        Self {
            negative: false,
            digits: Vec::new(),
            exponent: 0,
        }
    }

    pub(super) fn is_positive(&self) -> bool {
        !self.negative && !self.digits.is_empty()
    }

    /// Whether `self` is an integer multiple of `step` (which must be positive).
    pub(super) fn is_multiple_of(&self, step: &Decimal) -> bool {
        if self.digits.is_empty() {
            return true;
        }
        // self = A × 10^a and step = S × 10^s with A, S integers that do not end in zero.
        let a = self.exponent.saturating_sub(len(&self.digits));
        let s = step.exponent.saturating_sub(len(&step.digits));
        if a < s {
            return false; // A / (S × 10^k) is never whole when A does not end in zero
        }
        let Some(divisor) = as_integer(&step.digits) else {
            return false; // a JSON number has at most 20 significant digits
        };
        // (A × 10^(a - s)) mod S, digit by digit, so nothing overflows.
        let mut remainder: u128 = 0;
        for digit in self.digits.iter().copied() {
            remainder = (remainder * 10 + u128::from(digit)) % divisor;
        }
        for _ in 0..(a - s) {
            if remainder == 0 {
                break;
            }
            remainder = remainder * 10 % divisor;
        }
        remainder == 0
    }

    /// A text form equal for equal values, and only for them.
    fn canonical(&self) -> String {
        let digits: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let sign = if self.negative { "-" } else { "" };
        format!("{sign}0.{digits}e{}", self.exponent)
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let signum = |d: &Decimal| match (d.negative, d.digits.is_empty()) {
            (_, true) => 0,
            (true, false) => -1,
            (false, false) => 1,
        };
        match signum(self).cmp(&signum(other)) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
        // Same sign: compare magnitudes (no trailing zeros, so a longer prefix is larger).
        let magnitude = self
            .exponent
            .cmp(&other.exponent)
            .then_with(|| self.digits.cmp(&other.digits));
        if self.negative {
            magnitude.reverse()
        } else {
            magnitude
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn parse_exponent(text: &str) -> i64 {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.trim_start_matches('+')),
    };
    let magnitude = digits
        .bytes()
        .filter(u8::is_ascii_digit)
        .fold(0i64, |acc, b| {
            acc.saturating_mul(10).saturating_add(i64::from(b - b'0'))
        });
    if negative { -magnitude } else { magnitude }
}

fn len(digits: &[u8]) -> i64 {
    i64::try_from(digits.len()).unwrap_or(i64::MAX)
}

fn as_integer(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |acc, d| {
        acc.checked_mul(10)?.checked_add(u128::from(*d))
    })
}

/// A text form of `value` equal for values JSON Schema calls equal: numbers by value (`1` and
/// `1.0` are one value), objects regardless of member order.
pub(super) fn canonical(value: &Value) -> String {
    match value {
        Value::Number(n) => Decimal::of(n).canonical(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(members) => {
            let mut members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            members.sort();
            format!("{{{}}}", members.join(","))
        }
        Value::Null | Value::Bool(_) | Value::String(_) => value.to_string(),
    }
}

/// Whether two JSON values are equal as JSON Schema compares them.
pub(super) fn same_value(a: &Value, b: &Value) -> bool {
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dec(v: Value) -> Decimal {
        match v {
            Value::Number(n) => Decimal::of(&n),
            other => panic!("not a number: {other}"),
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn decimals_order_exactly_across_integer_and_float_forms() {
        let ordered = [
            json!(-1e300),
            json!(i64::MIN),
            json!(-2.5),
            json!(-0.001),
            json!(0),
            json!(0.001),
            json!(1),
            json!(1.5),
            json!(9007199254740992.0),
            json!(9007199254740993u64),
            json!(u64::MAX),
            json!(1e300),
        ];
        for pair in ordered.windows(2) {
            assert!(dec(pair[0].clone()) < dec(pair[1].clone()), "{pair:?}");
        }
        assert_eq!(dec(json!(1)), dec(json!(1.0)));
        assert_eq!(dec(json!(-0.0)), dec(json!(0)));
        assert_eq!(dec(json!(1500)), dec(json!(1.5e3)));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn multiples_are_decided_in_decimal_not_binary() {
        let yes = [
            (json!(19.99), json!(0.01)),
            (json!(0.3), json!(0.1)),
            (json!(0), json!(7)),
            (json!(-21), json!(7)),
            (json!(1.5e20), json!(3e-5)),
            (json!(u64::MAX), json!(5)),
        ];
        for (value, step) in yes {
            assert!(
                dec(value.clone()).is_multiple_of(&dec(step.clone())),
                "{value} / {step}"
            );
        }
        let no = [
            (json!(19.995), json!(0.01)),
            (json!(22), json!(7)),
            (json!(0.5), json!(1)),
            (json!(1e20), json!(3)),
        ];
        for (value, step) in no {
            assert!(
                !dec(value.clone()).is_multiple_of(&dec(step.clone())),
                "{value} / {step}"
            );
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn canonical_equality_ignores_member_order_and_number_form() {
        assert!(same_value(
            &json!({"a": 1, "b": [2.0]}),
            &json!({"b": [2], "a": 1.0})
        ));
        assert!(!same_value(&json!("1"), &json!(1)));
        assert!(!same_value(&json!([1, 2]), &json!([2, 1])));
    }
}
