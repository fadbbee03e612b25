//! The matrix's rows: the crash points, the streams that reach them, what must hold at the death.

use super::*;

/// The point of a `CRASH_AT` spec (`<name>[:<nth>]`).
pub(super) fn point_of(spec: &str) -> &str {
    match spec.rsplit_once(':') {
        Some((p, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => spec,
    }
}

/// How a case drives the controller to its point.
#[derive(Clone, Copy, Debug)]
pub(super) enum Drive {
    /// Feed each render once the previous one is published (or, rejected, reported).
    Sequential,
    /// Feed each render once the previous one's deployment started (the next one waits).
    Overlap,
    /// Sequential for the first render; then for each further render: feed it, SIGTERM once its
    /// deployment started (the drain completes and publishes it), restart armed.
    Drain,
    /// Unarmed, sequential up to the last render; SIGKILL once that one's deployment finished
    /// (its publication still throttled); then restart armed: the replayed pod statuses meet a
    /// spec that holds the previous render (they park), the publication then unparks them.
    PreKill,
}

/// What the journal must hold when the process died at a point.
#[derive(Clone, Copy, Debug)]
pub(super) enum AtDeath {
    /// It opens and verifies (a commit boundary: all of a group or none of it).
    Consistent,
    /// The render being fed is journaled, nothing was scheduled for it.
    RenderAccepted,
    /// The last event is `BecameLeader`, its term in the meta.
    LeaderJournaled,
    /// `BecameLeader` journaled, nothing scheduled in its term.
    BeforeReplay,
    /// The pending deployment slot is taken.
    PendingSlot,
    /// The in-flight slot is taken; the last scheduled deployment has `n` (None: fewer than
    /// every pod; Some(n): exactly n) `InstanceDeployed` and no completion.
    InFlight(Option<usize>),
    /// The last scheduled deployment: in flight, at least one pod journaled, not completed.
    SomeApplied,
    /// A publication is queued and no `ConfigPublished` names the render being fed.
    PublishQueued,
    /// `ConfigPublished` names the render being fed.
    Published,
    /// Status items pending.
    StatusPending,
    /// Status items parked.
    StatusParked,
    /// A deploy-driven publication queued (the drain's).
    DrainQueued,
}

#[derive(Clone, Debug)]
pub(super) struct Case {
    /// `CRASH_AT` (a point, `:<nth>` optional).
    pub(super) spec: String,
    pub(super) renders: Vec<&'static str>,
    pub(super) drive: Drive,
    pub(super) at_death: AtDeath,
    /// Extra environment (test hooks of the `failpoints` build).
    pub(super) env: Vec<(&'static str, &'static str)>,
    /// `--publish-interval` (None: the default, no throttle); bounds add it.
    pub(super) publish_interval: Option<Duration>,
    /// A pod killed and a pod added, and when.
    pub(super) churn: Option<Churn>,
    /// A second replica (its own identity and journal) follows the armed leader and takes
    /// over when it dies (DESIGN.md J9 b).
    pub(super) successor: bool,
}

/// When a case kills a pod (processes gone, Pod object deleted) and adds one (a fourth
/// sandbox pod whose Pod object is registered only then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Churn {
    /// In the armed run, once the previous render is reached, right before the last render
    /// of the stream is fed: the point fires on work that follows the churn.
    BeforeLast,
    /// While the controller is dead: after the crash, before the restart (the restarted
    /// controller finds a pod gone and one new).
    WhileDown,
}

pub(super) fn case(spec: &str, renders: &[&'static str], drive: Drive, at_death: AtDeath) -> Case {
    Case {
        spec: spec.to_owned(),
        renders: renders.to_vec(),
        drive,
        at_death,
        env: Vec::new(),
        publish_interval: None,
        churn: None,
        successor: false,
    }
}

impl Case {
    /// The row's name: the spec, then what the row adds.
    pub(super) fn name(&self) -> String {
        let mut n = self.spec.clone();
        match self.churn {
            Some(Churn::BeforeLast) => n.push_str(" +churn"),
            Some(Churn::WhileDown) => n.push_str(" +churn(down)"),
            None => {}
        }
        if self.successor {
            n.push_str(" +leader change");
        }
        n
    }
}

pub(super) fn churned(mut c: Case, when: Churn) -> Case {
    c.churn = Some(when);
    c
}

pub(super) fn succeeded(mut c: Case) -> Case {
    c.successor = true;
    c
}

/// A publication throttle long enough for a deployment (the minimum interval, then a few
/// hundred milliseconds of sandbox pushes) to finish inside it: the pods' statuses then arrive
/// while the spec still holds the previous render (they park), and deploy-driven publications
/// wait in the queue for a drain.
pub(super) const THROTTLE: Duration = Duration::from_secs(5);

pub(super) fn throttled(mut c: Case) -> Case {
    c.publish_interval = Some(THROTTLE);
    c
}

/// Every point, the shortest stream that reaches it and what its position implies.
pub(super) fn cases() -> Vec<Case> {
    use AtDeath as A;
    use Drive::{Drain, Overlap, PreKill, Sequential as Seq_};
    let basic: &[&'static str] = &["01-basic"];
    let maps: &[&'static str] = &["01-basic", "02-maps"];
    // One endpoint journaled, then pod churn while the controller is dead (a row of its own,
    // and again with a leadership change).
    let applied_then_churn = || {
        churned(
            case(
                "deployer::after_endpoint_applied",
                basic,
                Seq_,
                A::SomeApplied,
            ),
            Churn::WhileDown,
        )
    };
    let parks: &[&'static str] = &["01-basic", "02-maps", "03-maps-changed", "04-errors"];
    // Trims every 4 commits, each followed by a compaction (test hooks).
    let churn: &[&'static str] = &["01-basic", "10-large-map", "02-maps", "03-maps-changed"];
    let mut trim = case(
        "journal::after_trim",
        &["01-basic", "02-maps", "08-invalid", "04-errors", "05-tls"],
        Seq_,
        A::Consistent,
    );
    trim.env.push(("HAPTIC_TEST_JOURNAL_TRIM_EVERY", "4"));
    let mut compact = case("journal::before_compact", churn, Seq_, A::Consistent);
    compact.env.extend([
        ("HAPTIC_TEST_JOURNAL_TRIM_EVERY", "4"),
        ("HAPTIC_TEST_JOURNAL_COMPACT_ALWAYS", "1"),
    ]);
    let mut compacted = compact.clone();
    compacted.spec = "journal::after_compact".into();
    vec![
        case("journal::before_commit:4", basic, Seq_, A::Consistent),
        case("journal::after_commit:4", basic, Seq_, A::Consistent),
        trim,
        compact,
        compacted,
        case(
            "accept::after_render_journaled:2",
            maps,
            Seq_,
            A::RenderAccepted,
        ),
        case(
            "leadership::after_became_leader_journaled",
            basic,
            Seq_,
            A::LeaderJournaled,
        ),
        case("leadership::before_replay", basic, Seq_, A::BeforeReplay),
        case(
            "scheduler::after_pending_journaled",
            &["01-basic", "05-tls", "06-crtlist"],
            Overlap,
            A::PendingSlot,
        ),
        case(
            "scheduler::after_scheduled_journaled",
            basic,
            Seq_,
            A::InFlight(Some(0)),
        ),
        case(
            "deployer::before_storage_upload",
            &["01-basic", "06-crtlist"],
            Seq_,
            A::InFlight(None),
        ),
        // Between a file write and its reload, and inside a transaction (01 -> 02 writes the
        // map with skip_reload and changes the frontend's rule by one transaction): after the
        // restart the map is loaded and no transaction is left on any pod.
        case(
            "deployer::after_storage_write",
            maps,
            Seq_,
            A::InFlight(None),
        ),
        case(
            "deployer::after_transaction_started",
            maps,
            Seq_,
            A::InFlight(None),
        ),
        case(
            "deployer::after_transaction_change",
            maps,
            Seq_,
            A::InFlight(None),
        ),
        case(
            "deployer::before_transaction_commit",
            maps,
            Seq_,
            A::InFlight(None),
        ),
        case("deployer::after_raw_push", basic, Seq_, A::InFlight(None)),
        case("deployer::after_reload", basic, Seq_, A::InFlight(None)),
        case(
            "deployer::after_endpoint_applied",
            basic,
            Seq_,
            A::SomeApplied,
        ),
        case(
            "deployer::before_completed",
            basic,
            Seq_,
            A::InFlight(Some(PODS)),
        ),
        case("publisher::before_create", basic, Seq_, A::PublishQueued),
        case("publisher::after_cfg_write", basic, Seq_, A::PublishQueued),
        case(
            "publisher::after_aux_objects",
            &["01-basic", "07-ca"],
            Seq_,
            A::PublishQueued,
        ),
        case(
            "publisher::before_publish_ack",
            basic,
            Seq_,
            A::PublishQueued,
        ),
        case(
            "publisher::after_config_published",
            basic,
            Seq_,
            A::Published,
        ),
        case("status::after_status_write", basic, Seq_, A::StatusPending),
        // Later hits: a second file of one deployment, a second pod, the second publication
        // (with files), the `-invalid` object of a rejected render.
        case(
            "deployer::before_storage_upload:2",
            &["01-basic", "06-crtlist"],
            Seq_,
            A::InFlight(None),
        ),
        case(
            "deployer::after_endpoint_applied:2",
            basic,
            Seq_,
            A::SomeApplied,
        ),
        case(
            "publisher::before_publish_ack:2",
            maps,
            Seq_,
            A::PublishQueued,
        ),
        case(
            "publisher::before_create:2",
            &["01-basic", "08-invalid"],
            Seq_,
            A::Consistent,
        ),
        case("status::after_status_write:2", maps, Seq_, A::StatusPending),
        // Pod churn: a pod killed and one added right before the render the point fires on
        // (`+churn`), or while the controller is dead (`+churn(down)`).
        churned(
            case(
                "deployer::before_storage_upload",
                &["01-basic", "06-crtlist"],
                Seq_,
                A::InFlight(None),
            ),
            Churn::BeforeLast,
        ),
        applied_then_churn(),
        churned(
            case("status::after_status_write", basic, Seq_, A::StatusPending),
            Churn::WhileDown,
        ),
        churned(
            case(
                "publisher::before_publish_ack:2",
                maps,
                Seq_,
                A::PublishQueued,
            ),
            Churn::BeforeLast,
        ),
        // A leadership change: the other replica (its own journal) takes over from the
        // crashed leader; then the crashed one, restarted, leads again on its own journal.
        succeeded(applied_then_churn()),
        succeeded(case(
            "publisher::after_cfg_write",
            basic,
            Seq_,
            A::PublishQueued,
        )),
        throttled(case("status::after_park", parks, PreKill, A::StatusParked)),
        throttled(case(
            "status::after_unpark",
            parks,
            PreKill,
            A::StatusPending,
        )),
        throttled(case(
            "drain::before_publish",
            &["01-basic", "02-maps", "03-maps-changed", "04-errors"],
            Drain,
            A::DrainQueued,
        )),
        throttled(case(
            "drain::after_publish",
            &["01-basic", "02-maps", "03-maps-changed", "04-errors"],
            Drain,
            A::DrainQueued,
        )),
    ]
}
