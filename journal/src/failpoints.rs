//! Crash points (STYLE.md 2.7): `crash_point!("<component>::<before|after>_<step>")`.
//!
//! Without the `failpoints` feature the macro expands to `()`. With it, the point is armed by the
//! environment variable `CRASH_AT=<name>[:<nth hit>]` (n counts from 1; default 1). When the
//! armed point is reached for the n-th time the process prints `crash_point fired: <name>` to
//! stderr and calls [`std::process::abort`]: no unwinding, no destructors, no flushing, like a
//! crash. Every name must be listed in [`ALL`] (a test greps the sources for it).

/// Every crash point name, across all components. Later components add theirs here.
pub const ALL: &[&str] = &[
    // journal writer: a group's transaction built, not committed (nothing of it is durable).
    "journal::before_commit",
    // journal writer: a group committed, its requesters not answered yet.
    "journal::after_commit",
    // journal writer: a periodic trim deleted events inside the group's uncommitted transaction.
    "journal::after_trim",
    // journal writer: auto-compaction about to start (between commits).
    "journal::before_compact",
    // journal writer: compaction returned, nothing after it done.
    "journal::after_compact",
    // acceptor (root crate): a render and its blobs committed, nothing downstream acted on it.
    "accept::after_render_journaled",
    // leadership (root crate): `BecameLeader` and the term committed, the components not told.
    "leadership::after_became_leader_journaled",
    // leadership (scheduler): the live `BecameLeader` reached the scheduler, the journaled
    // pending and in-flight slots not resumed yet.
    "leadership::before_replay",
    // scheduler (root crate): a decision to wait (the pending slot) committed, nothing started.
    "scheduler::after_pending_journaled",
    // scheduler (root crate): DeploymentScheduled + in-flight slot committed, executor not started.
    "scheduler::after_scheduled_journaled",
    // deployer, per endpoint: before each storage upload or replace (earlier files are written).
    "deployer::before_storage_upload",
    // deployer, per endpoint: a storage write answered (its intent journaled, its reload not
    // come: the file on disk, not loaded).
    "deployer::after_storage_write",
    // deployer, per endpoint: a transaction started and journaled open, no change written.
    "deployer::after_transaction_started",
    // deployer, per endpoint: a change written into the open transaction, not committed.
    "deployer::after_transaction_change",
    // deployer, per endpoint: the transaction journaled committing, the commit not sent.
    "deployer::before_transaction_commit",
    // deployer, per endpoint: the raw configuration accepted by the Dataplane API, its reload not
    // waited for, nothing journaled.
    "deployer::after_raw_push",
    // deployer, per endpoint: the push's reload finished, the applied state not journaled.
    "deployer::after_reload",
    // deployer (root crate): one endpoint's result journaled, the deployment not completed yet.
    "deployer::after_endpoint_applied",
    // deployer (root crate): every endpoint journaled, completion + in-flight ack not committed.
    "deployer::before_completed",
    // publisher (writer): before an object's create request (the first: the HAProxyCfg).
    "publisher::before_create",
    // publisher (writer): the HAProxyCfg written, its auxiliary objects not.
    "publisher::after_cfg_write",
    // publisher (writer): the auxiliary objects written, the status references not.
    "publisher::after_aux_objects",
    // publisher (root crate): publication complete in the cluster, ack + ConfigPublished not committed.
    "publisher::before_publish_ack",
    // publisher (root crate): ack + ConfigPublished committed, the caches and wakes not updated.
    "publisher::after_config_published",
    // status worker: the round's status written in the cluster, its ack/park not committed.
    "status::after_status_write",
    // status worker: a round that parked items committed.
    "status::after_park",
    // publish worker: parked statuses moved back to pending (committed), the status worker not woken.
    "status::after_unpark",
    // drain (graceful stop): the drain's publication of the newest deployed render not started.
    "drain::before_publish",
    // drain: that publication is in the cluster, its ack + drain checkpoint not committed.
    "drain::after_publish",
    // haptic-migrations: the test-only v4->v5 step aborts here (feature `test-v5`).
    "migrations::after_test_v5_half_rewritten",
];

/// Marks a crash point; see the [module docs](crate::failpoints).
#[cfg(feature = "failpoints")]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        $crate::failpoints::hit($name)
    };
}

/// Marks a crash point; compiled out (the `failpoints` feature is off).
#[cfg(not(feature = "failpoints"))]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        ()
    };
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Armed {
        name: String,
        nth: u64,
        hits: AtomicU64,
    }

    fn armed() -> Option<&'static Armed> {
        static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
        ARMED
            .get_or_init(|| {
                let spec = std::env::var("CRASH_AT").ok()?;
                let (name, nth) = match spec.rsplit_once(':') {
                    Some((n, k)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => {
                        (n.to_owned(), k.parse().unwrap_or(1))
                    }
                    _ => (spec.clone(), 1),
                };
                Some(Armed {
                    name,
                    nth,
                    hits: AtomicU64::new(0),
                })
            })
            .as_ref()
    }

    /// Called by `crash_point!`; aborts when this is the armed point's n-th hit.
    pub fn hit(name: &'static str) {
        debug_assert!(
            super::ALL.contains(&name),
            "crash point {name} missing from ALL"
        );
        if let Some(a) = armed()
            && a.name == name
            && a.hits.fetch_add(1, Ordering::SeqCst) + 1 == a.nth
        {
            eprintln!("crash_point fired: {name}");
            std::process::abort();
        }
    }
}

#[cfg(feature = "failpoints")]
pub use armed::hit;

#[cfg(test)]
mod tests {
    /// Every `crash_point!("...")` used in this crate's sources (`src/**/*.rs`) is listed in
    /// [`super::ALL`].
    #[test]
    fn every_used_point_is_registered() {
        // This crate's sources and those of the crates that use its macro (the root crate, the
        // migrations).
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut dirs = vec![
            root.join("src"),
            root.join("../src"),
            root.join("../migrations/src"),
        ];
        let mut files = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("src dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
                    files.push(path);
                }
            }
        }
        let mut used = Vec::new();
        for path in files {
            let text = std::fs::read_to_string(&path).expect("read source");
            let marker = concat!("crash_point", "!(\"");
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (i, _) in line.match_indices(marker) {
                    let rest = &line[i + marker.len()..];
                    let end = rest.find('"').expect("closing quote");
                    used.push(rest[..end].to_owned());
                }
            }
        }
        assert!(
            !used.is_empty(),
            "found no crash points; is the scan broken?"
        );
        for name in super::ALL {
            assert!(
                used.iter().any(|u| u == name),
                "crash point {name} is listed in ALL but used nowhere"
            );
        }
        for name in &used {
            assert!(
                super::ALL.contains(&name.as_str()),
                "crash point {name} missing from ALL"
            );
            let (component, step) = name.split_once("::").expect("<component>::<step>");
            assert!(!component.is_empty());
            assert!(
                step.starts_with("before_") || step.starts_with("after_"),
                "{name}"
            );
        }
    }
}
