//! Running rows (failpoints and seeded random kills), in parallel, and printing the matrix.

use super::*;

/// Attempts of a row whose stream ran to the end without reaching its point: whether a point
/// that needs overlapping work (the pending slot, a later hit) is reached depends on the
/// machine's timing, not on the product; a fresh fleet tries again.
pub(super) const NEVER_HIT_ATTEMPTS: usize = 3;

pub(super) async fn run_case(case: Case) -> Row {
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

pub(super) async fn run_case_once(case: &Case) -> Row {
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

pub(super) fn row(name: String, point: String, result: Result<Duration, String>) -> Row {
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
pub(super) fn keep_logs(w: &World, row: &str) {
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
pub(super) fn mix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which work a random kill lands in.
#[derive(Clone, Copy, Debug)]
pub(super) enum Phase {
    Deployment,
    Publication,
    StatusRound,
}

/// One seeded SIGKILL: the stream up to a chosen render, killed while the chosen work of that
/// render runs (a seeded delay into it), restarted, the same checks.
pub(super) async fn run_kill(seed: u64) -> Row {
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
pub(super) async fn run_all<F>(jobs: Vec<((String, String), F)>) -> Vec<Row>
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

pub(super) fn print_rows(title: &str, rows: &[Row]) {
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
