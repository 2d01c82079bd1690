//! Deterministic tests of the session without a network (the `testing` feature).
//!
//! - [`sim`]: the simulated deployment: [`sim::SimCluster`], a pure fake of one Redis node or
//!   a Redis Cluster, speaking RESP2, with slot migration, failover and fault injection; and
//!   [`sim::Harness`], which steps a [`Session`](crate::driver::session::Session) and a
//!   `SimCluster` together on simulated time, as a driver would, and records every
//!   connection's writes. Plans are submitted with a typed [`Ticket`].
//! - [`chaos`]: random inputs and faults, for the property tests and the fuzz targets.
//! - Small plans and requests for tests: [`Batch`], [`Sequence`], [`get`], [`set`], [`incr`],
//!   [`mget`], [`del`].
//!
//! ```
//! use botmesh_redis_core::driver::session::Config;
//! use botmesh_redis_core::testing::sim::{Harness, SimCluster};
//! use botmesh_redis_core::testing::{get, set};
//! use botmesh_redis_core::Value;
//!
//! // The one reading of the real clock: simulated time starts there and never looks again.
//! let start = std::time::Instant::now();
//! let sim = SimCluster::cluster(3, 1);
//! let config = Config::cluster(sim.masters());
//! let mut h = Harness::new(start, sim, config);
//! h.run_batch(vec![set("k", "v")]);
//! assert_eq!(h.run_one(get("k")).ok(), Some(Value::from("v")));
//! ```

pub mod chaos;
#[cfg(feature = "fuzzing")]
pub mod fuzz;
pub mod sim;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::error::Error;
use crate::keys::Key;
use crate::keys::{Keyspace, Layout};
use crate::plan::{Plan, Reply, Step};
use crate::request::{Access, Request};
use crate::session::Waiters;

/// A test's name for a submitted plan: what delivering its result gives back to the
/// simulated driver ([`Tickets`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// A test's waiter for a plan whose output is `T`: its [`Token`], and the slot its result is
/// delivered into. Clones share the slot. A ticket reads only its own plan's type: asking
/// for another does not compile.
///
/// ```compile_fail
/// use botmesh_redis_core::testing::sim::Harness;
/// use botmesh_redis_core::testing::{get, Batch};
///
/// let mut h = Harness::cluster(3, 0);
/// let ticket = h.submit(Batch::new(vec![get("k")]));
/// let wrong: Result<String, _> = h.wait_for(&ticket); // a batch yields Vec<Reply>
/// ```
#[derive(Debug)]
pub struct Ticket<T> {
    token: Token,
    slot: Arc<Slot<T>>,
}

/// What a ticket's clones share.
#[derive(Debug)]
struct Slot<T> {
    result: Mutex<Option<Result<T, Error>>>,
    /// The test stopped waiting ([`Ticket::abandon`]), as a caller whose future is dropped.
    abandoned: AtomicBool,
}

impl<T> Clone for Ticket<T> {
    fn clone(&self) -> Self {
        Ticket {
            token: self.token,
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<T> Ticket<T> {
    /// An empty ticket named `token`.
    pub fn new(token: Token) -> Self {
        Ticket {
            token,
            slot: Arc::new(Slot {
                result: Mutex::new(None),
                abandoned: AtomicBool::new(false),
            }),
        }
    }

    /// Stops waiting for the plan, as a caller that drops its call's future: a plan that has
    /// written nothing yet is then never written ([`Waiters::abandoned`]).
    pub fn abandon(&self) {
        self.slot.abandoned.store(true, Ordering::SeqCst);
    }

    /// The plan's name.
    pub fn token(&self) -> Token {
        self.token
    }

    /// The result, once delivered, taken out (`None` before, or once taken).
    pub fn take(&self) -> Option<Result<T, Error>> {
        self.slot().take()
    }

    /// Whether a result was delivered and not taken yet.
    pub fn is_delivered(&self) -> bool {
        self.slot().is_some()
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Result<T, Error>>> {
        // A test that panicked while holding the slot left a value as good as any.
        self.slot
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The waiters of a simulated driver: a [`Ticket`] per plan, filled when the result is
/// delivered; delivering names the plan by its [`Token`].
#[derive(Debug)]
pub struct Tickets;

impl Waiters for Tickets {
    type Waiter<T: Send + 'static> = Ticket<T>;
    type Delivered = Token;

    fn deliver<T: Send + 'static>(ticket: Ticket<T>, result: Result<T, Error>) -> Token {
        *ticket.slot() = Some(result);
        ticket.token
    }

    fn abandoned<T: Send + 'static>(ticket: &Ticket<T>) -> bool {
        ticket.slot.abandoned.load(Ordering::SeqCst)
    }
}

/// The one reading of the real clock a deterministic test makes: simulated time starts there
/// and never looks again.
#[allow(clippy::disallowed_methods)]
pub fn start() -> Instant {
    Instant::now()
}

/// Ids that break naive key schemes: separators, braces, glob characters, `%`, a space, an
/// emoji and the empty string.
pub const NASTY_IDS: &[&str] = &["a:b", "{x}", "}{", "*?[", "50%", "a b", "😀", ""];

/// The keyspace of `prefix` in each layout, legacy first.
pub fn both_layouts(prefix: &str) -> Result<[(Layout, Keyspace); 2], Error> {
    Ok([
        (Layout::Legacy, Keyspace::new(Layout::Legacy, prefix)?),
        (Layout::Cluster, Keyspace::new(Layout::Cluster, prefix)?),
    ])
}

pub use crate::batch::Batch;

/// A plan that sends batches one after another, each after the previous one's replies, and
/// yields every reply, batch by batch.
#[derive(Debug)]
pub struct Sequence {
    batches: std::collections::VecDeque<Vec<Request>>,
    replies: Vec<Vec<Reply>>,
}

impl Sequence {
    /// The plan of these batches, in order.
    pub fn new(batches: Vec<Vec<Request>>) -> Self {
        Sequence {
            batches: batches.into(),
            replies: Vec::new(),
        }
    }

    fn next(&mut self) -> Step<Vec<Vec<Reply>>> {
        match self.batches.pop_front() {
            Some(batch) => Step::Send(batch.into()),
            None => Step::Done(Ok(std::mem::take(&mut self.replies))),
        }
    }
}

impl Plan for Sequence {
    type Output = Vec<Vec<Reply>>;

    fn operation(&self) -> &'static str {
        "sequence"
    }

    fn start(&mut self) -> Step<Vec<Vec<Reply>>> {
        self.next()
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Vec<Vec<Reply>>> {
        self.replies.push(replies);
        self.next()
    }
}

fn build(result: Result<Request, Error>) -> Request {
    match result {
        Ok(request) => request,
        Err(e) => panic!("a test request could not be built: {e}"),
    }
}

/// `GET key`, a read.
pub fn get(key: &str) -> Request {
    build(
        Request::cmd(Access::Read, "GET")
            .key(Key::new(key.to_owned()))
            .build(),
    )
}

/// `SET key value`, a write.
pub fn set(key: &str, value: &str) -> Request {
    build(
        Request::cmd(Access::Write, "SET")
            .key(Key::new(key.to_owned()))
            .arg(value)
            .build(),
    )
}

/// `INCR key`, a write.
pub fn incr(key: &str) -> Request {
    build(
        Request::cmd(Access::Write, "INCR")
            .key(Key::new(key.to_owned()))
            .build(),
    )
}

/// `DEL keys...`, a write.
///
/// # Panics
///
/// When the keys are in different slots: write such tests with explicit hash tags.
pub fn del(keys: &[&str]) -> Request {
    let mut cmd = Request::cmd(Access::Write, "DEL");
    for key in keys {
        cmd = cmd.key(Key::new((*key).to_owned()));
    }
    build(cmd.build())
}

/// `MGET keys...`, a read.
///
/// # Panics
///
/// When the keys are in different slots.
pub fn mget(keys: &[&str]) -> Request {
    let mut cmd = Request::cmd(Access::Read, "MGET");
    for key in keys {
        cmd = cmd.key(Key::new((*key).to_owned()));
    }
    build(cmd.build())
}
