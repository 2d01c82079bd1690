//! The session's timers, by kind, and what each does when it fires.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use super::ids::{ConnId, OpId, ReqRef};
use super::{Input, Session, Waiters};

/// Why the session wants to be woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimerReason {
    /// A request backs off before its next attempt.
    Backoff,
    /// A plan asked to wait.
    PlanWait,
    /// A batch's deadline.
    RequestDeadline,
    /// A connect or reply deadline of a connection.
    Connection,
    /// A topology refresh is due.
    Refresh,
    /// Nothing is pending.
    Idle,
}

/// The session's timers, by kind.
///
/// Batch deadlines are one per op in flight, armed and ended at the request rate: they sit in
/// a queue in arming order, which is their firing order (each is `now` plus the one request
/// timeout, and `now` never goes back), so arming one and firing one cost O(1) and nothing is
/// ever searched. A deadline is ended lazily: it stays queued until [`Timers::prune_deadlines`]
/// finds its op has moved on, and [`Session::fire`] checks an op's deadline before expiring it.
///
/// Every other timer (a request's backoff, a plan's wait, a connection's check, the refresh)
/// is rare next to them: those sit in a table ordered by instant, with the instant of each, so
/// that arming one again moves it and disarming one finds it by name.
#[derive(Debug, Default)]
pub(super) struct Timers {
    pub(super) deadlines: VecDeque<(Instant, OpId)>,
    pub(super) queue: BTreeSet<(Instant, Timer)>,
    pub(super) armed: BTreeMap<Timer, Instant>,
}

impl Timers {
    /// Arms `timer` for `at`, replacing its earlier instant.
    pub(super) fn arm(&mut self, at: Instant, timer: Timer) {
        if let Timer::Deadline(op) = timer {
            return self.arm_deadline(at, op);
        }
        if let Some(old) = self.armed.insert(timer, at) {
            self.queue.remove(&(old, timer));
        }
        self.queue.insert((at, timer));
    }

    /// Queues a batch deadline of `op`. The queue stays sorted whatever the caller does: a
    /// deadline earlier than the last one (not produced by the session) is inserted in place.
    fn arm_deadline(&mut self, at: Instant, op: OpId) {
        match self.deadlines.back() {
            Some(&(last, _)) if last > at => {
                let index = self.deadlines.partition_point(|&(t, _)| t <= at);
                self.deadlines.insert(index, (at, op));
            }
            _ => self.deadlines.push_back((at, op)),
        }
    }

    /// Drops the queued deadlines that `live` says have ended: those at the front, and every
    /// one once they outnumber the ops in flight (`in_flight`) twice over, so that a slow
    /// request at the front cannot hold a growing tail of ended ones.
    pub(super) fn prune_deadlines(
        &mut self,
        in_flight: usize,
        live: impl Fn(OpId, Instant) -> bool,
    ) {
        while let Some(&(at, op)) = self.deadlines.front() {
            if live(op, at) {
                break;
            }
            self.deadlines.pop_front();
        }
        if self.deadlines.len() > 2 * in_flight + 64 {
            self.deadlines.retain(|&(at, op)| live(op, at));
        }
    }

    /// Disarms `timer`, if armed. Deadlines end lazily (see [`Timers::prune_deadlines`]).
    pub(super) fn disarm(&mut self, timer: Timer) {
        if let Some(at) = self.armed.remove(&timer) {
            self.queue.remove(&(at, timer));
        }
    }

    /// When `timer` fires, if armed (not for deadlines, which the op keeps).
    pub(super) fn armed(&self, timer: Timer) -> Option<Instant> {
        self.armed.get(&timer).copied()
    }

    /// The next timer to fire. A deadline whose op has moved on may come first: waking for it
    /// is a spurious timeout, which costs nothing.
    pub(super) fn first(&self) -> Option<(Instant, Timer)> {
        let deadline = self
            .deadlines
            .front()
            .map(|&(at, op)| (at, Timer::Deadline(op)));
        match (deadline, self.queue.first().copied()) {
            (Some(d), Some(q)) => Some(if d.0 <= q.0 { d } else { q }),
            (d, q) => d.or(q),
        }
    }

    /// Takes the next timer due at `now`, with the instant it was armed for.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(Instant, Timer)> {
        let (at, timer) = self.first()?;
        if at > now {
            return None;
        }
        match timer {
            Timer::Deadline(_) => {
                self.deadlines.pop_front();
            }
            _ => {
                self.queue.remove(&(at, timer));
                self.armed.remove(&timer);
            }
        }
        Some((at, timer))
    }

    pub(super) fn clear(&mut self) {
        self.deadlines.clear();
        self.queue.clear();
        self.armed.clear();
    }
}

/// A timer, by kind and by what it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Backoff(ReqRef),
    PlanWait(OpId),
    Deadline(OpId),
    Conn(ConnId),
    Refresh,
}

impl Timer {
    pub(super) fn reason(&self) -> TimerReason {
        match self {
            Timer::Backoff(_) => TimerReason::Backoff,
            Timer::PlanWait(_) => TimerReason::PlanWait,
            Timer::Deadline(_) => TimerReason::RequestDeadline,
            Timer::Conn(_) => TimerReason::Connection,
            Timer::Refresh => TimerReason::Refresh,
        }
    }
}

impl<W: Waiters> Session<W> {
    /// Runs `timer`, armed for `at`, which is due.
    pub(super) fn fire(&mut self, now: Instant, at: Instant, timer: Timer) {
        match timer {
            Timer::Backoff(r) => {
                if self.req_mut(r).is_some() {
                    self.to_dispatch.push_back(r);
                }
            }
            Timer::PlanWait(id) => self.step_op(now, id, Input::Replies(Vec::new())),
            Timer::Deadline(id) => {
                // Only the op's current batch deadline: an earlier batch's ended lazily.
                if self.ops.get(id).is_some_and(|op| op.deadline == Some(at)) {
                    self.expire(id);
                }
            }
            Timer::Conn(conn) => self.check_conn(now, conn),
            Timer::Refresh => self.start_refresh(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn op(seq: u64) -> OpId {
        OpId {
            seq,
            index: seq as usize,
        }
    }

    #[test]
    fn deadlines_and_other_timers_fire_in_instant_order() {
        let t0 = crate::testing::start();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut timers = Timers::default();
        timers.arm(ms(10), Timer::Deadline(op(1)));
        timers.arm(ms(5), Timer::Refresh);
        timers.arm(ms(20), Timer::Deadline(op(2)));
        // Out of order (never produced by the session): inserted in place all the same.
        timers.arm(ms(15), Timer::Deadline(op(3)));
        timers.arm(ms(12), Timer::Conn(ConnId(7)));
        assert_eq!(timers.first(), Some((ms(5), Timer::Refresh)));
        let mut fired = Vec::new();
        while let Some(due) = timers.pop_due(ms(30)) {
            fired.push(due);
        }
        assert_eq!(
            fired,
            [
                (ms(5), Timer::Refresh),
                (ms(10), Timer::Deadline(op(1))),
                (ms(12), Timer::Conn(ConnId(7))),
                (ms(15), Timer::Deadline(op(3))),
                (ms(20), Timer::Deadline(op(2))),
            ]
        );
        assert_eq!(timers.first(), None);
    }

    #[test]
    fn ended_deadlines_are_pruned_from_the_front_and_never_pile_up() {
        let t0 = crate::testing::start();
        let mut timers = Timers::default();
        // A slow op at the front, then many that end at once.
        timers.arm(t0, Timer::Deadline(op(0)));
        for n in 1..1000 {
            timers.arm(t0 + Duration::from_micros(n), Timer::Deadline(op(n)));
        }
        let slow = op(0);
        timers.prune_deadlines(1, |id, _| id == slow);
        assert_eq!(
            timers.deadlines.len(),
            1,
            "the ended ones went though the front lives"
        );
        timers.prune_deadlines(0, |_, _| false);
        assert!(timers.deadlines.is_empty());
        assert_eq!(timers.first(), None);
    }
}
