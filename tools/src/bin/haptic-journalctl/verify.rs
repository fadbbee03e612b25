//! `verify`: every record checked (envelope, CRC, decode, blob hashes, references, counts).

use std::collections::BTreeMap;
use std::path::Path;

use haptic_journal::Journal;
use serde_json::json;

use crate::format::{key_json, key_text};
use crate::open::read_fail;
use crate::{Fail, Out, Res};

pub(super) fn verify(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let rep = j.verify().map_err(|e| read_fail(path, e))?;
    if out.json {
        for p in &rep.problems {
            out.line(&json!({
                "table": p.table, "key": key_json(&p.key), "offset": p.offset,
                "problem": p.kind.to_string(),
            }));
        }
        out.line(&json!({
            "file": path.display().to_string(), "records_checked": rep.records_checked,
            "problems": rep.problems.len(), "clean": rep.is_clean(),
        }));
    } else {
        if !rep.problems.is_empty() {
            out.table_of(&["TABLE", "KEY", "OFFSET", "PROBLEM"], &rep.problems, |p| {
                vec![
                    p.table.to_string(),
                    key_text(&p.key),
                    p.offset.map_or("-".into(), |o| o.to_string()),
                    p.kind.to_string(),
                ]
            });
        }
        outln!(
            "{}: {} records checked, {} problem(s)",
            path.display(),
            rep.records_checked,
            rep.problems.len()
        );
    }
    if rep.is_clean() {
        Ok(0)
    } else {
        let mut per_table: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &rep.problems {
            *per_table.entry(p.table).or_default() += 1;
        }
        Err(Fail::Corrupt(format!(
            "journal {} is corrupt ({}); the controller refuses to start on it: copy it aside, \
             then start with --journal-recovery=rebuild",
            path.display(),
            per_table
                .iter()
                .map(|(t, n)| format!("{n} in {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}
