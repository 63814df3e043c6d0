//! Everything the commands print goes through here. A reader that stops early
//! (`herma keys list | head -1`) ends the output, not the command: what is left is dropped,
//! nothing panics, and the command exits as it would have.

use std::io::{ErrorKind, Write};

use crate::Failure;

/// Writes a line to standard output, like `println!`; a closed pipe drops it.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write(format!("{}\n", format_args!($($arg)*)).as_bytes())
    };
}

/// Writes `bytes` to standard output; a closed pipe drops them.
pub fn write(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(Failure::runtime(format!(
            "cannot write to standard output: {e}"
        ))),
        _ => Ok(()),
    }
}

/// Writes a line to standard error. A failure there has nowhere to be reported, so it is
/// dropped.
pub fn note(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Rows as columns aligned to their widest cell, two spaces apart (the last column is not
/// padded).
pub fn columns(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let width = cell.chars().count();
            match widths.get_mut(i) {
                Some(w) => *w = (*w).max(width),
                None => widths.push(width),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<width$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let rows = vec![
            vec!["NAME".to_owned(), "VALUE".to_owned()],
            vec!["HERMA_A_RATHER_LONG_NAME".to_owned(), "1".to_owned()],
            vec!["B".to_owned(), String::new()],
        ];
        assert_eq!(
            columns(&rows),
            "NAME                      VALUE\nHERMA_A_RATHER_LONG_NAME  1\nB\n"
        );
    }
}
