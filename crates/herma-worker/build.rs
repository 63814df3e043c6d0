//! Lists `migrations/` (the files wrangler applies to D1) for the Durable Object that applies
//! them to its own database: `$OUT_DIR/migrations.rs`, `&[(file name, SQL), …]` in order.

#![allow(clippy::expect_used)] // a build script reports a failure by panicking

use std::fmt::Write;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("migrations");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("migrations/ is readable")
        .map(|entry| entry.expect("migrations/ is readable").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for path in files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("UTF-8 file names");
        writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a string");
    }
    out.push_str("]\n");
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    std::fs::write(target.join("migrations.rs"), out).expect("OUT_DIR is writable");
}
