//! The reply to one batch: a slot the writer fills once and the calling thread waits on.
//!
//! A caller blocks on exactly one request at a time, so each calling thread keeps one slot and
//! reuses it for its next request: in steady state a request allocates nothing for its reply.
//! A reply dropped unfilled (the writer stopped or panicked) tells the caller so, instead of
//! leaving it blocked.
//!
//! Waking a group ([`send_group`]): one wake-up per request, but not all from the writer
//! thread. The writer fills every slot of the group, then unparks the first two callers; each
//! woken caller unparks two more (caller `i` wakes `2i + 2` and `2i + 3`), so the wake-ups spread
//! over the callers' threads in a tree of depth log2(group) while the writer goes on with the next
//! group. (Each unpark is a futex syscall that may also preempt the thread issuing it; on two
//! cores, 64 of them in the writer's loop took a quarter of its time.)

use std::cell::RefCell;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;

use super::BatchResult;

enum State {
    Waiting,
    /// The answer, and the callers this one must wake.
    Ready(BatchResult, Option<Wake>),
    /// The writer dropped the reply without an answer.
    Abandoned,
}

struct Slot {
    state: Mutex<State>,
    /// The thread that waits on this slot (the one that created it).
    waiter: Thread,
}

/// The writer's half: fill it with [`BatchReply::send`]; dropping it unfilled abandons it.
pub(crate) struct BatchReply {
    slot: Option<Arc<Slot>>,
}

/// The caller's half: [`BatchWait::wait`] blocks until the writer answers.
pub(crate) struct BatchWait {
    slot: Arc<Slot>,
}

/// A caller's place in its group's wake-up tree.
struct Wake {
    /// Every caller of the group, in group order.
    threads: Arc<[Thread]>,
    /// This caller's index.
    index: usize,
}

impl Wake {
    /// Unparks this caller's two children (`2i + 2`, `2i + 3`).
    fn wake_children(&self) {
        for child in [2 * self.index + 2, 2 * self.index + 3] {
            if let Some(t) = self.threads.get(child) {
                t.unpark();
            }
        }
    }
}

thread_local! {
    /// This thread's reusable slot (shared with the writer only while a request is out).
    static SLOT: RefCell<Option<Arc<Slot>>> = const { RefCell::new(None) };
}

/// A reply pair for one request from the current thread.
pub(crate) fn batch_reply() -> (BatchReply, BatchWait) {
    let slot = SLOT.with(|cell| {
        let mut cell = cell.borrow_mut();
        match &*cell {
            // Reuse only when the writer no longer holds the last reply's clone.
            Some(s) if Arc::strong_count(s) == 1 => {
                // Nobody else holds it: clear what an unwaited earlier reply may have left.
                *s.state.lock().unwrap_or_else(PoisonError::into_inner) = State::Waiting;
                s.clone()
            }
            _ => {
                let s = Arc::new(Slot {
                    state: Mutex::new(State::Waiting),
                    waiter: std::thread::current(),
                });
                *cell = Some(s.clone());
                s
            }
        }
    });
    (
        BatchReply {
            slot: Some(slot.clone()),
        },
        BatchWait { slot },
    )
}

impl Slot {
    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.waiter.unpark();
    }
}

impl BatchReply {
    /// Answers the caller (and wakes it).
    pub(crate) fn send(mut self, result: BatchResult) {
        if let Some(slot) = self.slot.take() {
            slot.set(State::Ready(result, None));
        }
    }
}

/// Answers every request of a group, waking the callers through the tree described in the
/// module docs.
pub(crate) fn send_group(answers: impl ExactSizeIterator<Item = (BatchReply, BatchResult)>) {
    let mut slots = Vec::with_capacity(answers.len());
    for (mut reply, result) in answers {
        if let Some(slot) = reply.slot.take() {
            slots.push((slot, result));
        }
    }
    let threads: Arc<[Thread]> = slots.iter().map(|(s, _)| s.waiter.clone()).collect();
    for (index, (slot, result)) in slots.into_iter().enumerate() {
        let wake = Wake {
            threads: threads.clone(),
            index,
        };
        *slot.state.lock().unwrap_or_else(PoisonError::into_inner) =
            State::Ready(result, Some(wake));
    }
    for t in threads.iter().take(2) {
        t.unpark();
    }
}

impl Drop for BatchReply {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.set(State::Abandoned);
        }
    }
}

impl BatchWait {
    /// Blocks until the writer answers; `None` when it dropped the request unanswered.
    pub(crate) fn wait(self) -> Option<BatchResult> {
        loop {
            {
                let mut state = self
                    .slot
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                match std::mem::replace(&mut *state, State::Waiting) {
                    State::Ready(r, wake) => {
                        drop(state);
                        if let Some(w) = wake {
                            w.wake_children();
                        }
                        return Some(r);
                    }
                    State::Abandoned => return None,
                    State::Waiting => {}
                }
            }
            // Spurious returns (a token left by an earlier request's unpark) loop back.
            std::thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Accepted;

    #[test]
    fn a_reply_reaches_its_waiter_across_threads_and_the_slot_is_reused() {
        for i in 0..100u64 {
            let (reply, wait) = batch_reply();
            let t = std::thread::spawn(move || {
                if i % 2 == 0 {
                    std::thread::yield_now();
                }
                reply.send((Ok(Accepted::default()), Vec::new()));
            });
            let (r, ops) = wait.wait().unwrap();
            assert_eq!(r.unwrap(), Accepted::default());
            assert!(ops.is_empty());
            t.join().unwrap();
        }
    }

    /// Every caller of a group is woken, whatever the group size (the wake-up tree covers all).
    #[test]
    fn a_group_wakes_every_caller() {
        for n in [1usize, 2, 3, 7, 64] {
            let mut replies = Vec::new();
            let mut waiters = Vec::new();
            for _ in 0..n {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                waiters.push(std::thread::spawn(move || {
                    let (reply, wait) = batch_reply();
                    tx.send(reply).unwrap();
                    wait.wait().is_some()
                }));
                replies.push((rx.recv().unwrap(), (Ok(Accepted::default()), Vec::new())));
            }
            send_group(replies.into_iter());
            for w in waiters {
                assert!(w.join().unwrap());
            }
        }
    }

    #[test]
    fn a_dropped_reply_wakes_its_waiter_with_none() {
        let (reply, wait) = batch_reply();
        let t = std::thread::spawn(move || drop(reply));
        assert!(wait.wait().is_none());
        t.join().unwrap();
        // The next request on this thread still works, also after a reply that was abandoned
        // and never waited for (a send to a stopped writer).
        let (reply, wait) = batch_reply();
        drop(reply);
        drop(wait);
        let (reply, wait) = batch_reply();
        reply.send((Ok(Accepted::default()), Vec::new()));
        assert!(wait.wait().is_some());
    }
}
