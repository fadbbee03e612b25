//! Group commit: concurrent producers share commits; every caller gets a durable, unique Seq.

use std::sync::Arc;

use haptic_journal::*;

use crate::fixtures::*;

#[test]
fn sixty_four_producers_share_commits() {
    let (_d, path) = tmp();
    let j = Arc::new(open_journal(&path));
    const PRODUCERS: u64 = 64;
    const PER: u64 = 20;
    let barrier = Arc::new(std::sync::Barrier::new(PRODUCERS as usize));
    let handles: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let j = j.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut seqs = Vec::new();
                for i in 0..PER {
                    seqs.extend(j.accept_events(vec![drift(p * 1000 + i)]).unwrap());
                }
                seqs
            })
        })
        .collect();
    let mut all: Vec<Seq> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort();
    let expected: Vec<Seq> = (1..=PRODUCERS * PER).map(Seq).collect();
    assert_eq!(all, expected, "every Seq handed out exactly once, gap-free");
    let stats = j.commit_stats();
    assert_eq!(stats.events, PRODUCERS * PER);
    assert!(
        stats.commits < stats.events,
        "group commit must batch: {} commits for {} events",
        stats.commits,
        stats.events
    );
    assert_clean(&j);
}
