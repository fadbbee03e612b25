//! Over the whole corpus: the API's layout and comments are not changes; distinct
//! configurations are; order where HAProxy cares is.

use haptic_journal::{ConfigVersion, SyncMode};

use super::super::decide::{Operation, decide};
use super::super::structure::{ConfigDiff, SECTION_KEYWORDS, diff, equal, parse, tokenize};
use super::{all_corpus_configs, api_layout, pod, render};

/// Every corpus configuration equals itself rewritten in the Dataplane API's layout, and with
/// comments and blank lines added: a drift check after a fine-grained write finds nothing.
#[test]
fn every_corpus_config_equals_its_api_layout_and_its_commented_copy() {
    for path in all_corpus_configs() {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display();
        let a = parse(&text);
        let b = parse(&api_layout(&text));
        assert!(
            equal(&a, &b),
            "{name}: API layout counts as a change:\n{}",
            api_layout(&text)
        );
        assert_eq!(diff(&a, &b), ConfigDiff::Changes(vec![]), "{name}");
        let commented: String = text
            .lines()
            .flat_map(|l| {
                [
                    format!("{l}   # note"),
                    String::new(),
                    "# block comment".into(),
                ]
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            equal(&a, &parse(&commented)),
            "{name}: comments count as a change"
        );
        let ops = decide(&pod(&api_layout(&text), 7), &render(&text), None);
        assert_eq!(
            ops,
            vec![],
            "{name}: no operation for a pod in the API's layout"
        );
    }
}

/// Pairs of distinct corpus files never compare equal (the comparison is not blind).
#[test]
fn different_corpus_configs_are_different() {
    let paths = all_corpus_configs();
    let texts: Vec<(String, String)> = paths
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read_to_string(p).unwrap()))
        .collect();
    for (i, (na, ta)) in texts.iter().enumerate() {
        for (nb, tb) in &texts[i + 1..] {
            let same_words = |t: &str| {
                t.lines()
                    .map(tokenize)
                    .filter(|w| !w.is_empty())
                    .collect::<Vec<_>>()
            };
            if same_words(ta) == same_words(tb) {
                continue; // the corpus holds a few byte-different copies of one config
            }
            assert!(
                !equal(&parse(ta), &parse(tb)),
                "{na} and {nb} compare equal"
            );
        }
    }
}

/// A configuration as lines, with the sections that hold servers: (kind, first line index,
/// end index).
struct Lines {
    lines: Vec<String>,
    proxies: Vec<(String, usize, usize)>,
}

impl Lines {
    fn of(text: &str) -> Lines {
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let heads: Vec<usize> = (0..lines.len())
            .filter(|i| {
                tokenize(&lines[*i])
                    .first()
                    .is_some_and(|w| SECTION_KEYWORDS.contains(&w.as_str()))
            })
            .collect();
        let mut proxies = Vec::new();
        for (k, &h) in heads.iter().enumerate() {
            let end = heads.get(k + 1).copied().unwrap_or(lines.len());
            let kind = tokenize(&lines[h])[0].clone();
            if ["backend", "listen"].contains(&kind.as_str()) {
                proxies.push((kind, h + 1, end));
            }
        }
        Lines { lines, proxies }
    }

    fn first_word(&self, i: usize) -> String {
        tokenize(&self.lines[i])
            .first()
            .cloned()
            .unwrap_or_default()
    }

    /// The section's lines (by index) whose first word is one of `kw`.
    fn find(&self, (start, end): (usize, usize), kw: &[&str]) -> Vec<usize> {
        (start..end)
            .filter(|i| kw.contains(&self.first_word(*i).as_str()))
            .collect()
    }

    /// The text with `lines` replaced by `section` for the range `start..end`.
    fn with_section(&self, (start, end): (usize, usize), section: &[String]) -> String {
        let mut out: Vec<String> = self.lines[..start].to_vec();
        out.extend(section.iter().cloned());
        out.extend(self.lines[end..].iter().cloned());
        out.join("\n") + "\n"
    }
}

/// `render` on a pod that runs `running` in the API's layout: one raw push (unmodelled), and
/// the diff names `reason`.
fn goes_raw(name: &str, running: &str, render_text: &str, reason: &str) {
    match diff(&parse(&api_layout(running)), &parse(render_text)) {
        ConfigDiff::Unmodelled { what } => assert!(what.contains(reason), "{name}: {what}"),
        other => panic!("{name}: {other:?}"),
    }
    assert_eq!(
        decide(&pod(&api_layout(running), 7), &render(render_text), None),
        vec![Operation::PushRawConfig {
            version: ConfigVersion(7),
            mode: SyncMode::RawUnmodelled
        }],
        "{name}"
    );
}

/// In every corpus section with servers: its `default-server` lines (or one added) before the
/// first server equal the API's layout; after the first server they are a change that goes by
/// a raw push. Where a section has check steps of one kind (or, else, two added around its
/// other lines), swapping two is a change that goes by a raw push, and their place among the
/// other lines is not.
#[test]
fn every_corpus_config_keeps_default_server_and_check_step_order() {
    let (mut ds_cases, mut step_cases) = (0, 0);
    for path in all_corpus_configs() {
        let text = std::fs::read_to_string(&path).unwrap();
        let l = Lines::of(&text);
        for (i, (kind, start, end)) in l.proxies.iter().enumerate() {
            let range = (*start, *end);
            let name = format!("{}: {kind} #{i}", path.display());
            let servers = l.find(range, &["server", "server-template"]);
            let Some(&first_server) = servers.first() else {
                continue;
            };
            // default-server before / after the first server.
            let own = l.find(range, &["default-server"]);
            let ds: Vec<String> = if own.is_empty() {
                vec!["    default-server inter 3s fall 2 check".into()]
            } else {
                own.iter().map(|i| l.lines[*i].clone()).collect()
            };
            let base: Vec<usize> = (*start..*end).filter(|i| !own.contains(i)).collect();
            let place = |after: bool| {
                let mut out = Vec::new();
                for i in &base {
                    if *i == first_server && !after {
                        out.extend(ds.iter().cloned());
                    }
                    out.push(l.lines[*i].clone());
                    if *i == first_server && after {
                        out.extend(ds.iter().cloned());
                    }
                }
                l.with_section(range, &out)
            };
            let (first, late) = (place(false), place(true));
            assert!(
                equal(&parse(&first), &parse(&api_layout(&first))),
                "{name}: the API's layout of default-server first counts as a change"
            );
            assert!(
                !equal(&parse(&first), &parse(&late)),
                "{name}: default-server moved after the first server compares equal"
            );
            goes_raw(&name, &first, &late, "default-server after");
            ds_cases += 1;

            // Check steps: the section's own, else two added around its other lines.
            let own_steps = ["http-check", "tcp-check"]
                .iter()
                .map(|kw| l.find(range, &[kw]))
                .find(|steps| {
                    steps
                        .windows(2)
                        .any(|w| tokenize(&l.lines[w[0]]) != tokenize(&l.lines[w[1]]))
                });
            let section: Vec<String> = l.lines[*start..*end].to_vec();
            let (with_steps, swapped, together) = match own_steps {
                Some(steps) => {
                    let w = steps
                        .windows(2)
                        .find(|w| tokenize(&l.lines[w[0]]) != tokenize(&l.lines[w[1]]))
                        .unwrap();
                    let mut s = section.clone();
                    s.swap(w[0] - start, w[1] - start);
                    (text.clone(), l.with_section(range, &s), None)
                }
                None => {
                    let (send, expect) = (
                        "    http-check send meth GET uri /health".to_owned(),
                        "    http-check expect status 200".to_owned(),
                    );
                    let around = |a: &String, b: &String| {
                        let mut s = vec![a.clone()];
                        s.extend(section.iter().cloned());
                        s.push(b.clone());
                        l.with_section(range, &s)
                    };
                    let mut t = vec![send.clone(), expect.clone()];
                    t.extend(section.iter().cloned());
                    (
                        around(&send, &expect),
                        around(&expect, &send),
                        Some(l.with_section(range, &t)),
                    )
                }
            };
            assert!(
                equal(&parse(&with_steps), &parse(&api_layout(&with_steps))),
                "{name}: the API's layout of check steps counts as a change"
            );
            if let Some(together) = together {
                assert!(
                    equal(&parse(&with_steps), &parse(&together)),
                    "{name}: steps moved among other lines, same order, count as a change"
                );
            }
            assert!(
                !equal(&parse(&with_steps), &parse(&swapped)),
                "{name}: swapped check steps compare equal"
            );
            // A listen section has no model at all.
            let reason = if kind == "listen" { "listen" } else { "-check" };
            goes_raw(&name, &with_steps, &swapped, reason);
            step_cases += 1;
        }
    }
    // Sections with servers across the corpus: 106 in 108 files when written.
    assert!(ds_cases >= 100, "{ds_cases} sections with servers");
    assert_eq!(step_cases, ds_cases);
}
