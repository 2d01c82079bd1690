//! Plans with their output type erased, so that one session runs plans of every type, and
//! the completion that hands a plan's typed result back to its caller.

use std::any::Any;
use std::fmt;

use crate::error::Error;
use crate::plan::{misuse, Plan, Reply, Step};

/// The result of a plan, typed by the plan's output; see [`Completion::into_result`].
///
/// It is the finished plan itself, holding its result: completing a plan allocates nothing.
pub struct Completion(pub(super) Box<dyn ErasedPlan>);

impl Completion {
    /// The plan's result. `T` is the `Output` of the submitted plan; asking for another type is
    /// a driver bug, reported as an error rather than a panic.
    pub fn into_result<T: 'static>(mut self) -> Result<T, Error> {
        match self.0.output().downcast_mut::<Option<Result<T, Error>>>() {
            Some(output) => output
                .take()
                .unwrap_or_else(|| Err(misuse("completed without a result"))),
            None => Err(misuse(
                "a completion read as another type than its plan's output",
            )),
        }
    }
}

/// A plan boxed for [`Session::submit_boxed`](super::Session::submit_boxed): a driver that moves plans to its session task
/// boxes each one once, where it is submitted.
pub struct BoxedPlan(pub(super) Box<dyn ErasedPlan>);

impl BoxedPlan {
    /// Boxes `plan`; its output type is recovered by [`Completion::into_result`].
    pub fn new<P: Plan>(plan: P) -> Self {
        BoxedPlan(Box::new(Erased { plan, output: None }))
    }
}

impl fmt::Debug for BoxedPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BoxedPlan(..)")
    }
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Completion(..)")
    }
}

/// A plan with its output type erased, so that one session runs plans of every type.
pub(super) trait ErasedPlan: Send {
    fn start(&mut self) -> Step<()>;
    fn resume(&mut self, replies: Vec<Reply>) -> Step<()>;
    fn into_completion(self: Box<Self>) -> Completion;
    /// Ends the plan with `error` unless it already has a result.
    fn fail(self: Box<Self>, error: Error) -> Completion;
    /// The result slot, an `Option<Result<Output, Error>>`.
    fn output(&mut self) -> &mut dyn Any;
}

pub(super) struct Erased<P: Plan> {
    pub(super) plan: P,
    pub(super) output: Option<Result<P::Output, Error>>,
}

impl<P: Plan> Erased<P> {
    pub(super) fn erase(&mut self, step: Step<P::Output>) -> Step<()> {
        match step {
            Step::Send(batch) => Step::Send(batch),
            Step::Wait(d) => Step::Wait(d),
            Step::Done(result) => {
                self.output = Some(result);
                Step::Done(Ok(()))
            }
        }
    }
}

impl<P: Plan> ErasedPlan for Erased<P> {
    fn start(&mut self) -> Step<()> {
        let step = self.plan.start();
        self.erase(step)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<()> {
        let step = self.plan.resume(replies);
        self.erase(step)
    }

    fn into_completion(self: Box<Self>) -> Completion {
        // A plan done without a result reads as a misuse in `into_result`.
        Completion(self)
    }

    fn fail(mut self: Box<Self>, error: Error) -> Completion {
        self.output.get_or_insert(Err(error));
        Completion(self)
    }

    fn output(&mut self) -> &mut dyn Any {
        &mut self.output
    }
}
