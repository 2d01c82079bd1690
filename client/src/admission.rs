//! A lane's room: at most its share of [`ONE_NODE_BOUND`] calls out at once to one node, or of
//! [`CLUSTER_BOUND`] to a cluster's nodes together with at most half of them to one node, and
//! the plans of the calls beyond it parked in line, in order, until calls end and make room.
//!
//! A bot's load is an open loop: messages keep arriving whether or not the last ones were
//! answered. After a stall of the process (the machine busy elsewhere for 50 ms), the calls due
//! meanwhile arrive together; submitted all at once, tens of thousands of them were in flight,
//! every call's state was out of the caches by the time its reply came, each cost several times
//! its usual CPU, and the client could stay behind a rate it held before at a third of its
//! peak (`docs/performance.md`, "A stall under an open loop"). Parked, a call costs its place
//! in line and nothing else: its caller waits for the result as any caller does, the calls in
//! flight stay few enough to stay warm, and the backlog drains.
//!
//! Three rules keep the bound from holding a call back for nothing:
//!
//! - A plan that may wait by design ([`Plan::may_wait`](botmesh_redis_core::driver::Plan::may_wait):
//!   a turn polled until served, a `BLPOP`, a `WAIT`) is not counted: bot tasks waiting for
//!   their turns never fill a lane.
//! - A parked plan has its own deadline, the request timeout counted from when it parked:
//!   past it, it leaves the line and its call ends with [`Error::Timeout`], never sent. Let
//!   out before it, the plan takes its time in line with it
//!   ([`Submission::waited_since`]): the session counts its request timeout from when it
//!   parked, so a call ends within the request timeout, parked or not.
//! - The bound holds only while the node answers: with plans in its line and none of its calls
//!   ended for [`ANSWERING`], every plan parked for the node goes out, so that a node that
//!   stopped answering (or a plan of the user's that waits without saying so) holds calls in
//!   line no longer than it holds the calls it has. On a cluster the lane's bound counts such
//!   a node's calls up to its share only: the others keep the rest of the lane.
//!
//! The lane's keeper ([`keep`], one task a lane) applies the last two: it sleeps while nobody
//! is parked and wakes for the front plans' deadlines and every [`ANSWERING`] while someone is.
//!
//! A cluster's lane talks to several nodes, one of which may stop while the others answer.
//! One bound for the lane alone would fill with the stopped node's calls and hold the healthy
//! nodes' calls behind them; a bound per node alone let in, after a stall, one node's plans at
//! a time, so each pass of the session fed one master while the others waited, and the client
//! stayed behind (`docs/performance.md`, "A cluster's room, tried in the session"). So a call
//! needs room twice: in the lane's bound, shared by the nodes, and in its node's share of it.
//! Its node is the owner of its plan's first slot ([`Plan::first_slot`](botmesh_redis_core::driver::Plan::first_slot)),
//! read from the session's map before the session routes the call
//! ([`SlotOwners`](botmesh_redis_core::driver::session::SlotOwners)); a call whose node is not
//! known yet (no map, a plan that names no slot before it starts) goes out uncounted.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use botmesh_redis_core::driver::session::Submission;

use crate::task::OneShot;
use crate::Runtime;

/// How many calls a client lets out to one node at once, shared out over its lanes (64 each of
/// the tokio driver's four on the multi-thread runtime, 86 of its three on one thread).
/// Measured with `bench --stall` on one node (`docs/performance.md`, "One node's room for
/// calls, kept"): after a stall, 256 brought the client back to the offered rate more often
/// than 1,024 or 4,096, and 64 a lane more often than 128 or 256.
pub(crate) const ONE_NODE_BOUND: usize = 256;

/// How many calls a cluster client lets out at once to all its nodes together, shared out over
/// its lanes; no node takes more than half of a lane's ([`Admission::share`]). Measured with
/// `bench --stall` on three masters (`docs/performance.md`, "A cluster's room, two levels"): one
/// bound shared by the nodes drains a backlog, since a call that ends lets in the next plan
/// whatever its node, and each pass of the session then writes to every master; a bound per
/// node alone let in one node's plans at a time and stayed behind.
pub(crate) const CLUSTER_BOUND: usize = 1024;

/// How many node numbers a cluster's lane counts calls for: far more than a cluster has nodes
/// (the session numbers the nodes it knows, replicas included, and gives a forgotten node's
/// number to the next new one). A call to a node numbered past it goes out uncounted.
pub(crate) const CLUSTER_NODES: usize = 1024;

/// With plans in a node's line and none of its calls ended for this long, the node is taken
/// for not answering and its plans in line go out. Far above a reply's time on a busy node (under
/// a millisecond), above a stall of the process that the bound is for, far below a request
/// timeout.
pub(crate) const ANSWERING: Duration = Duration::from_millis(100);

/// Where a lane's room hands a parked call's plan when room comes: the lane's inbox.
pub(crate) type Handoff = Box<dyn Fn(Submission<OneShot>) + Send + Sync>;

/// A node's number in a lane's room: 0 on one node, the session's number for it on a cluster
/// ([`SlotOwners`](botmesh_redis_core::driver::session::SlotOwners)).
pub(crate) type Node = u16;

/// The room of one lane: at most `bound` calls out at once, at most `share` of them to one
/// node.
///
/// A call that finds nobody in line takes its room with two atomic adds (the lane's count and
/// its node's) and gives it back with two subtractions; the lock is taken only when someone
/// parks or is parked. The line and the counts meet as in Dekker's exclusion: a caller that
/// parks counts itself in line, then looks for room; a call that ends gives its room back,
/// then looks for a line. Both in sequential consistency, so at least one of the two sees the
/// other, and a room freed while a caller parks is never missed.
///
/// A parked call's plan waits in its node's line, not its caller: whoever frees room (a call
/// that ends, the keeper) hands the plan to the session ([`Handoff`]), and the caller, waiting
/// for its result all along, is woken once, by the result. Room goes to the plan that parked
/// first among those whose node is under its share, so a node that stops answering holds its
/// own plans back and nobody else's. The clock is read by the callers that park and by the
/// lane's keeper ([`keep`]), never by a call that finds room.
pub(crate) struct Admission {
    bound: usize,
    /// How many of the lane's calls may go to one node: the whole bound on one node; on a
    /// cluster half of it, so that a master that stopped answering fills half the lane at most
    /// and the others' calls keep the other half.
    share: usize,
    /// How long a caller stays parked at most: the client's request timeout.
    patience: Duration,
    /// Calls admitted and not yet done with, those granted room while parked included; on a
    /// cluster, of each node's calls as many as its share at most: the calls the quiet rule
    /// lets out past a node's share are the node's alone, so a master that stopped answering
    /// takes its share of the lane and no more, and the others keep the rest.
    out: AtomicUsize,
    /// The same, by node number, every call counted; kept only when a node's share is below
    /// the bound (on a cluster), since one node's count would be `out` again.
    node_out: Box<[AtomicUsize]>,
    /// Whether calls are counted by node: `share` below `bound`.
    by_node: bool,
    /// Plans in line, over every node's line: while it is 0, calls come and go without the
    /// lock. Shared with the lane's metrics, whose `ops_waiting` counts them.
    lined: Arc<AtomicUsize>,
    handoff: Handoff,
    room: Mutex<Room>,
}

struct Room {
    /// Each node's line, by number; made when a plan to the node first parks (so as many as
    /// the highest number parked for, a handful on a cluster).
    lines: Vec<Line>,
    /// Callers whose plans were refused at their deadline, until their calls end.
    expired: Vec<Ticket>,
    /// Callers parked so far (each once, however long it waited): the tickets handed out.
    next_ticket: u64,
    /// The keeper, waiting for a line.
    keeper: Option<Waker>,
    /// The client closed: the keeper ends.
    closed: bool,
}

/// One node's line in a lane's room.
#[derive(Default)]
struct Line {
    /// The plans of the callers waiting for room, in the order they came (so in the order of
    /// their deadlines). A plan granted room leaves the line then, for the session.
    parked: VecDeque<Parked>,
    /// The ticket after the last one of this line granted room: a caller of this line whose
    /// ticket comes before it, and that did not expire, holds room (a line grants in its
    /// order).
    granted_below: Ticket,
    /// The node's calls ended while plans were in line: counted without a clock, under the
    /// lock those ends take anyway.
    ended: u64,
    /// Since when none of the node's calls ended, as of `ended` then: whether the node
    /// answers.
    quiet: Option<(Instant, u64)>,
}

struct Parked {
    /// The count of callers parked in the lane before it: its place among every line's plans.
    order: u64,
    /// When it parked: the session counts its request timeout from then.
    since: Instant,
    /// Its deadline: when it parked, plus the request timeout; none when that is too far to
    /// represent, as the session takes a batch's deadline.
    until: Option<Instant>,
    submission: Submission<OneShot>,
}

/// A parked caller's number: the count of callers parked before it, wrapping. Only compared
/// among the callers parked and not yet ended, far fewer than the numbers.
pub(crate) type Ticket = u32;

/// A caller's place in a lane's room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Not asked yet.
    Before,
    /// Parked in its node's line with this ticket: its plan waits in line, or was handed on
    /// (or refused).
    Parked(Node, Ticket),
    /// Admitted to its node: its end makes room.
    In(Node),
    /// Done with (or never counted).
    Out,
}

impl Admission {
    /// A lane's room: `bound` calls out at once, `share` of them to one node, among `nodes`
    /// node numbers; a parked plan waits `patience` at most and goes to `handoff`.
    pub(crate) fn new(
        bound: usize,
        share: usize,
        nodes: usize,
        patience: Duration,
        handoff: Handoff,
        lined: Arc<AtomicUsize>,
    ) -> Self {
        Admission {
            bound,
            share,
            patience,
            out: AtomicUsize::new(0),
            node_out: (0..nodes).map(|_| AtomicUsize::new(0)).collect(),
            by_node: share < bound,
            lined,
            handoff,
            room: Mutex::new(Room {
                lines: Vec::new(),
                expired: Vec::new(),
                next_ticket: 0,
                keeper: None,
                closed: false,
            }),
        }
    }

    /// How many callers were parked so far.
    pub(crate) fn parked_so_far(&self) -> u64 {
        self.lock().next_ticket
    }

    /// How many plans wait in line now.
    pub(crate) fn in_line(&self) -> u64 {
        self.lined.load(SeqCst) as u64
    }

    /// Every critical section only counts and moves plans and wakers (handed on after the
    /// lock is released): a poisoned lock still guards a whole room.
    fn lock(&self) -> MutexGuard<'_, Room> {
        self.room.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks for room for the call to `node` whose plan is `submission`: `In` when the caller
    /// may submit it; `Parked` when the plan was taken into the node's line (the caller then
    /// waits for its result, which comes once room does, or as a timeout at its deadline);
    /// `Out` for a node numbered past the room's count, which goes out uncounted.
    pub(crate) fn enter(&self, node: Node, submission: &mut Option<Submission<OneShot>>) -> Gate {
        if self.by_node && usize::from(node) >= self.node_out.len() {
            return Gate::Out;
        }
        if self.lined.load(SeqCst) == 0 && self.take(node) {
            return Gate::In(node);
        }
        let mut room = self.lock();
        // The plans parked before this call go first; room left past them is this call's,
        // unless its node has a line (room freed by a call that ended since the grant is the
        // line's, which that call's grant hands on).
        let mut granted = self.grant(&mut room);
        if !room.in_line(node) && self.has_room(node) && self.take(node) {
            drop(room);
            self.hand_on(granted);
            return Gate::In(node);
        }
        let Some(plan) = submission.take() else {
            drop(room);
            self.hand_on(granted);
            return Gate::Out;
        };
        let ticket = room.park(node, plan, self.patience);
        self.lined.fetch_add(1, SeqCst);
        // An idle keeper watches the line from now on.
        let keeper = room.keeper.take();
        // Room freed by calls that ended before they could see this caller in line goes to
        // the front of the lines (this caller, maybe).
        granted.extend(self.grant(&mut room));
        drop(room);
        self.hand_on(granted);
        if let Some(keeper) = keeper {
            keeper.wake();
        }
        Gate::Parked(node, ticket)
    }

    /// Takes room for a call to `node` if the lane and the node have it. A try that fails
    /// counts for a moment: a grant that reads the counts then may stop short, and the
    /// caller that failed then grants, under the lock, before it parks.
    fn take(&self, node: Node) -> bool {
        if self.out.fetch_add(1, SeqCst) < self.bound && self.take_share(node) {
            return true;
        }
        self.out.fetch_sub(1, SeqCst);
        false
    }

    /// Takes a unit of `node`'s share if it is under it (always, when calls are not counted by
    /// node). Never counts past the share, even for a moment: a node's count above its share
    /// is its calls let out by the quiet rule, which the lane's count leaves out
    /// ([`Admission::out`]), and an end that read a try's passing excess would keep a unit of
    /// the lane's count for good.
    fn take_share(&self, node: Node) -> bool {
        !self.by_node
            || self.node_out[usize::from(node)]
                .fetch_update(SeqCst, SeqCst, |n| (n < self.share).then_some(n + 1))
                .is_ok()
    }

    /// Counts a call to `node` let out by the quiet rule, past the bounds: in the node's count
    /// whatever it is, and in the lane's only while the node is under its share, so that a
    /// node that stopped answering never takes more of the lane than its share however many of
    /// its calls go out.
    fn count_past_bounds(&self, node: Node) {
        if !self.by_node || self.node_out[usize::from(node)].fetch_add(1, SeqCst) < self.share {
            self.out.fetch_add(1, SeqCst);
        }
    }

    /// Whether the lane and `node` look to have room, read without taking it: a caller in
    /// line's way to skip a [`Admission::take`] bound to fail, whose adds and subtractions
    /// on counts every thread writes cost more than reads.
    fn has_room(&self, node: Node) -> bool {
        self.out.load(SeqCst) < self.bound && self.node_has_room(node)
    }

    /// Whether `node` is under its share (always, when calls are not counted by node).
    fn node_has_room(&self, node: Node) -> bool {
        !self.by_node || self.node_out[usize::from(node)].load(SeqCst) < self.share
    }

    /// A call admitted to `node` is done with (its result taken, or its caller gone): its
    /// room goes to the plans parked next in line.
    pub(crate) fn exit(&self, node: Node) {
        // The lane's count holds a node's calls up to its share ([`Admission::out`]): an end
        // of one of the node's calls past it frees no room in the lane.
        let within_share = match self.node_out.get(usize::from(node)) {
            Some(counted) if self.by_node => counted.fetch_sub(1, SeqCst) <= self.share,
            _ => true,
        };
        if within_share {
            self.out.fetch_sub(1, SeqCst);
        }
        if self.lined.load(SeqCst) == 0 {
            return;
        }
        let mut room = self.lock();
        if let Some(line) = room.lines.get_mut(usize::from(node)) {
            line.ended += 1;
        }
        let granted = self.grant(&mut room);
        drop(room);
        self.hand_on(granted);
    }

    /// A caller parked in `node`'s line is done with (its result taken, or its caller gone):
    /// a plan still in line leaves it; one that was granted room passes the room on. Once per
    /// ticket (a call's gate is `Out` after it).
    pub(crate) fn leave(&self, node: Node, ticket: Ticket) {
        let mut room = self.lock();
        // Refused tickets first: one may lie before a later grant.
        if let Some(i) = room.expired.iter().position(|&t| t == ticket) {
            room.expired.swap_remove(i);
            return;
        }
        let Some(line) = room.lines.get_mut(usize::from(node)) else {
            return;
        };
        if line.was_granted(ticket) {
            // The usual end of a parked call: its plan ran, and its room goes on.
            drop(room);
            self.exit(node);
            return;
        }
        // Gone while its plan waits in line (rare: a caller that gave up): a search.
        if let Some(i) = line.parked.iter().position(|p| p.ticket() == ticket) {
            line.parked.remove(i);
            self.lined.fetch_sub(1, SeqCst);
        }
    }

    /// Grants room to the plans parked next in line while the lane has room: each time to the
    /// plan that parked first among the lines whose node is under its share. Yields them, for
    /// [`Admission::hand_on`]. Calls that find nobody in line may take room meanwhile: each
    /// grant takes its room only if it is still there.
    fn grant(&self, room: &mut Room) -> Vec<Submission<OneShot>> {
        let mut granted = Vec::new();
        loop {
            let out = self.out.load(SeqCst);
            if out >= self.bound {
                break;
            }
            let next = room
                .waiting()
                .filter(|&(node, _)| self.node_has_room(node))
                .min_by_key(|(_, line)| line.front_order());
            let Some((node, _)) = next else {
                break;
            };
            if self
                .out
                .compare_exchange(out, out + 1, SeqCst, SeqCst)
                .is_err()
            {
                continue;
            }
            if !self.take_share(node) {
                // Taken meanwhile by a call that found no line: the lane's room goes back.
                self.out.fetch_sub(1, SeqCst);
                continue;
            }
            granted.extend(room.lines[usize::from(node)].pop());
            self.lined.fetch_sub(1, SeqCst);
        }
        granted
    }

    /// Hands plans granted room to the session, outside the lock.
    fn hand_on(&self, granted: Vec<Submission<OneShot>>) {
        granted.into_iter().for_each(|plan| (self.handoff)(plan));
    }

    /// The keeper's look at the lines at `now`: the plans past their deadline leave them and
    /// end as timeouts, never sent; a node none of whose calls ended for [`ANSWERING`] has
    /// every plan of its line go to the session, past its share
    /// ([`Admission::count_past_bounds`]). Yields when to look again,
    /// or `None` when there is no line to watch.
    fn look(&self, now: Instant) -> Option<Instant> {
        let mut room = self.lock();
        let Room { lines, expired, .. } = &mut *room;
        let mut refused = Vec::new();
        let mut granted = Vec::new();
        let mut next: Option<Instant> = None;
        for (node, line) in (0..=Node::MAX).zip(lines.iter_mut()) {
            if line.parked.is_empty() {
                continue;
            }
            // Deadlines come in the line's order.
            while line
                .parked
                .front()
                .is_some_and(|front| front.until.is_some_and(|until| until <= now))
            {
                if let Some(front) = line.parked.pop_front() {
                    expired.push(front.ticket());
                    refused.push(front.submission.waited_since(front.since).expired());
                }
            }
            if !line.parked.is_empty() && !line.answering(now) {
                // Everyone parked comes in; their calls end the way the node's others do.
                while let Some(plan) = line.pop() {
                    self.count_past_bounds(node);
                    granted.push(plan);
                }
            }
            if let Some(at) = line.next_look(now) {
                next = Some(next.map_or(at, |next| next.min(at)));
            }
        }
        self.lined.fetch_sub(refused.len() + granted.len(), SeqCst);
        drop(room);
        // Past its deadline, a plan goes to the session all the same, holding no room: the
        // session ends it unwritten with `Timeout`, as it ends a plan whose deadline passed on
        // any other way, and counts it with the others (metrics, span) where it would be
        // missing if ended here.
        self.hand_on(refused);
        self.hand_on(granted);
        next
    }

    /// Waits for a line to watch; `None` once the client closed.
    fn line(&self, cx: &mut Context<'_>) -> Poll<Option<()>> {
        let mut room = self.lock();
        if room.closed {
            return Poll::Ready(None);
        }
        if room.waiting().next().is_some() {
            return Poll::Ready(Some(()));
        }
        room.keeper = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Ends the keeper: the client closed.
    pub(crate) fn close(&self) {
        let keeper = {
            let mut room = self.lock();
            room.closed = true;
            room.keeper.take()
        };
        if let Some(keeper) = keeper {
            keeper.wake();
        }
    }
}

/// The keeper of a lane's lines: sleeps while nobody is parked, and while someone is, wakes at
/// the front plans' deadlines and at least every [`ANSWERING`] to look at the lines
/// ([`Admission::look`]). Ends when the client closes.
pub(crate) async fn keep<R: Runtime>(admission: std::sync::Arc<Admission>) {
    while poll_fn(|cx| admission.line(cx)).await.is_some() {
        let mut now = Instant::now();
        while let Some(at) = admission.look(now) {
            R::sleep_until(at).await;
            now = Instant::now();
        }
    }
}

impl Room {
    /// Parks `plan` at the end of `node`'s line, with its deadline `patience` from now;
    /// yields its ticket.
    fn park(&mut self, node: Node, plan: Submission<OneShot>, patience: Duration) -> Ticket {
        let order = self.next_ticket;
        self.next_ticket += 1;
        let index = usize::from(node);
        if self.lines.len() <= index {
            self.lines.resize_with(index + 1, Line::default);
        }
        let line = &mut self.lines[index];
        let now = Instant::now();
        if line.parked.is_empty() {
            // A line begins: the quiet rule's clock starts. Every caller of the line before this one was granted room, refused or gone: the
            // tickets before this one count as granted, so the mark never lags the tickets by
            // half their numbers however long the line was empty.
            line.quiet = Some((now, line.ended));
            line.granted_below = order as Ticket;
        }
        line.parked.push_back(Parked {
            order,
            since: now,
            until: now.checked_add(patience),
            submission: plan,
        });
        order as Ticket
    }

    /// Whether plans to `node` wait in line.
    fn in_line(&self, node: Node) -> bool {
        self.lines
            .get(usize::from(node))
            .is_some_and(|line| !line.parked.is_empty())
    }

    /// The lines that hold plans, with their nodes' numbers: the few a grant chooses among.
    fn waiting(&self) -> impl Iterator<Item = (Node, &Line)> {
        (0..)
            .zip(&self.lines)
            .filter(|(_, line)| !line.parked.is_empty())
    }
}

impl Line {
    /// The front plan, granted room: its time in line counts against its request timeout.
    fn pop(&mut self) -> Option<Submission<OneShot>> {
        let parked = self.parked.pop_front()?;
        self.granted_below = parked.ticket().wrapping_add(1);
        Some(parked.submission.waited_since(parked.since))
    }

    /// The place of the front plan among every line's plans (only asked of lines that hold
    /// plans).
    fn front_order(&self) -> u64 {
        self.parked.front().map_or(u64::MAX, |p| p.order)
    }

    /// Whether the caller of this line parked with `ticket` was granted room (or expired:
    /// asked only after `Room::expired`).
    fn was_granted(&self, ticket: Ticket) -> bool {
        // Tickets wrap: `ticket` comes before `granted_below` when fewer than half the
        // numbers lie between them, far more than a line holds.
        let ahead = self.granted_below.wrapping_sub(ticket);
        ahead != 0 && ahead <= Ticket::MAX / 2
    }

    /// Whether the node answers: yes unless none of its calls ended in the last
    /// [`ANSWERING`] of it being asked.
    fn answering(&mut self, now: Instant) -> bool {
        match self.quiet {
            Some((since, ended)) if ended == self.ended => {
                now.saturating_duration_since(since) < ANSWERING
            }
            _ => {
                self.quiet = Some((now, self.ended));
                true
            }
        }
    }

    /// When the keeper looks at this line again: at its front plan's deadline, or when the
    /// quiet rule's time is up; `None` for an empty line.
    fn next_look(&self, now: Instant) -> Option<Instant> {
        let front = self.parked.front()?;
        let quiet = self.quiet.map_or(now, |(since, _)| since) + ANSWERING;
        Some(front.until.map_or(quiet, |until| until.min(quiet)))
    }
}

impl Parked {
    fn ticket(&self) -> Ticket {
        self.order as Ticket
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use botmesh_redis_core::driver::plan::single;
    use botmesh_redis_core::{Access, Error, Key, Request, Value};

    use super::*;
    use crate::task::Delivery;

    type Result = oneshot::Receiver<Delivery<Value>>;

    /// A call's plan, and where its result comes.
    fn call() -> (Option<Submission<OneShot>>, Result) {
        let request = Request::cmd(Access::Read, "GET")
            .key(Key::new("k"))
            .build()
            .unwrap();
        let (done, result) = oneshot::channel();
        let plan = single("get", request, Ok);
        (Some(Submission::new(plan, Some(done))), result)
    }

    /// A room whose hand-offs end each plan at once with `Error::Closed` (as a session that
    /// ran it would end it with its result), counting them.
    fn room(bound: usize, patience: Duration) -> (Admission, Arc<AtomicUsize>) {
        let handed = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&handed);
        let handoff: Handoff = Box::new(move |plan| {
            count.fetch_add(1, Ordering::SeqCst);
            plan.refuse(Error::Closed);
        });
        (
            Admission::new(bound, bound, 1, patience, handoff, Arc::default()),
            handed,
        )
    }

    /// The error a plan's result carries, if it came.
    fn ended(result: &Result) -> Option<Error> {
        result.try_recv().ok().map(|d| d.result.unwrap_err())
    }

    const LONG: Duration = Duration::from_secs(60);

    /// A room of one, taken by a call.
    fn full_room(patience: Duration) -> (Admission, Arc<AtomicUsize>) {
        let (admission, handed) = room(1, patience);
        let (mut first, _) = call();
        assert_eq!(admission.enter(0, &mut first), Gate::In(0));
        (admission, handed)
    }

    /// Parks a call that expects `ticket`; yields where its result comes.
    fn park(admission: &Admission, ticket: Ticket) -> Result {
        park_at(admission, 0, ticket)
    }

    /// Parks a call to `node` that expects `ticket`; yields where its result comes.
    fn park_at(admission: &Admission, node: Node, ticket: Ticket) -> Result {
        let (mut plan, result) = call();
        assert_eq!(admission.enter(node, &mut plan), Gate::Parked(node, ticket));
        assert!(plan.is_none(), "a parked plan waits in line");
        result
    }

    /// Admits a call to `node`, which its caller submits itself.
    fn admit(admission: &Admission, node: Node) {
        let (mut plan, _) = call();
        assert_eq!(admission.enter(node, &mut plan), Gate::In(node));
        assert!(plan.is_some(), "an admitted caller submits its own plan");
    }

    /// A cluster lane's room of 4 calls, 2 a node, over three nodes.
    fn cluster_room(patience: Duration) -> (Admission, Arc<AtomicUsize>) {
        let handed = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&handed);
        let handoff: Handoff = Box::new(move |plan| {
            count.fetch_add(1, Ordering::SeqCst);
            plan.refuse(Error::Closed);
        });
        (
            Admission::new(4, 2, 3, patience, handoff, Arc::default()),
            handed,
        )
    }

    #[test]
    fn calls_enter_up_to_the_bound_and_park_beyond_it() {
        let (admission, handed) = room(2, LONG);
        for _ in 0..2 {
            let (mut plan, _) = call();
            assert_eq!(admission.enter(0, &mut plan), Gate::In(0));
            assert!(plan.is_some(), "an admitted caller submits its own plan");
        }
        park(&admission, 0);
        park(&admission, 1);
        assert_eq!(handed.load(Ordering::SeqCst), 0);
        assert_eq!(admission.parked_so_far(), 2);
    }

    #[test]
    fn room_goes_to_the_parked_plans_in_order() {
        let (admission, handed) = full_room(LONG);
        let a_result = park(&admission, 0);
        let b_result = park(&admission, 1);
        // The call in ends: the first parked plan goes to the session, not the second.
        admission.exit(0);
        assert_eq!(handed.load(Ordering::SeqCst), 1);
        assert!(matches!(ended(&a_result), Some(Error::Closed)));
        assert!(b_result.try_recv().is_err());
        // A newcomer does not pass the plan still parked.
        park(&admission, 2);
        // The first parked call ends: its room goes to the second.
        admission.leave(0, 0);
        assert_eq!(handed.load(Ordering::SeqCst), 2);
        assert!(matches!(ended(&b_result), Some(Error::Closed)));
        assert_eq!(admission.out.load(SeqCst), 1);
    }

    #[test]
    fn a_parked_caller_that_leaves_takes_its_plan_out_of_line() {
        let (admission, handed) = full_room(LONG);
        park(&admission, 0);
        let b_result = park(&admission, 1);
        // Gone while in line: its plan never goes out; the room is the next one's.
        admission.leave(0, 0);
        admission.exit(0);
        assert_eq!(handed.load(Ordering::SeqCst), 1);
        assert!(matches!(ended(&b_result), Some(Error::Closed)));
        // A ticket never handed out changes nothing.
        admission.leave(0, 7);
        assert_eq!(admission.out.load(SeqCst), 1);
        assert_eq!(admission.lined.load(SeqCst), 0);
    }

    #[test]
    fn a_node_that_does_not_answer_holds_nobody() {
        let (admission, handed) = full_room(LONG);
        let parked_at = Instant::now();
        park(&admission, 0);
        // Within `ANSWERING` of the line's start, the keeper lets nobody in, and looks again
        // when that time is up.
        let again = admission.look(parked_at).unwrap();
        assert!(again >= parked_at + ANSWERING && again <= Instant::now() + ANSWERING);
        assert_eq!(handed.load(Ordering::SeqCst), 0);
        // A call ends: the node answers, and the room is the parked plan's.
        admission.exit(0);
        assert_eq!(handed.load(Ordering::SeqCst), 1);
        park(&admission, 1);
        park(&admission, 2);
        // Full and silent for longer than `ANSWERING`: the keeper lets every plan in, and
        // has no line left to watch.
        assert_eq!(admission.look(Instant::now() + ANSWERING * 2), None);
        assert_eq!(handed.load(Ordering::SeqCst), 3);
        assert_eq!(admission.out.load(SeqCst), 3);
    }

    #[test]
    fn plans_past_their_deadline_end_as_timeouts_never_sent() {
        let patience = ANSWERING / 2;
        let (admission, handed) = full_room(patience);
        let parked_at = Instant::now();
        let a_result = park(&admission, 0);
        let b_result = park(&admission, 1);
        // The keeper looks again at the front's deadline, before the quiet rule's time.
        let again = admission.look(parked_at).unwrap();
        assert!(again >= parked_at + patience && again < parked_at + ANSWERING);
        // Past both deadlines, within the quiet rule's time: both plans are refused.
        let later = Instant::now() + patience;
        assert!(later < parked_at + ANSWERING, "the test ran too slowly");
        assert_eq!(admission.look(later), None);
        // Handed to the session (which ends them unwritten, as `Timeout`, their deadline
        // passed): here the room's hand-off ends them at once.
        for result in [&a_result, &b_result] {
            assert!(matches!(ended(result), Some(Error::Closed)));
        }
        assert_eq!(handed.load(Ordering::SeqCst), 2);
        // Their calls end: they held no room, so the call in still holds the only one.
        admission.leave(0, 0);
        admission.leave(0, 1);
        assert!(admission.lock().expired.is_empty());
        assert_eq!(admission.out.load(SeqCst), 1);
        admission.exit(0);
        assert_eq!(admission.out.load(SeqCst), 0);
    }

    #[test]
    fn a_deadline_too_far_to_represent_is_none() {
        let (admission, handed) = full_room(Duration::MAX);
        let result = park(&admission, 0);
        // A call ends now and then (the node answers), and no deadline comes: the plan
        // waits for room, as a batch with such a timeout waits for its reply.
        admission.exit(0);
        assert_eq!(handed.load(Ordering::SeqCst), 1);
        assert!(matches!(ended(&result), Some(Error::Closed)));
        park(&admission, 1);
        let quiet_since = Instant::now();
        let again = admission.look(quiet_since).unwrap();
        assert!(
            again <= Instant::now() + ANSWERING,
            "looks again for the quiet rule only"
        );
        assert_eq!(handed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_node_at_its_share_holds_its_own_plans_only() {
        let (admission, handed) = cluster_room(LONG);
        admit(&admission, 0);
        admit(&admission, 0);
        // Node 0 at its share: its next call parks, though the lane has room.
        let stuck = park_at(&admission, 0, 0);
        // Node 1's calls pass the line that cannot move, submitted by their callers.
        admit(&admission, 1);
        admit(&admission, 1);
        // The lane is full: node 2's call parks behind node 0's.
        let waiting = park_at(&admission, 2, 1);
        // A node-1 call ends: the room goes to node 2's plan, the first whose node is under
        // its share, not node 0's that came before it.
        admission.exit(1);
        assert_eq!(handed.load(Ordering::SeqCst), 1);
        assert!(matches!(ended(&waiting), Some(Error::Closed)));
        assert!(stuck.try_recv().is_err());
        // A node-0 call ends: now node 0's plan goes.
        admission.exit(0);
        assert_eq!(handed.load(Ordering::SeqCst), 2);
        assert!(matches!(ended(&stuck), Some(Error::Closed)));
        assert_eq!(admission.node_out[0].load(SeqCst), 2);
        assert_eq!(admission.node_out[1].load(SeqCst), 1);
        assert_eq!(admission.node_out[2].load(SeqCst), 1);
        assert_eq!(admission.out.load(SeqCst), 4);
        assert_eq!(admission.lined.load(SeqCst), 0);
        // Node 2's parked caller ends after its plan ran: its room is node 2's.
        admission.leave(2, 1);
        assert_eq!(admission.node_out[2].load(SeqCst), 0);
        assert_eq!(admission.out.load(SeqCst), 3);
        // Past the room's node numbers, a call is not counted.
        let (mut plan, _) = call();
        assert_eq!(admission.enter(3, &mut plan), Gate::Out);
        assert!(plan.is_some());
    }

    #[test]
    fn plans_in_line_go_first_whatever_their_node() {
        let (admission, handed) = cluster_room(LONG);
        for node in [0, 1, 0, 1] {
            admit(&admission, node);
        }
        let first = park_at(&admission, 2, 0);
        let second = park_at(&admission, 1, 1);
        // A node-0 call ends: node 1 is at its share, so node 2's plan takes the room, and a
        // newcomer to node 2 then finds the lane full and parks behind node 1's plan.
        admission.exit(0);
        assert!(matches!(ended(&first), Some(Error::Closed)));
        let third = park_at(&admission, 2, 2);
        // A node-1 call ends: the plan that came first of those that can go is node 1's.
        admission.exit(1);
        assert!(matches!(ended(&second), Some(Error::Closed)));
        assert!(third.try_recv().is_err());
        assert_eq!(handed.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_silent_node_has_its_line_go_out_while_the_others_keep_their_bound() {
        let (admission, handed) = cluster_room(LONG);
        for node in [0, 0, 1, 1] {
            admit(&admission, node);
        }
        let parked_at = Instant::now();
        let silent = [park_at(&admission, 0, 0), park_at(&admission, 0, 1)];
        let first = park_at(&admission, 2, 2);
        let behind = park_at(&admission, 1, 3);
        // Node 1 answers: a call ends, and its room goes to node 2's plan, which came first.
        admission.exit(1);
        assert!(matches!(ended(&first), Some(Error::Closed)));
        // Past `ANSWERING` with none of node 0's calls ended: node 0's line goes out past its
        // share; node 1's, whose node answered since its line began, waits for room.
        let later = parked_at + ANSWERING * 2;
        assert!(admission.look(later).is_some(), "node 1's line is watched");
        for result in &silent {
            assert!(matches!(ended(result), Some(Error::Closed)));
        }
        assert!(behind.try_recv().is_err());
        assert_eq!(handed.load(Ordering::SeqCst), 3);
        assert_eq!(admission.node_out[0].load(SeqCst), 4);
        // The lane counts node 0's share, not the calls past it.
        assert_eq!(admission.out.load(SeqCst), 4);
        // Their ends free no room in the lane: node 0 stays at its share.
        admission.leave(0, 0);
        admission.leave(0, 1);
        assert!(behind.try_recv().is_err());
        assert_eq!(admission.out.load(SeqCst), 4);
        // An end within the share does, and node 1's plan goes.
        admission.exit(0);
        assert!(matches!(ended(&behind), Some(Error::Closed)));
        assert_eq!(admission.out.load(SeqCst), 4);
        assert_eq!(admission.lined.load(SeqCst), 0);
    }

    #[test]
    fn a_silent_nodes_calls_past_its_share_leave_the_others_their_room() {
        let (admission, _) = cluster_room(LONG);
        admit(&admission, 0);
        admit(&admission, 0);
        admit(&admission, 1);
        let parked_at = Instant::now();
        let silent: Vec<_> = (0..5).map(|t| park_at(&admission, 0, t)).collect();
        // Node 0 stops answering: its line goes out, five calls past its share of two.
        assert_eq!(admission.look(parked_at + ANSWERING * 2), None);
        assert!(silent
            .iter()
            .all(|r| matches!(ended(r), Some(Error::Closed))));
        assert_eq!(admission.node_out[0].load(SeqCst), 7);
        // The lane holds node 0's share and node 1's call: a second call to node 1 finds room
        // at once, as it would had node 0 kept answering, and the lane's bound stands.
        assert_eq!(admission.out.load(SeqCst), 3);
        admit(&admission, 1);
        let waits = park_at(&admission, 2, 5);
        // Node 0's calls end, the ones past its share first: only the last two make room.
        for ticket in 0..5 {
            admission.leave(0, ticket);
        }
        assert!(waits.try_recv().is_err());
        admission.exit(0);
        assert!(matches!(ended(&waits), Some(Error::Closed)));
        admission.exit(0);
        assert_eq!(admission.node_out[0].load(SeqCst), 0);
        assert_eq!(admission.out.load(SeqCst), 3);
    }

    /// Four threads make 20,000 calls each in a room of `bound` calls, `share` to a node, each
    /// thread's calls to its own node of `nodes`: never more calls in than the bounds, and
    /// every parked plan goes out.
    fn threads_in_a_room(bound: usize, share: usize, nodes: usize) {
        const THREADS: usize = 4;
        const CALLS: usize = 20_000;
        let handoff: Handoff = Box::new(|plan| plan.refuse(Error::Closed));
        let admission = Arc::new(Admission::new(
            bound,
            share,
            nodes,
            LONG,
            handoff,
            Arc::default(),
        ));
        let inside = Arc::new(AtomicUsize::new(0));
        let by_node: Arc<[AtomicUsize]> = (0..nodes).map(|_| AtomicUsize::new(0)).collect();
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let admission = Arc::clone(&admission);
                let (inside, by_node) = (Arc::clone(&inside), Arc::clone(&by_node));
                let node = (thread % nodes) as Node;
                std::thread::spawn(move || {
                    for _ in 0..CALLS {
                        let (mut plan, result) = call();
                        let gate = admission.enter(node, &mut plan);
                        if gate != Gate::In(node) {
                            // Its plan goes out when room comes, and its result follows.
                            result.recv_timeout(Duration::from_secs(10)).unwrap();
                        }
                        let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        let counted = &by_node[usize::from(node)];
                        let at_node = counted.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now_inside <= bound, "{now_inside} calls out past {bound}");
                        assert!(at_node <= share, "{at_node} calls to a node past {share}");
                        // A call's time out, so that the threads meet at the bounds.
                        std::thread::yield_now();
                        counted.fetch_sub(1, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        match gate {
                            Gate::Parked(node, ticket) => admission.leave(node, ticket),
                            _ => admission.exit(node),
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(admission.out.load(SeqCst), 0);
        assert!(admission.node_out.iter().all(|n| n.load(SeqCst) == 0));
        assert_eq!(admission.lined.load(SeqCst), 0);
        assert!(
            admission.parked_so_far() > 0,
            "four threads past a room's bounds never parked"
        );
    }

    #[test]
    fn ends_past_a_share_racing_with_takes_give_every_count_back() {
        // A node's calls past its share end while other threads take and give back room on
        // the same node and another: every count comes back to zero. An end past the share
        // that gave back room in the lane, or one within it that did not, would leave the
        // lane's count off for good (the first wraps it, and every later call parks).
        let handoff: Handoff = Box::new(|plan| plan.refuse(Error::Closed));
        let admission = Arc::new(Admission::new(4, 2, 2, LONG, handoff, Arc::default()));
        admit(&admission, 0);
        admit(&admission, 0);
        let parked_at = Instant::now();
        for ticket in 0..2_000 {
            let _ = park_at(&admission, 0, ticket);
        }
        assert_eq!(admission.look(parked_at + ANSWERING * 2), None);
        assert_eq!(admission.node_out[0].load(SeqCst), 2_002);
        assert_eq!(admission.out.load(SeqCst), 2);
        let ender = {
            let admission = Arc::clone(&admission);
            std::thread::spawn(move || {
                for ticket in 0..2_000 {
                    admission.leave(0, ticket);
                    std::thread::yield_now();
                }
                admission.exit(0);
                admission.exit(0);
            })
        };
        let takers: Vec<_> = [0, 0, 1]
            .into_iter()
            .map(|node: Node| {
                let admission = Arc::clone(&admission);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let (mut plan, result) = call();
                        match admission.enter(node, &mut plan) {
                            Gate::In(node) => admission.exit(node),
                            Gate::Parked(node, ticket) => {
                                result.recv_timeout(Duration::from_secs(10)).unwrap();
                                admission.leave(node, ticket);
                            }
                            gate => panic!("{gate:?}"),
                        }
                    }
                })
            })
            .collect();
        ender.join().unwrap();
        for taker in takers {
            taker.join().unwrap();
        }
        assert_eq!(admission.out.load(SeqCst), 0);
        assert!(admission.node_out.iter().all(|n| n.load(SeqCst) == 0));
        assert_eq!(admission.lined.load(SeqCst), 0);
    }

    #[test]
    fn threads_past_the_bound_never_exceed_it_and_every_parked_plan_goes_out() {
        threads_in_a_room(2, 2, 1);
    }

    #[test]
    fn threads_past_a_nodes_share_never_exceed_it_and_every_parked_plan_goes_out() {
        // Two threads a node, a share of one: each node's calls park behind its share while
        // the lane (three) has room.
        threads_in_a_room(3, 1, 2);
    }
}
