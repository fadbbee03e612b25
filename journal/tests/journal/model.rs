//! Property test: random accept/enqueue/ack/park/unpark/blob/trim/history sequences with
//! "reopen" steps (drop every handle, open the file again); the journal equals a simple in-memory
//! model after every step, and `verify()` is clean.

use std::collections::BTreeMap;

use haptic_journal::*;
use proptest::prelude::*;

use crate::fixtures::*;

#[derive(Clone, Debug)]
enum Step {
    Accept {
        events: u8,
        render: Option<u8>,
    },
    Hold(u8),
    Release(u8),
    EnqueuePublish {
        render: u8,
    },
    EnqueueStatus {
        pod: u8,
        render: Option<u8>,
    },
    EnqueueDeploy {
        render: u8,
    },
    AckPublish {
        nth: u8,
    },
    AckStatus {
        pod: u8,
        stale: bool,
    },
    AckDeploy {
        stale: bool,
    },
    Park {
        pod: u8,
        stale: bool,
    },
    Unpark,
    Dispatch {
        back: u8,
    },
    Trim,
    /// Append a sync of `pod` to `render` (stored in the same batch, named by nothing else),
    /// `advance_secs` after the previous one; retention 2 per pod, 10 s.
    AppendHistory {
        pod: u8,
        render: u8,
        advance_secs: u8,
    },
    /// Trim every pod's history, `ahead_secs` after the newest sync's end.
    TrimHistory {
        ahead_secs: u8,
    },
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u8..4, proptest::option::of(0u8..3)).prop_map(|(events, render)| Step::Accept { events, render }),
        1 => (0u8..3).prop_map(Step::Hold),
        1 => (0u8..3).prop_map(Step::Release),
        2 => (0u8..3).prop_map(|render| Step::EnqueuePublish { render }),
        2 => (0u8..3, proptest::option::of(0u8..3)).prop_map(|(pod, render)| Step::EnqueueStatus { pod, render }),
        1 => (0u8..3).prop_map(|render| Step::EnqueueDeploy { render }),
        2 => (0u8..4).prop_map(|nth| Step::AckPublish { nth }),
        2 => (0u8..3, any::<bool>()).prop_map(|(pod, stale)| Step::AckStatus { pod, stale }),
        1 => any::<bool>().prop_map(|stale| Step::AckDeploy { stale }),
        2 => (0u8..3, any::<bool>()).prop_map(|(pod, stale)| Step::Park { pod, stale }),
        1 => Just(Step::Unpark),
        1 => (0u8..4).prop_map(|back| Step::Dispatch { back }),
        1 => Just(Step::Trim),
        3 => (0u8..3, 0u8..4, 0u8..8).prop_map(|(pod, render, advance_secs)| Step::AppendHistory { pod, render, advance_secs }),
        1 => (0u8..12).prop_map(|ahead_secs| Step::TrimHistory { ahead_secs }),
        1 => Just(Step::Reopen),
    ]
}

/// (id, item, origin)
type Item = (u64, WorkItem, Option<u64>);

#[derive(Default, Debug)]
struct Model {
    events: BTreeMap<u64, Event>,
    next_seq: u64,
    next_work: u64,
    dispatched: u64,
    holds: BTreeMap<u8, u64>,
    publish: BTreeMap<u64, Item>,
    pending: BTreeMap<String, Item>,
    parked: BTreeMap<String, Item>,
    deploy: Option<Item>,
    counter: u64,
    /// Per pod key, (sequence, record) in append order.
    history: BTreeMap<String, Vec<(u64, SyncRecord)>>,
    /// The end time of the newest sync, unix ms.
    clock: u64,
}

/// The retention the model's appends use.
fn retention() -> HistoryRetention {
    HistoryRetention {
        max_entries_per_pod: 2,
        max_age: std::time::Duration::from_secs(10),
    }
}

impl Model {
    /// Trims `pod`'s records as the retention says (`keep` newest at most, none that ended
    /// before `cutoff`); returns how many went.
    fn trim_pod(&mut self, pod: &str, keep: usize, cutoff: u64) -> u64 {
        let Some(v) = self.history.get_mut(pod) else {
            return 0;
        };
        let before = v.len();
        let excess = v.len().saturating_sub(keep);
        let mut i = 0;
        v.retain(|(_, r)| {
            i += 1;
            i > excess && r.ended_at.0 >= cutoff
        });
        let n = (before - v.len()) as u64;
        if v.is_empty() {
            self.history.remove(pod);
        }
        n
    }
}

impl Model {
    fn origin(&self) -> Option<u64> {
        (self.next_seq > 1).then(|| self.next_seq - 1)
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_work;
        self.next_work += 1;
        id
    }

    fn trim(&mut self) -> u64 {
        let mut w = self.dispatched + 1;
        let items = self
            .publish
            .values()
            .chain(self.pending.values())
            .chain(self.parked.values())
            .chain(self.deploy.iter());
        for (_, _, o) in items {
            if let Some(o) = o {
                w = w.min(*o);
            }
        }
        let before = self.events.len();
        self.events.retain(|s, _| *s >= w);
        (before - self.events.len()) as u64
    }
}

fn hold_content(c: u8) -> Vec<u8> {
    format!("held blob {c}").into_bytes()
}

fn put_cfg(b: &mut Batch, k: u8) -> Checksum {
    b.put_render(
        format!("config {k}\n").into_bytes(),
        vec![(AuxKind::Map, "maps/m.map".into(), vec![k])],
    )
    .checksum
}

fn pod_key(p: u8) -> PodStatusKey {
    PodStatusKey::new(&runtime(), &pod(&format!("pod-{p}")))
}

/// An unscheduled enqueue of `item` caused by the event at `origin` (none: no event yet).
fn enqueue(item: &WorkItem, origin: Option<u64>) -> Op {
    Op::Enqueue {
        item: item.clone(),
        origin: origin.map_or(Origin::None, |s| Origin::Seq(Seq(s))),
        not_before: None,
    }
}

fn opts(path: &std::path::Path) -> JournalOptions {
    JournalOptions::new(path).trim_every_commits(0)
}

fn apply(j: &mut Journal, m: &mut Model, step: &Step, path: &std::path::Path) {
    match step {
        Step::Accept { events, render } => {
            let mut b = Batch::new();
            let mut expected = Vec::new();
            for _ in 0..*events {
                m.counter += 1;
                let e = drift(m.counter);
                b.event(e.clone());
                expected.push(e);
            }
            if let Some(k) = render {
                let r = put_cfg(&mut b, *k);
                m.counter += 1;
                let e = rendered(m.counter, r);
                b.event(e.clone());
                expected.push(e);
            }
            let seqs = j.accept(b).unwrap().seqs();
            for (s, e) in seqs.iter().zip(expected) {
                assert_eq!(s.0, m.next_seq);
                m.events.insert(s.0, e);
                m.next_seq += 1;
            }
        }
        Step::Hold(c) => {
            j.put_blob(hold_content(*c)).unwrap();
            *m.holds.entry(*c).or_default() += 1;
        }
        Step::Release(c) => {
            let h = Checksum::of(&hold_content(*c));
            let r = j.release_blob(h);
            match m.holds.get_mut(c) {
                Some(n) if *n > 0 => {
                    r.unwrap();
                    *n -= 1;
                }
                _ => assert!(matches!(r, Err(AcceptError::NoHold { .. })), "{r:?}"),
            }
        }
        Step::EnqueuePublish { render } => {
            let mut b = Batch::new();
            let r = put_cfg(&mut b, *render);
            let origin = m.origin();
            let item = publish_item(r, Seq(origin.unwrap_or(0)));
            b.push(enqueue(&item, origin));
            let ids = j.accept(b).unwrap().work_ids();
            let id = m.take_id();
            assert_eq!(ids, vec![WorkId(id)]);
            m.publish.insert(id, (id, item, origin));
        }
        Step::EnqueueStatus { pod: p, render } => {
            let mut b = Batch::new();
            let r = render.map(|k| put_cfg(&mut b, k));
            let item = status_item(&format!("pod-{p}"), r);
            let origin = m.origin();
            b.push(enqueue(&item, origin));
            let ids = j.accept(b).unwrap().work_ids();
            let id = m.take_id();
            assert_eq!(ids, vec![WorkId(id)]);
            let key = pod_key(*p).0;
            m.parked.remove(&key);
            m.pending.insert(key, (id, item, origin));
        }
        Step::EnqueueDeploy { render } => {
            let mut b = Batch::new();
            let r = put_cfg(&mut b, *render);
            let item = deploy_item(r, "d");
            let origin = m.origin();
            b.push(enqueue(&item, origin));
            j.accept(b).unwrap();
            let id = m.take_id();
            m.deploy = Some((id, item, origin));
        }
        Step::AckPublish { nth } => {
            let Some(id) = m.publish.keys().nth(*nth as usize).copied() else {
                assert!(
                    !j.ack(
                        Queue::Publish,
                        WorkKey::Id(WorkId(999_999)),
                        WorkId(999_999)
                    )
                    .unwrap()
                );
                return;
            };
            assert!(
                j.ack(Queue::Publish, WorkKey::Id(WorkId(id)), WorkId(id))
                    .unwrap()
            );
            m.publish.remove(&id);
        }
        Step::AckStatus { pod: p, stale } => {
            let key = pod_key(*p);
            let current = m.pending.get(&key.0).map(|i| i.0);
            let id = match (current, stale) {
                (Some(c), false) => c,
                (Some(c), true) => c.saturating_sub(1),
                (None, _) => 1,
            };
            let matched = j
                .ack(Queue::StatusPending, WorkKey::Pod(key.clone()), WorkId(id))
                .unwrap();
            assert_eq!(matched, current == Some(id));
            if matched {
                m.pending.remove(&key.0);
            }
        }
        Step::AckDeploy { stale } => {
            let current = m.deploy.as_ref().map(|i| i.0);
            let id = match (current, stale) {
                (Some(c), false) => c,
                (Some(c), true) => c + 1000,
                (None, _) => 1,
            };
            let matched = j
                .ack(Queue::DeployPending, WorkKey::Slot, WorkId(id))
                .unwrap();
            assert_eq!(matched, current == Some(id));
            if matched {
                m.deploy = None;
            }
        }
        Step::Park { pod: p, stale } => {
            let key = pod_key(*p);
            let current = m.pending.get(&key.0).map(|i| i.0);
            let id = match (current, stale) {
                (Some(c), false) => c,
                (Some(c), true) => c + 1000,
                (None, _) => 1,
            };
            let matched = j.park(key.clone(), WorkId(id)).unwrap();
            assert_eq!(matched, current == Some(id));
            if matched {
                let item = m.pending.remove(&key.0).unwrap();
                m.parked.insert(key.0, item);
            }
        }
        Step::Unpark => {
            let n = j.unpark(None).unwrap();
            assert_eq!(n as usize, m.parked.len());
            for (k, item) in std::mem::take(&mut m.parked) {
                m.pending.entry(k).or_insert(item);
            }
        }
        Step::Dispatch { back } => {
            let target = m
                .next_seq
                .saturating_sub(1)
                .saturating_sub(u64::from(*back));
            j.mark_dispatched(Seq(target)).unwrap();
            m.dispatched = m.dispatched.max(target);
        }
        Step::Trim => {
            assert_eq!(j.trim().unwrap(), m.trim());
        }
        Step::AppendHistory {
            pod: p,
            render,
            advance_secs,
        } => {
            let mut b = Batch::new();
            let r = put_cfg(&mut b, *render);
            m.clock += u64::from(*advance_secs) * 1_000;
            let rec = SyncRecord {
                pod: pod(&format!("pod-{p}")),
                endpoint: EndpointUrl::new(format!("http://pod-{p}:5555")),
                render: r,
                started_at: UnixMillis(m.clock.saturating_sub(50)),
                ended_at: UnixMillis(m.clock),
                mode: Some(SyncMode::Runtime),
                operations: OperationCounts::default(),
                reloaded: false,
                reload_id: None,
                result: SyncResult::Applied,
                term: Term(0),
                deployment: DeploymentId::new(format!("d-{}", m.clock)),
            };
            b.append_history(rec.clone(), retention());
            let out = j.accept(b).unwrap().outcomes;
            let key = rec.pod_key();
            let seq = m
                .history
                .get(&key)
                .and_then(|v| v.last())
                .map_or(1, |(s, _)| s + 1);
            let cutoff = m.clock.saturating_sub(10_000);
            let trimmed = m.trim_pod(&key, 1, cutoff);
            m.history.entry(key).or_default().push((seq, rec));
            assert_eq!(
                out.last(),
                Some(&OpOutcome::HistoryAppended { seq, trimmed })
            );
        }
        Step::TrimHistory { ahead_secs } => {
            let now = m.clock + u64::from(*ahead_secs) * 1_000;
            let mut b = Batch::new();
            b.trim_history(retention(), UnixMillis(now));
            let out = j.accept(b).unwrap().outcomes;
            let pods: Vec<String> = m.history.keys().cloned().collect();
            let trimmed: u64 = pods
                .iter()
                .map(|p| m.trim_pod(p, 2, now.saturating_sub(10_000)))
                .sum();
            assert_eq!(out, vec![OpOutcome::HistoryTrimmed(trimmed)]);
        }
        Step::Reopen => {
            // Drop every handle first: the file lock must be free for the reopen.
            let placeholder = Journal::open(&opts(&path.with_extension("scratch"))).unwrap();
            drop(std::mem::replace(j, placeholder));
            *j = Journal::open(&opts(path)).unwrap();
        }
    }
}

fn check(j: &Journal, m: &Model) {
    let events: Vec<(u64, Event)> = j
        .events(Seq(1), usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(s, _, e)| (s.0, e))
        .collect();
    let expected: Vec<(u64, Event)> = m.events.iter().map(|(s, e)| (*s, e.clone())).collect();
    assert_eq!(events, expected);
    let meta = j.meta().unwrap();
    assert_eq!(meta.next_seq, Seq(m.next_seq));
    assert_eq!(meta.next_work_id, WorkId(m.next_work));
    assert_eq!(meta.dispatched_through, Seq(m.dispatched));
    let items = |q: Queue| -> Vec<(u64, WorkItem, Option<u64>)> {
        j.queue(q)
            .unwrap()
            .into_iter()
            .map(|e| (e.record.id.0, e.record.item, e.record.origin.map(|s| s.0)))
            .collect()
    };
    let queues: [(Queue, Vec<_>); 4] = [
        (Queue::Publish, m.publish.values().cloned().collect()),
        (Queue::StatusPending, m.pending.values().cloned().collect()),
        (Queue::StatusParked, m.parked.values().cloned().collect()),
        (Queue::DeployPending, m.deploy.iter().cloned().collect()),
    ];
    for (q, want) in queues {
        assert_eq!(items(q), want, "{q:?}");
    }
    for c in 0..3u8 {
        let h = Checksum::of(&hold_content(c));
        let holds = m.holds.get(&c).copied().unwrap_or(0);
        let counts = j.blob_counts(h).unwrap();
        if holds == 0 {
            assert_eq!(counts, None);
            assert_eq!(j.get_blob(h).unwrap(), None);
        } else {
            assert_eq!(counts, Some(BlobCounts { refs: 0, holds }));
            assert_eq!(j.get_blob(h).unwrap(), Some(hold_content(c)));
        }
    }
    for p in 0..3u8 {
        let pod_ref = pod(&format!("pod-{p}"));
        let want: Vec<SyncRecord> = m
            .history
            .get(&haptic_journal::pod_key(&pod_ref))
            .map(|v| v.iter().map(|(_, r)| r.clone()).collect())
            .unwrap_or_default();
        let got = j
            .pod_history(&pod_ref, UnixMillis(0), UnixMillis(u64::MAX))
            .unwrap();
        assert_eq!(got, want, "pod-{p}");
        // A render history names is stored (its reference keeps it).
        for r in &got {
            assert!(j.get_render(r.render).unwrap().is_some(), "{r:?}");
        }
    }
    let mut timeline: Vec<SyncRecord> = m
        .history
        .values()
        .flat_map(|v| v.iter().map(|(_, r)| r.clone()))
        .collect();
    timeline.sort_by_key(|r| r.started_at);
    assert_eq!(j.history().unwrap(), timeline);
    assert_clean(j);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn journal_matches_model(steps in proptest::collection::vec(step(), 1..40)) {
        let (_d, path) = tmp();
        let mut j = Journal::open(&opts(&path)).unwrap();
        let mut m = Model { next_seq: 1, next_work: 1, ..Model::default() };
        for s in &steps {
            apply(&mut j, &mut m, s, &path);
            check(&j, &m);
        }
    }
}
