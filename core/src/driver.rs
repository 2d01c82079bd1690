//! The sans-IO machinery under the typed API, for driver authors and for tests of plans.
//!
//! A bot author never needs this module: [`Store`](crate::Store), the coordination types and
//! the driver crates' `Client` cover everything a bot does. A driver author runs a
//! [`session::Session`]: it feeds the session bytes, connection events and timeouts, and carries
//! out its [`session::Output`]s (connect, transmit, close, complete a waiter, wait until). The
//! typed API reaches the session through [`Executor::run`](crate::Executor::run) with a
//! [`Plan`]: one state machine per store operation, emitting batches of requests.
//!
//! These modules follow the crate's version like the rest, but they are the library's inside:
//! expect them to change more often than the typed API above them.
//!
//! - [`session`]: the routing state machine (slot map, connections, ops, retries, timers);
//! - [`plan`]: the plan protocol ([`Plan`], [`Step`], [`Reply`]), and scripted runners;
//! - [`store`] and [`coord`]: the plan of every store and coordination operation, which the
//!   typed API runs; useful to test an operation's requests without a server;
//! - [`request`], [`script`], [`scripts`]: requests with declared keys, and the Lua scripts;
//! - [`topology`], [`retry`], [`framing`], [`value`]: node addresses and `CLUSTER SLOTS`, what a
//!   reply means for routing and the backoff, where a reply ends in a buffer, decoded replies;
//! - [`scan`]: `SCAN` over every master; [`options`]: URL parsing and the resolved options;
//!   [`ttl`]: times to live as Redis takes them.

// The files stay where they were (`src/session/`, `src/plan.rs`, ...): only their place in the
// public paths moved, and the crate root names them again for the crate's own use.
#[path = "coord/mod.rs"]
pub mod coord;
#[path = "framing.rs"]
pub mod framing;
#[path = "options.rs"]
pub mod options;
#[path = "plan.rs"]
pub mod plan;
#[path = "request.rs"]
pub mod request;
#[path = "retry.rs"]
pub mod retry;
#[path = "scan.rs"]
pub mod scan;
#[path = "script.rs"]
pub mod script;
#[path = "scripts.rs"]
pub mod scripts;
#[path = "session/mod.rs"]
pub mod session;
#[path = "store/mod.rs"]
pub mod store;
#[path = "topology.rs"]
pub mod topology;
#[path = "ttl.rs"]
pub mod ttl;
#[path = "value.rs"]
pub mod value;

pub use plan::{Plan, Reply, Step};
