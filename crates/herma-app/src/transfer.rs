//! Import and export files: a JSON array of records, or JSON Lines (one record per line).
//! Parsing validates every record before anything is written, so an import is all or nothing.

use std::collections::BTreeMap;

use herma_core::{FieldError, Problem, ProblemCode, json};
use serde::Serialize;

use crate::records::{Managed, decode_record};

/// At most this many record errors are reported at once.
pub const MAX_REPORTED_ERRORS: usize = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON array of records.
    Json,
    /// One JSON object per line; blank lines are skipped.
    Jsonl,
}

impl Format {
    /// `.jsonl`/`.ndjson` → JSON Lines; anything else → JSON.
    pub fn for_path(path: &str) -> Self {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
            Format::Jsonl
        } else {
            Format::Json
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "json" => Some(Format::Json),
            "jsonl" | "ndjson" => Some(Format::Jsonl),
            _ => None,
        }
    }
}

fn prefix(problem: Problem, index: usize, line: Option<usize>) -> Vec<FieldError> {
    let errors = if problem.errors.is_empty() {
        vec![FieldError::new("", problem.detail.clone())]
    } else {
        problem.errors
    };
    errors
        .into_iter()
        .map(|e| FieldError {
            pointer: format!("/{index}{}", e.pointer),
            detail: match line {
                Some(line) => format!("line {line}: {}", e.detail),
                None => e.detail,
            },
        })
        .collect()
}

/// Parses and validates every record of a file. `progress(done, total)` is called as records
/// are checked. Duplicate ids within the file are refused.
pub fn parse_records<D: Managed>(
    bytes: &[u8],
    format: Format,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<D>, Problem> {
    let items: Vec<(Result<serde_json::Value, Problem>, Option<usize>)> = match format {
        Format::Json => match json::parse_strict(bytes)? {
            serde_json::Value::Array(items) => items.into_iter().map(|v| (Ok(v), None)).collect(),
            _ => {
                return Err(Problem::new(
                    ProblemCode::ValidationFailed,
                    "a JSON import file must hold one array of records (use .jsonl for one record per line)",
                ));
            }
        },
        Format::Jsonl => bytes
            .split(|b| *b == b'\n')
            .enumerate()
            .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
            .map(|(i, line)| (json::parse_strict(line), Some(i + 1)))
            .collect(),
    };
    let total = items.len();
    let mut records = Vec::with_capacity(total);
    let mut errors = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (index, (parsed, line)) in items.into_iter().enumerate() {
        match parsed.and_then(decode_record::<D>) {
            Ok(record) => {
                if let Some(first) = seen.insert(record.id().to_owned(), index) {
                    errors.push(FieldError::new(
                        format!("/{index}/id"),
                        format!("duplicate id `{}` (first at record {first})", record.id()),
                    ));
                }
                records.push(record);
            }
            Err(problem) => errors.extend(prefix(problem, index, line)),
        }
        progress(index + 1, total);
        if errors.len() >= MAX_REPORTED_ERRORS {
            break;
        }
    }
    if errors.is_empty() {
        Ok(records)
    } else {
        errors.truncate(MAX_REPORTED_ERRORS);
        let mut problem = Problem::validation(errors);
        problem.detail = format!(
            "{} problem(s) found; nothing was imported. {}",
            problem.errors.len(),
            problem.detail
        );
        Err(problem)
    }
}

/// Writes records as a pretty JSON array or as JSON Lines.
pub fn write_records<S: Serialize>(records: &[S], format: Format) -> Result<Vec<u8>, Problem> {
    let fail =
        |e: serde_json::Error| Problem::new(ProblemCode::Internal, format!("encoding failed: {e}"));
    match format {
        Format::Json => {
            let mut out = serde_json::to_vec_pretty(records).map_err(fail)?;
            out.push(b'\n');
            Ok(out)
        }
        Format::Jsonl => {
            let mut out = Vec::new();
            for record in records {
                serde_json::to_writer(&mut out, record).map_err(fail)?;
                out.push(b'\n');
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herma_core::model::ProvisionSpec;

    const GOOD: &str = r#"{"id":"a","action":"respond_directly","triggers":{"keywords":["x"]},"response":{"text":"hi"}}"#;

    #[test]
    fn json_and_jsonl_parse_the_same_records() {
        let array = format!("[{GOOD}]");
        let from_json: Vec<ProvisionSpec> =
            parse_records(array.as_bytes(), Format::Json, &mut |_, _| {}).unwrap();
        let lines = format!("\n{GOOD}\n\n");
        let from_jsonl: Vec<ProvisionSpec> =
            parse_records(lines.as_bytes(), Format::Jsonl, &mut |_, _| {}).unwrap();
        assert_eq!(from_json, from_jsonl);
        let back = write_records(&from_json, Format::Jsonl).unwrap();
        let again: Vec<ProvisionSpec> =
            parse_records(&back, Format::Jsonl, &mut |_, _| {}).unwrap();
        assert_eq!(again, from_json);
    }

    #[test]
    fn every_bad_record_is_named_and_nothing_passes() {
        let bad = format!("{GOOD}\n{{\"id\":\"b\"}}\n{GOOD}\nnot json\n");
        let err = parse_records::<ProvisionSpec>(bad.as_bytes(), Format::Jsonl, &mut |_, _| {})
            .unwrap_err();
        let pointers: Vec<_> = err.errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/1/action", "/2/id", "/3"]);
        assert!(
            err.errors[0].detail.starts_with("line 2:"),
            "{}",
            err.errors[0].detail
        );
        assert!(err.detail.contains("nothing was imported"));
    }

    #[test]
    fn progress_is_reported() {
        let array = format!("[{GOOD}]");
        let mut calls = Vec::new();
        let _: Vec<ProvisionSpec> = parse_records(array.as_bytes(), Format::Json, &mut |d, t| {
            calls.push((d, t))
        })
        .unwrap();
        assert_eq!(calls, [(1, 1)]);
    }

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(Format::for_path("x.JSONL"), Format::Jsonl);
        assert_eq!(Format::for_path("x.json"), Format::Json);
    }
}
