//! The module graph of `journal/src` has no cycle (the "one-way house", `journal/DESIGN.md`,
//! "Module layers").
//!
//! Nodes are the top-level modules (`src/<name>.rs` or the folder `src/<name>/`, which counts as
//! one node). An edge `a -> b` is any `use crate::b...`, `crate::b::...` path or `super::` path
//! that resolves into `b`, in code (comments and string literals are skipped). A name re-exported
//! at the crate root (`crate::Journal`) or a `#[macro_export]` macro (`crate::crash_point!`)
//! counts as its defining module.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// One source file: its module path from the crate root (`["journal", "read"]`; empty for
/// `lib.rs`) and its text.
struct Source {
    module: Vec<String>,
    text: String,
}

#[test]
fn journal_modules_form_a_dag() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = read_sources(&src, &[]);
    let graph = module_graph(&sources);
    assert!(
        graph.len() >= 10,
        "found only {} modules; is the scan broken?",
        graph.len()
    );
    assert!(
        graph.values().any(|deps| !deps.is_empty()),
        "found no edge; is the scan broken?"
    );
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "journal/src has import cycles:\n{}\nmodule graph:\n{}",
        cycles.join("\n"),
        render(&graph)
    );
    // shown with --nocapture
    println!(
        "module graph:\n{}module layers (bottom-up):\n{}",
        render(&graph),
        render_layers(&graph)
    );
}

#[test]
fn the_scan_sees_groups_super_paths_roots_and_macros_and_skips_comments() {
    let sources = [
        source("", "pub use journal::{Journal, Options};\nmod a;"),
        source(
            "a",
            "use crate::{b, c::{X, Y}};\n// use crate::d;\n/* crate::d::Z */\n\
             const S: &str = \"crate::d::Z\";\nfn f() { crate::Journal::open(); }",
        ),
        source(
            "b",
            "pub(crate) fn g() {}\nmod tests { use super::super::c::X; }",
        ),
        source("c", "fn h() { crate::shout!(); }"),
        source(
            "d",
            "#[macro_export]\nmacro_rules! shout { () => { $crate::d::hit() } }",
        ),
        source("journal", "use self::read::R;"),
        source(
            "journal/read",
            "use super::Journal;\nuse super::super::b::g;",
        ),
    ];
    let graph = module_graph(&sources);
    let edges = |m: &str| graph[m].iter().cloned().collect::<Vec<_>>();
    assert_eq!(edges("a"), ["b", "c", "journal"]);
    assert_eq!(edges("b"), ["c"]);
    assert_eq!(edges("c"), ["d"]);
    assert!(edges("d").is_empty());
    assert_eq!(edges("journal"), ["b"]);
    assert!(cycles(&graph).is_empty());
}

#[test]
fn a_cycle_is_reported_with_its_path() {
    let sources = [
        source("x", "use crate::y::A;"),
        source("y", "fn f() { crate::z::g(); }"),
        source("z", "use crate::{w, x};"),
        source("w", ""),
    ];
    let graph = module_graph(&sources);
    assert_eq!(
        cycles(&graph),
        ["x -> y -> z -> x (the circle holds: x y z)"]
    );
}

fn source(module: &str, text: &str) -> Source {
    Source {
        module: module
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        text: text.to_owned(),
    }
}

/// Every `.rs` file under `dir`, with its module path (`x/mod.rs` and `x.rs` are module `x`).
fn read_sources(dir: &Path, module: &[String]) -> Vec<Source> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 file name")
            .to_owned();
        let mut child = module.to_vec();
        if path.is_dir() {
            child.push(name);
            out.extend(read_sources(&path, &child));
            continue;
        }
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        let at_root = module.is_empty() && (stem == "lib" || stem == "main");
        if !(at_root || stem == "mod") {
            child.push(stem.to_owned());
        }
        out.push(Source {
            module: child,
            text: std::fs::read_to_string(&path).expect("read source"),
        });
    }
    out
}

/// The graph of top-level modules; every module of `sources` is a node, edges skip itself.
fn module_graph(sources: &[Source]) -> Graph {
    let tokens: Vec<(&Source, Vec<Token>)> = sources
        .iter()
        .map(|s| (s, tokenize(&strip(&s.text))))
        .collect();
    // Names usable as `crate::<name>` that live in a module: root re-exports and macros.
    let mut roots: BTreeMap<String, String> = BTreeMap::new();
    for (s, toks) in &tokens {
        if s.module.is_empty() {
            for (prefix, leaves) in root_uses(toks) {
                for leaf in leaves {
                    roots.insert(leaf, prefix.clone());
                }
            }
        }
        if let Some(top) = s.module.first() {
            for name in exported_macros(toks) {
                roots.insert(name, top.clone());
            }
        }
    }
    let mut graph = Graph::new();
    for (s, _) in &tokens {
        if let Some(top) = s.module.first() {
            graph.entry(top.clone()).or_default();
        }
    }
    for (s, toks) in &tokens {
        let Some(from) = s.module.first() else {
            continue;
        };
        for target in targets(&s.module, toks) {
            let node = roots.get(&target).unwrap_or(&target);
            if node != from && graph.contains_key(node) {
                graph.get_mut(from).expect("node").insert(node.clone());
            }
        }
    }
    graph
}

/// Source with comments, string and char literals blanked out (line breaks kept).
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (next == Some('"') || next == Some('#'))
            && (!ident_before(&c, i) || (c[i - 1] == 'b' && !ident_before(&c, i - 1)))
        {
            // raw string r"..." / r#"..."# (or br"...")
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|h| c.get(j + h) == Some(&'#')))
            {
                blank(&mut out, c[j]);
                j += 1;
            }
            out.push_str("\"\"");
            i = j + 1 + hashes;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                if let Some(&ch) = c.get(i) {
                    blank(&mut out, ch);
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c[i] == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // a char literal ('x', '\n', '\u{..}'); a lifetime has no closing quote
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push_str("' '");
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn ident_before(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokenize(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_alphabetic() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(c[start..i].iter().collect()));
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            if !c[i].is_whitespace() {
                out.push(Token::Punct(c[i]));
            }
            i += 1;
        }
    }
    out
}

fn is_ident(t: Option<&Token>, name: &str) -> bool {
    matches!(t, Some(Token::Ident(n)) if n == name)
}

/// The first segment (relative to the crate root) of every path starting with `crate::` or
/// `super::` in a file of module path `module`; `super` is resolved through inline `mod x {`.
fn targets(module: &[String], toks: &[Token]) -> Vec<String> {
    let mut out = Vec::new();
    // inline modules open at this brace depth
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Token::Ident(m) if m == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(k)
                if (k == "crate" || k == "super") && toks.get(i + 1) == Some(&Token::PathSep) =>
            {
                let mut here: Vec<String> = module.to_vec();
                here.extend(inline.iter().map(|(n, _)| n.clone()));
                let mut j = i;
                if k == "crate" {
                    here.clear();
                    j += 2;
                } else {
                    while is_ident(toks.get(j), "super") && toks.get(j + 1) == Some(&Token::PathSep)
                    {
                        here.pop();
                        j += 2;
                    }
                }
                let (firsts, end) = use_tree_firsts(toks, j);
                match here.first() {
                    Some(top) => out.push(top.clone()),
                    None => out.extend(firsts),
                }
                i = end.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The first segments of the use tree (or path) starting at `toks[i]`: `a::b` gives `a`,
/// `{a, b::c, self}` gives `a`, `b`. Returns them and the index after the tree.
fn use_tree_firsts(toks: &[Token], i: usize) -> (Vec<String>, usize) {
    match toks.get(i) {
        Some(Token::Ident(name)) => (vec![name.clone()], skip_path(toks, i)),
        Some(Token::Punct('{')) => {
            let mut out = Vec::new();
            let mut j = i + 1;
            while j < toks.len() && toks[j] != Token::Punct('}') {
                match &toks[j] {
                    Token::Ident(name) if name != "self" => {
                        out.push(name.clone());
                        j = skip_path(toks, j);
                    }
                    Token::Punct('{') => j = skip_group(toks, j),
                    _ => j += 1,
                }
            }
            (out, j + 1)
        }
        _ => (Vec::new(), i),
    }
}

/// Index after the path (or nested use tree) starting at the identifier `toks[i]`.
fn skip_path(toks: &[Token], mut i: usize) -> usize {
    loop {
        i += 1;
        if toks.get(i) != Some(&Token::PathSep) {
            return i;
        }
        i += 1;
        match toks.get(i) {
            Some(Token::Punct('{')) => return skip_group(toks, i),
            Some(Token::Ident(_)) => {}
            _ => return i,
        }
    }
}

/// Index after the `{ ... }` group starting at `toks[i]`.
fn skip_group(toks: &[Token], mut i: usize) -> usize {
    let mut depth = 0;
    while i < toks.len() {
        match toks[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// `pub use <module>::...` items of the crate root, as (module, names it re-exports).
fn root_uses(toks: &[Token]) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for i in 0..toks.len() {
        if !(is_ident(toks.get(i), "pub") && is_ident(toks.get(i + 1), "use")) {
            continue;
        }
        let Some(Token::Ident(module)) = toks.get(i + 2) else {
            continue;
        };
        let mut names = Vec::new();
        let mut j = i + 3;
        while j < toks.len() && toks[j] != Token::Punct(';') {
            if let Token::Ident(n) = &toks[j]
                && toks.get(j + 1) != Some(&Token::PathSep)
                && n != "self"
                && n != "as"
            {
                names.push(n.clone());
            }
            j += 1;
        }
        out.push((module.clone(), names));
    }
    out
}

/// Names of `#[macro_export] macro_rules! name`.
fn exported_macros(toks: &[Token]) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..toks.len() {
        if is_ident(toks.get(i), "macro_export") {
            let rest = &toks[i..];
            if let Some(k) = rest.iter().position(|t| is_ident(Some(t), "macro_rules"))
                && let Some(Token::Ident(name)) = rest.get(k + 2)
            {
                out.push(name.clone());
            }
        }
    }
    out
}

/// One cycle per strongly connected component of more than one module, as `a -> b -> a`,
/// with every module of the component.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for start in graph.keys() {
        if seen.contains(start.as_str()) {
            continue;
        }
        let reach = reachable(graph, start);
        let component: BTreeSet<&str> = reach
            .iter()
            .copied()
            .filter(|n| reachable(graph, n).contains(start.as_str()))
            .collect();
        seen.extend(component.iter().copied());
        if component.len() > 1 {
            let members: Vec<&str> = component.into_iter().collect();
            out.push(format!(
                "{} (the circle holds: {})",
                shortest_cycle(graph, start).join(" -> "),
                members.join(" ")
            ));
        }
    }
    out
}

fn reachable<'g>(graph: &'g Graph, from: &str) -> BTreeSet<&'g str> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = graph[from].iter().map(String::as_str).collect();
    while let Some(n) = todo.pop() {
        if let Some((key, deps)) = graph.get_key_value(n)
            && seen.insert(key.as_str())
        {
            todo.extend(deps.iter().map(String::as_str));
        }
    }
    seen
}

/// The shortest path `start -> ... -> start` (breadth first).
fn shortest_cycle(graph: &Graph, start: &str) -> Vec<String> {
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for d in &graph[n] {
            if d == start {
                let mut path = Vec::new();
                let mut at = n;
                while at != start {
                    path.push(at.to_owned());
                    at = parent[at];
                }
                path.push(start.to_owned());
                path.reverse();
                path.push(start.to_owned());
                return path;
            }
            if !parent.contains_key(d.as_str()) {
                parent.insert(d, n);
                queue.push_back(d);
            }
        }
    }
    Vec::new()
}

fn render(graph: &Graph) -> String {
    let mut s = String::new();
    for (m, deps) in graph {
        let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
        let _ = writeln!(s, "  {m} -> {}", deps.join(" "));
    }
    s
}

/// Modules by layer: layer 0 uses no other module, layer n uses only layers below n.
fn render_layers(graph: &Graph) -> String {
    let mut layer: BTreeMap<&str, usize> = BTreeMap::new();
    let mut progress = true;
    while progress {
        progress = false;
        for (m, deps) in graph {
            if layer.contains_key(m.as_str()) {
                continue;
            }
            if let Some(l) = deps
                .iter()
                .map(|d| layer.get(d.as_str()).copied())
                .collect::<Option<Vec<_>>>()
            {
                layer.insert(m, l.into_iter().max().map_or(0, |l| l + 1));
                progress = true;
            }
        }
    }
    let mut by_layer: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (m, l) in layer {
        by_layer.entry(l).or_default().push(m);
    }
    let mut s = String::new();
    for (l, ms) in by_layer {
        let _ = writeln!(s, "  {l}: {}", ms.join(" "));
    }
    s
}
