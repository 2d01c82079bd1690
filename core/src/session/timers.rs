//! The session's timers: one armed instant per timer, by kind, and what each does when it
//! fires.

use super::*;

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

/// The session's timers, one armed instant per timer (a request's backoff, a plan's wait, a
/// batch's deadline, a connection's check, the refresh), ordered by when they fire. Arming a
/// timer again moves it, and disarming one finds it by name: nothing scans the table.
#[derive(Debug, Default)]
pub(super) struct Timers {
    pub(super) queue: BTreeSet<(Instant, Timer)>,
    pub(super) armed: BTreeMap<Timer, Instant>,
}

impl Timers {
    /// Arms `timer` for `at`, replacing its earlier instant.
    pub(super) fn arm(&mut self, at: Instant, timer: Timer) {
        if let Some(old) = self.armed.insert(timer, at) {
            self.queue.remove(&(old, timer));
        }
        self.queue.insert((at, timer));
    }

    /// Disarms `timer`, if armed.
    pub(super) fn disarm(&mut self, timer: Timer) {
        if let Some(at) = self.armed.remove(&timer) {
            self.queue.remove(&(at, timer));
        }
    }

    /// When `timer` fires, if armed.
    pub(super) fn armed(&self, timer: Timer) -> Option<Instant> {
        self.armed.get(&timer).copied()
    }

    /// The next timer to fire.
    pub(super) fn first(&self) -> Option<(Instant, Timer)> {
        self.queue.first().copied()
    }

    /// Takes the next timer due at `now`, if any.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let (at, timer) = self.first()?;
        if at > now {
            return None;
        }
        self.queue.remove(&(at, timer));
        self.armed.remove(&timer);
        Some(timer)
    }

    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.armed.clear();
    }
}

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

impl<W> Session<W> {
    pub(super) fn fire(&mut self, now: Instant, timer: Timer) {
        match timer {
            Timer::Backoff(r) => {
                if self.req_mut(r).is_some() {
                    self.to_dispatch.push_back(r);
                }
            }
            Timer::PlanWait(id) => self.step_op(now, id, Some(Vec::new())),
            Timer::Deadline(id) => self.expire(id),
            Timer::Conn(conn) => self.check_conn(now, conn),
            Timer::Refresh => self.start_refresh(now),
        }
    }
}
