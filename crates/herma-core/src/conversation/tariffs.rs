//! Meta's standard tariffs, as a dated table: a Meta model without a row is refused, never
//! guessed.
//!
//! Source: Meta's pricing documentation (`https://dev.meta.ai/docs/pricing-rate-limits`),
//! standard tier. Every Muse Spark generation shares Spark's rate card and Muse Wonder has its
//! own. Contributor-tier ids are not here: they are refused before any tariff is looked up.
//! Review the table against Meta's page before changing models, and change [`CHECKED`] with it.

use crate::money::Tariff;

/// When the table was last checked against Meta's published standard prices.
pub const CHECKED: &str = "2026-12-01";

/// `$x` per million tokens in picodollars per token is `x × 10⁶`.
const fn per_million(dollars_times_100: u64) -> u64 {
    dollars_times_100 * 10_000
}

const SPARK: Tariff = Tariff {
    input_picos_per_token: per_million(125),
    output_picos_per_token: per_million(425),
    cached_input_picos_per_token: per_million(15),
};
const WONDER: Tariff = Tariff {
    input_picos_per_token: per_million(400),
    output_picos_per_token: per_million(2000),
    cached_input_picos_per_token: per_million(20),
};

/// Model id → standard tariff.
pub const META: &[(&str, Tariff)] = &[
    ("muse-spark-1.1", SPARK),
    ("muse-spark-1.2", SPARK),
    ("muse-spark-1.3", SPARK),
    ("muse-wonder-1.0", WONDER),
];

/// Meta's standard tariff for `model`, exactly as named.
pub fn meta(model: &str) -> Option<Tariff> {
    META.iter()
        .find(|(id, _)| *id == model)
        .map(|(_, tariff)| *tariff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn spark_and_wonder_prices_are_exact() {
        let spark = meta("muse-spark-1.3").unwrap();
        assert_eq!(spark.input_picos_per_token, 1_250_000, "$1.25 per million");
        assert_eq!(spark.output_picos_per_token, 4_250_000, "$4.25 per million");
        let wonder = meta("muse-wonder-1.0").unwrap();
        assert_eq!(wonder.input_picos_per_token, 4_000_000);
        assert_eq!(wonder.output_picos_per_token, 20_000_000);
        for (_, tariff) in META {
            assert!(tariff.cached_input_picos_per_token <= tariff.input_picos_per_token);
        }
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn unknown_and_near_miss_models_have_no_tariff() {
        for model in [
            "muse-spark",
            "MUSE-SPARK-1.3",
            "muse-spark-1.3 ",
            "muse-spark-9",
        ] {
            assert_eq!(meta(model), None, "{model}");
        }
    }
}
