//! Containment of redb panics (J5, J10).
//!
//! redb trusts the pages of a cleanly closed file: a page damaged outside redb (a zeroed 4 KiB
//! block, a flipped byte in a branch page) makes its b-tree code panic (`unreachable!`, "Invalid
//! page type byte") instead of returning an error. Every open and read walk of [`crate::Journal`]
//! runs inside [`contain`], which turns such a panic into [`Damage`]: the table being read (and
//! the last key read before the failure, when known) plus redb's message, reported as corruption
//! (`OpenError::Corrupt` / `ReadError::Damaged`), never as a crash.
//!
//! The process-wide panic hook is wrapped once: while a thread runs inside [`contain`], its
//! panics print nothing (they are reported as errors); every other panic goes to the previous
//! hook unchanged. The wrapper is thread-local in effect, so concurrent panics elsewhere keep
//! their output.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use crate::corrupt::RecordKey;

/// A redb panic caught while reading a damaged file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("redb page damage{}{}: {message}",
    .table.map(|t| format!(" while reading table {t}")).unwrap_or_default(),
    .after_key.as_ref().map(|k| format!(" (after {k})")).unwrap_or_default())]
pub struct Damage {
    /// The table being read, when known.
    pub table: Option<&'static str>,
    /// The last key read from it before the failure, when any.
    pub after_key: Option<RecordKey>,
    /// redb's panic message and location.
    pub message: String,
}

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static TABLE: Cell<Option<&'static str>> = const { Cell::new(None) };
    static KEY: RefCell<Option<RecordKey>> = const { RefCell::new(None) };
    static MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DEPTH.with(Cell::get) > 0 {
                let payload = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_owned());
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", short_path(l.file()), l.line()))
                    .unwrap_or_default();
                MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{payload}{at}")));
            } else {
                previous(info);
            }
        }));
    });
}

/// `…/redb-4.6.0/src/tree_store/btree.rs` -> `redb-4.6.0/src/tree_store/btree.rs`.
fn short_path(p: &str) -> &str {
    p.find("redb-").map_or(p, |i| &p[i..])
}

/// Records the table a walk is reading (for [`Damage::table`]); clears the last key.
pub(crate) fn at_table(table: &'static str) {
    if DEPTH.with(Cell::get) > 0 {
        TABLE.with(|t| t.set(Some(table)));
        KEY.with(|k| *k.borrow_mut() = None);
    }
}

/// Records the last key a walk read (for [`Damage::after_key`]).
pub(crate) fn at_key(key: impl FnOnce() -> RecordKey) {
    if DEPTH.with(Cell::get) > 0 {
        KEY.with(|k| *k.borrow_mut() = Some(key()));
    }
}

/// Runs `f`; a panic inside it (redb reading a damaged page) becomes [`Damage`]. Nested calls
/// are fine (the outermost one reports).
///
/// # Errors
/// [`Damage`] when `f` panicked.
pub fn contain<T>(f: impl FnOnce() -> T) -> Result<T, Damage> {
    install_hook();
    let outer = DEPTH.with(|d| {
        let v = d.get();
        d.set(v + 1);
        v == 0
    });
    if outer {
        TABLE.with(|t| t.set(None));
        KEY.with(|k| *k.borrow_mut() = None);
        MESSAGE.with(|m| *m.borrow_mut() = None);
    }
    let r = catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    match r {
        Ok(v) => Ok(v),
        Err(payload) if !outer => std::panic::resume_unwind(payload),
        Err(_) => Err(Damage {
            table: TABLE.with(Cell::take),
            after_key: KEY.with(|k| k.borrow_mut().take()),
            message: MESSAGE
                .with(|m| m.borrow_mut().take())
                .unwrap_or_else(|| "redb panicked".to_owned()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_damage_with_its_context_and_others_pass_through() {
        let d = contain(|| {
            at_table("events");
            at_key(|| RecordKey::Seq(7));
            panic!("Invalid page type byte 0");
        })
        .unwrap_err();
        assert_eq!(d.table, Some("events"));
        assert_eq!(d.after_key, Some(RecordKey::Seq(7)));
        assert!(d.message.contains("Invalid page type byte 0"), "{d}");
        assert!(
            d.to_string().contains("reading table events (after seq 7)"),
            "{d}"
        );
        assert_eq!(contain(|| 5).unwrap(), 5);
        // Outside contain, a panic still unwinds normally.
        assert!(catch_unwind(|| panic!("x")).is_err());
    }
}
