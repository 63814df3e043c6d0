//! Retired pack names (H18): names of seed packs that no longer exist. Served pages, discovery
//! text, starter data and runtime sources must never name one; the tests in
//! `herma-server/tests/it/retired.rs` scan all of them against [`RETIRED_PACK_NAMES`].
//!
//! This is the one list. Retiring a pack means adding its name here; the scans then fail until
//! every mention is gone. The specification this build follows names no retired pack, so the
//! list starts empty; [`find`] is tested on its own with names that do occur.

/// Every retired pack name, as written (matched case-insensitively, as a whole word).
pub const RETIRED_PACK_NAMES: &[&str] = &[];

/// One mention of a retired name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mention {
    pub name: &'static str,
    /// Byte offset in the scanned text.
    pub offset: usize,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every whole-word, case-insensitive mention of any of `names` in `text`. A name may contain
/// spaces, dashes or dots; "word" means it is not glued to letters, digits or `_` either side.
pub fn find(text: &str, names: &[&'static str]) -> Vec<Mention> {
    let haystack = text.to_ascii_lowercase();
    let bytes = haystack.as_bytes();
    let mut found = Vec::new();
    for name in names {
        let needle = name.to_ascii_lowercase();
        if needle.is_empty() {
            continue;
        }
        let mut from = 0;
        while let Some(at) = haystack[from..].find(&needle) {
            let start = from + at;
            let end = start + needle.len();
            let before = start == 0 || !is_word_byte(bytes[start - 1]);
            let after = end == bytes.len() || !is_word_byte(bytes[end]);
            if before && after {
                found.push(Mention {
                    name,
                    offset: start,
                });
            }
            from = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
        }
    }
    found.sort_by_key(|m| m.offset);
    found
}

/// Mentions of the retired names in `text`.
pub fn mentions(text: &str) -> Vec<Mention> {
    find(text, RETIRED_PACK_NAMES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn finds_whole_words_in_any_case() {
        let text = "Old-Pack notes: see old-pack, OLD-PACK. Not oldpack, old-packs or my_old-pack.";
        let offsets: Vec<_> = find(text, &["old-pack"]).iter().map(|m| m.offset).collect();
        assert_eq!(offsets, [0, 20, 30]);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn names_with_spaces_and_several_names() {
        let found = find(
            "the Legacy Kit and alpha.v1 ship",
            &["legacy kit", "alpha.v1", "beta"],
        );
        let names: Vec<_> = found.iter().map(|m| m.name).collect();
        assert_eq!(names, ["legacy kit", "alpha.v1"]);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn non_ascii_text_is_scanned_safely() {
        assert_eq!(find("žluťoučký kůň — kit", &["kit"]).len(), 1);
        assert!(find("", &["kit"]).is_empty());
        assert!(find("kit", &[""]).is_empty());
        assert_eq!(find("ééé kůň", &["éé", "kůň"]).len(), 3);
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn the_list_is_well_formed() {
        for name in RETIRED_PACK_NAMES {
            assert!(!name.trim().is_empty() && name.trim() == *name, "`{name}`");
            // A retired name must never be one of the trusted producer surfaces.
            for current in ["tessera", "herma", "eranos", "agora"] {
                assert_ne!(name.to_ascii_lowercase(), current);
            }
        }
    }
}
