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
use std::time::Duration;

use crate::error::Error;
use crate::request::Request;
use crate::value::Value;

/// The outcome of one request: its value, or why there is none.
pub type Reply = Result<Value, Error>;

/// What a plan wants next.
#[derive(Debug)]
pub enum Step<T> {
    /// Send these requests, in any order or in parallel, and resume with their replies in the
    /// same order.
    Send(Vec<Request>),
    /// Resume with no replies after this long.
    Wait(Duration),
    /// The operation is over.
    Done(Result<T, Error>),
}

/// One store operation as a state machine. See the module docs.
pub trait Plan: Send + 'static {
    /// What the operation yields.
    type Output: Send + 'static;
    /// The operation's name (`save_message`, `lock_acquire`, `call`, ...): the `operation`
    /// label of the client's metrics and field of its spans (`docs/operations.md`). A static
    /// string, so labelling a request allocates nothing.
    fn operation(&self) -> &'static str;
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

    fn start(&mut self) -> Step<T> {
        match self.request.take() {
            Some(request) => Step::Send(vec![request]),
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
