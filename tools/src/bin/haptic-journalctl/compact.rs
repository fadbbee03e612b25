//! `compact --write`: reclaim free space (rewrites the file; the controller stopped).

use std::path::Path;

use haptic_journal::{Journal, JournalOptions};
use serde_json::json;

use crate::open::{check_file, open_fail};
use crate::{Fail, Out, Res};

pub(super) fn compact(path: &Path, write: bool, out: &Out) -> Res<u8> {
    if !write {
        return Err(Fail::Usage(format!(
            "compact rewrites {}: stop the controller, then add --write",
            path.display()
        )));
    }
    check_file(path, true)?;
    let before = std::fs::metadata(path).map(|m| m.len()).ok();
    let j =
        Journal::open(&JournalOptions::new(path).create(false)).map_err(|e| open_fail(path, e))?;
    let mut rounds = 0;
    loop {
        rounds += 1;
        match j.compact() {
            Ok(true) if rounds < 8 => {}
            Ok(_) => break,
            Err(e) => {
                return Err(Fail::Usage(format!(
                    "journal {}: {e}: make sure no other process uses it and retry",
                    path.display()
                )));
            }
        }
    }
    drop(j);
    let after = std::fs::metadata(path).map(|m| m.len()).ok();
    if out.json {
        out.line(&json!({
            "file": path.display().to_string(), "before_bytes": before, "after_bytes": after,
        }));
    } else {
        outln!(
            "{}: compacted, {} -> {} bytes{}",
            path.display(),
            before.unwrap_or(0),
            after.unwrap_or(0),
            if after >= before {
                " (no free pages to return: see `haptic-journalctl stats` for page slack and \
                 redb's own pages, which compaction keeps)"
            } else {
                ""
            }
        );
    }
    Ok(0)
}
