//! What a journal storage fault means for an operator: one text for the readiness probe, the
//! ingest endpoint's `507`, the Kubernetes Event, the HAProxyCfg condition and the log, naming
//! the journal file, the OS error and the fix.

use std::path::Path;

use haptic_journal::{FaultKind, StorageFault};

/// The fix for a fault of `kind` on the journal at `path` (lower case, no trailing period).
#[must_use]
pub fn fix(kind: FaultKind, path: &Path) -> String {
    let p = path.display();
    match kind {
        FaultKind::Full => format!(
            "free space on the volume of {p} (delete files there or grow the volume); haptic \
             resumes by itself"
        ),
        FaultKind::ReadOnly => format!(
            "the volume of {p} is read-only: make it writable again (remount it read-write, or \
             repair the volume); haptic resumes by itself"
        ),
        FaultKind::Removed => format!(
            "the journal file {p} was removed: restart the pod (it opens the file at that path; \
             an empty journal is rebuilt from the cluster and the pods)"
        ),
        _ => format!("check the volume of {p} (kernel log); haptic retries by itself"),
    }
}

/// One line: `journal <path> not writable (<kind>): <error>; fix: <fix>`.
#[must_use]
pub fn describe(path: &Path, fault: &StorageFault) -> String {
    format!(
        "journal {} not writable ({}): {}; fix: {}",
        path.display(),
        fault.kind.metric_label().replace('_', "-"),
        fault.message,
        fix(fault.kind, path)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_names_the_file_and_its_fix() {
        let path = Path::new("/var/lib/haptic/journal.redb");
        let fault = StorageFault {
            kind: FaultKind::Full,
            message: "I/O error: No space left on device (os error 28)".into(),
            since: haptic_journal::UnixMillis(0),
            failures: 1,
        };
        let text = describe(path, &fault);
        assert!(text.contains("/var/lib/haptic/journal.redb"), "{text}");
        assert!(text.contains("No space left on device"), "{text}");
        assert!(text.contains("free space on the volume"), "{text}");
        assert!(fix(FaultKind::ReadOnly, path).contains("read-only"));
        assert!(fix(FaultKind::Removed, path).contains("restart the pod"));
    }
}
