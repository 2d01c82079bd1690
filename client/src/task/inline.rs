//! Inputs applied where they arise, without waking the session task: a lone caller's call
//! (or, on one thread, a woken caller's), a reader's bytes. Whoever finds the hub free applies
//! its input and carries out what follows; results are handed over once the hub is released.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::time::Instant;

use botmesh_redis_core::driver::session::{Completion, ConnId, Submission};

use super::conn::ConnEvent;
use super::{task_address, Hub, Msg, OneShot, SessionTask};
use crate::Runtime;

/// On a runtime of one thread, the task that took a result last: a call is a woken
/// caller's only from that task, and any other is a new arrival (a message's handler, a
/// timer's task), which goes through the session task's pass as under any other load. The
/// count of submits since the results ([`SessionTask::awaited`]) cannot tell them apart: once
/// woken callers stopped calling (a handler that ends with its reply), new arrivals were taken
/// for the callers still expected, held back for a submit that never came and written in
/// part-batches (`docs/performance.md`, "Woken callers that do not call again, and the
/// overload").
///
/// A task is known by its waker's data address, which a task started after the last taker
/// ended may reuse: that one task is then taken for a woken caller, until the next result is
/// taken. Its call is written the same, by itself or by the pass the session task is woken
/// for.
#[derive(Clone, Default)]
pub(crate) struct LastTaker(Arc<AtomicUsize>);

impl LastTaker {
    /// The task woken by `waker` took its result.
    pub(crate) fn took(&self, waker: &Waker) {
        self.0.store(task_address(waker), Ordering::Relaxed);
    }

    /// Whether the task of `waker` is the one that took a result last (never a waker without
    /// data, which names no task: the state after [`LastTaker::forget`]).
    pub(super) fn is(&self, waker: &Waker) -> bool {
        let task = task_address(waker);
        task != 0 && self.0.load(Ordering::Relaxed) == task
    }

    pub(super) fn forget(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// The completions of an input applied from a caller's or a reader's task. Delivered under
/// the hub's lock, a result woke its caller on another worker thread while the lock was still
/// held, and the caller's next call, finding the hub busy, went through the session task: a
/// lone caller woke it for one call in two (`tests/tests/client/inline.rs`). Usually one.
#[derive(Default)]
pub(super) struct Deferred {
    one: Option<Completion<OneShot>>,
    more: Vec<Completion<OneShot>>,
}

impl Deferred {
    pub(super) fn push(&mut self, completion: Completion<OneShot>) {
        match self.one {
            None => self.one = Some(completion),
            Some(_) => self.more.push(completion),
        }
    }

    /// Hands every result to its caller; called with the hub released.
    pub(super) fn deliver(self) {
        self.one
            .into_iter()
            .chain(self.more)
            .for_each(Completion::deliver);
    }
}

impl<R: Runtime> SessionTask<R> {
    /// After an input applied outside the session task: carries out the outputs, and wakes
    /// the task when the session's next timer is sooner than the one it sleeps on.
    pub(super) fn settle(&mut self) {
        self.counters.inline.fetch_add(1, Ordering::Relaxed);
        let due = self.next_deadline();
        let sooner = match (due, self.armed) {
            (Some(due), Some(armed)) => due < armed,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if sooner {
            self.armed = due;
            self.events.rearm();
        }
    }

    /// Whether an input may be applied outside the session task now: not once it ended, nor
    /// in a graceful close (whose end the task watches).
    pub(super) fn takes_inline(&self) -> bool {
        !self.ended && self.grace_until.is_none()
    }
}

/// A caller's call, submitted from the caller's own task when the hub is free and either the
/// caller is alone (no other plan has requests out, no other caller was just woken) or every
/// task runs on one thread and the last results woke this caller (the task of `waker`,
/// [`LastTaker`]). Yields the submission back when it must go through the callers' inbox.
///
/// A lone caller writes its call at once. On one thread, the callers a batch of results woke
/// run one after another: each adds its call, and the last of them writes the batch, where
/// the session task would have written it only after every task queued meanwhile had run,
/// the callers other lanes' results woke among them. Each lane's batch then leaves as soon as
/// its own callers are back, so the node works on one lane's batch while the client turns the
/// other's around, rather than receiving both together and answering both together, which
/// once it happens keeps the lanes in step (measured with `hops`, one node: 1.25x the calls a
/// second, the node 0.65-0.71 busy instead of 0.59-0.64; `docs/performance.md`).
pub(crate) fn submit_inline<R: Runtime>(
    hub: &Hub<R>,
    submission: Submission<OneShot>,
    waker: &Waker,
) -> Option<Submission<OneShot>> {
    let Ok(mut task) = hub.try_lock() else {
        return Some(submission);
    };
    // Calls sent to the inbox before this one (the same task's among them, when its earlier
    // call found the hub busy) are written first.
    if task.unapplied.any() {
        return Some(submission);
    }
    // The caller itself may be the one caller the last results woke.
    let alone = task.awaited <= 1 && task.session.sending_at_most(0);
    // Asked only when not alone: a lone caller writes at once whoever woke it.
    let woken = !alone && task.last_taker.as_ref().is_some_and(|t| t.is(waker));
    if !task.takes_inline() || !(alone || woken) {
        return Some(submission);
    }
    let now = Instant::now();
    if woken && task.awaited > 1 {
        // Woken with others still to come (a lone caller counts at most one): the last of them
        // writes. The session task is woken once, to write should none of them call again.
        task.apply(Msg::Submit(submission), now);
        task.counters.inline.fetch_add(1, Ordering::Relaxed);
        if !task.nudged {
            task.nudged = true;
            task.events.rearm();
        }
        return None;
    }
    apply_and_deliver(task, Msg::Submit(submission), now);
    None
}

/// A reader's bytes or replies, applied from the reader's own task when the hub is free, no
/// event of any connection is queued ahead of them, and at most one plan has requests out: the
/// results of more would wake callers on the reader's worker thread, where the session task's
/// yield does not wait for them, and their next calls would leave in several writes instead of
/// one (measured: 17 to 26 calls per write instead of 62 at 64 callers). Yields the event back
/// when it must go through the connections' inbox.
pub(super) fn read_inline<R: Runtime>(
    hub: &Weak<Mutex<SessionTask<R>>>,
    conn: ConnId,
    event: ConnEvent<R>,
) -> Option<ConnEvent<R>> {
    let Some(hub) = hub.upgrade() else {
        return Some(event);
    };
    let Ok(task) = hub.try_lock() else {
        return Some(event);
    };
    if !task.takes_inline() || !task.events.idle() || !task.session.sending_at_most(1) {
        return Some(event);
    }
    apply_and_deliver(task, Msg::Conn(conn, event), Instant::now());
    None
}

/// Applies `msg` from the task that holds the hub, and hands the results it completed to
/// their callers once the hub is released (see [`Deferred`]).
fn apply_and_deliver<R: Runtime>(
    mut task: MutexGuard<'_, SessionTask<R>>,
    msg: Msg<R>,
    now: Instant,
) {
    task.deferred = Some(Deferred::default());
    task.apply(msg, now);
    task.settle();
    let deferred = task.deferred.take();
    drop(task);
    if let Some(deferred) = deferred {
        deferred.deliver();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use super::LastTaker;

    struct Task;

    impl Wake for Task {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_call_is_a_woken_callers_only_from_the_task_that_took_a_result_last() {
        let (a, b) = (Waker::from(Arc::new(Task)), Waker::from(Arc::new(Task)));
        let last = LastTaker::default();
        assert!(!last.is(&a) && !last.is(&b), "nothing taken yet");
        last.took(&a);
        assert!(last.is(&a));
        assert!(!last.is(&b), "a new task is not a woken caller");
        last.took(&b);
        assert!(last.is(&b) && !last.is(&a));
        // The session task's pass forgets it: the callers woken before had their turn.
        last.forget();
        assert!(!last.is(&a) && !last.is(&b));
        // A waker without data names no task, not the forgotten one.
        assert!(!last.is(Waker::noop()));
        last.took(Waker::noop());
        assert!(!last.is(Waker::noop()));
    }
}
