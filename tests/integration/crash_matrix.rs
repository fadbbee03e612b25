//! The crash matrix (issue 13): every crash point of [`haptic_journal::failpoints::ALL`] and a
//! fixed set of seeded random SIGKILLs, each against the real binary on its own fleet of the
//! test kit (3 sandbox HAProxy pods behind Dataplane endpoints, the Kubernetes API emulator).
//!
//! ```text
//!  for each point (at most PARALLEL at a time, each its own fleet):
//!    haptic run, CRASH_AT=<point>  ── feed the shortest corpus stream reaching it ──► SIGABRT
//!    the journal at the moment of death (a copy, the original untouched) ─► the point's position
//!    haptic run (same journal, unarmed) ─► quiescence ─► checks 1-7 ─► SIGTERM ─► journal
//!    +churn: a pod killed and one added before the last render (or while dead: +churn(down))
//!    +leader change: a successor replica (own journal) follows, takes over at the death and
//!      converges; the crashed one restarts, the successor stops, the first leads again
//!  for each seed: the stream with a churn, SIGKILL while a deployment / publication / status
//!    round runs, restart, the same checks
//!  matrix: row x result x time to converge; last line
//!    `crash matrix: P/T failpoints passed, K/R random kills passed`
//! ```
//!
//! Checks after the restart (the issue's numbering): (1) the last render fed before the crash
//! (every earlier one is superseded by it) is deployed to every live pod and published; (2) one
//! `ConfigPublished` per checksum per HAProxyCfg (per journal), and no pod receives a
//! configuration or a file it already runs: per pod, successful raw pushes and storage writes
//! (sandbox request logs, every process) never exceed what an uninterrupted run of the renders
//! it could receive makes; (3) the status has exactly one entry per live pod, naming the render
//! with a non-zero `deployedAt`, and none for a pod that is gone; (4) every live pod answers the
//! render's HTTP checks; (5) quiescent (nothing queued, every event dispatched: the live journal
//! read-only, the restarted controller runs `--journal-concurrency single-writer` for it), then
//! after a clean stop the journal verifies and nothing is pending (what `haptic-journalctl
//! verify` and `pending` call); (6) the stopped journal's file is within the writer's
//! auto-compaction bound (twice the pages redb holds plus the slack); (7) all of it within
//! [`Intervals::takeover`] + [`Intervals::follow_up`] (+ `--publish-interval` where a row
//! throttles) of the restart. Drift checks are off (`--drift-prevention-interval 10m`), so
//! drift repairs nothing.
//!
//! `HAPTIC_SOAK=1` runs more random seeds. Needs the `failpoints` feature (`--all-features`).

#![cfg(feature = "failpoints")]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haptic_journal::{Checksum, Event, Journal, JournalOptions, Queue, Seq};
use haptic_testkit::render::{checksum, corpus, feed, rejected};
use haptic_testkit::{
    Controller, ControllerOpts, Fleet, FleetConfig, Intervals, Published, RequestRecord,
};

const BIN: &str = env!("CARGO_BIN_EXE_haptic");
const CONFIG: &str = "crash";
const MAIN: &str = "crash-haproxycfg";
const INVALID: &str = "crash-haproxycfg-invalid";
const PODS: usize = 3;
/// The identity of the armed controller, and of the second replica of the rows that change
/// leaders.
const IDENTITY: &str = "solo";
const SUCCESSOR: &str = "successor";
/// The controller's Lease (its `--lease-name` default).
const LEASE: &str = "haptic-leader";
/// Fleets at a time (2 cores: each fleet runs 3 HAProxy pods, the emulator and a controller).
const PARALLEL: usize = 2;
/// Random-kill seeds of the normal run; `HAPTIC_SOAK=1` runs [`SOAK_SEEDS`].
const SEEDS: &[u64] = &[7, 19, 42];
const SOAK_SEEDS: &[u64] = &[7, 19, 42, 101, 202, 303, 404, 505, 606, 707, 808, 909];
/// Points no stream of the binary reaches; their own crate tests them.
const ELSEWHERE: &[(&str, &str)] = &[(
    "migrations::after_test_v2_half_rewritten",
    "haptic-migrations' test-only v1->v2 step (migrations/tests)",
)];

/// The intervals of every controller here (the real flags); every bound derives from them.
fn intervals() -> Intervals {
    Intervals {
        deployment_timeout: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(5),
        ..Intervals::default()
    }
}

/// The point of a `CRASH_AT` spec (`<name>[:<nth>]`).
fn point_of(spec: &str) -> &str {
    match spec.rsplit_once(':') {
        Some((p, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => spec,
    }
}

/// How a case drives the controller to its point.
#[derive(Clone, Copy, Debug)]
enum Drive {
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
enum AtDeath {
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
struct Case {
    /// `CRASH_AT` (a point, `:<nth>` optional).
    spec: String,
    renders: Vec<&'static str>,
    drive: Drive,
    at_death: AtDeath,
    /// Extra environment (test hooks of the `failpoints` build).
    env: Vec<(&'static str, &'static str)>,
    /// `--publish-interval` (None: the default, no throttle); bounds add it.
    publish_interval: Option<Duration>,
    /// A pod killed and a pod added, and when.
    churn: Option<Churn>,
    /// A second replica (its own identity and journal) follows the armed leader and takes
    /// over when it dies (DESIGN.md J9 b).
    successor: bool,
}

/// When a case kills a pod (processes gone, Pod object deleted) and adds one (a fourth
/// sandbox pod whose Pod object is registered only then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Churn {
    /// In the armed run, once the previous render is reached, right before the last render
    /// of the stream is fed: the point fires on work that follows the churn.
    BeforeLast,
    /// While the controller is dead: after the crash, before the restart (the restarted
    /// controller finds a pod gone and one new).
    WhileDown,
}

fn case(spec: &str, renders: &[&'static str], drive: Drive, at_death: AtDeath) -> Case {
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
    fn name(&self) -> String {
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

fn churned(mut c: Case, when: Churn) -> Case {
    c.churn = Some(when);
    c
}

fn succeeded(mut c: Case) -> Case {
    c.successor = true;
    c
}

/// A publication throttle long enough for a deployment (the minimum interval, then a few
/// hundred milliseconds of sandbox pushes) to finish inside it: the pods' statuses then arrive
/// while the spec still holds the previous render (they park), and deploy-driven publications
/// wait in the queue for a drain.
const THROTTLE: Duration = Duration::from_secs(5);

fn throttled(mut c: Case) -> Case {
    c.publish_interval = Some(THROTTLE);
    c
}

/// Every point, the shortest stream that reaches it and what its position implies.
fn cases() -> Vec<Case> {
    use AtDeath as A;
    use Drive::{Drain, Overlap, PreKill, Sequential as Seq_};
    let basic: &[&'static str] = &["01-basic"];
    let maps: &[&'static str] = &["01-basic", "02-maps"];
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
        churned(
            case(
                "deployer::after_endpoint_applied",
                basic,
                Seq_,
                A::SomeApplied,
            ),
            Churn::WhileDown,
        ),
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
        succeeded(churned(
            case(
                "deployer::after_endpoint_applied",
                basic,
                Seq_,
                A::SomeApplied,
            ),
            Churn::WhileDown,
        )),
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

/// One row of the matrix.
#[derive(Debug, Clone)]
struct Row {
    name: String,
    /// The failpoint the row arms (rows of random kills: their name).
    point: String,
    result: Result<(), String>,
    converge: Option<Duration>,
}

/// A fleet and the controller's options for one run.
struct World {
    fleet: Fleet,
    opts: ControllerOpts,
    render_dir: PathBuf,
    /// Every render fed, in order.
    fed: Vec<&'static str>,
    /// Added to every bound: `--publish-interval`.
    throttle: Duration,
    /// The pods registered and alive (what discovery lists), in fleet order.
    live: Vec<String>,
    /// The pod not registered yet, which a churn adds.
    spare: Option<String>,
    /// Pods a churn added, with the index in `fed` of the first render they may receive (the
    /// last one reached before they appeared).
    added: Vec<(String, usize)>,
    /// Pods a churn killed, with their request log just before the kill and how many renders
    /// were fed by then.
    killed: Vec<(String, Vec<RequestRecord>, usize)>,
    /// The index in `fed` of the last render reached (deployed, published, answering).
    reached: usize,
}

impl World {
    async fn start(
        env: &[(&str, &str)],
        publish_interval: Option<Duration>,
        crash_at: Option<&str>,
        spare: bool,
    ) -> World {
        let fleet = Fleet::start(FleetConfig::pods(PODS + usize::from(spare))).await;
        let mut live: Vec<String> = fleet.pods().iter().map(|p| p.name.clone()).collect();
        let spare = if spare { live.pop() } else { None };
        if let Some(s) = &spare {
            fleet
                .unregister_pod(s)
                .await
                .unwrap_or_else(|e| panic!("unregister the spare pod {s}: {e}"));
        }
        let render_dir = fleet.dir().join("render");
        let mut opts = ControllerOpts::dir(&fleet, Path::new(BIN), IDENTITY, CONFIG, &render_dir);
        opts.intervals = intervals();
        // Drift checks must not be what repairs the fleet after a restart.
        opts.extra
            .extend(["--drift-prevention-interval".into(), "10m".into()]);
        opts.env
            .extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        // Auto-compaction's slack at the scale of a row (a test hook), unless the case sets
        // its own.
        let slack = "HAPTIC_TEST_JOURNAL_COMPACT_SLACK_BYTES";
        if !env.iter().any(|(e, _)| *e == slack) {
            opts.env
                .push((slack.into(), COMPACT_SLACK_BYTES.to_string()));
        }
        if let Some(c) = crash_at {
            opts.env.push(("CRASH_AT".into(), c.to_owned()));
        }
        if let Some(p) = publish_interval {
            opts.extra
                .extend(["--publish-interval".into(), format!("{}ms", p.as_millis())]);
        }
        World {
            fleet,
            opts,
            render_dir,
            fed: Vec::new(),
            throttle: publish_interval.unwrap_or_default(),
            live,
            spare,
            added: Vec::new(),
            killed: Vec::new(),
            reached: 0,
        }
    }

    /// The pod churn: the first live pod killed (its request log kept first: its endpoint
    /// goes with it), the spare pod registered.
    async fn churn(&mut self) -> Result<(), String> {
        let Some(spare) = self.spare.take() else {
            return Err("no spare pod to add".to_owned());
        };
        let victim = self.live.remove(0);
        let Some(faults) = self
            .fleet
            .pods()
            .into_iter()
            .find(|p| p.name == victim)
            .map(|p| p.faults())
        else {
            return Err(format!("no pod {victim}"));
        };
        let reqs = match faults.requests().await {
            Ok(r) => r,
            Err(e) => return Err(e.to_string()),
        };
        if let Err(e) = self.fleet.kill_pod(victim.as_str()).await {
            return Err(format!("kill {victim}: {e}"));
        }
        self.killed.push((victim, reqs, self.fed.len()));
        if let Err(e) = self.fleet.register_pod(spare.as_str()).await {
            return Err(format!("register {spare}: {e}"));
        }
        self.added.push((spare.clone(), self.reached));
        self.live.push(spare);
        Ok(())
    }

    /// Marks the last render fed as reached: the fleet runs the last passed one.
    fn mark_reached(&mut self) {
        self.reached = self.fed.iter().rposition(|r| !rejected(r)).unwrap_or(0);
    }

    /// The live pods (owned: a future that holds it holds nothing of the world).
    fn live(&self) -> Vec<String> {
        self.live.clone()
    }

    fn feed(&mut self, render: &'static str) {
        feed(&self.render_dir, render);
        self.fed.push(render);
    }

    fn unarmed(&self) -> ControllerOpts {
        let mut o = self.opts.clone();
        o.env.retain(|(k, _)| k != "CRASH_AT");
        // Lets the test read the live journal (read-only, as `haptic-journalctl` does) to see
        // when the restarted controller is quiescent: nothing queued, everything dispatched.
        o.extra
            .extend(["--journal-concurrency".into(), "single-writer".into()]);
        o
    }

    /// The second replica of a case with a successor: its own identity and journal, unarmed.
    fn successor(&self) -> ControllerOpts {
        let mut o = self.unarmed();
        o.identity = SUCCESSOR.to_owned();
        o.journal = self.fleet.dir().join(SUCCESSOR).join("journal.redb");
        o
    }

    /// The last passed render fed (what the fleet must end on).
    fn last_passed(&self) -> &'static str {
        self.fed
            .iter()
            .rev()
            .find(|r| !rejected(r))
            .copied()
            .unwrap_or("01-basic")
    }
}

/// How waiting for a render ended.
enum Waited {
    Reached,
    Exited(std::process::ExitStatus),
}

fn deployments_started(ctl: &Controller) -> usize {
    ctl.log_text().matches("deployment started").count()
}

/// Whether `render` is where the stream needs it: published on every live pod (the status
/// lists exactly those) and answering, or, rejected, its `-invalid` object there.
async fn reached(fleet: &Fleet, live: &[String], render: &str) -> Result<(), String> {
    let want = checksum(render);
    if rejected(render) {
        let c = fleet.hpcfg(INVALID).await.ok_or("no -invalid yet")?;
        return (c.spec.checksum == want)
            .then_some(())
            .ok_or(format!("-invalid on {}", c.spec.checksum));
    }
    let cfg = fleet.hpcfg(MAIN).await.ok_or(format!("no {MAIN}"))?;
    on_live(&Published::of(&cfg), &want, live)?;
    fleet.pods_answer_of(render, live).await
}

/// Check (3)'s listing: `spec` is `want` and the status has one entry per live pod, each on
/// `want`, and none for a pod that is gone.
fn on_live(p: &Published, want: &Checksum, live: &[String]) -> Result<(), String> {
    let mut names: Vec<&str> = p.pods.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let mut expect: Vec<&str> = live.iter().map(String::as_str).collect();
    expect.sort_unstable();
    let want_s = want.to_string();
    if p.spec != *want || names != expect || p.pods.iter().any(|(_, c)| *c != want_s) {
        return Err(format!("want {want} on exactly {expect:?}; {p:?}"));
    }
    Ok(())
}

/// Polls `probe` until it is Ok or the controller exits, within `bound`.
async fn until_or_exit<F, Fut>(
    ctl: &mut Controller,
    bound: Duration,
    what: &str,
    mut probe: F,
) -> Result<Waited, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(Some(s)) = ctl.child.try_wait() {
            return Ok(Waited::Exited(s));
        }
        let last = match probe().await {
            Ok(()) => return Ok(Waited::Reached),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{what}: not within {bound:?}; last: {last}\n{}",
                ctl.log_tail(30)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `identity` holds the Lease.
async fn lease_held_by(fleet: &Fleet, identity: &str) -> bool {
    fleet.lease_holder(LEASE).await.as_deref() == Some(identity)
}

/// The armed controller's exit: by SIGABRT with the point's marker, or a failure.
fn died_at(
    marker: &str,
    ctl: Controller,
    s: std::process::ExitStatus,
    standby: Option<Controller>,
) -> Result<(Controller, Option<Controller>), String> {
    if s.signal() == Some(6) && ctl.log_text().contains(marker) {
        Ok((ctl, standby))
    } else {
        Err(format!(
            "exited {s:?} without `{marker}`\n{}",
            ctl.log_tail(30)
        ))
    }
}

/// Drives `case` until its point fires; returns the dead controller and, for a case with a
/// successor, the second replica (following since the first render was reached).
async fn drive(w: &mut World, case: &Case) -> Result<(Controller, Option<Controller>), String> {
    let i = intervals();
    let t = w.throttle;
    let point = point_of(&case.spec);
    let marker = format!("crash_point fired: {point}");
    let mut standby: Option<Controller> = None;
    // By index: an iterator adapter held across the awaits below (`Peekable<Copied<..>>`)
    // makes the future's `Send` depend on a higher-ranked `&str: Copy` (a rustc limitation).
    let first = case.renders.first().copied().unwrap_or("01-basic");
    w.feed(first);
    let pre_kill = matches!(case.drive, Drive::PreKill);
    let mut ctl = w.fleet.controller(if pre_kill {
        w.unarmed()
    } else {
        w.opts.clone()
    });
    let owned = w.live();
    let (fleet, live) = (&w.fleet, owned.as_slice());
    if case.successor {
        // The armed replica leads; then the other one starts, and follows.
        let deadline = Instant::now() + i.takeover();
        loop {
            if let Ok(Some(s)) = ctl.child.try_wait() {
                return died_at(&marker, ctl, s, standby);
            }
            if lease_held_by(fleet, IDENTITY).await {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!("{IDENTITY} did not lead within {:?}", i.takeover()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        standby = Some(w.fleet.controller(w.successor()));
    }
    match until_or_exit(&mut ctl, i.takeover() + i.converge() + t, first, || {
        reached(fleet, live, first)
    })
    .await?
    {
        Waited::Exited(s) => return died_at(&marker, ctl, s, standby),
        Waited::Reached => {}
    }
    w.mark_reached();
    for n in 1..case.renders.len() {
        let render = case.renders[n];
        let before = deployments_started(&ctl);
        if matches!(case.drive, Drive::Overlap) {
            // Keep the next deployment in flight past the source's poll + debounce and the
            // validation of the render after it (a fine-grained sync is otherwise done first):
            // its one reload takes 3 s on every pod.
            for pod in w.fleet.pods() {
                pod.faults()
                    .arm(serde_json::json!({"reload": "slow", "times": 1, "delay_ms": 3000}))
                    .await
                    .map_err(|e| format!("arming a slow reload: {e}"))?;
            }
        }
        if n + 1 == case.renders.len() && case.churn == Some(Churn::BeforeLast) {
            w.churn().await?;
        }
        w.feed(render);
        let owned = w.live();
        let (fleet, live) = (&w.fleet, owned.as_slice());
        match case.drive {
            Drive::Sequential => {
                if let Waited::Exited(s) = until_or_exit(&mut ctl, i.converge() + t, render, || {
                    reached(fleet, live, render)
                })
                .await?
                {
                    return died_at(&marker, ctl, s, standby);
                }
            }
            Drive::Overlap => {
                let deadline = Instant::now() + i.follow_up();
                while deployments_started(&ctl) <= before {
                    if let Ok(Some(s)) = ctl.child.try_wait() {
                        return died_at(&marker, ctl, s, standby);
                    }
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "the deployment of {render} did not start within {:?}",
                            i.follow_up()
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Drive::PreKill => {
                let finished =
                    |ctl: &Controller| ctl.log_text().matches("executor finished").count();
                let done_before = finished(&ctl);
                let deadline = Instant::now() + i.follow_up();
                while finished(&ctl) <= done_before {
                    if Instant::now() >= deadline {
                        return Err(format!("the deployment of {render} did not finish"));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // Only while the spec still holds the previous render (its publication
                // throttled); otherwise the next render of the stream tries again.
                let spec = w.fleet.hpcfg(MAIN).await.map(|c| c.spec.checksum);
                if spec != Some(checksum(render)) {
                    ctl.kill();
                    ctl = w.fleet.controller(w.opts.clone());
                }
                if let Waited::Exited(s) =
                    until_or_exit(&mut ctl, i.takeover() + i.converge() + t, render, || {
                        reached(fleet, live, render)
                    })
                    .await?
                {
                    return died_at(&marker, ctl, s, standby);
                }
            }
            Drive::Drain => {
                let deadline = Instant::now() + i.follow_up();
                while deployments_started(&ctl) <= before {
                    if let Ok(Some(s)) = ctl.child.try_wait() {
                        return died_at(&marker, ctl, s, standby);
                    }
                    if Instant::now() >= deadline {
                        return Err(format!("the deployment of {render} did not start"));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let Some(s) = ctl.stop(i.stop()) else {
                    return Err(format!("no exit within {:?} of SIGTERM", i.stop()));
                };
                if s.signal() == Some(6) {
                    return died_at(&marker, ctl, s, standby);
                }
                // The drain published without reaching the point: the next render, armed again.
                ctl = w.fleet.controller(w.opts.clone());
                if let Waited::Exited(s) =
                    until_or_exit(&mut ctl, i.takeover() + i.converge() + t, render, || {
                        reached(fleet, live, render)
                    })
                    .await?
                {
                    return died_at(&marker, ctl, s, standby);
                }
            }
        }
        if !matches!(case.drive, Drive::Overlap) {
            w.mark_reached();
        }
    }
    // Overlap: the last render still runs; the point may fire on its way.
    let last = *w.fed.last().unwrap_or(&"01-basic");
    let owned = w.live();
    let (fleet, live) = (&w.fleet, owned.as_slice());
    if let Waited::Exited(s) = until_or_exit(&mut ctl, i.converge() + t, last, || {
        reached(fleet, live, last)
    })
    .await?
    {
        return died_at(&marker, ctl, s, standby);
    }
    Err(format!(
        "never hit: the stream {:?} ran to the end without `{marker}`",
        case.renders
    ))
}

/// The journal at the moment of death: a copy opened (redb repairs the copy; the original
/// stays as the crash left it for the restart).
fn at_death(w: &World, expect: AtDeath) -> Result<(), String> {
    let copy = w.fleet.dir().join("at-death.redb");
    std::fs::copy(&w.opts.journal, &copy).map_err(|e| format!("copy the journal: {e}"))?;
    let j = Journal::open(&JournalOptions::new(&copy))
        .map_err(|e| format!("the journal at death does not open: {e}"))?;
    let problems = j.verify().map_err(|e| e.to_string())?.problems;
    if !problems.is_empty() {
        return Err(format!("the journal at death: {problems:?}"));
    }
    let pending = j.pending().map_err(|e| e.to_string())?;
    let count = |q: Queue| {
        pending
            .queues
            .iter()
            .find(|s| s.queue == q)
            .map_or(0, |s| s.count)
    };
    let events: Vec<Event> = j
        .events(Seq(1), usize::MAX)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(_, _, e)| e)
        .collect();
    let current = checksum(w.fed.last().copied().unwrap_or("01-basic"));
    let last_scheduled = events.iter().rev().find_map(|e| match e {
        Event::DeploymentScheduled { deployment, .. } => Some(deployment.clone()),
        _ => None,
    });
    let deployed_in = |d: &haptic_journal::DeploymentId| {
        events
            .iter()
            .filter(|e| matches!(e, Event::InstanceDeployed { deployment, .. } if deployment == d))
            .count()
    };
    let completed = |d: &haptic_journal::DeploymentId| {
        events
            .iter()
            .any(|e| matches!(e, Event::DeploymentCompleted { deployment, .. } if deployment == d))
    };
    let published_current = events
        .iter()
        .any(|e| matches!(e, Event::ConfigPublished { render, .. } if *render == current));
    let queues = format!(
        "queues {:?}",
        pending
            .queues
            .iter()
            .filter(|q| q.count > 0)
            .map(|q| (q.queue.as_str(), q.count))
            .collect::<Vec<_>>()
    );
    let ok = |c: bool, what: &str| {
        if c {
            Ok(())
        } else {
            Err(format!("at death: {what}; {queues}"))
        }
    };
    match expect {
        AtDeath::Consistent => Ok(()),
        AtDeath::RenderAccepted => {
            let rendered = events
                .iter()
                .any(|e| matches!(e, Event::TemplateRendered { render, .. } if *render == current));
            let scheduled = events.iter().any(
                |e| matches!(e, Event::DeploymentScheduled { render, .. } if *render == current),
            );
            ok(
                rendered && !scheduled,
                "the render journaled, nothing scheduled for it",
            )
        }
        AtDeath::LeaderJournaled => {
            let last = events.last();
            let term_ok =
                matches!(last, Some(Event::BecameLeader { term, .. }) if *term == pending.term);
            ok(
                term_ok,
                "the last event is BecameLeader with the meta's term",
            )
        }
        AtDeath::BeforeReplay => {
            let since = events
                .iter()
                .rposition(|e| matches!(e, Event::BecameLeader { .. }));
            let scheduled_after = since.is_some_and(|i| {
                events[i..]
                    .iter()
                    .any(|e| matches!(e, Event::DeploymentScheduled { .. }))
            });
            ok(
                since.is_some() && !scheduled_after,
                "BecameLeader journaled, nothing scheduled in its term",
            )
        }
        AtDeath::PendingSlot => ok(count(Queue::DeployPending) == 1, "the pending slot taken"),
        AtDeath::InFlight(n) => {
            let d = last_scheduled.ok_or("no DeploymentScheduled")?;
            let applied = deployed_in(&d);
            let n_ok = match n {
                Some(n) => applied == n,
                None => applied < PODS,
            };
            ok(
                count(Queue::DeployInflight) == 1 && !completed(&d) && n_ok,
                &format!("in flight, {applied} pods journaled (want {n:?}), not completed"),
            )
        }
        AtDeath::SomeApplied => {
            let d = last_scheduled.ok_or("no DeploymentScheduled")?;
            let applied = deployed_in(&d);
            ok(
                count(Queue::DeployInflight) == 1 && !completed(&d) && applied >= 1,
                &format!("in flight, {applied} pods journaled, not completed"),
            )
        }
        // The publication the point stopped is still queued. A validation-driven one for the
        // current render has no ConfigPublished yet; a deploy-driven one may repeat a render
        // already published (its ack moves no checkpoint and emits nothing), which is what a
        // later hit (`:2`) stops when the deployment finishes before the next render.
        AtDeath::PublishQueued => ok(
            (count(Queue::Publish) >= 1 && !published_current)
                || count(Queue::PublishDeployed) >= 1,
            "a publication queued (validation-driven: no ConfigPublished for the render yet)",
        ),
        AtDeath::Published => ok(published_current, "ConfigPublished for the render"),
        AtDeath::StatusPending => ok(count(Queue::StatusPending) >= 1, "status items pending"),
        AtDeath::StatusParked => ok(count(Queue::StatusParked) >= 1, "status items parked"),
        AtDeath::DrainQueued => ok(
            count(Queue::PublishDeployed) >= 1,
            "the drain's publication queued",
        ),
    }
}

/// Upper bounds of successful writes per pod an uninterrupted run of `fed` makes: raw pushes
/// (one per render change), storage writes (one per file that is new or differs from the
/// previous passed render's).
pub(crate) fn write_bounds(fed: &[&str]) -> (usize, usize) {
    let mut pushes = 0;
    let mut files = 0;
    let mut prev: Option<haptic::core::render::RenderContent> = None;
    for r in fed.iter().filter(|r| !rejected(r)) {
        let c = corpus(r);
        if prev.as_ref().is_some_and(|p| p.checksum() == c.checksum()) {
            continue;
        }
        pushes += 1;
        for f in &c.files {
            let same = prev.as_ref().is_some_and(|p| {
                p.files
                    .iter()
                    .any(|g| g.path == f.path && g.content == f.content)
            });
            if !same {
                files += 1;
            }
        }
        prev = Some(c);
    }
    (pushes, files)
}

/// Checks 1-7 after the restart; returns the time to converge.
async fn quiesce(w: &World, restarted: Instant, ctl: &mut Controller) -> Result<Duration, String> {
    let i = intervals();
    let bound = i.takeover() + i.follow_up() + w.throttle;
    let took = converged(w, ctl, &w.opts.journal, restarted, bound).await?;
    stopped_clean(ctl, &w.opts.journal)?;
    // (2): no pod receives what it already runs.
    pod_writes(w).await?;
    Ok(took)
}

/// Checks (1), (3), (4) on the cluster and the pods, then quiescence of `ctl` on `journal`
/// (nothing queued, every event dispatched: the live journal, read-only), within `bound` of
/// `since`; returns the time it took.
async fn converged(
    w: &World,
    ctl: &mut Controller,
    journal: &Path,
    since: Instant,
    bound: Duration,
) -> Result<Duration, String> {
    let last = w.last_passed();
    let want = checksum(last);
    let (fleet, live) = (&w.fleet, w.live());
    // (1), (3), (4): deployed, published, one status entry per live pod on it and none for a
    // pod that is gone, no zero timestamps, HTTP answers.
    let probe = || async {
        let cfg = fleet.hpcfg(MAIN).await.ok_or(format!("no {MAIN}"))?;
        let p = Published::of(&cfg);
        on_live(&p, &want, &live)?;
        if !p.has("Published", "True") {
            return Err(format!("not Published=True: {p:?}"));
        }
        let st = cfg.status.clone().unwrap_or_default();
        for e in &st.deployed_to_pods {
            let zero = e.deployed_at.as_ref().is_none_or(|t| t.0.as_second() <= 0);
            if zero {
                return Err(format!("{}: zero deployedAt", e.pod_name));
            }
        }
        fleet.pods_answer_of(last, &live).await
    };
    match until_or_exit(ctl, bound, &format!("converge on {last}"), probe).await? {
        Waited::Reached => {}
        Waited::Exited(s) => {
            return Err(format!("the controller exited {s:?}\n{}", ctl.log_tail(30)));
        }
    }
    let journal = journal.to_path_buf();
    let quiet = || {
        let journal = journal.clone();
        async move {
            let p = tokio::task::spawn_blocking(move || {
                let j = Journal::open(
                    &JournalOptions::new(&journal)
                        .read_only(true)
                        .verify_on_open(false)
                        .concurrency(haptic_journal::Concurrency::SingleWriter),
                )
                .map_err(|e| e.to_string())?;
                j.pending().map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())??;
            let left: Vec<_> = p
                .queues
                .iter()
                .filter(|q| q.count > 0 && q.queue != Queue::DrainCheckpoint)
                .map(|q| (q.queue.as_str(), q.count))
                .collect();
            if left.is_empty() && p.undispatched_events == 0 {
                Ok(())
            } else {
                Err(format!(
                    "queued {left:?}, {} events undispatched",
                    p.undispatched_events
                ))
            }
        }
    };
    let rest = bound.saturating_sub(since.elapsed());
    if let Waited::Exited(s) = until_or_exit(ctl, rest, "quiescence", quiet).await? {
        return Err(format!("the controller exited {s:?}"));
    }
    Ok(since.elapsed())
}

/// Check (5) after a clean SIGTERM stop of `ctl` within [`Intervals::stop`], and (6) on its
/// journal.
fn stopped_clean(ctl: &mut Controller, journal: &Path) -> Result<(), String> {
    let i = intervals();
    let status = ctl.stop(i.stop()).ok_or_else(|| {
        format!(
            "no exit within {:?} of SIGTERM\n{}",
            i.stop(),
            ctl.log_tail(40)
        )
    })?;
    if !status.success() {
        return Err(format!(
            "clean stop exited {status:?}\n{}",
            ctl.log_tail(30)
        ));
    }
    journal_after_stop(journal)?;
    journal_size_within(journal, &ctl.opts.env)
}

/// A pod, its request log when kept at its kill, and the renders it may receive.
type WritePlan = (
    haptic_testkit::Pod,
    Option<Vec<RequestRecord>>,
    Vec<&'static str>,
);

/// Check (2) on every pod of the fleet: no more successful raw pushes and file writes than an
/// uninterrupted run of the renders it could receive makes. A pod there from the start: the
/// whole stream; a pod a churn added: from the last render reached when it appeared; a pod a
/// churn killed: its log at the kill, the renders fed by then; the spare pod never added:
/// nothing.
async fn pod_writes(w: &World) -> Result<(), String> {
    // What each pod may receive, decided before any request (nothing of `w` held across them).
    let mut plans: Vec<WritePlan> = Vec::new();
    for pod in w.fleet.pods() {
        let killed = w.killed.iter().position(|k| k.0 == pod.name);
        let added = w.added.iter().position(|a| a.0 == pod.name);
        let (snapshot, fed) = match (killed, added) {
            (Some(k), _) => (Some(w.killed[k].1.clone()), w.fed[..w.killed[k].2].to_vec()),
            (None, Some(a)) => (None, w.fed[w.added[a].1..].to_vec()),
            (None, None) if w.spare.as_deref() == Some(pod.name.as_str()) => (None, Vec::new()),
            (None, None) => (None, w.fed.clone()),
        };
        plans.push((pod, snapshot, fed));
    }
    for (pod, snapshot, fed) in plans {
        let reqs = match snapshot {
            Some(r) => r,
            None => pod.faults().requests().await.map_err(|e| e.to_string())?,
        };
        let (max_pushes, max_files) = write_bounds(&fed);
        writes_within(&pod.name, &reqs, max_pushes, max_files)?;
    }
    Ok(())
}

/// Checks (5) and (2) on a stopped controller's journal: `verify` finds nothing, nothing is
/// pending (the drain checkpoint aside), and no HAProxyCfg has two ConfigPublished of one
/// checksum.
pub(crate) fn journal_after_stop(journal: &std::path::Path) -> Result<(), String> {
    let j = Journal::open(&JournalOptions::new(journal).read_only(true))
        .map_err(|e| format!("the journal after the stop: {e}"))?;
    let problems = j.verify().map_err(|e| e.to_string())?.problems;
    if !problems.is_empty() {
        return Err(format!("verify: {problems:?}"));
    }
    let pending = j.pending().map_err(|e| e.to_string())?;
    let left: Vec<_> = pending
        .queues
        .iter()
        .filter(|q| q.count > 0 && q.queue != Queue::DrainCheckpoint)
        .map(|q| (q.queue.as_str(), q.count))
        .collect();
    if !left.is_empty() {
        return Err(format!("pending after a clean stop: {left:?}"));
    }
    // (2): one ConfigPublished per checksum per HAProxyCfg.
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (_, _, e) in j.events(Seq(1), usize::MAX).map_err(|e| e.to_string())? {
        if let Event::ConfigPublished {
            render,
            runtime_config,
            ..
        } = e
        {
            *per.entry((runtime_config.name.as_str().to_owned(), render.to_string()))
                .or_default() += 1;
        }
    }
    let twice: Vec<_> = per.iter().filter(|(_, n)| **n > 1).collect();
    if !twice.is_empty() {
        return Err(format!("ConfigPublished more than once: {twice:?}"));
    }
    drop(j);
    Ok(())
}

/// Check (2) on the pods: none received more raw pushes than `max_pushes` or more file writes
/// than `max_files` (what the stream fed can need; counted in the sandbox request logs).
pub(crate) async fn pod_writes_within(
    fleet: &Fleet,
    max_pushes: usize,
    max_files: usize,
) -> Result<(), String> {
    for pod in fleet.pods() {
        let reqs = pod.faults().requests().await.map_err(|e| e.to_string())?;
        writes_within(&pod.name, &reqs, max_pushes, max_files)?;
    }
    Ok(())
}

/// Check (2) on one pod's request log.
fn writes_within(
    pod: &str,
    reqs: &[RequestRecord],
    max_pushes: usize,
    max_files: usize,
) -> Result<(), String> {
    let ok = |r: &&RequestRecord| (200..300).contains(&r.status);
    let write = |r: &&RequestRecord| matches!(r.method.as_str(), "POST" | "PUT");
    let pushes = reqs
        .iter()
        .filter(ok)
        .filter(write)
        .filter(|r| r.path.ends_with("/configuration/raw"))
        .count();
    let files: Vec<String> = reqs
        .iter()
        .filter(ok)
        .filter(write)
        .filter(|r| r.path.contains("/storage/") || r.path.contains("/ssl_ca_files"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    if pushes > max_pushes || files.len() > max_files {
        return Err(format!(
            "{pod}: {pushes} raw pushes (at most {max_pushes}), {} file writes (at most \
             {max_files}): {files:?}",
            files.len()
        ));
    }
    Ok(())
}

/// Attempts of a row whose stream ran to the end without reaching its point: whether a point
/// that needs overlapping work (the pending slot, a later hit) is reached depends on the
/// machine's timing, not on the product; a fresh fleet tries again.
const NEVER_HIT_ATTEMPTS: usize = 3;

async fn run_case(case: Case) -> Row {
    let mut row = run_case_once(&case).await;
    for attempt in 2..=NEVER_HIT_ATTEMPTS {
        match &row.result {
            Err(e) if e.starts_with("never hit") => {
                println!(
                    "{}: {e}; attempt {attempt} of {NEVER_HIT_ATTEMPTS}",
                    row.name
                );
                row = run_case_once(&case).await;
            }
            _ => break,
        }
    }
    row
}

async fn run_case_once(case: &Case) -> Row {
    let name = case.name();
    let mut w = World::start(
        &case.env,
        case.publish_interval,
        Some(&case.spec),
        case.churn.is_some(),
    )
    .await;
    let result = async {
        let (dead, successor) = drive(&mut w, case).await?;
        drop(dead);
        at_death(&w, case.at_death)?;
        if case.churn == Some(Churn::WhileDown) {
            w.churn().await?;
        }
        let restarted = Instant::now();
        let Some(mut succ) = successor else {
            let mut ctl = w.fleet.controller(w.unarmed());
            return quiesce(&w, restarted, &mut ctl).await;
        };
        // J9 b: the follower takes over and converges from its own journal and what the pods
        // run (no pod gets what it already runs: check 2 below counts both replicas' writes).
        let i = intervals();
        let bound = i.takeover() + i.follow_up() + w.throttle;
        let succ_journal = succ.opts.journal.clone();
        let took = converged(&w, &mut succ, &succ_journal, restarted, bound).await?;
        // The crashed replica comes back (following), the successor stops cleanly (it
        // releases the Lease; checks 5 and 6 on its journal) and the first leads again,
        // replaying what its own journal left from its crashed term.
        let mut ctl = w.fleet.controller(w.unarmed());
        stopped_clean(&mut succ, &succ_journal)?;
        let handed = Instant::now();
        let again = quiesce(&w, handed, &mut ctl).await?;
        Ok(took.max(again))
    }
    .await;
    if result.is_err() {
        keep_logs(&w, &name);
    }
    w.fleet.shutdown().await;
    row(name, point_of(&case.spec).to_owned(), result)
}

fn row(name: String, point: String, result: Result<Duration, String>) -> Row {
    match result {
        Ok(t) => Row {
            name,
            point,
            result: Ok(()),
            converge: Some(t),
        },
        Err(e) => Row {
            name,
            point,
            result: Err(e),
            converge: None,
        },
    }
}

/// Copies the controllers' logs of a failed row to `target/crash-matrix/<row>/` (the fleet's
/// directory goes away with it).
fn keep_logs(w: &World, row: &str) {
    let safe: String = row
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let to = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("crash-matrix")
        .join(safe);
    let _ = std::fs::create_dir_all(&to);
    // Each replica's journal and logs are in `<fleet dir>/<identity>/`.
    for dir in [w.opts.journal.parent(), w.successor().journal.parent()]
        .into_iter()
        .flatten()
    {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let who = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        for e in rd.flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                let file = format!(
                    "{}-{}",
                    who.as_deref().unwrap_or("controller"),
                    e.file_name().to_string_lossy()
                );
                let _ = std::fs::copy(e.path(), to.join(file));
            }
        }
    }
    println!("logs of {row}: {}", to.display());
}

/// splitmix64: the seeds' choices, reproducible.
fn mix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which work a random kill lands in.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Deployment,
    Publication,
    StatusRound,
}

/// One seeded SIGKILL: the stream up to a chosen render, killed while the chosen work of that
/// render runs (a seeded delay into it), restarted, the same checks.
async fn run_kill(seed: u64) -> Row {
    let stream: [&'static str; 7] = [
        "02-maps",
        "03-maps-changed",
        "04-errors",
        "08-invalid",
        "05-tls",
        "06-crtlist",
        "07-ca",
    ];
    let mut x = seed;
    let upto = 1 + (mix(&mut x) % stream.len() as u64) as usize;
    let mut target = stream[upto - 1];
    if rejected(target) {
        target = stream[upto];
    }
    let phase = match mix(&mut x) % 3 {
        0 => Phase::Deployment,
        1 => Phase::Publication,
        _ => Phase::StatusRound,
    };
    let delay = Duration::from_millis(mix(&mut x) % 200);
    // Every seed churns pods: right before the chosen render is fed, or while the controller
    // is dead.
    let churn = if mix(&mut x).is_multiple_of(2) {
        Churn::BeforeLast
    } else {
        Churn::WhileDown
    };
    let when = match churn {
        Churn::BeforeLast => "before it",
        Churn::WhileDown => "while down",
    };
    let name =
        format!("seed {seed}: SIGKILL in the {phase:?} of {target} (+{delay:?}), churn {when}");
    let i = intervals();
    let mut w = World::start(&[], None, None, true).await;
    let result = async {
        w.feed("01-basic");
        let mut ctl = w.fleet.controller(w.opts.clone());
        let (fleet, live) = (&w.fleet, w.live());
        w.fleet
            .eventually(i.takeover() + i.converge(), "01-basic", || {
                reached(fleet, &live, "01-basic")
            })
            .await;
        w.mark_reached();
        for r in stream {
            let before = deployments_started(&ctl);
            if r == target && churn == Churn::BeforeLast {
                w.churn().await?;
            }
            w.feed(r);
            let fleet = &w.fleet;
            if r != target {
                let live = w.live();
                w.fleet
                    .eventually(i.converge(), r, || reached(fleet, &live, r))
                    .await;
                w.mark_reached();
                continue;
            }
            let want = checksum(r);
            let what = format!("the {phase:?} of {r} to run");
            match phase {
                Phase::Deployment => {
                    ctl.eventually(i.follow_up(), &what, || {
                        std::future::ready(deployments_started(&ctl) > before)
                    })
                    .await;
                }
                Phase::Publication => {
                    w.fleet
                        .eventually(i.converge(), &what, || async {
                            fleet
                                .hpcfg(MAIN)
                                .await
                                .is_some_and(|c| c.spec.checksum == want)
                        })
                        .await;
                }
                Phase::StatusRound => {
                    w.fleet
                        .eventually(i.converge(), &what, || async {
                            fleet.hpcfg(MAIN).await.is_some_and(|c| {
                                Published::of(&c)
                                    .pods
                                    .iter()
                                    .any(|(_, s)| *s == want.to_string())
                            })
                        })
                        .await;
                }
            }
            tokio::time::sleep(delay).await;
            ctl.kill();
            break;
        }
        if churn == Churn::WhileDown {
            w.churn().await?;
        }
        let restarted = Instant::now();
        let mut ctl = w.fleet.controller(w.unarmed());
        quiesce(&w, restarted, &mut ctl).await
    }
    .await;
    if result.is_err() {
        keep_logs(&w, &name);
    }
    w.fleet.shutdown().await;
    row(name, format!("seed {seed}"), result)
}

/// Runs `jobs` at most [`PARALLEL`] at a time; a panicking job is a failed row.
/// Each job is named (row name, point).
async fn run_all<F>(jobs: Vec<((String, String), F)>) -> Vec<Row>
where
    F: std::future::Future<Output = Row> + Send + 'static,
{
    let sem = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
    let mut handles = Vec::new();
    for (name, job) in jobs {
        let sem = Arc::clone(&sem);
        handles.push((
            name,
            tokio::spawn(async move {
                let _permit = sem.acquire_owned().await;
                job.await
            }),
        ));
    }
    let mut rows = Vec::new();
    for ((name, point), h) in handles {
        rows.push(match h.await {
            Ok(r) => r,
            Err(e) => {
                let msg = if e.is_panic() {
                    let p = e.into_panic();
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_else(|| "panic".into())
                } else {
                    e.to_string()
                };
                Row {
                    name,
                    point,
                    result: Err(msg),
                    converge: None,
                }
            }
        });
    }
    rows
}

fn print_rows(title: &str, rows: &[Row]) {
    println!("{title}");
    for r in rows {
        let t = r
            .converge
            .map_or_else(|| "-".to_owned(), |d| format!("{:.1}s", d.as_secs_f64()));
        match &r.result {
            Ok(()) => println!("  {:<60} pass  {t:>7}", r.name),
            Err(e) => println!(
                "  {:<60} FAIL  {t:>7}  {}",
                r.name,
                e.replace('\n', "\n      ")
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_matrix() {
    let cases = cases();
    // Every listed point is driven here or named as tested elsewhere.
    let driven: Vec<String> = cases.iter().map(|c| point_of(&c.spec).to_owned()).collect();
    let missing: Vec<&&str> = haptic_journal::failpoints::ALL
        .iter()
        .filter(|p| !driven.iter().any(|d| d == *p) && !ELSEWHERE.iter().any(|(e, _)| e == *p))
        .collect();
    assert!(missing.is_empty(), "points no case drives: {missing:?}");
    // A debugging aid: `CRASH_MATRIX_ONLY=<substring>` runs the matching rows only (the summary
    // then counts those).
    let only = std::env::var("CRASH_MATRIX_ONLY").ok();
    let keep = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let cases: Vec<Case> = cases.into_iter().filter(|c| keep(&c.name())).collect();
    let started = Instant::now();
    let jobs = cases
        .into_iter()
        .map(|c| ((c.name(), point_of(&c.spec).to_owned()), run_case(c)))
        .collect();
    let rows = run_all(jobs).await;
    let seeds = if std::env::var_os("HAPTIC_SOAK").is_some() {
        SOAK_SEEDS
    } else {
        SEEDS
    };
    let kills = run_all(
        seeds
            .iter()
            .filter(|s| keep(&format!("seed {s}")))
            .map(|s| ((format!("seed {s}"), format!("seed {s}")), run_kill(*s)))
            .collect(),
    )
    .await;
    print_rows("crash matrix: failpoint x result x time to converge", &rows);
    for (p, why) in ELSEWHERE {
        println!("  {p:<60} elsewhere: {why}");
    }
    print_rows("random kills:", &kills);
    // A point passes when every row arming it passes.
    let mut points: BTreeMap<&str, bool> = BTreeMap::new();
    for r in &rows {
        *points.entry(r.point.as_str()).or_insert(true) &= r.result.is_ok();
    }
    let passed = points.values().filter(|ok| **ok).count();
    let total = points.len();
    let rows_passed = rows.iter().filter(|r| r.result.is_ok()).count();
    let k = kills.iter().filter(|r| r.result.is_ok()).count();
    let worst = rows
        .iter()
        .chain(&kills)
        .filter_map(|r| r.converge)
        .max()
        .unwrap_or_default();
    println!(
        "worst convergence {:.1}s (bound {:.1}s), wall {:.0}s",
        worst.as_secs_f64(),
        (intervals().takeover() + intervals().follow_up()).as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!("crash runs: {rows_passed}/{} passed", rows.len());
    println!(
        "crash matrix: {passed}/{total} failpoints passed, {k}/{} random kills passed",
        kills.len()
    );
    assert!(
        rows_passed == rows.len() && k == kills.len(),
        "crash matrix failures (see the matrix above)"
    );
}

/// The suspected flake "journal ... is in use by another process" on a restart right after a
/// SIGKILL (soak only, `HAPTIC_SOAK=1`): 60 kills at seeded moments 0-900 ms into a run (start-up,
/// validation with its `haproxy -c` children, deployment), each followed at once by a restart;
/// every restart must open the journal. Nothing can hold redb's locks (OFD range locks plus the
/// legacy flock, on one open file description whose fds are all `O_CLOEXEC`) once the killed
/// process is reaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_then_restart_at_once_always_opens_the_journal() {
    if std::env::var_os("HAPTIC_SOAK").is_none() {
        eprintln!("skipped: set HAPTIC_SOAK=1");
        return;
    }
    let mut w = World::start(&[], None, None, false).await;
    w.feed("01-basic");
    let mut x = 12345u64;
    let renders = ["02-maps", "03-maps-changed", "04-errors", "05-tls"];
    let mut refused = Vec::new();
    for n in 0..60 {
        w.feed(renders[n % renders.len()]);
        let mut ctl = w.fleet.controller(w.opts.clone());
        let d = Duration::from_millis(mix(&mut x) % 900);
        tokio::time::sleep(d).await;
        ctl.kill();
        if ctl.log_text().contains("in use by another process") {
            refused.push(format!("run {n} (+{d:?}):\n{}", ctl.log_tail(5)));
        }
    }
    w.fleet.shutdown().await;
    assert!(refused.is_empty(), "refused opens: {refused:#?}");
}

/// The auto-compaction slack of every controller here (the test hook
/// `HAPTIC_TEST_JOURNAL_COMPACT_SLACK_BYTES`; the product's default, 8 MiB, is far above what a
/// row's short stream writes). Even so a row's journal (70-140 KB: renders are stored
/// compressed and redb reuses freed pages) stays within check 6's bound with compaction off;
/// the journal crate's `auto_compaction_gives_back_free_space_after_a_backlog_drains` is the
/// test that fails when the threshold is wrong.
const COMPACT_SLACK_BYTES: u64 = 64 * 1024;

/// Check (6), after a clean stop: the journal file is within the writer's auto-compaction
/// bound, twice the pages redb holds for its live data plus the slack
/// (`journal/src/writer/group.rs`: the writer compacts when the file is larger than that, after
/// each periodic trim and when it closes).
fn journal_size_within(journal: &Path, env: &[(String, String)]) -> Result<(), String> {
    let slack = env
        .iter()
        .find(|(k, _)| k == "HAPTIC_TEST_JOURNAL_COMPACT_SLACK_BYTES")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .unwrap_or(JournalOptions::new(journal).auto_compact_slack_bytes);
    // Writable (the stopped controller's file, no other user) for `held_bytes`, which reads
    // redb's page counts from a write transaction it drops; no compaction of its own.
    let j = Journal::open(&JournalOptions::new(journal).auto_compact(false))
        .map_err(|e| format!("the journal after the stop: {e}"))?;
    let held = j.held_bytes().ok_or("no page counts")?;
    let st = j.stats().map_err(|e| e.to_string())?;
    let file = st.file_bytes.ok_or("no file size")?;
    let bound = 2 * held + slack;
    if file > bound {
        return Err(format!(
            "check 6: the journal file is {file} bytes, over 2 x {held} bytes of live pages + \
             {slack} slack = {bound} ({} live key+value bytes)",
            st.live_bytes()
        ));
    }
    Ok(())
}
