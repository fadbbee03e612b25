//! `src/core/` is pure code: no async runtime, no HTTP, no Kubernetes API, no journal, no
//! clock, no randomness (STYLE.md 2.1, HAPTIC `tests/architecture_test.go`).

use std::fs;
use std::path::{Path, PathBuf};

const FORBIDDEN: &[&str] = &[
    "tokio",
    "reqwest",
    "kube::Api",
    "redb",
    "Instant::now",
    "SystemTime::now",
    "rand",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Forbidden names used as whole identifiers in code lines (comments are skipped, so the
/// module docs may name what they forbid).
fn violations(source: &str) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for word in FORBIDDEN {
            for (at, _) in line.match_indices(word) {
                let before = line[..at].chars().next_back();
                let after = line[at + word.len()..].chars().next();
                if !is_ident(before) && !is_ident(after) {
                    found.push((n + 1, *word));
                }
            }
        }
    }
    found
}

#[test]
fn core_has_no_io_clock_or_randomness() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() >= 3, "src/core/ not found or empty");
    let mut report = Vec::new();
    for file in files {
        let source = fs::read_to_string(&file).unwrap();
        for (line, word) in violations(&source) {
            report.push(format!("{}:{line}: `{word}`", file.display()));
        }
    }
    assert!(
        report.is_empty(),
        "src/core/ must stay pure:\n{}",
        report.join("\n")
    );
}

#[test]
fn scanner_finds_what_it_must() {
    assert_eq!(violations("use tokio::sync::mpsc;"), vec![(1, "tokio")]);
    assert_eq!(
        violations("let t = std::time::Instant::now();"),
        vec![(1, "Instant::now")]
    );
    assert_eq!(
        violations("let x = rand::random::<u8>();"),
        vec![(1, "rand")]
    );
    assert!(violations("// tokio is named in a comment\nlet operand = 1;").is_empty());
}
