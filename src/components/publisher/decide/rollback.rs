//! The rollback annotation as the publisher's router reads it (issue 28): whether a value of
//! `haproxy-haptic.org/rollback-to` is a request to journal ([`rollback_requested`]).

/// Whether the value `value` of the annotation `haproxy-haptic.org/rollback-to` on the main
/// HAProxyCfg (`None`: absent) is a request to journal, given the last value this process
/// journaled (`journaled`: `None` before the first) and what the `RolledBack` condition shows:
/// a changed value is; the first value a process reads is too (its absence included: a hold
/// whose annotation went while no replica led ends then), except a value the condition shows
/// refused and not held, which stands refused until the annotation changes (a restart or a new
/// leader trying it again could hold the fleet unasked once `previous` resolves).
#[must_use]
pub fn rollback_requested(
    journaled: Option<&Option<String>>,
    value: Option<&str>,
    shown: &crate::k8s::crd::RollbackShown,
) -> bool {
    match journaled {
        Some(j) => j.as_deref() != value,
        None => !value.map(str::trim).is_some_and(|v| {
            shown.refused.as_deref() == Some(v)
                && shown.held.as_ref().is_none_or(|(held, _)| held != v)
        }),
    }
}

#[cfg(test)]
mod rollback_tests {
    use haptic_journal::Checksum;

    use super::rollback_requested;
    use crate::k8s::crd::RollbackShown;

    #[test]
    fn a_refused_value_stands_until_the_annotation_changes() {
        let none = RollbackShown::default();
        let refused = RollbackShown {
            held: None,
            refused: Some("previous".into()),
        };
        let held = Checksum::of(b"h");
        let refused_while_held = RollbackShown {
            held: Some(("previous".into(), held)),
            refused: Some("sha256:00".into()),
        };
        let previous = Some("previous".to_owned());
        // The first read of a process: journaled, its absence included...
        assert!(rollback_requested(None, Some("previous"), &none));
        assert!(rollback_requested(None, None, &none));
        assert!(rollback_requested(None, None, &refused));
        // ...but not a value the condition shows refused (held or not).
        assert!(!rollback_requested(None, Some("previous"), &refused));
        assert!(!rollback_requested(None, Some(" previous "), &refused));
        assert!(!rollback_requested(
            None,
            Some("sha256:00"),
            &refused_while_held
        ));
        // The held value itself is read again (the scheduler changes nothing for it).
        assert!(rollback_requested(
            None,
            Some("previous"),
            &refused_while_held
        ));
        // Later reads: a change only.
        assert!(!rollback_requested(
            Some(&previous),
            Some("previous"),
            &none
        ));
        assert!(rollback_requested(Some(&previous), None, &refused));
        assert!(rollback_requested(Some(&None), Some("previous"), &refused));
    }
}
