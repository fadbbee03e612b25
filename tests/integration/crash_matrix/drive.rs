//! Driving a row to its death and checking the journal at that moment.

use super::*;

/// Drives `case` until its point fires; returns the dead controller and, for a case with a
/// successor, the second replica (following since the first render was reached).
pub(super) async fn drive(
    w: &mut World,
    case: &Case,
) -> Result<(Controller, Option<Controller>), String> {
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
    if let Some(s) = reach(
        &mut ctl,
        i.takeover() + i.converge() + t,
        fleet,
        live,
        first,
    )
    .await?
    {
        return died_at(&marker, ctl, s, standby);
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
                if let Some(s) = reach(&mut ctl, i.converge() + t, fleet, live, render).await? {
                    return died_at(&marker, ctl, s, standby);
                }
            }
            Drive::Overlap => {
                if let Some(s) = next_deployment(&mut ctl, before, i.follow_up(), render).await? {
                    return died_at(&marker, ctl, s, standby);
                }
            }
            Drive::PreKill => {
                let finished =
                    |ctl: &Controller| ctl.log_text().matches("executor finished").count();
                let done_before = finished(&ctl);
                let deadline = Instant::now() + i.follow_up();
                while finished(&ctl) <= done_before {
                    // The restarted (armed) controller may reach the point before this
                    // deployment ends (a status unparked early on a loaded machine): that is
                    // the death the row drives to, not a deployment that did not finish.
                    if let Ok(Some(s)) = ctl.child.try_wait() {
                        return died_at(&marker, ctl, s, standby);
                    }
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
                let bound = i.takeover() + i.converge() + t;
                if let Some(s) = reach(&mut ctl, bound, fleet, live, render).await? {
                    return died_at(&marker, ctl, s, standby);
                }
            }
            Drive::Drain => {
                if let Some(s) = next_deployment(&mut ctl, before, i.follow_up(), render).await? {
                    return died_at(&marker, ctl, s, standby);
                }
                let Some(s) = ctl.stop(i.stop()) else {
                    return Err(format!("no exit within {:?} of SIGTERM", i.stop()));
                };
                if s.signal() == Some(6) {
                    return died_at(&marker, ctl, s, standby);
                }
                // The drain published without reaching the point: the next render, armed again.
                ctl = w.fleet.controller(w.opts.clone());
                let bound = i.takeover() + i.converge() + t;
                if let Some(s) = reach(&mut ctl, bound, fleet, live, render).await? {
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
    if let Some(s) = reach(&mut ctl, i.converge() + t, fleet, live, last).await? {
        return died_at(&marker, ctl, s, standby);
    }
    Err(format!(
        "never hit: the stream {:?} ran to the end without `{marker}`",
        case.renders
    ))
}

/// Waits until `ctl` logged more deployment starts than `before`, within `bound`; `Some` with
/// its exit status when the controller exited first.
async fn next_deployment(
    ctl: &mut Controller,
    before: usize,
    bound: Duration,
    render: &str,
) -> Result<Option<std::process::ExitStatus>, String> {
    let deadline = Instant::now() + bound;
    while deployments_started(ctl) <= before {
        if let Ok(Some(s)) = ctl.child.try_wait() {
            return Ok(Some(s));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the deployment of {render} did not start within {bound:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(None)
}

/// [`until_or_exit`] on [`reached`]: `render` where the stream needs it on the `live` pods,
/// within `bound`; `Some` with its exit status when the controller exited first.
async fn reach(
    ctl: &mut Controller,
    bound: Duration,
    fleet: &Fleet,
    live: &[String],
    render: &str,
) -> Result<Option<std::process::ExitStatus>, String> {
    match until_or_exit(ctl, bound, render, || reached(fleet, live, render)).await? {
        Waited::Exited(s) => Ok(Some(s)),
        Waited::Reached => Ok(None),
    }
}

/// The journal at the moment of death: a copy opened (redb repairs the copy; the original
/// stays as the crash left it for the restart).
pub(super) fn at_death(w: &World, expect: AtDeath) -> Result<(), String> {
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
