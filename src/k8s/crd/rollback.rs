//! The `RolledBack` condition (issue 28): its status, reason and message for each journaled
//! rollback decision, and what a condition shows read back ([`RollbackShown`]): the fleet's
//! record of a hold that a new leader or a restarted process continues, and of a refused value
//! that is not tried again. Both directions live here so the message format has one owner.

use haptic_journal::{Checksum, RollbackChange};

use super::labels::ROLLBACK_TO;
use super::{conditions, reasons};

/// `(status, reason, message)` of `RolledBack` for `change`. A held render's message starts
/// `render <checksum> is held (haproxy-haptic.org/rollback-to=<value>)`; a refusal's names the
/// refused value.
#[must_use]
pub fn rolled_back_condition(change: &RollbackChange) -> (bool, &'static str, String) {
    let show = |c: &Option<Checksum>| c.map_or_else(|| "none".to_owned(), |c| c.to_string());
    match change {
        RollbackChange::Held {
            value,
            render,
            newest,
        }
        | RollbackChange::Holding {
            value,
            render,
            newest,
        } => (
            true,
            reasons::ROLLBACK_HELD,
            format!(
                "render {render} is held ({ROLLBACK_TO}={value}), validated again with haproxy -c; the newest validated render {} (spec.checksum) is not deployed until the annotation is removed",
                show(newest)
            ),
        ),
        RollbackChange::Released { render, newest } => (
            false,
            reasons::ROLLBACK_ENDED,
            format!(
                "the hold on render {render} ended ({ROLLBACK_TO} removed): the fleet gets the newest validated render {}",
                show(newest)
            ),
        ),
        RollbackChange::Refused {
            value,
            reason,
            held: Some((held_value, held)),
        } => (
            true,
            reasons::ROLLBACK_HELD,
            format!(
                "render {held} is held ({ROLLBACK_TO}={held_value}); the request {ROLLBACK_TO}={value} was refused and changed nothing: {reason}"
            ),
        ),
        RollbackChange::Refused {
            value,
            reason,
            held: None,
        } => (
            false,
            reasons::ROLLBACK_REFUSED,
            format!(
                "{ROLLBACK_TO}={value} refused, the fleet unchanged: {reason}; remove the annotation or set another value (this one is not tried again)"
            ),
        ),
    }
}

/// What a `RolledBack` condition shows (`status`, `message`), read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollbackShown {
    /// The hold (True): the annotation value it was asked with and the render.
    pub held: Option<(String, Checksum)>,
    /// The value of the last request refused, when the condition names one.
    pub refused: Option<String>,
}

impl RollbackShown {
    /// Parses a `RolledBack` condition's status and message ([`rolled_back_condition`]'s
    /// shapes); anything else shows nothing.
    #[must_use]
    pub fn parse(status: &str, message: &str) -> Self {
        let mut shown = RollbackShown::default();
        let value_tag = format!("{ROLLBACK_TO}=");
        if status == "True"
            && let Some(rest) = message.strip_prefix("render ")
            && let Some((sum, rest)) = rest.split_once(' ')
            && let Ok(render) = Checksum::parse(sum)
            && let Some(rest) = rest.strip_prefix("is held (")
            && let Some(rest) = rest.strip_prefix(value_tag.as_str())
            && let Some((value, _)) = rest.split_once(')')
        {
            shown.held = Some((value.to_owned(), render));
        }
        let request = format!("the request {value_tag}");
        if let Some((_, rest)) = message.split_once(request.as_str()) {
            shown.refused = rest.split_once(" was refused").map(|(v, _)| v.to_owned());
        } else if status == "False"
            && let Some(rest) = message.strip_prefix(value_tag.as_str())
        {
            shown.refused = rest
                .split_once(" refused, the fleet unchanged")
                .map(|(v, _)| v.to_owned());
        }
        shown
    }

    /// What `conditions` (a status's list) show: the `RolledBack` condition's, if any.
    #[must_use]
    pub fn of(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> Self {
        conditions
            .iter()
            .find(|c| c.type_ == conditions::ROLLED_BACK)
            .map(|c| RollbackShown::parse(&c.status, &c.message))
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_what_it_says() {
        let (a, b) = (Checksum::of(b"a"), Checksum::of(b"b"));
        let cases = [
            (
                RollbackChange::Held {
                    value: "previous".into(),
                    render: a,
                    newest: Some(b),
                },
                Some(("previous".to_owned(), a)),
                None,
            ),
            (
                RollbackChange::Holding {
                    value: a.to_string(),
                    render: a,
                    newest: None,
                },
                Some((a.to_string(), a)),
                None,
            ),
            (
                RollbackChange::Released {
                    render: a,
                    newest: Some(b),
                },
                None,
                None,
            ),
            (
                RollbackChange::Refused {
                    value: "sha256:00".into(),
                    reason: "not in the journal".into(),
                    held: Some(("previous".into(), a)),
                },
                Some(("previous".to_owned(), a)),
                Some("sha256:00".to_owned()),
            ),
            (
                RollbackChange::Refused {
                    value: "previous".into(),
                    reason: "no render was validated before the newest one".into(),
                    held: None,
                },
                None,
                Some("previous".to_owned()),
            ),
        ];
        for (change, held, refused) in cases {
            let (on, reason, message) = rolled_back_condition(&change);
            let status = if on { "True" } else { "False" };
            assert!(
                super::super::condition_spec(conditions::ROLLED_BACK)
                    .unwrap()
                    .allows(status, reason)
            );
            let shown = RollbackShown::parse(status, &message);
            assert_eq!(shown.held, held, "{message}");
            assert_eq!(shown.refused, refused, "{message}");
        }
        assert_eq!(
            RollbackShown::parse("True", "something else"),
            RollbackShown::default()
        );
    }
}
