//! The workspace's module layout: within a crate, no module imports a sibling that imports it
//! back. Every `crate::…` and `super::…` path outside comments and test modules is resolved to
//! the deepest module it names; two siblings (children of one parent, at any depth) that each
//! reach into the other form a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` are the root.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without line comments and without its `#[cfg(test)]` tail.
fn code(text: &str) -> String {
    let text = text.find("#[cfg(test)]").map_or(text, |cut| &text[..cut]);
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after each `prefix` in `code`: `crate::a::b::C` gives `[a, b, C]`.
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let path: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
        if !path.is_empty() {
            out.push(path);
        }
    }
    out
}

/// Sibling modules of one crate that reach into each other.
fn sibling_cycles(src: &Path) -> Vec<(Module, Module)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .into_iter()
        .map(|f| (module_of(src, &f), f))
        .filter(|(m, _)| m.last().is_none_or(|last| last != "tests"))
        .collect();
    let resolve = |path: Vec<String>| -> Module {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|candidate| modules.contains_key(candidate))
            .unwrap_or_default()
    };
    let mut edges: BTreeSet<(Module, Module)> = BTreeSet::new();
    for (module, file) in &modules {
        let code = code(&std::fs::read_to_string(file).unwrap());
        let owned = |p: Vec<&str>| p.into_iter().map(str::to_owned).collect::<Vec<_>>();
        let mut targets: Vec<Module> = paths_after(&code, "crate::")
            .into_iter()
            .map(|p| resolve(owned(p)))
            .collect();
        if let Some((_, parent)) = module.split_last() {
            targets.extend(paths_after(&code, "super::").into_iter().map(|p| {
                let mut full = parent.to_vec();
                full.extend(owned(p));
                resolve(full)
            }));
        }
        for target in targets {
            if &target != module {
                edges.insert((module.clone(), target));
            }
        }
    }
    // `a` reaches `b` when any module inside `a` imports something inside `b`.
    let reaches = |a: &Module, b: &Module| {
        edges
            .iter()
            .any(|(from, to)| from.starts_with(a) && to.starts_with(b))
    };
    let mut cycles = Vec::new();
    for a in modules.keys() {
        for b in modules.keys() {
            let siblings =
                !a.is_empty() && a.len() == b.len() && a[..a.len() - 1] == b[..b.len() - 1];
            if siblings && a < b && reaches(a, b) && reaches(b, a) {
                cycles.push((a.clone(), b.clone()));
            }
        }
    }
    cycles
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cycles = Vec::new();
    let mut scanned = 0;
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            scanned += 1;
            for (a, b) in sibling_cycles(&src) {
                cycles.push(format!(
                    "{}: {} <-> {}",
                    src.display(),
                    a.join("::"),
                    b.join("::")
                ));
            }
        }
    }
    assert!(scanned >= 10, "scanned {scanned} crates");
    assert!(
        cycles.is_empty(),
        "module import cycles:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("outer")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod outer;\n").unwrap();
    std::fs::write(src.join("a.rs"), "// crate::outer is only named here\n").unwrap();
    std::fs::write(src.join("outer/mod.rs"), "mod x;\nmod y;\n").unwrap();
    std::fs::write(src.join("outer/x.rs"), "use super::y::Y;\npub struct X;\n").unwrap();
    std::fs::write(
        src.join("outer/y.rs"),
        "use crate::outer::x::X;\npub struct Y;\n",
    )
    .unwrap();
    let owned = |parts: &[&str]| parts.iter().map(|s| (*s).to_owned()).collect::<Module>();
    assert_eq!(
        sibling_cycles(&src),
        [(owned(&["outer", "x"]), owned(&["outer", "y"]))]
    );
    std::fs::write(src.join("outer/y.rs"), "pub struct Y;\n").unwrap();
    assert!(sibling_cycles(&src).is_empty());
}
