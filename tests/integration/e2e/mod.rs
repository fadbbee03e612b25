//! End to end: the real `haptic` binary (`haptic run`, a child process) against a fleet of the
//! test kit (`haptic-testkit`: the sandbox's Kubernetes API emulator and real HAProxy pods behind
//! Dataplane endpoints, or the real peers), fed the render stream of `tests/corpus/renders/`;
//! every pod must answer what `tests/corpus/renders/README.md` lists for each render (issue 6
//! "Tests").

mod rbac;
mod replicas;
mod restart;
mod sources;
mod startup;
mod stream;
mod telemetry;

use std::path::Path;

use haptic::k8s::crd::HAProxyCfg;
pub use haptic_testkit::render::{checksum, feed, rejected, stream};
pub use haptic_testkit::{Controller, ControllerOpts, Fleet, FleetConfig, Intervals, Published};

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

/// A fleet of `pods` HAProxy pods with the CRDs installed.
pub async fn start(pods: usize) -> Fleet {
    Fleet::start(FleetConfig::pods(pods)).await
}

/// The `haptic` binary as `identity` on the render directory `render_dir`.
pub fn opts(fleet: &Fleet, identity: &str, render_dir: &Path) -> ControllerOpts {
    ControllerOpts::dir(fleet, Path::new(BIN), identity, CONFIG, render_dir)
}

/// Waits until the main HAProxyCfg holds `render` in its spec with every one of `pods` pods on
/// it.
pub async fn published(fleet: &Fleet, render: &str, pods: usize) -> HAProxyCfg {
    let want = checksum(render);
    fleet
        .eventually(
            bounds().converge(),
            &format!("{MAIN} on {render} with {pods} pods"),
            || async {
                let cfg = fleet.hpcfg(MAIN).await.ok_or("no HAProxyCfg")?;
                let p = Published::of(&cfg);
                if p.on(&want, pods) {
                    Ok(cfg)
                } else {
                    Err(format!("{p:?}"))
                }
            },
        )
        .await
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
        let p = Published::of(&published(fleet, render, fleet.pods().len()).await);
        assert!(p.has("ConfigValidated", "True"), "{render}: {p:?}");
        assert!(p.has("ConfigPinned", "False"), "{render}: {p:?}");
        answers(fleet, render).await;
        return render.to_owned();
    }
    let want = checksum(render);
    // The object is created first and its status written next: wait for both.
    fleet
        .eventually(
            bounds().converge(),
            &format!("{INVALID} for {render} carrying the validation error"),
            || async {
                let c = fleet.hpcfg(INVALID).await.ok_or("no -invalid object")?;
                let error = c.status.as_ref().and_then(|s| s.validation_error.clone());
                match error.filter(|e| !e.is_empty()) {
                    Some(e) if c.spec.checksum == want => Ok(e),
                    _ => Err(format!("{} {:?}", c.spec.checksum, c.status)),
                }
            },
        )
        .await;
    let main = fleet
        .eventually(bounds().follow_up(), "ConfigPinned=True", || async {
            let p = Published::of(&fleet.hpcfg(MAIN).await.ok_or("no HAProxyCfg")?);
            if p.has("ConfigPinned", "True") {
                Ok(p)
            } else {
                Err(format!("{p:?}"))
            }
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
