//! One run's fleet, controller options and what it fed, killed and added.

use super::*;

/// A fleet and the controller's options for one run.
pub(super) struct World {
    pub(super) fleet: Fleet,
    pub(super) opts: ControllerOpts,
    pub(super) render_dir: PathBuf,
    /// Every render fed, in order.
    pub(super) fed: Vec<&'static str>,
    /// Added to every bound: `--publish-interval`.
    pub(super) throttle: Duration,
    /// The pods registered and alive (what discovery lists), in fleet order.
    pub(super) live: Vec<String>,
    /// The pod not registered yet, which a churn adds.
    pub(super) spare: Option<String>,
    /// Pods a churn added, with the index in `fed` of the first render they may receive (the
    /// last one reached before they appeared).
    pub(super) added: Vec<(String, usize)>,
    /// Pods a churn killed, with their request log just before the kill and how many renders
    /// were fed by then.
    pub(super) killed: Vec<(String, Vec<RequestRecord>, usize)>,
    /// The index in `fed` of the last render reached (deployed, published, answering).
    pub(super) reached: usize,
}

impl World {
    pub(super) async fn start(
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
    pub(super) async fn churn(&mut self) -> Result<(), String> {
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
    pub(super) fn mark_reached(&mut self) {
        self.reached = self.fed.iter().rposition(|r| !rejected(r)).unwrap_or(0);
    }

    /// The live pods (owned: a future that holds it holds nothing of the world).
    pub(super) fn live(&self) -> Vec<String> {
        self.live.clone()
    }

    pub(super) fn feed(&mut self, render: &'static str) {
        feed(&self.render_dir, render);
        self.fed.push(render);
    }

    pub(super) fn unarmed(&self) -> ControllerOpts {
        let mut o = self.opts.clone();
        o.env.retain(|(k, _)| k != "CRASH_AT");
        // Lets the test read the live journal (read-only, as `haptic-journalctl` does) to see
        // when the restarted controller is quiescent: nothing queued, everything dispatched.
        o.extra
            .extend(["--journal-concurrency".into(), "single-writer".into()]);
        o
    }

    /// The second replica of a case with a successor: its own identity and journal, unarmed.
    pub(super) fn successor(&self) -> ControllerOpts {
        let mut o = self.unarmed();
        o.identity = SUCCESSOR.to_owned();
        o.journal = self.fleet.dir().join(SUCCESSOR).join("journal.redb");
        o
    }

    /// The last passed render fed (what the fleet must end on).
    pub(super) fn last_passed(&self) -> &'static str {
        self.fed
            .iter()
            .rev()
            .find(|r| !rejected(r))
            .copied()
            .unwrap_or("01-basic")
    }
}

/// How waiting for a render ended.
pub(super) enum Waited {
    Reached,
    Exited(std::process::ExitStatus),
}

pub(super) fn deployments_started(ctl: &Controller) -> usize {
    ctl.log_text().matches("deployment started").count()
}

/// Whether `render` is where the stream needs it: published on every live pod (the status
/// lists exactly those) and answering, or, rejected, its `-invalid` object there.
pub(super) async fn reached(fleet: &Fleet, live: &[String], render: &str) -> Result<(), String> {
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
pub(super) fn on_live(p: &Published, want: &Checksum, live: &[String]) -> Result<(), String> {
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
pub(super) async fn until_or_exit<F, Fut>(
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
pub(super) async fn lease_held_by(fleet: &Fleet, identity: &str) -> bool {
    fleet.lease_holder(LEASE).await.as_deref() == Some(identity)
}

/// The armed controller's exit: by SIGABRT with the point's marker, or a failure.
pub(super) fn died_at(
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
