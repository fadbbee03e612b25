//! Profiling driver for the journal's hot path (not a benchmark: it prints nothing but a count).
//!
//! Run one workload under callgrind, twice with different counts, and divide the difference of
//! the instruction totals by the difference of the counts: that is the cost of one unit of work
//! without the set-up (open, table creation):
//!
//! ```text
//! cargo build --release -p haptic-journal --example hot_path
//! valgrind --tool=callgrind --callgrind-out-file=cg.%p target/release/examples/hot_path accept 2000 none
//! ```
//!
//! Workloads (`COUNT` units each; `none` = `Durability::None`, `immediate` = fsync per commit):
//! - `accept COUNT DUR`: single-event `accept` calls from one thread;
//! - `producers P COUNT DUR`: `P` threads, `COUNT` single-event accepts each;
//! - `render COUNT DUR`: re-accepts of an unchanged 500 KB render plus its event;
//! - `raw COUNT DUR`: raw redb commits of one sealed event (the same bytes the journal writes);
//! - `rawbatch K COUNT DUR`: raw redb commits of `K` sealed events each.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;

use haptic_journal::redb;
use haptic_journal::*;

const RAW: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events");

fn small_event(i: u64) -> Event {
    Event::DriftPreventionTriggered {
        correlation: Correlation::new(format!("ev-{i:012}")),
        time_since_last_deployment_ms: i,
    }
}

fn durability(s: &str) -> Durability {
    match s {
        "immediate" => Durability::Immediate,
        _ => Durability::None,
    }
}

fn journal(dir: &std::path::Path, d: Durability) -> Journal {
    Journal::open(
        &JournalOptions::new(dir.join("j.redb"))
            .durability(d)
            .verify_on_open(false),
    )
    .unwrap()
}

fn raw(dir: &std::path::Path) -> redb::Database {
    redb::Database::create(dir.join("raw.redb")).unwrap()
}

fn raw_durability(d: Durability) -> redb::Durability {
    match d {
        Durability::Immediate => redb::Durability::Immediate,
        _ => redb::Durability::None,
    }
}

/// A sealed value the size of a [`small_event`] record (the raw runs skip our encoding).
fn sealed(i: u64) -> Vec<u8> {
    let payload = format!("{i:0>44}").into_bytes();
    codec::seal(
        "drift.prevention.triggered",
        UnixMillis::now(),
        Term(0),
        &payload,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| args[i].parse::<u64>().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut done = 0u64;
    match args[0].as_str() {
        "accept" => {
            let j = journal(dir.path(), durability(&args[2]));
            for i in 0..num(1) {
                j.accept_events(vec![small_event(i)]).unwrap();
                done += 1;
            }
        }
        "producers" => {
            let j = Arc::new(journal(dir.path(), durability(&args[3])));
            let (p, n) = (num(1), num(2));
            let threads: Vec<_> = (0..p)
                .map(|t| {
                    let j = j.clone();
                    std::thread::spawn(move || {
                        for i in 0..n {
                            j.accept_events(vec![small_event(t * 1_000_000 + i)])
                                .unwrap();
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            done = p * n;
            println!("events/commit {:.1}", j.commit_stats().events_per_commit());
        }
        "render" => {
            let j = journal(dir.path(), durability(&args[2]));
            let config: Vec<u8> = (0..500 * 1024u32)
                .map(|i| b"abcdefghijklmnopqrstuvwxyz \n"[(i % 28) as usize])
                .collect();
            for i in 0..num(1) {
                let mut b = Batch::new();
                let r = b.put_render(config.clone(), vec![]);
                b.event(Event::TemplateRendered {
                    correlation: Correlation::new(format!("r-{i}")),
                    render: r.checksum,
                    config_bytes: 500 * 1024,
                    auxiliary_file_count: 0,
                    duration_ms: 1,
                    trigger_reason: "configmap_changed".into(),
                    coalescible: true,
                });
                j.accept(b).unwrap();
                done += 1;
            }
        }
        "raw" => {
            let d = durability(&args[2]);
            let db = raw(dir.path());
            for i in 0..num(1) {
                let v = sealed(i);
                let mut txn = db.begin_write().unwrap();
                txn.set_durability(raw_durability(d)).unwrap();
                txn.open_table(RAW)
                    .unwrap()
                    .insert(i, v.as_slice())
                    .unwrap();
                txn.commit().unwrap();
                done += 1;
            }
        }
        "rawbatch" => {
            let d = durability(&args[3]);
            let db = raw(dir.path());
            let (k, n) = (num(1), num(2));
            for b in 0..n {
                let mut txn = db.begin_write().unwrap();
                txn.set_durability(raw_durability(d)).unwrap();
                {
                    let mut t = txn.open_table(RAW).unwrap();
                    for i in 0..k {
                        let key = b * k + i;
                        t.insert(key, sealed(key).as_slice()).unwrap();
                    }
                }
                txn.commit().unwrap();
                done += k;
            }
        }
        other => panic!("unknown workload {other}"),
    }
    println!("{done}");
}
