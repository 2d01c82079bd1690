//! The ops in flight: one slab of submitted plans, each with its caller's waiter and the
//! requests of its current batch, and what ends or advances them.

use std::time::Instant;

use crate::error::Error;
use crate::keys::Key;
use crate::plan::{misuse, Reply, Step};
use crate::request::{Access, Request};
use crate::retry::{next_attempt, NextAttempt};
use crate::value::Value;

use super::ids::{NodeId, OpId, ReqRef};
use super::plans::{Completion, ErasedPlan, Waiters};
use super::tally::{Event, RetryReason};
use super::timers::Timer;
use super::{after, Output, Session, SPARE_REQS, SPARE_REQS_CAPACITY};

/// The ops in progress. A slab rather than a map: ops come and go at the request rate, and a
/// B-tree moved every op (about a hundred bytes) around its nodes on inserts and removals.
pub(super) struct Ops<W: Waiters> {
    /// Each op with its submission number.
    pub(super) table: slab::Slab<(u64, Op<W>)>,
    pub(super) next_seq: u64,
}

impl<W: Waiters> Default for Ops<W> {
    fn default() -> Self {
        Ops {
            table: slab::Slab::new(),
            next_seq: 0,
        }
    }
}

impl<W: Waiters> Ops<W> {
    pub(super) fn insert(&mut self, op: Op<W>) -> OpId {
        self.next_seq += 1;
        let seq = self.next_seq;
        let index = self.table.insert((seq, op));
        OpId { seq, index }
    }

    pub(super) fn get(&self, id: OpId) -> Option<&Op<W>> {
        match self.table.get(id.index) {
            Some((seq, op)) if *seq == id.seq => Some(op),
            _ => None,
        }
    }

    pub(super) fn get_mut(&mut self, id: OpId) -> Option<&mut Op<W>> {
        match self.table.get_mut(id.index) {
            Some((seq, op)) if *seq == id.seq => Some(op),
            _ => None,
        }
    }

    pub(super) fn remove(&mut self, id: OpId) -> Option<Op<W>> {
        self.get_mut(id)?;
        self.table.try_remove(id.index).map(|(_, op)| op)
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Op<W>> {
        self.table.iter().map(|(_, (_, op))| op)
    }

    /// Every op, in submission order; the table is left empty.
    pub(super) fn take_all(&mut self) -> Vec<Op<W>> {
        let mut ops: Vec<(u64, Op<W>)> = std::mem::take(&mut self.table)
            .into_iter()
            .map(|(_, entry)| entry)
            .collect();
        ops.sort_by_key(|&(seq, _)| seq);
        ops.into_iter().map(|(_, op)| op).collect()
    }
}

#[derive(Debug)]
pub(super) struct ReqState {
    pub(super) request: Request,
    pub(super) reply: Option<Reply>,
    /// The current dispatch (see [`ReqRef`]).
    pub(super) attempt: u64,
    pub(super) retries: u32,
    pub(super) redirects: u32,
    pub(super) ask: Option<NodeId>,
    pub(super) pinned: Option<NodeId>,
    pub(super) with_source: bool,
    /// The node it was handed to the driver for, while unanswered (or while the `WAIT`
    /// written after its grant is): a write in this state may have run there.
    pub(super) sent_on: Option<NodeId>,
    /// The request's own value while the `WAIT` written after it is unanswered.
    pub(super) granted: Option<Value>,
    /// The slot map's generation when the request was routed: a write answered after the map
    /// changed is checked against the new owner of its slot.
    pub(super) map_gen: u64,
}

pub(super) struct Op<W: Waiters> {
    /// The plan, boxed with whoever waits for its result (the driver's handle), until it
    /// completes.
    pub(super) plan: Box<dyn ErasedPlan<W>>,
    pub(super) reqs: Vec<ReqState>,
    pub(super) remaining: usize,
    pub(super) deadline: Option<Instant>,
    /// The node of the op's first reply: the host of a later `Route::Node` without one
    /// (`:port`, a master whose endpoint that node's `CLUSTER SLOTS` left unknown).
    pub(super) answered_by: Option<NodeId>,
    /// The session's `now` when the plan was submitted, or when its call began waiting before
    /// the session ([`Submission::waited_since`](super::Submission::waited_since)): its first
    /// batch's request timeout and its summary's time count from it.
    pub(super) submitted: Instant,
    /// Requests handed to a connection so far, every resend counted.
    pub(super) attempts: u32,
    /// A request of the op was written: from then on it goes to its end even if its caller
    /// stops waiting (see [`Waiters::abandoned`]), as a plan cut between its steps could leave
    /// half its work done.
    pub(super) written: bool,
    /// The key whose slot routes the first request routed by slot, kept once its batch is done
    /// with (see [`Op::keep_slot_key`]): the summary's slot, computed only when asked (a single
    /// node never routes by it).
    pub(super) slot_key: Option<Key>,
    /// The node the latest request was handed to.
    pub(super) node: Option<NodeId>,
}

impl ReqState {
    /// A request about to be routed for the first time, as attempt `attempt`.
    pub(super) fn new(request: Request, attempt: u64) -> Self {
        ReqState {
            request,
            reply: None,
            attempt,
            retries: 0,
            redirects: 0,
            ask: None,
            pinned: None,
            with_source: false,
            sent_on: None,
            granted: None,
            map_gen: 0,
        }
    }
}

impl<W: Waiters> Op<W> {
    /// A plan just submitted at `now`, with nothing sent.
    pub(super) fn new(plan: Box<dyn ErasedPlan<W>>, now: Instant) -> Self {
        Op {
            plan,
            reqs: Vec::new(),
            remaining: 0,
            deadline: None,
            answered_by: None,
            submitted: now,
            attempts: 0,
            written: false,
            slot_key: None,
            node: None,
        }
    }

    /// Keeps the slot key of the batch the op is done with, if it has none yet: moved out of
    /// the batch's requests as they go, where a clone at the send cost a reference count (and
    /// its allocation, for a key given by value and never cloned before).
    pub(super) fn keep_slot_key(&mut self) {
        if self.slot_key.is_none() {
            self.slot_key = self.reqs.iter_mut().find_map(|r| r.request.take_slot_key());
        }
    }
}

/// What an op's plan is stepped with.
pub(super) enum Input {
    /// Nothing yet: the plan starts.
    Start,
    /// The replies to its last batch, in order; none after a wait.
    Replies(Vec<Reply>),
    /// The one reply to a last batch of one request, handed over without a vector.
    Reply(Reply),
}

impl<W: Waiters> Session<W> {
    /// Runs an op's plan until it sends, waits or is done.
    pub(super) fn step_op(&mut self, now: Instant, id: OpId, input: Input) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        // The first batch's request timeout counts from the submission, which a driver may
        // date back to when the call began waiting before the session (a caller parked for
        // room); later batches count from their own step.
        let (mut step, from) = match input {
            Input::Start => (op.plan.start(), op.submitted),
            Input::Replies(replies) => (op.plan.resume(replies, op.written), now),
            Input::Reply(reply) => (op.plan.resume_one(reply, op.written), now),
        };
        // A plan that sends empty batches forever would spin here; it gets a bounded number.
        for _ in 0..1024 {
            match step {
                Step::Send(batch) if batch.is_empty() => {
                    step = op.plan.resume(Vec::new(), op.written)
                }
                Step::Send(batch) => {
                    let first = self.next_attempt;
                    self.next_attempt += batch.len() as u64;
                    op.remaining = batch.len();
                    // The requests' states go in a vector a finished plan left (drained by the
                    // plan's previous step, or spare), not a new one per step.
                    if op.reqs.capacity() == 0 {
                        op.reqs = self.spare_reqs.pop().unwrap_or_default();
                    }
                    op.reqs.clear();
                    op.reqs.reserve(batch.len());
                    // A loop, not `extend`: the zipped iterator is larger than the compiler
                    // moves without a call to `memcpy`, and `extend` takes it by value.
                    for (attempt, request) in (first..).zip(batch) {
                        op.reqs.push(ReqState::new(request, attempt));
                    }
                    // A deadline too far to represent is no deadline.
                    op.deadline = after(from, self.config.request_timeout);
                    if let Some(deadline) = op.deadline {
                        self.timers.arm(deadline, Timer::Deadline(id));
                    }
                    for (idx, attempt) in (first..).take(op.reqs.len()).enumerate() {
                        self.to_dispatch.push_back(ReqRef {
                            op: id,
                            idx,
                            attempt,
                        });
                    }
                    return;
                }
                Step::Wait(d) => {
                    if let Some(at) = after(now, d) {
                        self.timers.arm(at, Timer::PlanWait(id));
                    }
                    return;
                }
                Step::Done(_) => {
                    if let Some(op) = self.ops.remove(id) {
                        self.complete(now, op);
                    }
                    return;
                }
            }
        }
        let stuck = misuse("the plan sent 1024 empty batches in a row");
        if let Some(mut op) = self.ops.remove(id) {
            op.plan.fail(stuck);
            self.complete(now, op);
        }
    }

    /// Hands a finished op to the driver, its summary filled in with what the session saw of
    /// it (see [`Summary`](super::Summary)).
    pub(super) fn complete(&mut self, now: Instant, mut op: Op<W>) {
        op.keep_slot_key();
        let mut reqs = op.reqs;
        let reusable = (1..=SPARE_REQS_CAPACITY).contains(&reqs.capacity());
        if reusable && self.spare_reqs.len() < SPARE_REQS {
            reqs.clear();
            self.spare_reqs.push(reqs);
        }
        let mut plan = op.plan;
        let summary = plan.summary_mut();
        summary.attempts = op.attempts;
        summary.slot_key = op.slot_key;
        summary.node = op.node.and_then(|node| self.nodes.shared(node));
        summary.elapsed = now.saturating_duration_since(op.submitted);
        self.outputs.push_back(Output::Complete(Completion(plan)));
    }

    /// The request as dispatched by `r`, while it awaits its reply; `None` for anything stale.
    pub(super) fn req(&self, r: ReqRef) -> Option<&ReqState> {
        self.ops
            .get(r.op)?
            .reqs
            .get(r.idx)
            .filter(|s| s.attempt == r.attempt && s.reply.is_none())
    }

    /// [`Session::req`], to change it.
    pub(super) fn req_mut(&mut self, r: ReqRef) -> Option<&mut ReqState> {
        self.ops
            .get_mut(r.op)?
            .reqs
            .get_mut(r.idx)
            .filter(|s| s.attempt == r.attempt && s.reply.is_none())
    }

    pub(super) fn finish(&mut self, r: ReqRef, reply: Reply) {
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.reply = Some(reply);
        state.sent_on = None;
        let Some(op) = self.ops.get_mut(r.op) else {
            return;
        };
        op.remaining -= 1;
        if op.remaining == 0 {
            self.to_advance.push_back(r.op);
        }
    }

    /// Schedules another attempt after a backoff, or ends the request when attempts run out.
    pub(super) fn retry_later(&mut self, now: Instant, r: ReqRef, cause: Error) {
        let policy = self.config.retry;
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.sent_on = None;
        state.retries = state.retries.saturating_add(1);
        let failed = state.retries;
        let jitter = self.jitter.next_factor();
        match next_attempt(cause.clone(), failed, false, &policy, jitter) {
            NextAttempt::GiveUp(error) => self.finish(r, Err(error)),
            NextAttempt::After(delay) => match after(now, delay) {
                Some(at) => {
                    self.tally.count(Event::Retry(RetryReason::of(&cause)));
                    self.timers.arm(at, Timer::Backoff(r));
                }
                None => self.finish(r, Err(cause)),
            },
        }
    }

    /// Forgets the queued deadlines of batches that have ended (see [`Timers`](super::timers::Timers)).
    pub(super) fn prune_deadlines(&mut self) {
        let ops = &self.ops;
        self.timers.prune_deadlines(ops.len(), |id, at| {
            ops.get(id).is_some_and(|op| op.deadline == Some(at))
        });
    }

    /// Ends every open request of the op's batch with `Timeout`. Their bytes may still be on
    /// a connection; late replies are recognised as stale and dropped.
    pub(super) fn expire(&mut self, id: OpId) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        op.deadline = None;
        let open: Vec<(ReqRef, bool)> = op
            .reqs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.reply.is_none())
            .map(|(idx, s)| {
                let r = ReqRef {
                    op: id,
                    idx,
                    attempt: s.attempt,
                };
                (
                    r,
                    s.sent_on.is_some() && s.request.access() == Access::Write,
                )
            })
            .collect();
        for (r, outcome_unknown) in open {
            self.tally.count(Event::RequestTimeout);
            self.unrouted.retain(|u| *u != r);
            self.finish(r, Err(Error::Timeout { outcome_unknown }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::single;
    use crate::session::Submission;

    /// Waiters named by a number, which delivering hands back.
    struct Numbers;

    impl Waiters for Numbers {
        type Waiter<T: Send + 'static> = u64;
        type Delivered = u64;

        fn deliver<T: Send + 'static>(waiter: u64, _: Result<T, Error>) -> u64 {
            waiter
        }
    }

    fn op(waiter: u64) -> Op<Numbers> {
        let ping = Request::cmd(Access::Read, "PING").build().unwrap();
        let plan = Submission::<Numbers>::new(single("ping", ping, |_| Ok(())), waiter).0;
        Op::new(plan, crate::testing::start())
    }

    fn waiter(op: Op<Numbers>) -> u64 {
        Completion(op.plan).deliver()
    }

    #[test]
    fn an_ended_ops_id_never_finds_a_later_op() {
        let mut ops = Ops::default();
        let first = ops.insert(op(1));
        assert_eq!(ops.remove(first).map(waiter), Some(1));
        // The place is reused; the old id must not find the new op.
        let second = ops.insert(op(2));
        assert_eq!(second.index, first.index);
        assert!(ops.get_mut(first).is_none());
        assert!(ops.remove(first).is_none());
        assert_eq!(ops.len(), 1);
        let third = ops.insert(op(3));
        assert!(first < second && second < third, "ids order by submission");
        let waiters: Vec<u64> = ops.take_all().into_iter().map(waiter).collect();
        assert_eq!(waiters, [2, 3]);
        assert_eq!(ops.len(), 0);
    }
}
