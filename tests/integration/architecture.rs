//! The shape of the `haptic` crate (STYLE.md 2.1, HAPTIC `tests/architecture_test.go`), checked
//! on the source itself:
//!
//! - `src/core/` is pure code: no async runtime, no HTTP, no Kubernetes API, no journal, no
//!   file system or network, no clock, no randomness; so is every component's `decide` module;
//! - the layers point one way only. Bottom up: `haptic_journal` (ids, events, work items) ->
//!   `core` -> `dispatch` -> `telemetry` -> adapters (`k8s`, `dataplane`, `source`, `validate`,
//!   which never reach each other) -> `components` -> `runtime` -> `cli` (and the binaries);
//!   the components form no circle among themselves; telemetry names no component (each
//!   component registers its own metric families);
//! - the product's `[dependencies]` name neither the test peers (`haptic-tools`), the test kit
//!   (`haptic-testkit`) nor `nix`.
//!
//! Module references are found by parsing: every `use` tree (groups, `self`, `super`, renames,
//! globs, `pub use` re-exports) and every qualified path in code (`crate::a::b`, `super::x`),
//! resolved against the file's own module path; comments and string literals are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Names that must not appear as identifiers in pure code.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "reqwest",
    "kube::Api",
    "redb",
    "Instant::now",
    "SystemTime::now",
    "UnixMillis::now",
    "rand",
    "std::fs",
    "std::net",
    "std::process",
    "std::thread",
];

/// The layer of each top-level module of `src/` (higher may use lower, never the reverse).
const LAYERS: &[(&str, u8)] = &[
    ("core", 1),
    ("dispatch", 2),
    ("telemetry", 3),
    ("k8s", 4),
    ("dataplane", 4),
    ("source", 4),
    ("validate", 4),
    ("components", 5),
    ("runtime", 6),
    ("cli", 7),
];

/// Layer 4: the adapters, which are independent of each other.
const ADAPTERS: u8 = 4;

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

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn is_ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The source with comments, string and char literals blanked out (lengths and line breaks
/// kept, so line numbers stay right).
fn code_only(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &str| {
        for c in s.chars() {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with("/*") {
            // Nested block comments.
            let (mut depth, mut j) = (0usize, 0usize);
            while j < rest.len() {
                if rest[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += rest[j..].chars().next().map_or(1, char::len_utf8);
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if let Some(len) = raw_string_len(rest) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() {
                match rest.as_bytes()[j] {
                    b'\\' => j += 2,
                    b'"' => {
                        j += 1;
                        break;
                    }
                    _ => j += rest[j..].chars().next().map_or(1, char::len_utf8),
                }
            }
            let j = j.min(rest.len());
            blank(&mut out, &rest[..j]);
            i += j;
        } else if rest.starts_with('\'') && char_literal_len(rest).is_some() {
            let len = char_literal_len(rest).unwrap_or(1);
            blank(&mut out, &rest[..len]);
            i += len;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Length of a raw string literal (`r"..."`, `r#"..."#`, `br"..."`) at the start of `s`.
fn raw_string_len(s: &str) -> Option<usize> {
    let t = s.strip_prefix('b').unwrap_or(s);
    let prefix = s.len() - t.len();
    let t = t.strip_prefix('r')?;
    let hashes = t.chars().take_while(|&c| c == '#').count();
    let t = &t[hashes..];
    if !t.starts_with('"') {
        return None;
    }
    let close = format!("\"{}", "#".repeat(hashes));
    let end = t[1..].find(&close)? + 1 + close.len();
    Some(prefix + 1 + hashes + end)
}

/// Length of a char literal (`'a'`, `'\n'`, `'\u{1F600}'`) at the start of `s`; `None` for a
/// lifetime (`'a` without a closing quote).
fn char_literal_len(s: &str) -> Option<usize> {
    let rest = &s[1..];
    if let Some(esc) = rest.strip_prefix('\\') {
        let close = esc.find('\'')?;
        return Some(2 + close + 1);
    }
    let c = rest.chars().next()?;
    rest[c.len_utf8()..]
        .starts_with('\'')
        .then_some(1 + c.len_utf8() + 1)
}

/// Forbidden names used as whole identifiers in code (comments and strings are skipped, so the
/// module docs may name what they forbid).
fn violations(source: &str) -> Vec<(usize, &'static str)> {
    let code = code_only(source);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
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

/// The module path of a file under `src/` (`k8s/writer/status.rs` -> `["k8s", "writer",
/// "status"]`, `k8s/mod.rs` -> `["k8s"]`, `lib.rs` -> `[]`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// Splits a use tree (`a::{b, c::d as e, self}`) into its full paths (renames dropped).
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&s[start..]);
        out
    }
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim().trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut p = prefix.to_vec();
            p.extend(
                head.split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            for item in split_top(inner) {
                walk(&p, item, out);
            }
            return;
        }
        let tree = tree.split(" as ").next().unwrap_or(tree).trim();
        let mut p = prefix.to_vec();
        for seg in tree.split("::").map(str::trim) {
            if seg == "self" && !p.is_empty() {
                continue;
            }
            if !seg.is_empty() {
                p.push(seg.to_owned());
            }
        }
        out.push(p);
    }
    let mut out = Vec::new();
    walk(&[], tree, &mut out);
    out
}

/// Every module path a file refers to: its `use` trees and its qualified paths in code, as
/// written (relative ones still start with `super`/`self`/a name).
fn referenced_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use` declarations (with `pub`, `pub(crate)`, ... in front).
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("use ") {
        let before = code[..at].chars().next_back();
        if is_ident(before) {
            continue;
        }
        // Only at the start of a statement: the previous non-space char is `;`, `}`, `{`, `)`
        // (after `pub(crate)`), `]` (after an attribute), a `pub` keyword or the file start.
        let prev = code[..at].trim_end();
        let ok = prev.is_empty()
            || prev.ends_with(';')
            || prev.ends_with('}')
            || prev.ends_with('{')
            || prev.ends_with(')')
            || prev.ends_with(']')
            || prev.ends_with("pub");
        if !ok {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            continue;
        };
        let tree = &code[at + 4..at + end];
        let _ = bytes;
        out.extend(expand_use_tree(tree));
    }
    // Qualified paths in code: `crate::a::b`, `super::super::x`, `self::x`.
    for start_word in ["crate", "super", "self"] {
        for (at, _) in code.match_indices(&format!("{start_word}::")) {
            let before = code[..at].chars().next_back();
            if is_ident(before) || before == Some(':') {
                continue;
            }
            let rest = &code[at..];
            let mut path = Vec::new();
            let mut s = rest;
            loop {
                let seg: String = s
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if seg.is_empty() {
                    break;
                }
                s = &s[seg.len()..];
                path.push(seg);
                match s.strip_prefix("::") {
                    Some(t) => s = t,
                    None => break,
                }
            }
            out.push(path);
        }
    }
    out
}

/// Resolves a referenced path against the referring module; `None` when it leaves the crate
/// (another crate, a prelude name, a child item of the same module).
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "super" | "self" => {
            let mut base = module.to_vec();
            let mut rest = path;
            while let Some(seg) = rest.first() {
                match seg.as_str() {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            Some(base)
        }
        // A relative path: a child module or an item of this module (same top-level module).
        _ => None,
    }
}

fn layer(top: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == top).map(|(_, l)| *l)
}

/// One reference from a file to another module of the crate.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    file: String,
    from: Vec<String>,
    to: Vec<String>,
}

/// Every in-crate reference of the files given as `(path relative to src, source)`.
fn edges(files: &[(PathBuf, String)]) -> Vec<Edge> {
    let mut out = Vec::new();
    for (rel, source) in files {
        let module = module_of(rel);
        let code = code_only(source);
        for path in referenced_paths(&code) {
            if let Some(to) = resolve(&module, &path)
                && !to.is_empty()
            {
                out.push(Edge {
                    file: rel.display().to_string(),
                    from: module.clone(),
                    to,
                });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The layering problems of `edges` (empty when the shape holds).
fn layering_problems(edges: &[Edge]) -> Vec<String> {
    let mut problems = BTreeSet::new();
    let mut components: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in edges {
        let (Some(from_top), Some(to_top)) = (e.from.first(), e.to.first()) else {
            continue;
        };
        if from_top == to_top {
            if from_top == "components"
                && let (Some(a), Some(b)) = (e.from.get(1), e.to.get(1))
                && a != b
            {
                components.entry(a.clone()).or_default().insert(b.clone());
            }
            continue;
        }
        let (Some(lf), Some(lt)) = (layer(from_top), layer(to_top)) else {
            continue;
        };
        if lt > lf {
            problems.insert(format!(
                "{}: `{}` (layer {lf}) reaches up to `{}` (layer {lt})",
                e.file,
                e.from.join("::"),
                e.to.join("::")
            ));
        } else if lf == ADAPTERS && lt == ADAPTERS {
            problems.insert(format!(
                "{}: adapter `{from_top}` reaches adapter `{}` (adapters are independent)",
                e.file,
                e.to.join("::")
            ));
        }
    }
    // No circle among the components.
    for start in components.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            for next in components.get(&at).into_iter().flatten() {
                if next == start {
                    let mut cycle = trail.clone();
                    cycle.push(start.clone());
                    problems.insert(format!("components form a circle: {}", cycle.join(" -> ")));
                } else if seen.insert(next.clone()) {
                    let mut t = trail.clone();
                    t.push(next.clone());
                    stack.push((next.clone(), t));
                }
            }
        }
    }
    problems.into_iter().collect()
}

/// Every `.rs` file under `root`, as (path relative to `root`, source).
fn load_under(root: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = fs::read_to_string(&f).unwrap();
            (f.strip_prefix(root).unwrap().to_path_buf(), text)
        })
        .collect()
}

fn load_src() -> Vec<(PathBuf, String)> {
    load_under(&src_dir())
}

fn assert_pure(dir_or_files: &[PathBuf], what: &str) {
    let mut report = Vec::new();
    for file in dir_or_files {
        let source = fs::read_to_string(file).unwrap();
        for (line, word) in violations(&source) {
            report.push(format!("{}:{line}: `{word}`", file.display()));
        }
    }
    assert!(
        report.is_empty(),
        "{what} must stay pure:\n{}",
        report.join("\n")
    );
}

#[test]
fn core_has_no_io_clock_or_randomness() {
    let root = src_dir().join("core");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() >= 3, "src/core/ not found or empty");
    assert_pure(&files, "src/core/");
}

/// The components' pure modules besides their `decide` files and folders (paths under
/// `src/components/`, a folder standing for every file in it): the scheduler's plan, the
/// deployer's structural diff, its disk and loaded comparisons, its pod ledger and its retry rule.
const PURE_MODULES: &[&str] = &[
    "scheduler/plan.rs",
    "deployer/structure",
    "deployer/compare.rs",
    "deployer/ledger.rs",
    "deployer/retry.rs",
];

/// Every pure module of the components: each `decide.rs`, every file of a `decide/` folder, and
/// [`PURE_MODULES`].
fn pure_component_modules() -> Vec<PathBuf> {
    let root = src_dir().join("components");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut pure: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| {
            f.file_stem().is_some_and(|s| s == "decide")
                || f.parent()
                    .and_then(Path::file_name)
                    .is_some_and(|d| d == "decide")
        })
        .collect();
    for m in PURE_MODULES {
        let path = root.join(m);
        if path.is_dir() {
            let before = pure.len();
            rust_files(&path, &mut pure);
            assert!(
                pure.len() > before,
                "pure folder {m} under src/components/ is empty"
            );
            continue;
        }
        assert!(
            path.is_file(),
            "pure module {m} not found under src/components/"
        );
        pure.push(path);
    }
    pure.sort();
    pure
}

#[test]
fn component_decisions_have_no_io_clock_or_randomness() {
    let pure = pure_component_modules();
    // Each component's decision is under the check, not only some.
    for component in ["scheduler", "deployer", "drift", "validator", "publisher"] {
        assert!(
            pure.iter()
                .any(|f| f.components().any(|c| c.as_os_str() == component)),
            "no pure module of components/{component} found: {pure:?}"
        );
    }
    assert_pure(&pure, "the components' decisions (decide, plan, structure)");
}

#[test]
fn layers_point_one_way_and_components_form_no_circle() {
    let files = load_src();
    assert!(files.len() > 20, "src/ not found");
    let edges = edges(&files);
    // The scan sees the real arrows (so a passing test is not an empty one).
    for (from, to) in [
        ("components", "dispatch"),
        ("runtime", "components"),
        ("components", "telemetry"),
        ("telemetry", "dispatch"),
        ("k8s", "core"),
    ] {
        assert!(
            edges
                .iter()
                .any(|e| e.from.first().is_some_and(|f| f == from)
                    && e.to.first().is_some_and(|t| t == to)),
            "expected an arrow {from} -> {to}"
        );
    }
    let problems = layering_problems(&edges);
    assert!(
        problems.is_empty(),
        "the layers of src/ (see tests/integration/architecture.rs):\n{}",
        problems.join("\n")
    );
}

/// The references from `telemetry` to a component, as `file: from -> to` lines.
fn telemetry_component_imports(edges: &[Edge]) -> Vec<String> {
    edges
        .iter()
        .filter(|e| {
            e.from.first().is_some_and(|f| f == "telemetry")
                && e.to.first().is_some_and(|t| t == "components")
        })
        .map(|e| format!("{}: {} -> {}", e.file, e.from.join("::"), e.to.join("::")))
        .collect()
}

/// Telemetry names no component (issue 26): each component registers its own metric families
/// (`components/<name>/metrics.rs` implements `telemetry::CounterSource`), and a liveness check
/// takes a closure, so a new counter never touches `src/telemetry/`.
#[test]
fn telemetry_imports_no_component() {
    let files = load_src();
    let edges = edges(&files);
    assert!(
        edges
            .iter()
            .any(|e| e.from.first().is_some_and(|f| f == "telemetry")),
        "no reference from src/telemetry/ found: the scan saw nothing"
    );
    let found = telemetry_component_imports(&edges);
    assert!(
        found.is_empty(),
        "src/telemetry/ names a component; let the component implement \
         telemetry::CounterSource in components/<name>/metrics.rs instead:\n{}",
        found.join("\n")
    );
    // The scan catches each spelling.
    for source in [
        "use crate::components::deployer::Deployer;",
        "fn f(s: &crate::components::scheduler::SchedulerStats) {}",
        "use super::super::super::components::drift::DriftHandle;",
    ] {
        let plant = edges_of(&[("telemetry/metrics/sources.rs", source)]);
        assert_eq!(telemetry_component_imports(&plant).len(), 1, "{source}");
        assert!(!layering_problems(&plant).is_empty(), "{source}");
    }
}

// ----- the publisher: one owner per task (issue 26) -----

/// Identifiers that name a lock type.
const LOCKS: &[&str] = &[
    "Mutex",
    "RwLock",
    "Semaphore",
    "Condvar",
    "ReentrantMutex",
    "parking_lot",
];

/// The one lock the publisher may hold: the heal cache, a `std::sync::Mutex<TermCache>` in
/// this file (under `components/publisher/`), which must name neither the journal nor an await.
const HEAL_CACHE: &str = "shell/cache.rs";

/// Whole-identifier occurrences of `word` in `code` (byte offsets).
fn ident_at(code: &str, word: &str) -> Vec<usize> {
    code.match_indices(word)
        .filter(|(at, _)| {
            !is_ident(code[..*at].chars().next_back())
                && !is_ident(code[at + word.len()..].chars().next())
        })
        .map(|(at, _)| at)
        .collect()
}

/// The names of the types (`struct`, `enum`, `union`) a file defines.
fn defined_types(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in ["struct", "enum", "union"] {
        for at in ident_at(code, kw) {
            let name: String = code[at + kw.len()..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// The types a file has inherent `impl` blocks for (`impl X`, `impl<T> X<T>`, `impl a::X`;
/// trait impls `impl T for X` are not inherent).
fn inherent_impls(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for at in ident_at(code, "impl") {
        let rest = &code[at + 4..];
        let Some(open) = rest.find('{') else { continue };
        let head = rest[..open].trim();
        // Leading generics, balanced.
        let head = if let Some(g) = head.strip_prefix('<') {
            let mut depth = 1;
            let mut end = 0;
            for (i, c) in g.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = i + 1;
                    break;
                }
            }
            g[end..].trim()
        } else {
            head
        };
        if ident_at(head, "for").into_iter().next().is_some() || head.starts_with('(') {
            continue;
        }
        let path: String = head
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        if let Some(name) = path.rsplit("::").next().filter(|n| !n.is_empty()) {
            out.push(name.to_owned());
        }
    }
    out
}

/// What breaks the publisher's shape in `files` (paths relative to
/// `src/components/publisher/`): a `use super::*`; an inherent `impl` of a type in another
/// file than the one defining it; a lock anywhere but the heal cache ([`HEAL_CACHE`]), or a
/// heal cache that holds anything but the `TermCache`, reads the journal or awaits.
fn publisher_shape_problems(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let codes: Vec<(String, String)> = files
        .iter()
        .map(|(p, s)| (p.display().to_string(), code_only(s)))
        .collect();
    let mut defined_in: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, code) in &codes {
        for t in defined_types(code) {
            defined_in.entry(t).or_default().insert(file.clone());
        }
    }
    for (file, code) in &codes {
        let compact: String = code.split_whitespace().collect();
        if compact.contains("usesuper::*;") || compact.contains("usesuper::super::*;") {
            problems.push(format!(
                "{file}: `use super::*` (import what the file uses by name)"
            ));
        }
        for t in inherent_impls(code) {
            if let Some(homes) = defined_in.get(&t)
                && !homes.contains(file)
            {
                let home = homes.iter().cloned().collect::<Vec<_>>().join(", ");
                problems.push(format!(
                    "{file}: `impl {t}`, a type defined in {home} (one file per type's methods)"
                ));
            }
        }
        for lock in LOCKS {
            for at in ident_at(code, lock) {
                let line = code[..at].matches('\n').count() + 1;
                let heal_cache = file == HEAL_CACHE
                    && *lock == "Mutex"
                    && !code[..at].ends_with("tokio::sync::");
                let wraps_cache = code[at + lock.len()..]
                    .trim_start()
                    .starts_with("<TermCache>");
                let import =
                    code[..at].trim_end().ends_with("{") || code[..at].trim_end().ends_with("::");
                if heal_cache && (wraps_cache || import) {
                    continue;
                }
                problems.push(format!(
                    "{file}:{line}: `{lock}`: the publisher's only lock is the heal cache \
                     (Mutex<TermCache> in {HEAL_CACHE}); share values by message or watch"
                ));
            }
        }
        if file == HEAL_CACHE {
            for word in ["journal", "Journal", "await", "tokio"] {
                if !ident_at(code, word).is_empty() {
                    problems.push(format!(
                        "{file}: `{word}` beside the heal cache's lock (nothing under it reads \
                         the journal or awaits)"
                    ));
                }
            }
        }
    }
    problems
}

fn load_publisher() -> Vec<(PathBuf, String)> {
    load_under(&src_dir().join("components").join("publisher"))
}

/// The publisher is built as the scheduler is (issue 26): no `use super::*`, no type's methods
/// spread over files, and one lock, the heal cache, under which nothing reads the journal; so no
/// journal read happens while any lock of the publisher is held, and it has no async lock.
#[test]
fn the_publisher_has_one_owner_per_task_and_one_lock() {
    let files = load_publisher();
    assert!(
        files.iter().any(|(p, _)| p == Path::new(HEAL_CACHE)),
        "{HEAL_CACHE} not found under src/components/publisher/"
    );
    assert!(files.len() > 10, "src/components/publisher/ not found");
    let problems = publisher_shape_problems(&files);
    assert!(
        problems.is_empty(),
        "the publisher's shape (tests/integration/architecture.rs):\n{}",
        problems.join("\n")
    );
}

#[test]
fn publisher_scanner_catches_each_plant() {
    let cache = "use std::sync::{Mutex, PoisonError};\n\
                 pub(crate) struct HealCache(Mutex<TermCache>);\n\
                 impl HealCache { fn with(&self) { self.0.lock(); } }";
    let worker = "pub(super) struct PublishWorker { last: u8 }\n\
                  impl PublishWorker { fn run(self) {} }\n\
                  impl std::fmt::Debug for PublishWorker { fn fmt() {} }";
    let clean = |extra: &[(&str, &str)]| {
        let mut files = vec![
            (PathBuf::from(HEAL_CACHE), cache.to_owned()),
            (PathBuf::from("shell/publish.rs"), worker.to_owned()),
        ];
        files.extend(
            extra
                .iter()
                .map(|(p, s)| (PathBuf::from(p), (*s).to_owned())),
        );
        publisher_shape_problems(&files)
    };
    assert!(clean(&[]).is_empty(), "{:?}", clean(&[]));
    for (plant, file, source) in [
        (
            "a glob import",
            "shell/status.rs",
            "use super::*;\nfn f() {}",
        ),
        (
            "a glob import of the parent's parent",
            "shell/status.rs",
            "use super :: super :: *;",
        ),
        (
            "a type's methods in another file",
            "shell/attempt.rs",
            "impl<'a> super::publish::PublishWorker { fn more(&self) {} }",
        ),
        (
            "a second lock type",
            "shell/router.rs",
            "struct Router { state: std::sync::RwLock<u8> }",
        ),
        (
            "a second mutex",
            "shell/router.rs",
            "struct Router { state: std::sync::Mutex<RouterState> }",
        ),
        (
            "an async lock",
            "shell/publish2.rs",
            "struct P { publish_lock: tokio::sync::Mutex<()> }",
        ),
        (
            "a journal read under the heal cache",
            HEAL_CACHE,
            "fn f(j: &Journal) { let _ = j.queue(q); }",
        ),
        (
            "an await under the heal cache",
            HEAL_CACHE,
            "async fn f() { g().await; }",
        ),
    ] {
        let mut files = vec![(PathBuf::from("shell/publish.rs"), worker.to_owned())];
        if file == HEAL_CACHE {
            files.push((PathBuf::from(HEAL_CACHE), format!("{cache}\n{source}")));
        } else {
            files.push((PathBuf::from(HEAL_CACHE), cache.to_owned()));
            files.push((PathBuf::from(file), source.to_owned()));
        }
        let problems = publisher_shape_problems(&files);
        assert!(!problems.is_empty(), "{plant} not caught: {source}");
    }
    // A heal cache holding something else is a second lock too.
    let other = cache.replace("Mutex<TermCache>", "Mutex<RouterState>");
    assert!(!publisher_shape_problems(&[(PathBuf::from(HEAL_CACHE), other)]).is_empty());
    // Comments and strings are not code.
    assert!(clean(&[("shell/x.rs", "// use super::*;\nlet s = \"Mutex<u8>\";")]).is_empty());
}

/// The names under `[dependencies]` of a Cargo manifest (not dev- or build-dependencies).
fn normal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t == "[dependencies]";
            continue;
        }
        if in_deps
            && let Some((name, _)) = t.split_once('=')
            && !t.starts_with('#')
        {
            deps.insert(name.trim().trim_end_matches(".workspace").to_owned());
        }
    }
    deps
}

#[test]
fn the_product_does_not_link_the_test_peers() {
    let manifest =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps = normal_dependencies(&manifest);
    assert!(deps.contains("kube"), "parsed no [dependencies]: {deps:?}");
    for banned in ["haptic-tools", "haptic-testkit", "nix", "haptic-demo"] {
        assert!(
            !deps.contains(banned),
            "the haptic crate's [dependencies] name `{banned}` (test peers, test kit / demo \
             only: dev-dependencies or the haptic-demo crate)"
        );
    }
}

// ----- the scanner itself -----

#[test]
fn scanner_finds_forbidden_names() {
    assert_eq!(violations("use tokio::sync::mpsc;"), vec![(1, "tokio")]);
    assert_eq!(
        violations("let t = std::time::Instant::now();"),
        vec![(1, "Instant::now")]
    );
    assert_eq!(
        violations("let x = rand::random::<u8>();"),
        vec![(1, "rand")]
    );
    assert_eq!(
        violations("let b = std::fs::read(p);"),
        vec![(1, "std::fs")]
    );
    assert!(violations("// tokio is named in a comment\nlet operand = 1;").is_empty());
    assert!(violations("let s = \"tokio in a string\";").is_empty());
    assert!(violations("/* tokio */ let x = 'a'; fn f<'a>() {}").is_empty());
}

fn edges_of(files: &[(&str, &str)]) -> Vec<Edge> {
    let files: Vec<(PathBuf, String)> = files
        .iter()
        .map(|(p, s)| (PathBuf::from(p), (*s).to_owned()))
        .collect();
    edges(&files)
}

fn scan(files: &[(&str, &str)]) -> Vec<String> {
    layering_problems(&edges_of(files))
}

#[test]
fn scanner_catches_an_upward_use_in_every_spelling() {
    for source in [
        "use crate::components::deployer::Deployer;",
        "pub use crate::components::deployer::Deployer;",
        "pub(crate) use crate::{core::naming, components::deployer::Deployer};",
        "use crate::{\n    components::{deployer::{self, Deployer}},\n};",
        "use super::super::super::components::deployer::Deployer;",
        "fn f() { let _ = crate::components::deployer::COMPONENT; }",
        "#[cfg(test)]\nuse crate::runtime::args::RunArgs;",
        "use crate::components::*;",
    ] {
        let problems = scan(&[("k8s/writer/status.rs", source)]);
        assert!(
            !problems.is_empty() && problems.iter().all(|p| p.contains("reaches up")),
            "{source:?}: {problems:?}"
        );
    }
    // Downward, sideways within a module, comments and strings: fine.
    for source in [
        "use crate::core::naming;\nuse super::crd::HAProxyCfg;",
        "// use crate::components::deployer::Deployer;",
        "let s = \"crate::runtime::x\";",
        "use haptic_journal::Event;",
    ] {
        assert!(
            scan(&[("k8s/writer/status.rs", source)]).is_empty(),
            "{source:?}"
        );
    }
    // An adapter reaching another adapter.
    assert_eq!(
        scan(&[("k8s/discovery.rs", "use crate::source::dir::DirSource;")]).len(),
        1
    );
    // A circle among components.
    let circle = scan(&[
        (
            "components/scheduler/shell.rs",
            "use crate::components::deployer::Deployer;",
        ),
        (
            "components/deployer/mod.rs",
            "use crate::components::scheduler::SchedulerStats;",
        ),
    ]);
    assert!(circle.iter().any(|p| p.contains("circle")), "{circle:?}");
}

#[test]
fn dependency_sections_are_told_apart() {
    let deps = normal_dependencies(
        "[package]\nname = \"x\"\n[dependencies]\nkube.workspace = true\nserde = \"1\"\n\
         [dev-dependencies]\nhaptic-tools.workspace = true\nhaptic-testkit.workspace = true\n",
    );
    assert_eq!(
        deps,
        BTreeSet::from(["kube".to_owned(), "serde".to_owned()])
    );
}

// ----- one render type and one loader (issue 26) -----

/// The file that reads renders out of the journal.
const RENDER_STORE: &str = "dispatch/render.rs";
/// The file that defines the render types.
const RENDER_TYPES: &str = "core/render.rs";
/// The journal calls that read a render's manifest or blobs.
const RENDER_READS: &[&str] = &["get_render", "get_blob"];

/// Where `files` read a render from the journal outside the render store, or define a type
/// named like a render outside `core/render.rs`, as `file: what` lines.
fn render_shape_problems(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, source) in files {
        let rel = path.to_string_lossy().replace('\\', "/");
        let code = code_only(source);
        if rel != RENDER_STORE {
            for call in RENDER_READS {
                if !ident_at(&code, call).is_empty() {
                    out.push(format!(
                        "{rel}: calls `{call}` (load renders through dispatch::render::RenderStore)"
                    ));
                }
            }
        }
        if rel != RENDER_TYPES {
            for name in defined_types(&code) {
                if name.ends_with("Render") || name.ends_with("RenderFile") {
                    out.push(format!(
                        "{rel}: defines `{name}` (a render is core::render::JournaledRender or RenderContent)"
                    ));
                }
            }
        }
    }
    out
}

/// A render has one in-memory type per shape (`core::render`: the bytes a source read, the bytes
/// the journal holds) and one loader (`dispatch::render`), used by the validator, the scheduler,
/// the publisher and the deployer; the deployer's own `LoadedRender` and loader are gone.
#[test]
fn renders_have_one_type_and_one_loader() {
    let files = load_src();
    assert!(
        files
            .iter()
            .any(|(p, s)| p.ends_with(RENDER_STORE)
                && !ident_at(&code_only(s), "get_blob").is_empty()),
        "the render store was not found or reads no blob: the scan saw nothing"
    );
    let found = render_shape_problems(&files);
    assert!(found.is_empty(), "{}", found.join("\n"));
    for (file, source) in [
        (
            "components/deployer/mod.rs",
            "fn f(j: &Journal) { let _ = j.get_render(c); }",
        ),
        (
            "components/publisher/decide/mod.rs",
            "fn f() { journal.get_blob(b); }",
        ),
        (
            "components/deployer/decide.rs",
            "pub struct LoadedRender { config: String }",
        ),
        ("k8s/writer.rs", "enum PublishedRender { A }"),
    ] {
        let plant = vec![(PathBuf::from(file), source.to_owned())];
        assert_eq!(render_shape_problems(&plant).len(), 1, "{file}: {source}");
    }
    // The store itself and the types' home are allowed.
    let home = vec![
        (
            PathBuf::from(RENDER_STORE),
            "fn f() { journal.get_blob(b); }".to_owned(),
        ),
        (
            PathBuf::from(RENDER_TYPES),
            "pub struct JournaledRender {}".to_owned(),
        ),
    ];
    assert!(render_shape_problems(&home).is_empty());
}
