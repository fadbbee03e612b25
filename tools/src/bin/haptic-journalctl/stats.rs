//! `stats`: file size vs live bytes, redb stored and fragmented bytes per table.

use std::path::Path;

use haptic_journal::Journal;
use serde_json::json;

use crate::open::read_fail;
use crate::summary::table_rows;
use crate::{Out, Res};

pub(super) fn stats(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let s = j.stats().map_err(|e| read_fail(path, e))?;
    let file = s.file_bytes.unwrap_or(0);
    let live = s.live_bytes();
    let stored: u64 = s.tables.iter().map(|t| t.stored_bytes).sum();
    let metadata: u64 = s.tables.iter().map(|t| t.metadata_bytes).sum();
    let frag: u64 = s.tables.iter().map(|t| t.fragmented_bytes).sum();
    // The tables' allocated pages: stored + metadata + slack (redb's "fragmented" bytes).
    let pages = stored + metadata + frag;
    // Everything else: redb's header, table directory, allocator state and free pages.
    let other = file.saturating_sub(pages);
    let compact_advised = file > pages + 8 * 1024 * 1024 && other * 2 > file;
    if out.json {
        for t in &s.tables {
            out.line(&json!({
                "table": t.name, "entries": t.entries, "live_bytes": t.live_bytes,
                "stored_bytes": t.stored_bytes, "metadata_bytes": t.metadata_bytes,
                "fragmented_bytes": t.fragmented_bytes,
            }));
        }
        out.line(&json!({
            "file": path.display().to_string(), "file_bytes": file, "live_bytes": live,
            "stored_bytes": stored, "metadata_bytes": metadata, "fragmented_bytes": frag,
            "table_page_bytes": pages, "other_bytes": other, "unused_bytes": other,
            "compact_advised": compact_advised,
        }));
        return Ok(0);
    }
    let rows = table_rows(&s.tables, true);
    out.table(
        &[
            "TABLE",
            "ENTRIES",
            "LIVE_BYTES",
            "STORED_BYTES",
            "PAGE_SLACK_BYTES",
        ],
        &rows,
    );
    outln!();
    outln!("file bytes        {file}");
    outln!("live bytes        {live} (keys + values)");
    outln!(
        "table pages       {pages} bytes ({:.1}% of the file)",
        pct(pages, file)
    );
    outln!("  stored          {stored} (keys + values in leaf pages)");
    outln!("  metadata        {metadata} (branch keys, page headers)");
    outln!(
        "  page slack      {frag} ({:.1}% of the table pages: unused space inside allocated pages, \
         redb's \"fragmented\" bytes; a non-empty table takes at least one 4 KiB page, and \
         compact does not remove slack)",
        pct(frag, pages)
    );
    outln!(
        "other bytes       {other} ({:.1}% of the file: redb header, table directory, allocator \
         state, free pages; compact returns only free pages)",
        pct(other, file)
    );
    if compact_advised {
        outln!(
            "advice            stop the controller, then `haptic-journalctl compact --write {}`",
            path.display()
        );
    }
    Ok(0)
}

pub(super) fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}
