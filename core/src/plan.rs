//! Plans: one state machine per store operation.
//!
//! A plan emits batches of independent requests and consumes their replies until it yields its
//! result. It never touches a socket or a clock: when it must poll (a turn that is not yet
//! served), it asks for a [`Step::Wait`] and the session's timer resumes it.
//!
//! ```text
//!            start()
//!   ┌──────────────────────┐
//!   ▼                      │
//! Send(batch) ──replies──► resume(replies) ──► Done(result)
//!   ▲                      │
//!   └──── Wait(d) ◄────────┘   (resume(vec![]) after d)
//! ```

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use crate::error::Error;
use crate::one_or_vec::{self, OneOrVec};
use crate::request::Request;
use crate::value::Value;

/// The outcome of one request: its value, or why there is none.
pub type Reply = Result<Value, Error>;

/// What a plan wants next.
#[derive(Debug)]
pub enum Step<T> {
    /// Send these requests, in any order or in parallel, and resume with their replies in the
    /// same order.
    Send(Batch),
    /// Resume with no replies after this long.
    Wait(Duration),
    /// The operation is over.
    Done(Result<T, Error>),
}

/// The requests of one [`Step::Send`]. A batch of one holds its request inline, so that a
/// one-request step (most operations) allocates nothing for it; larger batches are a vector.
/// Built from a request, a vector or an iterator (`request.into()`, `vec![a, b].into()`,
/// `iter.collect()`); read as a slice.
#[derive(Clone, Default)]
pub struct Batch(OneOrVec<Request>);

impl Batch {
    /// An empty batch: a plan resumed at once, with no replies.
    pub fn new() -> Self {
        Batch(OneOrVec::new())
    }

    /// Appends a request.
    pub fn push(&mut self, request: Request) {
        self.0.push(request);
    }

    /// The requests as a vector.
    pub fn into_vec(self) -> Vec<Request> {
        self.0.into_vec()
    }
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Deref for Batch {
    type Target = [Request];

    fn deref(&self) -> &[Request] {
        &self.0
    }
}

impl DerefMut for Batch {
    fn deref_mut(&mut self) -> &mut [Request] {
        &mut self.0
    }
}

impl From<Request> for Batch {
    fn from(request: Request) -> Self {
        Batch(OneOrVec::One(request))
    }
}

impl From<Vec<Request>> for Batch {
    fn from(requests: Vec<Request>) -> Self {
        Batch(OneOrVec::from_vec(requests))
    }
}

impl FromIterator<Request> for Batch {
    fn from_iter<I: IntoIterator<Item = Request>>(iter: I) -> Self {
        Batch(iter.into_iter().collect())
    }
}

impl Extend<Request> for Batch {
    fn extend<I: IntoIterator<Item = Request>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl IntoIterator for Batch {
    type Item = Request;
    type IntoIter = BatchIter;

    fn into_iter(self) -> BatchIter {
        BatchIter(self.0.into_iter())
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = &'a Request;
    type IntoIter = std::slice::Iter<'a, Request>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// The requests of a [`Batch`], by value, in order.
pub struct BatchIter(one_or_vec::IntoIter<Request>);

impl Iterator for BatchIter {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for BatchIter {
    fn next_back(&mut self) -> Option<Request> {
        self.0.next_back()
    }
}

impl ExactSizeIterator for BatchIter {}

impl fmt::Debug for BatchIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.as_slice()).finish()
    }
}

/// One store operation as a state machine. See the module docs.
pub trait Plan: Send + 'static {
    /// What the operation yields.
    type Output: Send + 'static;
    /// The operation's name (`save_message`, `lock_acquire`, `call`, ...): the `operation`
    /// label of the client's metrics and field of its spans (`docs/operations.md`). A static
    /// string, so labelling a request allocates nothing.
    fn operation(&self) -> &'static str;
    /// Whether the plan may take long by design: it waits between steps ([`Step::Wait`]: a
    /// turn polled until served, a keeper's period) or sends a request the server holds back
    /// ([`Request::blocks`]: a `BLPOP`, a `WAIT`). A client lets a bounded number of calls out
    /// to one node at once and parks the calls beyond it until calls end; a plan that says it
    /// may wait is not counted, so that bot tasks waiting for their turns never hold others'
    /// calls back. `false` by default: a plan of yours that waits should say so (one that does
    /// not holds the calls parked behind it until no call has ended for 100 ms, when every
    /// parked call goes out).
    fn may_wait(&self) -> bool {
        false
    }
    /// The hash slot of the plan's first request, when the plan knows it before it starts (a
    /// one-request plan, a batch): a cluster's client counts the call against the share of
    /// its room that the slot's owner may take, as one node's client counts every call in its
    /// node's room. `None` by default: on a cluster the call goes out uncounted (a listing
    /// over many slots, a plan whose first request depends on what it reads).
    fn first_slot(&self) -> Option<u16> {
        None
    }
    /// The first step.
    fn start(&mut self) -> Step<Self::Output>;
    /// The next step, given the replies to the last batch (empty after a wait), in order.
    fn resume(&mut self, replies: Vec<Reply>) -> Step<Self::Output>;
    /// The next step, given the reply to a last batch of one request: [`Plan::resume`] with
    /// that one reply, which a plan may take without the vector (as [`Single`] does, so a
    /// one-request operation allocates none for its reply).
    fn resume_one(&mut self, reply: Reply) -> Step<Self::Output> {
        self.resume(vec![reply])
    }
}

type Decode<T> = Box<dyn FnOnce(Value) -> Result<T, Error> + Send>;

/// A plan of one request whose reply is decoded by a function: most operations are one script
/// call.
pub struct Single<T> {
    operation: &'static str,
    request: Option<Request>,
    decode: Option<Decode<T>>,
}

impl<T> fmt::Debug for Single<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Single")
            .field("operation", &self.operation)
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

/// A one-request plan of the operation named `operation` (see [`Plan::operation`]).
pub fn single<T: Send + 'static>(
    operation: &'static str,
    request: Request,
    decode: impl FnOnce(Value) -> Result<T, Error> + Send + 'static,
) -> Single<T> {
    Single {
        operation,
        request: Some(request),
        decode: Some(Box::new(decode)),
    }
}

impl<T: Send + 'static> Plan for Single<T> {
    type Output = T;

    fn operation(&self) -> &'static str {
        self.operation
    }

    fn may_wait(&self) -> bool {
        self.request.as_ref().is_some_and(Request::blocks)
    }

    fn first_slot(&self) -> Option<u16> {
        self.request.as_ref().and_then(Request::slot)
    }

    fn start(&mut self) -> Step<T> {
        match self.request.take() {
            Some(request) => Step::Send(request.into()),
            None => Step::Done(Err(misuse("Single::start called twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<T> {
        match replies.into_iter().next() {
            Some(reply) => self.resume_one(reply),
            None => Step::Done(Err(misuse("Single::resume without a reply"))),
        }
    }

    fn resume_one(&mut self, reply: Reply) -> Step<T> {
        match self.decode.take() {
            Some(decode) => Step::Done(reply.and_then(decode)),
            None => Step::Done(Err(misuse("Single::resume called twice"))),
        }
    }
}

/// Passes on the step of a sub-plan, or hands back its output when it is done.
// The error is a step, which every plan returns by value: as large here as anywhere, and
// boxing it would put back the allocation a batch of one holds inline to avoid.
#[allow(clippy::result_large_err)]
pub(crate) fn forward<T, O>(step: Step<T>) -> Result<T, Step<O>> {
    match step {
        Step::Done(Ok(output)) => Ok(output),
        Step::Done(Err(e)) => Err(Step::Done(Err(e))),
        Step::Send(batch) => Err(Step::Send(batch)),
        Step::Wait(d) => Err(Step::Wait(d)),
    }
}

/// An error for a plan driven out of order: a bug in a runner, reported instead of a panic.
pub(crate) fn misuse(what: &str) -> Error {
    Error::Misuse {
        detail: what.to_owned(),
    }
}

/// Renders a batch for logs and snapshots, one request per line.
pub fn render_batch(batch: &[Request]) -> String {
    batch.iter().map(|r| format!("  {r}\n")).collect::<String>()
}

/// A deterministic runner that answers a plan's requests from a function, and records what
/// happened: the tool behind the plan snapshots.
#[cfg(any(test, feature = "testing"))]
pub mod scripted {
    use super::*;

    /// The record of one run.
    #[derive(Debug)]
    pub struct Run<T> {
        /// The plan's result.
        pub output: Result<T, Error>,
        /// Every step, rendered: requests with their replies, waits, and the result.
        pub transcript: String,
    }

    /// Runs `plan` to completion, answering each request with `answer`. Gives up with an error
    /// after `max_steps` steps, so a plan that never ends fails a test instead of hanging it.
    pub fn run<P: Plan>(
        mut plan: P,
        max_steps: usize,
        mut answer: impl FnMut(&Request) -> Reply,
    ) -> Run<P::Output>
    where
        P::Output: fmt::Debug,
    {
        let mut transcript = String::new();
        let mut step = plan.start();
        for _ in 0..max_steps {
            match step {
                Step::Send(batch) => {
                    transcript.push_str("send\n");
                    let mut replies = Vec::with_capacity(batch.len());
                    for request in &batch {
                        let reply = answer(request);
                        transcript.push_str(&format!("  {request}\n    -> "));
                        match &reply {
                            Ok(v) => transcript.push_str(&format!("{v:?}\n")),
                            Err(e) => transcript.push_str(&format!("error: {e}\n")),
                        }
                        replies.push(reply);
                    }
                    step = plan.resume(replies);
                }
                Step::Wait(d) => {
                    transcript.push_str(&format!("wait {}ms\n", d.as_millis()));
                    step = plan.resume(Vec::new());
                }
                Step::Done(output) => {
                    match &output {
                        Ok(v) => transcript.push_str(&format!("done {v:?}\n")),
                        Err(e) => transcript.push_str(&format!("done error: {e}\n")),
                    }
                    return Run { output, transcript };
                }
            }
        }
        Run {
            output: Err(misuse("plan did not finish within max_steps")),
            transcript,
        }
    }
}
