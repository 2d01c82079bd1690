//! Plans with their output type erased, so that one session runs plans of every type, each
//! boxed with its caller's waiter: the result goes from the plan to the waiter inside the box,
//! where both types are known, so it reaches its caller with its type and no downcast.

use std::any::Any;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::time::Instant;

use crate::error::Error;
use crate::plan::{misuse, Plan, Reply, Step};

use super::tally::Summary;

/// How a driver's callers wait for their plans' results: a family of waiter handles, one type
/// per plan output (a channel's sender in a driver, a ticket in a test).
///
/// The session is generic over the family, never over a plan's output: each plan travels
/// boxed with a [`Waiters::Waiter`] typed by its output, and the driver hands the result over
/// with [`Completion::deliver`] when the session says the plan is done.
pub trait Waiters: Sized + 'static {
    /// The handle of the caller of a plan whose output is `T`.
    type Waiter<T: Send + 'static>: Send + 'static;
    /// What [`Completion::deliver`] gives back to the driver: `()` for a channel, the caller's
    /// name where the driver needs to know who was served.
    type Delivered;

    /// Hands `result` to the caller behind `waiter`.
    fn deliver<T: Send + 'static>(
        waiter: Self::Waiter<T>,
        result: Result<T, Error>,
    ) -> Self::Delivered;

    /// Hands `result` to the caller behind `waiter`, with what became of the plan (for a
    /// caller that records it, as the client's span does). By default the summary is dropped
    /// and [`Waiters::deliver`] is called.
    fn deliver_summarized<T: Send + 'static>(
        waiter: Self::Waiter<T>,
        result: Result<T, Error>,
        summary: Summary,
    ) -> Self::Delivered {
        drop(summary);
        Self::deliver(waiter, result)
    }

    /// Whether the caller behind `waiter` stopped waiting (its future was dropped: a timeout
    /// around the call, a `select!` that took another branch). The session ends such a plan
    /// instead of writing it, as long as it has written nothing yet ([`Error::NotSent`]): a
    /// request held for a connection, a slot map or a backoff while its caller moved on would
    /// otherwise run later, behind what the caller did next. `false` by default (every plan is
    /// written), and for a waiter nobody was meant to hold (a detached plan: a guard's release,
    /// a keeper).
    fn abandoned<T: Send + 'static>(waiter: &Self::Waiter<T>) -> bool {
        let _ = waiter;
        false
    }
}

/// How a plan whose caller stopped waiting before anything of it was written ends
/// ([`Waiters::abandoned`]).
pub(super) fn given_up() -> Error {
    Error::NotSent {
        reason: "its caller stopped waiting before it was written".into(),
    }
}

/// A plan with its caller's waiter, boxed for [`Session::submit_boxed`](super::Session::submit_boxed):
/// a driver that moves plans to its session task boxes each one once, where it is submitted.
pub struct Submission<W: Waiters>(pub(super) Box<dyn ErasedPlan<W>>);

impl<W: Waiters> Submission<W> {
    /// Boxes `plan` with `waiter`, typed by the plan's output.
    pub fn new<P: Plan>(plan: P, waiter: W::Waiter<P::Output>) -> Self {
        let summary = Summary::new(plan.operation());
        Submission(Box::new(Erased {
            plan,
            waiter,
            output: None,
            summary,
            since: None,
            expired: false,
        }))
    }

    /// The call waited from `at` before it reached the session (a driver held it back: a
    /// caller parked for room). Its first batch's request timeout, and the time its summary
    /// reports, count from then, so the wait is part of its deadline: a call ends within the
    /// request timeout, held back or not, and one whose deadline passed on the way is
    /// refused unwritten (`Timeout { outcome_unknown: false }`).
    pub fn waited_since(mut self, at: Instant) -> Self {
        *self.0.since() = Some(at);
        self
    }

    /// The call's deadline passed before it reached the session (a driver held it back: a
    /// caller parked for room past its request timeout): the session ends it unwritten with
    /// `Timeout { outcome_unknown: false }` and counts it as every call, whatever its own
    /// clock says (it may read the clock before the driver did).
    pub fn expired(mut self) -> Self {
        *self.0.expired() = true;
        self
    }

    /// Ends the plan without running it, beside the session: `error` goes to its waiter, and
    /// the session counts nothing of it ([`Submission::expired`] ends a call in the session).
    pub fn refuse(self, error: Error) -> W::Delivered {
        let mut plan = self.0;
        plan.fail(error);
        plan.deliver()
    }
}

/// A finished plan, holding its result and its caller's waiter: the driver calls
/// [`Completion::deliver`]. Completing a plan allocates nothing: this is the submitted box.
pub struct Completion<W: Waiters>(pub(super) Box<dyn ErasedPlan<W>>);

impl<W: Waiters> Completion<W> {
    /// What became of the plan: its operation, outcome, attempts, slot, node and time.
    pub fn summary(&self) -> &Summary {
        self.0.summary()
    }

    /// Hands the plan's result to its waiter ([`Waiters::deliver_summarized`]).
    pub fn deliver(self) -> W::Delivered {
        self.0.deliver()
    }
}

impl<W: Waiters> fmt::Debug for Submission<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Submission(..)")
    }
}

impl<W: Waiters> fmt::Debug for Completion<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Completion(..)")
    }
}

/// A plan with its output type erased and its waiter beside it.
pub(super) trait ErasedPlan<W: Waiters>: Send {
    fn start(&mut self) -> Step<()>;
    /// `written`: a request of the plan was written (a panic then leaves its outcome unknown).
    fn resume(&mut self, replies: Vec<Reply>, written: bool) -> Step<()>;
    fn resume_one(&mut self, reply: Reply, written: bool) -> Step<()>;
    /// Ends the plan with `error` unless it already has a result.
    fn fail(&mut self, error: Error);
    fn summary(&self) -> &Summary;
    /// Whether its caller stopped waiting ([`Waiters::abandoned`]).
    fn abandoned(&self) -> bool;
    /// Where the session writes what it saw of the plan (see `Session::complete`).
    fn summary_mut(&mut self) -> &mut Summary;
    /// Since when its call waited before the session ([`Submission::waited_since`]). Kept in
    /// the box rather than beside it: a submission moves through a driver's channels, and at
    /// two words it moves without a call to `memcpy`.
    fn since(&mut self) -> &mut Option<Instant>;
    /// Whether its deadline passed before the session ([`Submission::expired`]).
    fn expired(&mut self) -> &mut bool;
    fn deliver(self: Box<Self>) -> W::Delivered;
}

struct Erased<P: Plan, W: Waiters> {
    plan: P,
    waiter: W::Waiter<P::Output>,
    output: Option<Result<P::Output, Error>>,
    summary: Summary,
    since: Option<Instant>,
    expired: bool,
}

impl<P: Plan, W: Waiters> Erased<P, W> {
    /// Runs one step of the plan (`began_sending`: a request of it was written). A panic in it
    /// (a bug in the plan, perhaps a plan of the user's) ends this call with
    /// [`Error::PlanPanicked`] instead of unwinding through the
    /// session, which would leave the call's op behind, its caller waiting for good, and the
    /// task it ran on (a caller's, a connection's reader, the session task) gone.
    fn run(
        &mut self,
        began_sending: bool,
        step: impl FnOnce(&mut P) -> Step<P::Output>,
    ) -> Step<()> {
        let plan = &mut self.plan;
        match panic::catch_unwind(AssertUnwindSafe(|| step(plan))) {
            Ok(step) => self.erase(step),
            Err(payload) => {
                let error = Error::PlanPanicked {
                    operation: self.summary.operation,
                    message: panic_message(payload.as_ref()),
                    outcome_unknown: began_sending,
                };
                tracing::error!(%error, "a plan panicked; its call ends with the error");
                self.erase(Step::Done(Err(error)))
            }
        }
    }

    fn erase(&mut self, step: Step<P::Output>) -> Step<()> {
        match step {
            Step::Send(batch) => Step::Send(batch),
            Step::Wait(d) => Step::Wait(d),
            Step::Done(result) => {
                self.summary.outcome = Summary::outcome_of(&result);
                self.output = Some(result);
                Step::Done(Ok(()))
            }
        }
    }
}

impl<P: Plan, W: Waiters> ErasedPlan<W> for Erased<P, W> {
    fn start(&mut self) -> Step<()> {
        self.run(false, P::start)
    }

    fn resume(&mut self, replies: Vec<Reply>, written: bool) -> Step<()> {
        self.run(written, |plan| plan.resume(replies))
    }

    fn resume_one(&mut self, reply: Reply, written: bool) -> Step<()> {
        self.run(written, |plan| plan.resume_one(reply))
    }

    fn fail(&mut self, error: Error) {
        let output = self.output.get_or_insert(Err(error));
        self.summary.outcome = Summary::outcome_of(output);
    }

    fn summary(&self) -> &Summary {
        &self.summary
    }

    fn since(&mut self) -> &mut Option<Instant> {
        &mut self.since
    }

    fn expired(&mut self) -> &mut bool {
        &mut self.expired
    }

    fn abandoned(&self) -> bool {
        W::abandoned(&self.waiter)
    }

    fn summary_mut(&mut self) -> &mut Summary {
        &mut self.summary
    }

    fn deliver(self: Box<Self>) -> W::Delivered {
        let Erased {
            waiter,
            output,
            mut summary,
            ..
        } = *self;
        // The session completes a plan only once it has a result; a plan done without one
        // reads as a misuse rather than a panic.
        let result = output.unwrap_or_else(|| Err(misuse("completed without a result")));
        summary.outcome = Summary::outcome_of(&result);
        W::deliver_summarized(waiter, result, summary)
    }
}

/// A panic's message: the `&str` or `String` of `panic!`, else a stand-in.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|m| (*m).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
