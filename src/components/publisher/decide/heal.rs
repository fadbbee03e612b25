//! What self-healing remembers of a term's publications, and when a watch event is an outside
//! edit (pure: the shell keeps one [`TermCache`] per term behind its only lock and asks
//! [`outside_edit`] for each event).
//!
//! The publisher's own writes are not outside edits: an event is one only when the object
//! differs from everything this publisher wrote or expects now: the last complete publication,
//! the few before it (their events may arrive late), and the publication being written. An
//! outside edit that sets an object back to the content of one of those few earlier
//! publications of this term is not noticed (documented limit). Status and metadata are not
//! compared, so status writes never count; an object the publication in progress drops
//! (garbage collection) is not restored.

use std::collections::{HashMap, VecDeque};

use haptic_journal::Term;

use crate::k8s::crd::HAProxyCfgStatus;

/// How many earlier complete publications the heal watch still recognises as its own writes.
pub const HEAL_HISTORY: usize = 4;

/// (kind, name) of a published object.
pub type ObjectKey = (String, String);

/// Published objects: (kind, name) -> the JSON the heal watch compares (spec, or Secret data).
pub type Objects = HashMap<ObjectKey, String>;

/// Per-term memory of what this publisher wrote and expects, so the heal watch tells its own
/// writes from outside edits; fresh at each term.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TermCache {
    /// Objects of the last complete publication.
    pub expected: Objects,
    /// Objects of the complete publications before it, newest first, at most
    /// [`HEAL_HISTORY`] (their watch events may arrive late, after the cache moved on).
    pub previous: VecDeque<Objects>,
    /// Objects of the publication being written now, if any.
    pub in_flight: Option<Objects>,
    /// The last status of the main HAProxyCfg the heal watch saw with conditions or pod
    /// entries (kept when the object is deleted: a delete event carries its final state), so a
    /// restored object gets its status back.
    pub status: Option<HAProxyCfgStatus>,
}

impl TermCache {
    /// A publication attempt begins: `planned` is what it writes.
    pub fn begin(&mut self, planned: Objects) {
        self.in_flight = Some(planned);
    }

    /// A publication completed with `objects`: they are what the watch expects now; the
    /// publication before becomes history (when it differs).
    pub fn completed(&mut self, objects: Objects) {
        if objects != self.expected {
            let old = std::mem::replace(&mut self.expected, objects);
            self.remember(old);
        }
        self.in_flight = None;
    }

    /// A publication ended (completed, superseded, cancelled or rejected): an incomplete one
    /// still wrote some of its objects, so their late events are ours too.
    pub fn settle(&mut self) {
        if let Some(partial) = self.in_flight.take() {
            self.remember(partial);
        }
    }

    fn remember(&mut self, objects: Objects) {
        self.previous.push_front(objects);
        self.previous.truncate(HEAL_HISTORY);
    }
}

/// What a watch event says about one published object.
#[derive(Debug)]
pub enum Seen<'a> {
    /// Created or changed: its compared content (JSON besides metadata and status) and the
    /// leadership term stamped on it.
    Applied {
        /// The compared content.
        content: &'a str,
        /// The term stamped on it, if any.
        term: Option<Term>,
    },
    /// Deleted.
    Deleted,
}

/// True when the event `seen` on `key` is an outside edit (or delete) this publisher must
/// restore; false for its own writes, status-only changes, garbage collection, objects it does
/// not publish, and objects stamped by a newer term than `ours` (their writer leads; ours
/// would be refused).
#[must_use]
pub fn outside_edit(cache: &TermCache, key: &ObjectKey, seen: &Seen<'_>, ours: Term) -> bool {
    let planned = cache.in_flight.as_ref().map(|m| m.get(key));
    // The publication in progress drops it: its garbage collection deletes it (and an edit of
    // an object about to be deleted does not matter).
    if planned == Some(None) {
        return false;
    }
    let planned = planned.flatten();
    let expected = cache.expected.get(key);
    if planned.is_none() && expected.is_none() {
        return false;
    }
    match seen {
        Seen::Deleted => true,
        Seen::Applied { term, .. } if term.is_some_and(|t| t > ours) => false,
        Seen::Applied { content, .. } => ![planned, expected]
            .into_iter()
            .flatten()
            .chain(cache.previous.iter().filter_map(|m| m.get(key)))
            .any(|want| want == content),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use haptic_journal::Term;

    use super::{ObjectKey, Seen, TermCache, outside_edit};

    fn key(kind: &str, name: &str) -> ObjectKey {
        (kind.to_owned(), name.to_owned())
    }

    fn cache() -> TermCache {
        let mut c = TermCache::default();
        c.expected.insert(key("HAProxyCfg", "cfg"), "v2".into());
        c.expected.insert(key("HAProxyMapFile", "old"), "m2".into());
        let mut v1 = HashMap::new();
        v1.insert(key("HAProxyCfg", "cfg"), "v1".to_owned());
        c.previous.push_front(v1);
        c
    }

    fn applied(content: &str) -> Seen<'_> {
        Seen::Applied {
            content,
            term: Some(Term(1)),
        }
    }

    #[test]
    fn own_writes_are_not_outside_edits() {
        let mut c = cache();
        let cfg = key("HAProxyCfg", "cfg");
        assert!(!outside_edit(&c, &cfg, &applied("v2"), Term(1)));
        // A late event of the previous publication.
        assert!(!outside_edit(&c, &cfg, &applied("v1"), Term(1)));
        // The publication in progress writes v3 and drops the old map (GC).
        let mut planned = HashMap::new();
        planned.insert(cfg.clone(), "v3".to_owned());
        planned.insert(key("HAProxyMapFile", "new"), "m3".to_owned());
        c.in_flight = Some(planned);
        assert!(!outside_edit(&c, &cfg, &applied("v3"), Term(1)));
        assert!(!outside_edit(
            &c,
            &key("HAProxyMapFile", "new"),
            &applied("m3"),
            Term(1)
        ));
        let old = key("HAProxyMapFile", "old");
        assert!(!outside_edit(&c, &old, &Seen::Deleted, Term(1)));
        // Objects we do not publish, and a newer term's writes.
        assert!(!outside_edit(
            &c,
            &key("HAProxyCfg", "cfg-invalid"),
            &Seen::Deleted,
            Term(1)
        ));
        let newer = Seen::Applied {
            content: "theirs",
            term: Some(Term(2)),
        };
        assert!(!outside_edit(&c, &cfg, &newer, Term(1)));
    }

    #[test]
    fn outside_edits_and_deletes_are() {
        let mut c = cache();
        let cfg = key("HAProxyCfg", "cfg");
        assert!(outside_edit(&c, &cfg, &applied("evil"), Term(1)));
        assert!(outside_edit(&c, &cfg, &Seen::Deleted, Term(1)));
        let unstamped = Seen::Applied {
            content: "evil",
            term: None,
        };
        assert!(outside_edit(
            &c,
            &key("HAProxyMapFile", "old"),
            &unstamped,
            Term(1)
        ));
        // During a publication: an edit of an object it writes is still one.
        let mut planned = HashMap::new();
        planned.insert(cfg.clone(), "v3".to_owned());
        c.in_flight = Some(planned);
        assert!(outside_edit(&c, &cfg, &applied("evil"), Term(1)));
        assert!(outside_edit(&c, &cfg, &Seen::Deleted, Term(1)));
    }

    /// A completed publication moves the one before into the history (an unchanged one does
    /// not push a copy); a publication that ended incomplete is history too; the history keeps
    /// the newest few.
    #[test]
    fn the_history_of_a_term() {
        let cfg = key("HAProxyCfg", "cfg");
        let objects = |v: &str| HashMap::from([(cfg.clone(), v.to_owned())]);
        let mut c = TermCache::default();
        c.begin(objects("v1"));
        c.completed(objects("v1"));
        c.settle();
        assert_eq!(c.expected, objects("v1"));
        assert_eq!(c.previous.len(), 1, "the empty start is history");
        c.begin(objects("v1"));
        c.completed(objects("v1"));
        c.settle();
        assert_eq!(c.previous.len(), 1, "a repeat adds no history");
        c.begin(objects("v2"));
        c.settle();
        assert_eq!(
            c.previous.front(),
            Some(&objects("v2")),
            "an incomplete one"
        );
        assert!(!outside_edit(&c, &cfg, &applied("v2"), Term(1)));
        for n in 3..10 {
            c.begin(objects(&format!("v{n}")));
            c.completed(objects(&format!("v{n}")));
            c.settle();
        }
        assert_eq!(c.previous.len(), super::HEAL_HISTORY);
        assert!(outside_edit(&c, &cfg, &applied("v2"), Term(1)), "forgotten");
    }
}
