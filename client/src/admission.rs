//! A lane's room on one node: at most its share of [`ONE_NODE_BOUND`] calls out at once, and
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
//!   past it, it leaves the line and its call ends with [`Error::Timeout`], never sent.
//! - The bound holds only while the node answers: with the lane full and no call ended for
//!   [`ANSWERING`], every plan parked goes out, so that a node that stopped answering (or a
//!   plan of the user's that waits without saying so) holds calls in line no longer than it
//!   holds the calls it has.
//!
//! The lane's keeper ([`keep`], one task a lane) applies the last two: it sleeps while nobody
//! is parked and wakes for the front plan's deadline and every [`ANSWERING`] while someone is.
//!
//! A cluster's lane talks to several nodes, one of which may stop while the others answer; a
//! count per lane would hold the healthy nodes' calls behind the stopped one's, so a cluster's
//! calls are not bounded here (a call's node is known only once the session routes it).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use botmesh_redis_core::driver::session::Submission;
use botmesh_redis_core::Error;

use crate::task::OneShot;
use crate::Runtime;

/// How many calls a client lets out to one node at once, shared out over its lanes (64 each of
/// the tokio driver's four on the multi-thread runtime, 86 of its three on one thread).
/// Measured with `bench --stall` on one node (`docs/performance.md`, "One node's room for
/// calls, kept"): after a stall, 256 brought the client back to the offered rate more often
/// than 1,024 or 4,096, and 64 a lane more often than 128 or 256.
pub(crate) const ONE_NODE_BOUND: usize = 256;

/// With the lane full and no call ended for this long, the node is taken for not answering and
/// the bound is lifted. Far above a reply's time on a busy node (under a millisecond), above a
/// stall of the process that the bound is for, far below a request timeout.
pub(crate) const ANSWERING: Duration = Duration::from_millis(100);

/// Where a lane's room hands a parked call's plan when room comes: the lane's inbox.
pub(crate) type Handoff = Box<dyn Fn(Submission<OneShot>) + Send + Sync>;

/// The room of one lane.
///
/// A call that finds nobody in line takes its room with one atomic add and gives it back with
/// one atomic subtraction; the lock is taken only when someone parks or is parked. The line
/// and the count of calls out meet as in Dekker's exclusion: a caller that parks counts
/// itself in line, then looks for room; a call that ends gives its room back, then looks for
/// a line. Both in sequential consistency, so at least one of the two sees the other, and a
/// room freed while a caller parks is never missed.
///
/// A parked call's plan waits in the line, not its caller: whoever frees room (a call that
/// ends, the keeper) hands the plan to the session ([`Handoff`]), and the caller, waiting for
/// its result all along, is woken once, by the result. The clock is read by the callers that
/// park and by the lane's keeper ([`keep`]), never by a call that finds room.
pub(crate) struct Admission {
    bound: usize,
    /// How long a caller stays parked at most: the client's request timeout.
    patience: Duration,
    /// Calls admitted and not yet done with, those granted room while parked included.
    out: AtomicUsize,
    /// Callers in line (`Room::parked`'s length): while it is 0, calls come and go without the
    /// lock.
    lined: AtomicUsize,
    /// The ticket after the last one granted room: a parked caller whose ticket comes before
    /// it, and that did not expire, holds room. Written under the lock.
    granted_below: AtomicU32,
    handoff: Handoff,
    room: Mutex<Room>,
}

struct Room {
    /// The plans of the callers waiting for room, in the order they came (so in the order of
    /// their deadlines). A plan granted room leaves the line then, for the session.
    parked: VecDeque<Parked>,
    /// Callers whose plans were refused at their deadline, until their calls end.
    expired: Vec<Ticket>,
    /// Callers parked so far (each once, however long it waited): the tickets handed out.
    next_ticket: u64,
    /// Calls ended while callers were in line: counted without a clock, under the lock those
    /// ends take anyway. Ends with nobody in line need no count: the quiet rule is about a
    /// line.
    ended: u64,
    /// Since when the lane is full without a call ending, as of `ended` then: whether the
    /// node answers.
    quiet: Option<(Instant, u64)>,
    /// The keeper, waiting for a line.
    keeper: Option<Waker>,
    /// The client closed: the keeper ends.
    closed: bool,
}

struct Parked {
    ticket: Ticket,
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
    /// Parked with this ticket: its plan waits in line, or was handed on (or refused).
    Parked(Ticket),
    /// Admitted: its end makes room.
    In,
    /// Done with (or never counted).
    Out,
}

impl Admission {
    pub(crate) fn new(bound: usize, patience: Duration, handoff: Handoff) -> Self {
        Admission {
            bound,
            patience,
            out: AtomicUsize::new(0),
            lined: AtomicUsize::new(0),
            granted_below: AtomicU32::new(0),
            handoff,
            room: Mutex::new(Room {
                parked: VecDeque::new(),
                expired: Vec::new(),
                next_ticket: 0,
                ended: 0,
                quiet: None,
                keeper: None,
                closed: false,
            }),
        }
    }

    /// How many callers were parked so far.
    pub(crate) fn parked_so_far(&self) -> u64 {
        self.lock().next_ticket
    }

    /// Every critical section only counts and moves plans and wakers (handed on after the
    /// lock is released): a poisoned lock still guards a whole room.
    fn lock(&self) -> MutexGuard<'_, Room> {
        self.room.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks for room for the call whose plan is `submission`: `In` when the caller may submit
    /// it; `Parked` when the plan was taken into the line (the caller then waits for its
    /// result, which comes once room does, or as a timeout at its deadline).
    pub(crate) fn enter(&self, submission: &mut Option<Submission<OneShot>>) -> Gate {
        if self.lined.load(SeqCst) == 0 {
            if self.out.fetch_add(1, SeqCst) < self.bound {
                return Gate::In;
            }
            // Full: the room taken for a moment goes back, and the caller queues.
            self.out.fetch_sub(1, SeqCst);
        }
        let Some(plan) = submission.take() else {
            return Gate::Out;
        };
        let mut room = self.lock();
        let ticket = room.next_ticket as Ticket;
        room.next_ticket += 1;
        let now = Instant::now();
        if room.parked.is_empty() {
            // A line begins: the quiet rule's clock starts.
            room.quiet = Some((now, room.ended));
        }
        room.parked.push_back(Parked {
            ticket,
            until: now.checked_add(self.patience),
            submission: plan,
        });
        self.lined.fetch_add(1, SeqCst);
        // An idle keeper watches the line from now on.
        let keeper = room.keeper.take();
        // Room freed by calls that ended before they could see this caller in line goes to
        // the line's front (this caller, maybe).
        let granted = self.grant(&mut room, self.bound);
        drop(room);
        self.hand_on(granted);
        if let Some(keeper) = keeper {
            keeper.wake();
        }
        Gate::Parked(ticket)
    }

    /// A call admitted is done with (its result taken, or its caller gone): its room goes to
    /// the plans parked next in line.
    pub(crate) fn exit(&self) {
        self.out.fetch_sub(1, SeqCst);
        if self.lined.load(SeqCst) == 0 {
            return;
        }
        let mut room = self.lock();
        room.ended += 1;
        let granted = self.grant(&mut room, self.bound);
        drop(room);
        self.hand_on(granted);
    }

    /// A parked caller is done with (its result taken, or its caller gone): a plan still in
    /// line leaves it; one that was granted room passes the room on. Once per ticket (a call's
    /// gate is `Out` after it).
    pub(crate) fn leave(&self, ticket: Ticket) {
        let mut room = self.lock();
        // Refused tickets first: one may lie before a later grant.
        if let Some(i) = room.expired.iter().position(|&t| t == ticket) {
            room.expired.swap_remove(i);
            return;
        }
        if self.was_granted(ticket) {
            // The usual end of a parked call: its plan ran, and its room goes on.
            drop(room);
            self.exit();
            return;
        }
        // Gone while its plan waits in line (rare: a caller that gave up): a search.
        if let Some(i) = room.parked.iter().position(|p| p.ticket == ticket) {
            room.parked.remove(i);
            self.lined.fetch_sub(1, SeqCst);
        }
    }

    /// Whether the caller parked with `ticket` was granted room (or expired: asked only
    /// after `Room::expired`).
    fn was_granted(&self, ticket: Ticket) -> bool {
        // Tickets wrap: `ticket` comes before `granted_below` when fewer than half the
        // numbers lie between them, far more than a line holds.
        let ahead = self.granted_below.load(SeqCst).wrapping_sub(ticket);
        ahead != 0 && ahead <= Ticket::MAX / 2
    }

    /// Grants room to the plans parked next in line while fewer than `bound` are out; yields
    /// them, for [`Admission::hand_on`]. Calls that find nobody in line may take room
    /// meanwhile: each grant takes its room only if it is still there.
    fn grant(&self, room: &mut Room, bound: usize) -> Vec<Submission<OneShot>> {
        let mut granted = Vec::new();
        while !room.parked.is_empty() {
            let out = self.out.load(SeqCst);
            if out >= bound {
                break;
            }
            if self
                .out
                .compare_exchange(out, out + 1, SeqCst, SeqCst)
                .is_err()
            {
                continue;
            }
            if let Some(parked) = room.parked.pop_front() {
                self.lined.fetch_sub(1, SeqCst);
                self.granted_below
                    .store(parked.ticket.wrapping_add(1), SeqCst);
                granted.push(parked.submission);
            }
        }
        granted
    }

    /// Hands plans granted room to the session, outside the lock.
    fn hand_on(&self, granted: Vec<Submission<OneShot>>) {
        granted.into_iter().for_each(|plan| (self.handoff)(plan));
    }

    /// The keeper's look at the line at `now`: the plans past their deadline leave it and end
    /// as timeouts, never sent; with the lane full and no call ended for [`ANSWERING`], every
    /// plan parked goes to the session. Yields when to look again, or `None` when there is no
    /// line to watch.
    fn look(&self, now: Instant) -> Option<Instant> {
        let mut room = self.lock();
        let mut refused = Vec::new();
        // Deadlines come in the line's order.
        while room
            .parked
            .front()
            .is_some_and(|front| front.until.is_some_and(|until| until <= now))
        {
            if let Some(expired) = room.parked.pop_front() {
                room.expired.push(expired.ticket);
                refused.push(expired.submission);
                self.lined.fetch_sub(1, SeqCst);
            }
        }
        let mut granted = Vec::new();
        if !room.parked.is_empty() && !room.answering(now) {
            // Everyone parked comes in; their calls end the way the node's others do.
            granted = self.grant(&mut room, usize::MAX);
        }
        let next = room.parked.front().map(|front| {
            let quiet = room.quiet.map_or(now, |(since, _)| since) + ANSWERING;
            front.until.map_or(quiet, |until| until.min(quiet))
        });
        drop(room);
        for plan in refused {
            plan.refuse(Error::Timeout {
                outcome_unknown: false,
            });
        }
        self.hand_on(granted);
        next
    }

    /// Waits for a line to watch; `None` once the client closed.
    fn line(&self, cx: &mut Context<'_>) -> Poll<Option<()>> {
        let mut room = self.lock();
        if room.closed {
            return Poll::Ready(None);
        }
        if !room.parked.is_empty() {
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

/// The keeper of a lane's line: sleeps while nobody is parked, and while someone is, wakes at
/// the front plan's deadline and at least every [`ANSWERING`] to look at the line
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
    /// Whether the node answers: yes unless no call ended in the last [`ANSWERING`] of it
    /// being asked.
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use botmesh_redis_core::driver::plan::single;
    use botmesh_redis_core::{Access, Key, Request, Value};

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
        (Admission::new(bound, patience, handoff), handed)
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
        assert_eq!(admission.enter(&mut first), Gate::In);
        (admission, handed)
    }

    /// Parks a call that expects `ticket`; yields where its result comes.
    fn park(admission: &Admission, ticket: Ticket) -> Result {
        let (mut plan, result) = call();
        assert_eq!(admission.enter(&mut plan), Gate::Parked(ticket));
        assert!(plan.is_none(), "a parked plan waits in line");
        result
    }

    #[test]
    fn calls_enter_up_to_the_bound_and_park_beyond_it() {
        let (admission, handed) = room(2, LONG);
        for _ in 0..2 {
            let (mut plan, _) = call();
            assert_eq!(admission.enter(&mut plan), Gate::In);
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
        admission.exit();
        assert_eq!(handed.load(Ordering::SeqCst), 1);
        assert!(matches!(ended(&a_result), Some(Error::Closed)));
        assert!(b_result.try_recv().is_err());
        // A newcomer does not pass the plan still parked.
        park(&admission, 2);
        // The first parked call ends: its room goes to the second.
        admission.leave(0);
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
        admission.leave(0);
        admission.exit();
        assert_eq!(handed.load(Ordering::SeqCst), 1);
        assert!(matches!(ended(&b_result), Some(Error::Closed)));
        // A ticket never handed out changes nothing.
        admission.leave(7);
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
        admission.exit();
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
        for result in [&a_result, &b_result] {
            assert!(matches!(
                ended(result),
                Some(Error::Timeout {
                    outcome_unknown: false
                })
            ));
        }
        assert_eq!(handed.load(Ordering::SeqCst), 0);
        // Their calls end: they held no room, so the call in still holds the only one.
        admission.leave(0);
        admission.leave(1);
        assert!(admission.lock().expired.is_empty());
        assert_eq!(admission.out.load(SeqCst), 1);
        admission.exit();
        assert_eq!(admission.out.load(SeqCst), 0);
    }

    #[test]
    fn a_deadline_too_far_to_represent_is_none() {
        let (admission, handed) = full_room(Duration::MAX);
        let result = park(&admission, 0);
        // A call ends now and then (the node answers), and no deadline comes: the plan
        // waits for room, as a batch with such a timeout waits for its reply.
        admission.exit();
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
    fn threads_past_the_bound_never_exceed_it_and_every_parked_plan_goes_out() {
        const BOUND: usize = 2;
        const THREADS: usize = 4;
        const CALLS: usize = 20_000;
        let (admission, _) = room(BOUND, LONG);
        let admission = Arc::new(admission);
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let admission = Arc::clone(&admission);
                let inside = Arc::clone(&inside);
                std::thread::spawn(move || {
                    for _ in 0..CALLS {
                        let (mut plan, result) = call();
                        let gate = admission.enter(&mut plan);
                        if gate != Gate::In {
                            // Its plan goes out when room comes, and its result follows.
                            result.recv_timeout(Duration::from_secs(10)).unwrap();
                        }
                        let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now_inside <= BOUND, "{now_inside} calls out past {BOUND}");
                        // A call's time out, so that the threads meet at the bound.
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        match gate {
                            Gate::Parked(ticket) => admission.leave(ticket),
                            _ => admission.exit(),
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(admission.out.load(SeqCst), 0);
        assert_eq!(admission.lined.load(SeqCst), 0);
        assert!(
            admission.parked_so_far() > 0,
            "four threads in a room of two never parked"
        );
    }
}
