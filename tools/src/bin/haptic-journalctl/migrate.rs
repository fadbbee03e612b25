//! `migrate`: upgrade the file to this build's schema (`--dry-run` on a copy, `--write` in
//! place).

use std::path::Path;

use haptic_journal::redb;
use haptic_journal::{Journal, JournalOptions};
use haptic_migrations::MigrateError;
use serde_json::{Value, json};

use crate::open::{check_file, open_fail, repaired_copy, storage_fail};
use crate::{Fail, Out, Res};

pub(super) fn migrate_fail(path: &Path, e: MigrateError) -> Fail {
    match e {
        MigrateError::Open(o) => open_fail(path, o),
        MigrateError::Storage { source, .. } => storage_fail(path, &source),
        other => Fail::Usage(other.to_string()),
    }
}

pub(super) fn migrate(path: &Path, dry_run: bool, write: bool, out: &Out) -> Res<u8> {
    check_file(path, write)?;
    let opts = JournalOptions::new(path).create(false);
    let mut repaired = None;
    let plan = match haptic_migrations::plan(&opts, haptic_migrations::STEPS) {
        Err(MigrateError::Storage {
            source: redb::Error::RepairAborted,
            ..
        }) => {
            // Not closed cleanly: plan (and dry-run) on a repaired copy; --write migrates the
            // file itself, whose read-write open repairs it.
            let (dir, copy) = repaired_copy(path)?;
            let plan = haptic_migrations::plan(
                &JournalOptions::new(&copy).create(false),
                haptic_migrations::STEPS,
            )
            .map_err(|e| migrate_fail(path, e))?;
            repaired = Some((dir, copy));
            plan
        }
        r => r.map_err(|e| migrate_fail(path, e))?,
    };
    let source = repaired.as_ref().map_or(path, |(_, c)| c.as_path());
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| json!({"step": s.name, "from": s.from, "to": s.to, "summary": s.summary}))
        .collect();
    let action = if plan.steps.is_empty() {
        "up to date"
    } else if write {
        "migrated"
    } else if dry_run {
        "dry run: migrated a copy"
    } else {
        "plan only: add --dry-run to try it on a copy, --write to migrate the file"
    };
    if !plan.steps.is_empty() && (dry_run || write) {
        let dir = tempfile::tempdir().map_err(|e| Fail::Usage(format!("temp dir: {e}")))?;
        let target = if write {
            path.to_owned()
        } else {
            let copy = dir.path().join("journal-dry-run.redb");
            std::fs::copy(source, &copy)
                .map_err(|e| Fail::Usage(format!("copying {}: {e}", path.display())))?;
            copy
        };
        let o = JournalOptions::new(&target).create(false);
        haptic_migrations::migrate(&o).map_err(|e| migrate_fail(path, e))?;
        let j = Journal::open(&o.read_only(true)).map_err(|e| open_fail(path, e))?;
        drop(j);
    }
    if out.json {
        out.line(&json!({
            "file": path.display().to_string(), "found": plan.found, "target": plan.target,
            "steps": steps, "result": action,
        }));
    } else {
        outln!(
            "{}: schema {}, this build: {}",
            path.display(),
            plan.found,
            plan.target
        );
        for s in &plan.steps {
            outln!("step {} ({} -> {}): {}", s.name, s.from, s.to, s.summary);
        }
        outln!("{action}");
    }
    Ok(0)
}
