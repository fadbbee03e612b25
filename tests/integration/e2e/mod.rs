//! End to end: the real `haptic` binary (`haptic run`, a child process) against a fleet of the
//! test kit (`haptic-testkit`: the sandbox's Kubernetes API emulator and real HAProxy pods behind
//! Dataplane endpoints, or the real peers), fed the render stream of `tests/corpus/renders/`;
//! every pod must answer what `tests/corpus/renders/README.md` lists for each render (issue 6
//! "Tests").
//!
//! Each scenario is one body taking the peer set ([`Peers`]); [`on_peers!`] makes its test entry
//! point: here on the emulator, in `crate::real_peers` on the real kube-apiserver (issue 18).

/// The test entry point `$test` running the scenario body `$body(Peers::$peers)` (multi-thread
/// runtime, 2 workers, as every e2e test): one body, one entry point per peer set.
macro_rules! on_peers {
    ($peers:ident, $($test:ident => $body:path),+ $(,)?) => { $(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            $body(haptic_testkit::Peers::$peers).await
        }
    )+ };
}
pub(crate) use on_peers;

mod bad_input;
mod crds_missing;
pub mod down;
mod faults;
mod idle;
mod install;
mod probes;
pub mod rbac;
pub mod replicas;
pub mod restart;
mod retire;
pub mod rollback;
pub mod sources;
pub mod startup;
pub mod stream;
pub mod synced;
pub mod telemetry;

use std::path::Path;

use haptic::k8s::crd::HAProxyCfg;
pub use haptic_testkit::render::{checksum, feed, rejected, stream};
pub use haptic_testkit::{
    Controller, ControllerOpts, Fleet, FleetConfig, Intervals, Peers, Published,
};

pub const BIN: &str = env!("CARGO_BIN_EXE_haptic");
/// `--config-name` of every e2e controller.
pub const CONFIG: &str = "e2e";
pub const MAIN: &str = "e2e-haproxycfg";
pub const INVALID: &str = "e2e-haproxycfg-invalid";
pub const LEASE: &str = "haptic-leader";

/// The intervals every e2e controller runs with; every bound below derives from them.
pub fn bounds() -> Intervals {
    Intervals::default()
}

/// A fleet of `pods` HAProxy pods on `peers` with the CRDs installed.
pub async fn start(peers: Peers, pods: usize) -> Fleet {
    Fleet::start(FleetConfig {
        peers,
        ..FleetConfig::pods(pods)
    })
    .await
}

/// The `haptic` binary as `identity` on the render directory `render_dir`.
pub fn opts(fleet: &Fleet, identity: &str, render_dir: &Path) -> ControllerOpts {
    ControllerOpts::dir(fleet, Path::new(BIN), identity, CONFIG, render_dir)
}

/// A fleet of `pods` pods on `peers`, the render directory `<fleet dir>/render` fed `render`,
/// and the options of a controller `identity` on it (not started).
pub async fn fed(
    peers: Peers,
    pods: usize,
    render: &str,
    identity: &str,
) -> (Fleet, std::path::PathBuf, ControllerOpts) {
    fed_on(
        FleetConfig {
            peers,
            ..FleetConfig::pods(pods)
        },
        render,
        identity,
    )
    .await
}

/// [`fed`] on a fleet of `config`.
pub async fn fed_on(
    config: FleetConfig,
    render: &str,
    identity: &str,
) -> (Fleet, std::path::PathBuf, ControllerOpts) {
    let world = Fleet::start(config).await;
    let render_dir = world.dir().join("render");
    feed(&render_dir, render);
    let o = opts(&world, identity, &render_dir);
    (world, render_dir, o)
}

/// A fleet of `pods` pods on `peers` and one controller `solo` on `<fleet dir>/render`, fed
/// `01-basic` first; returns the render directory too.
pub async fn solo(peers: Peers, pods: usize) -> (Fleet, std::path::PathBuf, Controller) {
    let (world, render_dir, o) = fed(peers, pods, "01-basic", "solo").await;
    let ctl = world.controller(o);
    (world, render_dir, ctl)
}

/// A fleet of `pods` pods on `peers`, `<fleet dir>/render` fed `01-basic`, and two controllers
/// on it, `alpha` then `beta`; returns the render directory too.
pub async fn alpha_and_beta(
    peers: Peers,
    pods: usize,
) -> (Fleet, std::path::PathBuf, Vec<Controller>) {
    let world = start(peers, pods).await;
    let render_dir = world.dir().join("render");
    feed(&render_dir, "01-basic");
    let ctls = ["alpha", "beta"]
        .into_iter()
        .map(|id| world.controller(opts(&world, id, &render_dir)))
        .collect();
    (world, render_dir, ctls)
}

/// A fleet of `pods` pods on `peers` without the CRDs and one controller `solo` on
/// `<fleet dir>/render`, fed `render` first.
pub async fn solo_without_crds(peers: Peers, pods: usize, render: &str) -> (Fleet, Controller) {
    let config = FleetConfig {
        peers,
        ..FleetConfig::pods(pods).without_crds()
    };
    let (world, _, o) = fed_on(config, render, "solo").await;
    let ctl = world.controller(o);
    (world, ctl)
}

/// Feeds each of `renders` into `render_dir` in turn and checks it ([`check_render`]).
pub async fn feed_and_check<S: AsRef<str>>(
    fleet: &Fleet,
    render_dir: &Path,
    renders: impl IntoIterator<Item = S>,
) {
    let mut last_passed = String::new();
    for render in renders {
        feed(render_dir, render.as_ref());
        last_passed = check_render(fleet, render.as_ref(), &last_passed).await;
    }
}

/// Waits until the main HAProxyCfg holds `render` in its spec with every one of `pods` pods on
/// it.
pub async fn published(fleet: &Fleet, render: &str, pods: usize) -> HAProxyCfg {
    let want = checksum(render);
    let what = format!("{MAIN} on {render} with {pods} pods");
    main_until(fleet, bounds().converge(), &what, |c| {
        let p = Published::of(c);
        p.on(&want, pods).then(|| c.clone()).ok_or(format!("{p:?}"))
    })
    .await
}

/// [`object_until`] on the main HAProxyCfg ([`MAIN`]).
pub async fn main_until<T>(
    fleet: &Fleet,
    bound: std::time::Duration,
    what: &str,
    f: impl Fn(&HAProxyCfg) -> Result<T, String>,
) -> T {
    object_until(fleet, MAIN, bound, what, f).await
}

/// Waits (within `bound`) until the HAProxyCfg `name` exists and `f` accepts it; `f` says what
/// it saw otherwise.
pub async fn object_until<T>(
    fleet: &Fleet,
    name: &str,
    bound: std::time::Duration,
    what: &str,
    f: impl Fn(&HAProxyCfg) -> Result<T, String>,
) -> T {
    fleet
        .eventually(bound, what, || async {
            f(&fleet.hpcfg(name).await.ok_or(format!("no {name}"))?)
        })
        .await
}

/// The Kubernetes Events of the fleet's namespace that `keep` keeps, in list order.
pub async fn events_where(
    fleet: &Fleet,
    keep: impl Fn(&k8s_openapi::api::events::v1::Event) -> bool,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let api: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(fleet.client(), fleet.namespace());
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| keep(e))
        .collect()
}

/// Waits (within `bound`) until an Event of the fleet's namespace satisfies `keep` (a failed
/// list is tried again).
pub async fn event_until(
    fleet: &Fleet,
    bound: std::time::Duration,
    what: &str,
    keep: impl Fn(&k8s_openapi::api::events::v1::Event) -> bool,
) {
    let api: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(fleet.client(), fleet.namespace());
    fleet
        .eventually(bound, what, || async {
            let list = api.list(&Default::default()).await.ok()?;
            list.items.iter().any(&keep).then_some(())
        })
        .await;
}

/// Waits until every pod answers what the README lists for `render`.
pub async fn answers(fleet: &Fleet, render: &str) {
    fleet
        .eventually(
            bounds().converge(),
            &format!("every pod to answer {render}"),
            || fleet.pods_answer(render),
        )
        .await;
}

/// Waits until the `-invalid` HAProxyCfg is gone.
pub async fn invalid_removed(fleet: &Fleet) {
    fleet
        .eventually(bounds().follow_up(), "-invalid removed", || async {
            fleet
                .hpcfg(INVALID)
                .await
                .map_or(Ok(()), |c| Err(format!("{INVALID} on {}", c.spec.checksum)))
        })
        .await;
}

/// Waits until some controller holds the Lease ([`LEASE`]); returns its identity.
pub async fn leader_of(fleet: &Fleet) -> String {
    fleet
        .eventually(bounds().takeover(), "a leader", || {
            fleet.lease_holder(LEASE)
        })
        .await
}

/// Waits until `identity` holds the Lease ([`LEASE`]).
pub async fn leads(fleet: &Fleet, identity: &str) {
    fleet
        .eventually(
            bounds().takeover(),
            &format!("{identity} to lead"),
            || async {
                let holder = fleet.lease_holder(LEASE).await;
                (holder.as_deref() == Some(identity))
                    .then_some(())
                    .ok_or(format!("the Lease is held by {holder:?}"))
            },
        )
        .await;
}

/// Waits (within `bound`) until a line of `ctl`'s log contains `needle`; `what` names the step.
pub async fn logged(ctl: &Controller, bound: std::time::Duration, what: &str, needle: &str) {
    ctl.eventually(bound, what, || async {
        ctl.log_text().lines().any(|l| l.contains(needle))
    })
    .await;
}

/// The requests other than GET in `pod`'s Dataplane request log.
pub async fn pod_writes(pod: &haptic_testkit::Pod) -> Vec<haptic_testkit::RequestRecord> {
    let mut requests = pod.faults().requests().await.unwrap();
    requests.retain(|r| r.method != "GET");
    requests
}

/// `kubectl <args>` against the fleet ([`Fleet::kubectl`], no stdin); it must succeed.
pub fn kubectl_ok(fleet: &Fleet, args: &[&str]) {
    let (ok, out) = fleet.kubectl(args, None);
    assert!(ok, "kubectl {}: {out}", args.join(" "));
}

/// SIGTERM; the controller must exit 0 within [`Intervals::stop`].
pub fn stop_cleanly(ctl: &mut Controller) {
    let status = ctl.stop(bounds().stop()).expect("stops on SIGTERM");
    assert!(status.success(), "exit {status:?}\n{}", ctl.log_tail(40));
}

/// Checks one render of the stream: a passed render is in the HAProxyCfg's spec with every pod
/// on it, `ConfigValidated=True` and `ConfigPinned=False`; a rejected one produces `-invalid`
/// (carrying the error) and pins the fleet on `last_passed` (`ConfigPinned=True`,
/// `ConfigValidated=False`). Then every pod answers what the README lists for the render (for a
/// rejected one: for `last_passed`). Returns the last passed render.
pub async fn check_render(fleet: &Fleet, render: &str, last_passed: &str) -> String {
    if !rejected(render) {
        let want = Published::of(&published(fleet, render, fleet.pods().len()).await).spec;
        // The verdict's conditions are the verdict worker's write, woken by the publication:
        // they follow it, and may land after the pods' status (seen on the real API server,
        // where the deployer's status writes won the race; the emulator answered the verdict
        // first). Still on `render`, with every pod on it, once they are there.
        let what = format!("{render}: ConfigValidated=True, ConfigPinned=False");
        let p = main_until(fleet, bounds().follow_up(), &what, |c| {
            let p = Published::of(c);
            (p.has("ConfigValidated", "True") && p.has("ConfigPinned", "False"))
                .then(|| p.clone())
                .ok_or(format!("{p:?}"))
        })
        .await;
        assert!(p.on(&want, fleet.pods().len()), "{render}: {p:?}");
        answers(fleet, render).await;
        return render.to_owned();
    }
    let want = checksum(render);
    // The object is created first and its status written next: wait for both.
    let what = format!("{INVALID} for {render} carrying the validation error");
    object_until(fleet, INVALID, bounds().converge(), &what, |c| {
        let error = c.status.as_ref().and_then(|s| s.validation_error.clone());
        match error.filter(|e| !e.is_empty()) {
            Some(e) if c.spec.checksum == want => Ok(e),
            _ => Err(format!("{} {:?}", c.spec.checksum, c.status)),
        }
    })
    .await;
    let main = main_until(fleet, bounds().follow_up(), "ConfigPinned=True", |c| {
        let p = Published::of(c);
        p.has("ConfigPinned", "True")
            .then_some(p.clone())
            .ok_or(format!("{p:?}"))
    })
    .await;
    assert_eq!(
        main.spec,
        checksum(last_passed),
        "{render}: the spec keeps the last passed render"
    );
    assert!(main.has("ConfigValidated", "False"), "{main:?}");
    // A rejected render leaves every pod answering the last passed one (the README's
    // "still 07" for the full stream; whatever passed last for a shorter one).
    answers(fleet, last_passed).await;
    last_passed.to_owned()
}
